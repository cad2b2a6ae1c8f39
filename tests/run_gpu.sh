#!/bin/sh
# GPU machine only: every CUDA-vs-CPU test binary, then gdp gradcheck --device cuda.
passed=0; failed=0; failed_names=""
for t in "$@"; do
    echo "== $t"
    if "$t"; then passed=$((passed + 1)); else failed=$((failed + 1)); failed_names="$failed_names $t"; fi
done
echo "== gdp gradcheck --device cuda"
if "${BUILD:-build}/gdp" gradcheck --device cuda; then passed=$((passed + 1)); else failed=$((failed + 1)); failed_names="$failed_names gradcheck"; fi
[ -n "$failed_names" ] && echo "failed:$failed_names"
echo "gpu test programs: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
