#!/usr/bin/env python3
# tests/reference/gdn_chunk_check.py: the chunked (WY) gated delta rule that
# kernels/cuda/deltanet_chunk.cu implements, checked in float64 with numpy (no torch):
#   1. its forward equals the recurrence (transformers' torch_recurrent_gated_delta_rule);
#   2. its backward (the formulas in deltanet_chunk.cu's header: dVn, dS', dRv, dRk, dA, G, H,
#      dbeta, dc and the reverse cumulative sum for dg) equals central differences of the
#      recurrence, for q, k, v, g and beta, at mid, strong and slow decays, over chunks with a
#      partial last one;
#   3. the error of the bf16 build's forward: the same computation with every GEMM operand
#      rounded to bf16 where the kernels round it (staged tiles, W, Kc, Tinv, Vn and the states
#      stored between kernels), against float64, on tests/test_gpu_ops_bf16.c's input
#      distributions: what TOL_GDN_BF16_FWD's derivation predicts (~5e-3 of max |ref|).
# Not part of make test (it checks the math, not the code; the kernels are tested against the
# CPU in cudaemu_gdn_chunk*). Run: /usr/bin/python3 tests/reference/gdn_chunk_check.py (~10 s).
import sys
import numpy as np

C = 64


def bf(x):
    """x rounded to bf16 (nearest even) and back, elementwise."""
    a = np.asarray(x, dtype=np.float32)
    u = a.view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def recurrent(q, k, v, g, beta, scale):
    T, dk = k.shape
    S = np.zeros((dk, v.shape[1]))
    o = np.zeros_like(v)
    for t in range(T):
        S = np.exp(g[t]) * S
        u = S.T @ k[t]
        S = S + np.outer(k[t], beta[t] * (v[t] - u))
        o[t] = scale * S.T @ q[t]
    return o, S


def chunked(q, k, v, g, beta, scale, r=lambda x: x, keep=False):
    """The kernels' forward; r rounds an operand (identity: float64; bf: the bf16 build)."""
    T, dk = k.shape
    S = np.zeros((dk, v.shape[1]))
    o = np.zeros_like(v)
    saved = []
    for c0 in range(0, T, C):
        sl = slice(c0, min(T, c0 + C))
        Q, K, V, b = q[sl], k[sl], v[sl], beta[sl]
        c = np.cumsum(g[sl])
        Gam = np.exp(np.minimum(c[:, None] - c[None, :], 0.0))   # used for j <= i only
        Kr = r(K)
        A = np.tril(b[:, None] * (Kr @ Kr.T) * Gam, -1)
        Tinv = np.linalg.inv(np.eye(len(b)) + A)
        Tr = r(Tinv)
        W = r(Tr @ r(b[:, None] * V))
        Kc = r(Tr @ r((b * np.exp(c))[:, None] * K))
        Sr = r(S)
        Vn = r(W - Kc @ Sr)
        Qr = r(Q)
        P = r(np.tril((Qr @ Kr.T) * Gam))
        o[sl] = scale * (np.exp(c)[:, None] * (Qr @ Sr) + P @ Vn)
        if keep:
            saved.append((S.copy(), c, Gam, A, Tinv, W, Kc, Vn, np.tril((Q @ K.T) * Gam)))
        S = np.exp(c[-1]) * S + r(np.exp(c[-1] - c)[:, None] * K).T @ Vn
    return o, S, saved


def chunked_backward(q, k, v, g, beta, dO, scale):
    """deltanet_chunk.cu's backward formulas, float64."""
    _, _, saved = chunked(q, k, v, g, beta, scale, keep=True)
    dq, dk_, dv_, dg, db = (np.zeros_like(x) for x in (q, k, v, g, beta))
    dSn = np.zeros((k.shape[1], v.shape[1]))
    T = k.shape[0]
    starts = list(range(0, T, C))
    for ci in reversed(range(len(starts))):
        sl = slice(starts[ci], min(T, starts[ci] + C))
        Q, K, V, b, dOc = q[sl], k[sl], v[sl], beta[sl], dO[sl]
        S, c, Gam, A, Tinv, W, Kc, Vn, P = saved[ci]
        L = len(b)
        ec, cL = np.exp(c), c[-1]
        Qd, Kd = ec[:, None] * Q, np.exp(cL - c)[:, None] * K
        dVn = scale * P.T @ dOc + Kd @ dSn
        dP = np.tril(scale * dOc @ Vn.T)
        dKd = Vn @ dSn.T
        dQd = scale * dOc @ S.T
        dKc = -dVn @ S.T
        dSprev = np.exp(cL) * dSn + scale * Qd.T @ dOc - Kc.T @ dVn
        dRv, dRk = Tinv.T @ dVn, Tinv.T @ dKc
        dA = np.tril(-(dRv @ W.T + dRk @ Kc.T), -1)
        G = dA * b[:, None] * Gam
        H = np.tril(dP * Gam)
        KK = K @ K.T
        dk_[sl] = G @ K + G.T @ K + H.T @ Q + (b * ec)[:, None] * dRk + np.exp(cL - c)[:, None] * dKd
        dq[sl] = H @ K + ec[:, None] * dQd
        dv_[sl] = b[:, None] * dRv
        db[sl] = (dRv * V).sum(1) + ec * (dRk * K).sum(1) + np.tril(dA * KK * Gam, -1).sum(1)
        dc = ((dA * A).sum(1) - (dA * A).sum(0) + (dP * P).sum(1) - (dP * P).sum(0) + b * ec * (dRk * K).sum(1)
              + (Qd * dQd).sum(1) - (Kd * dKd).sum(1))
        dc[L - 1] += (Kd * dKd).sum() + np.exp(cL) * (S * dSn).sum()
        dg[sl] = np.cumsum(dc[::-1])[::-1]
        dSn = dSprev
    return dq, dk_, dv_, dg, db


def inputs(rng, T, dk, dv, decay):
    nrm = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)
    q, k = nrm(rng.uniform(-1, 1, (T, dk))), nrm(rng.uniform(-1, 1, (T, dk)))
    v = rng.uniform(-1, 1, (T, dv))
    r = rng.uniform(0, 1, T)
    g = {"mid": -0.05 - 0.4 * r, "strong": -2.0 - 10.0 * r, "slow": -0.02 * r}[decay]
    beta = 0.5 + 0.45 * rng.uniform(-1, 1, T)
    return q, k, v, g, beta


def main():
    rng = np.random.default_rng(7)
    ok = True
    for decay in ("mid", "strong", "slow"):
        # 1 + 2: small heads over 3 chunks of 8 (C scaled down for the finite differences)
        global C
        C, T, dk, dv = 8, 21, 5, 3
        q, k, v, g, beta = inputs(rng, T, dk, dv, decay)
        scale = 1 / np.sqrt(dk)
        w = rng.uniform(-1, 1, (T, dv))
        o1, s1 = recurrent(q, k, v, g, beta, scale)
        o2, s2, _ = chunked(q, k, v, g, beta, scale)
        e = max(abs(o1 - o2).max() / abs(o1).max(), abs(s1 - s2).max() / abs(s1).max())
        print("%-6s forward chunked vs recurrent: %.1e" % (decay, e))
        ok &= e < 1e-12
        grads = chunked_backward(q, k, v, g, beta, w, scale)
        xs = [q, k, v, g, beta]
        for name, x, gr in zip("q k v g beta".split(), xs, grads):
            fd = np.zeros_like(x)
            h = 1e-6
            for i in np.ndindex(x.shape):
                x0 = x[i]
                x[i] = x0 + h
                lp = (recurrent(*xs, scale)[0] * w).sum()
                x[i] = x0 - h
                lm = (recurrent(*xs, scale)[0] * w).sum()
                x[i] = x0
                fd[i] = (lp - lm) / (2 * h)
            e = abs(fd - gr).max() / abs(fd).max()
            print("%-6s d%-4s vs central differences: %.1e" % (decay, name, e))
            ok &= e < 1e-6   # h^2 truncation and 1e-16 / h cancellation: ~1e-10 expected
        # 3: the bf16 build's forward error, test_gpu_ops_bf16's shapes (dk, dv 64 / 128)
        C = 64
        for T, dk, dv in ((130, 64, 64), (100, 128, 128), (70, 128, 64), (129, 64, 128)):
            q, k, v, g, beta = inputs(rng, T, dk, dv, decay)
            scale = 1 / np.sqrt(dk)
            o, s, _ = chunked(q, k, v, g, beta, scale)
            ob, sb, _ = chunked(q, k, v, g, beta, scale, r=bf)
            print("%-6s bf16 operands, T %d dk %d dv %d: o %.1e, state %.1e (of max |ref|)" % (
                decay, T, dk, dv, abs(ob - o).max() / abs(o).max(), abs(sb - s).max() / abs(s).max()))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
