"""The Gated DeltaProduct op of gdp.c from Python: build/libgdp.so through ctypes, on torch tensors.

    import torch, gdp_ctypes as gdp
    o, ht = gdp.gated_deltaproduct(q, k, v, beta, g)   # differentiable (a torch.autograd.Function)
    o, ht = gdp.forward(q, k, v, beta, g, h0)          # the raw calls
    dq, dk, dv, dbeta, dg, dh0, dmask = gdp.backward(do, q, k, v, beta, g, h0, dht=dht)

Layouts (kernels/gdp/gdp.h), householder mode with n = n_h:
    q [B,T,H,K]  k [B,T,n,H,K]  v [B,T,n,H,V]  beta [B,T,n,H]  g [B,T,H] (log decay; None: ungated)
    h0, ht [B,H,K,V]  o [B,T,H,V]
Split mode: pass mask [H,r,r]; then k [B,T,H,K], v [B,T,H,V], beta [B,T,H].
CUDA tensors: q, k, v, beta in bf16 or float32, g, mask, h0 in float32; the calls run on torch's
current stream with a workspace from torch's allocator. CPU tensors: all float32 or all float64
(the per-token reference). The library is build/libgdp.so, or the file $GDP_LIB names.

`python3 scripts/gdp_ctypes.py` checks bf16 CUDA against the float64 CPU path (or, without a GPU,
float32 CPU against float64 CPU) and prints PASS/FAIL lines.
"""
import ctypes
import os

import torch

F32, F64, BF16 = 0, 1, 2  # DType (base/dtype.h)
HOUSEHOLDER, SPLIT = 0, 1  # GdpMode
_DTYPES = {torch.float32: F32, torch.float64: F64, torch.bfloat16: BF16}
_p = ctypes.c_void_p


class GdpDesc(ctypes.Structure):
    _fields_ = [("mode", ctypes.c_int), ("B", ctypes.c_int), ("T", ctypes.c_int), ("H", ctypes.c_int),
                ("K", ctypes.c_int), ("V", ctypes.c_int), ("n", ctypes.c_int), ("scale", ctypes.c_double),
                ("dtype", ctypes.c_int), ("cu_seqlens", _p), ("n_seqs", ctypes.c_int)]


class GdpForwardArgs(ctypes.Structure):  # saved, saved_bytes: left 0 here (the backward recomputes)
    _fields_ = [(name, _p) for name in ("q", "k", "v", "beta", "g", "mask", "h0", "o", "ht", "saved")] + [
        ("saved_bytes", ctypes.c_size_t)]


class GdpBackwardArgs(ctypes.Structure):
    _fields_ = [(name, _p) for name in ("q", "k", "v", "beta", "g", "mask", "h0", "d_o", "dht",
                                        "dq", "dk", "dv", "dbeta", "dg", "dmask", "dh0", "saved")]


_lib = None


def lib(path=None):
    """Loads libgdp.so once (path, else $GDP_LIB, else build/libgdp.so of this repository)."""
    global _lib
    if _lib is None:
        here = os.path.dirname(os.path.abspath(__file__))
        path = path or os.environ.get("GDP_LIB") or os.path.join(here, "..", "build", "libgdp.so")
        L = ctypes.CDLL(path)
        L.gdp_last_error.restype = ctypes.c_char_p
        for fn in ("gdp_forward_cpu", "gdp_backward_cpu"):
            getattr(L, fn).argtypes = [_p, _p]
        if hasattr(L, "gdp_forward_cuda"):  # absent from a CPU-only build
            for fn in ("gdp_forward_workspace_bytes", "gdp_backward_workspace_bytes"):
                getattr(L, fn).argtypes, getattr(L, fn).restype = [_p], ctypes.c_size_t
            for fn in ("gdp_forward_cuda", "gdp_backward_cuda"):
                getattr(L, fn).argtypes = [_p, _p, _p, ctypes.c_size_t, _p]
        _lib = L
    return _lib


def _ptr(t):
    return None if t is None else t.data_ptr()


def _call(name, desc, args, device):
    L = lib()
    if device.type == "cuda":
        if not hasattr(L, name + "_cuda"):
            raise RuntimeError(f"{name}: this libgdp.so was built without CUDA (build it where nvcc is)")
        size = getattr(L, name + "_workspace_bytes")(ctypes.byref(desc))
        ws = torch.empty(max(size, 1), dtype=torch.uint8, device=device)
        with torch.cuda.device(device):
            stream = torch.cuda.current_stream(device).cuda_stream
            status = getattr(L, name + "_cuda")(ctypes.byref(desc), ctypes.byref(args), ws.data_ptr(), size, stream)
    else:
        status = getattr(L, name + "_cpu")(ctypes.byref(desc), ctypes.byref(args))
    if status != 0:
        raise RuntimeError(f"{name} failed (status {status}): {L.gdp_last_error().decode()}")


def _check(name, t, shape, dtype, device):
    if tuple(t.shape) != shape or t.dtype != dtype or t.device != device or not t.is_contiguous():
        raise ValueError(f"{name}: got {t.dtype}{list(t.shape)} on {t.device}"
                         f"{'' if t.is_contiguous() else ' (not contiguous)'}; expected a contiguous "
                         f"{dtype}{list(shape)} on {device}")


def _describe(q, k, v, beta, g, mask, h0, scale):
    """The descriptor, after checking every tensor's shape, dtype, device and layout (the library
    trusts the pointers it is given)."""
    split = mask is not None
    B, T, H, K = q.shape
    n = mask.shape[-1] if split else k.shape[2]
    V = v.shape[-1]
    dt, cuda = q.dtype, q.is_cuda
    if dt not in _DTYPES or (cuda and dt == torch.float64) or (not cuda and dt == torch.bfloat16):
        raise TypeError(f"q is {dt} on {q.device}: use bf16 or float32 on CUDA, float32 or float64 on the CPU")
    f = torch.float32 if cuda else dt  # dtype of g, mask, h0, ht
    slot = () if split else (n,)
    want = {"q": (q, (B, T, H, K), dt), "k": (k, (B, T) + slot + (H, K), dt), "v": (v, (B, T) + slot + (H, V), dt),
            "beta": (beta, (B, T) + slot + (H,), dt), "g": (g, (B, T, H), f), "mask": (mask, (H, n, n), f),
            "h0": (h0, (B, H, K, V), f)}
    for name, (t, shape, dtype) in want.items():
        if t is not None:
            _check(name, t, shape, dtype, q.device)
    return GdpDesc(SPLIT if split else HOUSEHOLDER, B, T, H, K, V, n, scale, _DTYPES[dt], None, 0)


def forward(q, k, v, beta, g=None, h0=None, mask=None, scale=0.0):
    """o [B,T,H,V] and the final state ht [B,H,K,V]. scale 0 means K^-1/2."""
    desc = _describe(q, k, v, beta, g, mask, h0, scale)
    o = torch.empty(q.shape[:3] + v.shape[-1:], dtype=q.dtype, device=q.device)
    ht = torch.empty((desc.B, desc.H, desc.K, desc.V), dtype=torch.float32 if q.is_cuda else q.dtype,
                     device=q.device)
    _call("gdp_forward", desc, GdpForwardArgs(*map(_ptr, (q, k, v, beta, g, mask, h0, o, ht))), q.device)
    return o, ht


def backward(do, q, k, v, beta, g=None, h0=None, mask=None, dht=None, scale=0.0):
    """dq, dk, dv, dbeta, dg, dh0, dmask from do (and dht, the gradient of ht; None: zero), in
    forward's input order; None for an input that is None."""
    desc = _describe(q, k, v, beta, g, mask, h0, scale)
    do = do.contiguous()
    _check("do", do, q.shape[:3] + v.shape[-1:], q.dtype, q.device)
    if dht is not None:
        dht = dht.contiguous()
        _check("dht", dht, (desc.B, desc.H, desc.K, desc.V), torch.float32 if q.is_cuda else q.dtype, q.device)
    dq, dk, dv, dbeta = (torch.empty_like(t) for t in (q, k, v, beta))
    dg, dh0, dmask = (None if t is None else torch.empty_like(t) for t in (g, h0, mask))
    args = GdpBackwardArgs(*map(_ptr, (q, k, v, beta, g, mask, h0, do, dht, dq, dk, dv, dbeta, dg, dmask, dh0)))
    _call("gdp_backward", desc, args, q.device)
    return dq, dk, dv, dbeta, dg, dh0, dmask


class GatedDeltaProduct(torch.autograd.Function):
    """(o, ht) = GatedDeltaProduct.apply(q, k, v, beta, g, h0, mask, scale); backward via libgdp."""

    @staticmethod
    def forward(ctx, q, k, v, beta, g, h0, mask, scale):
        ctx.save_for_backward(q, k, v, beta, g, h0, mask)
        ctx.scale = scale
        ctx.set_materialize_grads(False)  # an unused output's gradient arrives as None
        return forward(q, k, v, beta, g, h0, mask, scale)

    @staticmethod
    def backward(ctx, do, dht):
        q, k, v, beta, g, h0, mask = ctx.saved_tensors
        if do is None:
            do = torch.zeros(q.shape[:3] + v.shape[-1:], dtype=q.dtype, device=q.device)
        return (*backward(do, q, k, v, beta, g, h0, mask, dht, ctx.scale), None)


def gated_deltaproduct(q, k, v, beta, g=None, h0=None, mask=None, scale=0.0):
    """Differentiable (o, ht); inputs are made contiguous."""
    q, k, v, beta, g, h0, mask = (None if t is None else t.contiguous() for t in (q, k, v, beta, g, h0, mask))
    return GatedDeltaProduct.apply(q, k, v, beta, g, h0, mask, scale)


# ---- self-check -------------------------------------------------------------------------------

def _inputs(B=2, T=100, H=2, K=64, V=64, n=2, seed=0):
    """Random householder inputs in float64 on the CPU: unit-norm keys, beta in (0, 2), g = logsigmoid."""
    gen = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    q = torch.nn.functional.normalize(r(B, T, H, K), dim=-1)
    k = torch.nn.functional.normalize(r(B, T, n, H, K), dim=-1)
    beta = 2 * torch.sigmoid(r(B, T, n, H))
    g = torch.nn.functional.logsigmoid(r(B, T, H) + 3)
    return {"q": q, "k": k, "v": r(B, T, n, H, V), "beta": beta, "g": g, "h0": 0.1 * r(B, H, K, V)}


def _naive(q, k, v, beta, g, h0):
    """docs/spec.md §1.1 token by token in plain torch: decay, then n rank-1 delta steps, then read."""
    S, out = h0, []
    for t in range(q.shape[1]):
        S = S * g[:, t].exp()[..., None, None]
        for j in range(k.shape[2]):
            kt, vt, bt = k[:, t, j], v[:, t, j], beta[:, t, j]
            S = S + bt[..., None, None] * kt[..., :, None] * (vt - torch.einsum("bhkv,bhk->bhv", S, kt))[..., None, :]
        out.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]) * q.shape[-1] ** -0.5)
    return torch.stack(out, 1), S


def _run(x, device, dtype, op=None):
    """o, ht and every input's gradient of sum(o * W) + sum(ht * Wh), through the autograd wrapper."""
    f = torch.float32 if device == "cuda" else dtype  # g and h0 dtype
    leaves = {name: t.to(device, dtype if name in ("q", "k", "v", "beta") else f, copy=True).requires_grad_()
              for name, t in x.items()}
    o, ht = (op or gated_deltaproduct)(**leaves)
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(o.shape, generator=gen).bfloat16().to(device, o.dtype)  # exact in every dtype
    wh = torch.randn(ht.shape, generator=gen).bfloat16().to(device, ht.dtype)
    ((o.float() * w.float()).sum() + (ht.float() * wh.float()).sum()).backward()
    return {"o": o, "ht": ht, **{"d" + name: t.grad for name, t in leaves.items()}}


def _rel(a, b):
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def self_check():
    failed, passed = 0, 0

    def report(ok, line):
        nonlocal failed, passed
        failed, passed = failed + (not ok), passed + ok
        print(f"{'PASS' if ok else 'FAIL'}: gdp_ctypes {line}")

    # the glue itself: libgdp's float64 CPU path against plain torch autograd of the recurrence
    small = _inputs(T=9, K=16, V=8)
    lib64, naive = _run(small, "cpu", torch.float64), _run(small, "cpu", torch.float64, _naive)
    e = max(_rel(lib64[name], naive[name]) for name in naive)
    report(e <= 1e-10, f"float64 CPU vs plain torch recurrence + autograd: max rel L2 {e:.1e} over "
           f"{', '.join(naive)} (<= 1e-10)")

    # split mode with an all-ones mask is Gated DeltaNet: householder mode with n = 1, same keys
    sp = {name: t[:, :, 0] if name in ("k", "v", "beta") else t for name, t in small.items()}
    H, r = sp["q"].shape[2], 4
    split = _run(sp, "cpu", torch.float64, lambda **a: gated_deltaproduct(**a, mask=torch.ones(H, r, r).double()))
    hh = _run({name: t[:, :, None] if name in ("k", "v", "beta") else t for name, t in sp.items()}, "cpu",
              torch.float64)
    e = max(_rel(split[name].reshape(hh[name].shape), hh[name]) for name in hh)
    report(e <= 1e-10, f"split mode (all-ones mask) vs householder n=1: max rel L2 {e:.1e} (<= 1e-10)")

    x = _inputs()
    ref = _run(x, "cpu", torch.float64)
    if torch.cuda.is_available():
        what, got, tol = "bf16 CUDA", _run(x, "cuda", torch.bfloat16), 2e-2
    else:
        what, got, tol = "float32 CPU (no GPU here)", _run(x, "cpu", torch.float32), 1e-4
    for name in ref:
        e = _rel(got[name], ref[name])
        report(e <= tol and got[name].isfinite().all().item(),
               f"{what} vs float64 CPU (B=2 T=100 H=2 K=V=64 n_h=2): {name} rel L2 {e:.2e} (<= {tol:g})")
    o = got["o"]
    try:  # a wrong shape is refused before the library sees the pointers
        forward(*[x[name].to(o.device, o.dtype) for name in ("q", "k", "v")], x["beta"][:, :1].to(o.device, o.dtype))
        report(False, "accepted beta of the wrong shape")
    except ValueError as e:
        report(True, f"refuses a wrong shape: {str(e)[:70]}...")
    try:  # the library's own checks come back as RuntimeError with gdp_last_error()'s words
        forward(*[x[name].to(o.device, o.dtype) for name in ("q", "k", "v", "beta")], scale=float("inf"))
        report(False, "libgdp accepted scale = inf")
    except RuntimeError as e:
        report(True, f"passes libgdp's error on: {e}")
    print(f"gdp_ctypes: {passed} passed, {failed} failed")
    return failed


if __name__ == "__main__":
    raise SystemExit(1 if self_check() else 0)
