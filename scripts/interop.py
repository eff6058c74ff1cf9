#!/usr/bin/env python3
"""scripts/interop.py: every exportable model kind through Hugging Face transformers (make interop).

For each kind: train a tiny model a few steps (train_gpt), export it (gatedgpt_ckpt export), load
the directory with AutoModelForCausalLM.from_pretrained (no code from this project), and compare
with the project's own numbers:
  loss     mean next-token loss over the same validation windows as `gatedgpt_ckpt eval`   <= 1e-5
  logits   max |logit difference| over one window (`gatedgpt_ckpt logits`)                 <= 1e-4
           (32 tokens; 200 for the RoPE-scaling kinds, trained at 64: beyond training)
  greedy   20 greedily generated tokens (transformers' generate, do_sample=False)          equal ids
  tokens   AutoTokenizer ids on sample texts vs the project's tokenizer (when tokenizer.json exists)
and that the kinds no transformers class represents are refused with a one-line error. Then
(saved_rows) models saved by transformers' own save_pretrained (random init, norms perturbed; one
F32 file, F32 shards, BF16) are imported and their logits compared with transformers' (<= 1e-4),
and tests/hf_config_fixture.py is checked against what transformers wrote; transformers' sharded
save_pretrained of two of the exports (sharded_rows), and randomly initialised Qwen3-Next models
with partial RoPE (partial_rotary_factor 0.25, dense / MoE / YaRN; hf_written_rows), likewise. Hybrids
(Gated DeltaNet layers) load as Qwen3NextForCausalLM; without fla / causal-conv1d installed
transformers runs its torch fallbacks (torch_chunk_gated_delta_rule, chunk 64). Then
(scripts/interop_mc.py) `gatedgpt_ckpt mc` on 250+ generic and 250 HellaSwag-form examples: each
choice's log-likelihood vs transformers' (<= 1e-4) and acc / acc_norm vs lm-evaluation-harness's
on the same file (equal). Prints a table; exit status 1 if any check fails.

usage: scripts/interop.sh [--build DIR] [-- --kinds a,b,... --saved a,b,... --steps N]   (creates the venv first)
       PYTHON scripts/interop.py --build DIR [--kinds ...] [--saved ...] [--steps N] [--keep DIR]
Needs the KJV shards (scripts/prepare_kjv.sh) and torch + transformers (the venv of interop.sh).
"""
import argparse, json, logging, os, struct, subprocess, sys, tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import hf_config_fixture as fixture  # noqa: E402  (the import_configs fixture, checked against transformers here)

# kind -> (base config, overrides): small so that each trains in seconds
SMALL = ["--model.n_layer=2", "--model.d_model=64", "--model.n_head=4", "--model.head_dim=16", "--model.d_ff=128",
         "--model.max_seq_len=64", "--train.batch_size=4", "--train.seq_len=64", "--train.tokens_per_step=0",
         "--train.warmup_steps=2", "--log.val_every=0", "--metrics.probe_every=0", "--log.sample_every=0",
         "--log.log_every=1000"]
KINDS = {
    "gpt2": ("tiny_baseline.ini", ["--model.pos=learned", "--model.norm=layernorm", "--model.mlp=gelu",
                                   "--model.qk_norm=false", "--model.n_kv_head=4", "--model.tie_embeddings=false"]),
    # GPT-2 with its linear biases ([model] bias): trained here, exported with them
    "gpt2_bias": ("tiny_baseline.ini", ["--model.pos=learned", "--model.norm=layernorm", "--model.mlp=gelu",
                                        "--model.qk_norm=false", "--model.n_kv_head=4", "--model.bias=true"]),
    "llama": ("tiny_baseline.ini", ["--model.qk_norm=false", "--model.n_kv_head=2"]),
    "qwen3": ("tiny_baseline.ini", ["--model.n_kv_head=2"]),
    "qwen3_next": ("tiny_gated.ini", ["--model.n_kv_head=2"]),
    "qwen3_moe": ("tiny_moe_baseline.ini", ["--model.n_kv_head=2", "--moe.d_expert=64"]),
    "qwen2_moe": ("tiny_moe_baseline.ini", ["--model.n_kv_head=2", "--model.qk_norm=false", "--moe.d_expert=64",
                                           "--moe.n_shared_expert=1", "--moe.d_shared_expert=64", "--moe.shared_expert_gate=true"]),
    "qwen3_next_moe": ("tiny_moe_gated.ini", ["--model.n_kv_head=2", "--moe.d_expert=64", "--moe.n_shared_expert=1",
                                              "--moe.d_shared_expert=64", "--moe.shared_expert_gate=true"]),
    # hybrids (Qwen3-Next's linear_attention layers): 3 Gated DeltaNets then gated full attention,
    # 2 key heads x 4 value heads of unequal widths (the per-key-head grouping of in_proj_qkvz/_ba)
    "hybrid": ("tiny_hybrid_gated.ini", ["--model.n_layer=4", "--model.n_kv_head=2", "--model.linear_n_k_head=2",
                                         "--model.linear_n_v_head=4", "--model.linear_k_head_dim=16",
                                         "--model.linear_v_head_dim=24"]),
    # MoE hybrid: layer 0 a Gated DeltaNet (1 key head, 4 value heads), layer 1 gated attention,
    # both with MoE (a gated shared expert)
    "hybrid_moe": ("tiny_moe_gated.ini", ["--model.n_kv_head=2", "--model.layer_pattern=LA", "--model.linear_n_k_head=1",
                                          "--model.linear_n_v_head=4", "--moe.d_expert=64", "--moe.n_shared_expert=1",
                                          "--moe.d_shared_expert=64", "--moe.shared_expert_gate=true"]),
}
# RoPE scalings, compared beyond the training length: trained at 64 tokens (rope_original_len 64),
# max_seq_len 256 (factor 4), logits over a 200-token window and 20 greedy tokens after it
ROPE = ["--model.max_seq_len=256", "--model.rope_original_len=64", "--model.rope_factor=4"]
KINDS.update({
    "rope_linear": ("tiny_baseline.ini", ["--model.n_kv_head=2", *ROPE, "--model.rope_scaling=linear"]),
    "rope_ntk": ("tiny_baseline.ini", ["--model.n_kv_head=2", "--model.qk_norm=false", *ROPE, "--model.rope_scaling=ntk"]),
    "rope_yarn": ("tiny_gated.ini", ["--model.n_kv_head=2", *ROPE, "--model.rope_scaling=yarn"]),
    "rope_yarn_betas": ("tiny_gated.ini", ["--model.n_kv_head=2", *ROPE, "--model.rope_scaling=yarn", "--model.yarn_beta_fast=16",
                                           "--model.yarn_beta_slow=2", "--model.yarn_attn_factor=1.5"]),
    # partial RoPE (issue #45: Qwen3-Next's partial_rotary_factor): 4 of 16 channels turn, beyond
    # training under YaRN; trained here, exported, loaded by transformers
    "rope_partial_yarn": ("tiny_gated.ini", ["--model.n_kv_head=2", *ROPE, "--model.rope_scaling=yarn", "--model.rope_fraction=0.25"]),
})
KINDS["partial_rope"] = ("tiny_gated.ini", ["--model.n_kv_head=2", "--model.rope_fraction=0.25"])
WINDOW = {k: 200 for k in KINDS if k.startswith("rope_")}   # logits window; 32 for the others
EXPECT_CLASS = {"gpt2": "GPT2LMHeadModel", "gpt2_bias": "GPT2LMHeadModel", "llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM",
                "qwen3_next": "Qwen3NextForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
                "qwen2_moe": "Qwen2MoeForCausalLM", "qwen3_next_moe": "Qwen3NextForCausalLM",
                "hybrid": "Qwen3NextForCausalLM", "hybrid_moe": "Qwen3NextForCausalLM",
                "rope_linear": "Qwen3ForCausalLM", "rope_ntk": "LlamaForCausalLM", "rope_yarn": "Qwen3NextForCausalLM",
                "rope_yarn_betas": "Qwen3NextForCausalLM", "rope_partial_yarn": "Qwen3NextForCausalLM",
                "partial_rope": "Qwen3NextForCausalLM"}
REFUSED = {  # kind -> overrides on tiny_gated.ini that no class represents, and the setting named
    "headwise gate": (["--model.attn_gate=headwise"], "attn_gate = headwise"),
    "value gate": (["--model.gate_position=value"], "gate_position = value"),
    "silu gate": (["--model.gate_act=silu"], "gate_act = silu"),
    "hybrid, sigmoid": (["--model.layer_pattern=LA", "--model.linear_gate_act=sigmoid"], "linear_gate_act = sigmoid"),
    "hybrid, no gate": (["--model.layer_pattern=LA", "--model.attn_gate=none"], "attn_gate = none"),
    "partial RoPE, Qwen3": (["--model.attn_gate=none", "--model.rope_fraction=0.5"], "rope_fraction = 0.5"),
}
TOL_LOSS, TOL_LOGIT = 1e-5, 1e-4
TEXTS = ["In the beginning God created the heaven and the earth.", "  two spaces,\ttab\nnewline ", "don't I'LL we've 42x",
         "Ünïcödé, naïve café; 東京 🙂 and a\u00a0no-break space", "<|endoftext|> inside a text", "1234567 ...!!! ???"]


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    return r.returncode, r.stdout + r.stderr


def val_tokens(glob_pat):
    import glob
    path = sorted(glob.glob(glob_pat))[0]
    with open(path, "rb") as f:
        hdr = np.frombuffer(f.read(1024), dtype="<i4")
        n = int(hdr[2])
        dt = "<u2" if hdr[0] == 20240520 else "<u4"
        return np.frombuffer(f.read(), dtype=dt)[:n].astype(np.int64)


# ---- sharded Hub checkpoints (issue #28): transformers' save_pretrained in shards -> import -----
SHARDED = ["qwen3", "qwen3_next"]   # kinds of KINDS re-saved by transformers in shards
SHARD_BYTES = 100_000               # max_shard_size: the 8192 x 64 embedding alone, the rest in several


def sharded_rows(work, tool, toks):
    """For each kind of SHARDED exported above (WORK/<kind>_hf): load it with from_pretrained,
    save_pretrained it in shards of at most SHARD_BYTES as float32 and as bfloat16 (the Hub's
    layout: model-0000K-of-0000N.safetensors + model.safetensors.index.json, no model.safetensors),
    `gatedgpt_ckpt import` the directory, and compare the imported checkpoint's logits
    (`gatedgpt_ckpt logits`) with transformers' on the same directory loaded as float32 (bf16
    weights widened exactly, as import widens them): max |dlogit| <= TOL_LOGIT. Returns (rows, failed)."""
    import torch
    from transformers import AutoModelForCausalLM
    rows, failed = [], 0
    ids = toks[:32]
    for kind in SHARDED:
        exp = os.path.join(work, kind + "_hf")
        if not os.path.isdir(exp):
            continue   # not among --kinds
        for dt in ("float32", "bfloat16"):
            name, d = f"{kind} {'f32' if dt == 'float32' else 'bf16'} shards", os.path.join(work, f"{kind}_shards_{dt}")
            src = AutoModelForCausalLM.from_pretrained(exp, dtype=torch.float32)
            src.to(getattr(torch, dt)).save_pretrained(d, max_shard_size=SHARD_BYTES)
            files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
            dtypes = set()
            for f in files:
                with open(os.path.join(d, f), "rb") as fh:
                    (n,) = struct.unpack("<Q", fh.read(8))
                    dtypes |= {v["dtype"] for k, v in json.loads(fh.read(n)).items() if k != "__metadata__"}
            layout = (os.path.exists(os.path.join(d, "model.safetensors.index.json")) and len(files) >= 2
                      and "model.safetensors" not in files and dtypes == {"F32" if dt == "float32" else "BF16"})
            note = f"{len(files)} shards {'/'.join(sorted(dtypes))}"
            imp, lf = d + "_imp", d + "_logits.bin"
            rc, out = run([tool, "import", d, "--out", imp])
            if rc == 0:
                rc, out = run([tool, "logits", imp, "--ids", ",".join(map(str, ids.tolist())), "--out", lf])
            if rc != 0 or not layout:
                print(f"FAIL {name}: {'not sharded as expected: ' + note if rc == 0 else out.strip()}")
                failed += 1
                rows.append((name, "-", None, None, None, None, "-", note, False))
                continue
            model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
            model.eval()
            with torch.no_grad():
                hf = model(torch.tensor(ids)[None]).logits[0].numpy()
            ours = np.fromfile(lf, dtype="<f4").reshape(len(ids), -1)
            dlogit = float(np.abs(hf[:, :ours.shape[1]] - ours).max())
            ok = dlogit <= TOL_LOGIT and ours.shape[1] == model.config.vocab_size
            failed += not ok
            rows.append((name, type(model).__name__, None, None, None, dlogit, "-", note, ok))
    return rows, failed


# ---- models written by transformers itself (issue #45 item 1) --------------------------------
# For every class export writes: a tiny config built with transformers' own config class,
# AutoModelForCausalLM.from_config (random init), every norm weight and bias (and any tensor
# initialised to a constant: Qwen3-Next's dt_bias, RMSNorm offsets of 0) moved away from its
# constant by 0.1 * N(0, 1), so that a swapped, dropped or un-shifted tensor shows in the logits;
# save_pretrained as one F32 file, as F32 shards and as one BF16 file; `gatedgpt_ckpt import`;
# logits against transformers loading the saved directory afresh in float32 (not the model in
# memory: after .to(bf16).to(float32) its RoPE inverse frequencies stay rounded).
SAVED_V, SAVED_IDS = 320, 32   # vocabulary (not a multiple of 128: import pads it), tokens compared
# Qwen3-Next's default partial_rotary_factor, 0.25 ([model] rope_fraction): the qwen3_next rows test it
NEXT_PARTIAL_ROTARY = 0.25
# `[model] bias = true`: the "gpt2 biases" rows compare logits (False: expect import's one-line
# refusal of a nonzero linear bias, as before the key existed)
GPT2_LINEAR_BIAS_SUPPORTED = True


def saved_configs():
    """kind -> (transformers config, perturb GPT-2's linear biases too). Small enough for seconds."""
    from transformers import (GPT2Config, LlamaConfig, Qwen2MoeConfig, Qwen3Config, Qwen3MoeConfig,
                              Qwen3NextConfig)
    V, d, L, H = SAVED_V, 64, 2, 4
    common = dict(vocab_size=V, hidden_size=d, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=2,
                  intermediate_size=96, max_position_embeddings=64)
    next_rope = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": NEXT_PARTIAL_ROTARY}
    next_common = dict(common, head_dim=16, rope_parameters=next_rope, linear_num_key_heads=2, linear_num_value_heads=4,
                       linear_key_head_dim=16, linear_value_head_dim=24, linear_conv_kernel_dim=4,
                       num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48)
    gpt2 = dict(vocab_size=V, n_embd=d, n_layer=L, n_head=H, n_positions=64, bos_token_id=0, eos_token_id=0)
    return {
        # GPT-2: tied head, n_inner null (4 d); its linear biases as initialised (zero)
        "gpt2": (GPT2Config(**gpt2), False),
        # the same with nonzero linear biases (gatedgpt has none today: refused in one line)
        "gpt2 biases": (GPT2Config(**gpt2), True),
        "llama": (LlamaConfig(**common, rope_parameters={"rope_type": "default", "rope_theta": 50000.0}), False),
        # Qwen3: a tied head, as Qwen3-0.6B's
        "qwen3": (Qwen3Config(**common, head_dim=16, tie_word_embeddings=True), False),
        # Qwen3-MoE: transformers 5 writes the expert count as num_local_experts; no head_dim
        # (the class has none: hidden_size / heads)
        "qwen3_moe": (Qwen3MoeConfig(**common, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                     norm_topk_prob=True), False),
        # Qwen2-MoE: layer 0 dense, layer 1 MoE (decoder_sparse_step 2), a gated shared expert
        "qwen2_moe": (Qwen2MoeConfig(**common, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                     shared_expert_intermediate_size=48, norm_topk_prob=True, decoder_sparse_step=2,
                                     qkv_bias=False), False),
        # Qwen3-Next dense: full attention, every layer's MLP dense by mlp_only_layers
        "qwen3_next": (Qwen3NextConfig(**next_common, layer_types=["full_attention"] * L, mlp_only_layers=list(range(L))), False),
        # hybrid: 3 Gated DeltaNets then gated attention (LLLA), dense MLPs
        "hybrid": (Qwen3NextConfig(**dict(next_common, num_hidden_layers=4), mlp_only_layers=[0, 1, 2, 3],
                                   layer_types=["linear_attention"] * 3 + ["full_attention"]), False),
        # MoE: a Gated DeltaNet then gated attention, both MoE with a gated shared expert
        "qwen3_next_moe": (Qwen3NextConfig(**next_common, layer_types=["linear_attention", "full_attention"]), False),
    }


def perturb(model, linear_bias, gen):
    """Moves every norm weight and bias, and every tensor initialised to a constant, by 0.1 N(0, 1).
    GPT-2's linear (Conv1D) biases only when linear_bias. Returns the number of tensors moved;
    raises if a tensor of more than one element is still constant afterwards."""
    import torch
    moved = 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            gpt2_linear_bias = name.endswith(".bias") and (".attn.c_" in name or ".mlp.c_" in name)
            if gpt2_linear_bias and not linear_bias:
                continue
            if "norm" in name or "ln_" in name or name.endswith("bias") or (p.numel() > 1 and bool((p == p.reshape(-1)[0]).all())):
                p.add_(0.1 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
                moved += 1
        const = [n for n, p in model.named_parameters() if p.numel() > 1 and bool((p == p.reshape(-1)[0]).all())
                 and not (n.endswith(".bias") and not linear_bias and (".attn.c_" in n or ".mlp.c_" in n))]
    if const:
        raise RuntimeError(f"tensors still constant after perturbing: {const}")
    return moved


def st_layout(d):
    """(safetensors files, their dtypes, whether an index is there) of a saved directory."""
    files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    dtypes = set()
    for f in files:
        with open(os.path.join(d, f), "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            dtypes |= {v["dtype"] for k, v in json.loads(fh.read(n)).items() if k != "__metadata__"}
    return files, dtypes, os.path.exists(os.path.join(d, "model.safetensors.index.json"))


def fixture_row(kind, d):
    """tests/hf_config_fixture.py (the torch-free `make test` fixture of import_configs) against what
    transformers wrote to d: config.json key for key (transformers_version aside) and the tensors'
    names and shapes."""
    got = json.load(open(os.path.join(d, "config.json")))
    want = dict(fixture.CONFIG[kind])
    version = got.pop("transformers_version"), want.pop("transformers_version")
    diff = sorted(k for k in set(got) | set(want) if got.get(k, "<absent>") != want.get(k, "<absent>"))
    shapes = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            with open(os.path.join(d, f), "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                shapes.update({k: tuple(v["shape"]) for k, v in json.loads(fh.read(n)).items() if k != "__metadata__"})
    tdiff = sorted(set(shapes.items()) ^ set(fixture.shapes(kind)))
    ok = not diff and not tdiff
    note = (f"config.json ({len(got)} keys) and {len(shapes)} tensors as written by {version[0]}" if ok else
            f"differs: keys {diff[:3]} tensors {tdiff[:2]}")
    if version[0] != version[1]:
        note += f" (fixture from {version[1]})"
    if not ok:
        print(f"FAIL fixture {kind}: tests/hf_config_fixture.py {note}")
    return (f"fixture {kind}", "hf_config_fixture.py", None, None, None, None, "-", note, ok)


def saved_rows(work, tool, kinds):
    """The rows of models transformers saved (above): per kind, F32 one file, F32 shards, BF16
    one file. Returns (rows, failed)."""
    import torch
    from transformers import AutoModelForCausalLM
    rows, failed = [], 0
    ids = np.random.default_rng(45).integers(0, SAVED_V, SAVED_IDS)
    cfgs = saved_configs()
    for kind in kinds:
        cfg, linear_bias = cfgs[kind]
        torch.manual_seed(45)
        model = AutoModelForCausalLM.from_config(cfg)   # float32, random init
        moved = perturb(model, linear_bias, torch.Generator().manual_seed(45))
        refuse = linear_bias and not GPT2_LINEAR_BIAS_SUPPORTED
        for variant in ("f32", "f32 shards", "bf16"):
            name, d = f"{kind} {variant}", os.path.join(work, "saved_" + f"{kind}_{variant}".replace(" ", "_"))
            if variant == "bf16":
                model.to(torch.bfloat16)   # the last variant: the model in memory is not used again
            model.save_pretrained(d, max_shard_size=SHARD_BYTES if variant == "f32 shards" else "50GB")
            files, dtypes, index = st_layout(d)
            if variant == "f32" and kind in fixture.CONFIG:
                rows.append(fixture_row(kind, d))
                failed += not rows[-1][-1]
            layout = (len(files) >= 2 and index and "model.safetensors" not in files if variant == "f32 shards"
                      else files == ["model.safetensors"] and not index) and dtypes == {"BF16" if variant == "bf16" else "F32"}
            note = f"{len(files)} file{'s' if len(files) > 1 else ''} {'/'.join(sorted(dtypes))}, {moved} tensors perturbed"
            imp, lf = d + "_imp", d + "_logits.bin"
            rc, out = run([tool, "import", d, "--out", imp])
            if refuse:   # today's right answer: one line naming the tensor, nothing written
                lines = out.strip().splitlines()
                ok = (rc == 1 and len(lines) == 1 and "attn.c_attn.bias' is not zero" in lines[0] and not os.path.exists(imp)
                      and layout)
                failed += not ok
                rows.append((name, "refused" if rc else "NOT REFUSED", None, None, None, None, "-",
                             lines[0][lines[0].find("'"):][:60] if lines else "", ok))
                continue
            if rc == 0:
                rc, out = run([tool, "logits", imp, "--ids", ",".join(map(str, ids.tolist())), "--out", lf])
            if rc != 0 or not layout:
                print(f"FAIL {name}: {'not saved as expected: ' + note if rc == 0 else out.strip()}")
                failed += 1
                rows.append((name, "-", None, None, None, None, "-", note, False))
                continue
            ref, info = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, output_loading_info=True)
            ref.eval()
            with torch.no_grad():
                hf = ref(torch.tensor(ids)[None]).logits[0].numpy()
            ours = np.fromfile(lf, dtype="<f4").reshape(len(ids), -1)
            dlogit = float(np.abs(hf - ours).max()) if ours.shape == hf.shape else float("inf")
            load_issues = {k: v for k, v in info.items() if v}
            ok = dlogit <= TOL_LOGIT and not load_issues
            if load_issues:
                print(f"FAIL {name}: from_pretrained: {load_issues}")
            failed += not ok
            rows.append((name, type(ref).__name__, None, None, None, dlogit, "-", note + f", max|logit| {np.abs(hf).max():.2f}", ok))
    return rows, failed
# ---- a GPT2LMHeadModel made by transformers (issue #45 item 3): its biases imported -------------
def hf_gpt2_rows(work, tool, toks):
    """GPT2LMHeadModel randomly initialised by transformers, every bias (LayerNorms' and linear layers')
    and every LayerNorm weight moved away from 0 and 1 by N(0, 0.2) (at their init values a dropped,
    swapped or zero-filled tensor would not show), written by its own save_pretrained (float32);
    `gatedgpt_ckpt import` it (must give [model] bias = true) and compare the imported checkpoint's
    logits with transformers' on that directory loaded afresh: max |dlogit| <= TOL_LOGIT."""
    import torch
    from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel
    name, d = "gpt2 HF-made biases", os.path.join(work, "gpt2_hf_made")
    torch.manual_seed(45)
    cfg = GPT2Config(vocab_size=8192, n_positions=64, n_embd=64, n_layer=2, n_head=4, activation_function="gelu_new")
    src = GPT2LMHeadModel(cfg)
    with torch.no_grad():
        for k, p in src.named_parameters():
            if k.endswith(".bias") or (".ln_" in k and k.endswith(".weight")):
                p.add_(0.2 * torch.randn_like(p))
    src.save_pretrained(d)
    ids = toks[:32]
    imp, lf = d + "_imp", d + "_logits.bin"
    rc, out = run([tool, "import", d, "--out", imp])
    if rc == 0:
        rc, out = run([tool, "logits", imp, "--ids", ",".join(map(str, ids.tolist())), "--out", lf])
    if rc != 0:
        print(f"FAIL {name}: {out.strip()}")
        return [(name, "-", None, None, None, None, "-", "import failed", False)], 1
    has_bias = any(l.startswith("bias = true") for l in open(os.path.join(imp, "step_00000000", "config.ini")))
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        hf = model(torch.tensor(ids)[None]).logits[0].numpy()
    ours = np.fromfile(lf, dtype="<f4").reshape(len(ids), -1)
    dlogit = float(np.abs(hf[:, :ours.shape[1]] - ours).max())
    ok = dlogit <= TOL_LOGIT and has_bias and ours.shape[1] == model.config.vocab_size
    return [(name, type(model).__name__, None, None, None, dlogit, "-", "bias = true" if has_bias else "bias NOT set", ok)], int(not ok)
# ---- checkpoints written by transformers itself (issue #45) -> import ---------------------------
# Qwen3-Next as its published configs are: partial_rotary_factor 0.25 (4 of head_dim 16 channels
# turn), a Gated DeltaNet layer then gated full attention; dense, MoE, and YaRN beyond its length.
HF_BASE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
               head_dim=16, max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False,
               linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2,
               linear_num_value_heads=4, layer_types=["linear_attention", "full_attention"],
               initializer_range=0.1)   # larger than 0.02: attention, gates and logits far from uniform
HF_WRITTEN = {   # name -> (config fields beyond HF_BASE, logits window)
    "hf partial 0.25": (dict(num_experts=0, mlp_only_layers=[0, 1],
                             rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}), 32),
    "hf partial moe": (dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32,
                            norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.25}), 32),
    "hf partial yarn": (dict(num_experts=0, mlp_only_layers=[0, 1],
                             rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                              "original_max_position_embeddings": 64, "partial_rotary_factor": 0.25}), 200),
}


def hf_written_rows(work, tool, toks):
    """For each config of HF_WRITTEN: a randomly initialised Qwen3NextForCausalLM (seeded), every
    1-D parameter (the RMSNorm weights, which Qwen3-Next stores as w - 1 or w, dt_bias, A_log)
    moved away from its init by N(0, 0.1^2) noise so that a norm mapping error shows, saved by
    transformers' own save_pretrained; `gatedgpt_ckpt import` of that directory; its logits and
    greedy tokens (`gatedgpt_ckpt logits`) and validation loss (`gatedgpt_ckpt eval`, 4 batches of
    4 x 64) against transformers loading the same directory afresh. `sens` in the note: max|dlogit|
    between transformers with this partial_rotary_factor and with 1.0, the size of what a partial
    RoPE error would move (the bound is 1e-4). Returns (rows, failed)."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3NextConfig
    rows, failed = [], 0
    for name, (fields, W) in HF_WRITTEN.items():
        d = os.path.join(work, name.replace(" ", "_"))
        torch.manual_seed(1)
        cfg = Qwen3NextConfig(vocab_size=8192, **HF_BASE, **fields)
        src = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        with torch.no_grad():
            for p in src.parameters():
                if p.dim() == 1:
                    p.add_(0.1 * torch.randn_like(p))
        src.save_pretrained(d)
        ids = toks[:W]
        imp, lf = d + "_imp", d + "_logits.bin"
        rc, out = run([tool, "import", d, "--out", imp])
        if rc == 0:
            rc, out = run([tool, "logits", imp, "--ids", ",".join(map(str, ids.tolist())), "--out", lf, "--generate", "20"])
        if rc == 0:
            our_greedy = [int(x) for x in out.split("greedy:")[1].split()]
            rc, out = run([tool, "eval", imp, "--glob", "data/kjv/val_*.bin", "--batches", "4"])
        if rc != 0:
            print(f"FAIL {name}: {out.strip()}")
            failed += 1
            rows.append((name, "-", None, None, None, None, "-", "import failed", False))
            continue
        our_loss = float(out.split(": loss ")[1].split()[0])
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
        model.eval()
        full = dict(cfg.rope_parameters, partial_rotary_factor=1.0)
        other = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, rope_parameters=full)
        other.eval()
        with torch.no_grad():
            hf = model(torch.tensor(ids)[None]).logits[0].numpy()
            sens = float(np.abs(other(torch.tensor(ids)[None]).logits[0].numpy() - hf).max())
            losses = []
            for b in range(4):
                x = np.stack([toks[(b * 4 + i) * 64:(b * 4 + i) * 64 + 65] for i in range(4)])
                lg = model(torch.tensor(x[:, :64])).logits.double()
                losses.append(torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]),
                                                                torch.tensor(x[:, 1:]).reshape(-1)).item())
            hf_loss = float(np.mean(losses))
            gen = model.generate(torch.tensor(ids)[None], max_new_tokens=20, do_sample=False, pad_token_id=0)[0, W:].tolist()
        ours = np.fromfile(lf, dtype="<f4").reshape(W, -1)
        dlogit = float(np.abs(hf[:, :ours.shape[1]] - ours).max())
        ok = (dlogit <= TOL_LOGIT and abs(hf_loss - our_loss) <= TOL_LOSS and gen == our_greedy and sens > 100 * TOL_LOGIT
              and ours.shape[1] == model.config.vocab_size)
        failed += not ok
        rows.append((name, type(model).__name__, our_loss, hf_loss, abs(hf_loss - our_loss), dlogit,
                     f"{sum(g == o for g, o in zip(gen, our_greedy))}/20", f"sens {sens:.2g}", ok))
    return rows, failed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--kinds", default=",".join(KINDS), help="trained kinds ('' for none)")
    ap.add_argument("--saved", default="all", help="kinds of models saved by transformers ('' for none): " + ",".join(
        ["gpt2", "gpt2 biases", "llama", "qwen3", "qwen3_moe", "qwen2_moe", "qwen3_next", "hybrid", "qwen3_next_moe"]))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--keep", default=None, help="keep the runs and exports in this directory")
    ap.add_argument("--mc", type=int, default=1, help="1: the multiple-choice rows (scripts/interop_mc.py, needs lm-eval)")
    a = ap.parse_args()
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer
    torch.manual_seed(0)
    print(f"interop: torch {torch.__version__}, transformers {transformers.__version__}")
    train, tool = os.path.join(a.build, "train_gpt"), os.path.join(a.build, "gatedgpt_ckpt")
    work = a.keep or tempfile.mkdtemp(prefix="interop.")
    os.makedirs(work, exist_ok=True)
    toks = val_tokens("data/kjv/val_*.bin")
    rows, failed = [], 0
    for kind in [k for k in a.kinds.split(",") if k]:
        base, ov = KINDS[kind]
        run_dir = os.path.join(work, kind)
        rc, out = run([train, "--config", "configs/" + base, *SMALL, *ov, f"--train.steps={a.steps}",
                       f"--checkpoint.checkpoint_every={a.steps}", f"--log.run_dir={run_dir}"])
        if rc != 0:
            print(f"FAIL {kind}: training: {out[-500:]}"); failed += 1; continue
        ck = os.path.join(run_dir, "checkpoints")
        exp = os.path.join(work, kind + "_hf")
        rc, out = run([tool, "export", ck, "--out", exp])
        if rc != 0:
            print(f"FAIL {kind}: export: {out.strip()}"); failed += 1; continue
        cls = json.load(open(os.path.join(exp, "config.json")))["architectures"][0]
        # ours: eval over 4 batches of 4 x 64 (the loader's windows: stride 64, from the start)
        rc, out = run([tool, "eval", ck, "--batches", "4"])
        our_loss = float(out.split(": loss ")[1].split()[0])
        W = WINDOW.get(kind, 32)
        ids = toks[:W]
        lf = os.path.join(work, kind + "_logits.bin")
        rc, out = run([tool, "logits", ck, "--ids", ",".join(map(str, ids.tolist())), "--out", lf, "--generate", "20"])
        if rc != 0:
            print(f"FAIL {kind}: logits: {out.strip()}"); failed += 1; continue
        our_greedy = [int(x) for x in out.split("greedy:")[1].split()]
        # transformers' warnings while it reads the export (a rope_parameters field it does not
        # expect or of the wrong type is only a warning there, and a silent misreading here)
        warned = []
        handler = logging.Handler()
        handler.emit = lambda r: warned.append(r.getMessage())
        logging.getLogger("transformers").addHandler(handler)
        model, info = AutoModelForCausalLM.from_pretrained(exp, dtype=torch.float32, output_loading_info=True)
        logging.getLogger("transformers").removeHandler(handler)
        warned = [w for w in warned if "rope" in w.lower()]
        if warned:
            print(f"FAIL {kind}: transformers warned: {warned}")
        model.eval()
        load_issues = {k: v for k, v in info.items() if v}   # missing, unexpected, mismatched keys
        if load_issues:
            print(f"FAIL {kind}: from_pretrained: {load_issues}")
        V = model.config.vocab_size
        ours = np.fromfile(lf, dtype="<f4").reshape(W, -1)
        with torch.no_grad():
            hf = model(torch.tensor(ids)[None]).logits[0].numpy()
            dlogit = float(np.abs(hf[:, :V] - ours).max())
            losses = []
            for b in range(4):
                x = np.stack([toks[(b * 4 + i) * 64:(b * 4 + i) * 64 + 65] for i in range(4)])
                lg = model(torch.tensor(x[:, :64])).logits.double()
                losses.append(torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]),
                                                                torch.tensor(x[:, 1:]).reshape(-1)).item())
            hf_loss = float(np.mean(losses))
            gen = model.generate(torch.tensor(ids)[None], max_new_tokens=20, do_sample=False,
                                 pad_token_id=0)[0, W:].tolist()
        ok_cls = cls == EXPECT_CLASS[kind] and type(model).__name__ == EXPECT_CLASS[kind] and not load_issues and not warned
        ok_loss = abs(hf_loss - our_loss) <= TOL_LOSS
        ok_logit = dlogit <= TOL_LOGIT
        ok_gen = gen == our_greedy
        tok_note = "-"
        if os.path.exists(os.path.join(exp, "tokenizer.json")):
            # AutoTokenizer from the export vs our tokenizer (tools/tok_encode) on sample texts
            tok_bin = [l.split("=", 1)[1].split(";")[0].strip() for l in open(os.path.join(ck, sorted(os.listdir(ck))[-1], "config.ini"))
                       if l.startswith("tokenizer")][0]
            texts = TEXTS + [l for l in open("data/kjv/val.txt", encoding="utf-8").read().splitlines()[:200] if l]
            r = subprocess.run([os.path.join(a.build, "tok_encode"), tok_bin, "--nul"], input="\0".join(texts).encode(),
                               capture_output=True)
            if r.returncode != 0:
                print(f"FAIL {kind}: tok_encode: {r.stderr.decode().strip()}")
            ours_ids = [[int(x) for x in line.split()] for line in r.stdout.decode().splitlines()]
            t = AutoTokenizer.from_pretrained(exp)
            same = sum(t(x)["input_ids"] == o and t.decode(o) == x for x, o in zip(texts, ours_ids))
            tok_note = f"{same}/{len(texts)} texts" + ("" if same == len(texts) and len(ours_ids) == len(texts) else " FAIL")
        ok = ok_cls and ok_loss and ok_logit and ok_gen and not tok_note.endswith("FAIL")
        failed += not ok
        rows.append((kind, cls, our_loss, hf_loss, abs(hf_loss - our_loss), dlogit, f"{sum(g == o for g, o in zip(gen, our_greedy))}/20", tok_note, ok))
    for name, (ov, setting) in (REFUSED.items() if a.kinds else []):
        run_dir = os.path.join(work, "refused_" + name.replace(" ", "_"))
        rc, out = run([train, "--config", "configs/tiny_gated.ini", *SMALL, *ov, "--train.steps=2",
                       "--checkpoint.checkpoint_every=2", f"--log.run_dir={run_dir}"])
        rc, out = run([tool, "export", os.path.join(run_dir, "checkpoints"), "--out", run_dir + "_hf"])
        lines = out.strip().splitlines()
        ok = rc == 1 and len(lines) == 1 and setting in lines[0] and not os.path.exists(run_dir + "_hf")
        failed += not ok
        rows.append((name, "refused" if ok else "NOT REFUSED", None, None, None, None, "-", lines[0][:60] if lines else "", ok))
    r, f = sharded_rows(work, tool, toks)   # transformers' sharded save_pretrained -> import
    rows, failed = rows + r, failed + f
    saved = list(saved_configs()) if a.saved == "all" else [k for k in a.saved.split(",") if k]
    r, f = saved_rows(work, tool, saved)   # models saved by transformers' own save_pretrained -> import
    rows, failed = rows + r, failed + f
    r, f = hf_gpt2_rows(work, tool, toks)   # a GPT2LMHeadModel transformers made, biases and all -> import
    rows, failed = rows + r, failed + f
    r, f = hf_written_rows(work, tool, toks)   # transformers' own save_pretrained (partial RoPE) -> import
    rows, failed = rows + r, failed + f
    if a.mc:   # gatedgpt_ckpt mc vs transformers' log-likelihoods and lm-evaluation-harness's acc / acc_norm
        import interop_mc
        r, f = interop_mc.mc_rows(work, a.build)
        rows, failed = rows + r, failed + f
    print(f"\n{'kind':<26} {'class':<22} {'our loss':>10} {'HF loss':>10} {'|dloss|':>9} {'max|dlogit|':>11} {'greedy':>7}  tokenizer")
    for k, c, l1, l2, dl, dg, g, tn, ok in rows:
        f = lambda v, p: "-" if v is None else p % v
        print(f"{k:<26} {c:<22} {f(l1, '%10.6f'):>10} {f(l2, '%10.6f'):>10} {f(dl, '%9.2e'):>9} {f(dg, '%11.2e'):>11} {g:>7}  {tn}  {'ok' if ok else 'FAIL'}")
    print(f"\ninterop: bounds |dloss| <= {TOL_LOSS:g}, max|dlogit| <= {TOL_LOGIT:g}, greedy ids equal; "
          f"{len(rows) - failed} of {len(rows)} ok; work dir {work}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
