#!/usr/bin/env python3
"""Inference speed of gdp.c next to Hugging Face generate() on fla's model, in one run on one card.

A `base` model (vocab 32000) is trained for one step by `gdp train` (the weights do not matter for
speed), exported with scripts/export_hf.py and loaded into fla's GatedDeltaProductForCausalLM. Then,
with the same random prompt ids on both sides:

  decode   batch 1 and batch 64, prompts of 128 tokens, 256 new tokens each (greedy, no stop):
           gdp through its model API (build/libgdpmodel.so via scripts/gdp_ctypes.py: prefill, then
           sample + step per token) against fla's model.generate(use_cache=True, do_sample=False,
           min_new_tokens = max_new_tokens = 256); tokens/s = new tokens / (total time - prefill time)
  prefill  one prompt of 8192 tokens: gdp's prefill against fla's forward with use_cache=True

gdp decodes in float32; fla runs in --hf-dtype (bf16 by default, fp32 also possible). Times are
wall-clock with the GPU synchronised, best of --repeats after one warm-up.

Run on the GPU machine from the repository root, with a CUDA build and an fla checkout:
    python3 bench/vs_hf_generate.py [--gdp build/gdp] [--fla .carry/fla] [--data TEXT_OR_DIR]
                                    [--batches 1,64] [--hf-dtype bf16|fp32]
"""
import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))


def timed(fn, repeats, sync):
    fn()
    sync()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gdp", default="build/gdp")
    ap.add_argument("--fla", default=".carry/fla")
    ap.add_argument("--data", default=None, help="training data for the one step (default: a text of docs/)")
    ap.add_argument("--out", default="/tmp/gdp_vs_hf_generate")
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--prefill", type=int, default=8192)
    ap.add_argument("--hf-dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    sys.path.insert(0, os.path.abspath(args.fla))
    import numpy as np
    import torch
    from fla.models import GatedDeltaProductForCausalLM

    import gdp_ctypes
    from export_hf import export

    os.makedirs(args.out, exist_ok=True)
    data = args.data
    if data is None:
        data = os.path.join(args.out, "text.txt")
        with open(data, "w") as f:
            for name in sorted(os.listdir("docs")):
                if name.endswith(".md"):
                    f.write(open(os.path.join("docs", name)).read())
    run = os.path.join(args.out, "base")
    subprocess.run([args.gdp, "train", "--preset", "base", "--set", "vocab_size=32000", "--device", "cuda", "--data",
                    data, "--steps", "1", "--batch", "1", "--seq", "256", "--eval-every", "0", "--eval-batches", "1",
                    "--quiet", "--out", run], check=True, stdout=subprocess.DEVNULL)
    hf_dir = run + "_hf"
    export(run, hf_dir)

    rng = np.random.default_rng(1)
    sync = torch.cuda.synchronize
    rows = []
    model = gdp_ctypes.Model(run, device="cuda", lib_path=os.path.join(os.path.dirname(args.gdp), "libgdpmodel.so"))
    hf_dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.hf_dtype]
    hf = GatedDeltaProductForCausalLM.from_pretrained(hf_dir, dtype=hf_dtype).cuda().eval()

    for B in (int(b) for b in args.batches.split(",")):
        ids = rng.integers(0, 32000, size=(B, args.prompt), dtype=np.int32)
        batch = model.batch(B, temperature=0.0)

        def gdp_prefill():
            batch.prefill(list(ids))

        def gdp_generate():
            batch.prefill(list(ids))
            for i in range(args.new):
                nxt = batch.sample()
                if i + 1 < args.new:
                    batch.step(nxt)

        g_pre = timed(gdp_prefill, args.repeats, sync)
        g_all = timed(gdp_generate, args.repeats, sync)
        x = torch.from_numpy(ids.astype(np.int64)).cuda()

        def hf_prefill():
            with torch.no_grad():
                hf(input_ids=x, use_cache=True)

        def hf_generate():
            with torch.no_grad():
                out = hf.generate(x, max_new_tokens=args.new, min_new_tokens=args.new, do_sample=False,
                                  use_cache=True, pad_token_id=0)
            assert out.shape[1] == args.prompt + args.new, out.shape

        h_pre = timed(hf_prefill, args.repeats, sync)
        h_all = timed(hf_generate, args.repeats, sync)
        g_tps = B * args.new / max(g_all - g_pre, 1e-9)
        h_tps = B * args.new / max(h_all - h_pre, 1e-9)
        rows.append((f"decode, batch {B}", g_tps, h_tps))
        batch.close()
        print(f"batch {B}: gdp {g_tps:.0f} tok/s (prefill {g_pre * 1e3:.1f} ms), HF {h_tps:.0f} tok/s "
              f"(prefill {h_pre * 1e3:.1f} ms)", flush=True)

    ids = rng.integers(0, 32000, size=(1, args.prefill), dtype=np.int32)
    batch = model.batch(1, temperature=0.0)
    g_pre = timed(lambda: batch.prefill(list(ids)), args.repeats, sync)
    x = torch.from_numpy(ids.astype(np.int64)).cuda()

    def hf_long():
        with torch.no_grad():
            hf(input_ids=x, use_cache=True)

    h_pre = timed(hf_long, args.repeats, sync)
    rows.append((f"prefill, {args.prefill} tokens", args.prefill / g_pre, args.prefill / h_pre))
    batch.close()
    model.close()

    print(f"\ntokens/s; gdp f32 through libgdpmodel.so, HF generate on fla's model in {args.hf_dtype}")
    print("| what | gdp | HF + fla | gdp ÷ HF |")
    print("|---|---|---|---|")
    for what, g, h in rows:
        print(f"| {what} | {g:.0f} | {h:.0f} | {g / h:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
