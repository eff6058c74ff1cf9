#!/usr/bin/env bash
# tests/test_ckpt_tools.sh BUILD_DIR: gatedgpt_ckpt on real checkpoints of three tiny models
# (elementwise sigmoid gate, Qwen3-Next q_proj layout; headwise gate + layernorm + GELU + learned
# positions + untied head; plain Qwen3):
#   inspect  verifies and prints norms equal to an independent reader's (tests/check_ckpt.py)
#   sample   reproduces the trainer's own sample at that step, byte for byte
#   eval     reproduces the trainer's validation loss at that step
#   export   each transformers class (Qwen3-Next, GPT-2, Llama, Qwen3, Qwen3-MoE, Qwen3-Next MoE) and
#            --format raw: safetensors whose header parses with Python's json, names, shapes and
#            values as documented (tests/check_ckpt.py, numpy); config.json fields; a model no
#            class represents (headwise gate) refused in one line, nothing written
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

kind qwen3_next Qwen3NextForCausalLM
# import: the imported checkpoint resumes (continued pre-training), and what gatedgpt cannot
# represent is refused in one line naming the file and the field, with nothing written
"$build/train_gpt" --resume "$tmp/imp_qwen3/step_00000000" --train.steps=2 --train.warmup_steps=0 --train.seq_len=32 \
    --train.batch_size=2 --train.threads=1 --data.train_glob="data/kjv/train_*.bin" --data.val_glob="data/kjv/val_*.bin" \
    --log.run_dir="$tmp/imp_run" --checkpoint.dir="$tmp/imp_run/ck" --log.val_every=0 --log.sample_every=0 \
    --metrics.probe_every=0 > "$tmp/imp_run.out" 2>&1
check "an imported checkpoint resumes: 2 steps trained from step 0" 'grep -q "resume: continuing from $tmp/imp_qwen3/step_00000000: step 0" "$tmp/imp_run.out" && grep -q "^step     2/2 | loss" "$tmp/imp_run.out"'
imp_err() {   # imp_err NAME PATTERN SED_EXPR FILE: edit a copy of hf_qwen3_next, import must fail with PATTERN
    local name=$1 pat=$2 expr=$3 file=$4
    rm -rf "$tmp/bad_hf"; cp -r "$tmp/hf_qwen3_next" "$tmp/bad_hf"
    sed -i "$expr" "$tmp/bad_hf/$file"
    "$tool" import "$tmp/bad_hf" --out "$tmp/bad_imp" > "$tmp/e.out" 2>&1; local rc=$?
    check "import refuses $name: one line, exit 1" '[ "$rc" = 1 ] && [ "$(wc -l < "$tmp/e.out")" = 1 ] && grep -q "$pat" "$tmp/e.out"'
    check "import refuses $name: nothing written" '[ ! -e "$tmp/bad_imp" ]'
}
imp_err "linear-attention layers" "config.json: layer_types: gatedgpt has no linear-attention" '0,/"full_attention"/s//"linear_attention"/' config.json
imp_err "partial RoPE" "config.json: partial_rotary_factor" 's/"partial_rotary_factor": 1.0/"partial_rotary_factor": 0.25/' config.json
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
