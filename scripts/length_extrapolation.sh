#!/bin/sh
# The language-model length extrapolation study (docs/length_extrapolation.md): four models of the
# `small` preset, Gated DeltaProduct with n_h = 1, 2, 3 (householder) and split mode with r = 2, on
# the same data, tokens, seed and schedule, trained at SEQ = 512 tokens and evaluated per position
# (gdp eval --per-position) on windows of EVAL_SEQ = 8192 tokens of the val split. Each run trains in
# pieces of PIECE steps (--stop-at, then an exact --resume), so a long run survives a machine that is
# taken back: run the script again and it goes on where the last checkpoint left it. A run that has
# its positions.tsv is not evaluated again (delete it to redo).
#
# usage: scripts/length_extrapolation.sh [OUT]      (default runs/length_extrapolation)
# Writes OUT/{nh1,nh2,nh3,split_r2}/ (a gdp train run folder with positions.tsv and eval.txt),
# OUT/loss_by_position.png|svg (the four curves) and OUT/table.md (loss at SEQ, 4 SEQ, 16 SEQ).
#
# env: DATA     a gdp prepare folder, shards or a text file (default: the GCIDE corpus,
#               scripts/prepare_gcide.sh; a bigger corpus is better, see the doc)
#      PRESET   the model preset (default small; tiny for a study on a CPU)
#      SETS     more --set flags for every model, e.g. "--set hidden_size=128" to size a CPU study
#      DEVICE   cuda (default) or cpu          STEPS  optimizer steps (default 4000)
#      BATCH    sequences a step (default 32)  SEQ    training length (default 512)
#      LR       peak learning rate (default 1e-3, cosine)   SEED  (default 1)
#      PIECE    steps a piece (default 1000)   EVAL_SEQ  (default 8192)   EVAL_BATCH (default 4)
#      EVAL_BATCHES  batches evaluated (default 0: the whole val split)   BUCKET (default 64)
#      TABLE_AT the table's positions (default: SEQ, EVAL_SEQ / 4 and EVAL_SEQ: 512 2048 8192)
#      ONLY     a subset of the run names, e.g. "nh1 nh2"
#      GDP      the gdp binary (default build/gdp)
#      SMOKE=1  a check of the whole pipeline in about a minute on a CPU: the tiny preset, 6 steps in
#               pieces of 3, SEQ 64 evaluated to 256, on DATA or a small generated corpus
set -eu
cd "$(dirname "$0")/.."
out=${1:-runs/length_extrapolation}
gdp=${GDP:-build/gdp}
if [ ! -x "$gdp" ]; then
    echo "length_extrapolation: $gdp not found: run 'make' first (or set GDP)" >&2
    exit 1
fi
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
mkdir -p "$out"

if [ "${SMOKE:-0}" = 1 ]; then
    preset=tiny
    : "${DEVICE:=cpu}" "${STEPS:=6}" "${PIECE:=3}" "${BATCH:=4}" "${SEQ:=64}" "${EVAL_SEQ:=256}" "${EVAL_BATCH:=2}"
    : "${EVAL_BATCHES:=2}" "${LR:=2e-3}" "${BUCKET:=32}" "${TABLE_AT:=64 128 256}"
    if [ -z "${DATA:-}" ]; then # paragraphs of words, one document each, prepared once
        DATA=$out/smoke_data
        if [ ! -f "$DATA/prepared" ]; then
            awk 'BEGIN { srand(3); for (d = 0; d < 800; d++) { n = 20 + int(rand() * 300); s = "";
                 for (i = 0; i < n; i++) s = s sprintf("w%d ", int(rand() * 40)); print s; print "" } }' >"$out/smoke.txt"
            "$gdp" prepare --input "$out/smoke.txt" --out "$DATA" --vocab 300 --doc-sep blank >/dev/null
            echo "$gdp prepare --input $out/smoke.txt --out $DATA --vocab 300 --doc-sep blank" >"$DATA/prepared"
        fi
    fi
else
    preset=${PRESET:-small}
    : "${DATA:=$(GDP=$gdp sh scripts/prepare_gcide.sh)}"
fi
device=${DEVICE:-cuda}
steps=${STEPS:-4000}
piece=${PIECE:-1000}
batch=${BATCH:-32}
seq=${SEQ:-512}
lr=${LR:-1e-3}
seed=${SEED:-1}
eval_seq=${EVAL_SEQ:-8192}
eval_batch=${EVAL_BATCH:-4}
eval_batches=${EVAL_BATCHES:-0}
bucket=${BUCKET:-64}
runs=${ONLY:-nh1 nh2 nh3 split_r2}
table_at=${TABLE_AT:-$seq $((eval_seq / 4)) $eval_seq}

# name -> the model's --set flags (everything else from the preset)
model_sets() {
    case $1 in
    nh1) echo "--set mode=householder --set num_householder=1" ;;
    nh2) echo "--set mode=householder --set num_householder=2" ;;
    nh3) echo "--set mode=householder --set num_householder=3" ;;
    split_r2) echo "--set mode=split --set num_householder=2" ;;
    *) echo "length_extrapolation: unknown run '$1' (nh1, nh2, nh3, split_r2)" >&2; exit 1 ;;
    esac
}

# The step of a run folder's newest checkpoint (0 when none), from its `latest`.
done_steps() {
    [ -f "$1/latest" ] || { echo 0; return; }
    sed -n 's/^ckpt_0*\([0-9][0-9]*\)\.h5$/\1/p' "$1/latest" | grep . || echo 0
}

echo "length extrapolation: $preset${SETS:+ ($SETS)}, train $steps steps of $batch x $seq on $device (pieces of $piece), eval to" \
     "$eval_seq, data $DATA, out $out"
for name in $runs; do
    dir=$out/$name
    sets="$(model_sets "$name") ${SETS:-}"
    cur=$(done_steps "$dir")
    while [ "$cur" -lt "$steps" ]; do
        next=$((cur + piece))
        [ "$next" -gt "$steps" ] && next=$steps
        resume=""
        [ "$cur" -gt 0 ] && resume="--resume $dir"
        echo "$name: steps $cur -> $next"
        # shellcheck disable=SC2086 # sets and resume are lists of flags
        "$gdp" train --preset "$preset" $sets --data "$DATA" --device "$device" --steps "$steps" --stop-at "$next" \
            --batch "$batch" --seq "$seq" --lr "$lr" --seed "$seed" --eval-every 0 --checkpoint-every "$piece" \
            --print-every 50 --out "$dir" $resume >>"$dir.train.log" 2>&1 ||
            { echo "length_extrapolation: $name: gdp train failed; the end of $dir.train.log:" >&2
              tail -5 "$dir.train.log" >&2; exit 1; }
        cur=$(done_steps "$dir")
        [ "$cur" -ge "$next" ] || { echo "length_extrapolation: $name: no checkpoint at step $next in $dir" >&2; exit 1; }
    done
    if [ ! -f "$dir/positions.tsv" ]; then
        echo "$name: eval per position to $eval_seq"
        "$gdp" eval --checkpoint "$dir" --data "$DATA" --device "$device" --seq "$eval_seq" --batch "$eval_batch" \
            --batches "$eval_batches" --per-position --bucket "$bucket" --mark "$seq" --out "$dir" >"$dir/eval.txt" 2>&1 ||
            { echo "length_extrapolation: $name: gdp eval failed:" >&2; cat "$dir/eval.txt" >&2; exit 1; }
    fi
done

# shellcheck disable=SC2086 # runs is a list of names
dirs=$(for name in $runs; do printf '%s ' "$out/$name"; done)
# shellcheck disable=SC2086
"$gdp" eval --plot --out "$out/loss_by_position" --mark "$seq" $dirs

# The loss of the bucket that holds position p, from a positions.tsv.
loss_at() { awk -F'\t' -v p="$2" 'NR > 1 && $1 <= p && p <= $2 { print ($3 == "" ? "-" : $3); exit }' "$1"; }
{
    head="| model |" rule="|---|"
    for p in $table_at; do head="$head loss at $p |" rule="$rule---|"; done
    echo "$head mean over 1..$eval_seq |"
    echo "$rule---|"
    for name in $runs; do
        tsv=$out/$name/positions.tsv
        row="| $name |"
        for p in $table_at; do row="$row $(loss_at "$tsv" "$p") |"; done
        echo "$row $(sed -n 's/^loss \([0-9.]*\) .*/\1/p' "$out/$name/eval.txt") |"
    done
    echo
    echo "Each value is the mean loss (nats) of the $bucket-position bucket that holds the position (- where no" \
         "target falls); $preset preset${SETS:+ with $SETS}, $steps steps of $batch x $seq, seed $seed, $device, data $DATA."
} >"$out/table.md"
cat "$out/table.md"
