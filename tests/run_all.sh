#!/bin/sh
# Runs every CPU test binary, then the CLI tests in tests/cli/*.sh, and prints one total line.
# OpenMP threads spin by default, which on a 2-core machine shared with the test runner costs up to 5x.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
passed=0; failed=0; failed_names=""
for t in "$@"; do
    echo "== $t"
    if "$t"; then passed=$((passed + 1)); else failed=$((failed + 1)); failed_names="$failed_names $t"; fi
done
for s in tests/cli/*.sh; do
    [ -f "$s" ] || continue
    echo "== $s"
    if BUILD=${BUILD:-build} sh "$s"; then passed=$((passed + 1)); else failed=$((failed + 1)); failed_names="$failed_names $s"; fi
done
[ -n "$failed_names" ] && echo "failed:$failed_names"
echo "test programs: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
