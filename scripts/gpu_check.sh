#!/bin/bash
# One device call for the Gated DeltaProduct CUDA kernels: build, GPU tests, compute-sanitizer
# (memcheck + racecheck on a small case), benchmark; logs under $OUT, a short table last.
# Usage (repository root, GPU machine): scripts/gpu_check.sh [quick]   ("quick": tests only)
# Needs .carry/testdata/gdp_vectors.h5 (or GDP_VECTORS) for the vector cases.
set -u
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/gdp_gpu_check}
mkdir -p "$OUT"
BUILD=${BUILD:-build-dev}
MODE=${1:-full}
T0=$(date +%s)
summary=()
note() { summary+=("$1"); echo "== $1"; }

LOGS=$(mktemp -d)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/build.log" 2>&1

# ---- build: the Makefile first; if someone else's file breaks it, build only what this needs
TEST=$BUILD/tests/gpu/test_gpu_gdp
GDP=$BUILD/gdp
if make BUILD=$BUILD -j16 $GDP $TEST >> "$OUT/build.log" 2>&1; then
    note "build (make): ok ($(( $(date +%s) - T0 )) s)"
else
    note "build (make) FAILED, direct build instead (see build.log)"
    D=$BUILD/direct; mkdir -p $D
    H5C=$(pkg-config --cflags hdf5); H5L=$(pkg-config --libs hdf5)
    CF="-std=c11 -D_GNU_SOURCE -O2 -g -I. -fopenmp -DGDP_CUDA -I/usr/local/cuda/include $H5C"
    {
        nvcc -std=c++17 -O3 -lineinfo -DGDP_CUDA -I. -gencode=arch=compute_90,code=sm_90 -c kernels/gated_deltaproduct.cu -o $D/gdp_cu.o &&
        for f in kernels/gated_deltaproduct_cpu.c kernels/gated_deltaproduct_common.c core/common.c train/vectors_h5.c train/cli.c train/cmd_bench.c; do
            gcc $CF -c $f -o $D/$(basename $f .c).o || exit 1
        done &&
        printf '#include "train/commands.h"\nint main(int c, char **v) { return cmd_bench(c - 1, v + 1); }\n' > $D/bench_main.c &&
        gcc $CF -o $D/test_gpu_gdp tests/gpu/test_gpu_gdp.c $D/gdp_cu.o $D/gated_deltaproduct_cpu.o $D/gated_deltaproduct_common.o $D/common.o $D/vectors_h5.o \
            $H5L -L/usr/local/cuda/lib64 -lcudart -lstdc++ -fopenmp -lm -lz &&
        gcc $CF -o $D/gdp_bench $D/bench_main.c $D/cmd_bench.o $D/cli.o $D/gdp_cu.o $D/gated_deltaproduct_cpu.o $D/gated_deltaproduct_common.o $D/common.o \
            -L/usr/local/cuda/lib64 -lcudart -lstdc++ -fopenmp -lm
    } >> "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; note "direct build FAILED"; printf '%s\n' "${summary[@]}"; exit 1; }
    TEST=$D/test_gpu_gdp
    GDP="$D/gdp_bench"
    note "build (direct): ok ($(( $(date +%s) - T0 )) s)"
fi

# ---- tests
# one process per group, so that a crash in one still lets the others run
rc=0
for grp in stages vectors random deterministic error_paths; do
    T1=$(date +%s)
    timeout 150 $TEST $grp > "$LOGS/test_$grp.log" 2>&1
    r=$?
    [ $r -ne 0 ] && rc=$r
    grep -E "^--|FAIL|passed|error|  " "$LOGS/test_$grp.log" | cut -c1-200 | head -50
    note "test_gpu_gdp $grp: rc=$r, $(tail -1 "$LOGS/test_$grp.log") ($(( $(date +%s) - T1 )) s)"
done
GDP_UNFUSED_OUTPUT=1 timeout 100 $TEST vectors > "$LOGS/test_zunfused.log" 2>&1
r=$?; [ $r -ne 0 ] && rc=$r
note "test_gpu_gdp vectors, unfused output kernel: rc=$r, $(tail -1 "$LOGS/test_zunfused.log")"
cat "$LOGS"/test_*.log > "$OUT/test.log"
[ "$MODE" = quick ] && { printf '%s\n' "${summary[@]}"; exit $rc; }

# ---- bench
T3=$(date +%s)
{
    GDP_BENCH_PROFILE=1 timeout 100 $GDP bench op --n 1,2,3 --iters 20
    timeout 50 $GDP bench op --n 2 --mode split --K 128 --iters 10
} > "$OUT/bench.log" 2>&1
note "bench: rc=$? ($(( $(date +%s) - T3 )) s)"
# ---- compute-sanitizer on the small case
if command -v compute-sanitizer > /dev/null; then
    for tool in memcheck racecheck; do
        T2=$(date +%s)
        timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 --print-limit 50 $TEST --sanitize 2>&1 | head -c 4000000 > "$OUT/$tool.log"
        r=${PIPESTATUS[0]}
        note "sanitizer $tool: rc=$r, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|Hazard' "$OUT/$tool.log" | tail -1) ($(( $(date +%s) - T2 )) s)"
    done
else
    note "compute-sanitizer not found"
fi

# ---- hardware counters for the heaviest kernels (optional: GDP_NCU=1)
if [ "${GDP_NCU:-0}" = 1 ] && command -v ncu > /dev/null; then
    T4=$(date +%s)
    S="--section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis"
    { timeout 120 ncu --clock-control none -k regex:'k_dh|k_bwd_a|k_bwd_b_hh' -c 3 $S $GDP bench op --n 2 --iters 1 --warmup 0
      timeout 60 ncu --clock-control none -k regex:'k_prep2' -c 1 $S $GDP bench op --n 2 --iters 1 --warmup 0; } > "$OUT/ncu.log" 2>&1
    note "ncu: rc=$? ($(( $(date +%s) - T4 )) s)"
fi

echo
cat "$OUT/bench.log"
echo
printf '%s\n' "${summary[@]}"
echo "total $(( $(date +%s) - T0 )) s"
