#!/usr/bin/env bash
# tests/test_resume.sh BUILD_DIR: exact resume. 16 steps straight vs 8 steps (--stop-after 8)
# + --resume auto + 8 steps: every step record (loss, lr, grad norm, skipped) identical, and the
# step-16 checkpoints' model.bin (weights) and rank_00000.bin (AdamW m, v, t, data position,
# spike windows, counters) byte for byte identical. Then: a finished run resumed does nothing;
# an architecture change is refused listing the keys; a damaged newest checkpoint makes
# --resume auto fall back (warning naming the file) and the run still matches; --resume PATH of
# a damaged checkpoint is an error naming the file; a fresh run into a used directory is refused.
set -uo pipefail
build=$1
source tests/ckpt_common.sh   # the KJV shards, $PY, $tmp (removed at exit)
X=("${TINY[@]}" --train.steps=16 --checkpoint.checkpoint_every=4 --checkpoint.keep_last=0
   --log.val_every=4 --log.val_batches=2 --metrics.probe_every=4 --log.sample_every=8 --log.sample_tokens=8)

"$build/train_gpt" "${X[@]}" --log.run_dir="$tmp/straight" > "$tmp/straight.out" 2>&1 || { echo "FAIL: straight run"; cat "$tmp/straight.out"; exit 1; }
"$build/train_gpt" "${X[@]}" --log.run_dir="$tmp/split" --stop-after 8 > "$tmp/split1.out" 2>&1 || { echo "FAIL: first half"; cat "$tmp/split1.out"; exit 1; }
check "first half stopped at 8" 'grep -q "stopped after step 8 of 16" "$tmp/split1.out"'
"$build/train_gpt" "${X[@]}" --log.run_dir="$tmp/split" --resume auto > "$tmp/split2.out" 2>&1 || { echo "FAIL: resumed half"; cat "$tmp/split2.out"; exit 1; }
check "resumed from step 8" 'grep -q "resume: continuing from $tmp/split/checkpoints/step_00000008: step 8" "$tmp/split2.out"'

n_steps=$(steps_of "$tmp/straight/log.jsonl" | wc -l)
n_skipped=$(steps_of "$tmp/straight/log.jsonl" | grep -c '"skipped":true')
check "16 step records" '[ "$n_steps" = 16 ]'
check "the spike detector skipped some updates (so its windows matter)" '[ "$n_skipped" -gt 0 ]'
check "every step record identical (loss, lr, grad norm, skipped)" 'diff <(steps_of "$tmp/straight/log.jsonl") <(steps_of "$tmp/split/log.jsonl") > "$tmp/diff.txt"'
check "eval, probe and sample records identical" 'diff <(grep -E "\"type\":\"(eval|probe|sample|spike)\"" "$tmp/straight/log.jsonl" | sed "s/\"ms\":[0-9.]*//") <(grep -E "\"type\":\"(eval|probe|sample|spike)\"" "$tmp/split/log.jsonl" | sed "s/\"ms\":[0-9.]*//")'
for s in 00000012 00000016; do
    check "step $s model.bin bitwise equal" 'cmp "$tmp/straight/checkpoints/step_$s/model.bin" "$tmp/split/checkpoints/step_$s/model.bin"'
    check "step $s rank_00000.bin bitwise equal (AdamW m, v, t, data, spike windows)" 'cmp "$tmp/straight/checkpoints/step_$s/rank_00000.bin" "$tmp/split/checkpoints/step_$s/rank_00000.bin"'
done
echo "exact resume: $n_steps steps ($n_skipped updates skipped by the spike detector) equal; model.bin $(stat -c %s "$tmp/straight/checkpoints/step_00000016/model.bin") bytes and rank_00000.bin $(stat -c %s "$tmp/straight/checkpoints/step_00000016/rank_00000.bin") bytes identical at steps 12 and 16"
check "log has one resume record" '[ "$(grep -c "\"type\":\"resume\"" "$tmp/split/log.jsonl")" = 1 ]'

# a finished run: nothing left to do
"$build/train_gpt" "${X[@]}" --log.run_dir="$tmp/split" --resume auto > "$tmp/again.out" 2>&1
rc=$?
check "resume of a finished run: exit 0, nothing to train" '[ "$rc" = 0 ] && grep -q "nothing left to train" "$tmp/again.out"'

# an architecture change is refused, listing every differing key; non-architecture keys accepted
"$build/train_gpt" "${X[@]}" --train.steps=20 --log.run_dir="$tmp/split" --resume auto --model.d_ff=96 --model.gate_act=silu > "$tmp/arch.out" 2>&1
rc=$?
check "architecture change: exit 1" '[ "$rc" = 1 ]'
check "architecture change: both keys listed" 'grep -q "error: --resume .*: the architecture differs from the checkpoint.s in 2 key(s): \[model\] d_ff = 96 (checkpoint: 64), \[model\] gate_act = silu (checkpoint: sigmoid)" "$tmp/arch.out"'
grep "error:" "$tmp/arch.out"
check "nothing written by the refused run" '[ ! -e "$tmp/split/checkpoints/step_00000020" ] && [ "$(ls "$tmp/split/checkpoints" | wc -l)" = 4 ]'

# damage the newest checkpoint (one flipped byte in the AdamW state): auto falls back to 12
cp -r "$tmp/split" "$tmp/dmg"
printf '\x55' | dd of="$tmp/dmg/checkpoints/step_00000016/rank_00000.bin" bs=1 seek=4000 conv=notrunc 2>/dev/null
rm -rf "$tmp/dmg/checkpoints/step_00000004" "$tmp/dmg/checkpoints/step_00000008"
"$build/train_gpt" "${X[@]}" --train.steps=16 --log.run_dir="$tmp/dmg" --checkpoint.dir="$tmp/dmg/checkpoints" --resume auto > "$tmp/dmg.out" 2>&1
rc=$?
check "damaged newest: exit 0" '[ "$rc" = 0 ]'
check "damaged newest: error line names the file" 'grep -q "error: checkpoint .$tmp/dmg/checkpoints/step_00000016/rank_00000.bin.: checksum mismatch" "$tmp/dmg.out"'
check "damaged newest: warning, falls back" 'grep -q "warning: --resume auto: skipping the damaged checkpoint $tmp/dmg/checkpoints/step_00000016" "$tmp/dmg.out" && grep -q "continuing from $tmp/dmg/checkpoints/step_00000012: step 12" "$tmp/dmg.out"'
check "damaged newest: moved aside, not deleted" '[ -d "$tmp/dmg/checkpoints/step_00000016.corrupt" ]'
check "damaged newest: steps 13..16 recomputed identically" 'diff <(steps_of "$tmp/straight/log.jsonl") <(steps_of "$tmp/dmg/log.jsonl")'
check "damaged newest: the rewritten step 16 equals the straight run" 'cmp "$tmp/straight/checkpoints/step_00000016/rank_00000.bin" "$tmp/dmg/checkpoints/step_00000016/rank_00000.bin"'
grep -E "^(error|warning)" "$tmp/dmg.out" | head -3

# --resume PATH of a damaged checkpoint: an error naming the file
"$build/train_gpt" --resume "$tmp/dmg/checkpoints/step_00000016.corrupt" --log.run_dir="$tmp/x" > "$tmp/bad.out" 2>&1
rc=$?
check "explicit damaged PATH: exit 1, names the file" '[ "$rc" = 1 ] && grep -q "step_00000016.corrupt/rank_00000.bin.: checksum mismatch" "$tmp/bad.out"'
# --resume PATH without --config takes the checkpoint's config
"$build/train_gpt" --resume "$tmp/straight/checkpoints/step_00000012" --checkpoint.dir="$tmp/fromcfg" --log.run_dir="$tmp/fromcfg" > "$tmp/path.out" 2>&1
rc=$?
check "--resume PATH without --config: runs steps 13..16 identically" '[ "$rc" = 0 ] && diff <(steps_of "$tmp/straight/log.jsonl" | tail -4) <(steps_of "$tmp/fromcfg/log.jsonl")'
# a fresh run into a directory holding checkpoints is refused (nothing overwritten)
cp "$tmp/split/config.ini" "$tmp/split_config.ini"
"$build/train_gpt" "${X[@]}" --train.lr=0.01 --log.run_dir="$tmp/split" > "$tmp/fresh.out" 2>&1
rc=$?
check "fresh run into a used checkpoint dir: exit 1" '[ "$rc" = 1 ] && grep -q "holds checkpoints of an earlier run" "$tmp/fresh.out"'
check "... the log was not truncated, the run's config.ini not rewritten" '[ "$(steps_of "$tmp/split/log.jsonl" | wc -l)" = 16 ] && cmp -s "$tmp/split/config.ini" "$tmp/split_config.ini"'

# partial RoPE ([model] rope_fraction = 0.25: 4 of head_dim 16 channels turn): the same exact resume
# (with probes and samples every 4 and 8 steps); resuming it with another fraction is refused
P=("${X[@]}" --train.steps=8 --model.rope_fraction=0.25)
"$build/train_gpt" "${P[@]}" --log.run_dir="$tmp/p_straight" > "$tmp/p1.out" 2>&1
"$build/train_gpt" "${P[@]}" --log.run_dir="$tmp/p_split" --stop-after 4 > "$tmp/p2.out" 2>&1
"$build/train_gpt" "${P[@]}" --log.run_dir="$tmp/p_split" --resume auto > "$tmp/p3.out" 2>&1
check "rope_fraction 0.25: 8 step records, eval/probe/sample records identical after a resume at 4" '[ "$(steps_of "$tmp/p_straight/log.jsonl" | wc -l)" = 8 ] && diff <(steps_of "$tmp/p_straight/log.jsonl") <(steps_of "$tmp/p_split/log.jsonl") && diff <(grep -E "\"type\":\"(eval|probe|sample)\"" "$tmp/p_straight/log.jsonl" | sed "s/\"ms\":[0-9.]*//") <(grep -E "\"type\":\"(eval|probe|sample)\"" "$tmp/p_split/log.jsonl" | sed "s/\"ms\":[0-9.]*//")'
check "rope_fraction 0.25: step 8 model.bin and rank_00000.bin bitwise equal" 'cmp "$tmp/p_straight/checkpoints/step_00000008/model.bin" "$tmp/p_split/checkpoints/step_00000008/model.bin" && cmp "$tmp/p_straight/checkpoints/step_00000008/rank_00000.bin" "$tmp/p_split/checkpoints/step_00000008/rank_00000.bin"'
"$build/train_gpt" "${P[@]}" --train.steps=12 --model.rope_fraction=0.5 --log.run_dir="$tmp/p_split" --resume auto > "$tmp/p4.out" 2>&1
check "resume with another rope_fraction: refused naming the key" 'grep -q "\[model\] rope_fraction = 0.5 (checkpoint: 0.25)" "$tmp/p4.out"'
finish
