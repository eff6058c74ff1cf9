#!/usr/bin/env python3
"""tests/llmc_model.py: llm.c's GPT-2 model file, written from the format's description (not with
llm.c's code), and the logits of the model it holds, for tests/test_bias.sh. numpy only.

The format (llm.c's train_gpt2.c / train_gpt2.py; docs/formats.md "llm.c's model file"): 256
int32 little-endian [20240326, version (3 = fp32, 5 = bf16), maxT, V, L, NH, C, Vp, 0...], then
the parameters contiguous: wte [Vp, C], wpe [maxT, C], ln1w [L, C], ln1b [L, C], qkvw [L, 3C, C],
qkvb [L, 3C], attprojw [L, C, C], attprojb [L, C], ln2w [L, C], ln2b [L, C], fcw [L, 4C, C],
fcb [L, 4C], fcprojw [L, C, 4C], fcprojb [L, C], lnfw [C], lnfb [C]. Weights [out, in] (y = x W^T),
LM head = wte, tanh GELU, LayerNorm eps 1e-5; rows V .. Vp-1 of wte are padding.

  llmc_model.py write OUT.bin --version 3|5 --ids I,I,.. --logits OUT.f32 [--maxT --V --L --NH --C --Vp --seed]
      random parameters (std 0.1 weights; norm weights 1 + N(0, 0.2), every bias N(0, 0.2): away
      from 1 and 0, so a swapped or dropped tensor shows), the file, and the float64 logits
      [n, V] of those parameters (for version 5: of their bf16 roundings, what the file holds)
      after each prefix of the ids
  llmc_model.py compare A.f32 B.f32 N V TOL   max|a - b| / max|b| <= TOL (prints it)
  llmc_model.py corrupt IN.bin OUT.bin WORD VALUE   a copy with header int32 WORD set to VALUE
  llmc_model.py truncate IN.bin OUT.bin BYTES       a copy without its last BYTES bytes
"""
import sys

import numpy as np

MAGIC = 20240326
ORDER = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
         "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]


def shapes(maxT, V, L, C, Vp):
    return {"wte": (Vp, C), "wpe": (maxT, C), "ln1w": (L, C), "ln1b": (L, C), "qkvw": (L, 3 * C, C),
            "qkvb": (L, 3 * C), "attprojw": (L, C, C), "attprojb": (L, C), "ln2w": (L, C), "ln2b": (L, C),
            "fcw": (L, 4 * C, C), "fcb": (L, 4 * C), "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
            "lnfw": (C,), "lnfb": (C,)}


def bf16_round(x):
    """float32 -> the nearest bf16 (ties to even), as float32; and its 16-bit patterns"""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    bits = u.astype(np.uint16)
    return (bits.astype(np.uint32) << 16).view(np.float32), bits


def layernorm(x, w, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * w + b


def gelu(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def forward(p, ids, V, L, NH, C):
    """GPT-2 in float64 over one sequence: logits [T, V] (the first V columns of x wte^T)"""
    T, hd = len(ids), C // NH
    x = p["wte"][ids] + p["wpe"][:T]
    mask = np.tril(np.ones((T, T), dtype=bool))
    for l in range(L):
        a = layernorm(x, p["ln1w"][l], p["ln1b"][l])
        qkv = a @ p["qkvw"][l].T + p["qkvb"][l]
        q, k, v = (qkv[:, i * C:(i + 1) * C].reshape(T, NH, hd).transpose(1, 0, 2) for i in range(3))
        s = q @ k.transpose(0, 2, 1) / np.sqrt(hd)
        s = np.where(mask, s, -np.inf)
        s = np.exp(s - s.max(-1, keepdims=True))
        y = (s / s.sum(-1, keepdims=True)) @ v                    # [NH, T, hd]
        x = x + y.transpose(1, 0, 2).reshape(T, C) @ p["attprojw"][l].T + p["attprojb"][l]
        m = layernorm(x, p["ln2w"][l], p["ln2b"][l])
        x = x + gelu(m @ p["fcw"][l].T + p["fcb"][l]) @ p["fcprojw"][l].T + p["fcprojb"][l]
    x = layernorm(x, p["lnfw"], p["lnfb"])
    return x @ p["wte"][:V].T


def write(args):
    out = args[0]
    opt = dict(version="3", maxT="16", V="100", L="2", NH="4", C="32", Vp="128", seed="1", ids="", logits="")
    for i in range(1, len(args), 2):
        opt[args[i].lstrip("-")] = args[i + 1]
    version, maxT, V, L, NH, C, Vp = (int(opt[k]) for k in ("version", "maxT", "V", "L", "NH", "C", "Vp"))
    rng = np.random.RandomState(int(opt["seed"]))
    p = {}
    for name, shape in shapes(maxT, V, L, C, Vp).items():
        r = rng.standard_normal(shape).astype(np.float32)
        if name in ("ln1w", "ln2w", "lnfw"):
            p[name] = (1.0 + 0.2 * r).astype(np.float32)
        elif len(shape) == 1 or name.endswith("b") or name.startswith("ln"):
            p[name] = (0.2 * r).astype(np.float32)       # biases of LayerNorms and linear layers
        else:
            p[name] = (0.1 * r).astype(np.float32)
    p["wte"][V:] = 7.0        # padding rows: must not reach the logits or the loss
    header = np.zeros(256, dtype="<i4")
    header[:8] = [MAGIC, version, maxT, V, L, NH, C, Vp]
    with open(out, "wb") as f:
        f.write(header.tobytes())
        for name in ORDER:
            if version == 5:
                p[name], bits = bf16_round(p[name])
                f.write(bits.astype("<u2").tobytes())
            else:
                f.write(p[name].astype("<f4").tobytes())
    if opt["ids"]:
        ids = np.array([int(t) for t in opt["ids"].split(",")])
        p64 = {k: v.astype(np.float64) for k, v in p.items()}
        lg = np.stack([forward(p64, ids[:i + 1], V, L, NH, C)[-1] for i in range(len(ids))])
        lg.astype("<f4").tofile(opt["logits"])
    print(f"{out}: llm.c model file version {version}, maxT {maxT} V {V} L {L} NH {NH} C {C} Vp {Vp}")


def compare(args):
    a, b, n, V, tol = args[0], args[1], int(args[2]), int(args[3]), float(args[4])
    x = np.fromfile(a, dtype="<f4")
    y = np.fromfile(b, dtype="<f4")
    if x.size != n * V or y.size != n * V:
        print(f"sizes {x.size}, {y.size}, expected {n * V}")
        sys.exit(1)
    r = np.abs(x.astype(np.float64) - y).max() / np.abs(y).max()
    print(f"logits max|a-b|/max|b| = {r:.2e} (tol {tol:g})")
    sys.exit(0 if r <= tol else 1)


def corrupt(args):
    data = bytearray(open(args[0], "rb").read())
    w = int(args[2])
    data[4 * w:4 * w + 4] = np.array([int(args[3])], dtype="<i4").tobytes()
    open(args[1], "wb").write(bytes(data))


def truncate(args):
    data = open(args[0], "rb").read()
    open(args[1], "wb").write(data[:len(data) - int(args[2])])


if __name__ == "__main__":
    {"write": write, "compare": compare, "corrupt": corrupt, "truncate": truncate}[sys.argv[1]](sys.argv[2:])
