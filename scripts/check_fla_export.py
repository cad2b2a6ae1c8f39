"""GPU check of scripts/export_hf.py: fla's GatedDeltaProductForCausalLM, loaded from an exported
folder, must give the logits that gdp computed for the same token ids.

    python3 scripts/check_fla_export.py HF_DIR DUMP.h5 NAME [fp32|bf16 ...]

HF_DIR is export_hf.py's output; DUMP.h5 comes from `gdp eval --dump-logits` on the same
checkpoint (input_ids [B,T] int32, logits [B,T,V] float32, gdp's CPU float32 forward). fla comes
from .carry/fla (or an installed fla). Prints PASS/FAIL lines; exit status 1 on any FAIL.
Each dtype (default: both) may run in a process of its own, so that Triton compiles in parallel.
fp32 must agree to rel L2 1e-3 (run with TRITON_F32_DEFAULT=ieee so fla's Triton dots are true
fp32, not tf32), bf16 to 2e-2. fla's op wrapper refuses float32 inputs (an assert), though its
kernels run them: for fp32 this script calls the op's autograd function directly (fp32_op below). T must be above 64: fla's layer switches to its fused recurrent
kernel for q_len <= 64 in eval mode, and the chunk kernels are the ones worth checking.
"""
import os
import sys
import time

import h5py
import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".carry", "fla"))
from fla.models import GatedDeltaProductConfig, GatedDeltaProductForCausalLM
from transformers import AutoModelForCausalLM

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
TOL = {torch.float32: 1e-3, torch.bfloat16: 2e-2}


def rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).norm() / b.norm()).item()


def fp32_op(q, k, v, g, beta, num_householder, scale=None, initial_state=None, output_final_state=False,
            use_qk_l2norm_in_kernel=False, cu_seqlens=None, cu_seqlens_cpu=None):
    """fla's chunk_gated_delta_product without its float32 refusal (same arguments and defaults)."""
    from fla.ops.gated_delta_product.chunk import ChunkGatedDeltaProductFunction
    if scale is None:
        scale = k.shape[-1] ** -0.5
    return ChunkGatedDeltaProductFunction.apply(q, k, v, g, beta, scale, num_householder, initial_state,
                                                output_final_state, use_qk_l2norm_in_kernel, cu_seqlens, cu_seqlens_cpu)


def fla_logits(model, ids, dtype):
    import fla.layers.gated_deltaproduct as layer
    wrapper = layer.chunk_gated_delta_product
    if dtype == torch.float32:
        layer.chunk_gated_delta_product = fp32_op
    try:
        model = model.to("cuda", dtype).eval()
        with torch.no_grad():
            return model(input_ids=ids.cuda(), use_cache=False).logits.float().cpu()
    finally:
        layer.chunk_gated_delta_product = wrapper


def main(hf_dir, dump, name, dtypes):
    with h5py.File(dump, "r") as f:
        ids = torch.from_numpy(f["input_ids"][()]).long()
        want = torch.from_numpy(f["logits"][()])
    assert ids.shape[1] > 64, f"{dump}: T = {ids.shape[1]}; use T > 64 so fla runs its chunk kernels"
    config = GatedDeltaProductConfig.from_pretrained(hf_dir)
    state = load_file(os.path.join(hf_dir, "model.safetensors"))
    failed = 0
    shape = f"B={ids.shape[0]} T={ids.shape[1]} V={want.shape[2]}"
    for dtype in (DTYPES[d] for d in dtypes):
        t0 = time.time()
        model = GatedDeltaProductForCausalLM(config)
        model.load_state_dict(state, strict=True)
        got = fla_logits(model, ids, dtype)
        e = rel(got, want)
        ok = e <= TOL[dtype] and bool(got.isfinite().all())
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'}: export {name}: fla {str(dtype)[6:]} (load_state_dict strict) vs gdp "
              f"CPU fp32 logits, {shape}: rel L2 {e:.2e} (<= {TOL[dtype]:g}) [{time.time() - t0:.1f} s]")
        if dtype == torch.float32:
            fp32 = got
    if "fp32" not in dtypes:
        return failed
    # the way users load it: transformers' from_pretrained (fla registers the model type on import)
    t0 = time.time()
    try:
        model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
        e = rel(fla_logits(model, ids, torch.float32), fp32)
        ok = e <= 1e-6
        msg = f"rel L2 {e:.1e} to the strict-loaded model (<= 1e-6)"
    except Exception as ex:  # noqa: BLE001 - report any failure of the user path as a FAIL line
        ok, msg = False, f"{type(ex).__name__}: {ex}"
    failed += not ok
    print(f"{'PASS' if ok else 'FAIL'}: export {name}: AutoModelForCausalLM.from_pretrained: {msg} "
          f"[{time.time() - t0:.1f} s]")
    return failed


if __name__ == "__main__":
    if len(sys.argv) < 4 or not set(sys.argv[4:]) <= set(DTYPES):
        sys.exit(__doc__)
    sys.exit(1 if main(*sys.argv[1:4], sys.argv[4:] or list(DTYPES)) else 0)
