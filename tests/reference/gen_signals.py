#!/usr/bin/env python3
"""Reference values of the instability signals (docs/metrics.md) for tests/test_signals.c.

For each tests/golden/NAME.ini in SIGNAL_GOLDENS (or the names given): the golden's own batch
and initial parameters (tests/golden/NAME.bin, written by gen_golden.py), and in float64 with
the reference model (tests/reference/model.py):
  attn_logit_max [n_layer, H]  per layer and head, the largest attention logit the softmax takes
                               (q.k / sqrt(hd) after qk-norm and RoPE, over b, t and keys <= t);
                               NaN for a Gated DeltaNet layer
  out_absmax [1], out_z [1]    the largest |output logit| over the V real columns; the mean over
                               tokens of logsumexp^2
  grad_norm [G]                per group, sqrt of the sum of squares of the objective's gradients
                               (cross-entropy + MoE losses), before clipping
  update_ratio [G]             per group, ||w1 - w0|| / ||w0|| after one step of clip + AdamW
                               (the golden's optimizer settings, lr = [train] lr)
G = n_layer * 5 + 2 groups: layer l's kinds attn, gate, mlp, router, norm at l * 5 + k, then
the model-level embed, lnf (train/signals.h); NaN for a group no tensor falls in. The grouping
below is written from the parameter names, independently of train/signals.c.

Writes tests/golden/signals/NAME.bin in the golden format (gen_golden.write_golden).
Usage: /usr/bin/python3 tests/reference/gen_signals.py [names...]
"""
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_golden as GG  # noqa: E402
import model as M  # noqa: E402

# qk-norm + RoPE + gate; YaRN (logits carry the attention factor squared); GPT-2 (layernorm,
# learned positions, biases split into q/k/v and no gate); the value gate (Hkv gate rows);
# hybrid Gated DeltaNet + MoE (linear layers: NaN; router and shared expert)
SIGNAL_GOLDENS = ["qwen_elementwise", "qwen_rope_yarn", "gpt2_bias", "qwen_value_headwise", "hybrid_moe_headwise"]
KINDS = ["attn", "gate", "mlp", "router", "norm"]


def group_pieces(c, name, t):
    """[(group index, flat tensor piece)] for parameter `name` of value t."""
    L5 = c.n_layer * len(KINDS)
    if not name.startswith("h."):
        return [(L5 + (1 if name.startswith("lnf") else 0), t.reshape(-1))]
    _, l, what = name.split(".", 2)
    base = int(l) * len(KINDS)
    if what in ("attn.wqkv", "attn.bqkv"):
        G = c.gate_dim                        # the gate's rows are the last G
        rows = t.shape[0]
        return [(base + 0, t[:rows - G].reshape(-1)), (base + 1, t[rows - G:].reshape(-1))]
    if what.startswith("ln1") or what.startswith("ln2") or what in ("attn.q_norm.w", "attn.k_norm.w", "gdn.norm_w"):
        k = "norm"
    elif what == "gdn.w_z":
        k = "gate"
    elif what.startswith("attn.") or what.startswith("gdn."):
        k = "attn"
    elif what == "moe.router":
        k = "router"
    else:
        k = "mlp"
    return [(base + KINDS.index(k), t.reshape(-1))]


def group_sumsq(c, tensors):
    G = c.n_layer * len(KINDS) + 2
    s = [None] * G
    for name, t in tensors.items():
        for g, piece in group_pieces(c, name, t):
            if piece.numel() == 0:
                continue
            s[g] = (s[g] if s[g] is not None else 0.0) + (piece.double() ** 2).sum().item()
    return s


def signals(c, golden):
    idx = torch.from_numpy(golden["inputs"].astype(np.int64))
    tgt = torch.from_numpy(golden["targets"].astype(np.int64))
    names = [k[len("param/"):] for k in golden if k.startswith("param/")]
    p64 = {n: torch.from_numpy(golden["param/" + n].astype(np.float64)) for n in names}
    sig = {}
    with torch.no_grad():
        M.forward(c, p64, idx, tgt, [], None, sig)
    H = c.n_head
    amax = np.array([[math.nan] * H if a is None else a.numpy() for a in sig["attn"]], dtype=np.float64)
    _, _, grads = M.loss_and_grads(c, p64, idx, tgt)
    g2 = group_sumsq(c, grads)
    _, _, _, p1 = M.train(c, p64, idx, tgt, 1)
    w2 = group_sumsq(c, p64)
    d2 = group_sumsq(c, {n: p1[n] - p64[n] for n in names})
    gnorm = [math.nan if v is None else math.sqrt(v) for v in g2]
    ratio = [math.nan if w is None or w == 0 else math.sqrt(d) / math.sqrt(w) for w, d in zip(w2, d2)]
    return [("attn_logit_max", amax.astype(np.float32)),
            ("out_absmax", np.array([sig["out_absmax"].item()], dtype=np.float32)),
            ("out_z", np.array([sig["out_z"].item()], dtype=np.float32)),
            ("grad_norm", np.array(gnorm, dtype=np.float32)),
            ("update_ratio", np.array(ratio, dtype=np.float32))]


def main():
    names = sys.argv[1:] or SIGNAL_GOLDENS
    out_dir = os.path.join(GG.DEFAULT_DIR, "signals")
    os.makedirs(out_dir, exist_ok=True)
    torch.set_default_dtype(torch.float64)
    for name in names:
        c = M.load_config(os.path.join(GG.DEFAULT_DIR, name + ".ini"))
        golden = GG.read_golden(os.path.join(GG.DEFAULT_DIR, name + ".bin"))
        ts = signals(c, golden)
        path = os.path.join(out_dir, name + ".bin")
        GG.write_golden(path + ".tmp", ts)
        os.replace(path + ".tmp", path)
        layers = ", ".join("linear" if np.isnan(row[0]) else f"{row.max():.6g}" for row in ts[0][1])
        print(f"{name}: attention logit max per layer [{layers}], out |logit| max {ts[1][1][0]:.6g}, "
              f"z {ts[2][1][0]:.6g} -> {path}")


if __name__ == "__main__":
    main()
