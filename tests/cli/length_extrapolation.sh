#!/bin/sh
# shellcheck disable=SC2015 # "A && ok || bad": ok never fails
# scripts/length_extrapolation.sh end to end at its SMOKE scale on the CPU (the tiny preset, 6 steps
# in pieces of 3, trained at 64 tokens and evaluated per position to 256): the four runs, the plot
# and the table; the pieces give the losses of one uninterrupted run; a second call finds everything
# done and redoes nothing. Run from the repository root with BUILD set.
CLI_TEST=length_extrapolation
. tests/cli_lib.sh

O=$TMP/le
SMOKE=1 GDP=$GDP sh scripts/length_extrapolation.sh "$O" >"$TMP/run.out" 2>&1 &&
    ok "SMOKE=1 runs end to end" || { bad "SMOKE=1 run"; cat "$TMP/run.out"; }
for r in nh1 nh2 nh3 split_r2; do
    [ "$(grep -c "resumed from" "$O/$r.train.log")" = 1 ] && [ -f "$O/$r/ckpt_00000006.h5" ] &&
        awk -F'\t' 'NR > 1 { n++; if ($1 != 32 * (n - 1) + 1 || $4 <= 0) exit 1 } END { exit !(n == 8 && $2 == 256) }' \
            "$O/$r/positions.tsv" && ok "$r: two pieces, 6 steps, positions 1..256 in 8 buckets with tokens" ||
        { bad "$r"; cat "$O/$r.train.log" "$O/$r/positions.tsv"; }
done
grep -q "^| model | loss at 64 | loss at 128 | loss at 256 | mean over 1..256 |" "$O/table.md" &&
    [ "$(grep -cE '^\| (nh[123]|split_r2) \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$' "$O/table.md")" = 4 ] &&
    ok "table.md: loss at 64, 128, 256 and the mean for the four models" || { bad "table"; cat "$O/table.md"; }
[ -s "$O/loss_by_position.png" ] || grep -q "split_r2" "$O/loss_by_position.svg" 2>/dev/null &&
    ok "one plot of the four curves" || bad "no loss_by_position plot"

# the same run in one piece: the same losses, step for step
SMOKE=1 GDP=$GDP DATA=$O/smoke_data ONLY=nh1 PIECE=6 sh scripts/length_extrapolation.sh "$TMP/whole" >"$TMP/whole.out" 2>&1 &&
    [ "$(cut -f1,2 "$TMP/whole/nh1/log.tsv")" = "$(cut -f1,2 "$O/nh1/log.tsv")" ] &&
    ok "pieces = one uninterrupted run (log.tsv losses)" || { bad "pieces differ"; cat "$TMP/whole.out"; }

SMOKE=1 GDP=$GDP sh scripts/length_extrapolation.sh "$O" >"$TMP/again.out" 2>&1 && ! grep -qE ": (steps [0-9]|eval per position)" "$TMP/again.out" &&
    ok "a second call trains and evaluates nothing again" || { bad "second call"; cat "$TMP/again.out"; }
exit $fail
