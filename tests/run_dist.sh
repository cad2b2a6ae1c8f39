#!/bin/sh
# The 2-rank MPI tests (Open MPI): tests/test_dist_mpi.c re-runs itself under
#   mpirun --allow-run-as-root --oversubscribe -np 2 (CK_FORK=no)
# and checks all-reduce, reduce-scatter, all-gather, host scalars, ZeRO-1 == ZeRO-0 updates,
# a checkpoint written under ZeRO-1, gradient buckets during backward == one reduction after it,
# and that dist_abort on one rank ends both. On CPU always;
# again on CUDA through NCCL (one GPU per rank) when this machine has 2 or more GPUs.
BUILD=${BUILD:-build}
${MAKE:-make} --no-print-directory BUILD="$BUILD" "$BUILD/tests/test_dist_mpi" || exit 1
echo "== $BUILD/tests/test_dist_mpi (cpu)"
"$BUILD/tests/test_dist_mpi" || exit 1
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${ngpu:-0}" -ge 2 ]; then
    echo "== $BUILD/tests/test_dist_mpi --cuda (NCCL, $ngpu GPUs visible)"
    "$BUILD/tests/test_dist_mpi" --cuda || exit 1
else
    echo "(fewer than 2 GPUs: the NCCL run of test_dist_mpi is skipped)"
fi
echo "== tests/dist_train.sh"
BUILD="$BUILD" sh tests/dist_train.sh || exit 1
echo "dist tests passed"
