#!/bin/sh
# shellcheck disable=SC2015 # "A && ok || bad": ok never fails
# gdp tasks as a user runs it: bad flags exit 2 with a message; a short run writes accuracy.tsv
# (a header and one row per length), result.txt, a plot and a checkpoint and prints the result line;
# --eval-every writes progress.tsv; --plot draws several runs in one figure. Run from the
# repository root with BUILD set (tests/run_all.sh does).
CLI_TEST=tasks
. tests/cli_lib.sh

# ---- bad flags: exit 2 with a message naming the problem
expect_exit 0 "--neg-eigval" "tasks --help" "$GDP" tasks --help
expect_exit 0 "tasks" "gdp --help lists tasks" "$GDP" --help
expect_exit 2 "is required" "no --out" "$GDP" tasks --steps 3
expect_exit 2 "unknown group" "bad --group" "$GDP" tasks --group Q8 --out "$TMP/x"
expect_exit 2 "out of range" "S7 is too big" "$GDP" tasks --group S7 --out "$TMP/x"
expect_exit 2 "out of range" "--neg-eigval 3" "$GDP" tasks --neg-eigval 3 --out "$TMP/x"
expect_exit 2 "householder or split" "bad --mode" "$GDP" tasks --mode diagonal --out "$TMP/x"
expect_exit 2 "learned or identity" "bad --mask" "$GDP" tasks --mode split --mask random --out "$TMP/x"
expect_exit 2 "for split mode" "--mask identity without split" "$GDP" tasks --mask identity --out "$TMP/x"
expect_exit 2 "divide evenly" "split r must divide head_dim" "$GDP" tasks --mode split --n-h 3 --out "$TMP/x"
expect_exit 2 "shorter than" "--test-len below --train-len" "$GDP" tasks --train-len 64 --test-len 32 --out "$TMP/x"
expect_exit 2 "needs --eval-every" "--early-stop alone" "$GDP" tasks --early-stop 0.9 --out "$TMP/x"
expect_exit 2 "unknown model config key" "bad --set" "$GDP" tasks --set hiden_size=3 --out "$TMP/x"
expect_exit 2 "use off or bf16" "bad --autocast" "$GDP" tasks --autocast fp16 --out "$TMP/x"
expect_exit 2 "needs --device cuda" "--autocast bf16 on the cpu" "$GDP" tasks --autocast bf16 --device cpu --out "$TMP/x"

# ---- a short run of a tiny model
TINY="--hidden 32 --heads 2 --head-dim 16 --set intermediate_size=64"
R="$TMP/run"
# shellcheck disable=SC2086
expect_exit 0 "result: Z2 householder n_h=1 beta(0,2)" "tasks parity, 6 steps" "$GDP" tasks --group parity --n-h 1 \
    $TINY --train-len 16 --test-len 40 --test-seqs 8 --steps 6 --batch 4 --eval-every 3 --eval-seqs 4 --out "$R"
grep -q "acc@16" "$TMP/out" && grep -q "acc@40" "$TMP/out" && ok "result line names both lengths" || bad "result line"
[ "$(wc -l <"$R/accuracy.tsv")" -eq 41 ] && head -1 "$R/accuracy.tsv" | grep -q "^length	accuracy" &&
    ok "accuracy.tsv has a header and 40 rows" || bad "accuracy.tsv: $(head -2 "$R/accuracy.tsv")"
{ [ -s "$R/accuracy.png" ] || [ -s "$R/accuracy.svg" ]; } && ok "accuracy plot" || bad "no accuracy plot in $R"
[ "$(wc -l <"$R/progress.tsv")" -eq 3 ] && ok "progress.tsv has 2 checks" || bad "progress.tsv: $(cat "$R/progress.tsv")"
grep -q "^acc_test_len	" "$R/result.txt" && grep -q "^steps	6" "$R/result.txt" && ok "result.txt" ||
    bad "result.txt: $(cat "$R/result.txt")"
[ -s "$R/latest" ] && grep -q "num_labels = 2" "$R/config.txt" && ok "checkpoint and config" || bad "checkpoint: $(ls "$R")"
# shellcheck disable=SC2086
expect_exit 0 "result: S3 split r=2 learned mask" "tasks S3 split" "$GDP" tasks --group S3 --mode split --n-h 2 $TINY \
    --train-len 8 --test-len 12 --test-seqs 4 --steps 2 --batch 2 --out "$TMP/run2"
# shellcheck disable=SC2086
expect_exit 0 "result: S3 householder n_h=2 beta(0,2) BOS" "tasks S3 after a BOS token" "$GDP" tasks --group S3 $TINY \
    --bos --train-len 8 --test-len 12 --test-seqs 4 --steps 2 --batch 2 --out "$TMP/run3"
[ "$(wc -l <"$TMP/run3/accuracy.tsv")" -eq 13 ] && grep -q "vocab_size = 7" "$TMP/run3/config.txt" &&
    grep -q "^bos	1" "$TMP/run3/result.txt" && ok "BOS: 12 word positions, vocabulary |G| + 1, bos in result.txt" ||
    bad "BOS run: $(wc -l <"$TMP/run3/accuracy.tsv") lines; $(grep vocab "$TMP/run3/config.txt")"
expect_exit 0 "plot:" "tasks --plot" "$GDP" tasks --plot "$TMP/both" "$R" "$TMP/run2"
{ [ -s "$TMP/both.png" ] || [ -s "$TMP/both.svg" ]; } && ok "combined plot" || bad "no combined plot"
expect_exit 1 "cannot read" "tasks --plot of a folder without a run" "$GDP" tasks --plot "$TMP/none" "$TMP/missing"

[ $fail -eq 0 ] && echo "tasks cli: all ok" || echo "tasks cli: FAILED"
exit $fail
