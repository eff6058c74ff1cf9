#!/usr/bin/python3
"""gpu_roofline.py: the H200 roofline of one training step of the CUDA bf16 build, per kernel.

For each config (.ini, read with the project's defaults for missing keys) at a batch B x T, it
lists every kernel launch of one step as bench_gpu times it (zero the gradients, forward,
backward, gradient norm, AdamW; one micro-batch), in the order and with the storage types of
model/gpt.c and kernels/cuda (bf16 activations and weight copies, fp32 residual stream, master
weights, weight gradients and AdamW state), and for each:
  FLOPs   the arithmetic it executes (GEMMs 2MNK; attention as the kernels run it, below)
  bytes   the fewest bytes it must move through HBM: each input read once, each output written
          once (K/V re-reads of the flash kernels are assumed to hit the 60 MB L2)
  time    max(FLOPs / peak, bytes / bandwidth): tensor-core peak for GEMMs and the bf16 attention
          kernels, the fp32 CUDA-core peak for the fp32 attention and the elementwise kernels
Sums give the predicted step time; MFU = the model's FLOPs (gpt_flops_per_token: 6 x matmul
parameters + 6 x layers x T x heads x head_dim, per token) / (step time x bf16 dense peak).

Peaks (NVIDIA's published figures for the H200 SXM): bf16 dense tensor core 989.4 TFLOP/s
(1,979 with 2:4 sparsity), fp32 66.9 TFLOP/s, HBM3e 4.8 TB/s, 141 GB; 132 SMs, 60 MB L2. A
second column uses the ceilings this workplace measured on an H200 (device notes, KINDS.md,
2026-10-28 / 11-04): a device-to-device copy at ~4.3 TB/s and an 8192^3 bf16 GEMM at ~780
TFLOP/s on random data; and for attention the efficiency class of its instruction path (below).

Attention FLOPs, executed: the kernels tile 64 x 64, so a causal pass over T computes
nT(nT+1)/2 tiles (nT = T/64), not T^2/2; per tile of one head one matmul is 2*64*64*hd FLOPs.
Forward: 2 matmuls (S = QK^T, PV). Backward of attention_mma.cu: a dQ kernel (S, dP, dQ: 3) and a
dK/dV kernel (S, dP, dV, dK: 4), 7 in all, because each output row has one writer (no atomics,
deterministic); cuDNN's / FlashAttention-2's backward computes S and dP once (5) and
accumulates dQ across key blocks. The model's FLOP count (MFU) uses 2 (fwd) + 4 (bwd).

Everything here is a prediction from counts and datasheet rates: nothing has run on a GPU yet.
Usage: scripts/gpu_roofline.py [--markdown] [--json PATH] [--detail] [CONFIG.ini[:B:T] ...]
       (default: configs/gpt2_124m.ini:16:1024, configs/paper/sink_124m_{baseline,gated}.ini:16:1024,
        configs/paper/dense_1p7b_{baseline,gated}.ini at their own B x T = 4 x 4096)
Python 3 standard library only.
"""
import argparse
import configparser
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# NVIDIA's published H200 SXM figures (datasheet / product page)
PEAK_BF16 = 989.4e12       # dense bf16 tensor core FLOP/s (1,979 TFLOP/s with sparsity)
PEAK_FP32 = 66.9e12        # fp32 CUDA-core FLOP/s
HBM_BW = 4.8e12            # bytes/s, HBM3e
# measured on this workplace's H200s (device notes KINDS.md): copy bandwidth, cuBLAS-class bf16 GEMM
MEAS_BW = 4.3e12
MEAS_GEMM = 780e12
# attention efficiency classes (fraction of the bf16 dense peak), from published H100 figures
# (FlashAttention-3 paper, Shah et al. 2024, arXiv:2407.08608): FlashAttention-2, an mma.sync kernel
# like attention_mma.cu, reaches ~35% of H100's peak; wgmma + TMA kernels (FlashAttention-3,
# cuDNN 9's SDPA) 50-75% at T >= 1k. Used only in the "attainable" column, and said so.
EFF_MMA_SYNC = 0.35
EFF_WGMMA = 0.60

A = 2   # act_t bytes in the bf16 build
F4 = 4


def load_config(path):
    cp = configparser.ConfigParser(inline_comment_prefixes=(";", "#"), comment_prefixes=(";", "#"),
                                   strict=False)
    cp.read(path)

    def get(sec, key, default, conv=int):
        try:
            return conv(cp.get(sec, key))
        except (configparser.NoSectionError, configparser.NoOptionError):
            return default
    m = {}
    m["name"] = os.path.splitext(os.path.basename(path))[0]
    m["path"] = path
    m["vocab"] = get("model", "vocab_size", 50257)
    m["L"] = get("model", "n_layer", 12)
    m["d"] = get("model", "d_model", 768)
    m["H"] = get("model", "n_head", 12)
    m["Hkv"] = get("model", "n_kv_head", 0) or m["H"]
    m["hd"] = get("model", "head_dim", 0) or m["d"] // m["H"]
    m["mlp"] = get("model", "mlp", "swiglu", str)
    m["F"] = get("model", "d_ff", 0) or (4 * m["d"] if m["mlp"] == "gelu" else (8 * m["d"] // 3 + 63) // 64 * 64)
    m["pos"] = get("model", "pos", "rope", str)
    m["norm"] = get("model", "norm", "rmsnorm", str)
    m["qk_norm"] = get("model", "qk_norm", "false", str).lower() in ("1", "true", "yes", "on")
    m["tied"] = get("model", "tie_embeddings", "true", str).lower() in ("1", "true", "yes", "on")
    m["gate"] = get("model", "attn_gate", "none", str)
    m["gate_pos"] = get("model", "gate_position", "sdpa", str)
    m["max_T"] = get("model", "max_seq_len", 1024)
    m["B"] = get("train", "batch_size", 4)
    m["T"] = get("train", "seq_len", 64)
    m["tokens_per_step"] = get("train", "tokens_per_step", 0)
    m["attn_impl"] = get("train", "attn_impl", "fused", str)
    m["moe"] = get("moe", "n_expert", 0)
    m["Vp"] = (m["vocab"] + 127) // 128 * 128
    return m


def gate_cols(m):
    g, H, Hkv, hd = m["gate"], m["H"], m["Hkv"], m["hd"]
    if g == "none":
        return 0
    per = hd if g == "elementwise" else 1
    return (Hkv if m["gate_pos"] == "value" else H) * per


def params(m):
    d, L, Hd, KV, G = m["d"], m["L"], m["H"] * m["hd"], m["Hkv"] * m["hd"], gate_cols(m)
    ffn = (3 if m["mlp"] == "swiglu" else 2) * d * m["F"]
    norm_p = (2 if m["norm"] == "layernorm" else 1) * d
    per_layer = d * (Hd + 2 * KV + G) + Hd * d + ffn + 2 * norm_p + (2 * m["hd"] if m["qk_norm"] else 0)
    total = m["Vp"] * d * (1 if m["tied"] else 2) + L * per_layer + norm_p
    if m["pos"] == "learned":
        total += m["max_T"] * d
    return total


def model_flops(m):
    """gpt_flops_per_token x B x T (model/gpt.c): 6 x matmul params + attention."""
    d, L, Hd, KV, G = m["d"], m["L"], m["H"] * m["hd"], m["Hkv"] * m["hd"], gate_cols(m)
    ffn = (3 if m["mlp"] == "swiglu" else 2) * d * m["F"]
    mm = m["Vp"] * d + L * ((Hd + 2 * KV + G) * d + d * Hd + ffn)
    per_tok = 6.0 * mm + 6.0 * L * m["T"] * m["H"] * m["hd"]
    return per_tok * m["B"] * m["T"]


class Step:
    def __init__(self, m, attn):
        self.m, self.attn, self.ops = m, attn, []

    def add(self, op, kind, flops, nbytes, count=1, phase=""):
        self.ops.append(dict(op=op, kind=kind, flops=float(flops) * count, bytes=float(nbytes) * count,
                             count=count, phase=phase))


def attn_tiles(T, tile=64):
    """(query, key) pairs a causal pass computes with tile x tile blocks (the diagonal blocks whole)."""
    nT = (T + tile - 1) // tile
    return nT * (nT + 1) // 2 * tile * tile


def build_step(m, attn="flash", fuse=False):
    """Every kernel of one bench_gpu step, bf16 build. attn: flash (attention_mma.cu), cudnn, fused.
    fuse=True is a what-if, not the code: the residual copies folded into the GEMMs (cuBLASLt D != C),
    the bf16 copy of dres written by the norm backward, norm backward in one pass, q/k/v read straight
    from qkv where there is neither RoPE nor qk-norm (GPT-2), cross-entropy forward + backward in one
    pass (llm.c's fused classifier), and the optimizer (zero, norm, AdamW, bf16 copy) once per
    tokens_per_step instead of once per micro-batch."""
    B, T, d, L = m["B"], m["T"], m["d"], m["L"]
    N = B * T
    H, Hkv, hd = m["H"], m["Hkv"], m["hd"]
    Hd, KV, G = H * hd, Hkv * hd, gate_cols(m)
    sgate = G > 0 and m["gate_pos"] == "sdpa"
    QKVG = Hd + 2 * KV + G
    Fd = m["F"]
    Fin = 2 * Fd if m["mlp"] == "swiglu" else Fd
    Vp = m["Vp"]
    ln = m["norm"] == "layernorm"
    P = params(m)
    s = Step(m, attn)
    tiles = attn_tiles(T)                 # (query, key) pairs computed per (b, head)
    mm_unit = 2.0 * tiles * hd * B * H    # FLOPs of one attention matmul over every head
    mm_unit32 = 2.0 * attn_tiles(T, 32) * hd * B * H   # the fp32 kernel's 32 x 32 tiles

    def gemm(name, M, Nn, K, a_bytes, b_bytes, c_bytes, count=1, phase="", extra=0):
        s.add(name, "gemm", 2.0 * M * Nn * K, a_bytes + b_bytes + c_bytes + extra, count, phase)

    def norm_fwd(name, count, phase):
        s.add(name, "mem", 8.0 * N * d, N * d * F4 + N * d * A + d * F4 * (2 if ln else 1) + N * F4 * (2 if ln else 1),
              count, phase)

    def norm_bwd(name, count, phase):
        # dx: dout (A), x (F4), dinp += (read + write F4); the weight-gradient partials read dout and x again
        if fuse:   # one pass, and the bf16 copy of dres written beside it
            s.add(name + " [fused]", "mem", 16.0 * N * d, N * d * (A + F4 + 2 * F4 + A), count, phase)
        else:
            s.add(name, "mem", 16.0 * N * d, N * d * (A + F4 + 2 * F4) + N * d * (A + F4), count, phase)
    ga = max(1, m["tokens_per_step"] // (B * T)) if fuse and m["tokens_per_step"] else 1
    plain_qkv = not m["qk_norm"] and m["pos"] != "rope" and m["gate_pos"] != "value"

    # ---- zero grads + forward ----
    s.add("ops_zero (gradients)", "mem", 0, P * F4 / ga, 1, "optim")
    s.add("embedding_forward_kernel", "mem", N * d, N * 4 + N * d * F4 * 2 + (T * d * F4 if m["pos"] == "learned" else 0),
          1, "fwd")
    norm_fwd("norm_forward_kernel (ln1)", L, "fwd")
    gemm("GEMM qkv(+gate) fwd", N, QKVG, d, N * d * A, QKVG * d * A, N * QKVG * A, L, "fwd")
    prep_bytes = N * (Hd + 2 * KV) * A * 2 + (N * (H + Hkv) * F4 if m["qk_norm"] else 0)
    if not (fuse and plain_qkv):
        s.add("attn_prep_forward_kernel", "mem", N * (Hd + 2 * KV) * (8 if m["qk_norm"] or m["pos"] == "rope" else 1),
              prep_bytes, L, "fwd")
    fwd_bytes = N * (Hd + 2 * KV) * A + N * Hd * A + B * H * T * F4 + (N * G * A + N * Hd * A if sgate else 0)
    if attn == "cudnn":
        s.add("cuDNN SDPA fwd", "attn", 2 * mm_unit, N * (Hd + 2 * KV) * A + N * Hd * A + B * H * T * F4, L, "fwd")
        if sgate:
            s.add("attention_gate_apply_kernel", "mem", 4.0 * N * Hd, N * Hd * A * 2 + N * G * A, L, "fwd")
    elif attn == "fused":
        s.add("attention_forward_kernel<NC> (fp32)", "attn32", 2 * mm_unit32, fwd_bytes, L, "fwd")
    else:
        s.add("mma_forward_kernel<%d>" % hd, "attn", 2 * mm_unit, fwd_bytes, L, "fwd")
    if not fuse:
        s.add("ops_copy (res_mid = res_in)", "mem", 0, N * d * F4 * 2, L, "fwd")
    gemm("GEMM wo fwd (+= fp32)", N, d, Hd, N * Hd * A, d * Hd * A, N * d * F4 * 2, L, "fwd")
    norm_fwd("norm_forward_kernel (ln2)", L, "fwd")
    if m["mlp"] == "swiglu":
        gemm("GEMM w_in fwd", N, Fin, d, N * d * A, Fin * d * A, N * Fin * A, L, "fwd")
        s.add("swiglu_forward_kernel", "mem", 6.0 * N * Fd, N * Fin * A + N * Fd * A, L, "fwd")
    else:
        gemm("GEMM w_in fwd + GELU_AUX epilogue", N, Fd, d, N * d * A, Fd * d * A, N * Fd * A * 2, L, "fwd")
    if not fuse:
        s.add("ops_copy (out = res_mid)", "mem", 0, N * d * F4 * 2, L, "fwd")
    gemm("GEMM w_out fwd (+= fp32)", N, d, Fd, N * Fd * A, d * Fd * A, N * d * F4 * 2, L, "fwd")
    norm_fwd("norm_forward_kernel (lnf)", 1, "fwd")
    gemm("GEMM lm_head fwd", N, Vp, d, N * d * A, Vp * d * A, N * Vp * A, 1, "fwd")
    if fuse:   # one pass: read the logits, write dlogits in place (and the loss)
        s.add("xent forward + backward [fused]", "mem", 7.0 * N * Vp, N * Vp * A * 2 + N * 12, 1, "fwd")
    else:
        s.add("xent_forward_kernel", "mem", 4.0 * N * Vp, N * Vp * A + N * 12, 1, "fwd")
    # ---- backward ----
    if not fuse:
        s.add("xent_backward_kernel (in place)", "mem", 3.0 * N * Vp, N * Vp * A * 2 + N * 8, 1, "bwd")
    gemm("GEMM lm_head bwd dX", N, d, Vp, N * Vp * A, Vp * d * A, N * d * A, 1, "bwd")
    gemm("GEMM lm_head bwd dW (+= fp32)", Vp, d, N, N * Vp * A, N * d * A, Vp * d * F4 * 2, 1, "bwd")
    s.add("ops_zero (dres)", "mem", 0, N * d * F4, 1, "bwd")
    norm_bwd("norm_backward kernels (lnf)", 1, "bwd")
    if not fuse:
        s.add("act_from_float_kernel (dres -> bf16)", "mem", N * d, N * d * (F4 + A), 2 * L, "bwd")
    if m["mlp"] == "swiglu":
        gemm("GEMM w_out bwd dX", N, Fd, d, N * d * A, Fd * d * A, N * Fd * A, L, "bwd")
        gemm("GEMM w_out bwd dW (+= fp32)", Fd, d, N, N * d * A, N * Fd * A, Fd * d * F4 * 2, L, "bwd")
        s.add("swiglu_backward_kernel", "mem", 10.0 * N * Fd, N * Fd * A + N * Fin * A * 2, L, "bwd")
    else:
        gemm("GEMM w_out bwd dX + DGELU epilogue", N, Fd, d, N * d * A, Fd * d * A, N * Fd * A * 2, L, "bwd")
        gemm("GEMM w_out bwd dW (+= fp32)", Fd, d, N, N * d * A, N * Fd * A, Fd * d * F4 * 2, L, "bwd")
    gemm("GEMM w_in bwd dX", N, d, Fin, N * Fin * A, Fin * d * A, N * d * A, L, "bwd")
    gemm("GEMM w_in bwd dW (+= fp32)", Fin, d, N, N * Fin * A, N * d * A, Fin * d * F4 * 2, L, "bwd")
    norm_bwd("norm_backward kernels (ln2)", L, "bwd")
    gemm("GEMM wo bwd dX", N, Hd, d, N * d * A, Hd * d * A, N * Hd * A, L, "bwd")
    gemm("GEMM wo bwd dW (+= fp32)", d, Hd, N, N * d * A, N * Hd * A, Hd * d * F4 * 2, L, "bwd")
    pre_bytes = N * Hd * A * 2 + B * H * T * F4 + (N * G * A + N * Hd * A + N * G * A if sgate else 0)
    s.add("attention_backward_pre_kernel (gate bwd, D)", "mem", 4.0 * N * Hd, pre_bytes, L, "bwd")
    stats = B * H * T * F4 * 2
    if attn == "cudnn":
        s.add("cuDNN SDPA bwd", "attn", 5 * mm_unit,
              N * (Hd + 2 * KV) * A + N * Hd * A * 2 + stats + N * (Hd + 2 * KV) * A, L, "bwd")
    elif attn == "fused":
        s.add("attention_backward_dq/dkv_kernel<NC> (fp32)", "attn32", 7 * mm_unit32,
              2 * (N * (Hd + 2 * KV) * A + N * Hd * A + stats) + N * (Hd + 2 * KV) * A, L, "bwd")
    else:
        s.add("mma_dq_kernel<%d>" % hd, "attn", 3 * mm_unit, N * (Hd + 2 * KV) * A + N * Hd * A + stats + N * Hd * A,
              L, "bwd")
        s.add("mma_dkv_kernel<%d>" % hd, "attn", 4 * mm_unit,
              N * (Hd + 2 * KV) * A + N * Hd * A + stats + N * 2 * KV * A, L, "bwd")
    if not (fuse and plain_qkv):
        s.add("attn_prep_backward (+ qk-norm partials)", "mem", N * (Hd + 2 * KV) * 8,
              N * (Hd + 2 * KV) * A * 2 + (N * (Hd + KV) * A + N * (H + Hkv) * F4 if m["qk_norm"] else 0), L, "bwd")
    gemm("GEMM qkv(+gate) bwd dX", N, d, QKVG, N * QKVG * A, QKVG * d * A, N * d * A, L, "bwd")
    gemm("GEMM qkv(+gate) bwd dW (+= fp32)", QKVG, d, N, N * QKVG * A, N * d * A, QKVG * d * F4 * 2, L, "bwd")
    norm_bwd("norm_backward kernels (ln1)", L, "bwd")
    s.add("embedding backward (sort + wte + wpe)", "mem", N * d,
          N * d * F4 * 3 + N * 16 + (N * d * F4 + T * d * F4 if m["pos"] == "learned" else 0), 1, "bwd")
    # ---- optimizer ----
    s.add("sumsq_chunks_kernel (grad norm)", "mem", 2.0 * P / ga, P * F4 / ga, 1, "optim")
    s.add("adamw_kernel", "mem", 12.0 * P / ga, P * 28 / ga, 1, "optim")
    s.add("weights_to_act_kernel (bf16 copy)", "mem", 2.0 * P / ga, P * (F4 + A) / ga, 1, "optim")
    return s


def op_time(o, bw, gemm_peak, attn_eff):
    if o["kind"] == "gemm":
        tc = o["flops"] / gemm_peak
    elif o["kind"] == "attn":
        tc = o["flops"] / (PEAK_BF16 * attn_eff)
    else:   # fp32 CUDA cores (elementwise kernels; the fp32 attention)
        tc = o["flops"] / PEAK_FP32
    tm = o["bytes"] / bw
    return max(tc, tm), tc, tm


def evaluate(m, attn="flash", scenario="roofline", fuse=False):
    s = build_step(m, attn, fuse)
    if scenario == "roofline":
        bw, gp, eff = HBM_BW, PEAK_BF16, 1.0
    else:   # attainable: measured ceilings, the attention path's efficiency class
        bw, gp = MEAS_BW, MEAS_GEMM
        eff = EFF_WGMMA if attn == "cudnn" else EFF_MMA_SYNC
    tot = dict(time=0.0, flops=0.0, bytes=0.0, gemm=0.0, attn=0.0, mem=0.0, launches=0)
    rows = []
    for o in s.ops:
        t, tc, tm = op_time(o, bw, gp, eff)
        o2 = dict(o, time=t, t_compute=tc, t_memory=tm, bound="compute" if tc >= tm else "memory")
        rows.append(o2)
        tot["time"] += t
        tot["flops"] += o["flops"]
        tot["bytes"] += o["bytes"]
        k = "gemm" if o["kind"] == "gemm" else ("attn" if o["kind"].startswith("attn") else "mem")
        tot[k] += t
        tot["launches"] += o["count"]
    mf = model_flops(m)
    tot.update(model_flops=mf, mfu=mf / (tot["time"] * PEAK_BF16), tokens_per_s=m["B"] * m["T"] / tot["time"],
               params=params(m))
    return rows, tot


def without_gate(m):
    m2 = dict(m)
    m2["gate"] = "none"
    return m2


def with_gate(m, gate="elementwise"):
    m2 = dict(m)
    m2["gate"], m2["gate_pos"] = gate, "sdpa"
    return m2


def attention_rows(rows):
    return [r for r in rows if r["kind"].startswith("attn") or r["op"].startswith("attention_")]


def attention_only(m, T, tokens=16384):
    """The attention op alone (forward + backward, every layer; what bench_attn_gpu times: the SDPA
    kernels, the gate's kernels and the backward's first pass), B = tokens / T: the reference is
    cuDNN ungated, against attention_mma.cu with the elementwise gate and cuDNN + the gate kernels."""
    base = dict(m, T=T, B=max(1, tokens // T))
    out = {}
    for key, mm, attn in (("ref", without_gate(base), "cudnn"), ("mma_gated", with_gate(base), "flash"),
                          ("cudnn_gated", with_gate(base), "cudnn"), ("mma_none", without_gate(base), "flash")):
        for scen in ("roofline", "attainable"):
            rows, _ = evaluate(mm, attn, scen)
            att = attention_rows(rows)
            out[(key, scen)] = sum(r["time"] for r in att)
            out[(key, "flops")] = sum(r["flops"] for r in att)
    out["B"] = base["B"]
    return out


def fmt_t(s):
    return "%.1f" % (s * 1e6) if s < 1e-3 else "%.0f" % (s * 1e6)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("configs", nargs="*", help="CONFIG.ini[:B:T] (default: GPT-2 124M, the sink pair, the 1.7B pair)")
    ap.add_argument("--markdown", action="store_true", help="print markdown tables (docs/gpu.md)")
    ap.add_argument("--detail", action="store_true", help="per-kernel tables for every config (default: the first and the gated ones)")
    ap.add_argument("--json", help="write every number as JSON")
    args = ap.parse_args()
    specs = args.configs or ["configs/gpt2_124m.ini:16:1024", "configs/paper/sink_124m_baseline.ini:16:1024",
                             "configs/paper/sink_124m_gated.ini:16:1024", "configs/paper/dense_1p7b_baseline.ini",
                             "configs/paper/dense_1p7b_gated.ini"]
    models = []
    for sp in specs:
        parts = sp.split(":")
        path = parts[0] if os.path.isabs(parts[0]) else os.path.join(ROOT, parts[0])
        if not os.path.exists(path):
            print("gpu_roofline: no such config %s" % parts[0], file=sys.stderr)
            return 2
        m = load_config(path)
        if len(parts) >= 3:
            m["B"], m["T"] = int(parts[1]), int(parts[2])
        if m["moe"]:
            print("gpu_roofline: %s is a MoE config: not modelled (dense configs only)" % parts[0], file=sys.stderr)
            return 2
        models.append(m)
    md = args.markdown
    out = dict(peaks=dict(bf16_dense=PEAK_BF16, fp32=PEAK_FP32, hbm=HBM_BW, measured_copy=MEAS_BW,
                          measured_gemm=MEAS_GEMM, eff_mma_sync=EFF_MMA_SYNC, eff_wgmma=EFF_WGMMA),
               status="prediction from counts and datasheet rates; not run on a GPU", configs=[])

    def p(line=""):
        print(line)

    p("H200 SXM: bf16 dense %.1f TFLOP/s, fp32 %.1f TFLOP/s, HBM3e %.1f TB/s (NVIDIA); ridge %.0f FLOP/byte. "
      "attainable: %.0f TFLOP/s GEMM, %.1f TB/s (measured here), attention at %.0f%% (mma.sync) / %.0f%% (wgmma class) "
      "of peak." % (PEAK_BF16 / 1e12, PEAK_FP32 / 1e12, HBM_BW / 1e12, PEAK_BF16 / HBM_BW, MEAS_GEMM / 1e12,
                    MEAS_BW / 1e12, 100 * EFF_MMA_SYNC, 100 * EFF_WGMMA))
    # ---- per-kernel tables ----
    for i, m in enumerate(models):
        rows, tot = evaluate(m, "flash", "roofline")
        _, att = evaluate(m, "flash", "attainable")
        cfg = dict(name=m["name"], B=m["B"], T=m["T"], params=tot["params"], model_flops=tot["model_flops"],
                   kernels=rows, roofline=tot, attainable=att)
        for attn in ("cudnn", "fused"):
            cfg["roofline_" + attn] = evaluate(m, attn, "roofline")[1]
            cfg["attainable_" + attn] = evaluate(m, attn, "attainable")[1]
        cfg["whatif_roofline"] = evaluate(m, "flash", "roofline", True)[1]
        cfg["whatif_attainable"] = evaluate(m, "flash", "attainable", True)[1]
        cfg["whatif_attainable_cudnn"] = evaluate(m, "cudnn", "attainable", True)[1]
        if gate_cols(m):
            _, t0 = evaluate(without_gate(m), "flash", "roofline")
            _, a0 = evaluate(without_gate(m), "flash", "attainable")
            _, c1 = evaluate(m, "cudnn", "roofline")
            _, c0 = evaluate(without_gate(m), "cudnn", "roofline")
            r0, _ = evaluate(without_gate(m), "flash", "roofline")
            _, th = evaluate(with_gate(m, "headwise"), "flash", "roofline")
            ng = lambda rs, k: sum(r[k] for r in rs if r["kind"] != "gemm")
            cfg["gate"] = dict(cols=gate_cols(m), d_time=tot["time"] - t0["time"], d_bytes=tot["bytes"] - t0["bytes"],
                               d_flops=tot["flops"] - t0["flops"], share=(tot["time"] - t0["time"]) / tot["time"],
                               share_attainable=(att["time"] - a0["time"]) / att["time"],
                               share_cudnn=(c1["time"] - c0["time"]) / c1["time"],
                               d_bytes_nongemm=ng(rows, "bytes") - ng(r0, "bytes"),
                               d_time_nongemm=ng(rows, "time") - ng(r0, "time"),
                               share_nongemm=(ng(rows, "time") - ng(r0, "time")) / tot["time"],
                               share_headwise=(th["time"] - t0["time"]) / th["time"])
            base_ini = os.path.join(os.path.dirname(m["path"]), m["name"].replace("_gated", "_baseline") + ".ini")
            if m["name"].endswith("_gated") and os.path.exists(base_ini):
                mb = load_config(base_ini)
                mb["B"], mb["T"] = m["B"], m["T"]
                _, tb = evaluate(mb, "flash", "roofline")
                _, ab = evaluate(mb, "flash", "attainable")
                cfg["gate"].update(paired=mb["name"], vs_paired=(tot["time"] - tb["time"]) / tb["time"],
                                   vs_paired_attainable=(att["time"] - ab["time"]) / ab["time"])
        out["configs"].append(cfg)
        if not (args.detail or i == 0 or gate_cols(m)):
            continue
        p()
        p("%s, B %d x T %d (%s, %.1fM params): every kernel of one step, attn_impl = flash (attention_mma.cu), "
          "roofline" % (m["name"], m["B"], m["T"], m["mlp"], tot["params"] / 1e6))
        if md:
            p()
            p("| kernel (x launches) | GFLOP | MB | FLOP/B | compute us | memory us | predicted us | bound |")
            p("|---|---:|---:|---:|---:|---:|---:|---|")
        for r in rows:
            ai = r["flops"] / r["bytes"] if r["bytes"] else float("inf")
            cells = ("%s (x%d)" % (r["op"], r["count"]), "%.1f" % (r["flops"] / 1e9), "%.1f" % (r["bytes"] / 1e6),
                     "%.0f" % ai if ai != float("inf") else "-", fmt_t(r["t_compute"]), fmt_t(r["t_memory"]),
                     fmt_t(r["time"]), r["bound"])
            p("| " + " | ".join(cells) + " |" if md else "  %-52s %9s %9s %6s %9s %9s %9s %s" % cells)
        if md:
            p("| **total** (%d launches) | %.0f | %.0f | | | | **%s** | |" % (
                tot["launches"], tot["flops"] / 1e9, tot["bytes"] / 1e6, fmt_t(tot["time"])))
        else:
            p("  %-52s %9.0f %9.0f %6s %9s %9s %9s" % ("total (%d launches)" % tot["launches"], tot["flops"] / 1e9,
                                                       tot["bytes"] / 1e6, "", "", "", fmt_t(tot["time"])))
    # ---- summary ----
    p()
    p("Predicted step (one micro-batch B x T + optimizer, as bench_gpu), H200 SXM:")
    hdr = ("config", "B x T", "model GFLOP", "GEMM ms", "attn ms", "memory-bound ms", "step ms (roofline)",
           "MFU roofline", "step ms attainable", "MFU attainable", "MFU attainable, cuDNN attn",
           "what-if fused: MFU roofline / attainable mma / attainable cuDNN", "step ms, fp32 attn (default fused)")
    if md:
        p()
        p("| " + " | ".join(hdr) + " |")
        p("|" + "---|" * len(hdr))
    for c in out["configs"]:
        r, a = c["roofline"], c["attainable"]
        cells = (c["name"], "%d x %d" % (c["B"], c["T"]), "%.0f" % (c["model_flops"] / 1e9), "%.2f" % (r["gemm"] * 1e3),
                 "%.2f" % (r["attn"] * 1e3), "%.2f" % (r["mem"] * 1e3), "%.2f" % (r["time"] * 1e3), "%.1f%%" % (100 * r["mfu"]),
                 "%.2f" % (a["time"] * 1e3), "%.1f%%" % (100 * a["mfu"]), "%.1f%%" % (100 * c["attainable_cudnn"]["mfu"]),
                 "%.1f%% / %.1f%% / %.1f%%" % (100 * c["whatif_roofline"]["mfu"], 100 * c["whatif_attainable"]["mfu"],
                                              100 * c["whatif_attainable_cudnn"]["mfu"]),
                 "%.1f" % (c["roofline_fused"]["time"] * 1e3))
        p("| " + " | ".join(cells) + " |" if md else "  " + "  ".join(cells))
    # ---- gate ----
    p()
    p("The gate's predicted cost: the gated config against the same config with attn_gate = none (all of it, and the "
      "part outside the GEMMs: the bytes the gate adds to the attention and elementwise kernels), and against its "
      "parameter-matched baseline (the paper's pairing: the FFN shrunk by the gate's parameters):")
    if md:
        p()
        p("| config | gate columns | +GFLOP | +MB | +us | share of step (roofline / attainable / cuDNN attn) | "
          "outside GEMMs: +MB, +us, share | vs paired baseline (roofline / attainable) | headwise gate instead |")
        p("|---|---:|---:|---:|---:|---|---|---|---:|")
    for c in out["configs"]:
        g = c.get("gate")
        if not g:
            continue
        cells = (c["name"], str(g["cols"]), "%.1f" % (g["d_flops"] / 1e9), "%.0f" % (g["d_bytes"] / 1e6),
                 "%.0f" % (g["d_time"] * 1e6),
                 "%.1f%% / %.1f%% / %.1f%%" % (100 * g["share"], 100 * g["share_attainable"], 100 * g["share_cudnn"]),
                 "%.0f MB, %.0f us, %.2f%%" % (g["d_bytes_nongemm"] / 1e6, g["d_time_nongemm"] * 1e6, 100 * g["share_nongemm"]),
                 ("%+.2f%% / %+.2f%% (%s)" % (100 * g["vs_paired"], 100 * g["vs_paired_attainable"], g["paired"]))
                 if "paired" in g else "-", "%.2f%%" % (100 * g["share_headwise"]))
        p("| " + " | ".join(cells) + " |" if md else "  " + "  ".join(cells))
    # ---- attention alone vs cuDNN ----
    p()
    p("Attention op alone, forward + backward over every layer, B x T = 16384 tokens: throughput of the gated "
      "(elementwise) attention_mma.cu kernels and of cuDNN + the gate's kernels, relative to cuDNN ungated "
      "(the goal: >= 0.90):")
    if md:
        p()
        p("| shape | T | executed GFLOP: cuDNN / mma | roofline ms: cuDNN none, mma gated, cuDNN gated | ratio mma, cuDNN+gate | "
          "attainable ms (same order) | ratio mma, cuDNN+gate |")
        p("|---|---:|---:|---:|---:|---:|---:|")
    out["attention"] = []
    seen = set()
    for m in models:
        shape = (m["d"], m["H"], m["Hkv"], m["hd"], m["L"])
        if shape in seen:
            continue
        seen.add(shape)
        for T in (1024, 4096):
            a = attention_only(m, T)
            r = {sc: (a[("ref", sc)] / a[("mma_gated", sc)], a[("ref", sc)] / a[("cudnn_gated", sc)])
                 for sc in ("roofline", "attainable")}
            out["attention"].append(dict(config=m["name"], T=T, B=a["B"], **{
                "%s_%s" % (k, sc): a[(k, sc)] for k in ("ref", "mma_gated", "cudnn_gated", "mma_none")
                for sc in ("roofline", "attainable")}, ratio_mma_roofline=r["roofline"][0],
                ratio_cudnn_gate_roofline=r["roofline"][1], ratio_mma_attainable=r["attainable"][0],
                ratio_cudnn_gate_attainable=r["attainable"][1]))
            cells = ("%s (%d x %d, %d/%d heads x %d)" % (m["name"], m["L"], m["d"], m["H"], m["Hkv"], m["hd"]), str(T),
                     "%.0f / %.0f" % (a[("ref", "flops")] / 1e9, a[("mma_gated", "flops")] / 1e9),
                     "%.2f, %.2f, %.2f" % tuple(a[(k, "roofline")] * 1e3 for k in ("ref", "mma_gated", "cudnn_gated")),
                     "%.2f, %.2f" % r["roofline"],
                     "%.2f, %.2f, %.2f" % tuple(a[(k, "attainable")] * 1e3 for k in ("ref", "mma_gated", "cudnn_gated")),
                     "%.2f, %.2f" % r["attainable"])
            p("| " + " | ".join(cells) + " |" if md else "  " + "  ".join(cells))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
