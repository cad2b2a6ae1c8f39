#!/bin/bash
# Issue #4's numbers in one device call: build, `make test-gpu`, ROUNDS rounds of `gdp bench op`
# (--H 16, n_h 1,2,3 and n_h 2 split) at the default shape, the per-kernel profile, vs_fla at the
# default shape (VSFLA_REPS times), then the issue's other shapes at n_h 2 (SHAPES_OTHER=0 skips
# them: fla's autotuning at K 256 alone takes ~170 s), compute-sanitizer last if time is left.
# Carry .carry/fla (an fla checkout, never committed) and .carry/testdata (the vectors that
# test_gpu_gdp reads). ONLY_H200=1 stops at once on any other card, so that a call meant for H200
# numbers spends no more than the start on an H100; OTHER_CARD=short runs a shorter check there
# instead (LIMIT from H100_LIMIT, default 430; 2 rounds, one vs_fla run, no other shapes), which
# is what a `kind: nvidia-h200` call that lands on an H100 is best spent on. SKIP_BUILD=1,
# SKIP_TESTS=1, SANITIZER=0 and ROUNDS=0 / VSFLA_REPS=0 leave those steps out (a second call on the
# warm machine).
# LIMIT (s) is the call's limit: steps that would not fit are skipped. A table last; the logs come
# back as $OUT/issue4_logs.tgz (scripts/gpu_logs.sh).
set -u
export PATH=$PATH:/usr/local/cuda/bin PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
. "$(dirname "$0")/gpu_logs.sh" issue4
T0=$(date +%s)
card=$(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>&1 | head -1)
echo "card: $card"
if ! echo "$card" | grep -q H200; then
    if [ "${ONLY_H200:-0}" = 1 ]; then echo "not an H200 (ONLY_H200=1): stopping"; exit 3; fi
    if [ "${OTHER_CARD:-full}" = short ]; then
        LIMIT=${H100_LIMIT:-430} ROUNDS=${ROUNDS:-2} VSFLA_REPS=${VSFLA_REPS:-1} SHAPES_OTHER=${SHAPES_OTHER:-0}
        echo "not an H200 (OTHER_CARD=short): LIMIT $LIMIT, $ROUNDS rounds, vs_fla $VSFLA_REPS, other shapes $SHAPES_OTHER"
    fi
fi
LIMIT=${LIMIT:-570}; ROUNDS=${ROUNDS:-3}; VSFLA_REPS=${VSFLA_REPS:-2}
rows=()
row() { rows+=("$1"); echo "== $1"; }
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
G=build/gdp
if [ "${SKIP_BUILD:-0}" != 1 ]; then
    make -j16 all build/tests/gpu/test_gpu_gdp build/tests/gpu/test_gpu_ops > "$L/build.log" 2>&1 || { tail -30 "$L/build.log"; exit 1; }
    row "build $(( $(date +%s) - T0 )) s"
fi
if [ "${SKIP_TESTS:-0}" != 1 ]; then
    t=$(date +%s); timeout 240 make test-gpu > "$L/test-gpu.log" 2>&1; r=$?
    grep -E "FAIL|failed:" "$L/test-gpu.log" | head -10
    row "make test-gpu rc=$r $(tail -1 "$L/test-gpu.log") ($(( $(date +%s) - t )) s)"
fi
for i in $(seq 1 "$ROUNDS"); do
    $G bench op --H 16 --n 1,2,3 > "$L/bench_nh_$i.log" 2>&1
    $G bench op --H 16 --n 2 --mode split > "$L/bench_split_$i.log" 2>&1
    # n fwd ... f+b (column 5) ... saved f+b (column 10)
    for n in 1 2 3; do
        row "round $i n_h $n   $(awk -v n=$n '$1==n && NF>=10 {print "fwd " $2 "  f+b " $5 "  saved " $10}' "$L/bench_nh_$i.log")"
    done
    s=$(awk '$1==2 && NF>=10 {print $10}' "$L/bench_split_$i.log"); h=$(awk '$1==2 && NF>=10 {print $10}' "$L/bench_nh_$i.log")
    row "round $i split 2 $(awk '$1==2 && NF>=10 {print "fwd " $2 "  f+b " $5 "  saved " $10}' "$L/bench_split_$i.log")  split/n2 saved $(awk -v a="$s" -v b="$h" 'BEGIN{ if (b>0) printf "%.3f", a/b }')"
done
GDP_BENCH_PROFILE=1 $G bench op --H 16 --n 1 --iters 20 > "$L/profile_n1.log" 2>&1
GDP_BENCH_PROFILE=1 $G bench op --H 16 --n 2 --iters 20 > "$L/profile_n2.log" 2>&1
GDP_BENCH_PROFILE=1 $G bench op --H 16 --n 2 --mode split --iters 20 > "$L/profile_split.log" 2>&1
for r in $(seq 1 "$VSFLA_REPS"); do
    # the first run compiles and autotunes fla's Triton kernels (n_h 1 alone took 56 s on an H100)
    if [ "$(left)" -lt $(( r == 1 ? 150 : 90 )) ]; then row "vs_fla default $r skipped (time)"; continue; fi
    timeout $(( $(left) - 20 )) python3 bench/vs_fla.py --shapes default > "$L/vsfla_default_$r.log" 2>&1
    row "vs_fla default $r rc=$?"
done
if [ "${SHAPES_OTHER:-1}" = 1 ]; then
    for shape in "2,8192,16,128,128,2" "8,2048,16,64,64,2" "8,2048,16,256,256,2"; do
        if [ "$(left)" -lt 60 ]; then row "vs_fla $shape skipped (time)"; continue; fi
        timeout $(( $(left) - 15 )) python3 bench/vs_fla.py --shapes "$shape" > "$L/vsfla_$shape.log" 2>&1
        row "vs_fla $shape rc=$?"
    done
fi
if [ "${SANITIZER:-1}" = 1 ] && command -v compute-sanitizer > /dev/null; then
    for tool in memcheck racecheck; do
        if [ "$(left)" -lt 60 ]; then row "$tool skipped (time)"; continue; fi
        timeout $(( $(left) - 10 )) compute-sanitizer --tool $tool --error-exitcode 9 --print-limit 20 \
            build/tests/gpu/test_gpu_gdp --sanitize 3,11,12 > "$L/$tool.log" 2>&1
        row "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$L/$tool.log" | tail -1)"
    done
fi
echo; echo "card: $card"
sed -n '/kernels/,$p' "$L/profile_split.log" | head -14
for f in "$L"/vsfla_*.log; do [ -f "$f" ] && { echo "-- $(basename "$f")"; grep -vE "^\s*$|autotun|Warning|warn" "$f" | tail -6; }; done
printf '%s\n' "${rows[@]}"; echo "total $(( $(date +%s) - T0 )) s"
