#!/bin/sh
# shellcheck disable=SC2015 # "A && ok || bad": ok never fails
# Training over document boundaries as a user runs it: a corpus of many documents prepared with
# --doc-sep trains with documents by default (its tokenizer has an end-of-text token), the same as
# --documents on; --documents off and --loss-across-docs off change the losses; a text file has no
# documents, and --documents on there asks for --eot. That a packed batch equals its documents run
# alone is tests/test_documents.c's. Run from the repository root with BUILD set.
CLI_TEST=documents
. tests/cli_lib.sh

# 600 paragraphs of 1 to 12 words, separated by blank lines
awk 'BEGIN { srand(5); for (d = 0; d < 600; d++) { n = 1 + int(rand() * 12); s = "";
     for (i = 0; i < n; i++) s = s sprintf("w%d ", int(rand() * 50)); print s; print "" } }' >"$TMP/docs.txt"
expect_exit 0 "in 600 document(s)" "prepare --doc-sep blank" "$GDP" prepare -i "$TMP/docs.txt" -o "$TMP/data" --vocab 300 --doc-sep blank

RUN="--data $TMP/data --steps 6 --batch 2 --seq 64 --eval-every 3 --eval-batches 2 --seed 4"
# shellcheck disable=SC2086 # RUN is a list of flags
train() { name=$1; shift; "$GDP" train $RUN --out "$TMP/$name" "$@" >"$TMP/$name.out" 2>&1; }
losses() { cut -f1,2,4,6 "$TMP/$1/log.tsv"; }

train default && grep -q "documents: token [0-9]* ends each" "$TMP/default.out" &&
    ok "default: documents on (the tokenizer's end-of-text)" || { bad "default run"; cat "$TMP/default.out"; }
train on --documents on && [ "$(losses on)" = "$(losses default)" ] &&
    ok "--documents on = the default" || bad "--documents on differs from the default"
train off --documents off && ! grep -q "^documents:" "$TMP/off.out" && [ "$(losses off)" != "$(losses on)" ] &&
    ok "--documents off: one sequence a row, other losses" || bad "--documents off"
train strict --loss-across-docs off && grep -q "boundary is ignored" "$TMP/strict.out" &&
    [ "$(losses strict)" != "$(losses on)" ] && ok "--loss-across-docs off" || bad "--loss-across-docs off"

printf 'plain text, no documents\n' >"$TMP/plain.txt"
for i in 1 2 3 4 5 6 7 8; do cat "$TMP/docs.txt"; done >>"$TMP/plain.txt"
expect_exit 1 "give its id with --eot" "text file with --documents on" "$GDP" train --data "$TMP/plain.txt" --steps 1 --documents on
expect_exit 0 "documents: token 10 ends each" "text file with --eot 10 (lines as documents)" "$GDP" train --data "$TMP/plain.txt" --steps 2 --batch 2 --seq 32 --documents on --eot 10
expect_exit 2 "use on or off" "bad --documents" "$GDP" train --data "$TMP/plain.txt" --documents yes
expect_exit 1 "is not a token of the model's vocabulary" "--eot past the vocabulary" "$GDP" train --data "$TMP/data" --steps 1 --eot 5000
exit $fail
