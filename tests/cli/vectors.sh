#!/bin/sh
# gdp vectors on the reference vectors tests/data/gdp_vectors.h5 (CPU f64 and f32), and clear
# errors for a truncated and a non-HDF5 file. Run from the repository root with BUILD set (tests/run_all.sh does).
BUILD=${BUILD:-build}
GDP="$BUILD/gdp"
VEC=${GDP_VECTORS:-tests/data/gdp_vectors.h5}
TMP=${TMPDIR:-/tmp}/gdp_cli_vectors_$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }

if [ ! -f "$VEC" ]; then
    echo "FAIL: reference vectors $VEC not found (set GDP_VECTORS, or rewrite the file with scripts/make_vectors.py)"
    exit 1
fi

for dt in f64 f32; do
    if "$GDP" vectors "$VEC" --dtype "$dt" >"$TMP/out_$dt" 2>&1; then
        if grep -q "0 failed: PASS" "$TMP/out_$dt" && ! grep -q FAIL "$TMP/out_$dt"; then ok "vectors cpu $dt"
        else bad "vectors cpu $dt: exit 0 but no clean summary"; cat "$TMP/out_$dt"; fi
    else
        bad "vectors cpu $dt exited $?"; cat "$TMP/out_$dt"
    fi
done
# one line per case and tensor: 7 cases, dmask only in split mode
n=$(grep -c " PASS$" "$TMP/out_f64")
[ "$n" -ge 59 ] && ok "one line per tensor ($n)" || bad "expected at least 59 tensor lines, got $n"

# a single case
"$GDP" vectors "$VEC" --case split_r4 >"$TMP/one" 2>&1 && grep -q "1 cases" "$TMP/one" && ok "--case" || bad "--case split_r4"

expect_exit() { # expect_exit CODE NEEDLE DESCRIPTION cmd...
    code=$1; needle=$2; what=$3; shift 3
    "$@" >"$TMP/err" 2>&1
    rc=$?
    if [ "$rc" -ne "$code" ]; then bad "$what: exit $rc, expected $code"; cat "$TMP/err"
    elif ! grep -q -- "$needle" "$TMP/err"; then bad "$what: message does not mention '$needle'"; cat "$TMP/err"
    else ok "$what"; fi
}

head -c 100000 "$VEC" >"$TMP/truncated.h5"
expect_exit 1 "$TMP/truncated.h5" "truncated file" "$GDP" vectors "$TMP/truncated.h5"
echo "not an hdf5 file" >"$TMP/text.h5"
expect_exit 1 "$TMP/text.h5" "non-HDF5 file" "$GDP" vectors "$TMP/text.h5"
expect_exit 1 "$TMP/missing.h5" "missing file" "$GDP" vectors "$TMP/missing.h5"
expect_exit 2 "usage" "no file argument" "$GDP" vectors
expect_exit 2 "bf16" "bf16 on the cpu" "$GDP" vectors "$VEC" --dtype bf16
expect_exit 2 "no case named" "unknown case" "$GDP" vectors "$VEC" --case nope
expect_exit 0 "--dtype" "--help" "$GDP" vectors --help
exit $fail
