"""Independent PyTorch reference of the gatedgpt model (tests/reference/model.py).

Written from the model specification (the math, parameter layout and golden file format the
C implementation follows), not from the C code: plain torch ops, autograd for the backward,
a hand-written AdamW with global-norm clip. gen_golden.py uses it to produce the golden files
the C model is tested against, so every line here is meant to be the spec's math and nothing
else.

Conventions (the spec's):
  - nn.Linear layout: a weight W has shape [out, in] and y = x @ W^T; with bias = true (GPT-2)
    the attention's and the dense MLP's linear layers add a bias b [out]: y = x @ W^T + b.
  - Parameters live in an OrderedDict name -> tensor; the order is the order the C side
    reads them from a golden file (param_shapes() below is the single source of that order).
  - Vocabulary padded to V_p (a multiple of 128); logits have V_p columns, the loss only
    looks at the first V = vocab_size of them.

Works in any floating dtype: gen_golden.py runs it in float64 for the golden numbers and in
float32 to measure how close an fp32 implementation can get.
"""
import configparser
import math
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch

# ----------------------------------------------------------------------------------------------
# Config

# Defaults of every key the reference uses (spec: "INI keys (sections and defaults)").
MODEL_DEFAULTS = dict(
    vocab_size="50257", n_layer="12", d_model="768", n_head="12", n_kv_head="0", head_dim="0",
    d_ff="0", max_seq_len="1024", pos="rope", rope_base="10000", rope_fraction="1", rope_scaling="none",
    rope_factor="1", rope_original_len="0", yarn_beta_fast="32", yarn_beta_slow="1",
    yarn_attn_factor="0", norm="rmsnorm",
    norm_eps="1e-5", qk_norm="false", mlp="swiglu", tie_embeddings="true", bias="false", attn_gate="none",
    gate_position="sdpa", gate_act="sigmoid", init_std="0.02",
    layer_pattern="", linear_n_k_head="0", linear_n_v_head="0", linear_k_head_dim="0",
    linear_v_head_dim="0", linear_conv_kernel="4", linear_gate_act="silu", linear_chunk="64",
)
# the hybrid layers' keys, which must keep their defaults when no layer is linear
LINEAR_KEYS = ("linear_n_k_head", "linear_n_v_head", "linear_k_head_dim", "linear_v_head_dim",
               "linear_conv_kernel", "linear_gate_act", "linear_chunk")
MOE_DEFAULTS = dict(
    n_expert="0", top_k="2", d_expert="0", n_shared_expert="0", d_shared_expert="0",
    shared_expert_gate="false", moe_every="1", router="softmax_topk", aux_loss_coef="0.01",
    z_loss_coef="0.001", capacity_factor="0",
)
TRAIN_DEFAULTS = dict(
    seed="1337", batch_size="4", seq_len="64", tokens_per_step="0", steps="100", lr="3e-4",
    min_lr_frac="0.1", warmup_steps="10", schedule="cosine", wsd_decay_frac="0.2",
    weight_decay="0.1", beta1="0.9", beta2="0.95", eps="1e-8", grad_clip="1.0", threads="0",
)
# [data]: attention within documents (docs/config.md); the end-of-text id is vocab_size - 1, a
# gatedgpt tokenizer's (the golden file carries it as doc_eot)
DATA_DEFAULTS = dict(doc_mask="false", doc_positions="continue")
ENUMS = dict(
    pos=("rope", "learned"), rope_scaling=("none", "linear", "ntk", "yarn"),
    norm=("rmsnorm", "layernorm"), mlp=("swiglu", "gelu"),
    attn_gate=("none", "elementwise", "headwise"), gate_position=("sdpa", "value"),
    gate_act=("sigmoid", "ns_sigmoid", "silu"), linear_gate_act=("sigmoid", "ns_sigmoid", "silu"),
    schedule=("cosine", "linear", "constant", "wsd"), router=("softmax_topk", "sigmoid_topk"),
    doc_positions=("continue", "restart"),
)
BOOLS = {"true": True, "1": True, "yes": True, "on": True,
         "false": False, "0": False, "no": False, "off": False}


@dataclass
class Config:
    # [model]
    vocab_size: int
    n_layer: int
    d_model: int
    n_head: int
    n_kv_head: int      # resolved (0 -> n_head)
    head_dim: int       # resolved (0 -> d_model / n_head)
    d_ff: int           # resolved (0 -> 4 * d_model)
    max_seq_len: int
    pos: str
    rope_base: float
    rope_dim: int             # rotated channels of a head: head_dim * rope_fraction (partial RoPE)
    rope_scaling: str         # none | linear | ntk | yarn (see rope_inv_freq)
    rope_factor: float        # s >= 1
    rope_original_len: int    # L_train, resolved (0 -> [train] seq_len)
    yarn_beta_fast: float
    yarn_beta_slow: float
    yarn_attn_factor: float   # resolved (0 -> 0.1 ln(s) + 1)
    norm: str
    norm_eps: float
    qk_norm: bool
    mlp: str
    tie_embeddings: bool
    bias: bool                # linear biases: attn.bqkv, attn.bo, mlp.b_in, mlp.b_out
    attn_gate: str
    gate_position: str
    gate_act: str
    init_std: float
    # hybrid layers (Gated DeltaNet beside full attention; see gdn_block)
    layer_pattern: str        # "" = all full attention; else 'A' / 'L' per layer, repeated
    linear_n_k_head: int      # Hk, resolved (0 -> max(1, Hv // 2))
    linear_n_v_head: int      # Hv, resolved (0 -> n_head)
    linear_k_head_dim: int    # dk, resolved (0 -> head_dim)
    linear_v_head_dim: int    # dv, resolved (0 -> head_dim)
    linear_conv_kernel: int   # K
    linear_gate_act: str      # the output gate's activation (sigmoid | ns_sigmoid | silu)
    linear_chunk: int         # the C side's chunk length; does not change the math (unused here)
    # [moe] (n_expert = 0: dense)
    n_expert: int
    top_k: int
    d_expert: int          # resolved (0 -> d_ff)
    n_shared_expert: int
    d_shared_expert: int   # resolved (0 -> d_expert)
    shared_expert_gate: bool
    moe_every: int
    router: str
    aux_loss_coef: float
    z_loss_coef: float
    capacity_factor: float
    # [train]
    seed: int
    batch_size: int
    seq_len: int
    steps: int
    lr: float
    warmup_steps: int
    schedule: str
    weight_decay: float
    beta1: float
    beta2: float
    eps: float
    grad_clip: float
    # [data] attention within documents
    doc_mask: bool = False
    doc_restart: bool = False   # doc_positions = restart: RoPE positions restart at each document
    doc_eot: int = -1           # the end-of-text id that closes a document (vocab_size - 1)

    @property
    def padded_vocab(self):
        return (self.vocab_size + 127) // 128 * 128

    def is_linear(self, layer):
        """Layer `layer` (0-based) is a Gated DeltaNet when layer_pattern[layer % len] == 'L'."""
        n = len(self.layer_pattern)
        return n > 0 and self.layer_pattern[layer % n] == "L"

    @property
    def any_linear(self):
        return any(self.is_linear(l) for l in range(self.n_layer))

    def is_moe(self, layer):
        """Layer `layer` (0-based) is an MoE layer when (layer + 1) % moe_every == 0."""
        return self.n_expert > 0 and (layer + 1) % self.moe_every == 0

    @property
    def gate_dim(self):
        """G: number of gate rows at the end of wqkv (per token gate logits)."""
        if self.attn_gate == "none":
            return 0
        heads = self.n_head if self.gate_position == "sdpa" else self.n_kv_head
        return heads * self.head_dim if self.attn_gate == "elementwise" else heads


def load_config(path):
    """Read a gatedgpt INI; keys missing from the file take the spec's defaults."""
    cp = configparser.ConfigParser(comment_prefixes=(";", "#"), inline_comment_prefixes=(";",),
                                   interpolation=None)
    with open(path) as f:
        cp.read_file(f)

    def section(name, defaults, strict):
        d = dict(defaults)
        if cp.has_section(name):
            for k, v in cp.items(name):
                if k not in d:
                    # an unknown [model] key could change the math: refuse it; an unknown
                    # [train] key (logging, schedules) cannot change 3 constant-lr steps
                    if strict:
                        raise ValueError(f"{path}: [{name}] {k}: unknown to the reference")
                    continue
                d[k] = v.strip()
        return d

    m = section("model", MODEL_DEFAULTS, strict=True)
    e = section("moe", MOE_DEFAULTS, strict=True)
    t = section("train", TRAIN_DEFAULTS, strict=False)
    dd = section("data", DATA_DEFAULTS, strict=False)

    def enum(d, k):
        v = d[k].lower()
        if v not in ENUMS[k]:
            raise ValueError(f"{path}: {k}={d[k]} (accepted: {', '.join(ENUMS[k])})")
        return v

    def boolean(d, k):
        v = d[k].lower()
        if v not in BOOLS:
            raise ValueError(f"{path}: {k}={d[k]} is not a bool")
        return BOOLS[v]

    n_head = int(m["n_head"])
    d_model = int(m["d_model"])
    n_kv_head = int(m["n_kv_head"]) or n_head
    head_dim = int(m["head_dim"])
    if head_dim == 0:
        if d_model % n_head:
            raise ValueError(f"{path}: head_dim=0 needs n_head | d_model")
        head_dim = d_model // n_head
    d_ff = int(m["d_ff"]) or 4 * d_model
    # partial RoPE: the first head_dim * rope_fraction channels of each head turn, a whole even
    # number of them (transformers' partial_rotary_factor: dim = int(head_dim * factor))
    frac = float(m["rope_fraction"])
    if not 0.0 < frac <= 1.0:
        raise ValueError(f"{path}: rope_fraction must be in (0, 1]")
    rope_dim = round(head_dim * frac)
    if m["pos"].lower() == "rope" and (abs(head_dim * frac - rope_dim) > 1e-3 or rope_dim < 2 or rope_dim % 2):
        raise ValueError(f"{path}: head_dim * rope_fraction must be a whole even number >= 2")
    rope_factor = float(m["rope_factor"])
    attn_factor = float(m["yarn_attn_factor"])
    if attn_factor == 0.0:
        attn_factor = 0.1 * math.log(rope_factor) + 1.0 if rope_factor > 1.0 else 1.0
    pattern = m["layer_pattern"].strip()
    if any(ch not in "AL" for ch in pattern):
        raise ValueError(f"{path}: layer_pattern={pattern}: only the letters A and L")
    if pattern and int(m["n_layer"]) % len(pattern):
        raise ValueError(f"{path}: layer_pattern length must divide n_layer")
    any_linear = "L" in pattern
    if not any_linear:
        for k in LINEAR_KEYS:
            if (m[k].lower() if k == "linear_gate_act" else int(m[k])) != \
                    (MODEL_DEFAULTS[k] if k == "linear_gate_act" else int(MODEL_DEFAULTS[k])):
                raise ValueError(f"{path}: {k} has no effect without an L in layer_pattern")
    lin_v = int(m["linear_n_v_head"]) or n_head
    lin_k = int(m["linear_n_k_head"]) or max(1, lin_v // 2)
    lin_dk = int(m["linear_k_head_dim"]) or head_dim
    lin_dv = int(m["linear_v_head_dim"]) or head_dim
    n_expert = int(e["n_expert"])
    d_expert = (int(e["d_expert"]) or d_ff) if n_expert else 0
    n_shared = int(e["n_shared_expert"]) if n_expert else 0
    c = Config(
        vocab_size=int(m["vocab_size"]), n_layer=int(m["n_layer"]), d_model=d_model,
        n_head=n_head, n_kv_head=n_kv_head, head_dim=head_dim,
        d_ff=d_ff, max_seq_len=int(m["max_seq_len"]),
        pos=enum(m, "pos"), rope_base=float(m["rope_base"]), rope_dim=rope_dim,
        rope_scaling=enum(m, "rope_scaling"), rope_factor=rope_factor,
        rope_original_len=int(m["rope_original_len"]) or int(t["seq_len"]),
        yarn_beta_fast=float(m["yarn_beta_fast"]), yarn_beta_slow=float(m["yarn_beta_slow"]),
        yarn_attn_factor=attn_factor, norm=enum(m, "norm"),
        norm_eps=float(m["norm_eps"]), qk_norm=boolean(m, "qk_norm"), mlp=enum(m, "mlp"),
        tie_embeddings=boolean(m, "tie_embeddings"), bias=boolean(m, "bias"), attn_gate=enum(m, "attn_gate"),
        gate_position=enum(m, "gate_position"), gate_act=enum(m, "gate_act"),
        init_std=float(m["init_std"]),
        layer_pattern=pattern, linear_n_k_head=lin_k, linear_n_v_head=lin_v,
        linear_k_head_dim=lin_dk, linear_v_head_dim=lin_dv,
        linear_conv_kernel=int(m["linear_conv_kernel"]), linear_gate_act=enum(m, "linear_gate_act"),
        linear_chunk=int(m["linear_chunk"]),
        n_expert=n_expert, top_k=int(e["top_k"]), d_expert=d_expert, n_shared_expert=n_shared,
        d_shared_expert=(int(e["d_shared_expert"]) or d_expert) if n_shared else 0,
        shared_expert_gate=boolean(e, "shared_expert_gate"), moe_every=int(e["moe_every"]),
        router=enum(e, "router"), aux_loss_coef=float(e["aux_loss_coef"]),
        z_loss_coef=float(e["z_loss_coef"]), capacity_factor=float(e["capacity_factor"]),
        seed=int(t["seed"]), batch_size=int(t["batch_size"]), seq_len=int(t["seq_len"]),
        steps=int(t["steps"]), lr=float(t["lr"]), warmup_steps=int(t["warmup_steps"]),
        schedule=enum(t, "schedule"), weight_decay=float(t["weight_decay"]),
        beta1=float(t["beta1"]), beta2=float(t["beta2"]), eps=float(t["eps"]),
        grad_clip=float(t["grad_clip"]),
        doc_mask=boolean(dd, "doc_mask"), doc_restart=enum(dd, "doc_positions") == "restart",
        doc_eot=int(m["vocab_size"]) - 1 if boolean(dd, "doc_mask") else -1,
    )
    if c.n_head % c.n_kv_head:
        raise ValueError(f"{path}: n_head must be a multiple of n_kv_head")
    if c.pos == "rope" and c.head_dim % 2:
        raise ValueError(f"{path}: rope needs an even head_dim")
    if not c.rope_factor >= 1.0:
        raise ValueError(f"{path}: rope_factor must be >= 1")
    if c.rope_scaling != "none" and c.pos != "rope":
        raise ValueError(f"{path}: rope_scaling needs pos = rope")
    if c.rope_original_len < 0 or float(m["yarn_attn_factor"]) < 0:
        raise ValueError(f"{path}: rope_original_len and yarn_attn_factor must not be negative")
    if not 0 < c.yarn_beta_slow < c.yarn_beta_fast:
        raise ValueError(f"{path}: yarn needs 0 < yarn_beta_slow < yarn_beta_fast")
    if c.seq_len > c.max_seq_len:
        raise ValueError(f"{path}: seq_len > max_seq_len")
    if c.n_expert and not (1 <= c.top_k <= c.n_expert and 1 <= c.moe_every <= c.n_layer):
        raise ValueError(f"{path}: [moe] needs 1 <= top_k <= n_expert and 1 <= moe_every <= n_layer")
    if c.any_linear:
        if min(c.linear_n_k_head, c.linear_n_v_head, c.linear_k_head_dim, c.linear_v_head_dim) < 1:
            raise ValueError(f"{path}: linear_* head counts and dims must not be negative")
        if c.linear_n_v_head % c.linear_n_k_head:
            raise ValueError(f"{path}: linear_n_v_head must be a multiple of linear_n_k_head")
        if not 1 <= c.linear_conv_kernel <= 16 or not 0 <= c.linear_chunk <= 1024:
            raise ValueError(f"{path}: linear_conv_kernel in 1..16, linear_chunk in 0..1024")
    if c.shared_expert_gate and not c.n_shared_expert:
        raise ValueError(f"{path}: [moe] shared_expert_gate needs n_shared_expert = 1")
    return c


# ----------------------------------------------------------------------------------------------
# Parameters

def param_shapes(c):
    """OrderedDict name -> shape, in the spec's order (the order of the golden files)."""
    d, H, Hkv, hd, F = c.d_model, c.n_head, c.n_kv_head, c.head_dim, c.d_ff
    layernorm = c.norm == "layernorm"
    s = OrderedDict()
    s["wte"] = (c.padded_vocab, d)
    if c.pos == "learned":
        s["wpe"] = (c.max_seq_len, d)
    for l in range(c.n_layer):
        p = f"h.{l}."
        s[p + "ln1.w"] = (d,)
        if layernorm:
            s[p + "ln1.b"] = (d,)
        if c.is_linear(l):
            # Gated DeltaNet (gdn_block): Kd = Hk*dk, Vd = Hv*dv
            Hk, Hv, dk, dv = c.linear_n_k_head, c.linear_n_v_head, c.linear_k_head_dim, c.linear_v_head_dim
            Kd, Vd = Hk * dk, Hv * dv
            s[p + "gdn.w_qkv"] = (2 * Kd + Vd, d)                  # rows [q | k | v]
            s[p + "gdn.w_z"] = (Vd, d)                             # output gate logits
            s[p + "gdn.w_ba"] = (2 * Hv, d)                        # rows [b | a]
            s[p + "gdn.conv_w"] = (2 * Kd + Vd, c.linear_conv_kernel)
            s[p + "gdn.A_log"] = (Hv,)
            s[p + "gdn.dt_bias"] = (Hv,)
            s[p + "gdn.norm_w"] = (dv,)
            s[p + "gdn.w_out"] = (d, Vd)
        else:
            s[p + "attn.wqkv"] = (H * hd + 2 * Hkv * hd + c.gate_dim, d)
            if c.bias:
                s[p + "attn.bqkv"] = (H * hd + 2 * Hkv * hd + c.gate_dim,)
            if c.qk_norm:
                s[p + "attn.q_norm.w"] = (hd,)
                s[p + "attn.k_norm.w"] = (hd,)
            s[p + "attn.wo"] = (d, H * hd)
            if c.bias:
                s[p + "attn.bo"] = (d,)
        s[p + "ln2.w"] = (d,)
        if layernorm:
            s[p + "ln2.b"] = (d,)
        if not c.is_moe(l):
            s[p + "mlp.w_in"] = (2 * F if c.mlp == "swiglu" else F, d)
            if c.bias:
                s[p + "mlp.b_in"] = (2 * F if c.mlp == "swiglu" else F,)
            s[p + "mlp.w_out"] = (d, F)
            if c.bias:
                s[p + "mlp.b_out"] = (d,)
            continue
        # MoE layer: router [E, d], the experts stacked on a leading dim, the shared expert
        E, Fe, Fs = c.n_expert, c.d_expert, c.d_shared_expert
        sw = 2 if c.mlp == "swiglu" else 1
        s[p + "moe.router"] = (E, d)
        s[p + "moe.w_in"] = (E, sw * Fe, d)
        s[p + "moe.w_out"] = (E, d, Fe)
        if c.n_shared_expert:
            s[p + "moe.shared_w_in"] = (sw * Fs, d)
            s[p + "moe.shared_w_out"] = (d, Fs)
            if c.shared_expert_gate:
                s[p + "moe.shared_gate"] = (1, d)
    s["lnf.w"] = (d,)
    if layernorm:
        s["lnf.b"] = (d,)
    if not c.tie_embeddings:
        s["lm_head"] = (c.padded_vocab, d)
    return s


# uniform ranges of the Gated DeltaNet's special parameters (A_log: the range of exp(A_log))
GDN_INIT = {"conv_w": (-0.5, 0.5), "A_log": (1.0, 4.0), "dt_bias": (-5.0, -2.0)}


def init_params(c, rng, norm_noise=0.1):
    """Initial weights in float32, drawn from `rng` (a numpy.random.RandomState, whose stream
    numpy keeps fixed across versions) in param_shapes() order, as float64 normals rounded
    to float32 and then scaled in float32.

    Matrices, expert stacks and embeddings (every param of 2 or more dims, padding rows
    included): normal(0, init_std).
    Norm weights: 1 + normal(0, norm_noise); norm and linear biases: normal(0, norm_noise), so
    that neither is trivial and their gradients are exercised.
    Gated DeltaNet (drawn with uniforms of the same stream, in float64 then rounded):
      conv_w ~ U(-0.5, 0.5) (a depthwise kernel of width K: init_std would make it near zero);
      A_log = log(U(1, 4)) and dt_bias ~ U(-5, -2), so that the per-token decay
        exp(g) = exp(-exp(A_log) softplus(a + dt_bias)) is mostly 0.55 .. 0.99 (median 0.86 ..
        0.97 in the goldens): the state carries over tens of tokens, so chunk and checkpoint
        boundaries matter (dt_bias around 1 would give decays below ~0.3 at these A);
      norm_w = 1 + normal(0, 0.3) (a larger spread than the other norms').
    """
    params = OrderedDict()
    for name, shape in param_shapes(c).items():
        if name.endswith(("gdn.conv_w", "gdn.A_log", "gdn.dt_bias")):
            lo, hi = GDN_INIT[name.split(".")[-1]]
            u = rng.uniform(lo, hi, shape)
            params[name] = torch.from_numpy((np.log(u) if name.endswith("A_log") else u).astype(np.float32))
            continue
        r = torch.from_numpy(rng.standard_normal(shape).astype(np.float32))
        if name.endswith("gdn.norm_w"):
            params[name] = 1.0 + r * np.float32(0.3)
        elif len(shape) >= 2:
            params[name] = r * np.float32(c.init_std)
        elif name.endswith((".b", ".bqkv", ".bo", ".b_in", ".b_out")):
            params[name] = r * np.float32(norm_noise)
        else:
            params[name] = 1.0 + r * np.float32(norm_noise)
    return params


# ----------------------------------------------------------------------------------------------
# Forward

def rmsnorm(x, w, eps):
    # x / sqrt(mean(x^2) + eps) * w, over the last dim
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def layernorm(x, w, b, eps):
    # (x - mean) / sqrt(var + eps) * w + b, biased variance, over the last dim
    mu = x.mean(-1, keepdim=True)
    xc = x - mu
    var = (xc * xc).mean(-1, keepdim=True)
    return xc / torch.sqrt(var + eps) * w + b


def gate_act(z, kind):
    if kind == "sigmoid":
        return torch.sigmoid(z)
    if kind == "ns_sigmoid":
        return 0.5 + 0.5 * torch.sigmoid(z)
    if kind == "silu":
        return z * torch.sigmoid(z)
    raise ValueError(kind)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def yarn_ramp_bounds(c):
    """YaRN's pair-index bounds (transformers' find_correction_range, truncate=True): the
    fractional pair index where a pair makes `rot` full turns over L = rope_original_len is
    hd * ln(L / (2 pi rot)) / (2 ln base); low = floor of it at beta_fast, high = ceil at
    beta_slow, both clamped to [0, hd - 1]; high += 0.001 if they are equal. hd here and in
    rope_inv_freq is the rotated dim c.rope_dim (head_dim unless RoPE is partial)."""
    hd, L, base = c.rope_dim, c.rope_original_len, c.rope_base

    def idx(rot):
        return hd * math.log(L / (2 * math.pi * rot)) / (2 * math.log(base))

    low = max(math.floor(idx(c.yarn_beta_fast)), 0)
    high = min(math.ceil(idx(c.yarn_beta_slow)), hd - 1)
    if low == high:
        high += 0.001
    return low, high


def rope_inv_freq(c, dtype):
    """(inv_freq [hd/2] in `dtype`, m): the angle of pair i at position t is t * inv_freq[i],
    and cos, sin are multiplied by m (so the q.k logits by m^2). theta_i = base^(-2i/hd);
      none:   theta_i, m = 1
      linear: theta_i / s, m = 1
      ntk:    theta_i with base' = base * s^(hd/(hd-2)), m = 1
      yarn:   theta_i (1 - ramp_i) + (theta_i / s) ramp_i, ramp_i = clamp((i - low)/(high - low), 0, 1)
              (yarn_ramp_bounds), m = yarn_attn_factor (0 -> 0.1 ln s + 1)
    as transformers' modeling_rope_utils (linear, yarn; ntk is the static NTK-aware base), with
    hd = the rotated dim c.rope_dim, as transformers computes them over int(head_dim * partial_rotary_factor)."""
    hd, s = c.rope_dim, c.rope_factor
    i = torch.arange(hd // 2, dtype=dtype)
    base = c.rope_base
    if c.rope_scaling == "ntk":
        base = base * s ** (hd / (hd - 2))
    inv_freq = base ** (-2.0 * i / hd)                             # [hd/2]
    if c.rope_scaling == "linear":
        return inv_freq / s, 1.0
    if c.rope_scaling == "yarn":
        low, high = yarn_ramp_bounds(c)
        ramp = ((i - low) / (high - low)).clamp(0.0, 1.0)
        return inv_freq * (1.0 - ramp) + (inv_freq / s) * ramp, c.yarn_attn_factor
    return inv_freq, 1.0


def rope(x, c, pos=None):
    """x [B, T, nh, hd]; HF Llama/Qwen rotate_half over the first rot = c.rope_dim channels:
    pairs (i, i + rot/2), i < rot/2, angle = t * inv_freq[i] (rope_inv_freq: base^(-2i/rot),
    or scaled), cos and sin times m; channels rot .. hd-1 pass through (partial RoPE, as
    transformers' Qwen3-Next apply_rotary_pos_emb)."""
    T, rot = x.shape[1], c.rope_dim
    half = rot // 2
    inv_freq, m = rope_inv_freq(c, x.dtype)                        # [rot/2]
    if pos is None:                                                # positions 0 .. T-1
        t = torch.arange(T, dtype=x.dtype)
        ang = t[:, None] * inv_freq[None, :]                       # [T, rot/2]
        cos = torch.cos(ang)[None, :, None, :]                     # [1, T, 1, rot/2]
        sin = torch.sin(ang)[None, :, None, :]
    else:                                                          # pos [B, T]: per token
        ang = pos.to(x.dtype)[..., None] * inv_freq                # [B, T, rot/2]
        cos = torch.cos(ang)[:, :, None, :]                        # [B, T, 1, rot/2]
        sin = torch.sin(ang)[:, :, None, :]
    if m != 1.0:
        cos, sin = cos * m, sin * m
    x1, x2, xp = x[..., :half], x[..., half:rot], x[..., rot:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, xp], dim=-1)


def doc_ids(c, idx):
    """Attention within documents: idx [B,T] -> (doc [B,T], pos [B,T]). doc numbers each token's
    document: the end-of-text token c.doc_eot belongs to the document it closes, the token after
    it opens the next (doc = the count of end-of-text tokens before the token). pos is the token's
    index within its document (the RoPE position when doc_positions = restart)."""
    B, T = idx.shape
    closes = (idx == c.doc_eot).long()
    doc = torch.cumsum(closes, dim=1) - closes                     # end-of-text tokens strictly before
    t = torch.arange(T).expand(B, T)
    first = torch.stack([torch.stack([(doc[b] == doc[b, i]).nonzero()[0, 0] for i in range(T)]) for b in range(B)])
    return doc, t - first


def causal_attention(q, k, v, rec=None, doc=None):
    """q [B,T,H,hd], k/v [B,T,Hkv,hd] -> y [B,T,H,hd]. Query head h reads kv head h // (H/Hkv).
    rec (a dict, optional) receives logit_max [H]: per head, the largest logit the softmax takes
    (over b, t and keys s <= t; the instability signal of docs/metrics.md). doc [B,T] (optional,
    doc_ids): the block-diagonal causal mask, query t sees keys s <= t of its own document."""
    B, T, H, hd = q.shape
    rep = H // k.shape[2]
    k = k.repeat_interleave(rep, dim=2)                            # [B,T,H,hd]
    v = v.repeat_interleave(rep, dim=2)
    scores = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(hd)  # [B,H,T,T]
    mask = torch.ones(T, T, dtype=torch.bool).tril()               # s <= t
    if doc is not None:                                            # and the same document
        mask = mask[None, None] & (doc[:, None, :, None] == doc[:, None, None, :])   # [B,1,T,T]
    scores = scores.masked_fill(~mask, float("-inf"))
    if rec is not None:
        rec["logit_max"] = scores.detach().amax(dim=(0, 2, 3))
    p = torch.softmax(scores, dim=-1)
    return torch.einsum("bhts,bshd->bthd", p, v)


def norm(c, x, params, prefix):
    if c.norm == "rmsnorm":
        return rmsnorm(x, params[prefix + ".w"], c.norm_eps)
    return layernorm(x, params[prefix + ".w"], params[prefix + ".b"], c.norm_eps)


def attention_block(c, a, params, p, rec=None, docs=None):
    """a = Norm1(x) [B,T,d] -> attention output before wo, flattened [B,T,H*hd]."""
    B, T, _ = a.shape
    H, Hkv, hd, G = c.n_head, c.n_kv_head, c.head_dim, c.gate_dim
    u = a @ params[p + "attn.wqkv"].t()                            # [B,T,H*hd+2*Hkv*hd+G]
    if c.bias:
        u = u + params[p + "attn.bqkv"]
    o = 0
    q = u[..., o:o + H * hd].reshape(B, T, H, hd); o += H * hd
    k = u[..., o:o + Hkv * hd].reshape(B, T, Hkv, hd); o += Hkv * hd
    v = u[..., o:o + Hkv * hd].reshape(B, T, Hkv, hd); o += Hkv * hd
    z = u[..., o:o + G]                                            # gate logits [B,T,G]
    if c.qk_norm:
        q = rmsnorm(q, params[p + "attn.q_norm.w"], c.norm_eps)
        k = rmsnorm(k, params[p + "attn.k_norm.w"], c.norm_eps)
    if c.pos == "rope":
        pos = docs[1] if docs is not None and c.doc_restart else None
        q = rope(q, c, pos)
        k = rope(k, c, pos)
    if c.attn_gate != "none":
        heads = H if c.gate_position == "sdpa" else Hkv
        per_head = hd if c.attn_gate == "elementwise" else 1       # headwise: broadcast over hd
        g = gate_act(z.reshape(B, T, heads, per_head), c.gate_act)
    if c.attn_gate != "none" and c.gate_position == "value":
        v = v * g
    y = causal_attention(q, k, v, rec, docs[0] if docs is not None else None)   # [B,T,H,hd]
    if c.attn_gate != "none" and c.gate_position == "sdpa":
        y = y * g
    return y.reshape(B, T, H * hd)


def l2norm(x):
    """x / sqrt(sum(x^2) + 1e-6) over the last dim (transformers' l2norm, eps 1e-6)."""
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def causal_conv_silu(x, w, doc=None):
    """x [B,T,C], w [C,K] -> silu(pre), pre[b,t,c] = sum_{j<K} w[c,j] x[b, t-K+1+j, c], with
    zeros before token 0 of each sequence (a causal depthwise conv over time). doc [B,T]
    (optional, doc_ids): a tap reads zeros where its input is of another document than t."""
    B, T, C = x.shape
    K = w.shape[1]
    pre = torch.zeros_like(x)
    for j in range(K):
        shift = K - 1 - j                                          # tap j reads x[t - shift]
        if shift >= T:
            continue
        xs = torch.cat([x.new_zeros(B, shift, C), x[:, :T - shift]], dim=1)
        if doc is not None:                                        # only inputs of t's document
            same = torch.zeros(B, T, dtype=torch.bool)
            same[:, shift:] = doc[:, shift:] == doc[:, :T - shift]
            xs = xs * same[..., None]
        pre = pre + w[:, j] * xs
    return pre * torch.sigmoid(pre)


def gated_delta_rule(q, k, v, g, beta, doc=None):
    """The gated delta rule as a plain recurrence over time. q, k [B,T,H,dk] (one key head per
    value head already), v [B,T,H,dv], g, beta [B,T,H]. Per sequence and head, S [dk,dv] = 0 at
    t = 0, and for each t:  S = exp(g_t) S;  u = S^T k_t;  S = S + k_t (beta_t (v_t - u))^T;
    o_t = S^T q_t / sqrt(dk). Returns o [B,T,H,dv]. doc [B,T] (optional, doc_ids): S = 0 again
    where a token's document differs from the token before's."""
    B, T, H, dk = k.shape
    S = q.new_zeros(B, H, dk, v.shape[-1])
    scale = 1.0 / math.sqrt(dk)
    out = []
    for t in range(T):
        if doc is not None and t > 0:                              # a new document: from zeros
            S = S * (doc[:, t] == doc[:, t - 1]).to(S.dtype)[:, None, None, None]
        S = S * torch.exp(g[:, t])[..., None, None]
        u = torch.einsum("bhkv,bhk->bhv", S, k[:, t])
        S = S + k[:, t][..., :, None] * (beta[:, t][..., None] * (v[:, t] - u))[..., None, :]
        out.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]) * scale)
    return torch.stack(out, dim=1)


def gdn_block(c, a, params, p, rec=None, doc=None):
    """Gated DeltaNet (Qwen3-Next's linear attention). a = Norm1(x) [B,T,d] -> the output before
    w_out, [B,T,Vd]:
      xqkv = a w_qkv^T (rows [q | k | v]); z = a w_z^T; ba = a w_ba^T (rows [b | a]);
      xc = silu(causal depthwise conv of xqkv); q, k = l2norm per head of xc's q, k blocks;
      beta = sigmoid(b); g = -exp(A_log) softplus(a + dt_bias);
      o = gated_delta_rule (value head h reads key head h // (Hv/Hk));
      out = rmsnorm over dv (weight norm_w, eps norm_eps) of each head * act(z).
    rec (a dict) receives the delta rule's inputs and output, detached. doc [B,T] (optional,
    doc_ids): the conv and the delta rule within documents."""
    B, T, _ = a.shape
    Hk, Hv, dk, dv = c.linear_n_k_head, c.linear_n_v_head, c.linear_k_head_dim, c.linear_v_head_dim
    Kd, Vd = Hk * dk, Hv * dv
    xqkv = a @ params[p + "gdn.w_qkv"].t()                         # [B,T,2Kd+Vd]
    z = a @ params[p + "gdn.w_z"].t()                              # [B,T,Vd]
    ba = a @ params[p + "gdn.w_ba"].t()                            # [B,T,2Hv]
    xc = causal_conv_silu(xqkv, params[p + "gdn.conv_w"], doc)
    q = l2norm(xc[..., :Kd].reshape(B, T, Hk, dk))
    k = l2norm(xc[..., Kd:2 * Kd].reshape(B, T, Hk, dk))
    v = xc[..., 2 * Kd:].reshape(B, T, Hv, dv)
    rep = Hv // Hk
    q = q.repeat_interleave(rep, dim=2)                            # value head h: key head h // rep
    k = k.repeat_interleave(rep, dim=2)
    beta = torch.sigmoid(ba[..., :Hv])
    g = -torch.exp(params[p + "gdn.A_log"]) * torch.nn.functional.softplus(ba[..., Hv:] + params[p + "gdn.dt_bias"])
    o = gated_delta_rule(q, k, v, g, beta, doc)                    # [B,T,Hv,dv]
    if rec is not None:
        rec.update(q=q.detach(), k=k.detach(), v=v.detach(), g=g.detach(), beta=beta.detach(),
                   o=o.detach())
    on = rmsnorm(o, params[p + "gdn.norm_w"], c.norm_eps) * gate_act(z.reshape(B, T, Hv, dv), c.linear_gate_act)
    return on.reshape(B, T, Vd)


def ffn(c, x, w_in, w_out, b_in=None, b_out=None):
    """The MLP of width F = w_out.shape[1]: swiglu (w_in rows [gate | up]) or gelu; b_in, b_out
    its biases (bias = true) or None."""
    F = w_out.shape[1]
    hin = x @ w_in.t()
    if b_in is not None:
        hin = hin + b_in
    if c.mlp == "swiglu":
        g, up = hin[..., :F], hin[..., F:]
        h = g * torch.sigmoid(g) * up                              # silu(g) * up
    else:
        h = gelu_tanh(hin)
    y = h @ w_out.t()
    return y + b_out if b_out is not None else y


def mlp_block(c, m, params, p):
    return ffn(c, m, params[p + "mlp.w_in"], params[p + "mlp.w_out"], params.get(p + "mlp.b_in"),
               params.get(p + "mlp.b_out"))


def moe_block(c, m, params, p):
    """m = Norm2(x) [B,T,d] -> (MoE output [B,T,d], aux, z). Written as the spec states it, with
    a loop over experts and index_add (no permutation, no grouped GEMM):
      logits = m W_r^T (fp of the working dtype); p = softmax(logits), or s / sum(s) with
      s = sigmoid(logits) for sigmoid_topk; the top_k largest logits (ties to the lower index)
      with weights p_e / sum_chosen p (softmax) or s_e / sum_chosen s (sigmoid);
      capacity_factor > 0: expert e keeps the first ceil(cf * N * k / E) tokens that chose it,
      in token order; out = sum over kept choices of w * FFN_e(m) (+ the shared expert, times
      sigmoid(m w_g) if gated);
      aux = E * sum_i f_i P_i, f_i = (slots choosing i, before capacity) / (N k),
      P_i = mean over tokens of p[:, i];  z = mean over tokens of logsumexp(logits)^2."""
    B, T, d = m.shape
    N, E, k = B * T, c.n_expert, c.top_k
    x = m.reshape(N, d)
    logits = x @ params[p + "moe.router"].t()                      # [N, E]
    if c.router == "softmax_topk":
        probs = torch.softmax(logits, dim=-1)
        score = probs
    else:
        score = torch.sigmoid(logits)
        probs = score / score.sum(-1, keepdim=True)
    # top-k: a stable descending sort keeps equal logits in index order
    chosen = torch.sort(logits.detach(), dim=-1, descending=True, stable=True).indices[:, :k]   # [N, k]
    sc = score.gather(-1, chosen)
    w = sc / sc.sum(-1, keepdim=True)                              # [N, k]
    keep = torch.ones(N, k, dtype=torch.bool)
    if c.capacity_factor > 0:
        cap = math.ceil(c.capacity_factor * N * k / E)
        seen = [0] * E
        for n in range(N):
            for j in range(k):
                e = int(chosen[n, j])
                keep[n, j] = seen[e] < cap
                seen[e] += 1
    out = torch.zeros_like(x)
    for e in range(E):
        tok, slot = ((chosen == e) & keep).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        h = ffn(c, x[tok], params[p + "moe.w_in"][e], params[p + "moe.w_out"][e])
        out = out.index_add(0, tok, w[tok, slot][:, None] * h)
    if c.n_shared_expert:
        ys = ffn(c, x, params[p + "moe.shared_w_in"], params[p + "moe.shared_w_out"])
        if c.shared_expert_gate:
            ys = torch.sigmoid(x @ params[p + "moe.shared_gate"].t()) * ys
        out = out + ys
    counts = torch.zeros(E, dtype=x.dtype).index_add(0, chosen.reshape(-1), torch.ones(N * k, dtype=x.dtype))
    f = counts / (N * k)                                           # no gradient (indices)
    aux = E * (f * probs.mean(0)).sum()
    z = (torch.logsumexp(logits, dim=-1) ** 2).mean()
    # the smallest gap between a token's k-th and (k+1)-th logit (how far from a routing tie)
    srt = torch.sort(logits.detach(), dim=-1, descending=True).values
    gap = (srt[:, k - 1] - srt[:, k]).min().item() if k < E else math.inf
    return out.reshape(B, T, d), aux, z, counts, int((~keep).sum()), gap


def forward(c, params, idx, targets=None, moe=None, gdn=None, sig=None):
    """idx, targets int64 [B,T]. Returns (logits [B,T,V_p], loss scalar or None): the loss is the
    mean cross-entropy. If `moe` is a list, one dict per MoE layer is appended to it: layer,
    aux, z (tensors, without coefficients), counts [E], dropped, gap (the smallest top-k logit
    gap). The objective of training is loss + moe_loss(c, moe). If `gdn` is a list, one dict per
    Gated DeltaNet layer is appended: layer and the delta rule's q, k, v, g, beta, o (detached).
    If `sig` is a dict, it receives the instability signals (docs/metrics.md): attn, a list with
    each layer's per-head maximum attention logit [H] (None for a Gated DeltaNet layer);
    out_absmax, the largest |logit| over the V real columns; out_z, the mean of lse^2."""
    B, T = idx.shape
    docs = doc_ids(c, idx) if c.doc_mask else None                 # attention within documents
    x = params["wte"][idx]                                         # [B,T,d]
    if c.pos == "learned":
        x = x + params["wpe"][:T][None]
    for l in range(c.n_layer):
        p = f"h.{l}."
        a = norm(c, x, params, p + "ln1")
        if c.is_linear(l):
            rec = dict(layer=l)
            x = x + gdn_block(c, a, params, p, rec, docs[0] if docs is not None else None) @ params[p + "gdn.w_out"].t()
            if gdn is not None:
                gdn.append(rec)
            if sig is not None:
                sig.setdefault("attn", []).append(None)
        else:
            rec = {}
            x = x + attention_block(c, a, params, p, rec, docs) @ params[p + "attn.wo"].t()
            if sig is not None:
                sig.setdefault("attn", []).append(rec["logit_max"])
            if c.bias:
                x = x + params[p + "attn.bo"]
        m = norm(c, x, params, p + "ln2")
        if c.is_moe(l):
            y, aux, z, counts, dropped, gap = moe_block(c, m, params, p)
            if moe is not None:
                moe.append(dict(layer=l, aux=aux, z=z, counts=counts, dropped=dropped, gap=gap))
            x = x + y
        else:
            x = x + mlp_block(c, m, params, p)
    xf = norm(c, x, params, "lnf")
    head = params["wte"] if c.tie_embeddings else params["lm_head"]
    logits = xf @ head.t()                                         # [B,T,V_p]
    loss = None
    if targets is not None:
        lv = logits[..., :c.vocab_size]                            # padding columns excluded
        lse = torch.logsumexp(lv, dim=-1)
        picked = lv.gather(-1, targets[..., None])[..., 0]
        loss = (lse - picked).mean()
        if sig is not None:
            sig["out_absmax"] = lv.detach().abs().max()
            sig["out_z"] = (lse.detach() ** 2).mean()
    return logits, loss


def moe_loss(c, moe):
    """The weighted auxiliary losses of the MoE layers: sum of aux_loss_coef * aux + z_loss_coef * z."""
    return sum(c.aux_loss_coef * r["aux"] + c.z_loss_coef * r["z"] for r in moe)


def loss_and_grads(c, params, idx, targets, moe_out=None):
    """Forward + autograd backward of the objective (cross-entropy + MoE losses). Returns
    (logits detached, cross-entropy loss float tensor, grads dict); moe_out (a list) receives
    the MoE layers' records with detached values."""
    leaves = OrderedDict((k, v.detach().clone().requires_grad_(True)) for k, v in params.items())
    moe = []
    logits, loss = forward(c, leaves, idx, targets, moe)
    grads = torch.autograd.grad(loss + moe_loss(c, moe), list(leaves.values()))
    if moe_out is not None:
        moe_out.extend(dict(r, aux=r["aux"].detach(), z=r["z"].detach()) for r in moe)
    return logits.detach(), loss.detach(), OrderedDict(zip(leaves.keys(), grads))


# ----------------------------------------------------------------------------------------------
# Optimizer: global-norm clip + AdamW (torch.optim.AdamW semantics), written out

def grad_norm(grads):
    return torch.sqrt(sum((g * g).sum() for g in grads.values()))


def clip_grads(grads, grad_clip):
    """Returns (clipped grads, pre-clip total norm as a float, whether it clipped)."""
    total = grad_norm(grads)
    if grad_clip > 0 and total.item() > grad_clip:
        scale = grad_clip / (total + 1e-6)
        return OrderedDict((k, g * scale) for k, g in grads.items()), total.item(), True
    return grads, total.item(), False


def adamw_step(c, params, grads, state, t, lr):
    """One AdamW update at step t (1-based). state: dict name -> (m, v). Returns new params.
    Weight decay only on params of 2 or more dims (matrices, expert stacks), applied as
    p *= (1 - lr*wd) before the Adam update."""
    b1, b2, eps, wd = c.beta1, c.beta2, c.eps, c.weight_decay
    new = OrderedDict()
    for name, p in params.items():
        g = grads[name]
        m, v = state.get(name, (torch.zeros_like(p), torch.zeros_like(p)))
        if p.dim() >= 2:
            p = p * (1.0 - lr * wd)
        m = b1 * m + (1.0 - b1) * g
        v = b2 * v + (1.0 - b2) * g * g
        mhat = m / (1.0 - b1 ** t)
        vhat = v / (1.0 - b2 ** t)
        new[name] = p - lr * mhat / (torch.sqrt(vhat) + eps)
        state[name] = (m, v)
    return new


def train(c, params, idx, targets, n_steps, moe_steps=None):
    """n_steps of (forward, backward, clip, AdamW) on the same batch with constant lr = c.lr.
    Returns (losses [n], pre-clip grad norms [n], clipped flags [n], final params). moe_steps
    (a list) receives each step's MoE records."""
    state = {}
    losses, norms, clipped = [], [], []
    for t in range(1, n_steps + 1):
        moe = []
        _, loss, grads = loss_and_grads(c, params, idx, targets, moe)
        if moe_steps is not None:
            moe_steps.append(moe)
        grads, total, did_clip = clip_grads(grads, c.grad_clip)
        params = adamw_step(c, params, grads, state, t, c.lr)
        losses.append(loss.item())
        norms.append(total)
        clipped.append(did_clip)
    return losses, norms, clipped, params
