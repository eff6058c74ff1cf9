#!/usr/bin/env python3
# tests/reference/flash_bf16_error.py: what error to expect from the bf16 attention kernels
# (attn_impl = flash: q, k, v, dy rounded to bf16 when staged, P and dS rounded to bf16 before
# their products, fp32 accumulation) against an fp64 reference, on the input distributions of
# tests/test_gpu_ops.c's test_attention (uniform [-1, 1) q, k, v, dy; qk-norm with weights
# 1 +- 0.3). The backward is fed the reference's lse and D, as the test feeds the CPU's.
# It sizes the test's bf16 bounds (TOL_BF16_FWD 2e-2, TOL_BF16_BWD 5e-2): run it where
# python3-torch is installed (not in CI): /usr/bin/python3 tests/reference/flash_bf16_error.py
import torch, math
torch.manual_seed(0)
def bf(x): return x.to(torch.bfloat16).to(torch.float32)
def relerr(a, r): return ((a.double() - r.double()).abs().max() / r.double().abs().max()).item()
def run(B, T, H, Hkv, hd, qknorm=True):
    G = H // Hkv
    q = torch.rand(B, H, T, hd) * 2 - 1
    k = torch.rand(B, Hkv, T, hd) * 2 - 1
    v = torch.rand(B, Hkv, T, hd) * 2 - 1
    if qknorm:
        q = q / q.pow(2).mean(-1, keepdim=True).add(1e-5).sqrt() * (1 + 0.3 * (torch.rand(hd) * 2 - 1))
        k = k / k.pow(2).mean(-1, keepdim=True).add(1e-5).sqrt() * (1 + 0.3 * (torch.rand(hd) * 2 - 1))
    dy = torch.rand(B, H, T, hd) * 2 - 1
    kk = k.repeat_interleave(G, 1); vv = v.repeat_interleave(G, 1)
    scale = 1 / math.sqrt(hd)
    mask = torch.ones(T, T).tril().bool()
    # fp64 reference with autograd
    qd, kd, vd = q.double().requires_grad_(), kk.double().requires_grad_(), vv.double().requires_grad_()
    s = (qd @ kd.transpose(-1, -2)) * scale
    s = s.masked_fill(~mask, float('-inf'))
    p = s.softmax(-1); y = p @ vd
    y.backward(dy.double())
    # emulation
    qb, kb, vb, dyb = bf(q), bf(kk), bf(vv), bf(dy)
    S = (qb @ kb.transpose(-1, -2)) * scale
    S = S.masked_fill(~mask, float('-inf'))
    lse = torch.logsumexp(S, -1, keepdim=True)
    P = torch.exp(S - lse)
    ye = bf(P) @ vb   # P rounded for PV (l from fp32 P: normalisation exact here)
    # the backward, from the reference's lse and D (as test_gpu_ops feeds it the CPU's)
    lse_ref = torch.logsumexp(s.detach(), -1, keepdim=True).float()
    D = (dy.double() * y.detach()).sum(-1, keepdim=True).float()
    P = torch.exp(S - lse_ref)
    dP = dyb @ vb.transpose(-1, -2)
    dS = P * (dP - D)
    dq = (bf(dS) @ kb) * scale
    dk = (bf(dS).transpose(-1, -2) @ qb) * scale
    dv = bf(P).transpose(-1, -2) @ dyb
    # GQA sums over the group
    dk = dk.view(B, Hkv, G, T, hd).sum(2); dv = dv.view(B, Hkv, G, T, hd).sum(2)
    rdk = kd.grad.view(B, Hkv, G, T, hd).sum(2); rdv = vd.grad.view(B, Hkv, G, T, hd).sum(2)
    print(f"B={B} T={T} H={H}/{Hkv} hd={hd}: y {relerr(ye, y):.2e}  lse {relerr(lse.squeeze(-1), torch.logsumexp(s.detach(), -1)):.2e}  "
          f"dq {relerr(dq, qd.grad):.2e}  dk {relerr(dk, rdk):.2e}  dv {relerr(dv, rdv):.2e}")
# the shapes of test_gpu_ops's flash cases (the last without qk-norm)
for args in [(2,100,4,2,64), (2,100,4,1,64), (1,64,2,2,64), (1,300,8,2,128), (2,129,4,4,128), (2,100,4,2,64,False)]:
    run(*args)
