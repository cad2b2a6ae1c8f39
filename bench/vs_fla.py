#!/usr/bin/env python3
"""gdp's Gated DeltaProduct op next to fla's Triton chunk_gated_delta_product, timed in one run.

For each shape (B, T, H, K, V, n_h) this times fla's forward and forward+backward (bf16, median of
triton.testing.do_bench) and runs `gdp bench op` on the same shape, then prints both and the ratio
fla / gdp (above 1: gdp is faster), and gdp's forward + backward with the saved forward (the
forward keeps its chunk intermediates for the backward, as gdp's training does by default) next to
fla's forward + backward. docs/performance.md has the results and the method.

Run on the GPU machine from the repository root, with a CUDA build of gdp and an fla checkout
(never committed; `.carry/fla` by default):
    python3 bench/vs_fla.py [--shapes default|all|model|B,T,H,K,V,n;...] [--gdp build/gdp] [--fla .carry/fla]
fla refuses its gated backward on Triton < 3.7.1 on Hopper (fla's GitHub issue 640: "Triton >= 3.4.0
and < 3.7.1 produces incorrect results"); for timing only, this script switches that guard off.
Inputs: unit-norm keys, beta = sigmoid(x), g = logsigmoid(x).
"""
import argparse
import os
import subprocess
import sys

SHAPE_SETS = {
    # B, T, H, K, V, n
    "default": [(8, 2048, 16, 128, 128, n) for n in (1, 2, 3)],
    # the default shape, then a long sequence and small and large heads
    "all": [(8, 2048, 16, 128, 128, n) for n in (1, 2, 3)]
    + [(2, 8192, 16, 128, 128, n) for n in (1, 2, 3)]
    + [(8, 2048, 16, 64, 64, n) for n in (1, 2, 3)]
    + [(8, 2048, 16, 256, 256, n) for n in (1, 2, 3)],
    # the base preset's GDP layer: H 6 (hidden 768 / head 128)
    "model": [(8, 2048, 6, 128, 128, n) for n in (1, 2, 3)],
}


def parse_shapes(text):
    if text in SHAPE_SETS:
        return SHAPE_SETS[text]
    out = []
    for part in text.split(";"):
        vals = [int(x) for x in part.split(",")]
        if len(vals) != 6:
            sys.exit(f"vs_fla.py: shape '{part}' needs six numbers B,T,H,K,V,n (e.g. 8,2048,16,128,128,2)")
        out.append(tuple(vals))
    return out


def gdp_times(gdp, shape, iters):
    """(fwd ms, fwd+bwd ms, fwd+bwd ms with the saved forward) from `gdp bench op` on one shape."""
    B, T, H, K, V, n = shape
    cmd = [gdp, "bench", "op", "--B", str(B), "--T", str(T), "--H", str(H), "--K", str(K), "--V", str(V),
           "--n", str(n), "--iters", str(iters)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr.strip()[-400:]}")
    for line in res.stdout.splitlines():
        f = line.split()
        if f and f[0] == str(n) and len(f) >= 10:
            return float(f[1]), float(f[4]), float(f[9])
    raise RuntimeError(f"no result line for n={n} in: {res.stdout[-400:]}")


def fla_times(torch, triton, fla_op, shape):
    B, T, H, K, V, n = shape
    import torch.nn.functional as F
    dev, dt = "cuda", torch.bfloat16
    gen = torch.Generator(device=dev).manual_seed(1234)
    q = torch.randn(B, T, H, K, device=dev, dtype=dt, generator=gen)
    k = F.normalize(torch.randn(B, T * n, H, K, device=dev, dtype=torch.float32, generator=gen), p=2, dim=-1).to(dt)
    v = torch.randn(B, T * n, H, V, device=dev, dtype=dt, generator=gen)
    beta = torch.rand(B, T * n, H, device=dev, dtype=dt, generator=gen).sigmoid()
    g = F.logsigmoid(torch.rand(B, T, H, device=dev, dtype=torch.float32, generator=gen))
    do = torch.randn(B, T, H, V, device=dev, dtype=dt, generator=gen)
    for t in (q, k, v, beta, g):
        t.requires_grad_(True)

    def fwd():
        with torch.no_grad():
            fla_op(q, k, v, g, beta, num_householder=n)

    def fwd_bwd():
        o, _ = fla_op(q, k, v, g, beta, num_householder=n)
        o.backward(do)

    tf = triton.testing.do_bench(fwd, warmup=50, rep=200, return_mode="median")
    tb = triton.testing.do_bench(fwd_bwd, warmup=50, rep=300, return_mode="median", grad_to_none=[q, k, v, beta, g])
    return tf, tb


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="default",
                    help="default (B 8, T 2048, H 16, K = V = 128, n_h 1-3) | all | model | 'B,T,H,K,V,n;...'")
    ap.add_argument("--gdp", default="build/gdp", help="the gdp program (default build/gdp)")
    ap.add_argument("--fla", default=".carry/fla", help="fla checkout (default .carry/fla)")
    ap.add_argument("--iters", type=int, default=20, help="gdp bench op --iters (default 20)")
    args = ap.parse_args()
    shapes = parse_shapes(args.shapes)
    if not os.access(args.gdp, os.X_OK):
        sys.exit(f"vs_fla.py: {args.gdp} is not an executable; build gdp with CUDA first (make)")

    fla_op = None
    try:
        sys.path.insert(0, os.path.abspath(args.fla))
        import torch
        import triton
        import fla.ops.common.chunk_o as chunk_o
        from fla.ops.gated_delta_product import chunk_gated_delta_product as fla_op
        chunk_o.TRITON_ABOVE_3_7_1 = True  # timing only: see the docstring
        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no GPU")
    except Exception as e:  # gdp's numbers are still worth printing
        print(f"vs_fla.py: fla is not usable here ({e}); printing gdp's times alone", file=sys.stderr)
        fla_op = None

    hdr = (f"{'B':>2} {'T':>5} {'H':>3} {'K':>4} {'V':>4} {'n':>2} | {'gdp fwd':>8} {'fla fwd':>8} {'ratio':>6} | "
           f"{'gdp f+b':>8} {'fla f+b':>8} {'ratio':>6} | {'saved':>8} {'ratio':>6}")
    rows = []
    for shape in shapes:
        gf, gb, gs = gdp_times(args.gdp, shape, args.iters)
        if fla_op is not None:
            ff, fb = fla_times(torch, triton, fla_op, shape)
            row = (f"{shape[0]:>2} {shape[1]:>5} {shape[2]:>3} {shape[3]:>4} {shape[4]:>4} {shape[5]:>2} | "
                   f"{gf:8.3f} {ff:8.3f} {ff / gf:6.2f} | {gb:8.3f} {fb:8.3f} {fb / gb:6.2f} | {gs:8.3f} {fb / gs:6.2f}")
        else:
            row = (f"{shape[0]:>2} {shape[1]:>5} {shape[2]:>3} {shape[3]:>4} {shape[4]:>4} {shape[5]:>2} | "
                   f"{gf:8.3f} {'-':>8} {'-':>6} | {gb:8.3f} {'-':>8} {'-':>6} | {gs:8.3f} {'-':>6}")
        print(row, flush=True)
        rows.append(row)
    print("\nms, bf16, householder mode; ratio = fla / gdp (above 1: gdp is faster); saved: gdp's f+b with the\n"
          "forward's intermediates kept for the backward (GdpForwardArgs.saved, training's default)")
    print(hdr)
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
