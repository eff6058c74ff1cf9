#!/usr/bin/env bash
# tests/test_gpu_train.sh BUILD_DIR: 20 training steps of train_gpt_cuda against train_gpt (the
# CPU backend) with the same config, seed and data, for a Qwen-style model with no gate, the
# headwise and the elementwise gate, and a GPT-2-style model with the elementwise gate. Every
# step's loss must track the CPU run's; the step-0 probe (F-Attn, M-Act, gate mean) must agree.
# The corpus is the repository's own Markdown (BPE 512 via `prepare`): no download, no package.
# Without a GPU it prints "skipped: no CUDA device" and exits 0.
#
# Tolerances (relative): step 1 loss 1e-4 (fp32 on both sides, other summation orders), every
# step 2e-3 (20 AdamW steps amplify rounding differences), step-0 probe 1e-3; with
# GATEDGPT_CUDA_TF32=1, 1e-2 throughout. Written before any GPU run.
set -euo pipefail
build=$1
[ -x "$build/tests/test_gpu_ops" ] || { echo "FAIL: $build/tests/test_gpu_ops not built"; exit 1; }
if ! "$build/tests/test_gpu_ops" --has-device; then
    echo "skipped: no CUDA device"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/prepare" --train README.md docs/*.md bench/README.md --val tests/reference/README.md \
    --out "$tmp/data" --vocab-size 512 --quiet > /dev/null

tol1=1e-4; tol=2e-3; tolp=1e-3
if [ "${GATEDGPT_CUDA_TF32:-0}" != 0 ]; then tol1=1e-2; tol=1e-2; tolp=1e-2; fi
pass=0; fail=0

# run NAME CONFIG [overrides...]: both backends, then compare their log.jsonl
run() {
    local name=$1 cfg=$2; shift 2
    local common=(--config "$cfg" --model.vocab_size=512 --data.train_glob="$tmp/data/train_*.bin"
                  --data.val_glob= --data.tokenizer="$tmp/data/tokenizer.bin" --train.steps=20
                  --train.batch_size=4 --train.seq_len=64
                  --train.warmup_steps=5 --log.val_every=0 --log.log_every=5 --log.sample_every=20
                  --log.sample_tokens=8 --metrics.probe_every=20 "$@")
    "$build/train_gpt" "${common[@]}" --log.run_dir="$tmp/$name.cpu" > "$tmp/$name.cpu.out"
    "$build/train_gpt_cuda" "${common[@]}" --log.run_dir="$tmp/$name.gpu" > "$tmp/$name.gpu.out" || {
        echo "FAIL: $name: train_gpt_cuda failed"; tail -5 "$tmp/$name.gpu.out"; fail=$((fail + 1)); return; }
    grep '^backend' "$tmp/$name.gpu.out" | head -1
    # step lines -> "step loss"; probe at step 0 -> its three means
    local steps
    steps=$(paste <(grep '"type":"step"' "$tmp/$name.cpu/log.jsonl" | sed 's/.*"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/') \
                  <(grep '"type":"step"' "$tmp/$name.gpu/log.jsonl" | sed 's/.*"loss":\([^,]*\),.*/\1/'))
    if echo "$steps" | awk -v t1="$tol1" -v t="$tol" -v name="$name" '
        function rel(a, b) { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; return m > 0 ? d / m : d }
        { r = rel($3, $2); if (r > worst) worst = r
          if (($1 == 1 && r > t1) || r > t || $3 != $3 + 0) { printf "FAIL: %s step %d: loss %s (GPU) vs %s (CPU), rel %.2e\n", name, $1, $3, $2, r; bad = 1 } }
        END { if (NR != 20) { printf "FAIL: %s: %d step records, want 20\n", name, NR; bad = 1 }
              printf "  %-28s 20 steps, worst loss rel err %.2e\n", name, worst; exit bad }'; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
    fi
    local pc pg
    pc=$(grep '"type":"probe","step":0,' "$tmp/$name.cpu/log.jsonl" | sed 's/.*"f_attn_mean":\([^,]*\),"m_act_mean":\([^,]*\),"gate_mean":\([^,]*\),.*/\1 \2 \3/')
    pg=$(grep '"type":"probe","step":0,' "$tmp/$name.gpu/log.jsonl" | sed 's/.*"f_attn_mean":\([^,]*\),"m_act_mean":\([^,]*\),"gate_mean":\([^,]*\),.*/\1 \2 \3/')
    if echo "$pc $pg" | awk -v t="$tolp" -v name="$name" '
        function rel(a, b) { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; return m > 0 ? d / m : d }
        { bad = 0; for (i = 1; i <= 3; i++) { if ($i == "null" && $(i + 3) == "null") continue
              r = rel($(i + 3), $i); if (r > t || $(i + 3) == "null") { printf "FAIL: %s probe field %d: %s (GPU) vs %s (CPU)\n", name, i, $(i + 3), $i; bad = 1 } }
          printf "  %-28s step-0 probe f_attn %s/%s m_act %s/%s gate %s/%s (GPU/CPU)\n", name, $4, $1, $5, $2, $6, $3; exit bad }'; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
    fi
}

run qwen_none configs/tiny_baseline.ini
run qwen_headwise configs/tiny_headwise.ini
run qwen_elementwise configs/tiny_gated.ini
run gpt2_elementwise configs/tiny_gated.ini --model.pos=learned --model.norm=layernorm --model.qk_norm=false \
    --model.mlp=gelu --model.n_kv_head=4
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
