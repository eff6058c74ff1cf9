#!/usr/bin/env bash
# tests/test_ckpt_tools.sh BUILD_DIR: gatedgpt_ckpt on real checkpoints of three tiny models
# (elementwise sigmoid gate, Qwen3-Next q_proj layout; headwise gate + layernorm + GELU + learned
# positions + untied head; plain Qwen3):
#   inspect  verifies and prints norms equal to an independent reader's (tests/check_ckpt.py)
#   sample   reproduces the trainer's own sample at that step, byte for byte
#   eval     reproduces the trainer's validation loss at that step
#   export   each transformers class (Qwen3-Next, GPT-2, Llama, Qwen3, Qwen3-MoE, Qwen3-Next MoE,
#            Qwen3-Next hybrids with Gated DeltaNet layers, dense and MoE) and --format raw:
#            safetensors whose header parses with Python's json, names, shapes and values as
#            documented (tests/check_ckpt.py, numpy); config.json fields; models no class
#            represents (headwise gate; hybrids with a sigmoid output gate or ungated attention)
#            refused in one line, nothing written
#   import   export -> import -> export byte-identical for every class; imported checkpoints
#            (plain and hybrid) resume; what gatedgpt cannot represent refused in one line
#   errors   a damaged checkpoint, an unknown command, a missing option
set -uo pipefail
build=$1
source tests/ckpt_common.sh   # the KJV shards, $PY, $tmp (removed at exit)
tool="$build/gatedgpt_ckpt"
X=("${TINY[@]}" --train.steps=8 --checkpoint.checkpoint_every=4 --checkpoint.keep_last=0
   --log.val_every=4 --log.val_batches=3 --log.sample_every=4 --log.sample_tokens=12)

"$build/train_gpt" "${X[@]}" --log.run_dir="$tmp/a" > "$tmp/a.out" 2>&1 || { echo "FAIL: training run"; cat "$tmp/a.out"; exit 1; }
ck="$tmp/a/checkpoints/step_00000008"

# inspect
"$tool" inspect "$ck" > "$tmp/inspect.txt" 2>&1
rc=$?
check "inspect: exit 0" '[ "$rc" = 0 ]'
check "inspect: verified, step, data position, config, totals" 'grep -q "verified (4 files" "$tmp/inspect.txt" && grep -q "^step 8 of \[train\] steps 8" "$tmp/inspect.txt" && grep -q "^data: epoch 0, shard 0, batch 16" "$tmp/inspect.txt" && grep -q "^attn_gate = elementwise" "$tmp/inspect.txt" && grep -q "^total: 282848 parameters" "$tmp/inspect.txt"'
check "inspect: norms equal an independent computation" 'python3 tests/check_ckpt.py norms "$ck" "$tmp/inspect.txt"'
"$tool" inspect "$tmp/a/checkpoints" > "$tmp/inspect_dir.txt" 2>&1
check "inspect on a directory of checkpoints picks the newest" 'grep -q "checkpoint $ck: verified" "$tmp/inspect_dir.txt"'

# sample: the trainer's sample at step 8 (same prompt, temperature, top-k, seed = seed + step)
"$tool" sample "$ck" > "$tmp/sample.txt" 2>&1
trainer_sample=$(sed -n '/^---- sample at step 8 /,/^----$/p' "$tmp/a.out" | sed '1d;$d')
tool_sample=$(sed -n '/^---- sample from /,/^----$/p' "$tmp/sample.txt" | sed '1d;$d')
check "sample reproduces the trainer's sample at step 8" '[ -n "$tool_sample" ] && [ "$tool_sample" = "$trainer_sample" ]'
echo "sample (step 8): $tool_sample"
"$tool" sample "$ck" --seed 7 > "$tmp/sample7.txt" 2>&1
check "sample with another seed differs" 'grep -q "seed 7) ----\$" "$tmp/sample7.txt" && [ -n "$(sed -n 2p "$tmp/sample7.txt")" ] && [ "$(sed -n 2p "$tmp/sample7.txt")" != "$(echo "$tool_sample" | head -1)" ]'

# eval: the trainer's validation loss at step 4 (val_batches 3 of 2 x 32)
# (the log has the float with 17 digits, the tool with 9: both print its exact value, so compare
# the trainer's at the tool's 9 digits, as strings: equal only if the same float)
trainer_val=$(grep '"type":"eval","step":4,' "$tmp/a/log.jsonl" | sed 's/.*"val_loss":\([0-9.]*\).*/\1/' | awk '{ printf "%.9g", $1 }')
tool_val=$("$tool" eval "$tmp/a/checkpoints/step_00000004" | sed -n 's/.*: loss \([0-9.]*\) over 3 batches.*/\1/p')
check "eval reproduces the trainer's val loss at step 4 ($trainer_val)" '[ -n "$tool_val" ] && [ "$tool_val" = "$trainer_val" ]'
echo "eval at step 4: $tool_val (trainer: $trainer_val)"
"$tool" eval "$ck" --glob "data/kjv/val_*.bin" --batches 0 > "$tmp/eval_all.txt" 2>&1
check "eval --glob --batches 0: every batch of the shards (48195 val tokens: 753 batches)" 'grep -q "over 753 batches of 2x32 tokens" "$tmp/eval_all.txt"'
# --progress 0: a progress line on stderr after every batch but the last; stdout keeps the result
"$tool" eval "$ck" --glob "data/kjv/val_*.bin" --batches 40 --progress 0 > "$tmp/eval_p.out" 2> "$tmp/eval_p.err"
check "eval --progress 0: 39 progress lines on stderr (batch k/40, elapsed, ETA), the result alone on stdout" \
    '[ "$(grep -c "^eval: batch [0-9]*/40 | running mean [0-9.]* | [0-9:s]* elapsed, ETA [0-9:s]*\$" "$tmp/eval_p.err")" = 39 ] && [ "$(wc -l < "$tmp/eval_p.out")" = 1 ] && grep -q "over 40 batches" "$tmp/eval_p.out"'
"$tool" eval "$ck" --glob "data/kjv/val_*.bin" --batches 40 > "$tmp/eval_q.out" 2> "$tmp/eval_q.err"
check "eval without --progress on a short evaluation: no progress line (10 s apart)" '[ ! -s "$tmp/eval_q.err" ] && cmp -s "$tmp/eval_p.out" "$tmp/eval_q.out"'
# the step record: this job's elapsed time and the ETA, 0 after the last step with nothing due
check "step records carry elapsed_s and eta_s; step 8 (the last) still counts its own eval, sample and checkpoint (ETA > 0)" \
    '[ "$(grep -c "\"type\":\"step\".*\"elapsed_s\":[0-9.]*,\"eta_s\":[0-9.]*," "$tmp/a/log.jsonl")" = 8 ] && grep "\"type\":\"step\",\"step\":8," "$tmp/a/log.jsonl" | grep -q "\"eta_s\":[0-9.]*[1-9]"'

# export: each transformers class (tests/check_ckpt.py reads the rules independently and checks
# names, shapes, values (transposes, Qwen3-Next's w - 1) and config.json), and --format raw
"$tool" export "$ck" --out "$tmp/hf_a" > "$tmp/export.txt" 2>&1
check "export (elementwise gate: Qwen3NextForCausalLM, q_proj [q_h | g_h], norms w - 1)" '$PY tests/check_ckpt.py export "$ck" "$tmp/hf_a" && grep -q "\"model_type\": \"qwen3_next\"" "$tmp/hf_a/config.json"'
"$build/train_gpt" "${TINY[@]}" --train.steps=2 --checkpoint.checkpoint_every=2 --log.run_dir="$tmp/b" \
    --model.attn_gate=headwise --model.tie_embeddings=false --model.norm=layernorm --model.mlp=gelu --model.pos=learned > /dev/null 2>&1
"$tool" export "$tmp/b/checkpoints" --out "$tmp/hf_b" > "$tmp/b.out" 2>&1; rc=$?
check "export of a headwise gate: refused in one line naming attn_gate and the nearest exportable" '[ "$rc" = 1 ] && [ "$(wc -l < "$tmp/b.out")" = 1 ] && grep -q "attn_gate = headwise has no transformers class.*nearest exportable is attn_gate = elementwise" "$tmp/b.out"'
check "nothing written for a refused export" '[ ! -e "$tmp/hf_b" ]'
"$tool" export "$tmp/b/checkpoints" --out "$tmp/hf_b" --format raw > /dev/null 2>&1
check "export --format raw (headwise gate_proj, layernorm biases, gelu, learned positions, untied lm_head)" '$PY tests/check_ckpt.py export "$tmp/b/checkpoints/step_00000002" "$tmp/hf_b"'
kind() {   # kind NAME CLASS OVERRIDES...: a 2-step model of these overrides exports as CLASS
    local name=$1 cls=$2; shift 2
    "$build/train_gpt" "${TINY[@]}" --train.steps=2 --checkpoint.checkpoint_every=2 --log.run_dir="$tmp/$name" "$@" > /dev/null 2>&1
    "$tool" export "$tmp/$name/checkpoints" --out "$tmp/hf_$name" > /dev/null 2>&1
    check "export ($name: $cls)" '$PY tests/check_ckpt.py export "$tmp/$name/checkpoints/step_00000002" "$tmp/hf_$name" && grep -q "\"$cls\"" "$tmp/hf_$name/config.json"'
    # import back, export again: the same tensors byte for byte
    "$tool" import "$tmp/hf_$name" --out "$tmp/imp_$name" > /dev/null 2>&1
    "$tool" export "$tmp/imp_$name" --out "$tmp/hf2_$name" > /dev/null 2>&1
    check "export -> import -> export bit-identical ($name)" '$PY tests/compare_safetensors.py "$tmp/hf_$name/model.safetensors" "$tmp/hf2_$name/model.safetensors"'
    check "export -> import -> export: the same config.json fields ($name)" '$PY tests/check_ckpt.py same_config "$tmp/hf_$name" "$tmp/hf2_$name"'
}
kind qwen3 Qwen3ForCausalLM --model.attn_gate=none
kind llama LlamaForCausalLM --model.attn_gate=none --model.qk_norm=false
kind gpt2 GPT2LMHeadModel --model.attn_gate=none --model.norm=layernorm --model.mlp=gelu --model.pos=learned \
    --model.qk_norm=false --model.n_kv_head=2 --model.tie_embeddings=false
kind qwen3_moe Qwen3MoeForCausalLM --model.attn_gate=none --moe.n_expert=4 --moe.top_k=2 --moe.d_expert=32
kind qwen2_moe Qwen2MoeForCausalLM --model.attn_gate=none --model.qk_norm=false --moe.n_expert=4 --moe.top_k=2 --moe.d_expert=32 \
    --moe.n_shared_expert=1 --moe.d_shared_expert=32 --moe.shared_expert_gate=true
kind qwen3_next_moe Qwen3NextForCausalLM --moe.n_expert=4 --moe.top_k=2 --moe.d_expert=32 --moe.n_shared_expert=1 \
    --moe.d_shared_expert=32 --moe.shared_expert_gate=true --moe.moe_every=2

# hybrids (Gated DeltaNet layers as Qwen3-Next's linear_attn): 2 key heads x 4 value heads of
# unequal widths (in_proj_qkvz / in_proj_ba grouped per key head), and an MoE hybrid
kind hybrid Qwen3NextForCausalLM --model.n_layer=4 --model.layer_pattern=LLLA --model.linear_n_k_head=2 \
    --model.linear_n_v_head=4 --model.linear_k_head_dim=8 --model.linear_v_head_dim=12 --model.linear_conv_kernel=3
kind hybrid_moe Qwen3NextForCausalLM --model.layer_pattern=LA --moe.n_expert=4 --moe.top_k=2 --moe.d_expert=32 \
    --moe.n_shared_expert=1 --moe.d_shared_expert=32 --moe.shared_expert_gate=true
# every RoPE scaling (max_seq_len 32, trained at 16): config.json's rope_parameters re-derived from
# config.ini by tests/check_ckpt.py, every field (linear; ntk as a larger rope_theta; yarn with
# the default betas, and with other betas and an explicit attention factor)
R=(--train.seq_len=16 --model.rope_original_len=16)
kind rope_linear Qwen3ForCausalLM --model.attn_gate=none "${R[@]}" --model.rope_scaling=linear --model.rope_factor=2
kind rope_ntk LlamaForCausalLM --model.attn_gate=none --model.qk_norm=false "${R[@]}" --model.rope_scaling=ntk --model.rope_factor=3
kind rope_yarn Qwen3NextForCausalLM "${R[@]}" --model.rope_scaling=yarn --model.rope_factor=2
kind rope_yarn_betas Qwen3ForCausalLM --model.attn_gate=none "${R[@]}" --model.rope_scaling=yarn --model.rope_factor=4 \
    --model.yarn_beta_fast=16 --model.yarn_beta_slow=2 --model.yarn_attn_factor=1.25
# partial RoPE ([model] rope_fraction; transformers' partial_rotary_factor): Qwen3-Next honours it,
# also under a scaling (ntk's base over the rotated dim); the classes that rotate every channel refuse it
kind rope_partial Qwen3NextForCausalLM --model.rope_fraction=0.25
kind rope_partial_ntk Qwen3NextForCausalLM "${R[@]}" --model.rope_fraction=0.5 --model.rope_scaling=ntk --model.rope_factor=3
check "import of partial_rotary_factor 0.25: rope_fraction = 0.25" 'grep -q "\"partial_rotary_factor\": 0.25" "$tmp/hf_rope_partial/config.json" && grep -q "^rope_fraction = 0.25 " "$tmp/imp_rope_partial/step_00000000/config.ini"'
# the Hub's MoE layout (one tensor per expert, as transformers' save_pretrained writes it) imports to the same model
$PY tests/check_ckpt.py unfuse "$tmp/hf_hybrid_moe" "$tmp/unf" > /dev/null
"$tool" import "$tmp/unf" --out "$tmp/imp_unf" > /dev/null 2>&1
"$tool" export "$tmp/imp_unf" --out "$tmp/hf2_unf" > /dev/null 2>&1
check "import of per-expert MoE tensors (mlp.experts.J.*_proj.weight) gives the fused export's model" '$PY tests/compare_safetensors.py "$tmp/hf_hybrid_moe/model.safetensors" "$tmp/hf2_unf/model.safetensors" > /dev/null'
check "import of a hybrid: layer_pattern and the linear_* sizes from layer_types and config.json" 'grep -q "^layer_pattern = LLLA " "$tmp/imp_hybrid/step_00000000/config.ini" && grep -q "^linear_n_v_head = 4 " "$tmp/imp_hybrid/step_00000000/config.ini" && grep -q "^linear_v_head_dim = 12 " "$tmp/imp_hybrid/step_00000000/config.ini" && grep -q "^linear_conv_kernel = 3 " "$tmp/imp_hybrid/step_00000000/config.ini"'
"$tool" export "$tmp/hybrid/checkpoints" --out "$tmp/raw_hybrid" --format raw > /dev/null 2>&1
check "export --format raw of a hybrid (linear_attn.in_proj_qkv, in_proj_z, in_proj_b/_a, conv1d [C, K], ...)" '$PY tests/check_ckpt.py export "$tmp/hybrid/checkpoints/step_00000002" "$tmp/raw_hybrid"'
refuse() {   # refuse NAME PATTERN OVERRIDES...: a 2-step model of these overrides is refused by export in one line
    local name=$1 pat=$2; shift 2
    "$build/train_gpt" "${TINY[@]}" --train.steps=2 --checkpoint.checkpoint_every=2 --log.run_dir="$tmp/$name" "$@" > /dev/null 2>&1
    "$tool" export "$tmp/$name/checkpoints" --out "$tmp/hf_$name" > "$tmp/$name.out" 2>&1; local rc=$?
    check "export refuses $name in one line: $pat" '[ "$rc" = 1 ] && [ "$(wc -l < "$tmp/$name.out")" = 1 ] && grep -q "$pat" "$tmp/$name.out" && [ ! -e "$tmp/hf_$name" ]'
}
refuse hybrid_sigmoid "linear_gate_act = sigmoid has no transformers class.*nearest exportable is linear_gate_act = silu" \
    --model.layer_pattern=LA --model.linear_gate_act=sigmoid
refuse hybrid_nogate "hybrid's full-attention layers export as Qwen3-Next's.*attn_gate = none.*nearest exportable is attn_gate = elementwise" \
    --model.layer_pattern=LA --model.attn_gate=none
refuse rope_partial_qwen3 "rope_fraction = 0.5 (RoPE on 8 of 16 channels): Qwen3ForCausalLM rotates every channel.*nearest exportable is rope_fraction = 1" \
    --model.attn_gate=none --model.rope_fraction=0.5

kind qwen3_next Qwen3NextForCausalLM
# import: the imported checkpoint resumes (continued pre-training), and what gatedgpt cannot
# represent is refused in one line naming the file and the field, with nothing written
"$build/train_gpt" --resume "$tmp/imp_qwen3/step_00000000" --train.steps=2 --train.warmup_steps=0 --train.seq_len=32 \
    --train.batch_size=2 --train.threads=1 --data.train_glob="data/kjv/train_*.bin" --data.val_glob="data/kjv/val_*.bin" \
    --log.run_dir="$tmp/imp_run" --checkpoint.dir="$tmp/imp_run/ck" --log.val_every=0 --log.sample_every=0 \
    --metrics.probe_every=0 > "$tmp/imp_run.out" 2>&1
check "an imported checkpoint resumes: 2 steps trained from step 0" 'grep -q "resume: continuing from $tmp/imp_qwen3/step_00000000: step 0" "$tmp/imp_run.out" && grep -q "^step     2/2 | loss" "$tmp/imp_run.out"'
"$build/train_gpt" --resume "$tmp/imp_hybrid/step_00000000" --train.steps=2 --train.warmup_steps=0 --train.seq_len=32 \
    --train.batch_size=2 --train.threads=1 --data.train_glob="data/kjv/train_*.bin" --data.val_glob="data/kjv/val_*.bin" \
    --log.run_dir="$tmp/imp_hrun" --checkpoint.dir="$tmp/imp_hrun/ck" --log.val_every=0 --log.sample_every=0 \
    --metrics.probe_every=0 > "$tmp/imp_hrun.out" 2>&1
check "an imported hybrid checkpoint resumes: 2 steps trained from step 0" 'grep -q "resume: continuing from $tmp/imp_hybrid/step_00000000: step 0" "$tmp/imp_hrun.out" && grep -q "^step     2/2 | loss" "$tmp/imp_hrun.out"'
imp_err() {   # imp_err NAME PATTERN SED_EXPR FILE [SRC]: edit a copy of hf_SRC (qwen3_next), import must fail with PATTERN
    local name=$1 pat=$2 expr=$3 file=$4 src=${5:-qwen3_next}
    rm -rf "$tmp/bad_hf"; cp -r "$tmp/hf_$src" "$tmp/bad_hf"
    if [ "$file" = config.py ]; then   # a Python statement on the parsed config.json, c
        $PY -c "import json, sys; p = sys.argv[1]; c = json.load(open(p)); $expr; json.dump(c, open(p, 'w'))" "$tmp/bad_hf/config.json"
    else
        sed -i "$expr" "$tmp/bad_hf/$file"
    fi
    "$tool" import "$tmp/bad_hf" --out "$tmp/bad_imp" > "$tmp/e.out" 2>&1; local rc=$?
    check "import refuses $name: one line, exit 1" '[ "$rc" = 1 ] && [ "$(wc -l < "$tmp/e.out")" = 1 ] && grep -q "$pat" "$tmp/e.out"'
    check "import refuses $name: nothing written" '[ ! -e "$tmp/bad_imp" ]'
}
imp_err "a linear-attention layer without its tensors" "model.safetensors: tensor 'model.layers.0.linear_attn.in_proj_qkvz.weight' is missing" '0,/"full_attention"/s//"linear_attention"/' config.json
imp_err "an unknown layer type" "config.json: layer_types: an entry other than full_attention or linear_attention" 'c["layer_types"][1] = "sliding_attention"' config.py hybrid
imp_err "layer types with no period of at most 63 layers" "config.json: layer_types: the layer types repeat with no period shorter than 67 layers" \
    'c["num_hidden_layers"] = 67; c["layer_types"] = ["linear_attention"] * 66 + ["full_attention"]' config.py hybrid
imp_err "linear value heads not a multiple of the key heads" "config error: .*config.json: \[model\] linear_n_k_head = 3: linear_n_v_head (4, set at .*config.json) is not divisible" 'c["linear_num_key_heads"] = 3' config.py hybrid
# without layer_types, Qwen3-Next's config class places full attention every full_attention_interval (4) layers: LLLA
rm -rf "$tmp/nolt"; cp -r "$tmp/hf_hybrid" "$tmp/nolt"
$PY -c "import json, sys; p = sys.argv[1]; c = json.load(open(p)); del c['layer_types']; json.dump(c, open(p, 'w'))" "$tmp/nolt/config.json"
"$tool" import "$tmp/nolt" --out "$tmp/imp_nolt" > /dev/null 2>&1
"$tool" export "$tmp/imp_nolt" --out "$tmp/hf2_nolt" > /dev/null 2>&1
check "import without layer_types: full_attention_interval's default 4 gives LLLA, the same tensors" 'grep -q "^layer_pattern = LLLA " "$tmp/imp_nolt/step_00000000/config.ini" && $PY tests/compare_safetensors.py "$tmp/hf_hybrid/model.safetensors" "$tmp/hf2_nolt/model.safetensors" > /dev/null'
imp_err "partial RoPE of an odd channel count" "config.json: partial_rotary_factor: int(head_dim x partial_rotary_factor) = int(16 x 0.1875) = 3 rotated channels" \
    's/"partial_rotary_factor": 1.0/"partial_rotary_factor": 0.1875/' config.json
imp_err "partial RoPE on a class that rotates every channel" "config.json: partial_rotary_factor: this model_type's transformers class rotates every channel" \
    'c["rope_parameters"]["partial_rotary_factor"] = 0.5' config.py qwen3
# YaRN fields transformers reads and gatedgpt has no equivalent for; a yarn without its factor
imp_err "YaRN's mscale (DeepSeek's attention factor)" "config.json: rope_parameters.mscale: DeepSeek's attention factor" \
    'c["rope_parameters"].pop("attention_factor"); c["rope_parameters"].update(mscale=1.0, mscale_all_dim=0.5)' config.py rope_yarn_betas
imp_err "YaRN with truncate false" "config.json: rope_parameters.truncate" 'c["rope_parameters"]["truncate"] = False' config.py rope_yarn
rm -rf "$tmp/nofactor"; cp -r "$tmp/hf_rope_yarn" "$tmp/nofactor"
$PY -c "import json, sys; p = sys.argv[1]; c = json.load(open(p)); del c['rope_parameters']['factor']; c['max_position_embeddings'] = 48; json.dump(c, open(p, 'w'))" "$tmp/nofactor/config.json"
"$tool" import "$tmp/nofactor" --out "$tmp/imp_nofactor" > /dev/null 2>&1
check "import of a yarn without factor: transformers' max_position_embeddings / original (48 / 16 = 3)" 'grep -q "^rope_factor = 3 " "$tmp/imp_nofactor/step_00000000/config.ini" && grep -q "^rope_original_len = 16 " "$tmp/imp_nofactor/step_00000000/config.ini"'
imp_err "an unknown model_type" "config.json: model_type: import reads gpt2, llama, qwen3" 's/"model_type": "qwen3_next"/"model_type": "mamba"/' config.json
imp_err "a tensor of another shape" "model.safetensors: tensor 'model.layers.0.self_attn.k_proj.weight' has another shape" 's/"num_key_value_heads": 1/"num_key_value_heads": 2/' config.json

# errors: one line naming the file, non-zero exit
cp -r "$ck" "$tmp/bad"
truncate -s 5000 "$tmp/bad/model.bin"
for c in inspect sample eval export; do
    "$tool" $c "$tmp/bad" --out "$tmp/hf_bad" > "$tmp/bad.out" 2>&1
    rc=$?
    check "$c of a truncated checkpoint: exit 1 naming model.bin" '[ "$rc" = 1 ] && grep -q "error: checkpoint .$tmp/bad/model.bin.: truncated" "$tmp/bad.out"'
done
check "nothing exported from a damaged checkpoint" '[ ! -e "$tmp/hf_bad" ]'
"$tool" frobnicate "$ck" > "$tmp/e.out" 2>&1; rc=$?
check "unknown command: exit 1" '[ "$rc" = 1 ] && grep -q "unknown command .frobnicate." "$tmp/e.out"'
"$tool" export "$ck" > "$tmp/e.out" 2>&1; rc=$?
check "export without --out: exit 1" '[ "$rc" = 1 ] && grep -q "export needs --out DIR" "$tmp/e.out"'
finish
