# shellcheck shell=sh disable=SC2034 # GDP and fail are used by the tests that source this
# Shared by the CLI tests in tests/cli/*.sh, which set CLI_TEST (a short name) and source it. Gives BUILD, GDP, a private $TMP removed on exit, `fail`,
# ok/bad reporters and expect_exit CODE NEEDLE DESCRIPTION cmd... (the exit code must be CODE and
# the output must mention NEEDLE; the output is left in $TMP/out).
BUILD=${BUILD:-build}
GDP="$BUILD/gdp"
# spinning OpenMP threads crawl when the runner's cores are shared; sleeping ones do not
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
TMP=${TMPDIR:-/tmp}/gdp_cli_${CLI_TEST:?set CLI_TEST before sourcing tests/cli_lib.sh}_$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }

expect_exit() { # expect_exit CODE NEEDLE DESCRIPTION cmd...
    code=$1; needle=$2; what=$3; shift 3
    "$@" >"$TMP/out" 2>&1
    rc=$?
    if [ "$rc" -ne "$code" ]; then bad "$what: exit $rc, expected $code"; cat "$TMP/out"
    elif ! grep -q -- "$needle" "$TMP/out"; then bad "$what: output does not mention '$needle'"; cat "$TMP/out"
    else ok "$what"; fi
}
