#!/bin/sh
# The main job: gdp built for this machine (the CUDA kernels for the GPU nvidia-smi finds; with no
# GPU visible a CPU-only build in build-cpu, so that no minutes go into kernels that cannot run),
# the default corpus (GCIDE, BPE 4096) prepared once, then a training run — the `small` preset on a
# GPU, else `tiny` on the CPU (minutes on 2 cores) — and a sample generated from the final checkpoint.
# usage: scripts/main_job.sh [OUT]   (default runs/main); env STEPS overrides the step count, GDP
# names a gdp binary to use as it is (no build).
set -eu
out=${1:-runs/main}
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
if [ -n "${GDP:-}" ]; then
    gdp=$GDP
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    make -j"$jobs" build/gdp
    gdp=build/gdp
else
    echo "main job: no GPU visible; building for the CPU only (build-cpu)"
    make -j"$jobs" NO_CUDA=1 BUILD=build-cpu build-cpu/gdp
    gdp=build-cpu/gdp
fi
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
data=$(GDP=$gdp sh scripts/prepare_gcide.sh)
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
