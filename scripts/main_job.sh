#!/bin/sh
# The main job: the default corpus (GCIDE, BPE 4096) prepared once, then a training run — the
# `small` preset on a GPU when one is visible and gdp was built with CUDA, else `tiny` on the
# CPU (minutes on 2 cores) — and a sample generated from the final checkpoint.
# usage: scripts/main_job.sh [OUT]   (default runs/main); env STEPS overrides the step count.
set -eu
out=${1:-runs/main}
gdp=${GDP:-build/gdp}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
data=$(sh "$(dirname "$0")/prepare_gcide.sh")
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && "$gdp" train --help | grep -q cuda &&
    [ "$("$gdp" gradcheck --device cuda --op add >/dev/null 2>&1; echo $?)" = 0 ]; then
    set -- --preset small --device cuda --steps "${STEPS:-2000}" --batch 16 --seq 512 --lr 1e-3 --eval-every 250
else
    set -- --preset tiny --device cpu --steps "${STEPS:-500}" --batch 8 --seq 128 --lr 2e-3 --eval-every 100
fi
echo "main job: $gdp train $* --data $data --out $out"
"$gdp" train "$@" --data "$data" --out "$out" --checkpoint-every 250 --print-every 25
echo "sample:"
"$gdp" generate --checkpoint "$out" --prompt "Water, n. " --tokens 80 --temperature 0.7 --top-k 40
