#!/bin/sh
# shellcheck disable=SC2015 # "A && ok || bad": ok never fails
# gdp generate's sampling and output flags on the CPU, on a tiny model trained here: --prompts gives
# one line per prompt equal to each prompt alone (a sampled batch of 3 whose sequences stop at different
# steps), --stream the same text, --stop and --stop-token end
# a continuation, --top-p near 0 is greedy, a seed repeats a sample, --repetition-penalty changes it.
CLI_TEST="generate"
. tests/cli_lib.sh

cat core/*.h layers/*.h >"$TMP/text.txt"
expect_exit 0 "checkpoint:" "train a tiny model" "$GDP" train --data "$TMP/text.txt" --batch 2 --seq 32 --steps 30 \
    --lr 1e-2 --out "$TMP/a"
gen() { "$GDP" generate --checkpoint "$TMP/a" "$@" 2>/dev/null; }
printf 'static int\nTensor *x = \n\n#include "\n' >"$TMP/prompts.txt"
# sampled, with stops that end the sequences of a batch at different steps
SAMPLE="--tokens 20 --temperature 0.9 --top-k 20 --seed 5 --stop e"
# shellcheck disable=SC2086 # $SAMPLE is a list of flags
gen --prompts "$TMP/prompts.txt" --batch 3 $SAMPLE >"$TMP/batch.txt"
[ "$(wc -l <"$TMP/batch.txt")" -eq 3 ] && ok "--prompts: one line per prompt (empty lines skipped)" || bad "--prompts gave $(wc -l <"$TMP/batch.txt") lines"
i=0
while IFS= read -r p; do
    [ -z "$p" ] && continue
    i=$((i + 1))
    # shellcheck disable=SC2086
    alone=$("$GDP" generate --checkpoint "$TMP/a" --prompts /dev/stdin $SAMPLE 2>/dev/null <<E
$p
E
)
    line=$(sed -n "${i}p" "$TMP/batch.txt")
    [ "$line" = "$alone" ] && ok "prompt $i in a batch = alone" || bad "prompt $i: batch '$line' vs alone '$alone'"
done <"$TMP/prompts.txt"
# groups of 2: the second group has one prompt and leaves the batch's other row empty
# shellcheck disable=SC2086
gen --prompts "$TMP/prompts.txt" --batch 2 $SAMPLE >"$TMP/batch2.txt"
cmp -s "$TMP/batch.txt" "$TMP/batch2.txt" && ok "--batch 2 over 3 prompts = --batch 3" ||
    bad "--batch 2 over 3 prompts differs from --batch 3: $(diff "$TMP/batch.txt" "$TMP/batch2.txt" | head -5)"

full=$(gen --prompt "static int" --tokens 20 --temperature 0)
stream=$(gen --prompt "static int" --tokens 20 --temperature 0 --stream)
[ -n "$full" ] && [ "$full" = "$stream" ] && ok "--stream prints the same text" || bad "--stream '$stream' vs '$full'"
cont=${full#static int}
stop=$(printf '%s' "$cont" | cut -c3-4)
if [ ${#stop} -eq 2 ]; then
    s=$(gen --prompt "static int" --tokens 20 --temperature 0 --stop "$stop")
    want="static int$(printf '%s' "$cont" | awk -v s="$stop" '{ i = index($0, s); print (i ? substr($0, 1, i - 1) : $0); exit }')"
    [ "$s" = "$want" ] && ok "--stop ends the continuation before the stop text" || bad "--stop '$stop': '$s' vs '$want'"
    s2=$(gen --prompt "static int" --tokens 20 --temperature 0 --stop "$stop" --stream)
    [ "$s2" = "$want" ] && ok "--stop with --stream" || bad "--stop --stream: '$s2' vs '$want'"
fi
first=$(printf '%s' "$cont" | head -c1 | od -An -tu1 | tr -d ' \n')
expect_exit 0 "generated 0 tokens" "--stop-token of the first token stops at once" "$GDP" generate --checkpoint "$TMP/a" \
    --prompt "static int" --tokens 20 --temperature 0 --stop-token "$first"
p0=$(gen --prompt "static int" --tokens 20 --temperature 1 --top-p 0.000001 --seed 3)
[ "$p0" = "$full" ] && ok "--top-p near 0 is greedy" || bad "--top-p 1e-6: '$p0' vs greedy '$full'"
s1=$(gen --prompt "static int" --tokens 30 --temperature 1 --top-p 0.9 --top-k 50 --seed 5)
s2=$(gen --prompt "static int" --tokens 30 --temperature 1 --top-p 0.9 --top-k 50 --seed 5)
[ "$s1" = "$s2" ] && ok "a seed repeats a top-p sample" || bad "seed 5 gave '$s1' then '$s2'"
r=$(gen --prompt "static int" --tokens 40 --temperature 0 --repetition-penalty 5)
long=$(gen --prompt "static int" --tokens 40 --temperature 0)
[ -n "$r" ] && [ "$r" != "$long" ] && ok "--repetition-penalty changes a greedy continuation" || bad "--repetition-penalty: '$r'"
expect_exit 2 "use it with --batch 1" "--stream with --batch 2" "$GDP" generate --checkpoint "$TMP/a" --prompts "$TMP/prompts.txt" --batch 2 --stream
expect_exit 2 "not both" "--prompt with --prompts" "$GDP" generate --checkpoint "$TMP/a" --prompt x --prompts "$TMP/prompts.txt"
expect_exit 2 "--top-p" "--top-p out of range" "$GDP" generate --checkpoint "$TMP/a" --prompt x --top-p 2
: >"$TMP/empty.txt"
expect_exit 1 "no prompt" "an empty --prompts file" "$GDP" generate --checkpoint "$TMP/a" --prompts "$TMP/empty.txt"
exit $fail
