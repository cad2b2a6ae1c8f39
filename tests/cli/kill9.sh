#!/bin/sh
# shellcheck disable=SC2015 # "A && ok || bad": ok never fails
# kill -9 at random moments, then resume, until the run is done: the final checkpoint must be the
# uninterrupted run's, byte for byte (checkpoints carry no timestamps, so the same state gives the
# same file: parameters, AdamW moments, step, RNG, data position and skip history all compared).
# Every other kill, after its random delay, stops the process (SIGSTOP) every few ms until it is
# caught inside a checkpoint write (a .tmp being written, or a checkpoint renamed but `latest` not
# yet updated) and kills it there; the loop goes on until at least 6 kills, 2 of them inside a
# write, have happened (at most 40 starts). Delays and where each kill landed are printed.
CLI_TEST=kill9
. tests/cli_lib.sh

cat core/*.h layers/*.h >"$TMP/text.txt"
STEPS=40
COMMON="--data $TMP/text.txt --batch 4 --seq 32 --lr 5e-3 --warmup 2 --eval-every 0 --steps $STEPS --checkpoint-every 1 --keep 3 --quiet"
FINAL=$(printf 'ckpt_%08d.h5' $STEPS)

t0=$(date +%s.%N)
# shellcheck disable=SC2086
"$GDP" train $COMMON --out "$TMP/ref" >"$TMP/ref.out" 2>&1 &
ref=$!
while [ ! -f "$TMP/ref/latest" ] && kill -0 $ref 2>/dev/null; do sleep 0.005; done
t1=$(date +%s.%N)
wait $ref || { bad "the uninterrupted run failed"; cat "$TMP/ref.out"; exit 1; }
# Delays up to the uninterrupted run's start (to its first checkpoint: loading, memory planning) plus
# a tenth of its steps: a kill lands anywhere from the checkpoint load to a few steps in, whatever
# the speed of the machine (or of an ASan build) and however much of the run its start takes, and
# the run is still far from done after the kills the test wants.
span=$(awk -v a="$t0" -v b="$t1" -v c="$(date +%s.%N)" 'BEGIN { printf "%.3f", (b - a) + (c - b) / 10 }')

K="$TMP/killed"
# How a checkpoint write in $K stands, "" when none is under way: a .tmp (data or `latest`), or the
# newest checkpoint renamed into place but not yet named by `latest`.
write_state() {
    if ls "$K"/*.tmp >/dev/null 2>&1; then echo "$(cd "$K" && ls -- *.tmp | tr '\n' ' ')being written"; return; fi
    newest=$(ls "$K"/ckpt_*.h5 2>/dev/null | tail -1)
    [ -n "$newest" ] && [ "$(cat "$K/latest" 2>/dev/null)" != "${newest##*/}" ] &&
        echo "${newest##*/} renamed, latest not yet written"
}
# Stops $pid (SIGSTOP) every few ms until it is caught inside a write that was not there at its
# start ($before: what an earlier kill left), and leaves it stopped; gives up after ~2000 looks.
hunt_write() {
    i=0
    while [ $i -lt 2000 ]; do
        kill -STOP $pid 2>/dev/null || return
        st=$(write_state)
        [ -n "$st" ] && [ "$st" != "$before" ] && return
        kill -CONT $pid
        sleep 0.003
        i=$((i + 1))
    done
}

kills=0; in_write=0; starts=0; finished=0
while [ $starts -lt 40 ]; do
    starts=$((starts + 1))
    resume=""
    ls "$K"/ckpt_*.h5 >/dev/null 2>&1 && resume="--resume $K"
    if [ $kills -ge 6 ] && [ $in_write -ge 2 ]; then
        # enough kills: the last start runs to the end
        # shellcheck disable=SC2086
        "$GDP" train $COMMON --out "$K" $resume >"$TMP/run.out" 2>&1 && finished=1 || { bad "the final resume failed"; cat "$TMP/run.out"; }
        break
    fi
    before=$(write_state)
    r=$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')
    delay=$(awk -v r="$r" -v s="$span" 'BEGIN { printf "%.3f", 0.02 + r / 65535 * s }')
    # shellcheck disable=SC2086
    "$GDP" train $COMMON --out "$K" $resume >"$TMP/run.out" 2>&1 &
    pid=$!
    sleep "$delay"
    how="at ${delay}s"
    # every other kill waits, after its delay, for the next checkpoint write
    if [ $((starts % 2)) -eq 0 ]; then hunt_write; how="$how + the next write"; fi
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    rc=$?
    if [ $rc -eq 0 ]; then finished=1; echo "start $starts: finished before the kill $how"; break; fi
    if [ $rc -ne 137 ]; then bad "start $starts (${resume:-fresh}): exit $rc, not a kill"; cat "$TMP/run.out"; break; fi
    kills=$((kills + 1))
    st=$(write_state)
    where="outside a write"
    if [ -n "$st" ] && [ "$st" != "$before" ]; then where="inside a write: $st"; in_write=$((in_write + 1)); fi
    newest=$(ls "$K"/ckpt_*.h5 2>/dev/null | tail -1)
    newest=${newest##*/}
    echo "kill $kills $how (${resume:+resumed, }newest checkpoint ${newest:-none}): $where"
done

[ $finished -eq 1 ] && ok "$kills kills ($in_write inside a checkpoint write) over $starts starts, then the run finished" ||
    bad "the killed run never finished ($kills kills, $in_write inside a write, $starts starts)"
[ $kills -ge 6 ] && [ $in_write -ge 2 ] && ok "$in_write of the kills landed inside a checkpoint write" ||
    bad "$kills kills, $in_write inside a write: wanted 6 and 2"
cmp "$TMP/ref/$FINAL" "$K/$FINAL" >/dev/null 2>&1 && ok "the final checkpoint equals the uninterrupted run's byte for byte" ||
    bad "the final checkpoints differ: $(cmp "$TMP/ref/$FINAL" "$K/$FINAL" 2>&1)"
[ "$(cut -f1,2,4,8 "$TMP/ref/log.tsv")" = "$(cut -f1,2,4,8 "$K/log.tsv")" ] &&
    ok "log.tsv has the uninterrupted run's $STEPS losses, gradient norms and skip marks" ||
    bad "log.tsv differs from the uninterrupted run's"
ls "$K" | grep -q '\.tmp$' && bad "a .tmp outlived the run: $(ls "$K")" || ok "no .tmp left"

[ $fail -eq 0 ] && echo "kill9 cli: all ok" || echo "kill9 cli: FAILED"
exit $fail
