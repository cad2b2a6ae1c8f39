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
echo "$variants" | while IFS=: read -r name sets; do
    d="$TMP/$name"
    # shellcheck disable=SC2086 # $sets is a list of flags
    if ! "$GDP" train --data "$TMP/text.txt" --device cpu $sets --steps 8 --batch 4 --seq 64 --lr 5e-3 --warmup 2 \
        --out "$d" >"$TMP/out" 2>&1; then
        bad "$name: train"; cat "$TMP/out"; continue
    fi
    if ! "$GDP" eval --checkpoint "$d" --data "$TMP/text.txt" --device cpu --batch 2 --seq 128 --batches 1 \
        --dump-logits "$d.h5" >"$TMP/out" 2>&1 || ! "$PY" scripts/export_hf.py "$d" "${d}_hf" >>"$TMP/out" 2>&1; then
        bad "$name: eval --dump-logits or export"; cat "$TMP/out"; continue
    fi
    if "$PY" scripts/check_fla_export.py "${d}_hf" "$d.h5" "$name" fp32 bf16 >"$TMP/out" 2>&1; then
        ok "$name: $(grep -c PASS "$TMP/out") checks"
    else
        bad "$name"
    fi
    grep -E 'PASS|FAIL' "$TMP/out"
done | tee "$TMP/log"
! grep -q '^FAIL' "$TMP/log"
