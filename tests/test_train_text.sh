#!/usr/bin/env bash
# tests/test_train_text.sh BUILD_DIR: a short run of the trainer on real text (the KJV Bible in
# its 8192-token BPE) lowers the validation loss, writes its run directory, prints its step lines
# and a decoded sample.
set -euo pipefail
build=$1
bash scripts/prepare_kjv.sh "$build/prepare" > /dev/null
run=$(mktemp -d)
trap 'rm -rf "$run"' EXIT
"$build/train_gpt" --config configs/tiny_gated.ini --train.steps=60 --train.warmup_steps=5 \
    --log.val_every=30 --log.val_batches=4 --log.run_dir="$run" --log.log_every=10 \
    --log.sample_every=60 --log.sample_tokens=16 | tee "$run/out.txt"
grep -q "^step    60/60 | loss" "$run/out.txt" || { echo "FAIL: no step line for step 60"; exit 1; }
test -s "$run/config.ini" || { echo "FAIL: resolved config not saved in the run dir"; exit 1; }
first=$(grep '"type":"eval"' "$run/log.jsonl" | head -1 | sed 's/.*"val_loss":\([0-9.]*\).*/\1/')
last=$(grep '"type":"eval"' "$run/log.jsonl" | tail -1 | sed 's/.*"val_loss":\([0-9.]*\).*/\1/')
steps=$(grep -c '"type":"step"' "$run/log.jsonl")
echo "val loss: $first (untrained) -> $last after $steps steps"
[ "$steps" = 60 ] || { echo "FAIL: $steps step records in log.jsonl, want 60"; exit 1; }
grep -q '^---- sample at step 60' "$run/out.txt" || { echo "FAIL: no sample printed"; exit 1; }
grep -q '"type":"sample"' "$run/log.jsonl" || { echo "FAIL: no sample record in log.jsonl"; exit 1; }
# MFU's peak says where it comes from (the CPU measures its FMA peak), on the console and in the run record
grep -Eq '^backend: .* \| peak [0-9.]+ GFLOP/s \((measured|nominal): [^)]+' "$run/out.txt" || { echo "FAIL: the backend line does not name the peak's source"; exit 1; }
grep -Eq '"type":"run",.*"peak_flops":[0-9.e+]+,"peak_source":"(measured|nominal): [^"]+"}$' "$run/log.jsonl" ||
    { echo "FAIL: no peak_source in the run record"; grep '"type":"run"' "$run/log.jsonl"; exit 1; }
probes=$(grep -c '"type":"probe"' "$run/log.jsonl")
[ "$probes" = 3 ] || { echo "FAIL: $probes probe records, want 3 (steps 0, 50, 60)"; exit 1; }
grep -q '"type":"probe","step":60,.*"layers":\[{"layer":0,"f_attn":' "$run/log.jsonl" || { echo "FAIL: probe record malformed"; exit 1; }
# untrained: about ln(8192) = 9.01 nats; require a drop of at least 1.5 nats (a learning threshold,
# not roundoff: measured 9.046 -> 5.687, a 3.36-nat drop, bit-identical under AVX2, AVX and SSE41)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1.5) }' || { echo "FAIL: val loss did not fall enough"; exit 1; }
# cuDNN's attention exists on the CUDA backend only: the CPU trainer refuses it, naming the key
if "$build/train_gpt" --config configs/tiny_gated.ini --train.steps=1 --train.warmup_steps=0 --train.attn_impl=cudnn \
        --log.run_dir="$run/cudnn" > "$run/cudnn.out" 2>&1; then
    echo "FAIL: attn_impl = cudnn accepted by the CPU backend"; exit 1
fi
grep -q "error: configs/tiny_gated.ini: \[train\] attn_impl = cudnn needs the CUDA backend" "$run/cudnn.out" ||
    { echo "FAIL: attn_impl = cudnn on the CPU: message"; cat "$run/cudnn.out"; exit 1; }
echo "2 passed, 0 failed"
