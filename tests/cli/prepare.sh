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
expect_exit 0 "vocabulary 256" "byte prepare" "$GDP" prepare -i "$TMP/corpus.txt" -o "$TMP/byte" --tokenizer byte --val-fraction 0 --shard-tokens 50000
n=$(count_train "$TMP/byte")
[ "$n" -eq $(( (size + 49999) / 50000 )) ] && ok "byte: $n shards of 50000" || bad "byte: $n shards"
[ ! -e "$TMP/byte/val_000000.bin" ] && ok "no val shard at fraction 0" || bad "val shard at fraction 0"
expect_exit 0 "bytes/token" "byte re-run" "$GDP" prepare -i "$TMP/corpus.txt" -o "$TMP/byte" --tokenizer byte --val-fraction 0
n=$(count_train "$TMP/byte")
[ "$n" -eq 1 ] && ok "stale shards removed" || bad "$n shards after re-run"
[ "$(word "$TMP/byte/train_000000.bin" 2)" -eq "$size" ] && ok "byte: one token per byte" || bad "byte count"

# two inputs, one given as a plain argument
expect_exit 0 "read '$TMP/corpus.txt.gz'" "two inputs" "$GDP" prepare --input "$TMP/corpus.txt" "$TMP/corpus.txt.gz" --out "$TMP/two" --tokenizer byte --val-fraction 0
[ "$(word "$TMP/two/train_000000.bin" 2)" -eq $((2 * size)) ] && ok "two inputs concatenated" || bad "two inputs count"

# errors
: >"$TMP/empty.txt"
expect_exit 1 "$TMP/missing.txt" "missing input" "$GDP" prepare --input "$TMP/missing.txt" --out "$TMP/x"
expect_exit 1 "empty" "empty input" "$GDP" prepare --input "$TMP/empty.txt" --out "$TMP/x"
head -c 3000 "$TMP/corpus.txt.gz" >"$TMP/cut.gz"
expect_exit 1 "$TMP/cut.gz" "truncated gzip" "$GDP" prepare --input "$TMP/cut.gz" --out "$TMP/x"
expect_exit 1 "not a folder" "out is a file" "$GDP" prepare --input "$TMP/corpus.txt" --out "$TMP/corpus.txt.gz"
expect_exit 2 "--out" "no --out" "$GDP" prepare --input "$TMP/corpus.txt"
expect_exit 2 "--input" "no input" "$GDP" prepare --out "$TMP/x"
expect_exit 2 "unknown --tokenizer" "bad tokenizer" "$GDP" prepare -i "$TMP/corpus.txt" -o "$TMP/x" --tokenizer wordpiece
expect_exit 2 "drop --vocab" "byte with a vocab" "$GDP" prepare -i "$TMP/corpus.txt" -o "$TMP/x" --tokenizer byte --vocab 512
expect_exit 2 "out of range" "vocab too small" "$GDP" prepare -i "$TMP/corpus.txt" -o "$TMP/x" --vocab 100
expect_exit 2 "out of range" "val fraction 1" "$GDP" prepare -i "$TMP/corpus.txt" -o "$TMP/x" --val-fraction 1
exit $fail
