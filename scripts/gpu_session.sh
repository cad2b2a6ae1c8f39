#!/bin/bash
# One device call for everything that needs the GPU machine: build, make test-gpu, the vectors on
# CUDA, a short `small` training run on the GPU (tokens/s), `base` tokens/s at n_h 1/2/3 and its op profile
# (alone on the GPU), with f32 activations and with --recompute, `gdp bench matmul`, then the Python
# checks (fla export, ctypes), compute-sanitizer on the op tests. Logs come back as
# $OUT/gpu_session_logs.tgz (scripts/gpu_logs.sh), a table last.
# SKIP='name|name2' (an extended regex of run names) leaves those steps out.
# Needs in carry: .carry (test vectors, fla) and data_cache/gcide (gcide.dict.dz).
set -u
export PATH=$PATH:/usr/local/cuda/bin OMP_WAIT_POLICY=passive NCCL_NVLS_ENABLE=0
. "$(dirname "$0")/gpu_logs.sh" gpu_session
T0=$(date +%s); rows=()
row() { rows+=("$1"); echo "== $1"; }
run() { # run NAME TIMEOUT cmd...
    local name=$1 to=$2; shift 2; local t=$(date +%s)
    if [[ -n "${SKIP:-}" && "$name" =~ ^(${SKIP})$ ]]; then row "$(printf '%-22s skipped' "$name")"; return 0; fi
    timeout "$to" "$@" > "$L/$name.log" 2>&1; local rc=$?
    local what; what=$(grep -E 'passed|failed|PASS|FAIL|checks' "$L/$name.log" | tail -1 | cut -c1-110)
    if grep -q "tok/s" "$L/$name.log"; then # a training: the last tokens/s and the GPU memory in use
        what="$(grep -oE '[0-9]+ tok/s' "$L/$name.log" | tail -1), $(grep -oE 'GPU memory in use [0-9.]+' "$L/$name.log" | tail -1 | awk '{print $5}') GiB"
    fi
    row "$(printf '%-22s rc=%-3s %4ss  %s' "$name" "$rc" "$(( $(date +%s) - t ))" "$what")"
    return $rc
}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader > "$L/gpu.txt" 2>&1
run build 300 make -j16 all build/tests/gpu/test_gpu_ops build/tests/gpu/test_gpu_gdp build/tests/gpu/test_gpu_train_infra || { tail -30 "$L/build.log"; }
run test-gpu 240 make test-gpu
grep -E "activations|autocast|FAIL|failed" "$L/test-gpu.log" | head -20
run vectors-f32 60 build/gdp vectors .carry/testdata/gdp_vectors.h5 --device cuda --dtype f32
run vectors-bf16 60 build/gdp vectors .carry/testdata/gdp_vectors.h5 --device cuda --dtype bf16
run prepare 60 build/gdp prepare --input data_cache/gcide/gcide.dict.dz --out /tmp/gcide --vocab 4096
run train-small 150 build/gdp train --preset small --device cuda --data /tmp/gcide --steps 300 --stop-at 120 --batch 16 --seq 512 --lr 1e-3 --eval-every 60 --print-every 20 --out "$L/small"
grep -E "^step|done|model:" "$L/train-small.log" | tail -6
run gen-small 30 build/gdp generate --checkpoint "$L/small" --prompt "Water, n. " --tokens 60
# base (the peer's config: vocab 32000, untied) alone on the GPU: nothing else may run beside a timing
for nh in 1 2 3; do
    run train-base-nh$nh 60 build/gdp train --preset base --set num_householder=$nh --set vocab_size=32000 --device cuda \
        --data /tmp/gcide --steps 10 --batch 8 --seq 2048 --eval-every 0 --print-every 1
    grep -E "^step +10/|^memory" "$L/train-base-nh$nh.log"
done
# --selective-recompute: the MLP halves and q/k conv + norm made again in backward (memory vs time)
for nh in 1 2 3; do
    run train-base-selective-nh$nh 60 build/gdp train --preset base --set num_householder=$nh --set vocab_size=32000 \
        --device cuda --data /tmp/gcide --steps 10 --batch 8 --seq 2048 --eval-every 0 --print-every 1 --selective-recompute
    grep -E "^step +10/|^memory" "$L/train-base-selective-nh$nh.log"
done
# f32 activations (bf16 GEMMs on operand copies and the GDP op in bf16 only), for comparison
run train-base-f32acts-nh2 60 build/gdp train --preset base --set vocab_size=32000 --device cuda \
    --data /tmp/gcide --steps 10 --batch 8 --seq 2048 --eval-every 0 --print-every 1 --activations f32
grep -E "^step +10/|^memory" "$L/train-base-f32acts-nh2.log"
# --recompute: memory and tokens/s of the checkpointed blocks
run train-base-recompute 60 build/gdp train --preset base --set vocab_size=32000 --device cuda --data /tmp/gcide \
    --steps 10 --batch 8 --seq 2048 --eval-every 0 --print-every 1 --recompute
grep -E "^step +10/|^memory" "$L/train-base-recompute.log"
run bench-matmul 60 build/gdp bench matmul --iters 10
cat "$L/bench-matmul.log"
run profile-base 60 build/gdp train --preset base --set vocab_size=32000 --device cuda --data /tmp/gcide --steps 4 \
    --batch 8 --seq 2048 --eval-every 0 --quiet --profile
sed -n '/profile over/,$p' "$L/profile-base.log" | head -24
run py-checks 330 sh scripts/gpu_python_checks.sh
run memcheck-ops 150 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/gpu/test_gpu_ops
rm -rf "$L/small"/ckpt_* 2>/dev/null
echo; cat "$L/gpu.txt"; printf '%s\n' "${rows[@]}"; echo "total $(( $(date +%s) - T0 )) s"
