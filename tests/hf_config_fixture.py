#!/usr/bin/env python3
"""tests/hf_config_fixture.py: Hugging Face directories whose config.json is what transformers
itself writes, for every class `gatedgpt_ckpt import` reads (python3's standard library + numpy,
no torch), for tests/test_import_configs.sh.

CONFIG below holds, for each kind, config.json as transformers 5.25's
`AutoModelForCausalLM.from_config(cfg).save_pretrained(dir)` writes it for the tiny configs of
scripts/interop.py's saved_configs(): every key, with its value (`make interop` checks that the
two stay equal, key for key). Transformers 5 spells some fields differently from 4: Qwen3-MoE's
expert count is num_local_experts (its config's attribute_map; 4 wrote num_experts), RoPE is
one `rope_parameters` object (4: a top-level rope_theta, `rope_scaling` null, Qwen3-Next's
partial_rotary_factor top-level), and a few keys were added (layer_types for Qwen2-MoE,
pad_token_id, GPT-2's tie_word_embeddings). spelling4() gives what transformers 4.57.6's config
classes write for the same models (checked once against 4.57.6's save_pretrained, see
docs/formats.md; the dtype key is torch_dtype there).

The tensors: the class's state dict as save_pretrained writes it (Qwen3-MoE / Qwen2-MoE /
Qwen3-Next experts one tensor per expert, GPT-2's Conv1D weights [in, out], no lm_head when
tied), F32, N(0, 0.05^2) rounded to a multiple of 2^-12 (so Qwen3-Next's RMSNorm offset w
becomes 1 + w and back exactly); norm weights 1 + 0.1 N(0, 1) (Qwen3-Next's offsets 0.1 N(0, 1)),
GPT-2's LayerNorm biases 0.1 N(0, 1), its linear biases 0 (gatedgpt has none).

  write DIR KIND [--spelling 5|4] [--drop KEY]... [--set KEY=JSON]...
        config.json + model.safetensors. --drop removes a key, --set sets one (JSON value).
  expect CKPT KIND
        CKPT/config.ini's [model] / [moe] values against what the config gives (EXPECT).
  roundtrip SRC EXPORTED
        the export of SRC's import (EXPORTED/model.safetensors) holds SRC's tensors bit for bit
        (experts fused as export writes them: gate_up_proj [E, 2 Fe, d], down_proj [E, d, Fe]).
"""
import argparse
import json
import os
import re
import struct
import sys

import numpy as np

V, D, HEADS, KV, HD, FF, FE, FS, E = 320, 64, 4, 2, 16, 96, 32, 48, 4
LHK, LHV, LDK, LDV, LK = 2, 4, 16, 24, 4   # Qwen3-Next's linear attention: key / value heads and widths, conv kernel

# ---- config.json as transformers 5.25 writes it (shared keys first, then each class's) --------
_QWEN = {"attention_dropout": 0.0, "bos_token_id": None, "dtype": "float32", "eos_token_id": None, "hidden_act": "silu",
         "hidden_size": D, "initializer_range": 0.02, "intermediate_size": FF, "max_position_embeddings": 64,
         "num_attention_heads": HEADS, "num_hidden_layers": 2, "num_key_value_heads": KV, "pad_token_id": None,
         "rms_norm_eps": 1e-06, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
         "tie_word_embeddings": False, "transformers_version": "5.25.0", "use_cache": True, "vocab_size": V}
_MOE = {"decoder_sparse_step": 1, "mlp_only_layers": [], "moe_intermediate_size": FE, "norm_topk_prob": True,
        "num_experts_per_tok": 2, "output_router_logits": False, "router_aux_loss_coef": 0.001}
_NEXT = dict(_QWEN, **_MOE, architectures=["Qwen3NextForCausalLM"], model_type="qwen3_next", attention_bias=False, head_dim=HD,
             linear_conv_kernel_dim=LK, linear_key_head_dim=LDK, linear_num_key_heads=LHK, linear_num_value_heads=LHV,
             linear_value_head_dim=LDV, num_experts=E, shared_expert_intermediate_size=FS,
             rope_parameters={"partial_rotary_factor": 0.25, "rope_theta": 10000.0, "rope_type": "default"})
CONFIG = {
    "gpt2": {"activation_function": "gelu_new", "add_cross_attention": False, "architectures": ["GPT2LMHeadModel"],
             "attn_pdrop": 0.1, "bos_token_id": 0, "dtype": "float32", "embd_pdrop": 0.1, "eos_token_id": 0,
             "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_embd": D, "n_head": HEADS,
             "n_inner": None, "n_layer": 2, "n_positions": 64, "pad_token_id": None, "reorder_and_upcast_attn": False,
             "resid_pdrop": 0.1, "scale_attn_by_inverse_layer_idx": False, "scale_attn_weights": True,
             "summary_activation": None, "summary_first_dropout": 0.1, "summary_proj_to_labels": True,
             "summary_type": "cls_index", "summary_use_proj": True, "tie_word_embeddings": True,
             "transformers_version": "5.25.0", "use_cache": True, "vocab_size": V},
    "llama": dict(_QWEN, architectures=["LlamaForCausalLM"], model_type="llama", attention_bias=False, bos_token_id=1,
                  eos_token_id=2, head_dim=HD, mlp_bias=False, pretraining_tp=1,
                  rope_parameters={"rope_theta": 50000.0, "rope_type": "default"}),
    "qwen3": dict(_QWEN, architectures=["Qwen3ForCausalLM"], model_type="qwen3", attention_bias=False, head_dim=HD,
                  layer_types=["full_attention"] * 2, max_window_layers=28, sliding_window=None, tie_word_embeddings=True,
                  use_sliding_window=False),
    # no head_dim: Qwen3MoeConfig has none (the model takes hidden_size / heads)
    "qwen3_moe": dict(_QWEN, **_MOE, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", attention_bias=False,
                      num_local_experts=E, sliding_window=None, use_sliding_window=False),
    "qwen2_moe": dict(_QWEN, **dict(_MOE, decoder_sparse_step=2), architectures=["Qwen2MoeForCausalLM"], model_type="qwen2_moe",
                      layer_types=["full_attention"] * 2, max_window_layers=28, num_experts=E, qkv_bias=False,
                      shared_expert_intermediate_size=FS, sliding_window=0, use_sliding_window=False),
    "qwen3_next": dict(_NEXT, layer_types=["full_attention"] * 2, mlp_only_layers=[0, 1]),
    "hybrid": dict(_NEXT, num_hidden_layers=4, layer_types=["linear_attention"] * 3 + ["full_attention"], mlp_only_layers=[0, 1, 2, 3]),
    "qwen3_next_moe": dict(_NEXT, layer_types=["linear_attention", "full_attention"]),
}

# what import makes of each: [model] / [moe] keys of the checkpoint's config.ini
_EXPECT_QWEN = {"vocab_size": V, "n_layer": 2, "d_model": D, "n_head": HEADS, "n_kv_head": KV, "head_dim": HD, "d_ff": FF,
                "max_seq_len": 64, "pos": "rope", "rope_base": 10000, "rope_scaling": "none", "norm": "rmsnorm",
                "norm_eps": 1e-06, "mlp": "swiglu", "qk_norm": "true", "tie_embeddings": "false", "attn_gate": "none",
                "layer_pattern": "", "n_expert": 0}
_EXPECT_MOE = {"n_expert": E, "top_k": 2, "d_expert": FE, "moe_every": 1, "router": "softmax_topk", "capacity_factor": 0}
_EXPECT_SHARED = {"n_shared_expert": 1, "d_shared_expert": FS, "shared_expert_gate": "true"}
_EXPECT_LINEAR = {"linear_n_k_head": LHK, "linear_n_v_head": LHV, "linear_k_head_dim": LDK, "linear_v_head_dim": LDV,
                  "linear_conv_kernel": LK, "linear_gate_act": "silu"}
EXPECT = {
    "gpt2": {"vocab_size": V, "n_layer": 2, "d_model": D, "n_head": HEADS, "n_kv_head": HEADS, "head_dim": D // HEADS,
             "d_ff": 4 * D, "max_seq_len": 64, "pos": "learned", "norm": "layernorm", "norm_eps": 1e-05, "mlp": "gelu",
             "qk_norm": "false", "tie_embeddings": "true", "attn_gate": "none", "n_expert": 0},
    "llama": dict(_EXPECT_QWEN, qk_norm="false", rope_base=50000),
    "qwen3": dict(_EXPECT_QWEN, tie_embeddings="true"),
    "qwen3_moe": dict(_EXPECT_QWEN, **_EXPECT_MOE),
    "qwen2_moe": {**_EXPECT_QWEN, **_EXPECT_MOE, **_EXPECT_SHARED, "qk_norm": "false", "moe_every": 2},
    "qwen3_next": dict(_EXPECT_QWEN, attn_gate="elementwise"),
    "hybrid": dict(_EXPECT_QWEN, **_EXPECT_LINEAR, attn_gate="elementwise", n_layer=4, layer_pattern="LLLA"),
    "qwen3_next_moe": dict(_EXPECT_QWEN, **_EXPECT_MOE, **_EXPECT_SHARED, **_EXPECT_LINEAR, attn_gate="elementwise",
                           layer_pattern="LA"),
}


def spelling4(kind, c):
    """config.json as transformers 4.57.6 wrote it for the same model (the keys that differ)."""
    c = dict(c, transformers_version="4.57.6")
    c["torch_dtype"] = c.pop("dtype")
    if "rope_parameters" in c:   # 4: top-level rope_theta (and partial_rotary_factor), rope_scaling null
        rp = c.pop("rope_parameters")
        c["rope_theta"] = rp["rope_theta"]
        c["rope_scaling"] = None
        if "partial_rotary_factor" in rp:
            c["partial_rotary_factor"] = rp["partial_rotary_factor"]
    if "num_local_experts" in c:   # 4: Qwen3-MoE's expert count as num_experts
        c["num_experts"] = c.pop("num_local_experts")
    for k in ("pad_token_id", "add_cross_attention") + (("tie_word_embeddings",) if kind == "gpt2" else ()):
        c.pop(k, None)   # 4 leaves out what equals PretrainedConfig's defaults
    if kind != "gpt2" and kind != "llama":
        c.pop("bos_token_id", None)
        c.pop("eos_token_id", None)
    if kind == "qwen2_moe":   # 4: no layer_types; sliding_window null
        c.pop("layer_types")
        c["sliding_window"] = None
    return c


def shapes(kind):
    """[(name, shape)] of the tensors save_pretrained writes for KIND, in state-dict order."""
    c = CONFIG[kind]
    out = []
    if kind == "gpt2":
        out += [("transformer.wte.weight", (V, D)), ("transformer.wpe.weight", (64, D))]
        for l in range(2):
            p = f"transformer.h.{l}."
            out += [(p + "ln_1.weight", (D,)), (p + "ln_1.bias", (D,)), (p + "attn.c_attn.weight", (D, 3 * D)),
                    (p + "attn.c_attn.bias", (3 * D,)), (p + "attn.c_proj.weight", (D, D)), (p + "attn.c_proj.bias", (D,)),
                    (p + "ln_2.weight", (D,)), (p + "ln_2.bias", (D,)), (p + "mlp.c_fc.weight", (D, 4 * D)),
                    (p + "mlp.c_fc.bias", (4 * D,)), (p + "mlp.c_proj.weight", (4 * D, D)), (p + "mlp.c_proj.bias", (D,))]
        return out + [("transformer.ln_f.weight", (D,)), ("transformer.ln_f.bias", (D,))]
    next_ = c["model_type"] == "qwen3_next"
    qk_norm = c["model_type"] in ("qwen3", "qwen3_moe", "qwen3_next")
    out.append(("model.embed_tokens.weight", (V, D)))
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        out.append((p + "input_layernorm.weight", (D,)))
        if c.get("layer_types", [""] * 4)[l] == "linear_attention":
            kd, vd = LHK * LDK, LHV * LDV
            q = p + "linear_attn."
            out += [(q + "in_proj_qkvz.weight", (2 * kd + 2 * vd, D)), (q + "in_proj_ba.weight", (2 * LHV, D)),
                    (q + "conv1d.weight", (2 * kd + vd, 1, LK)), (q + "dt_bias", (LHV,)), (q + "A_log", (LHV,)),
                    (q + "norm.weight", (LDV,)), (q + "out_proj.weight", (D, vd))]
        else:
            q = p + "self_attn."
            out += [(q + "q_proj.weight", ((2 if next_ else 1) * HEADS * HD, D)), (q + "k_proj.weight", (KV * HD, D)),
                    (q + "v_proj.weight", (KV * HD, D)), (q + "o_proj.weight", (D, HEADS * HD))]
            if qk_norm:
                out += [(q + "q_norm.weight", (HD,)), (q + "k_norm.weight", (HD,))]
        moe = (c.get("num_experts", c.get("num_local_experts", 0)) > 0 and l not in c.get("mlp_only_layers", [0, 1, 2, 3])
               and (l + 1) % c.get("decoder_sparse_step", 1) == 0)
        m = p + "mlp."
        if moe:
            out.append((m + "gate.weight", (E, D)))
            for j in range(E):
                out += [(m + f"experts.{j}.gate_proj.weight", (FE, D)), (m + f"experts.{j}.up_proj.weight", (FE, D)),
                        (m + f"experts.{j}.down_proj.weight", (D, FE))]
            if "shared_expert_intermediate_size" in c:
                out += [(m + "shared_expert.gate_proj.weight", (FS, D)), (m + "shared_expert.up_proj.weight", (FS, D)),
                        (m + "shared_expert.down_proj.weight", (D, FS)), (m + "shared_expert_gate.weight", (1, D))]
        else:
            out += [(m + "gate_proj.weight", (FF, D)), (m + "up_proj.weight", (FF, D)), (m + "down_proj.weight", (D, FF))]
        out.append((p + "post_attention_layernorm.weight", (D,)))
    out.append(("model.norm.weight", (D,)))
    if not c["tie_word_embeddings"]:
        out.append(("lm_head.weight", (V, D)))
    return out


def values(kind, name, shape, rng):
    q = lambda x: (np.round(x * 4096) / 4096).astype(np.float32)   # a multiple of 2^-12: 1 + w exact
    n = rng.standard_normal(shape)
    if kind == "gpt2" and re.search(r"\.(c_attn|c_proj|c_fc)\.bias$", name):
        return np.zeros(shape, np.float32)   # gatedgpt has no linear biases
    if kind == "gpt2" and name.endswith(".bias"):
        return q(0.1 * n)
    if "norm" in name or "ln_" in name:
        # Qwen3-Next's RMSNorms store w in x^ (1 + w); its gated norm (linear_attn.norm) a plain w
        offset = CONFIG[kind]["model_type"] == "qwen3_next" and "linear_attn.norm" not in name
        return q((0.0 if offset else 1.0) + 0.1 * n)
    if name.endswith("dt_bias"):
        return q(1.0 + 0.1 * n)
    return q(0.05 * n)


def write_st(path, tensors):
    hdr, off, blobs = {}, 0, []
    for name, a in tensors:
        b = np.ascontiguousarray(a, "<f4").tobytes()
        hdr[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    hdr["__metadata__"] = {"format": "pt"}
    text = json.dumps(hdr).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_st(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    hdr = json.loads(data[8:8 + n])
    hdr.pop("__metadata__", None)
    body = data[8 + n:]
    return {k: np.frombuffer(body[v["data_offsets"][0]:v["data_offsets"][1]], "<f4").reshape(v["shape"]) for k, v in hdr.items()}


def cmd_write(a):
    os.makedirs(a.dir, exist_ok=True)
    c = CONFIG[a.kind] if a.spelling == "5" else spelling4(a.kind, CONFIG[a.kind])
    c = dict(c)
    for k in a.drop or []:
        c.pop(k)
    for kv in a.set or []:
        k, v = kv.split("=", 1)
        c[k] = json.loads(v)
    json.dump(c, open(os.path.join(a.dir, "config.json"), "w"), indent=2, sort_keys=True)
    rng = np.random.default_rng(sorted(CONFIG).index(a.kind))
    write_st(os.path.join(a.dir, "model.safetensors"), [(n, values(a.kind, n, s, rng)) for n, s in shapes(a.kind)])
    print(f"{a.dir}: {a.kind}, transformers {c['transformers_version']} spelling, {len(shapes(a.kind))} tensors")


def cmd_expect(a):
    ini, sec = {}, None
    for line in open(os.path.join(a.ckpt, "config.ini")):
        m = re.match(r"\[(\w+)\]", line)
        if m:
            sec = m.group(1)
        elif sec in ("model", "moe") and "=" in line and not line.startswith(";"):
            k, v = line.split("=", 1)
            ini[k.strip()] = v.split(";")[0].strip()
    bad = []
    for k, want in EXPECT[a.kind].items():
        got = ini.get(k)
        same = got is not None and (float(got) == float(want) if isinstance(want, (int, float)) else got == want)
        if not same:
            bad.append(f"{k} = {got} (expected {want})")
    print(f"{a.ckpt}: {len(EXPECT[a.kind])} [model]/[moe] values checked: " + ("; ".join(bad) if bad else "as config.json gives"))
    return 1 if bad else 0


def cmd_roundtrip(a):
    src = read_st(os.path.join(a.src, "model.safetensors"))
    out = read_st(os.path.join(a.exported, "model.safetensors"))
    want = {}
    for name, x in src.items():   # per-expert tensors -> export's fused layout
        m = re.match(r"(model\.layers\.\d+\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight$", name)
        if not m:
            want[name] = x
            continue
        p, j, w = m.group(1), int(m.group(2)), m.group(3)
        key = p + (".down_proj" if w == "down" else ".gate_up_proj")
        if key not in want:
            want[key] = np.zeros((E, D, FE) if w == "down" else (E, 2 * FE, D), np.float32)
        if w == "down":
            want[key][j] = x
        else:
            want[key][j, (0 if w == "gate" else FE):(FE if w == "gate" else 2 * FE)] = x
    bad = [f"only in the source: {sorted(set(want) - set(out))[:4]}"] if set(want) - set(out) else []
    bad += [f"only in the export: {sorted(set(out) - set(want))[:4]}"] if set(out) - set(want) else []
    for k in sorted(set(want) & set(out)):
        if want[k].shape != out[k].shape or want[k].tobytes() != out[k].tobytes():
            bad.append(f"{k} differs")
    print(f"{a.exported}: {len(out)} tensors against {len(src)} of {a.src}: " + ("; ".join(bad[:4]) if bad else "bit for bit"))
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("dir")
    w.add_argument("kind", choices=sorted(CONFIG))
    w.add_argument("--spelling", choices=["5", "4"], default="5")
    w.add_argument("--drop", action="append")
    w.add_argument("--set", action="append")
    e = sub.add_parser("expect")
    e.add_argument("ckpt")
    e.add_argument("kind", choices=sorted(CONFIG))
    r = sub.add_parser("roundtrip")
    r.add_argument("src")
    r.add_argument("exported")
    a = ap.parse_args()
    return {"write": cmd_write, "expect": cmd_expect, "roundtrip": cmd_roundtrip}[a.cmd](a) or 0


if __name__ == "__main__":
    sys.exit(main())
