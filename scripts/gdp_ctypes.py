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

A trained model, through build/libgdpmodel.so (api/gdp_model.h; $GDP_MODEL_LIB names another file);
needs numpy, not torch:

    m = gdp.Model("runs/a")                              # a checkpoint file or folder; device="cpu"
    m.generate("static int", max_tokens=40, temperature=0)          # -> bytes of the continuation
    m.generate(["a", "bc"], max_tokens=20, stop_token=m.eot, seed=3)  # a batch -> a list, same order
    b = m.batch(2, temperature=0.8, top_k=40, top_p=0.95, repetition_penalty=1.1, seed=1)
    b.prefill([m.encode("a"), m.encode("bc")]); b.logits(0); nxt = b.sample(); live = b.step(nxt)
"""
import ctypes
import os

try:
    import torch
except ImportError:  # the Model class needs numpy only; the op's wrappers below need torch
    torch = None

F32, F64, BF16 = 0, 1, 2  # DType (base/dtype.h)
HOUSEHOLDER, SPLIT = 0, 1  # GdpMode
_DTYPES = {torch.float32: F32, torch.float64: F64, torch.bfloat16: BF16} if torch else {}
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


class GatedDeltaProduct(torch.autograd.Function if torch else object):
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


# ---- the model API (build/libgdpmodel.so) ------------------------------------------------------

class GdpSampling(ctypes.Structure):  # api/gdp_model.h
    _fields_ = [("temperature", ctypes.c_double), ("top_k", ctypes.c_int), ("top_p", ctypes.c_double),
                ("repetition_penalty", ctypes.c_double), ("seed", ctypes.c_uint64)]


_model_lib = None


def model_lib(path=None):
    """Loads libgdpmodel.so once (path, else $GDP_MODEL_LIB, else build/libgdpmodel.so of this repository)."""
    global _model_lib
    if _model_lib is None:
        here = os.path.dirname(os.path.abspath(__file__))
        path = path or os.environ.get("GDP_MODEL_LIB") or os.path.join(here, "..", "build", "libgdpmodel.so")
        L = ctypes.CDLL(path)
        i32p, i64p, c = ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int64), ctypes
        sig = {"gdp_model_last_error": ([], c.c_char_p), "gdp_sampling_default": ([], GdpSampling),
               "gdp_model_load": ([c.c_char_p, c.c_char_p, c.c_char_p, c.POINTER(_p)], c.c_int),
               "gdp_model_free": ([_p], None), "gdp_model_vocab_size": ([_p], c.c_int),
               "gdp_model_eot": ([_p], c.c_int), "gdp_model_device": ([_p], c.c_char_p),
               "gdp_model_encode": ([_p, c.c_char_p, c.c_size_t, i32p, c.c_int64], c.c_int64),
               "gdp_model_token_bytes": ([_p, c.c_int32, c.POINTER(c.c_size_t)], c.POINTER(c.c_char)),
               "gdp_batch_new": ([_p, c.c_int, c.POINTER(GdpSampling), c.POINTER(_p)], c.c_int),
               "gdp_batch_free": ([_p], None), "gdp_batch_prefill": ([_p, i32p, i64p], c.c_int),
               "gdp_batch_sample": ([_p, i32p], c.c_int), "gdp_batch_step": ([_p, i32p], c.c_int),
               "gdp_batch_logits": ([_p, c.c_int], c.POINTER(c.c_float)),
               "gdp_batch_position": ([_p, c.c_int], c.c_int64)}
        for name, (args, res) in sig.items():
            fn = getattr(L, name)
            fn.argtypes, fn.restype = args, res
        _model_lib = L
    return _model_lib


def _checked(status, what):
    """status, or a RuntimeError with the library's reason when it is negative."""
    if status < 0:
        raise RuntimeError(f"{what}: {model_lib().gdp_model_last_error().decode(errors='replace')}")
    return status


def _i32(a):
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))


class _Handle:
    """Frees the library object behind self._h once: on close(), at the end of a with block, or when
    collected. Subclasses name the library's free function in _FREE."""

    _FREE = None
    _h = None

    def close(self):
        if self._h:
            getattr(self._L, self._FREE)(self._h)
            self._h = None

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Model(_Handle):
    """A trained model loaded from a checkpoint (a file, or a training folder's newest valid one) with its
    tokenizer (tokenizer=None: the one the checkpoint records, else bytes). device: cpu, cuda or auto."""

    _FREE = "gdp_model_free"

    def __init__(self, checkpoint, device="cpu", tokenizer=None, lib_path=None):
        import numpy  # here, not at the top: the op's wrappers need torch and not numpy
        self._np, self._L, self._h = numpy, model_lib(lib_path), None
        h = _p()
        enc = (lambda x: None if x is None else os.fsencode(x))
        _checked(self._L.gdp_model_load(enc(checkpoint), enc(device), enc(tokenizer), ctypes.byref(h)),
                 f"loading {checkpoint}")
        self._h = h
        self.vocab_size = self._L.gdp_model_vocab_size(h)  # logits per sequence
        self.eot = self._L.gdp_model_eot(h)  # the tokenizer's end-of-text token, or -1
        self.device = self._L.gdp_model_device(h).decode()

    def encode(self, text):
        """Token ids (int32 numpy array) of text (str, as UTF-8, or bytes)."""
        data = text.encode() if isinstance(text, str) else bytes(text)
        n = _checked(self._L.gdp_model_encode(self._h, data, len(data), None, 0), "encode")
        ids = self._np.empty(max(n, 1), dtype=self._np.int32)
        _checked(self._L.gdp_model_encode(self._h, data, len(data), _i32(ids), n), "encode")
        return ids[:n]

    def decode(self, ids):
        """The bytes of a sequence of token ids."""
        out, size = [], ctypes.c_size_t()
        for t in ids:
            p = self._L.gdp_model_token_bytes(self._h, int(t), ctypes.byref(size))
            if not p:
                _checked(-1, "decode")
            out.append(ctypes.string_at(p, size.value))
        return b"".join(out)

    def batch(self, n, temperature=0.8, top_k=0, top_p=1.0, repetition_penalty=1.0, seed=1):
        """A Batch of n sequences with these sampling settings (gdp generate's flags and defaults)."""
        return Batch(self, n, GdpSampling(temperature, top_k, top_p, repetition_penalty, seed))

    def generate(self, prompts, max_tokens=128, stop_token=None, **sampling):
        """The continuation (bytes) of a prompt, or a list of them for a list of prompts, each ending at
        max_tokens or before stop_token; the same text gdp generate prints after the prompt."""
        one = isinstance(prompts, (str, bytes))
        prompts = [prompts] if one else list(prompts)
        with self.batch(len(prompts), **sampling) as b:
            b.prefill([self.encode(p) for p in prompts])
            made = [[] for _ in prompts]
            live = len(prompts)
            while live:
                nxt = b.sample()
                for i, t in enumerate(nxt):
                    if t < 0:
                        continue
                    if t == stop_token or len(made[i]) == max_tokens:
                        nxt[i] = -1
                    else:
                        made[i].append(int(t))
                        if len(made[i]) == max_tokens:
                            nxt[i] = -1  # its last token needs no step
                live = b.step(nxt)
        out = [self.decode(m) for m in made]
        return out[0] if one else out


class Batch(_Handle):
    """n sequences of a Model: prefill(prompts), then sample() and step(tokens) until every sequence has
    ended (a token < 0 given to step ends its sequence)."""

    _FREE = "gdp_batch_free"

    def __init__(self, model, n, sampling):
        self._m, self._L, self._np, self.n, self._h = model, model._L, model._np, n, None
        h = _p()
        _checked(self._L.gdp_batch_new(model._h, n, ctypes.byref(sampling), ctypes.byref(h)), "new batch")
        self._h = h

    def prefill(self, prompts):
        """Starts every sequence over from its prompt (n sequences of token ids, any lengths >= 1)."""
        if len(prompts) != self.n:
            raise ValueError(f"prefill: {len(prompts)} prompts for a batch of {self.n}")
        np = self._np
        ids = np.ascontiguousarray(np.concatenate([np.asarray(p, dtype=np.int32).ravel() for p in prompts]))
        lens = np.ascontiguousarray([len(np.asarray(p).ravel()) for p in prompts], dtype=np.int64)
        _checked(self._L.gdp_batch_prefill(self._h, _i32(ids), lens.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))),
                 "prefill")

    def sample(self):
        """A token per sequence (int32 numpy array; -1 for an ended one)."""
        nxt = self._np.empty(self.n, dtype=self._np.int32)
        _checked(self._L.gdp_batch_sample(self._h, _i32(nxt)), "sample")
        return nxt

    def step(self, tokens):
        """Every live sequence consumes its token (< 0: it ends instead); returns how many are live."""
        t = self._np.ascontiguousarray(tokens, dtype=self._np.int32)
        if t.shape != (self.n,):
            raise ValueError(f"step: {t.shape} tokens for a batch of {self.n}")
        return _checked(self._L.gdp_batch_step(self._h, _i32(t)), "step")

    def logits(self, i):
        """Sequence i's logits (a copy), or None when it has ended."""
        p = self._L.gdp_batch_logits(self._h, i)
        return self._np.ctypeslib.as_array(p, (self._m.vocab_size,)).copy() if p else None

    def position(self, i):
        """Tokens sequence i has consumed."""
        return self._L.gdp_batch_position(self._h, i)


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
    if torch is None:
        raise SystemExit("gdp_ctypes: the op's self-check needs torch (pip install torch)")
    raise SystemExit(1 if self_check() else 0)
