#!/bin/sh
# shellcheck disable=SC2015 # "A && ok || bad": ok never fails
# gdp prepare as a user runs it: a small text (plain and gzip) to BPE and byte shards, the files it
# writes, and clear errors for a missing file, an empty file and bad flags. Run from the repository
# root with BUILD set (tests/run_all.sh does).
CLI_TEST=prepare
. tests/cli_lib.sh

# number of train shards in a folder
count_train() { c=0; for f in "$1"/train_*.bin; do [ -e "$f" ] && c=$((c + 1)); done; echo $c; }

# header word i (little-endian int32) of a shard
word() { od -A n -t d4 -j $(($2 * 4)) -N 4 "$1" | tr -d ' '; }

# about 200 KB of text: numbered lines of a few sentences
i=0
while [ $i -lt 1500 ]; do
    echo "Line $i: the quick brown fox jumps over the lazy dog; a dictionary defines words, and words define a dictionary."
    i=$((i + 1))
done >"$TMP/corpus.txt"
gzip -c "$TMP/corpus.txt" >"$TMP/corpus.txt.gz"
size=$(wc -c <"$TMP/corpus.txt")

expect_exit 0 "--vocab" "--help" "$GDP" prepare --help
expect_exit 0 "bytes/token" "bpe prepare" "$GDP" prepare --input "$TMP/corpus.txt" --out "$TMP/bpe" --vocab 300 --val-fraction 0.1
for f in tokenizer.bin train_000000.bin val_000000.bin; do
    [ -s "$TMP/bpe/$f" ] && ok "wrote $f" || bad "no $TMP/bpe/$f"
done
[ "$(word "$TMP/bpe/train_000000.bin" 0)" = 20240520 ] && ok "llm.c magic" || bad "magic $(word "$TMP/bpe/train_000000.bin" 0)"
[ "$(word "$TMP/bpe/train_000000.bin" 1)" = 1 ] && ok "version 1 (uint16)" || bad "version $(word "$TMP/bpe/train_000000.bin" 1)"
ntr=$(word "$TMP/bpe/train_000000.bin" 2)
nva=$(word "$TMP/bpe/val_000000.bin" 2)
[ $((1024 + 2 * ntr)) -eq "$(wc -c <"$TMP/bpe/train_000000.bin")" ] && ok "size matches the count" || bad "size vs count $ntr"
[ $((ntr + nva)) -lt $((size / 2)) ] && ok "BPE compresses ($((ntr + nva)) tokens for $size bytes)" || bad "BPE: $((ntr + nva)) tokens for $size bytes"

# gzip input gives the same shards
expect_exit 0 "bytes/token" "gzip prepare" "$GDP" prepare --input "$TMP/corpus.txt.gz" --out "$TMP/bpe_gz" --vocab 300 --val-fraction 0.1
for f in tokenizer.bin train_000000.bin val_000000.bin; do
    cmp -s "$TMP/bpe/$f" "$TMP/bpe_gz/$f" && ok "gzip: same $f" || bad "gzip: $f differs"
done

# byte tokenizer: one token per byte; small shards; a re-run removes the stale ones
expect_exit 0 "vocabulary 257, end of text 256" "byte prepare" "$GDP" prepare -i "$TMP/corpus.txt" -o "$TMP/byte" --tokenizer byte --val-fraction 0 --shard-tokens 50000
n=$(count_train "$TMP/byte")
[ "$n" -eq $(( (size + 49999) / 50000 )) ] && ok "byte: $n shards of 50000" || bad "byte: $n shards"
[ ! -e "$TMP/byte/val_000000.bin" ] && ok "no val shard at fraction 0" || bad "val shard at fraction 0"
expect_exit 0 "bytes/token" "byte re-run" "$GDP" prepare -i "$TMP/corpus.txt" -o "$TMP/byte" --tokenizer byte --val-fraction 0
n=$(count_train "$TMP/byte")
[ "$n" -eq 1 ] && ok "stale shards removed" || bad "$n shards after re-run"
[ "$(word "$TMP/byte/train_000000.bin" 2)" -eq $((size + 1)) ] && ok "byte: one token per byte, then end of text" || bad "byte count"

# two inputs, one given as a plain argument
expect_exit 0 "read '$TMP/corpus.txt.gz'" "two inputs" "$GDP" prepare --input "$TMP/corpus.txt" "$TMP/corpus.txt.gz" --out "$TMP/two" --tokenizer byte --val-fraction 0
[ "$(word "$TMP/two/train_000000.bin" 2)" -eq $((2 * size + 2)) ] && ok "two inputs: two documents, each ended by end of text" || bad "two inputs count"

# documents: --doc-sep (a literal, or blank lines) and --jsonl-field; each ends with end of text (256)
printf 'one\n\ntwo\n \n\nthree' >"$TMP/docs.txt"
expect_exit 0 "in 3 document(s)" "--doc-sep blank" "$GDP" prepare -i "$TMP/docs.txt" -o "$TMP/blank" --tokenizer byte --val-fraction 0 --doc-sep blank
ids=$(od -A n -t u2 -j 1024 -v "$TMP/blank/train_000000.bin" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
[ "$ids" = "111 110 101 10 256 116 119 111 10 256 116 104 114 101 101 256" ] && ok "blank lines end documents" || bad "blank: ids $ids"
printf 'a%%%%b%%%%%%%%c' >"$TMP/sep.txt"
expect_exit 0 "in 3 document(s)" "--doc-sep literal" "$GDP" prepare -i "$TMP/sep.txt" -o "$TMP/sep" --tokenizer byte --val-fraction 0 --doc-sep '%%'
ids=$(od -A n -t u2 -j 1024 -v "$TMP/sep/train_000000.bin" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
[ "$ids" = "97 256 98 256 99 256" ] && ok "a literal separator ends documents" || bad "literal: ids $ids"
printf '{"text": "h\\u00e9", "id": 1}\n\n{"id": 2, "text": "x\\ny"}\n' >"$TMP/docs.jsonl"
expect_exit 0 "in 2 document(s)" "--jsonl-field" "$GDP" prepare -i "$TMP/docs.jsonl" -o "$TMP/jsonl" --tokenizer byte --val-fraction 0 --jsonl-field text
ids=$(od -A n -t u2 -j 1024 -v "$TMP/jsonl/train_000000.bin" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
[ "$ids" = "104 195 169 256 120 10 121 256" ] && ok "JSON Lines records are documents, strings decoded" || bad "jsonl: ids $ids"
printf '{"body": "x"}\n' >"$TMP/nofield.jsonl"
expect_exit 1 "line 1 has no string member \"text\"" "jsonl without the field" "$GDP" prepare -i "$TMP/nofield.jsonl" -o "$TMP/x" --jsonl-field text
printf '{"text": "x"\n' >"$TMP/broken.jsonl"
expect_exit 1 "line 1 is not JSON" "broken JSON Lines" "$GDP" prepare -i "$TMP/broken.jsonl" -o "$TMP/x" --jsonl-field text
i=0; while [ $i -lt 100 ]; do echo "document $i says hello"; echo; i=$((i + 1)); done >"$TMP/many.txt"
expect_exit 0 "whole documents" "many documents: whole ones to val" "$GDP" prepare -i "$TMP/many.txt" -o "$TMP/many" --vocab 300 --doc-sep blank
[ -s "$TMP/many/tokenizer.json" ] && ok "bpe writes tokenizer.json" || bad "no tokenizer.json"
# a given tokenizer file: the shards are the same as with ours, and its copy goes beside them
expect_exit 0 "tokenizer.json" "prepare with a tokenizer.json" "$GDP" prepare -i "$TMP/many.txt" -o "$TMP/given" --tokenizer "$TMP/many/tokenizer.json" --doc-sep blank
[ ! -e "$TMP/given/tokenizer.bin" ] && [ -s "$TMP/given/tokenizer.json" ] && ok "the given tokenizer.json is copied" || bad "tokenizer files of a given tokenizer.json"
cmp -s "$TMP/many/train_000000.bin" "$TMP/given/train_000000.bin" && ok "tokenizer.json = tokenizer.bin shards" || bad "tokenizer.json shards differ"

# errors
: >"$TMP/empty.txt"
expect_exit 1 "$TMP/missing.txt" "missing input" "$GDP" prepare --input "$TMP/missing.txt" --out "$TMP/x"
expect_exit 1 "empty" "empty input" "$GDP" prepare --input "$TMP/empty.txt" --out "$TMP/x"
head -c 3000 "$TMP/corpus.txt.gz" >"$TMP/cut.gz"
expect_exit 1 "$TMP/cut.gz" "truncated gzip" "$GDP" prepare --input "$TMP/cut.gz" --out "$TMP/x"
expect_exit 1 "not a folder" "out is a file" "$GDP" prepare --input "$TMP/corpus.txt" --out "$TMP/corpus.txt.gz"
expect_exit 2 "--out" "no --out" "$GDP" prepare --input "$TMP/corpus.txt"
expect_exit 2 "--input" "no input" "$GDP" prepare --out "$TMP/x"
expect_exit 2 "unknown --tokenizer 'wordpiece'" "bad tokenizer" "$GDP" prepare -i "$TMP/corpus.txt" -o "$TMP/x" --tokenizer wordpiece
expect_exit 2 "drop --vocab" "byte with a vocab" "$GDP" prepare -i "$TMP/corpus.txt" -o "$TMP/x" --tokenizer byte --vocab 512
expect_exit 2 "out of range" "vocab too small" "$GDP" prepare -i "$TMP/corpus.txt" -o "$TMP/x" --vocab 100
expect_exit 2 "out of range" "val fraction 1" "$GDP" prepare -i "$TMP/corpus.txt" -o "$TMP/x" --val-fraction 1
exit $fail
