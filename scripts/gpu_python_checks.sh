#!/bin/sh
# The Python pieces on the GPU machine, from the repository root with $BUILD (default build/) built
# with CUDA (gdp and libgdp.so) and fla's checkout in .carry/fla:
#   1. scripts/export_hf.py: two tiny models trained with gdp on the CPU (A: the tiny preset, tied;
#      B: untied, n_h 3, no gate, no output gate, no short convs, expand_v 2), exported, loaded into
#      fla's GatedDeltaProductForCausalLM on cuda in bf16 (fla refuses fp32); logits vs gdp's own
#      CPU fp32 logits of the same token ids (gdp eval --dump-logits): rel L2 <= 2e-2;
#      and transformers' from_pretrained gives the same model.
#   2. scripts/gdp_ctypes.py: libgdp.so through ctypes on torch tensors, bf16 CUDA vs the float64
#      CPU path (o, ht and every gradient through the autograd wrapper): rel L2 <= 2e-2.
# Prints PASS/FAIL lines and a summary; exits 1 on any FAIL. Most of the time is Triton compiling
# and autotuning fla's kernels on first use, so the Python checks run side by side. C..I each
# change one feature of A (see below), to place a disagreement of B's.
BUILD=${BUILD:-build}
PY=${PYTHON:-python3}
export OMP_WAIT_POLICY=passive
export TRITON_F32_DEFAULT=ieee # fla's fp32 run with true fp32 dot products, not tf32
export GDP_LIB="$BUILD/libgdp.so"
TMP=${TMPDIR:-/tmp}/gdp_gpu_python_$$
mkdir -p "$TMP"
[ -n "${KEEP_TMP:-}" ] || trap 'rm -rf "$TMP"' EXIT # KEEP_TMP=1: leave the per-check logs
T0=$(date +%s)

step() { # step DESCRIPTION cmd...: quiet unless cmd fails, then a FAIL line and its output's tail
    what=$1; shift
    "$@" >"$TMP/step_$$_$what" 2>&1
    rc=$?
    if [ "$rc" -ne 0 ]; then echo "FAIL: $what (exit $rc):"; tail -20 "$TMP/step_$$_$what"; return 1; fi
}
pycheck() { # pycheck NAME cmd...: a Python check that prints PASS/FAIL lines
    name=$1; shift
    "$@" >"$TMP/py_$name" 2>&1
    rc=$?
    grep -E '^(PASS|FAIL):' "$TMP/py_$name"
    if [ "$rc" -ne 0 ] && ! grep -q '^FAIL:' "$TMP/py_$name"; then
        echo "FAIL: $name exited $rc without a FAIL line:"; tail -25 "$TMP/py_$name"
    fi
}

{
    for f in "$BUILD/gdp" "$BUILD/libgdp.so" .carry/fla/fla/__init__.py; do
        [ -e "$f" ] || echo "FAIL: $f is missing (build with CUDA: make BUILD=$BUILD; fla goes in .carry/fla)"
    done
    "$PY" -c 'import torch, h5py, numpy, safetensors, transformers, einops, triton; assert torch.cuda.is_available()' \
        >"$TMP/imp" 2>&1 ||
        { echo "FAIL: $PY lacks torch/h5py/numpy/safetensors/transformers/einops/triton or sees no GPU:"; tail -3 "$TMP/imp"; }
} >"$TMP/out_0"

# ---- 1. export to fla: train, dump gdp's logits and export both models side by side, then compare
cat core/*.h layers/*.h train/*.h kernels/*.h >"$TMP/text.txt"
D="$TMP/text.txt"
prepare() { # prepare NAME SEQ [--set ...]
    name=$1; seq=$2; shift 2
    step "$name-train" "$BUILD/gdp" train --data "$D" --device cpu --steps 8 --batch 4 --seq 64 --lr 5e-3 \
        --warmup 2 --out "$TMP/$name" "$@" &&
        step "$name-eval-dump-logits" "$BUILD/gdp" eval --checkpoint "$TMP/$name" --data "$D" --device cpu \
            --batch 2 --seq "$seq" --batches 1 --dump-logits "$TMP/$name.h5" &&
        step "$name-export_hf.py" "$PY" scripts/export_hf.py "$TMP/$name" "$TMP/${name}_hf"
}
prepare A 128 >"$TMP/out_A" &
prepare B 100 --set tie_word_embeddings=false --set num_householder=3 --set use_forget_gate=false \
    --set allow_neg_eigval=false --set use_output_gate=false --set use_short_conv=false --set expand_v=2 \
    --set intermediate_size=0 >"$TMP/out_B" &
# C (n_h 3) and D (no gate, no negative eigenvalues), each one change of A, passed in earlier
# sessions and were dropped to keep this call short.
# E..I (each of B's other differences from A alone) all pass, so B's disagreement needs two
# features at once. J..P are B with one feature put back to A's, Q and R the suspect pairs alone.
Bset="--set tie_word_embeddings=false --set num_householder=3 --set use_forget_gate=false --set allow_neg_eigval=false --set use_output_gate=false --set use_short_conv=false --set expand_v=2 --set intermediate_size=0"
prepare J 100 $Bset --set num_householder=2 >"$TMP/out_J" &
prepare K 100 $Bset --set use_forget_gate=true >"$TMP/out_K" &
prepare L 128 $Bset >"$TMP/out_L" &
prepare M 100 $Bset --set intermediate_size=128 >"$TMP/out_M" &
prepare N 100 $Bset --set allow_neg_eigval=true >"$TMP/out_N" &
prepare O 100 $Bset --set use_short_conv=true >"$TMP/out_O" &
prepare P 100 $Bset --set expand_v=1 >"$TMP/out_P" &
prepare Q 100 --set num_householder=3 --set use_forget_gate=false >"$TMP/out_Q" &
prepare R 128 --set intermediate_size=0 >"$TMP/out_R" &
wait

# ---- 2. the ctypes module, alongside the four fla runs
pycheck gdp_ctypes "$PY" scripts/gdp_ctypes.py >"$TMP/out_ctypes" &
for name in A B J K L M N O P Q R; do
    [ -s "$TMP/${name}_hf/model.safetensors" ] || continue
    # bf16 only: fla's chunk_gated_delta_product asserts "does not support float32" (seen on the H200).
    for dt in bf16; do
        pycheck "fla_$name$dt" "$PY" scripts/check_fla_export.py "$TMP/${name}_hf" "$TMP/$name.h5" "$name" "$dt" \
            >"$TMP/out_fla_$name$dt" &
    done
done
wait

cat "$TMP"/out_0 "$TMP"/out_[A-R] "$TMP"/out_fla_* "$TMP"/out_ctypes 2>/dev/null | tee "$TMP/all.log"
passed=$(grep -c '^PASS:' "$TMP/all.log")
failed=$(grep -c '^FAIL:' "$TMP/all.log")
echo "gpu python checks: $passed passed, $failed failed ($(($(date +%s) - T0)) s)"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
