#!/bin/sh
# GPU machine only: every CUDA-vs-CPU test binary, gdp gradcheck --device cuda, and the exported model
# in fla (tests/gpu/fla_export.sh, skipped where torch or fla is missing).
# Without a CUDA build (no test binaries given) or without a visible GPU the tests are skipped.
if [ $# -eq 0 ]; then
    echo "gpu tests skipped: gdp was built without CUDA (no nvcc found, or NO_CUDA=1)"
    exit 0
fi
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "gpu tests skipped: no NVIDIA GPU visible (nvidia-smi -L lists none)"
    exit 0
fi
passed=0; failed=0; failed_names=""
for t in "$@"; do
    echo "== $t"
    if "$t"; then passed=$((passed + 1)); else failed=$((failed + 1)); failed_names="$failed_names $t"; fi
done
echo "== gdp gradcheck --device cuda"
if "${BUILD:-build}/gdp" gradcheck --device cuda; then passed=$((passed + 1)); else failed=$((failed + 1)); failed_names="$failed_names gradcheck"; fi
echo "== tests/gpu/fla_export.sh (the exported model in fla)"
if BUILD=${BUILD:-build} sh tests/gpu/fla_export.sh; then passed=$((passed + 1)); else failed=$((failed + 1)); failed_names="$failed_names fla_export"; fi
[ -n "$failed_names" ] && echo "failed:$failed_names"
echo "gpu test programs: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
