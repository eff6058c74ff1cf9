#!/usr/bin/env bash
# tests/test_nonfinite.sh BUILD_DIR: the non-finite guard. An absurd learning rate (1e30, no
# clipping) blows the weights up after the first update, so every later gradient is NaN: each
# such step must be skipped and logged, and after [metrics] max_nonfinite of them in a row the
# run must stop with exit status 1 and a one-line error.
set -uo pipefail
build=$1
bash scripts/prepare_kjv.sh "$build/prepare" > /dev/null || exit 1
run=$(mktemp -d)
trap 'rm -rf "$run"' EXIT
"$build/train_gpt" --config configs/tiny_gated.ini --train.steps=20 --train.warmup_steps=0 \
    --train.lr=1e30 --train.grad_clip=0 --log.val_every=0 --metrics.probe_every=0 \
    --log.sample_every=0 --metrics.max_nonfinite=3 --log.run_dir="$run" > "$run/out.txt" 2> "$run/err.txt"
rc=$?
pass=0; fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1"; fi; }
check "exit status 1 (got $rc)" '[ "$rc" = 1 ]'
check "stop message" 'grep -q "error: 3 non-finite steps in a row: stopping" "$run/err.txt"'
check "each non-finite step warned as skipped" '[ "$(grep -c "update skipped" "$run/err.txt")" = 3 ]'
check "three nonfinite records, skipped" '[ "$(grep -c "\"kind\":\"nonfinite\".*\"skipped\":true" "$run/log.jsonl")" = 3 ]'
# the spike record carries the instability signals of the step (docs/metrics.md): the probe
# batch's logits under the step's weights, and the skipped update's ratios, 0 in every group
check "nonfinite records carry the signals, per layer" '[ "$(grep "\"kind\":\"nonfinite\"" "$run/log.jsonl" | grep -c "\"out_z\":.*\"layers\":\[{\"layer\":0,\"attn_logit_max\":")" = 3 ]'
check "a skipped update's ratios are 0" '[ "$(grep "\"kind\":\"nonfinite\"" "$run/log.jsonl" | grep -c "\"update_ratio_attn\":0,")" = 3 ]'
check "step records stay valid JSON (null, not nan)" '! grep -q "nan" "$run/log.jsonl"'
check "stopped at step 4" '[ "$(grep -c "\"type\":\"step\"" "$run/log.jsonl")" = 3 ]'
cat "$run/err.txt" | grep -E "warning|error" | head -4
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
