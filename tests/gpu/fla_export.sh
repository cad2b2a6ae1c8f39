#!/bin/sh
# The exported model in fla: for each model variant, a tiny model trained on the CPU, its logits
# from `gdp eval --dump-logits`, scripts/export_hf.py, then scripts/check_fla_export.py runs fla's
# GatedDeltaProductForCausalLM on the GPU (fp32 to rel L2 1e-3, bf16 to 2e-2) and through
# AutoModelForCausalLM. Run by `make test-gpu`; skipped, with the reason, where torch, h5py,
# safetensors or fla (an fla checkout at .carry/fla, or an installed fla) cannot be imported.
PY=${PYTHON:-python3}
FLA=${FLA:-.carry/fla}
if ! PYTHONPATH="$FLA${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c 'import torch, h5py, safetensors, fla.models' 2>/dev/null; then
    echo "fla export check skipped: $PY cannot import torch, h5py, safetensors and fla (checkout at $FLA)"
    exit 0
fi
CLI_TEST="fla_export"
. tests/cli_lib.sh
export TRITON_F32_DEFAULT=ieee PYTHONPATH="$FLA${PYTHONPATH:+:$PYTHONPATH}"
cat core/*.h layers/*.h train/*.h >"$TMP/text.txt"

# name: --set overrides of the tiny preset
variants="default:
untied:--set tie_word_embeddings=false
no_output_gate:--set use_output_gate=false
no_short_conv:--set use_short_conv=false
expand_v_2:--set expand_v=2
n_h_3:--set num_householder=3
no_forget_gate:--set use_forget_gate=false
all_five:--set tie_word_embeddings=false --set use_output_gate=false --set use_short_conv=false --set expand_v=2 --set num_householder=3"
# one variant: train, dump logits, export, check; its lines go to $TMP/$name.log
check_variant() {
    name=$1 sets=$2 d="$TMP/$1" out="$TMP/$1.out"
    # shellcheck disable=SC2086 # $sets is a list of flags
    if ! "$GDP" train --data "$TMP/text.txt" --device cpu $sets --steps 8 --batch 4 --seq 64 --lr 5e-3 --warmup 2 \
        --out "$d" >"$out" 2>&1; then
        bad "$name: train"; cat "$out"; return
    fi
    if ! "$GDP" eval --checkpoint "$d" --data "$TMP/text.txt" --device cpu --batch 2 --seq 128 --batches 1 \
        --dump-logits "$d.h5" >"$out" 2>&1 || ! "$PY" scripts/export_hf.py "$d" "${d}_hf" >>"$out" 2>&1; then
        bad "$name: eval --dump-logits or export"; cat "$out"; return
    fi
    if "$PY" scripts/check_fla_export.py "${d}_hf" "$d.h5" "$name" fp32 bf16 >"$out" 2>&1; then
        ok "$name: $(grep -c PASS "$out") checks"
    else
        bad "$name"
    fi
    grep -E 'PASS|FAIL' "$out"
}

# The variants run side by side (each is a CPU training and a Python process on the GPU, mostly
# start-up), at most JOBS (default 4) at a time; their reports are printed in the list's order.
jobs=${JOBS:-4}
names=""
i=0
while IFS=: read -r name sets; do
    check_variant "$name" "$sets" >"$TMP/$name.log" 2>&1 &
    names="$names $name"
    i=$((i + 1))
    if [ $((i % jobs)) -eq 0 ]; then wait; fi
done <<VARIANTS
$variants
VARIANTS
wait
for name in $names; do cat "$TMP/$name.log"; done | tee "$TMP/log"
! grep -q '^FAIL' "$TMP/log"
