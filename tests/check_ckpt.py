#!/usr/bin/env python3
"""tests/check_ckpt.py: an independent reader of gatedgpt checkpoints (docs/formats.md), for
tests/test_ckpt_tools.sh. Standard library only (json, struct, zlib).

  check_ckpt.py norms CKPT INSPECT_OUTPUT   per-tensor norms printed by `gatedgpt_ckpt inspect`
                                            against norms computed here from model.bin
  check_ckpt.py export CKPT EXPORT_DIR      model.safetensors + config.json written by
                                            `gatedgpt_ckpt export` against model.bin, with the
                                            Hugging Face names re-derived here from the docs

Prints what it checked; exits 1 on the first mismatch.
"""
import configparser
import json
import math
import os
import struct
import sys
import zlib


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def read_model(ckpt):
    """model.bin: 32-byte header, then u32 n, u32 0, u64 arena floats, n x 120-byte records, arena."""
    path = os.path.join(ckpt, "model.bin")
    data = open(path, "rb").read()
    magic, version, kind, crc, nbytes, _, hcrc = struct.unpack("<IIIIQII", data[:32])
    if magic != 0x4B434747 or data[:4] != b"GGCK":
        fail(f"{path}: magic {magic:#x}")
    if (version, kind) != (1, 1):
        fail(f"{path}: version {version} kind {kind}")
    if zlib.crc32(data[:28]) != hcrc:
        fail(f"{path}: header crc")
    if len(data) != 32 + nbytes:
        fail(f"{path}: size {len(data)} != 32 + {nbytes}")
    if zlib.crc32(data[32:]) != crc:
        fail(f"{path}: payload crc32 {zlib.crc32(data[32:]):08x} != header {crc:08x}")
    p = 32
    n, _, total = struct.unpack("<IIQ", data[p:p + 16])
    p += 16
    tensors = []
    for _ in range(n):
        name = data[p:p + 64].split(b"\0")[0].decode()
        ndim, _ = struct.unpack("<II", data[p + 64:p + 72])
        shape = struct.unpack("<4Q", data[p + 72:p + 104])[:ndim]
        offset, numel = struct.unpack("<QQ", data[p + 104:p + 120])
        # records are 120 bytes: name 64, ndim 4, pad 4, shape 32, offset 8, numel 8
        p += 120
        tensors.append((name, list(shape), offset, numel))
    arena = data[p:]
    if len(arena) != 4 * total:
        fail(f"{path}: arena of {len(arena)} bytes, header says {total} floats")
    return tensors, arena


def read_config(ckpt):
    text = open(os.path.join(ckpt, "config.ini"), encoding="utf-8").read()
    cp = configparser.ConfigParser(inline_comment_prefixes=(";",), comment_prefixes=("#", ";"))
    cp.read_string(text)
    return cp


def floats(arena, offset, numel):
    return struct.unpack(f"<{numel}f", arena[4 * offset:4 * (offset + numel)])


def cmd_norms(ckpt, inspect_out):
    tensors, arena = read_model(ckpt)
    printed = {}
    for line in open(inspect_out, encoding="utf-8"):
        parts = line.split()
        if len(parts) >= 6 and parts[0] in {t[0] for t in tensors}:
            # name, shape (may contain a space: "[96, 32]"), norm, max|w|, norm m, norm v
            printed[parts[0]] = (float(parts[-4]), float(parts[-3]))
    if len(printed) != len(tensors):
        fail(f"inspect printed {len(printed)} tensor lines, the checkpoint has {len(tensors)}")
    worst = 0.0
    for name, shape, offset, numel in tensors:
        x = floats(arena, offset, numel)
        norm = math.sqrt(sum(v * v for v in x))
        mx = max(abs(v) for v in x)
        pn, pm = printed[name]
        err = max(abs(pn - norm) / norm, abs(pm - mx) / mx)
        worst = max(worst, err)
        if err > 1e-5:
            fail(f"{name}: inspect says norm {pn} max {pm}, computed {norm} {mx}")
    print(f"norms: {len(tensors)} tensors, inspect vs an independent computation: max relative difference {worst:.1e}")


def expected_export(cfg, tensors, arena):
    """name -> (shape, bytes) that the export should contain, derived from docs/formats.md."""
    m = cfg["model"]
    V, d, F = int(m["vocab_size"]), int(m["d_model"]), int(m["d_ff"])
    H, Hkv, hd = int(m["n_head"]), int(m["n_kv_head"]), int(m["head_dim"])
    gate, gpos, gact = m["attn_gate"], m["gate_position"], m["gate_act"]
    out = {}

    def rows(offset, cols, r0, n):
        return arena[4 * (offset + r0 * cols):4 * (offset + (r0 + n) * cols)]

    for name, shape, offset, numel in tensors:
        cols = shape[1] if len(shape) > 1 else 1
        whole = arena[4 * offset:4 * (offset + numel)]
        if name == "wte":
            out["model.embed_tokens.weight"] = ([V, d], rows(offset, d, 0, V))
            continue
        if name == "lm_head":
            out["lm_head.weight"] = ([V, d], rows(offset, d, 0, V))
            continue
        simple = {"wpe": "model.embed_positions.weight", "lnf.w": "model.norm.weight", "lnf.b": "model.norm.bias"}
        if name in simple:
            out[simple[name]] = (shape, whole)
            continue
        _, L, rest = name.split(".", 2)
        pre = f"model.layers.{L}."
        plain = {"ln1.w": "input_layernorm.weight", "ln1.b": "input_layernorm.bias",
                 "ln2.w": "post_attention_layernorm.weight", "ln2.b": "post_attention_layernorm.bias",
                 "attn.q_norm.w": "self_attn.q_norm.weight", "attn.k_norm.w": "self_attn.k_norm.weight",
                 "attn.wo": "self_attn.o_proj.weight", "mlp.w_out": "mlp.down_proj.weight"}
        if rest in plain:
            out[pre + plain[rest]] = (shape, whole)
        elif rest == "attn.wqkv":
            Hq, Hk = H * hd, Hkv * hd
            G = shape[0] - Hq - 2 * Hk
            if G > 0 and gate == "elementwise" and gpos == "sdpa" and gact == "sigmoid":
                q = b"".join(rows(offset, d, h * hd, hd) + rows(offset, d, Hq + 2 * Hk + h * hd, hd) for h in range(H))
                out[pre + "self_attn.q_proj.weight"] = ([2 * Hq, d], q)
            else:
                out[pre + "self_attn.q_proj.weight"] = ([Hq, d], rows(offset, d, 0, Hq))
                if G > 0:
                    out[pre + "self_attn.gate_proj.weight"] = ([G, d], rows(offset, d, Hq + 2 * Hk, G))
            out[pre + "self_attn.k_proj.weight"] = ([Hk, d], rows(offset, d, Hq, Hk))
            out[pre + "self_attn.v_proj.weight"] = ([Hk, d], rows(offset, d, Hq + Hk, Hk))
        elif rest == "mlp.w_in" and m["mlp"] == "swiglu":
            out[pre + "mlp.gate_proj.weight"] = ([F, d], rows(offset, d, 0, F))
            out[pre + "mlp.up_proj.weight"] = ([F, d], rows(offset, d, F, F))
        elif rest == "mlp.w_in":
            out[pre + "mlp.up_proj.weight"] = ([F, d], whole)
        else:
            out["gatedgpt." + name] = (shape, whole)
    return out


def cmd_export(ckpt, outdir):
    cfg = read_config(ckpt)
    tensors, arena = read_model(ckpt)
    path = os.path.join(outdir, "model.safetensors")
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    if n % 8 != 0:
        fail(f"header length {n} is not a multiple of 8 (data not aligned)")
    body = data[8 + n:]
    meta = header.pop("__metadata__", {})
    if meta.get("format") != "pt":
        fail(f"__metadata__ {meta}")
    want = expected_export(cfg, tensors, arena)
    if set(header) != set(want):
        fail(f"tensor names differ: missing {sorted(set(want) - set(header))}, extra {sorted(set(header) - set(want))}")
    spans = sorted(tuple(v["data_offsets"]) for v in header.values())
    if spans[0][0] != 0 or spans[-1][1] != len(body) or any(a[1] != b[0] for a, b in zip(spans, spans[1:])):
        fail("data_offsets do not tile the data section")
    for name, info in header.items():
        shape, raw = want[name]
        b0, b1 = info["data_offsets"]
        if info["dtype"] != "F32" or info["shape"] != list(shape):
            fail(f"{name}: {info['dtype']} {info['shape']}, expected F32 {list(shape)}")
        if body[b0:b1] != raw:
            fail(f"{name}: values differ from the checkpoint's")
    m = cfg["model"]
    conf = json.load(open(os.path.join(outdir, "config.json")))
    checks = {"vocab_size": int(m["vocab_size"]), "hidden_size": int(m["d_model"]), "intermediate_size": int(m["d_ff"]),
              "num_hidden_layers": int(m["n_layer"]), "num_attention_heads": int(m["n_head"]),
              "num_key_value_heads": int(m["n_kv_head"]), "head_dim": int(m["head_dim"]),
              "tie_word_embeddings": m["tie_embeddings"] == "true", "rope_theta": float(m["rope_base"]),
              "rms_norm_eps": float(m["norm_eps"])}
    for k, v in checks.items():
        if conf.get(k) != v:
            fail(f"config.json {k} = {conf.get(k)!r}, expected {v!r}")
    qwen3 = (m["pos"], m["norm"], m["mlp"], m["qk_norm"], m["attn_gate"]) == ("rope", "rmsnorm", "swiglu", "true", "none")
    arch = "Qwen3ForCausalLM" if qwen3 else "GatedGPTForCausalLM"
    if conf.get("architectures") != [arch] or conf["gatedgpt"]["attn_gate"] != m["attn_gate"]:
        fail(f"config.json architectures {conf.get('architectures')}, expected [{arch}]")
    if ("lm_head.weight" in header) == (m["tie_embeddings"] == "true"):
        fail("lm_head.weight present/absent against tie_embeddings")
    print(f"export: {len(header)} tensors ({len(body)} bytes) match the checkpoint's model.bin slices; "
          f"config.json: {arch}, gate {m['attn_gate']}/{m['gate_position']}/{m['gate_act']}")


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("norms", "export"):
        print(__doc__)
        sys.exit(2)
    (cmd_norms if sys.argv[1] == "norms" else cmd_export)(sys.argv[2], sys.argv[3])
