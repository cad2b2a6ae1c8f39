#!/bin/sh
# shellcheck disable=SC2015 # "A && ok || bad": ok never fails
# The model-level C API (build/libgdpmodel.so) as a program uses it: examples/generate.c prints what
# `gdp generate` prints with the same checkpoint, seed and settings (a byte model and a BPE one), and
# says why it cannot load; then the Python Model class (tests/api_model_check.py) where python3 and
# numpy are present.
CLI_TEST="api"
. tests/cli_lib.sh
EX="$BUILD/examples/generate"

cat core/*.h layers/*.h >"$TMP/text.txt"
expect_exit 0 "checkpoint:" "train a tiny byte model" "$GDP" train --data "$TMP/text.txt" --batch 2 --seq 32 --steps 30 \
    --lr 1e-2 --out "$TMP/a"
# The bytes of file $1 as gdp generate prints them: control bytes other than newline and tab as \xNN
# (the example writes every byte as it is).
as_generate_prints() {
    od -An -v -tx1 "$1" | tr -s ' ' '\n' | LC_ALL=C awk 'NF {
        v = 16 * (index("0123456789abcdef", substr($1, 1, 1)) - 1) + index("0123456789abcdef", substr($1, 2, 1)) - 1
        if (v < 32 && v != 10 && v != 9) printf "\\x%s", $1; else printf "%c", v
    }'
}
same() { # same WHAT CKPT PROMPT TOKENS TEMPERATURE TOP_K TOP_P SEED
    what=$1; shift
    "$EX" "$@" >"$TMP/ex.raw" 2>"$TMP/ex.err"
    as_generate_prints "$TMP/ex.raw" >"$TMP/ex.txt"
    "$GDP" generate --checkpoint "$1" --prompt "$2" --tokens "$3" --temperature "$4" --top-k "$5" --top-p "$6" \
        --seed "$7" >"$TMP/gen.txt" 2>/dev/null
    [ -s "$TMP/gen.txt" ] && cmp -s "$TMP/ex.txt" "$TMP/gen.txt" && ok "$what: example = gdp generate ($(head -c 60 "$TMP/ex.txt" | tr '\n' ' '))" ||
        { bad "$what: example '$(cat "$TMP/ex.txt" "$TMP/ex.err")' vs gdp generate '$(cat "$TMP/gen.txt")'"; }
}
same "greedy" "$TMP/a" "static int" 40 0 0 1 1
same "sampled (top-k, top-p, seed)" "$TMP/a" "static int" 60 0.9 20 0.9 7
same "sampled, defaults" "$TMP/a" "#include" 50 0.8 0 1 1

printf 'The model reads text. The model writes text. Tokens come from merges of bytes.\n%.0s' $(seq 200) >"$TMP/en.txt"
cat "$TMP/text.txt" >>"$TMP/en.txt"
expect_exit 0 "" "prepare BPE shards" "$GDP" prepare -i "$TMP/en.txt" -o "$TMP/bpe" --vocab 512
expect_exit 0 "checkpoint:" "train a tiny BPE model" "$GDP" train --data "$TMP/bpe" --batch 2 --seq 32 --steps 20 \
    --lr 1e-2 --out "$TMP/b"
same "BPE tokenizer from the checkpoint" "$TMP/b" "The model reads" 30 0.7 0 0.95 3

expect_exit 1 "no such file" "the example says why a checkpoint cannot load" "$EX" "$TMP/none.h5" "x"
expect_exit 2 "usage" "the example without a prompt" "$EX" "$TMP/a"

PY=${PYTHON:-python3}
if ! command -v "$PY" >/dev/null 2>&1; then
    echo "skipped: the Python Model class ($PY is missing)"
elif ldd "$BUILD/libgdpmodel.so" 2>/dev/null | grep -q libasan; then
    echo "skipped: the Python Model class (this libgdpmodel.so is built with AddressSanitizer, which python cannot load)"
else
    "$PY" tests/api_model_check.py "$GDP" "$BUILD/libgdpmodel.so" "$TMP/a"
    rc=$?
    [ $rc -eq 3 ] && echo "skipped: the Python Model class ($PY lacks numpy: pip install numpy)"
    [ $rc -ne 0 ] && [ $rc -ne 3 ] && bad "the Python Model class (tests/api_model_check.py)"
fi
exit $fail
