#!/bin/bash
# One device call that checks a candidate of the GDP kernels (the working tree) and times it against
# a reference tree in the same call: build both, the candidate's op tests (picked kernels and the
# AB_TEST_ENVS variants), make test-gpu, compute-sanitizer memcheck and racecheck, and only then (no
# timing beside a sanitizer or a build) `gdp bench op` of both trees taken in turn, AB_ROUNDS times,
# at each shape of AB_SHAPES, and once each with GDP_BENCH_PROFILE=1 (per-kernel times). Logs come
# back as $OUT/gpu_ab_logs.tgz (scripts/gpu_logs.sh); a table last (C = candidate, R = reference; ms
# fwd / f+b / saved f+b). A shape may start with environment settings for both trees, e.g.
# AB_SHAPES="--H 16 --n 3;GDP_STATE_NS3=1 --H 16 --n 3".
#
# Before the call, here:  rm -rf .carry/ref_tree && mkdir -p .carry/ref_tree &&
#                         git archive main | tar -x -C .carry/ref_tree
#                         mkdir -p .carry/testdata && cp ../shared/testdata/gdp_vectors.h5 .carry/testdata/
# then run `bash scripts/gpu_ab.sh` with carry [".carry/ref_tree", ".carry/testdata"].
# AB_REF_ENV='VAR=value …' makes R this tree's build under those settings instead (a runtime switch
# such as GDP_BWD_A_GRID=kz): no reference tree, one build. AB_PROFILE lists the profiled shapes
# (';'-separated, default "--H 16 --n 2,3;--H 16 --n 2 --mode split").
# SKIP='name|…' leaves steps out (tests, testgpu, sanitizer, profile, bench).
set -u
export PATH=$PATH:/usr/local/cuda/bin OMP_WAIT_POLICY=passive NCCL_NVLS_ENABLE=0
. "$(dirname "$0")/gpu_logs.sh" gpu_ab
REF=${REF_TREE:-.carry/ref_tree}
ROUNDS=${AB_ROUNDS:-2}
SHAPES=${AB_SHAPES:-"--H 16 --n 1,2,3;--H 16 --n 2 --mode split;--B 2 --T 8192 --n 2;--K 64 --V 64 --n 2;--K 256 --V 256 --n 2"}
TEST_ENVS=${AB_TEST_ENVS:-"GDP_STATE_TMA=0|GDP_STATE_TMA=1|GDP_GENERIC=seq"}
T0=$(date +%s); rows=()
row() { rows+=("$1"); echo "== $1"; }
skip() { [[ -n "${SKIP:-}" && "$1" =~ ^(${SKIP})$ ]]; }
REF_ENV=${AB_REF_ENV:-}
[ -n "$REF_ENV" ] || [ -d "$REF" ] || { echo "no reference tree at $REF (see this script's header)"; exit 2; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader > "$L/gpu.txt" 2>&1
make -j16 all build/tests/gpu/test_gpu_gdp > "$L/build_c.log" 2>&1 || { tail -30 "$L/build_c.log"; exit 1; }
row "build C $(( $(date +%s) - T0 )) s"
if [ -n "$REF_ENV" ]; then
    echo "R is this build under $REF_ENV" > "$L/build_r.log"; ref_build=; REF_GDP=build/gdp
else
    (cd "$REF" && make -j8 build/gdp > "$L/build_r.log" 2>&1; echo "rc=$?" >> "$L/build_r.log") &
    ref_build=$!; REF_GDP=$REF/build/gdp
fi
if ! skip tests; then
    IFS='|' read -r -a envs_list <<< "|$TEST_ENVS"
    for envs in "${envs_list[@]}"; do
        t=$(date +%s)
        env $envs timeout 150 build/tests/gpu/test_gpu_gdp > "$L/test_gdp.log" 2>&1
        r=$?; grep -E "FAIL" "$L/test_gdp.log" | head -8
        row "test_gpu_gdp ${envs:-(picked)} rc=$r $(tail -1 "$L/test_gdp.log" | cut -c1-60) ($(( $(date +%s) - t )) s)"
    done
fi
if ! skip testgpu; then
    t=$(date +%s)
    timeout 300 make -j16 test-gpu > "$L/test-gpu.log" 2>&1
    row "make test-gpu rc=$? $(grep -E 'gpu test programs|checks' "$L/test-gpu.log" | tail -2 | tr '\n' ' ') ($(( $(date +%s) - t )) s)"
fi
if ! skip sanitizer && command -v compute-sanitizer > /dev/null; then
    for tool in memcheck racecheck; do
        t=$(date +%s)
        timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 --print-limit 20 build/tests/gpu/test_gpu_gdp --sanitize > "$L/$tool.log" 2>&1
        row "sanitizer $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$L/$tool.log" | tail -1) ($(( $(date +%s) - t )) s)"
    done
fi
[ -n "$ref_build" ] && wait $ref_build
row "build R: $(tail -1 "$L/build_r.log")"
bench1() { # bench1 LABEL GDP [VAR=value ...] ARGS...: one row per n
    local label=$1 g=$2; shift 2
    local envs=(); while [[ $# -gt 0 && $1 == *=* && $1 != -* ]]; do envs+=("$1"); shift; done
    env "${envs[@]}" timeout 120 "$g" bench op "$@" > "$L/tmp.log" 2>&1 || { row "$label FAILED: $(tail -2 "$L/tmp.log" | tr '\n' ' ')"; return; }
    cat "$L/tmp.log" >> "$L/bench.log"
    while read -r n f _ _ fb _ _ _ _ sv _; do row "$(printf '%-40s n=%s %7s / %7s / %7s' "$label" "$n" "$f" "$fb" "$sv")"; done \
        < <(grep -E '^[0-9]+ ' "$L/tmp.log")
}
if ! skip bench; then
    IFS=';' read -r -a shape_list <<< "$SHAPES"
    for shape in "${shape_list[@]}"; do
        for ((i = 1; i <= ROUNDS; i++)); do
            bench1 "C $shape" build/gdp $shape
            bench1 "R $shape" "$REF_GDP" $REF_ENV $shape
        done
    done
fi
if ! skip profile; then
    IFS=';' read -r -a profile_list <<< "${AB_PROFILE:---H 16 --n 2,3;--H 16 --n 2 --mode split}"
    for tree in C R; do
        g=build/gdp; envs=(); [ $tree = R ] && { g=$REF_GDP; envs=($REF_ENV); }
        : > "$L/profile_$tree.log"
        for shape in "${profile_list[@]}"; do
            env GDP_BENCH_PROFILE=1 "${envs[@]}" timeout 120 $g bench op $shape --iters 20 >> "$L/profile_$tree.log" 2>&1
        done
        grep -E "^-- kernels|gdp profile" "$L/profile_$tree.log" |
            awk '{ if ($1=="--") print "'$tree' " $0; else printf "  %-16s bv %3s %s %s\n", $3, $(NF-4), $(NF-1), $NF }'
    done
fi
echo
cat "$L/gpu.txt"; printf '%s\n' "${rows[@]}"; echo "total $(( $(date +%s) - T0 )) s"
