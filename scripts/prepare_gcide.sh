#!/bin/sh
# The default corpus, ready to train on: fetches GCIDE (scripts/get_gcide.sh) and runs
# `gdp prepare` on it once (BPE, vocabulary 4096), then prints the data folder for `gdp train --data`.
# A finished folder holds a `prepared` file with the command that made it; a later call reuses it.
#
# usage: scripts/prepare_gcide.sh [OUT]     (default: data_cache/gcide_bpe4096)
# env:   GDP (default build/gdp), GCIDE_DIR (default data_cache/gcide), VOCAB (default 4096)
set -eu
out=${1:-data_cache/gcide_bpe4096}
gdp=${GDP:-build/gdp}
vocab=${VOCAB:-4096}
if [ -f "$out/prepared" ]; then
    echo "$out"
    exit 0
fi
if [ ! -x "$gdp" ]; then
    echo "prepare_gcide: $gdp not found: run 'make' first (or set GDP)" >&2
    exit 1
fi
here=$(dirname "$0")
dz=$(sh "$here/get_gcide.sh" "${GCIDE_DIR:-data_cache/gcide}")
"$gdp" prepare --input "$dz" --out "$out" --tokenizer bpe --vocab "$vocab" >&2
echo "$gdp prepare --input $dz --out $out --tokenizer bpe --vocab $vocab" >"$out/prepared"
echo "$out"
