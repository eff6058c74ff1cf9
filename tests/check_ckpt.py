#!/usr/bin/env python3
"""tests/check_ckpt.py: an independent reader of gatedgpt checkpoints (docs/formats.md), for
tests/test_ckpt_tools.sh. Standard library only (json, struct, zlib).

  check_ckpt.py norms CKPT INSPECT_OUTPUT   per-tensor norms printed by `gatedgpt_ckpt inspect`
                                            against norms computed here from model.bin
  check_ckpt.py export CKPT EXPORT_DIR      model.safetensors + config.json written by
                                            `gatedgpt_ckpt export` against model.bin, with the
                                            Hugging Face names re-derived here from the docs
  check_ckpt.py same_config DIR_A DIR_B     two exports' config.json field for field (an export
                                            against the export of its import)
  check_ckpt.py unfuse SRC_DIR DST_DIR      an export's fused MoE experts rewritten one tensor per
                                            expert (the Hub's layout), for import

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


def layer_kinds(m):
    """Per layer: True for a Gated DeltaNet (layer_pattern's letter L, the pattern repeated)."""
    pat = m.get("layer_pattern", "").strip()
    return [bool(pat) and pat[l % len(pat)] == "L" for l in range(int(m["n_layer"]))]


def hf_class(m, moe):
    """The transformers class that represents the model exactly (docs/formats.md "Export"), or None."""
    gated = m["attn_gate"] != "none"
    kinds = layer_kinds(m)
    if any(kinds):   # hybrid: Qwen3-Next (silu output gate; its attention layers gated, qk-normed)
        E = int(moe.get("n_expert", "0"))
        if m["linear_gate_act"] != "silu" or m["pos"] != "rope" or m["norm"] != "rmsnorm" or m["mlp"] != "swiglu":
            return None
        if not all(kinds) and ((m["attn_gate"], m["gate_position"], m["gate_act"]) != ("elementwise", "sdpa", "sigmoid")
                               or m["qk_norm"] != "true"):
            return None
        if E > 0 and (moe["router"] != "softmax_topk" or float(moe["capacity_factor"]) > 0
                      or moe["n_shared_expert"] != "1" or moe["shared_expert_gate"] != "true"):
            return None
        return "Qwen3NextForCausalLM"
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


def gdn_dims(m):
    return [int(m[k]) for k in ("linear_n_k_head", "linear_n_v_head", "linear_k_head_dim", "linear_v_head_dim",
                                "linear_conv_kernel")]


def put_gdn(put, m, P, pre, h):
    """A Gated DeltaNet layer as Qwen3-Next's linear_attn (transformers' Qwen3NextGatedDeltaNet):
    in_proj_qkvz grouped per key head g: [q_g | k_g | v of value heads g*rep.. | z of them]
    (fix_query_key_value_ordering); in_proj_ba per key head: [b (rep) | a (rep)]; conv1d [C, 1, K]
    with channels [q | k | v] (w_qkv's rows); norm.weight as it is (RMSNormGated: x^ * w)."""
    import numpy as np
    Hk, Hv, dk, dv, K = gdn_dims(m)
    d, rep, Kd = int(m["d_model"]), Hv // Hk, Hk * dk
    w, z, ba = P[h + "w_qkv"], P[h + "w_z"], P[h + "w_ba"]
    groups = [w[:Kd].reshape(Hk, dk, d), w[Kd:2 * Kd].reshape(Hk, dk, d), w[2 * Kd:].reshape(Hk, rep * dv, d),
              z.reshape(Hk, rep * dv, d)]
    put(pre + "in_proj_qkvz.weight", np.concatenate(groups, axis=1).reshape(-1, d))
    put(pre + "in_proj_ba.weight", np.concatenate([ba[:Hv].reshape(Hk, rep, d), ba[Hv:].reshape(Hk, rep, d)], axis=1).reshape(-1, d))
    put(pre + "conv1d.weight", P[h + "conv_w"].reshape(-1, 1, K))
    put(pre + "dt_bias", P[h + "dt_bias"]); put(pre + "A_log", P[h + "A_log"])
    put(pre + "norm.weight", P[h + "norm_w"]); put(pre + "out_proj.weight", P[h + "w_out"])


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
    kinds = layer_kinds(m)
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
            if kinds[l]:
                put_gdn(put, m, P, pre + "linear_attn.", h + "gdn.")
            else:
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
                 "attn.wo": "self_attn.o_proj.weight", "mlp.w_out": "mlp.down_proj.weight",
                 # Gated DeltaNet: Qwen3.5's names, which have gatedgpt's layout
                 "gdn.w_qkv": "linear_attn.in_proj_qkv.weight", "gdn.w_z": "linear_attn.in_proj_z.weight",
                 "gdn.conv_w": "linear_attn.conv1d.weight", "gdn.A_log": "linear_attn.A_log",
                 "gdn.dt_bias": "linear_attn.dt_bias", "gdn.norm_w": "linear_attn.norm.weight",
                 "gdn.w_out": "linear_attn.out_proj.weight"}
        if rest in plain:
            out[pre + plain[rest]] = (shape, whole)
        elif rest == "gdn.w_ba":   # rows [b (Hv) | a (Hv)]
            Hv = shape[0] // 2
            out[pre + "linear_attn.in_proj_b.weight"] = ([Hv, d], rows(offset, d, 0, Hv))
            out[pre + "linear_attn.in_proj_a.weight"] = ([Hv, d], rows(offset, d, Hv, Hv))
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


def rope_parameters(m, cls):
    """transformers 5's rope_parameters for [model]'s RoPE (docs/config.md, kernels/rope.h): "ntk" is
    a larger base, base * s^(hd / (hd - 2)); linear and yarn name their factor and the training
    length; yarn its betas, and its attention factor only when set (0 = transformers' default,
    0.1 ln s + 1)."""
    kind, hd = m["rope_scaling"], int(m["head_dim"])
    # partial RoPE: rot = head_dim x rope_fraction channels turn (a whole even number, within the
    # float's rounding: docs/config.md); ntk's exponent and partial_rotary_factor are over rot
    rot = round(hd * float(m.get("rope_fraction", "1")))
    rp = {"rope_type": kind if kind in ("linear", "yarn") else "default", "rope_theta": float(m["rope_base"])}
    if kind == "ntk":
        rp["rope_theta"] = float(m["rope_base"]) * float(m["rope_factor"]) ** (rot / (rot - 2))
    if kind in ("linear", "yarn"):
        rp["factor"] = float(m["rope_factor"])
    if kind == "yarn":   # (transformers' linear has no training length: it would warn about the key)
        rp["original_max_position_embeddings"] = int(m["rope_original_len"])
        rp["beta_fast"], rp["beta_slow"] = float(m["yarn_beta_fast"]), float(m["yarn_beta_slow"])
        if float(m["yarn_attn_factor"]) > 0:
            rp["attention_factor"] = float(m["yarn_attn_factor"])
    if cls == "Qwen3NextForCausalLM":
        # written always (Qwen3-Next's default is 0.25): rot / hd, or the next double up if
        # transformers' int(hd * factor) would give rot - 1
        f = rot / hd
        while int(hd * f) < rot:
            f = math.nextafter(f, 2.0)
        rp["partial_rotary_factor"] = f
    return rp


def same_json(got, want):
    """got (parsed JSON) equals want, of the same JSON type: a float written as a float (10000.0, not
    10000: transformers warns about an integer attention_factor), a bool as a bool (Python's
    True == 1 would hide `1` for `true`), an int as an int."""
    if isinstance(want, bool) or isinstance(got, bool):
        return got is want
    if isinstance(want, dict):
        return isinstance(got, dict) and set(got) == set(want) and all(same_json(got[k], want[k]) for k in want)
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(same_json(a, b) for a, b in zip(got, want))
    return type(got) is type(want) and got == want


def check_config_json(conf, cfg, cls, raw, outdir, step):
    """Every field of an export's config.json against the checkpoint's config.ini, re-derived from
    docs/formats.md "Export": a field missing, extra, or of another value fails."""
    m = cfg["model"]
    moe = cfg["moe"] if cfg.has_section("moe") else {}
    L, E = int(m["n_layer"]), int(moe.get("n_expert", "0"))
    kinds = layer_kinds(m)
    types = {"GPT2LMHeadModel": "gpt2", "LlamaForCausalLM": "llama", "Qwen3ForCausalLM": "qwen3",
             "Qwen3NextForCausalLM": "qwen3_next", "Qwen3MoeForCausalLM": "qwen3_moe", "Qwen2MoeForCausalLM": "qwen2_moe"}
    want = {"architectures": ["GatedGPTForCausalLM" if raw else cls], "model_type": "gatedgpt" if raw else types[cls],
            "vocab_size": int(m["vocab_size"])}
    if cls == "GPT2LMHeadModel":
        want.update({"n_embd": int(m["d_model"]), "n_layer": L, "n_head": int(m["n_head"]),
                     "n_positions": int(m["max_seq_len"]), "n_inner": int(m["d_ff"]), "activation_function": "gelu_new",
                     "layer_norm_epsilon": float(m["norm_eps"]), "resid_pdrop": 0.0, "embd_pdrop": 0.0,
                     "attn_pdrop": 0.0, "scale_attn_weights": True})
    else:
        want.update({"hidden_size": int(m["d_model"]), "intermediate_size": int(m["d_ff"]), "num_hidden_layers": L,
                     "num_attention_heads": int(m["n_head"]), "num_key_value_heads": int(m["n_kv_head"]),
                     "head_dim": int(m["head_dim"]), "max_position_embeddings": int(m["max_seq_len"])})
        if raw:
            want.update({"rope_theta": float(m["rope_base"]), "norm_eps": float(m["norm_eps"])})
        else:
            want.update({"rope_parameters": rope_parameters(m, cls), "rms_norm_eps": float(m["norm_eps"]),
                         "hidden_act": "silu", "attention_bias": False})
        if cls == "LlamaForCausalLM":
            want["mlp_bias"] = False
        if cls == "Qwen3NextForCausalLM":
            want["layer_types"] = ["linear_attention" if k else "full_attention" for k in kinds]
            if any(kinds):
                for key, v in zip(("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                                   "linear_value_head_dim", "linear_conv_kernel_dim"), gdn_dims(m)):
                    want[key] = v
        if cls == "Qwen2MoeForCausalLM":
            want.update({"qkv_bias": False, "use_sliding_window": False})
        if E > 0 and not raw:
            # transformers' rule, layer i sparse when (i + 1) % decoder_sparse_step == 0, is moe_every's
            want.update({"num_experts": E, "num_experts_per_tok": int(moe["top_k"]),
                         "moe_intermediate_size": int(moe["d_expert"]), "norm_topk_prob": True,
                         "decoder_sparse_step": int(moe["moe_every"]), "mlp_only_layers": [],
                         "router_aux_loss_coef": float(moe["aux_loss_coef"])})
            if cls != "Qwen3MoeForCausalLM":
                want["shared_expert_intermediate_size"] = int(moe["d_shared_expert"])
        elif cls == "Qwen3NextForCausalLM":
            want.update({"num_experts": 0, "mlp_only_layers": list(range(L))})
    # the tokenizer's end-of-text id: the exported tokenizer.json's, else the header of the
    # tokenizer file config.ini names (docs/formats.md: ours [3]; llm.c's [3] in version 2, 50256 in 1)
    eot = None
    tj = os.path.join(outdir, "tokenizer.json")
    tok = cfg["data"].get("tokenizer", "").strip() if cfg.has_section("data") else ""
    if os.path.exists(tj):
        ids = [t["id"] for t in json.load(open(tj, encoding="utf-8"))["added_tokens"] if t["content"] == "<|endoftext|>"]
        if len(ids) != 1:
            fail(f"{tj}: no single <|endoftext|> added token")
        eot = ids[0]
    elif tok:
        h = struct.unpack("<4i", open(tok, "rb").read(16))
        eot = h[3] if h[0] == 20250611 or (h[0] == 20240328 and h[1] == 2) else (50256 if h[2] > 50256 else None)
    if eot is not None:
        want["bos_token_id"] = want["eos_token_id"] = eot
    want["tie_word_embeddings"] = m["tie_embeddings"] == "true"
    want["dtype"] = "float32"
    gg = {"step": step}
    for sec, pre in (("model", ""), ("moe", "moe.")):
        if cfg.has_section(sec):
            for k, v in cfg[sec].items():
                gg[pre + k] = v.strip()
    want["gatedgpt"] = gg
    if set(conf) != set(want):
        fail(f"config.json fields: missing {sorted(set(want) - set(conf))}, extra {sorted(set(conf) - set(want))}")
    for k, v in want.items():
        got = conf[k]
        if k == "rope_parameters" and m["rope_scaling"] == "ntk":
            # the base is a double product: within 2 ulp of the value computed here
            gt = got.get("rope_theta", 0.0)
            if abs(gt - v["rope_theta"]) > 4.5e-16 * v["rope_theta"]:
                fail(f"config.json rope_parameters.rope_theta = {gt!r}, expected {v['rope_theta']!r}")
            got = dict(got, rope_theta=v["rope_theta"])
        if not same_json(got, v):
            fail(f"config.json {k} = {got!r}, expected {v!r}")
    return want


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
    check_config_json(conf, cfg, cls, raw, outdir, int(meta.get("step", "-1")))
    kinds = layer_kinds(m)
    if ("lm_head.weight" in header) == (m["tie_embeddings"] == "true"):
        fail("lm_head.weight present/absent against tie_embeddings")
    hyb = f", layer_pattern {m['layer_pattern']} ({sum(kinds)} Gated DeltaNet layer{'s' if sum(kinds) != 1 else ''})" if any(kinds) else ""
    print(f"export: {len(header)} tensors ({len(body)} bytes) match the checkpoint's model.bin slices; "
          f"config.json: {conf['architectures'][0]}, gate {m['attn_gate']}/{m['gate_position']}/{m['gate_act']}{hyb}")


def cmd_unfuse(src, dst):
    """src/model.safetensors with each fused mlp.experts.{gate_up,down}_proj [E, ...] written as one
    mlp.experts.J.{gate,up,down}_proj.weight per expert (the Hub's layout, and transformers'
    save_pretrained's), into dst/model.safetensors (config.json copied)."""
    import shutil
    data = open(os.path.join(src, "model.safetensors"), "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    body = data[8 + n:]
    out = []
    for name, info in header.items():
        b0, b1 = info["data_offsets"]
        blob, shape = body[b0:b1], info["shape"]
        if name.endswith("mlp.experts.gate_up_proj") or name.endswith("mlp.experts.down_proj"):
            E, per = shape[0], len(blob) // shape[0]
            pre = name.rsplit(".", 1)[0]
            for j in range(E):
                part = blob[j * per:(j + 1) * per]
                if name.endswith("gate_up_proj"):
                    F2 = shape[1]
                    half = len(part) // 2
                    out.append((f"{pre}.{j}.gate_proj.weight", [F2 // 2, shape[2]], part[:half]))
                    out.append((f"{pre}.{j}.up_proj.weight", [F2 // 2, shape[2]], part[half:]))
                else:
                    out.append((f"{pre}.{j}.down_proj.weight", shape[1:], part))
        else:
            out.append((name, shape, blob))
    hdr, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, blob in out:
        hdr[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(blob)]}
        off += len(blob)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(dst, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(b for _, _, b in out))
    shutil.copy(os.path.join(src, "config.json"), dst)
    print(f"unfuse: {len(header)} tensors -> {len(out)}")


def cmd_same_config(a_dir, b_dir):
    """Two exports' config.json agree field for field, except the gatedgpt object (import fills in
    keys transformers has no field for) and bos/eos (an imported checkpoint names no tokenizer);
    rope_theta within fp32 rounding ([model] rope_base is a float: an NTK export's double base,
    imported, rounds once (half a float ulp), and is written back as the shortest decimal that
    reads as that float (up to another half ulp): 2^-23 relative)."""
    a, b = (json.load(open(os.path.join(d, "config.json"))) for d in (a_dir, b_dir))
    for d in (a, b):
        for k in ("gatedgpt", "bos_token_id", "eos_token_id"):
            d.pop(k, None)
    ta, tb = (d.get("rope_parameters", {}).get("rope_theta") for d in (a, b))
    if ta is not None and tb is not None and abs(ta - tb) <= 2.0 ** -23 * abs(ta):
        b["rope_parameters"]["rope_theta"] = ta
    diff = sorted(k for k in set(a) | set(b) if a.get(k, "(absent)") != b.get(k, "(absent)"))
    if diff:
        fail("config.json fields differ: " + "; ".join(f"{k}: {a.get(k, '(absent)')!r} vs {b.get(k, '(absent)')!r}" for k in diff))
    print(f"config.json: {len(a)} fields agree")


if __name__ == "__main__":
    cmds = {"norms": cmd_norms, "export": cmd_export, "unfuse": cmd_unfuse, "same_config": cmd_same_config}
    if len(sys.argv) != 4 or sys.argv[1] not in cmds:
        print(__doc__)
        sys.exit(2)
    cmds[sys.argv[1]](sys.argv[2], sys.argv[3])
