#!/usr/bin/env python3
"""tests/safetensors_fixture.py: Hugging Face directories written by hand (python's standard
library + numpy, no torch) for tests/test_import_sharded.sh, and an independent check of what
`gatedgpt_ckpt import` made of them.

A safetensors file (the format's spec): u64 little-endian N, N bytes of JSON header
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}} padded with
spaces, then the raw little-endian data (offsets count from the end of the header). A sharded
directory (transformers' save_pretrained above max_shard_size): model-0000K-of-0000N.safetensors
and model.safetensors.index.json {"metadata": {"total_size": bytes}, "weight_map": {name: file}}.

The model is a tiny Llama (LlamaForCausalLM: no norm shift, no gate, untied head), 2 layers,
d 64, 4 query / 2 key-value heads of 16, d_ff 96, vocab 1024 (a multiple of 128: no padding
rows). wte and lm_head (1024 x 64 = 65536 values each) hold, in F16, every finite F16 bit
pattern (63488: zeros, all 2046 subnormals, all normals, both signs) and in BF16 every finite
BF16 bit pattern (65280), each in its own shuffled order; the rest is N(0, 0.05^2) in the
tensor's dtype.

  write DIR --dtype f16|bf16|f32|mixed [--shards N] [--poison NAME:INDEX:HEXBITS]
        config.json + model.safetensors (or N shards + index; tensors dealt round-robin so
        every shard holds tensors from everywhere in the model). mixed: the tensors' dtypes
        cycle F32, BF16, F16. --poison sets one element's raw bits (an inf or a NaN).
  break DIR CASE
        damage a sharded DIR: missing_shard, two_shards, wrong_map, unlisted, no_weight_map,
        twice_in_index, neither; or a single-file DIR: twice_in_header
  check CKPT DIR
        model.bin of CKPT (tests/check_ckpt.py's reader) against DIR's tensors converted here
        (F16: numpy's float16 -> float32; BF16: the bits << 16 viewed as float32; F32 as is),
        placed by Llama's mapping, compared bit for bit (so -0.0 and every subnormal count);
        every tensor of model.bin must be accounted for, the padding between tensors zero.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_ckpt import read_model  # noqa: E402  (independent model.bin reader, stdlib only)

V, D, H, HKV, HD, F, L = 1024, 64, 4, 2, 16, 96, 2
CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": D,
          "num_attention_heads": H, "num_key_value_heads": HKV, "head_dim": HD, "intermediate_size": F,
          "num_hidden_layers": L, "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
          "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False, "mlp_bias": False}
DT = {"F32": ("<f4", 4), "BF16": ("<u2", 2), "F16": ("<u2", 2)}


def shapes():
    """(name, shape) of every tensor, in the order transformers' state dict has them."""
    out = [("model.embed_tokens.weight", (V, D))]
    for l in range(L):
        p = f"model.layers.{l}."
        out += [(p + "self_attn.q_proj.weight", (H * HD, D)), (p + "self_attn.k_proj.weight", (HKV * HD, D)),
                (p + "self_attn.v_proj.weight", (HKV * HD, D)), (p + "self_attn.o_proj.weight", (D, H * HD)),
                (p + "mlp.gate_proj.weight", (F, D)), (p + "mlp.up_proj.weight", (F, D)),
                (p + "mlp.down_proj.weight", (D, F)), (p + "input_layernorm.weight", (D,)),
                (p + "post_attention_layernorm.weight", (D,))]
    return out + [("model.norm.weight", (D,)), ("lm_head.weight", (V, D))]


def every_finite(dtype, n, rng):
    """n raw 16-bit patterns: every finite pattern of the dtype once, the rest random finite values, shuffled."""
    u = np.arange(65536, dtype=np.uint32)
    finite = u[(u & 0x7C00) != 0x7C00] if dtype == "F16" else u[(u & 0x7F80) != 0x7F80]
    extra = rng.choice(finite, n - len(finite))
    return rng.permutation(np.concatenate([finite, extra])).astype(np.uint16)


def raw(dtype, shape, rng, name):
    """The tensor's bytes-to-be: uint16 bits for F16/BF16, float32 for F32."""
    n = int(np.prod(shape))
    if dtype != "F32" and name in ("model.embed_tokens.weight", "lm_head.weight"):
        return every_finite(dtype, n, rng).reshape(shape)
    x = (rng.standard_normal(n) * 0.05).astype(np.float32)
    if name.endswith("norm.weight"):
        x += 1.0
    if dtype == "F32":
        # a few special floats: both f32 subnormal extremes, -0.0, the largest and smallest normal
        special = np.array([0x00000001, 0x807FFFFF, 0x80000000, 0x7F7FFFFF, 0x00800000], dtype=np.uint32).view(np.float32)
        x[:len(special)] = special
        return x.reshape(shape)
    if dtype == "F16":
        return x.astype(np.float16).view(np.uint16).reshape(shape)
    return (x.view(np.uint32) >> 16).astype(np.uint16).reshape(shape)   # BF16: truncated, any bits do


def write_st(path, tensors, header_extra=None):
    """tensors: [(name, dtype, array)] in file order. header_extra: raw JSON text spliced in (duplicates)."""
    hdr, off, blobs = {}, 0, []
    items = []
    for name, dtype, a in tensors:
        b = np.ascontiguousarray(a).astype(DT[dtype][0]).tobytes()
        items.append(f'"{name}": ' + json.dumps({"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}))
        hdr[name] = 1
        off += len(b)
        blobs.append(b)
    items.append('"__metadata__": {"format": "pt"}')
    if header_extra:
        items.append(header_extra)
    text = ("{" + ", ".join(items) + "}").encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_st(path):
    """{name: (dtype, shape, raw bytes)} and the header text."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    hdr = json.loads(data[8:8 + n])
    hdr.pop("__metadata__", None)
    body = data[8 + n:]
    return {k: (v["dtype"], tuple(v["shape"]), body[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in hdr.items()}


def cmd_write(a):
    os.makedirs(a.dir, exist_ok=True)
    rng = np.random.default_rng({"f16": 1, "bf16": 2, "f32": 3, "mixed": 4}[a.dtype])
    cycle = ["F32", "BF16", "F16"]
    tensors = []
    for i, (name, shape) in enumerate(shapes()):
        dtype = cycle[i % 3] if a.dtype == "mixed" else a.dtype.upper()
        tensors.append((name, dtype, raw(dtype, shape, rng, name)))
    for p in a.poison or []:
        name, idx, bits = p.split(":")
        for j, (nm, dtype, arr) in enumerate(tensors):
            if nm == name:
                flat = arr.reshape(-1).copy()
                flat.view(np.uint32 if dtype == "F32" else np.uint16)[int(idx)] = int(bits, 16)
                tensors[j] = (nm, dtype, flat.reshape(arr.shape))
    json.dump(CONFIG, open(os.path.join(a.dir, "config.json"), "w"), indent=2)
    if a.shards <= 1:
        write_st(os.path.join(a.dir, "model.safetensors"), tensors)
        print(f"{a.dir}: model.safetensors, {len(tensors)} tensors")
        return
    files = [f"model-{k + 1:05d}-of-{a.shards:05d}.safetensors" for k in range(a.shards)]
    weight_map, total = {}, 0
    for k in range(a.shards):
        mine = tensors[k::a.shards]
        write_st(os.path.join(a.dir, files[k]), mine)
        for name, dtype, arr in mine:
            weight_map[name] = files[k]
            total += arr.size * DT[dtype][1]
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
              open(os.path.join(a.dir, "model.safetensors.index.json"), "w"), indent=2)
    print(f"{a.dir}: {a.shards} shards + index, {len(tensors)} tensors")


def cmd_break(a):
    ip = os.path.join(a.dir, "model.safetensors.index.json")
    if a.case == "twice_in_header":   # a single file whose header names a tensor twice
        p = os.path.join(a.dir, "model.safetensors")
        t = read_st(p)
        items = [(k, v[0], np.frombuffer(v[2], DT[v[0]][0]).reshape(v[1])) for k, v in t.items()]
        dup = json.dumps({"dtype": items[1][1], "shape": list(items[1][2].shape), "data_offsets": [0, items[1][2].nbytes]})
        write_st(p, items, f'"{items[1][0]}": {dup}')
        return
    idx = json.load(open(ip))
    wm = idx["weight_map"]
    names = list(wm)
    files = sorted(set(wm.values()))
    if a.case == "missing_shard":
        os.remove(os.path.join(a.dir, files[1]))
    elif a.case == "two_shards":   # a tensor of shard 1 also written into shard 3 (the index still says shard 1)
        victim = next(k for k in names if wm[k] == files[0])
        src = read_st(os.path.join(a.dir, files[0]))[victim]
        p3 = os.path.join(a.dir, files[2])
        t = read_st(p3)
        items = [(k, v[0], np.frombuffer(v[2], DT[v[0]][0]).reshape(v[1])) for k, v in t.items()]
        items.append((victim, src[0], np.frombuffer(src[2], DT[src[0]][0]).reshape(src[1])))
        write_st(p3, items)
    elif a.case == "wrong_map":   # an entry names a shard that does not hold its tensor
        victim = next(k for k in names if wm[k] == files[0])
        wm[victim] = files[1]
        json.dump(idx, open(ip, "w"))
    elif a.case == "unlisted":   # a shard holds a tensor the index does not list
        del wm[names[-1]]
        json.dump(idx, open(ip, "w"))
    elif a.case == "no_weight_map":
        json.dump({"metadata": idx["metadata"], "weights": wm}, open(ip, "w"))
    elif a.case == "twice_in_index":   # a JSON object with a repeated key (json.dump cannot write one)
        text = json.dumps(idx)
        k = names[0]
        text = text.replace('"weight_map": {', '"weight_map": {' + json.dumps(k) + ": " + json.dumps(wm[k]) + ", ", 1)
        open(ip, "w").write(text)
    elif a.case == "neither":
        os.remove(ip)
    else:
        sys.exit(f"unknown case {a.case}")


def convert(dtype, b):
    """The independent conversion to float32."""
    if dtype == "F32":
        return np.frombuffer(b, "<f4")
    u = np.frombuffer(b, "<u2")
    if dtype == "F16":
        return u.view(np.float16).astype(np.float32)
    return (u.astype(np.uint32) << 16).view(np.float32)


def cmd_check(a):
    ip = os.path.join(a.dir, "model.safetensors.index.json")
    if os.path.exists(os.path.join(a.dir, "model.safetensors")):
        src = read_st(os.path.join(a.dir, "model.safetensors"))
    else:
        src = {}
        for f in sorted(set(json.load(open(ip))["weight_map"].values())):
            src.update(read_st(os.path.join(a.dir, f)))
    hf = {k: convert(v[0], v[2]).reshape(v[1]) for k, v in src.items()}
    dtypes = {k: v[0] for k, v in src.items()}
    want = {"wte": hf["model.embed_tokens.weight"], "lnf.w": hf["model.norm.weight"], "lm_head": hf["lm_head.weight"]}
    for l in range(L):
        p = f"model.layers.{l}."
        want[f"h.{l}.ln1.w"] = hf[p + "input_layernorm.weight"]
        want[f"h.{l}.ln2.w"] = hf[p + "post_attention_layernorm.weight"]
        want[f"h.{l}.attn.wqkv"] = np.concatenate([hf[p + "self_attn." + x + "_proj.weight"] for x in "qkv"])
        want[f"h.{l}.attn.wo"] = hf[p + "self_attn.o_proj.weight"]
        want[f"h.{l}.mlp.w_in"] = np.concatenate([hf[p + "mlp.gate_proj.weight"], hf[p + "mlp.up_proj.weight"]])
        want[f"h.{l}.mlp.w_out"] = hf[p + "mlp.down_proj.weight"]
    tensors, arena = read_model(a.ckpt)
    got = np.frombuffer(arena, "<u4")
    covered = np.zeros(len(got), bool)
    bad = 0
    for name, shape, off, numel in tensors:
        covered[off:off + numel] = True
        if name not in want:
            print(f"FAIL: model.bin tensor {name} {shape}: not in the Llama mapping")
            bad += 1
            continue
        w = np.ascontiguousarray(want.pop(name), np.float32)
        if w.size != numel:
            print(f"FAIL: {name}: {numel} values in model.bin, {w.size} expected")
            bad += 1
            continue
        diff = np.nonzero(got[off:off + numel] != w.reshape(-1).view(np.uint32))[0]
        if len(diff):
            i = int(diff[0])
            print(f"FAIL: {name}: {len(diff)} of {numel} values differ, first at {i}: "
                  f"{got[off + i]:#010x} != {w.reshape(-1).view(np.uint32)[i]:#010x}")
            bad += 1
    if want:
        print(f"FAIL: not in model.bin: {sorted(want)}")
        bad += 1
    if np.any(got[~covered] != 0):
        print("FAIL: padding between tensors not zero")
        bad += 1
    # what the comparison covered: per source dtype, the values and the distinct finite bit
    # patterns among them, and how many of those are subnormal (F16: exponent bits 0; BF16: the
    # float32 exponent bits 0), so the test can see that every pattern was there
    notes = []
    for dt in sorted(set(dtypes.values())):
        b = [np.frombuffer(src[k][2], "<u2" if dt != "F32" else "<u4") for k in src if dtypes[k] == dt]
        u = np.unique(np.concatenate(b))
        expo = {"F16": 0x7C00, "BF16": 0x7F80, "F32": 0x7F800000}[dt]
        sub = int(np.sum(((u & expo) == 0) & ((u & ~expo & (expo - 1 if dt == "F32" else 0x7FFF)) != 0)))
        notes.append(f"{dt}: {sum(len(x) for x in b)} values, {len(u)} distinct bit patterns, {sub} subnormal")
    print(f"{a.ckpt}: {len(tensors)} tensors, {int(covered.sum())} floats compared bit for bit ({'; '.join(notes)}): "
          f"{'FAIL' if bad else 'equal'}")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("dir")
    w.add_argument("--dtype", choices=["f16", "bf16", "f32", "mixed"], required=True)
    w.add_argument("--shards", type=int, default=1)
    w.add_argument("--poison", action="append")
    b = sub.add_parser("break")
    b.add_argument("dir")
    b.add_argument("case")
    c = sub.add_parser("check")
    c.add_argument("ckpt")
    c.add_argument("dir")
    a = ap.parse_args()
    return {"write": cmd_write, "break": cmd_break, "check": cmd_check}[a.cmd](a) or 0


if __name__ == "__main__":
    sys.exit(main())
