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


def hf_class(m, moe):
    """The transformers class that represents the model exactly (docs/formats.md "Export"), or None."""
    gated = m["attn_gate"] != "none"
    if gated and (m["attn_gate"], m["gate_position"], m["gate_act"]) != ("elementwise", "sdpa", "sigmoid"):
        return None
    E = int(moe.get("n_expert", "0"))
    if m["pos"] == "learned":
        ok = (not gated and E == 0 and m["norm"] == "layernorm" and m["mlp"] == "gelu" and m["qk_norm"] == "false"
              and m["n_kv_head"] == m["n_head"] and int(m["n_head"]) * int(m["head_dim"]) == int(m["d_model"]))
        return "GPT2LMHeadModel" if ok else None
    if m["norm"] != "rmsnorm" or m["mlp"] != "swiglu":
        return None
    if E > 0:
        if moe["router"] != "softmax_topk" or float(moe["capacity_factor"]) > 0:
            return None
        if m["qk_norm"] != "true":   # Qwen2-MoE: no qk-norm, no gate, a sigmoid-gated shared expert
            ok = not gated and moe["n_shared_expert"] == "1" and moe["shared_expert_gate"] == "true"
            return "Qwen2MoeForCausalLM" if ok else None
        if not gated and moe["n_shared_expert"] == "0":
            return "Qwen3MoeForCausalLM"
        if gated and moe["n_shared_expert"] == "1" and moe["shared_expert_gate"] == "true":
            return "Qwen3NextForCausalLM"
        return None
    if not gated:
        return "Qwen3ForCausalLM" if m["qk_norm"] == "true" else "LlamaForCausalLM"
    return "Qwen3NextForCausalLM" if m["qk_norm"] == "true" else None


def expected_hf(cfg, tensors, arena, cls):
    """name -> (shape, bytes) of the export as transformers class cls (numpy: transposes, w - 1)."""
    import numpy as np
    m, moe = cfg["model"], (cfg["moe"] if cfg.has_section("moe") else {})
    V, d, F = int(m["vocab_size"]), int(m["d_model"]), int(m["d_ff"])
    H, Hkv, hd = int(m["n_head"]), int(m["n_kv_head"]), int(m["head_dim"])
    P = {name: np.frombuffer(arena[4 * off:4 * (off + numel)], dtype="<f4").reshape(shape)
         for name, shape, off, numel in tensors}
    out = {}
    put = lambda name, a: out.__setitem__(name, (list(a.shape), np.ascontiguousarray(a, dtype="<f4").tobytes()))
    L = int(m["n_layer"])
    if cls == "GPT2LMHeadModel":
        put("transformer.wte.weight", P["wte"][:V]); put("transformer.wpe.weight", P["wpe"])
        for l in range(L):
            pre, h = f"transformer.h.{l}.", f"h.{l}."
            put(pre + "ln_1.weight", P[h + "ln1.w"]); put(pre + "ln_1.bias", P[h + "ln1.b"])
            put(pre + "attn.c_attn.weight", P[h + "attn.wqkv"].T); put(pre + "attn.c_attn.bias", np.zeros(3 * d))
            put(pre + "attn.c_proj.weight", P[h + "attn.wo"].T); put(pre + "attn.c_proj.bias", np.zeros(d))
            put(pre + "ln_2.weight", P[h + "ln2.w"]); put(pre + "ln_2.bias", P[h + "ln2.b"])
            put(pre + "mlp.c_fc.weight", P[h + "mlp.w_in"].T); put(pre + "mlp.c_fc.bias", np.zeros(F))
            put(pre + "mlp.c_proj.weight", P[h + "mlp.w_out"].T); put(pre + "mlp.c_proj.bias", np.zeros(d))
        put("transformer.ln_f.weight", P["lnf.w"]); put("transformer.ln_f.bias", P["lnf.b"])
    else:
        nxt = cls == "Qwen3NextForCausalLM"
        norm = lambda w: (w - np.float32(1)) if nxt else w   # Qwen3-Next: x^ (1 + w)
        put("model.embed_tokens.weight", P["wte"][:V])
        E = int(moe.get("n_expert", "0"))
        every = int(moe.get("moe_every", "1"))
        for l in range(L):
            pre, h = f"model.layers.{l}.", f"h.{l}."
            put(pre + "input_layernorm.weight", norm(P[h + "ln1.w"]))
            w = P[h + "attn.wqkv"]
            Hq, Hk = H * hd, Hkv * hd
            if nxt:   # [q_h | g_h] per head
                q = np.concatenate([np.concatenate([w[i * hd:(i + 1) * hd], w[Hq + 2 * Hk + i * hd:Hq + 2 * Hk + (i + 1) * hd]])
                                    for i in range(H)])
                put(pre + "self_attn.q_proj.weight", q)
            else:
                put(pre + "self_attn.q_proj.weight", w[:Hq])
            put(pre + "self_attn.k_proj.weight", w[Hq:Hq + Hk]); put(pre + "self_attn.v_proj.weight", w[Hq + Hk:Hq + 2 * Hk])
            if m["qk_norm"] == "true":
                put(pre + "self_attn.q_norm.weight", norm(P[h + "attn.q_norm.w"]))
                put(pre + "self_attn.k_norm.weight", norm(P[h + "attn.k_norm.w"]))
            put(pre + "self_attn.o_proj.weight", P[h + "attn.wo"])
            put(pre + "post_attention_layernorm.weight", norm(P[h + "ln2.w"]))
            if E > 0 and (l + 1) % every == 0:
                Fe = int(moe["d_expert"])
                put(pre + "mlp.gate.weight", P[h + "moe.router"])
                put(pre + "mlp.experts.gate_up_proj", P[h + "moe.w_in"]); put(pre + "mlp.experts.down_proj", P[h + "moe.w_out"])
                if moe["n_shared_expert"] == "1":
                    Fs, si = int(moe["d_shared_expert"]), P[h + "moe.shared_w_in"]
                    put(pre + "mlp.shared_expert.gate_proj.weight", si[:Fs]); put(pre + "mlp.shared_expert.up_proj.weight", si[Fs:])
                    put(pre + "mlp.shared_expert.down_proj.weight", P[h + "moe.shared_w_out"])
                    put(pre + "mlp.shared_expert_gate.weight", P[h + "moe.shared_gate"])
                assert Fe > 0
            else:
                put(pre + "mlp.gate_proj.weight", P[h + "mlp.w_in"][:F]); put(pre + "mlp.up_proj.weight", P[h + "mlp.w_in"][F:])
                put(pre + "mlp.down_proj.weight", P[h + "mlp.w_out"])
        put("model.norm.weight", norm(P["lnf.w"]))
    if m["tie_embeddings"] == "false":
        put("lm_head.weight", P["lm_head"][:V])
    return out


def expected_raw(cfg, tensors, arena):
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
    conf = json.load(open(os.path.join(outdir, "config.json")))
    raw = conf.get("model_type") == "gatedgpt"
    cls = None if raw else hf_class(cfg["model"], (cfg["moe"] if cfg.has_section("moe") else {}))
    if not raw and conf.get("architectures") != [cls]:
        fail(f"config.json architectures {conf.get('architectures')}, expected [{cls}] (an independent reading of the rules)")
    want = expected_raw(cfg, tensors, arena) if raw else expected_hf(cfg, tensors, arena, cls)
    if set(header) != set(want):
        fail(f"tensor names differ: missing {sorted(set(want) - set(header))}, extra {sorted(set(header) - set(want))}")
    spans = sorted(tuple(v["data_offsets"]) for v in header.values())
    if spans[0][0] != 0 or spans[-1][1] != len(body) or any(a[1] != b[0] for a, b in zip(spans, spans[1:])):
        fail("data_offsets do not tile the data section")
    for name, info in header.items():
        shape, blob = want[name]
        b0, b1 = info["data_offsets"]
        if info["dtype"] != "F32" or info["shape"] != list(shape):
            fail(f"{name}: {info['dtype']} {info['shape']}, expected F32 {list(shape)}")
        if body[b0:b1] != blob:
            fail(f"{name}: values differ from the checkpoint's")
    m = cfg["model"]
    if cls == "GPT2LMHeadModel":
        checks = {"vocab_size": int(m["vocab_size"]), "n_embd": int(m["d_model"]), "n_inner": int(m["d_ff"]),
                  "n_layer": int(m["n_layer"]), "n_head": int(m["n_head"]), "n_positions": int(m["max_seq_len"]),
                  "layer_norm_epsilon": float(m["norm_eps"]), "activation_function": "gelu_new"}
    else:
        checks = {"vocab_size": int(m["vocab_size"]), "hidden_size": int(m["d_model"]), "intermediate_size": int(m["d_ff"]),
                  "num_hidden_layers": int(m["n_layer"]), "num_attention_heads": int(m["n_head"]),
                  "num_key_value_heads": int(m["n_kv_head"]), "head_dim": int(m["head_dim"])}
        checks["rope_theta" if raw else "rms_norm_eps"] = float(m["rope_base"]) if raw else float(m["norm_eps"])
    checks["tie_word_embeddings"] = m["tie_embeddings"] == "true"
    for k, v in checks.items():
        if conf.get(k) != v:
            fail(f"config.json {k} = {conf.get(k)!r}, expected {v!r}")
    if not raw and cls != "GPT2LMHeadModel" and conf["rope_parameters"]["rope_theta"] != float(m["rope_base"]):
        fail(f"config.json rope_parameters {conf['rope_parameters']}, expected rope_theta {m['rope_base']}")
    if conf["gatedgpt"]["attn_gate"] != m["attn_gate"]:
        fail("config.json gatedgpt.attn_gate differs from the checkpoint's")
    if ("lm_head.weight" in header) == (m["tie_embeddings"] == "true"):
        fail("lm_head.weight present/absent against tie_embeddings")
    print(f"export: {len(header)} tensors ({len(body)} bytes) match the checkpoint's model.bin slices; "
          f"config.json: {conf['architectures'][0]}, gate {m['attn_gate']}/{m['gate_position']}/{m['gate_act']}")


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("norms", "export"):
        print(__doc__)
        sys.exit(2)
    (cmd_norms if sys.argv[1] == "norms" else cmd_export)(sys.argv[2], sys.argv[3])
