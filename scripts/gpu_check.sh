#!/bin/bash
# Checks and measures gdp.c on a machine with an NVIDIA GPU, from the repository root:
#
#   bash scripts/gpu_check.sh                      # every step
#   STEPS="build bench" bash scripts/gpu_check.sh   # only those steps
#
# Steps (in this order; STEPS picks a subset, default all but python):
#   build      make -j all + the GPU test programs (nvcc on PATH or in /usr/local/cuda)
#   testgpu    make test-gpu: every CUDA op against the CPU float64 path, the GDP kernels on
#              tests/data/gdp_vectors.h5 and random shapes, decode, gradcheck --device cuda
#   memcheck   compute-sanitizer --tool memcheck on test_gpu_gdp --sanitize (small cases of every
#   racecheck  fast kernel; racecheck is slow on the large shared-memory kernels, hence small cases)
#   vectors    gdp vectors tests/data/gdp_vectors.h5 --device cuda, f32 and bf16
#   bench      gdp bench op --H 16 --n 1,2,3, then --n 2 --mode split (the default shape of
#              docs/performance.md: B 8, T 2048, K = V = 128, bf16)
#   vsfla      python3 bench/vs_fla.py --shapes default: gdp next to fla in the same run; needs an
#              fla checkout at .carry/fla (never committed) and PyTorch + Triton; skipped otherwise
#   python     (not in the default) scripts/export_hf.py into fla's model, logits against gdp's,
#              and scripts/gdp_ctypes.py; needs .carry/fla, torch, transformers, safetensors
#   docs       (not in the default) the base preset (vocab 32000, B 8 x T 2048) for 15 steps with
#              --documents on and off, twice each, on BPE data with end-of-text tokens made from docs/
#   vstorch    (not in the default) python3 bench/vs_torch.py: training against PyTorch + fla
#   vshf       (not in the default) python3 bench/vs_hf_generate.py: decoding against HF generate
#
# Environment (defaults in brackets):
#   BUILD  build folder [build]      STEPS  steps to run [all but python]
#   LIMIT  seconds; a step that starts later than this is skipped [3600]
#   JOBS   make -j [nproc]           OUT    where the logs go [a fresh folder under /tmp]
#   SANITIZE_CASES  test_gpu_gdp --sanitize cases for the sanitizers, e.g. 3,11,12 [all]
# Each step's output is in $OUT/gpu_check/STEP.log; a table of the results is printed last.
# Exits 1 if a step failed.
set -u
export PATH=$PATH:/usr/local/cuda/bin PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
BUILD=${BUILD:-build}
STEPS=${STEPS:-build testgpu memcheck racecheck vectors bench vsfla}
LIMIT=${LIMIT:-3600}
JOBS=${JOBS:-$(nproc)}
LOGS=${OUT:-$(mktemp -d /tmp/gdp_gpu_check.XXXXXX)}/gpu_check
mkdir -p "$LOGS"
G=$BUILD/gdp
VEC=tests/data/gdp_vectors.h5
T0=$(date +%s)
rows=()
failed=0
row() { rows+=("$(printf '%-13s %s' "$1" "$2")"); echo "== $1: $2"; }
want() { case " $STEPS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# run STEP cmd...: the command's output goes to STEP.log; the row says ok / FAIL and the seconds
run() {
    step=$1; shift
    if [ $(($(date +%s) - T0)) -ge "$LIMIT" ]; then row "$step" "skipped: past LIMIT=$LIMIT s"; return 1; fi
    t=$(date +%s)
    "$@" >"$LOGS/$step.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then row "$step" "ok ($(($(date +%s) - t)) s)"
    else row "$step" "FAIL rc=$rc ($(($(date +%s) - t)) s), see $LOGS/$step.log"; failed=1; fi
    return $rc
}

card=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
[ -n "$card" ] || { echo "no NVIDIA GPU visible (nvidia-smi)"; exit 1; }
echo "card: $card; commit $(git rev-parse --short HEAD 2>/dev/null); logs in $LOGS"

want build && run build make -j"$JOBS" BUILD="$BUILD" all "$BUILD/tests/gpu/test_gpu_gdp"
want testgpu && run testgpu make BUILD="$BUILD" test-gpu
sanitize_args="--sanitize${SANITIZE_CASES:+ $SANITIZE_CASES}"
for tool in memcheck racecheck; do
    want $tool || continue
    if ! command -v compute-sanitizer >/dev/null; then row $tool "skipped: compute-sanitizer not found"; continue; fi
    # shellcheck disable=SC2086 # sanitize_args is two words when cases are given
    run $tool compute-sanitizer --tool $tool --error-exitcode 9 --print-limit 20 \
        "$BUILD/tests/gpu/test_gpu_gdp" $sanitize_args
done
if want vectors; then
    for dt in f32 bf16; do run "vectors-$dt" "$G" vectors "$VEC" --device cuda --dtype $dt; done
fi
if want bench; then
    run bench-hh "$G" bench op --H 16 --n 1,2,3
    run bench-split "$G" bench op --H 16 --n 2 --mode split
fi
if want vsfla; then
    if [ -f .carry/fla/fla/__init__.py ] && python3 -c 'import torch, triton' 2>/dev/null; then
        run vsfla python3 bench/vs_fla.py --shapes default --gdp "$G"
    else
        row vsfla "skipped: needs an fla checkout at .carry/fla and torch + triton"
    fi
fi
if want python; then
    if [ -f .carry/fla/fla/__init__.py ]; then
        D=$LOGS/text.txt; M=$LOGS/model
        cat core/*.h layers/*.h train/*.h >"$D"
        run export-train "$G" train --data "$D" --device cpu --steps 8 --batch 4 --seq 64 --lr 5e-3 --warmup 2 --out "$M" &&
            run export-logits "$G" eval --checkpoint "$M" --data "$D" --device cpu --batch 2 --seq 128 --batches 1 \
                --dump-logits "$M.h5" &&
            run export-hf python3 scripts/export_hf.py "$M" "${M}_hf" &&
            run export-fla python3 scripts/check_fla_export.py "${M}_hf" "$M.h5" tiny bf16
        GDP_LIB=$BUILD/libgdp.so run ctypes python3 scripts/gdp_ctypes.py
    else
        row python "skipped: needs an fla checkout at .carry/fla"
    fi
fi

if want docs; then
    cat docs/*.md README.md >"$LOGS/docs.txt"
    if run docs-prepare "$G" prepare --input "$LOGS/docs.txt" --out "$LOGS/docs_data" --tokenizer bpe --vocab 4096 \
        --doc-sep blank; then
        for r in 1 2; do
            for dm in on off; do
                run "docs-$dm-$r" "$G" train --preset base --set vocab_size=32000 --device cuda --data "$LOGS/docs_data" \
                    --documents $dm --steps 15 --batch 8 --seq 2048 --eval-every 0 --eval-batches 1 --print-every 1
            done
        done
    fi
fi
if want vstorch; then
    cat docs/*.md README.md >"$LOGS/text.txt"
    run vstorch python3 bench/vs_torch.py --gdp "$G" --data "$LOGS/text.txt"
fi
if want vshf; then run vshf python3 bench/vs_hf_generate.py --gdp "$G"; fi

echo
echo "card: $card"
# gdp bench op prints one line per n: n, fwd ms, ..., f+b ms (column 5), ..., saved f+b ms (column 10)
for f in bench-hh bench-split; do
    [ -s "$LOGS/$f.log" ] || continue
    awk -v m="${f#bench-}" '$1 ~ /^[0-9]+$/ && NF >= 10 {
        printf "%-10s n %s: fwd %s ms, f+b %s ms, saved f+b %s ms\n", m, $1, $2, $5, $10 }' "$LOGS/$f.log"
done
[ -s "$LOGS/vsfla.log" ] && sed -n '/^ms, bf16/,$p' "$LOGS/vsfla.log"
for f in "$LOGS"/docs-o*.log; do # the median tokens/s of steps 6-15
    [ -s "$f" ] || continue
    printf '%s: ' "$(basename "$f" .log)"
    sed -n 's/^step \+\([0-9]*\)\/.* | \([0-9]*\) tok\/s.*/\1 \2/p' "$f" | awk '$1 > 5 {print $2}' | sort -n |
        awk '{a[NR] = $1} END {print (NR ? a[int((NR + 1) / 2)] : "none") " tokens/s"}'
done
for f in vstorch vshf; do [ -s "$LOGS/$f.log" ] && sed -n '/^| /p' "$LOGS/$f.log"; done
printf '%s\n' "${rows[@]}"
echo "total $(($(date +%s) - T0)) s"
exit $failed
