#!/bin/sh
# shellcheck disable=SC2015 # "A && ok || bad": ok never fails
# gdp eval --per-position as a user runs it: a tiny model trained for a few steps at --seq 32 is
# evaluated at 16x that length. The table's buckets cover positions 1..L; the token-weighted mean of
# its losses is eval's loss on the same windows (with documents, also with --loss-across-docs off);
# with documents no position counts past its document (every document here is a few words, so the
# far buckets are empty), without them every bucket holds every window; a plot appears through gnuplot
# or, without it, our SVG; --plot draws several runs in one figure. Run from the repository root with
# BUILD set.
CLI_TEST=per_position
. tests/cli_lib.sh

# 12000 paragraphs of 1 to 8 words, separated by blank lines: documents of at most ~40 tokens
awk 'BEGIN { srand(5); for (d = 0; d < 12000; d++) { n = 1 + int(rand() * 8); s = "";
     for (i = 0; i < n; i++) s = s sprintf("w%d ", int(rand() * 50)); print s; print "" } }' >"$TMP/docs.txt"
expect_exit 0 "document(s)" "prepare --doc-sep blank" "$GDP" prepare -i "$TMP/docs.txt" -o "$TMP/data" --vocab 300 \
    --doc-sep blank
expect_exit 0 "ckpt_00000006" "train a tiny model at --seq 32" "$GDP" train --data "$TMP/data" --steps 6 --batch 4 \
    --seq 32 --eval-every 0 --out "$TMP/run"

expect_exit 2 "out of range" "--bucket 0" "$GDP" eval --checkpoint "$TMP/run" --data "$TMP/data" --per-position --bucket 0
expect_exit 2 "--out goes with --per-position" "--out alone" "$GDP" eval --checkpoint "$TMP/run" --data "$TMP/data" --out "$TMP/x"
expect_exit 2 "needs run folders" "--plot without folders" "$GDP" eval --plot --out "$TMP/x"
expect_exit 2 "use on or off" "bad --documents" "$GDP" eval --checkpoint "$TMP/run" --data "$TMP/data" --documents yes
expect_exit 1 "not a token of the model's vocabulary" "--eot past the vocabulary" "$GDP" eval --checkpoint "$TMP/run" \
    --data "$TMP/data" --eot 5000

L=512
EV="--checkpoint $TMP/run --data $TMP/data --batch 2 --seq $L --batches 3"
loss_of() { sed -n 's/^loss \([0-9.]*\) .*/\1/p' "$1"; }
# check NAME BUCKET [eval flags]: per-position into $TMP/NAME, and plain eval, on the same windows
check() {
    name=$1 bucket=$2; shift 2
    # shellcheck disable=SC2086 # EV is a list of flags
    "$GDP" eval $EV "$@" >"$TMP/$name.plain" 2>&1 &&
        "$GDP" eval $EV "$@" --per-position --bucket "$bucket" --out "$TMP/$name" --mark 32 >"$TMP/$name.pp" 2>&1 ||
        { bad "$name: eval failed"; cat "$TMP/$name.plain" "$TMP/$name.pp"; return 1; }
    awk -F'\t' -v L=$L -v B="$bucket" -v want="$(loss_of "$TMP/$name.plain")" \
        -v shown="$(loss_of "$TMP/$name.pp")" '
        NR == 1 { if ($0 != "start\tend\tloss\ttokens") { print "header: " $0; bad = 1 }; next }
        { if ($1 != next_start || $2 != ($1 + B - 1 < L ? $1 + B - 1 : L)) { print "row " NR ": " $1 "-" $2; bad = 1 }
          next_start = $2 + 1; tokens += $4; if ($4 > 0) nats += $3 * $4 }
        BEGIN { next_start = 1 }
        END { if (next_start != L + 1) { print "buckets end at " next_start - 1; bad = 1 }
              mean = nats / tokens; d = mean - want; if (d < 0) d = -d; e = shown - want; if (e < 0) e = -e
              if (d > 2e-5 * want || e > 2e-5 * want) { print "weighted mean " mean ", shown " shown ", eval " want; bad = 1 }
              exit bad }' "$TMP/$name/positions.tsv" >"$TMP/$name.chk" &&
        ok "$name: buckets of $bucket cover 1..$L, their token-weighted mean = eval's loss ($(loss_of "$TMP/$name.plain"))" ||
        { bad "$name: table"; cat "$TMP/$name.chk" "$TMP/$name/positions.tsv"; return 1; }
}

check docs 16 && grep -q "^documents: token" "$TMP/docs.pp" &&
    awk -F'\t' 'NR > 1 && $1 > 64 && $4 != 0 { exit 1 } NR > 1 && $1 == 1 && $4 == 0 { exit 1 }' "$TMP/docs/positions.tsv" &&
    ok "documents: no position counts past its document (buckets after 64 empty)" ||
    { bad "documents: positions past a document's end"; cat "$TMP/docs/positions.tsv"; }
check strict 16 --loss-across-docs off
check whole 64 --documents off &&
    awk -F'\t' 'NR > 1 && $4 != 6 * 64 { exit 1 }' "$TMP/whole/positions.tsv" &&
    ok "--documents off: every bucket holds every window's positions" ||
    { bad "--documents off: token counts"; cat "$TMP/whole/positions.tsv"; }
check odd 100 --documents off   # a last bucket shorter than the others (501..512)

[ -s "$TMP/docs/positions.png" ] || [ -s "$TMP/docs/positions.svg" ] && ok "a plot beside the table" ||
    bad "no plot in $TMP/docs"
# without gnuplot on the PATH, our own SVG
# shellcheck disable=SC2086 # EV is a list of flags
PATH=/nonexistent "$PWD/$GDP" eval $EV --per-position --out "$TMP/svg" >"$TMP/svg.out" 2>&1 &&
    grep -q "<polyline" "$TMP/svg/positions.svg" && ok "no gnuplot: positions.svg" || { bad "svg fallback"; cat "$TMP/svg.out"; }
expect_exit 0 "plot: $TMP/both" "--plot of two runs" "$GDP" eval --plot --out "$TMP/both" --mark 32 "$TMP/docs" "$TMP/whole"
exit $fail
