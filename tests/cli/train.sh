#!/bin/sh
# shellcheck disable=SC2015 # "A && ok || bad": ok never fails
# gdp train / generate / eval as a user runs them: bad flags exit 2 with a message, a short run on a
# text file writes log.tsv, a loss plot, config.txt, a checkpoint and `latest`; resuming continues it;
# generate prints text; eval prints loss, perplexity and bits per byte. Run from the repository root
# with BUILD set (tests/run_all.sh does).
CLI_TEST=train
. tests/cli_lib.sh

# real text: this repository's headers
cat core/*.h layers/*.h train/*.h >"$TMP/text.txt"
T="$TMP/text.txt"

# ---- bad flags: exit 2 with a message naming the problem
expect_exit 0 "--grad-accum" "train --help" "$GDP" train --help
expect_exit 2 "--data is required" "no --data" "$GDP" train --steps 3
expect_exit 2 "unknown option" "unknown flag" "$GDP" train --data "$T" --stepz 3
expect_exit 2 "not a whole number" "non-numeric --steps" "$GDP" train --data "$T" --steps many
expect_exit 2 "out of range" "--batch 0" "$GDP" train --data "$T" --batch 0
expect_exit 2 "cosine, wsd, linear or constant" "bad --schedule" "$GDP" train --data "$T" --schedule step
expect_exit 2 "is unknown" "bad --preset" "$GDP" train --data "$T" --preset huge
expect_exit 2 "bf16, off or auto" "bad --autocast" "$GDP" train --data "$T" --autocast fp8
expect_exit 2 "needs --device cuda" "--autocast bf16 on the cpu" "$GDP" train --data "$T" --autocast bf16
expect_exit 2 "unknown model config key" "bad --set key" "$GDP" train --data "$T" --set hiden_size=3
expect_exit 2 "householder or split" "bad --set value" "$GDP" train --data "$T" --set mode=diagonal
expect_exit 2 "cpu, cuda or auto" "bad --device" "$GDP" train --data "$T" --device tpu
expect_exit 2 "needs a value" "missing value" "$GDP" train --data
expect_exit 2 "'--quiet' takes no value" "value given to a switch" "$GDP" train --data "$T" --quiet=1
expect_exit 2 "could be --set, --steps" "ambiguous abbreviation" "$GDP" train --data "$T" --s 3
# a run larger than the memory it may use stops before its step arenas are allocated, saying what to change
expect_exit 1 "To fit: --batch" "--mem-limit below the plan" "$GDP" train --data "$T" --steps 1 --batch 8 --seq 256 \
    --mem-limit 16
expect_exit 2 "gdp train --help" "bad number points to --help" "$GDP" train --data "$T" --lr fast
printf 'hidden_size = 64\nnum_hedas = 2\n' >"$TMP/bad.cfg"
expect_exit 2 "line 2" "bad config file" "$GDP" train --data "$T" --config "$TMP/bad.cfg"
expect_exit 1 "No such file" "missing data" "$GDP" train --data "$TMP/missing.txt" --steps 2
expect_exit 2 "is required" "generate without --checkpoint" "$GDP" generate --prompt hi
expect_exit 2 "is required" "eval without --data" "$GDP" eval --checkpoint "$TMP"

# ---- a short run: log, plot, config, checkpoint, latest
R="$TMP/run"
expect_exit 0 "checkpoint:" "train 12 steps" "$GDP" train --data "$T" --steps 12 --batch 4 --seq 32 --lr 5e-3 \
    --warmup 2 --eval-every 6 --eval-batches 2 --checkpoint-every 6 --keep 2 --out "$R"
grep -q "tok/s" "$TMP/out" && grep -q "ETA" "$TMP/out" && ok "progress line has tok/s and ETA" || bad "progress line"
grep -q "0.127M parameters" "$TMP/out" && ok "parameter count printed" || bad "parameter count"
[ -s "$R/log.tsv" ] && [ "$(wc -l <"$R/log.tsv")" -eq 13 ] && ok "log.tsv has a header and 12 rows" ||
    bad "log.tsv: $(wc -l <"$R/log.tsv" 2>/dev/null) lines"
{ [ -s "$R/loss.png" ] || [ -s "$R/loss.svg" ]; } && ok "loss plot" || bad "no loss plot in $R"
[ -s "$R/config.txt" ] && grep -q "num_householder = 2" "$R/config.txt" && ok "config.txt" || bad "config.txt"
[ -s "$R/ckpt_00000012.h5" ] && [ -s "$R/ckpt_00000006.h5" ] && ok "checkpoints at 6 and 12" || bad "checkpoints: $(ls "$R")"
[ "$(cat "$R/latest")" = "ckpt_00000012.h5" ] && ok "latest names step 12" || bad "latest: $(cat "$R/latest")"

# ---- --profile prints a per-op table; --bucket-mb is accepted (one rank: no buckets)
expect_exit 0 "profile over 2 step(s)" "train --profile" "$GDP" train --data "$T" --steps 3 --batch 2 --seq 16 \
    --profile --bucket-mb 1 --quiet
grep -q "gated_deltaproduct" "$TMP/out" && grep -q "(clip + adamw)" "$TMP/out" && ok "profile names the GDP op and AdamW" ||
    bad "profile table"
expect_exit 2 "out of range" "negative --bucket-mb" "$GDP" train --data "$T" --bucket-mb -1
expect_exit 2 "use inside or copies" "bad --bf16-gemm" "$GDP" train --data "$T" --bf16-gemm fast
expect_exit 2 "use bf16 or f32" "bad --activations" "$GDP" train --data "$T" --activations f16
expect_exit 2 "under bf16 autocast on cuda" "--activations on the cpu" "$GDP" train --data "$T" --device cpu \
    --activations bf16
expect_exit 0 "done: 2 steps" "train --recompute" "$GDP" train --data "$T" --steps 2 --batch 2 --seq 16 --recompute \
    --eval-every 0
expect_exit 0 "with selective recomputation" "train --selective-recompute" "$GDP" train --data "$T" --steps 2 --batch 2 \
    --seq 16 --selective-recompute --eval-every 0

# ---- the config file the run wrote trains the same model
expect_exit 0 "0.127M parameters" "train --config config.txt" "$GDP" train --data "$T" --config "$R/config.txt" \
    --steps 2 --warmup 1 --batch 2 --seq 16 --out "$TMP/run_cfg"

# ---- resume continues to a longer horizon: rows 12..15 appended
expect_exit 0 "resumed from" "resume to 16 steps" "$GDP" train --data "$T" --steps 16 --batch 4 --seq 32 --lr 5e-3 \
    --warmup 2 --eval-every 6 --eval-batches 2 --out "$R" --resume "$R"
[ "$(wc -l <"$R/log.tsv")" -eq 17 ] && ok "log.tsv continued to 16 rows" || bad "log.tsv after resume: $(wc -l <"$R/log.tsv")"
expect_exit 1 "past --steps" "resume past the horizon" "$GDP" train --data "$T" --steps 10 --batch 4 --seq 32 --out "$TMP/r2" \
    --resume "$R"

# ---- generate prints the prompt and a continuation; the same seed gives the same text
expect_exit 0 "generated 40 tokens" "generate" "$GDP" generate --checkpoint "$R" --prompt "The model " --tokens 40 --seed 3
head -c 10 "$TMP/out" | grep -q "The model " && ok "generate echoes the prompt" || bad "generate output: $(head -c 80 "$TMP/out")"
"$GDP" generate --checkpoint "$R/ckpt_00000016.h5" --prompt "The model " --tokens 40 --seed 3 2>/dev/null >"$TMP/g1"
"$GDP" generate --checkpoint "$R" --prompt "The model " --tokens 40 --seed 3 2>/dev/null >"$TMP/g2"
cmp -s "$TMP/g1" "$TMP/g2" && [ "$(wc -c <"$TMP/g1")" -gt 20 ] && ok "generate is reproducible" || bad "generate differs"
expect_exit 0 "generated 5 tokens" "greedy generate" "$GDP" generate --checkpoint "$R" --prompt "x" --tokens 5 --temperature 0
expect_exit 2 "must not be empty" "empty prompt" "$GDP" generate --checkpoint "$R" --prompt ""
expect_exit 2 "cpu, cuda or auto" "generate bad --device" "$GDP" generate --checkpoint "$R" --prompt x --device tpu
"$GDP" generate --checkpoint "$R" --prompt "The model " --tokens 40 --seed 3 --device cpu 2>/dev/null >"$TMP/g3"
cmp -s "$TMP/g1" "$TMP/g3" && ok "generate --device cpu is the default" || bad "generate --device cpu differs from the default"

# ---- eval: loss, perplexity, bits per byte (byte data: loss / ln 2)
expect_exit 0 "bits per byte" "eval" "$GDP" eval --checkpoint "$R" --data "$T" --batch 4 --seq 32 --batches 4
awk '/^loss/ { l = $2; b = $NF; d = l / log(2) - b; exit !(d < 1e-4 && d > -1e-4) }' "$TMP/out" &&
    ok "bits per byte = loss / ln 2 for bytes" || bad "eval numbers: $(grep '^loss' "$TMP/out")"

# ---- a corrupt checkpoint is an error with a message
head -c 3000 "$R/ckpt_00000016.h5" >"$TMP/broken.h5"
expect_exit 1 "error" "corrupt checkpoint" "$GDP" eval --checkpoint "$TMP/broken.h5" --data "$T" --batches 1

# ---- whole-model gradient check (float64 finite differences, both modes)
expect_exit 0 "0 failed" "gradcheck --model tiny" "$GDP" gradcheck --model tiny
expect_exit 2 "use --model tiny" "gradcheck --model small" "$GDP" gradcheck --model small
expect_exit 2 "cpu, cuda or auto" "gradcheck bad --device" "$GDP" gradcheck --device tpu

[ $fail -eq 0 ] && echo "train cli: all ok" || echo "train cli: FAILED"
exit $fail
