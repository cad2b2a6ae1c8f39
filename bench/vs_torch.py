#!/usr/bin/env python3
"""Training speed and memory of gdp.c next to PyTorch + fla, in one run on one card.

For each variant (Householder n_h 1, 2, 3 and split r 2 by default) this runs `gdp train` on the
`base` preset (vocab 32000, B 8 x T 2048, bf16 autocast, gdp's defaults otherwise), then fla's
GatedDeltaProductForCausalLM built from the same config (the config.txt gdp wrote, mapped by
scripts/export_hf.py) in a fresh process per peer mode:

  eager    bf16 autocast over f32 weights, fused AdamW, gradient clipping 1.0, fla's fused norms,
           SwiGLU and cross-entropy (fla's defaults)
  compile  the same with torch.compile(model, dynamic=False), dynamo's cache limits raised so that
           the 12 blocks do not fall back to eager; compile time is left out of the timed steps

Printed: tokens/s (median of the steps after --warmup), GPU memory in use as the driver reports it
(cudaMemGetInfo: used = total - free, CUDA context and allocator caches included, the same measure
for both), PyTorch's own peak of allocated tensors, and MFU against --peak-tflops (989: H100/H200
dense bf16). FLOPs per token: 6 x the linear layers' weights (lm_head included, embeddings out) =
the matmul MFU; the GDP op's recurrence (per head and slot a read and a rank-1 write, plus the output
read: 4 n K V + 2 K V per layer, x 3 for forward and backward) is added for the total. fla has no
split mode: the split variant runs gdp alone.

Run on the GPU machine from the repository root, with a CUDA build, prepared data and an fla
checkout (never committed; .carry/fla by default):
    python3 bench/vs_torch.py [--gdp build/gdp] [--fla .carry/fla] [--data DIR] [--variants hh1,hh2,hh3,split2]
                              [--peers eager,compile] [--steps 20] [--warmup 5] [--batch 8] [--seq 2048]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))

VARIANTS = {
    "hh1": ["--set", "num_householder=1"],
    "hh2": ["--set", "num_householder=2"],
    "hh3": ["--set", "num_householder=3"],
    "split2": ["--set", "mode=split", "--set", "num_householder=2"],
}


def flops_per_token(c):
    """(matmul FLOPs, GDP op FLOPs) per token of one training step (forward + backward)."""
    D, H, K = c["hidden_size"], c["num_heads"], c["head_dim"]
    V = int(K * c.get("expand_v", 1.0))
    n = c["num_householder"]
    inter = c["intermediate_size"]
    kd, vd = H * K, H * V
    mm = kd * D + n * kd * D + n * vd * D + n * H * D + vd * D + 3 * D * inter
    if c.get("use_forget_gate", True):
        mm += H * D
    if c.get("use_output_gate", True):
        mm += vd * D
    matmul = 6.0 * (c["num_hidden_layers"] * mm + D * c["vocab_size"])
    op = 3.0 * c["num_hidden_layers"] * H * (4 * n * K * V + 2 * K * V)
    return matmul, op


def run_gdp(args, name, out):
    cmd = [args.gdp, "train", "--preset", "base", "--set", "vocab_size=32000", *VARIANTS[name], "--device", "cuda",
           "--data", args.data, "--steps", str(args.warmup + args.steps), "--batch", str(args.batch), "--seq",
           str(args.seq), "--eval-every", "0", "--eval-batches", "1", "--print-every", "1", "--out", out]
    print("$", " ".join(cmd), flush=True)
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"gdp train failed ({res.returncode}): {res.stderr.strip()[-600:]}")
    tps = [float(m.group(2)) for m in re.finditer(r"^step +(\d+)/\d+ .*?\| (\d+) tok/s", res.stdout, re.M)
           if int(m.group(1)) > args.warmup]
    mem = re.search(r"GPU memory in use after step 1: ([\d.]+) of", res.stdout)
    if not tps or not mem:
        raise RuntimeError(f"no tok/s or memory line in gdp's output: {res.stdout[-600:]}")
    with open(os.path.join(out, "config.txt")) as f:
        text = f.read()
    return {"tps": statistics.median(tps), "used_gib": float(mem.group(1)), "peak_gib": None}, text


def peer_worker(spec):
    """One peer run in this process; prints one JSON line."""
    sys.path.insert(0, os.path.abspath(spec["fla"]))
    import torch
    from fla.models import GatedDeltaProductConfig, GatedDeltaProductForCausalLM

    torch.manual_seed(1)
    dev = torch.device("cuda")
    config = GatedDeltaProductConfig(**spec["config"])
    model = GatedDeltaProductForCausalLM(config).to(dev)
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8, fused=True)
    fwd = model
    if spec["mode"] == "compile":
        import torch._dynamo
        torch._dynamo.config.cache_size_limit = 256
        torch._dynamo.config.accumulated_cache_size_limit = 1024
        fwd = torch.compile(model, dynamic=False)
    B, T = spec["batch"], spec["seq"]
    gen = torch.Generator(device=dev).manual_seed(1)

    def step():
        x = torch.randint(0, config.vocab_size, (B, T), device=dev, generator=gen)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.perf_counter()
    for _ in range(spec["warmup"]):
        step()
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - t0
    times = []
    for _ in range(spec["steps"]):
        t = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    free, total = torch.cuda.mem_get_info()
    print(json.dumps({"tps": B * T / statistics.median(times), "used_gib": (total - free) / 2**30,
                      "peak_gib": torch.cuda.max_memory_allocated() / 2**30, "warmup_s": warm_s}), flush=True)


def run_peer(args, config, mode):
    spec = {"fla": args.fla, "config": config, "mode": mode, "batch": args.batch, "seq": args.seq,
            "warmup": args.warmup, "steps": args.steps}
    res = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)],
                         capture_output=True, text=True, timeout=args.peer_timeout)
    if res.returncode != 0:
        raise RuntimeError(f"peer {mode} failed ({res.returncode}): {res.stderr.strip()[-600:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gdp", default="build/gdp")
    ap.add_argument("--fla", default=".carry/fla")
    ap.add_argument("--data", default=None, help="prepared data or a text file (default: scripts/prepare_gcide.sh's, "
                    "which needs Debian's apt tools or data_cache/gcide/gcide.dict.dz)")
    ap.add_argument("--variants", default="hh1,hh2,hh3,split2")
    ap.add_argument("--peers", default="eager,compile")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--peer-timeout", type=int, default=900, help="seconds a peer run may take (compile included)")
    ap.add_argument("--out", default="/tmp/gdp_vs_torch")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        peer_worker(json.loads(args.worker))
        return 0
    from export_hf import fla_config, parse_config

    if args.data is None:
        args.data = subprocess.run(["sh", "scripts/prepare_gcide.sh"], capture_output=True, text=True,
                                   env={**os.environ, "GDP": args.gdp}, check=True).stdout.strip().splitlines()[-1]
    peers = [p for p in args.peers.split(",") if p]
    rows = []
    for name in args.variants.split(","):
        if name not in VARIANTS:
            sys.exit(f"vs_torch.py: variant '{name}' is not one of {', '.join(VARIANTS)}")
        gdp, text = run_gdp(args, name, os.path.join(args.out, name))
        cfg = parse_config(text, "config.txt")
        results = {"gdp": gdp}
        if cfg.get("mode", "householder") == "householder":
            config = fla_config(cfg, "config.txt")
            for mode in peers:
                try:
                    results[mode] = run_peer(args, config, mode)
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    print(f"{name} {mode}: {e}", file=sys.stderr)
        else:
            config = fla_config({**cfg, "mode": "householder"}, "config.txt")
        mm, op = flops_per_token(config)
        rows.append((name, results, mm, op))
        print(name, json.dumps(results), flush=True)

    print(f"\ntokens/s, GPU memory in use (GiB), MFU matmul / +op; base preset, B {args.batch} x T {args.seq}, "
          f"median of {args.steps} steps after {args.warmup}")
    print("| variant | run | tokens/s | GPU memory in use | torch peak allocated | MFU matmul | MFU + op | gdp ÷ run |")
    print("|---|---|---|---|---|---|---|---|")
    for name, results, mm, op in rows:
        g = results["gdp"]["tps"]
        for who, r in results.items():
            peak = "" if r["peak_gib"] is None else f"{r['peak_gib']:.1f}"
            mfu_mm = 100 * r["tps"] * mm / (args.peak_tflops * 1e12)
            mfu_all = 100 * r["tps"] * (mm + op) / (args.peak_tflops * 1e12)
            ratio = "" if who == "gdp" else f"{g / r['tps']:.2f}"
            print(f"| {name} | {who} | {r['tps'] / 1e3:.1f}k | {r['used_gib']:.1f} | {peak} | {mfu_mm:.1f}% | "
                  f"{mfu_all:.1f}% | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
