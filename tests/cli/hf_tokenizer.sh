#!/bin/sh
# The C tokenizer against Hugging Face's `tokenizers` (tests/hf_tokenizer_check.py: a 1.2 MB corpus
# of varied text, GPT-2 and Llama-3 pre-tokenizers, invalid UTF-8, gdp's own tokenizer.json loaded by
# HF), then `gdp tokenize`'s errors. Run from the repository root with BUILD set (tests/run_all.sh does).
CLI_TEST=hf_tokenizer
. tests/cli_lib.sh

if ! command -v python3 >/dev/null 2>&1; then
    echo "skipped: python3 is missing"
else
    python3 tests/hf_tokenizer_check.py "$GDP" "$TMP"
    rc=$?
    [ $rc -eq 3 ] && echo "skipped: the comparison with Hugging Face (install 'tokenizers': scripts/install_deps.sh)"
    [ $rc -ne 0 ] && [ $rc -ne 3 ] && bad "the comparison with Hugging Face tokenizers"
fi

# a model trained on shards of a tokenizer.json is prompted through it
if [ -s "$TMP/gpt2_tokenizer.json" ]; then
    expect_exit 0 "tokenizer.json" "prepare --tokenizer tokenizer.json" "$GDP" prepare -i "$TMP/corpus.txt" -o "$TMP/hfdata" --tokenizer "$TMP/gpt2_tokenizer.json"
    expect_exit 0 "done" "train on its shards" "$GDP" train --preset tiny --data "$TMP/hfdata" --steps 2 --batch 2 --seq 32 --out "$TMP/hfrun" --checkpoint-every 2
    expect_exit 0 "generated 5 tokens after a" "generate prompts through the tokenizer.json" "$GDP" generate --checkpoint "$TMP/hfrun" --prompt "Hello world, don't" --tokens 5
fi

expect_exit 2 "--tokenizer" "tokenize without a tokenizer" "$GDP" tokenize
printf '{"model": {"type": "Unigram", "vocab": []}}' >"$TMP/uni.json"
expect_exit 1 "Unigram" "a Unigram tokenizer.json is refused by name" sh -c "echo hi | $GDP tokenize -t $TMP/uni.json"
printf '{"model": ' >"$TMP/cut.json"
expect_exit 1 "line 1, column" "a broken tokenizer.json says where" sh -c "echo hi | $GDP tokenize -t $TMP/cut.json"
printf 'hello' >"$TMP/in.txt"
"$GDP" prepare --input "$TMP/in.txt" --out "$TMP/byte" --tokenizer byte --val-fraction 0 >/dev/null 2>&1
expect_exit 1 "below the vocabulary" "--decode of an id past the vocabulary" sh -c "echo 999 | $GDP tokenize -t $TMP/byte --decode"
exit $fail
