#!/bin/bash
# One device call that checks and measures the Gated DeltaProduct op: build, the op's GPU tests and
# compute-sanitizer (memcheck, racecheck) on a small case, per-kernel times at the bench shape
# (H 16) and the base model's (H 6), the variants that the environment selects (GDP_GENERIC,
# GDP_STATE_NS3, GDP_BV_STATE, GDP_BV_DH, GDP_FUSED_OUTPUT, GDP_BWD_A), base-model training
# tokens/s, gdp next to fla (bench/vs_fla.py, fla from .carry/fla), ncu counters (GDP_NCU=1) and ncu's
# per-instruction stall samples of bwd_a, bwd_b and prep2 (GDP_NCU_SOURCE=1: reports and CSV in $OUT).
# Logs come back as $OUT/gpu_perf_logs.tgz (scripts/gpu_logs.sh); a short table last. SKIP='name|…'
# leaves steps out (build, tests, sanitizer, profile, variants, conv, testgpu, train, vsfla, ncu);
# TRAIN_NH lists the n_h of the training runs, TRAIN_SELECTIVE_ONLY=1 runs only their
# --selective-recompute variant. Carry .carry (fla) and data_cache/gcide for train.
set -u
export PATH=$PATH:/usr/local/cuda/bin OMP_WAIT_POLICY=passive PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
. "$(dirname "$0")/gpu_logs.sh" gpu_perf; PROFILE_EXTRA=${PROFILE_EXTRA:-}
T0=$(date +%s); rows=()
row() { rows+=("$1"); echo "== $1"; }
skip() { [[ -n "${SKIP:-}" && "$1" =~ ^(${SKIP})$ ]]; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader > "$L/gpu.txt" 2>&1
if ! skip build; then
    make -j16 all build/tests/gpu/test_gpu_gdp build/tests/gpu/test_gpu_ops build/tests/gpu/test_gpu_decode build/tests/gpu/test_gpu_train_infra > "$L/build.log" 2>&1 || { tail -30 "$L/build.log"; exit 1; }
    row "build $(( $(date +%s) - T0 )) s"
fi
G=build/gdp
if ! skip tests; then # the op's tests with the picked V tiles, then with each fast kernel width forced
    # (the forward's fast state pass makes o itself at V tile 128, or 64 with one CTA an SM, else
    # k_output runs; GDP_FUSED_OUTPUT=1 fuses the output into the generic state pass where that runs:
    # GDP_GENERIC=seq or all, f32, shapes the fast kernels do not take)
    for envs in "" "GDP_GENERIC=all" "GDP_FUSED_OUTPUT=1 GDP_GENERIC=all" "GDP_BV_DH=128 GDP_BV_STATE=128" "GDP_BV_DH=64 GDP_BV_STATE=64" "GDP_BV_DH=32 GDP_BV_STATE=32" "GDP_BWD_A=tile"; do
        t=$(date +%s)
        env $envs timeout 150 build/tests/gpu/test_gpu_gdp > "$L/test_gdp.log" 2>&1
        r=$?; grep -E "FAIL" "$L/test_gdp.log" | head -8
        row "test_gpu_gdp ${envs:-(picked)} rc=$r $(tail -1 "$L/test_gdp.log" | cut -c1-60) ($(( $(date +%s) - t )) s)"
    done
fi
if ! skip sanitizer && command -v compute-sanitizer > /dev/null; then
    for tool in memcheck racecheck; do
        timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 --print-limit 20 build/tests/gpu/test_gpu_gdp --sanitize > "$L/$tool.log" 2>&1
        row "sanitizer $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$L/$tool.log" | tail -1)"
    done
fi
bench() { # bench LABEL [ENV=..] -- args: one row per n
    local label=$1; shift
    local envs=(); while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
    env "${envs[@]}" timeout 120 $G bench op "$@" > "$L/tmp.log" 2>&1 || { row "$label FAILED: $(tail -2 "$L/tmp.log")"; return; }
    cat "$L/tmp.log" >> "$L/variants.log"
    while read -r n f _ _ fb _ _ _ _ sv _; do row "$(printf '%-30s n=%s fwd %7s f+b %7s saved %7s' "$label" "$n" "$f" "$fb" "$sv")"; done \
        < <(grep -E '^[0-9]+ ' "$L/tmp.log")
}
if ! skip profile; then
    for H in 16 6; do
        GDP_BENCH_PROFILE=1 timeout 120 $G bench op --H $H --n 1,2,3 --iters 20 > "$L/profile_H$H.log" 2>&1
        grep -E "^-- kernels|gdp profile" "$L/profile_H$H.log" | awk '{ if ($1=="--") print "H'$H' " $0; else printf "  %-16s bv %3s %s %s\n", $3, $(NF-4), $(NF-1), $NF }'
    done
fi
if ! skip variants; then
    bench "H16" -- --H 16 --n 1,2,3
    bench "H16 GDP_GENERIC=all" GDP_GENERIC=all -- --H 16 --n 1,2,3
    bench "H16 GENERIC=all FUSED_OUTPUT" GDP_GENERIC=all GDP_FUSED_OUTPUT=1 -- --H 16 --n 1,2,3
    bench "H6" -- --H 6 --n 1,2,3
    bench "T8192 B2" -- --B 2 --T 8192 --n 1,2,3
    bench "K64" -- --K 64 --V 64 --n 1,2,3
    bench "K256" -- --K 256 --V 256 --n 1,2,3
    bench "split r2 H16" -- --H 16 --n 2 --mode split
fi
if ! skip conv; then # the conv (+SiLU) kernels against the CPU path, then their times per channel width
    make -j16 build/tests/gpu/test_gpu_conv > "$L/build_conv.log" 2>&1
    GDP_CONV_BENCH=1 timeout 120 build/tests/gpu/test_gpu_conv > "$L/conv.log" 2>&1
    row "test_gpu_conv rc=$? $(grep -E 'passed' "$L/conv.log" | tail -1 | cut -c1-60)"
    grep -iE "^ *(C|fwd|bwd|[0-9])" "$L/conv.log" | tail -12
fi
if ! skip testgpu; then
    t=$(date +%s)
    timeout 240 make -j16 test-gpu > "$L/test-gpu.log" 2>&1
    row "make test-gpu rc=$? $(grep -E 'gpu test programs|checks' "$L/test-gpu.log" | tail -2 | tr '\n' ' ') ($(( $(date +%s) - t )) s)"
fi
if ! skip train; then
    timeout 60 $G prepare --input data_cache/gcide/gcide.dict.dz --out /tmp/gcide --vocab 4096 > "$L/prepare.log" 2>&1
    for nh in ${TRAIN_NH:-2 3 1}; do
        modes=("" --selective-recompute); [ "${TRAIN_SELECTIVE_ONLY:-0}" = 1 ] && modes=(--selective-recompute)
        for extra in "${modes[@]}"; do
            timeout 60 $G train --preset base --set num_householder=$nh --set vocab_size=32000 --device cuda --data /tmp/gcide \
                --steps 10 --batch 8 --seq 2048 --eval-every 0 --print-every 1 $extra --out /tmp/run_$nh > "$L/train_$nh$extra.log" 2>&1
            row "$(printf 'train base n_h %s %-22s rc=%s %s, %s GiB' "$nh" "$extra" "$?" \
                "$(grep -oE '[0-9]+ tok/s' "$L/train_$nh$extra.log" | tail -1)" \
                "$(grep -oE 'GPU memory in use [0-9.]+' "$L/train_$nh$extra.log" | tail -1 | awk '{print $5}')")"
        done
    done
    timeout 60 $G train --preset base --set num_householder=${PROFILE_NH:-2} --set vocab_size=32000 --device cuda --data /tmp/gcide --steps 4 --batch 8 --seq 2048 $PROFILE_EXTRA \
        --eval-every 0 --quiet --profile --out /tmp/run_prof > "$L/profile_train.log" 2>&1
    sed -n '/profile over/,$p' "$L/profile_train.log" | head -16
fi
if ! skip vsfla; then
    timeout 420 python3 bench/vs_fla.py --shapes "${VSFLA_SHAPES:-issue}" > "$L/vsfla.log" 2>&1
    row "vs_fla rc=$?"
fi
if [ "${GDP_NCU:-0}" = 1 ] && ! skip ncu && command -v ncu > /dev/null; then
    S="--section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats"
    timeout 150 ncu --clock-control none -k regex:"${NCU_KERNELS:-k_state|k_dh}" -c 4 $S \
        $G bench op --H 6 --n 2 --iters 1 --warmup 0 > "$L/ncu.log" 2>&1
    row "ncu rc=$?"
    grep -E "k_state|k_dh|k_bwd|k_prep2|Duration|Registers Per|Achieved Occupancy|Issued Warp|No Eligible|Compute \(SM\)|Memory Throughput" "$L/ncu.log" | head -60
fi
if [ "${GDP_NCU_SOURCE:-0}" = 1 ] && command -v ncu > /dev/null; then # per-instruction stall samples
    # The report (.ncu-rep, for the Nsight Compute GUI) and its SASS source page as gzipped CSV come
    # back in $OUT beside the logs' archive: 7 files for the three kernels, within the 8 that come back.
    for k in ${NCU_SOURCE_KERNELS:-k_bwd_a_fast k_bwd_b_fast k_prep2_fast}; do
        timeout 120 ncu --clock-control none -k regex:$k -c 1 --section SourceCounters --section WarpStateStats \
            --import-source yes --export "$OUT/ncu_$k" -f $G bench op --H 16 --n 2 --iters 1 --warmup 0 > "/tmp/ncu_$k.log" 2>&1
        timeout 60 ncu -i "$OUT/ncu_$k.ncu-rep" --page source --csv --print-source sass > "/tmp/src_$k.csv" 2>&1
        row "ncu source $k rc=$? $(wc -l < "/tmp/src_$k.csv") lines, $(head -3 "/tmp/src_$k.csv" | tail -1 | cut -c1-80)"
        gzip -c "/tmp/src_$k.csv" > "$OUT/src_$k.csv.gz"
    done
fi
echo
[ -f "$L/vsfla.log" ] && tail -16 "$L/vsfla.log"
cat "$L/gpu.txt"; printf '%s\n' "${rows[@]}"; echo "total $(( $(date +%s) - T0 )) s"
