#!/usr/bin/env python3
"""Float64 reference vectors for the Gated DeltaProduct op (tests/data/gdp_vectors.h5).

The op is computed token by token from the recurrences of docs/spec.md §1.1 (householder mode) and
§1.2 (split mode), in NumPy float64, with a hand-written reverse pass: nothing here shares code with
the C library, so a test that matches these numbers checks the C code against an independent
derivation. The tests only read the file; this script is not run by them.

    python3 scripts/make_vectors.py [OUT.h5] [--seed N]    write the cases (default tests/data/gdp_vectors.h5)
    python3 scripts/make_vectors.py --check FILE.h5        recompute o, ht and every gradient of each case
                                                           of FILE from its inputs and print the worst
                                                           relative L2 error (exit 1 above 1e-10)

Needs numpy and h5py. Layout of the file (one group per case): docs/spec.md, "Reference vectors".
"""
import argparse
import sys

import h5py
import numpy as np


# ---- householder mode (docs/spec.md §1.1) -------------------------------------------------------

def householder_fwd(q, k, v, g, beta, h0, scale):
    """q [B,T,H,K], k [B,T,n,H,K], v [B,T,n,H,V], g [B,T,H], beta [B,T,n,H], h0 [B,H,K,V].
    Returns o [B,T,H,V], ht, and the states the reverse pass needs: before each token's decay and
    before each of its n steps."""
    B, T, n, H, K = k.shape
    S = h0.copy()
    o = np.empty((B, T, H, v.shape[-1]))
    before_decay, before_step = [], []
    for t in range(T):
        before_decay.append(S)
        S = S * np.exp(g[:, t])[..., None, None]
        steps = []
        for j in range(n):
            steps.append(S)
            kk, vv, bb = k[:, t, j], v[:, t, j], beta[:, t, j]
            u = vv - np.einsum('bhkv,bhk->bhv', S, kk)             # v - S^T k
            S = S + bb[..., None, None] * np.einsum('bhk,bhv->bhkv', kk, u)
        before_step.append(steps)
        o[:, t] = scale * np.einsum('bhkv,bhk->bhv', S, q[:, t])
    return o, S, (before_decay, before_step)


def householder_bwd(q, k, v, g, beta, h0, scale, saved, S_T, do, dht):
    before_decay, before_step = saved
    B, T, n, H, K = k.shape
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    dg, dbeta = np.zeros_like(g), np.zeros_like(beta)
    dS = dht.copy()
    S_after = S_T                                   # the state after token t's last step
    for t in reversed(range(T)):
        # o_t = scale S^T q_t
        dq[:, t] = scale * np.einsum('bhkv,bhv->bhk', S_after, do[:, t])
        dS = dS + scale * np.einsum('bhk,bhv->bhkv', q[:, t], do[:, t])
        for j in reversed(range(n)):
            S = before_step[t][j]
            kk, vv, bb = k[:, t, j], v[:, t, j], beta[:, t, j]
            u = vv - np.einsum('bhkv,bhk->bhv', S, kk)
            # S' = S + b k u^T,  u = v - S^T k
            dbeta[:, t, j] = np.einsum('bhk,bhkv,bhv->bh', kk, dS, u)
            du = bb[..., None] * np.einsum('bhkv,bhk->bhv', dS, kk)
            dk[:, t, j] = (bb[..., None] * np.einsum('bhkv,bhv->bhk', dS, u)
                           - np.einsum('bhkv,bhv->bhk', S, du))
            dv[:, t, j] = du
            dS = dS - np.einsum('bhk,bhv->bhkv', kk, du)
        # S_decayed = e^g S_prev: dg = <dS, S_decayed>
        S_dec = before_step[t][0]
        dg[:, t] = np.einsum('bhkv,bhkv->bh', dS, S_dec)
        dS = dS * np.exp(g[:, t])[..., None, None]
        S_after = before_decay[t]
    return dict(q=dq, k=dk, v=dv, g=dg, beta=dbeta, h0=dS)


# ---- split mode (docs/spec.md §1.2) -------------------------------------------------------------

def split_fwd(q, k, v, g, beta, mask, h0, scale):
    """q, k [B,T,H,K], v [B,T,H,V], g, beta [B,T,H], mask [H,r,r], h0 [B,H,K,V].
    Slice a of the state is written from every slice b read through M[a,b]:
    S^(a) <- e^g S^(a) + beta k^(a) (v - sum_b M[a,b] k^(b)T e^g S^(b))^T.
    Returns o, ht and each token's decayed state (what the reverse pass needs)."""
    B, T, H, K = k.shape
    r = mask.shape[-1]
    d = K // r
    V = v.shape[-1]
    S = h0.copy()
    o = np.empty((B, T, H, V))
    decayed = []
    for t in range(T):
        S = S * np.exp(g[:, t])[..., None, None]
        decayed.append(S)
        S = split_step(S, k[:, t], v[:, t], beta[:, t], mask)
        o[:, t] = scale * np.einsum('bhkv,bhk->bhv', S, q[:, t])
    return o, S, decayed


def split_parts(Sd, kt, vt, mask):
    B, H, K = kt.shape
    r = mask.shape[-1]
    kb = kt.reshape(B, H, r, K // r)
    Sb = Sd.reshape(B, H, r, K // r, Sd.shape[-1])
    proj = np.einsum('bhrd,bhrdv->bhrv', kb, Sb)                     # k^(b)T S^(b)
    delta = vt[:, :, None, :] - np.einsum('hac,bhcv->bhav', mask, proj)
    return kb, Sb, proj, delta


def split_step(Sd, kt, vt, bt, mask):
    """One token's update of the decayed state Sd."""
    kb, Sb, _, delta = split_parts(Sd, kt, vt, mask)
    return (Sb + bt[..., None, None, None] * np.einsum('bhad,bhav->bhadv', kb, delta)).reshape(Sd.shape)


def split_bwd(q, k, v, g, beta, mask, h0, scale, decayed, S_T, do, dht):
    B, T, H, K = k.shape
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    dg, dbeta, dmask = np.zeros_like(g), np.zeros_like(beta), np.zeros_like(mask)
    dS = dht.copy()
    S_after = S_T                                   # the state after token t
    for t in reversed(range(T)):
        dq[:, t] = scale * np.einsum('bhkv,bhv->bhk', S_after, do[:, t])
        dS = dS + scale * np.einsum('bhk,bhv->bhkv', q[:, t], do[:, t])
        Sd = decayed[t]
        kb, Sb, proj, delta = split_parts(Sd, k[:, t], v[:, t], mask)
        dSb = dS.reshape(Sb.shape)
        bt = beta[:, t]
        # S^(a) = Sd^(a) + b k^(a) delta_a^T
        dbeta[:, t] = np.einsum('bhad,bhadv,bhav->bh', kb, dSb, delta)
        dkb = bt[..., None, None] * np.einsum('bhadv,bhav->bhad', dSb, delta)
        ddelta = bt[..., None, None] * np.einsum('bhadv,bhad->bhav', dSb, kb)
        dv[:, t] = ddelta.sum(axis=2)
        # delta_a = v - sum_c M[a,c] proj_c,  proj_c = k^(c)T Sd^(c)
        dmask -= np.einsum('bhav,bhcv->hac', ddelta, proj)
        dproj = -np.einsum('hac,bhav->bhcv', mask, ddelta)
        dkb += np.einsum('bhcdv,bhcv->bhcd', Sb, dproj)
        dSd = (dSb + np.einsum('bhcd,bhcv->bhcdv', kb, dproj)).reshape(Sd.shape)
        dk[:, t] = dkb.reshape(B, H, K)
        # Sd = e^g S_prev
        dg[:, t] = np.einsum('bhkv,bhkv->bh', dSd, Sd)
        dS = dSd * np.exp(g[:, t])[..., None, None]
        if t > 0:
            S_after = split_step(decayed[t - 1], k[:, t - 1], v[:, t - 1], beta[:, t - 1], mask)
    return dict(q=dq, k=dk, v=dv, g=dg, beta=dbeta, mask=dmask, h0=dS)


# ---- one case: forward, reverse pass with L = sum(o*do) + sum(ht*dht) ---------------------------

def run_case(mode, ins, scale, do, dht):
    if mode == 'householder':
        o, ht, saved = householder_fwd(ins['q'], ins['k'], ins['v'], ins['g'], ins['beta'], ins['h0'], scale)
        grads = householder_bwd(ins['q'], ins['k'], ins['v'], ins['g'], ins['beta'], ins['h0'], scale,
                                saved, ht, do, dht)
    else:
        o, ht, decayed = split_fwd(ins['q'], ins['k'], ins['v'], ins['g'], ins['beta'], ins['mask'],
                                   ins['h0'], scale)
        grads = split_bwd(ins['q'], ins['k'], ins['v'], ins['g'], ins['beta'], ins['mask'], ins['h0'],
                          scale, decayed, ht, do, dht)
    return o, ht, grads


def l2n(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def logsigmoid(x):
    return -np.logaddexp(0.0, -x)


def write_case(f, rng, name, mode, B, T, H, K, V, n, neg=True, gate=True, use_h0=True, mask_kind='random'):
    r = n
    q = rng.standard_normal((B, T, H, K))
    if mode == 'householder':
        k = l2n(rng.standard_normal((B, T, n, H, K)))
        v = rng.standard_normal((B, T, n, H, V))
        beta = rng.random((B, T, n, H)) * (2.0 if neg else 1.0)
    else:
        k = l2n(rng.standard_normal((B, T, H, r, K // r))).reshape(B, T, H, K)   # unit norm per slice
        v = rng.standard_normal((B, T, H, V))
        beta = rng.random((B, T, H)) * (2.0 if neg else 1.0)
    g = logsigmoid(rng.standard_normal((B, T, H)) + 2.0) if gate else np.zeros((B, T, H))
    h0 = 0.5 * rng.standard_normal((B, H, K, V)) if use_h0 else np.zeros((B, H, K, V))
    scale = K ** -0.5
    ins = dict(q=q, k=k, v=v, g=g, beta=beta, h0=h0)
    if mode == 'split':
        eye = np.broadcast_to(np.eye(r), (H, r, r))
        ins['mask'] = eye.copy() if mask_kind == 'identity' else eye + 0.3 * rng.standard_normal((H, r, r))
    do = rng.standard_normal((B, T, H, V))
    dht = rng.standard_normal((B, H, K, V))
    o, ht, grads = run_case(mode, ins, scale, do, dht)
    grp = f.create_group(name)
    for nm, x in ins.items():
        grp.create_dataset(nm, data=x)
        grp.create_dataset('d' + nm, data=grads[nm])
    for nm, x in dict(do=do, dht=dht, o=o, ht=ht).items():
        grp.create_dataset(nm, data=x)
    for a, val in dict(mode=mode, B=B, T=T, H=H, K=K, V=V, n=n, scale=scale,
                       gate=int(gate), h0=int(use_h0)).items():
        grp.attrs[a] = val
    print(f'{name:20s} {mode:11s} B {B} T {T} H {H} K {K} V {V} n {n}  |o| {np.linalg.norm(o):.6f}', flush=True)


CASES = [  # name, mode, B, T, H, K, V, n, options: T not a multiple of 64, n 1..4, no gate, no h0,
           # beta only in (0,1), identity and random masks, K != V
    ('hh_n1', 'householder', 2, 70, 2, 32, 32, 1, {}),
    ('hh_n2', 'householder', 2, 100, 2, 32, 48, 2, {}),
    ('hh_n3_nogate', 'householder', 1, 67, 3, 64, 32, 3, dict(gate=False)),
    ('hh_n2_pos_noh0', 'householder', 2, 130, 2, 64, 64, 2, dict(neg=False, use_h0=False)),
    ('split_r2_identity', 'split', 2, 100, 2, 32, 32, 2, dict(mask_kind='identity')),
    ('split_r2', 'split', 2, 100, 2, 64, 32, 2, {}),
    ('split_r4', 'split', 1, 150, 2, 64, 64, 4, {}),
]


def self_check(rng):
    """docs/spec.md §1.2: split mode with M = I is householder mode with n = r, zero-padded slice
    keys and shared v, beta; M = all-ones is Gated DeltaNet (householder n = 1)."""
    B, T, H, K, V, r = 1, 20, 2, 16, 8, 2
    q, k = rng.standard_normal((B, T, H, K)), rng.standard_normal((B, T, H, K))
    v = rng.standard_normal((B, T, H, V))
    g = logsigmoid(rng.standard_normal((B, T, H)))
    beta = rng.random((B, T, H)) * 2
    h0 = rng.standard_normal((B, H, K, V))
    o1, s1, _ = split_fwd(q, k, v, g, beta, np.broadcast_to(np.eye(r), (H, r, r)), h0, 0.25)
    kp = np.zeros((B, T, r, H, K))
    for a in range(r):
        kp[:, :, a, :, a * K // r:(a + 1) * K // r] = k[..., a * K // r:(a + 1) * K // r]
    o2, s2, _ = householder_fwd(q, kp, np.repeat(v[:, :, None], r, axis=2), g,
                                np.repeat(beta[:, :, None], r, axis=2), h0, 0.25)
    o3, s3, _ = split_fwd(q, k, v, g, beta, np.ones((H, r, r)), h0, 0.25)
    o4, s4, _ = householder_fwd(q, k[:, :, None], v[:, :, None], g, beta[:, :, None], h0, 0.25)
    err = max(np.abs(o1 - o2).max(), np.abs(s1 - s2).max(), np.abs(o3 - o4).max(), np.abs(s3 - s4).max())
    print(f'self-check: split(M = I) = householder(padded keys), split(M = 1) = n 1: max |diff| {err:.1e}')
    return err < 1e-12


def check(path):
    worst = 0.0
    with h5py.File(path, 'r') as f:
        for name, grp in f.items():
            mode = grp.attrs['mode']
            mode = mode.decode() if isinstance(mode, bytes) else str(mode)
            names = ['q', 'k', 'v', 'g', 'beta', 'h0'] + (['mask'] if mode == 'split' else [])
            ins = {nm: grp[nm][()] for nm in names}
            o, ht, grads = run_case(mode, ins, float(grp.attrs['scale']), grp['do'][()], grp['dht'][()])
            got = dict(o=o, ht=ht, **{'d' + nm: x for nm, x in grads.items()})
            errs = {nm: np.linalg.norm(x - grp[nm][()]) / max(np.linalg.norm(grp[nm][()]), 1e-300)
                    for nm, x in got.items()}
            case_worst = max(errs.values())
            worst = max(worst, case_worst)
            print(f'{name:20s} worst rel L2 {case_worst:.1e} ({max(errs, key=errs.get)})')
    print(f'{path}: worst rel L2 {worst:.1e}: {"PASS" if worst <= 1e-10 else "FAIL"}')
    return worst <= 1e-10


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('out', nargs='?', default='tests/data/gdp_vectors.h5')
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--check', metavar='FILE', help='recompute every case of FILE and compare')
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    if not self_check(rng):
        sys.exit('self-check failed')
    if a.check:
        sys.exit(0 if check(a.check) else 1)
    with h5py.File(a.out, 'w') as f:
        f.attrs['description'] = ('Gated DeltaProduct reference vectors, float64, from per-token recurrences '
                                  '(scripts/make_vectors.py). Loss = sum(o*do) + sum(ht*dht); d<name> is its '
                                  'gradient w.r.t. <name>.')
        for name, mode, B, T, H, K, V, n, opt in CASES:
            write_case(f, rng, name, mode, B, T, H, K, V, n, **opt)
    print('wrote', a.out)


if __name__ == '__main__':
    main()
