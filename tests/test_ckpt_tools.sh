#!/usr/bin/env bash
# tests/test_ckpt_tools.sh BUILD_DIR: gatedgpt_ckpt on real checkpoints of three tiny models
# (elementwise sigmoid gate, Qwen3-Next q_proj layout; headwise gate + layernorm + GELU + learned
# positions + untied head; plain Qwen3):
#   inspect  verifies and prints norms equal to an independent reader's (tests/check_ckpt.py)
#   sample   reproduces the trainer's own sample at that step, byte for byte
#   eval     reproduces the trainer's validation loss at that step
#   export   safetensors whose header parses with Python's json, names and shapes as documented,
#            values equal to the checkpoint's slices; config.json fields
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

# export: three model variants
"$tool" export "$ck" --out "$tmp/hf_a" > "$tmp/export.txt" 2>&1
check "export (elementwise gate, Qwen3-Next q_proj layout)" 'python3 tests/check_ckpt.py export "$ck" "$tmp/hf_a"'
"$build/train_gpt" "${TINY[@]}" --train.steps=2 --checkpoint.checkpoint_every=2 --log.run_dir="$tmp/b" \
    --model.attn_gate=headwise --model.tie_embeddings=false --model.norm=layernorm --model.mlp=gelu --model.pos=learned > /dev/null 2>&1
"$tool" export "$tmp/b/checkpoints" --out "$tmp/hf_b" > /dev/null 2>&1
check "export (headwise gate_proj, layernorm biases, gelu, learned positions, untied lm_head)" 'python3 tests/check_ckpt.py export "$tmp/b/checkpoints/step_00000002" "$tmp/hf_b"'
"$build/train_gpt" "${TINY[@]}" --train.steps=2 --checkpoint.checkpoint_every=2 --log.run_dir="$tmp/c" --model.attn_gate=none > /dev/null 2>&1
"$tool" export "$tmp/c/checkpoints" --out "$tmp/hf_c" > /dev/null 2>&1
check "export (plain Qwen3: Qwen3ForCausalLM)" 'python3 tests/check_ckpt.py export "$tmp/c/checkpoints/step_00000002" "$tmp/hf_c" && grep -q "\"model_type\": \"qwen3\"" "$tmp/hf_c/config.json"'

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
