#!/usr/bin/env bash
# tests/test_bf16cpu_train.sh BUILD_DIR: training with [train] precision = bf16 on the CPU
# (train_gpt runs train_gpt_bf16: oneDNN bf16 GEMMs with fp32 accumulation where the CPU has
# bf16 units). On the KJV shards, the small gated model of tests/test_bf16_train.sh (2 layers of
# width 64, T = 64) and its MoE twin, 20 steps each:
#   - train_gpt runs train_gpt_bf16 for precision = bf16, and that one says which GEMMs it uses;
#   - the run tracks fp32 (train_gpt) within the emulation's bound: every step's loss within 0.5%
#     relative, the bound tests/test_bf16_train.sh holds the emulation to (its measured worst,
#     8.2e-4 over three ISAs, x 6.1); the emulation's own distance over the same 20 steps is
#     printed beside it, and the fast run must stay within 0.5% of the emulation's losses too;
#   - bf16 is really on: the losses are not the fp32 ones bit for bit;
#   - the step and the bf16 peak are in the run record (peak_source names the bf16 matmul);
#   - exact resume in bf16: 12 steps straight == 6 + --resume auto + 6 (step records, model.bin,
#     rank_00000.bin), and the checkpoint format is the fp32 one (model.bin the size of fp32's);
#   - an AVX2-only host (ONEDNN_MAX_CPU_ISA=AVX2 caps oneDNN, and the backend reads its cap): the
#     one line at start, then the emulation's numerics: the losses equal train_gpt_bf16emu's bit
#     for bit;
#   - precision = fp32 on train_gpt_bf16 runs train_gpt: the fp32 losses bit for bit.
set -uo pipefail
build=$1
source tests/ckpt_common.sh   # the KJV shards, $PY, $tmp (removed at exit), TINY, check, finish, steps_of
M=(--config configs/tiny_gated.ini --model.n_layer=2 --model.d_model=64 --model.n_head=4
   --model.n_kv_head=2 --model.head_dim=16 --model.d_ff=128 --model.max_seq_len=64
   --train.batch_size=4 --train.seq_len=64 --train.tokens_per_step=256 --train.warmup_steps=5
   --train.lr=3e-3 --train.steps=20 --train.threads=1 --log.log_every=1000 --log.val_every=0
   --metrics.probe_every=0 --log.sample_every=0 --checkpoint.checkpoint_every=0)
MOE=(--moe.n_expert=4 --moe.top_k=2 --moe.d_expert=64)

losses() { grep '"type":"step"' "$1" | sed 's/.*"loss":\([^,]*\),.*/\1/'; }
# the worst |b - a| / |a| of two loss columns
worst() { paste <(losses "$1") <(losses "$2") | awk '{ r = ($2 - $1) / $1; if (r < 0) r = -r; if (r > w) w = r } END { printf "%.3e\n", w }'; }

for variant in dense moe; do
    extra=(); [ "$variant" = moe ] && extra=("${MOE[@]}")
    "$build/train_gpt" "${M[@]}" "${extra[@]}" --log.run_dir="$tmp/fp32_$variant" > "$tmp/fp32_$variant.out" 2>&1 \
        || { echo "FAIL: fp32 $variant run"; cat "$tmp/fp32_$variant.out"; exit 1; }
    "$build/train_gpt_bf16emu" "${M[@]}" "${extra[@]}" --log.run_dir="$tmp/emu_$variant" > "$tmp/emu_$variant.out" 2>&1 \
        || { echo "FAIL: emulation $variant run"; cat "$tmp/emu_$variant.out"; exit 1; }
    "$build/train_gpt" "${M[@]}" "${extra[@]}" --train.precision=bf16 --log.run_dir="$tmp/bf16_$variant" > "$tmp/bf16_$variant.out" 2>&1 \
        || { echo "FAIL: bf16 $variant run"; cat "$tmp/bf16_$variant.out"; exit 1; }
    check "$variant: train_gpt ran train_gpt_bf16 for precision = bf16" 'grep -q "^precision = bf16: running .*/train_gpt_bf16$" "$tmp/bf16_$variant.out"'
    backend=$(grep -m1 '^backend:' "$tmp/bf16_$variant.out")
    echo "$variant: $backend"
    check "$variant: the backend is the bf16 one (its GEMMs named, or the emulation's line)" \
        'echo "$backend" | grep -q "cpu bf16 (oneDNN bf16 matmul" || grep -q "has no bf16 units" "$tmp/bf16_$variant.out"'
    check "$variant: the run record says bf16 and names the peak's source" \
        'grep "\"type\":\"run\"" "$tmp/bf16_$variant/log.jsonl" | grep "\"act\":\"bf16\"" | grep -q "\"peak_source\":\"measured: "'
    n=$(losses "$tmp/bf16_$variant/log.jsonl" | wc -l)
    w_fast=$(worst "$tmp/fp32_$variant/log.jsonl" "$tmp/bf16_$variant/log.jsonl")
    w_emu=$(worst "$tmp/fp32_$variant/log.jsonl" "$tmp/emu_$variant/log.jsonl")
    w_pair=$(worst "$tmp/emu_$variant/log.jsonl" "$tmp/bf16_$variant/log.jsonl")
    bitsame=$(paste <(losses "$tmp/fp32_$variant/log.jsonl") <(losses "$tmp/bf16_$variant/log.jsonl") | awk '$1 == $2' | wc -l)
    echo "$variant: $n steps; worst relative loss distance: bf16 vs fp32 $w_fast, emulation vs fp32 $w_emu, bf16 vs emulation $w_pair; $bitsame of $n bit-equal to fp32"
    check "$variant: 20 steps" '[ "$n" = 20 ] && [ "$(losses "$tmp/fp32_$variant/log.jsonl" | wc -l)" = 20 ]'
    check "$variant: bf16 within 0.5% of fp32 at every step (worst $w_fast)" 'awk -v w="$w_fast" "BEGIN { exit !(w <= 0.005) }"'
    check "$variant: bf16 within 0.5% of the emulation at every step (worst $w_pair)" 'awk -v w="$w_pair" "BEGIN { exit !(w <= 0.005) }"'
    # the learning itself, far from roundoff: the emulation drops ~25% in these 20 steps
    read -r first last <<< "$(losses "$tmp/bf16_$variant/log.jsonl" | awk 'NR == 1 { f = $1 } NR > 15 { l += $1 } END { printf "%.4f %.4f\n", f, l / 5 }')"
    check "$variant: bf16 loss falls >= 15% ($first -> $last, mean of the last 5)" 'awk -v f="$first" -v l="$last" "BEGIN { exit !(l <= 0.85 * f) }"'
    check "$variant: bf16 changes the losses ($bitsame of 20 bit-equal to fp32)" '[ "$bitsame" -lt 10 ]'
done

# the GEMM switches of kernels/cpu_bf16/matmul_bf16.c against the default dense bf16 run above (B packed
# per call, a transposed A copied inside the call): B read as it is (GATEDGPT_BF16MM_PLAIN=1), and a
# transposed A (the weight gradients) transposed once per call by oneDNN's reorder
# (GATEDGPT_BF16MM_TRANSPOSE_A=1). On avx512_bf16 the kernel, its blocking and its order of sums are the
# same, so every loss is the same bit for bit (measured); on AMX they may differ, so there the bound is
# the bf16 runs' own (0.5%)
isa=$(grep -m1 '^backend:' "$tmp/bf16_dense.out" | sed -n 's/.*oneDNN bf16 matmul \([a-z0-9_]*\),.*/\1/p')
switch_run() {   # NAME VAR=VALUE WHAT
    local name=$1 setting=$2 what=$3 w
    env "$setting" "$build/train_gpt" "${M[@]}" --train.precision=bf16 --log.run_dir="$tmp/$name" > "$tmp/$name.out" 2>&1 \
        || { echo "FAIL: $what run"; cat "$tmp/$name.out"; exit 1; }
    w=$(worst "$tmp/$name/log.jsonl" "$tmp/bf16_dense/log.jsonl")
    echo "$what vs the default ($isa): worst relative loss distance $w over $(losses "$tmp/$name/log.jsonl" | wc -l) steps"
    if [ "$isa" = avx512_bf16 ]; then
        check "$what: the 20 losses bit for bit the default's (avx512_bf16)" \
            'diff <(losses "$tmp/$name/log.jsonl") <(losses "$tmp/bf16_dense/log.jsonl") > /dev/null && [ "$(losses "$tmp/$name/log.jsonl" | wc -l)" = 20 ]'
    else
        check "$what: the 20 losses within 0.5% of the default's ($isa, worst $w)" \
            'awk -v w="$w" "BEGIN { exit !(w <= 0.005) }" && [ "$(losses "$tmp/$name/log.jsonl" | wc -l)" = 20 ]'
    fi
}
if [ -n "$isa" ]; then
    switch_run plain_dense GATEDGPT_BF16MM_PLAIN=1 "B read as it is (not packed)"
    switch_run transa_dense GATEDGPT_BF16MM_TRANSPOSE_A=1 "a transposed A transposed first"
else
    echo "GEMM switches: skipped (no bf16 units: the emulation's GEMMs run)"
fi

# the planner knows the bf16 layout: train_gpt --check with precision = bf16 plans "cpu bf16", and
# its exact lines are what the dense bf16 run above held (params = weights + master + grads; adamw;
# activations + logits + backward)
"$build/train_gpt" "${M[@]}" --train.precision=bf16 --check > "$tmp/plan.out" 2>&1
pl() { awk -v l="$1" '$1 == l { print $2 }' "$tmp/plan.out"; }
held=$(grep -m1 '^memory: the backend holds' "$tmp/bf16_dense.out" | sed -E 's/.*params ([0-9]+) \+ adamw ([0-9]+) \+ activations ([0-9]+) .*/\1 \2 \3/')
planned="$(( $(pl weights) + $(pl master) + $(pl grads) )) $(pl adamw) $(( $(pl activations) + $(pl logits) + $(pl backward) ))"
echo "plan (params adamw activations): $planned | the run held: $held"
check "planner: --check with precision = bf16 plans the cpu bf16 layout" 'grep -q "^memory plan: cpu bf16 layout" "$tmp/plan.out"'
check "planner: the bf16 plan's params, adamw and activations are what the bf16 run held" '[ -n "$held" ] && [ "$planned" = "$held" ]'

# exact resume in bf16 (the dense model, with the trainer state of ckpt_common's TINY)
X=("${TINY[@]}" --train.precision=bf16 --train.steps=12 --checkpoint.checkpoint_every=3 --checkpoint.keep_last=0)
"$build/train_gpt" "${X[@]}" --log.run_dir="$tmp/straight" > "$tmp/straight.out" 2>&1 || { echo "FAIL: straight run"; cat "$tmp/straight.out"; exit 1; }
"$build/train_gpt" "${X[@]}" --log.run_dir="$tmp/split" --stop-after 6 > "$tmp/split1.out" 2>&1 || { echo "FAIL: first half"; cat "$tmp/split1.out"; exit 1; }
"$build/train_gpt" "${X[@]}" --log.run_dir="$tmp/split" --resume auto > "$tmp/split2.out" 2>&1 || { echo "FAIL: resumed half"; cat "$tmp/split2.out"; exit 1; }
check "resume: continued from step 6" 'grep -q "step_00000006: step 6" "$tmp/split2.out"'
check "resume: every step record identical (12)" 'diff <(steps_of "$tmp/straight/log.jsonl") <(steps_of "$tmp/split/log.jsonl") > /dev/null && [ "$(steps_of "$tmp/split/log.jsonl" | wc -l)" = 12 ]'
check "resume: model.bin at step 12 identical" 'cmp -s "$tmp/straight/checkpoints/step_00000012/model.bin" "$tmp/split/checkpoints/step_00000012/model.bin"'
check "resume: rank_00000.bin at step 12 identical" 'cmp -s "$tmp/straight/checkpoints/step_00000012/rank_00000.bin" "$tmp/split/checkpoints/step_00000012/rank_00000.bin"'
# the same checkpoint format as fp32: model.bin as large as an fp32 run's
"$build/train_gpt" "${TINY[@]}" --train.steps=3 --checkpoint.checkpoint_every=3 --log.run_dir="$tmp/f3" > "$tmp/f3.out" 2>&1
check "format: bf16 model.bin the size of fp32's (fp32 master weights)" \
    '[ "$(stat -c %s "$tmp/f3/checkpoints/step_00000003/model.bin")" = "$(stat -c %s "$tmp/straight/checkpoints/step_00000003/model.bin")" ]'

# an AVX2-only host: the line, once, then the emulation's numbers bit for bit (the emulation under the same
# cap: its fp32 sgemm then sums in the same order)
A=("${TINY[@]}" --train.steps=4)
ONEDNN_MAX_CPU_ISA=AVX2 "$build/train_gpt" "${A[@]}" --train.precision=bf16 --log.run_dir="$tmp/avx2" > "$tmp/avx2.out" 2>&1 \
    || { echo "FAIL: AVX2 run"; cat "$tmp/avx2.out"; exit 1; }
ONEDNN_MAX_CPU_ISA=AVX2 "$build/train_gpt_bf16emu" "${A[@]}" --log.run_dir="$tmp/emu4" > "$tmp/emu4.out" 2>&1 || { echo "FAIL: emulation run"; cat "$tmp/emu4.out"; exit 1; }
grep 'no bf16 units' "$tmp/avx2.out"
check "AVX2: one line says there are no bf16 units and that the emulation runs" \
    '[ "$(grep -c "^precision = bf16: this CPU has no bf16 units (no avx512_bf16/amx_bf16.*): running the bf16 numerics through the emulation" "$tmp/avx2.out")" = 1 ]'
check "AVX2: the losses are the emulation's, bit for bit (4 steps)" \
    'diff <(losses "$tmp/avx2/log.jsonl") <(losses "$tmp/emu4/log.jsonl") > /dev/null && [ "$(losses "$tmp/avx2/log.jsonl" | wc -l)" = 4 ]'
# and precision = fp32 on train_gpt_bf16: train_gpt, bit for bit
"$build/train_gpt_bf16" "${A[@]}" --train.precision=fp32 --log.run_dir="$tmp/back" > "$tmp/back.out" 2>&1 || { echo "FAIL: fp32 via train_gpt_bf16"; cat "$tmp/back.out"; exit 1; }
"$build/train_gpt" "${A[@]}" --log.run_dir="$tmp/f4" > "$tmp/f4.out" 2>&1
check "train_gpt_bf16 with precision = fp32 runs train_gpt: the fp32 losses bit for bit" \
    'grep -q "^precision = fp32: running .*/train_gpt$" "$tmp/back.out" && diff <(losses "$tmp/back/log.jsonl") <(losses "$tmp/f4/log.jsonl") > /dev/null'
finish
