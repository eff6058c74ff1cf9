#!/usr/bin/env bash
# tests/test_bf16_train.sh BUILD_DIR: training with bf16 activation storage, in the CPU emulation
# (train_gpt_bf16emu: what the CUDA bf16 build computes). On the KJV shards, a small gated model
# (elementwise gate, 2 layers of width 64, T = 64) and its MoE twin:
#   - the loss falls (last 5 steps' mean at least 15% below the first step's);
#   - it tracks the fp32 run (train_gpt): every step's loss within 0.5% relative (measured over
#     ONEDNN_MAX_CPU_ISA = AVX2 / AVX / SSE41: dense 1.6e-4 / 1.3e-4 / 1.9e-4, MoE 5.1e-4 / 7.4e-4 /
#     8.2e-4: 6.1x margin over the worst);
#   - bf16 is really on: the losses are not the fp32 ones bit for bit;
#   - exact resume: 12 steps straight == 6 + --resume auto + 6 (step records, model.bin,
#     rank_00000.bin): the weights' stochastic rounding is seeded by the step, so a resumed
#     run rounds as the uninterrupted one did;
#   - 2 processes under mpirun: ZeRO-1 == ZeRO-0 bit for bit (the copy is refreshed after the
#     parameters are all-gathered): the step-10 checkpoints' model.bin byte for byte, the AdamW
#     moments byte for byte (ZeRO-1's shards reassembled in rank order against ZeRO-0's full
#     copies, and every rank's other state: tests/compare_ckpt.py adam), the logged losses equal.
set -uo pipefail
build=$1
source tests/ckpt_common.sh   # the KJV shards, $PY, $tmp (removed at exit)
M=(--config configs/tiny_gated.ini --model.n_layer=2 --model.d_model=64 --model.n_head=4
   --model.n_kv_head=2 --model.head_dim=16 --model.d_ff=128 --model.max_seq_len=64
   --train.batch_size=4 --train.seq_len=64 --train.tokens_per_step=256 --train.warmup_steps=5
   --train.lr=3e-3 --train.steps=40 --train.threads=1 --log.log_every=1000 --log.val_every=0
   --metrics.probe_every=20 --log.sample_every=0 --checkpoint.checkpoint_every=0)
MOE=(--moe.n_expert=4 --moe.top_k=2 --moe.d_expert=64)

# losses of a log, one per line
losses() { grep '"type":"step"' "$1" | sed 's/.*"loss":\([^,]*\),.*/\1/'; }

for variant in dense moe; do
    extra=(); [ "$variant" = moe ] && extra=("${MOE[@]}")
    "$build/train_gpt" "${M[@]}" "${extra[@]}" --log.run_dir="$tmp/fp32_$variant" > "$tmp/fp32_$variant.out" 2>&1 \
        || { echo "FAIL: fp32 $variant run"; cat "$tmp/fp32_$variant.out"; exit 1; }
    "$build/train_gpt_bf16emu" "${M[@]}" "${extra[@]}" --log.run_dir="$tmp/bf16_$variant" > "$tmp/bf16_$variant.out" 2>&1 \
        || { echo "FAIL: bf16 $variant run"; cat "$tmp/bf16_$variant.out"; exit 1; }
    check "$variant: the bf16 run says so" 'grep -q "bf16-emulation" "$tmp/bf16_$variant.out"'
    check "$variant: the logs' run records name the storage" \
        'grep -q "\"type\":\"run\".*\"act\":\"bf16\"" "$tmp/bf16_$variant/log.jsonl" && grep -q "\"type\":\"run\".*\"act\":\"fp32\"" "$tmp/fp32_$variant/log.jsonl"'
    paste <(losses "$tmp/fp32_$variant/log.jsonl") <(losses "$tmp/bf16_$variant/log.jsonl") > "$tmp/pair_$variant.txt"
    read -r n worst first last5 bitsame <<< "$(awk '{ r = ($2 - $1) / $1; if (r < 0) r = -r; if (r > w) w = r;
        if (NR == 1) f = $2; if (NR > 35) l += $2; if ($1 == $2) s++ }
        END { printf "%d %.3e %.4f %.4f %d\n", NR, w, f, l / 5, s }' "$tmp/pair_$variant.txt")"
    echo "$variant: $n steps, worst |bf16 - fp32| / fp32 loss $worst, bf16 loss $first -> $last5 (mean of the last 5), $bitsame steps bit-equal to fp32"
    check "$variant: 40 steps in both runs" '[ "$(losses "$tmp/fp32_$variant/log.jsonl" | wc -l)" = 40 ] && [ "$(losses "$tmp/bf16_$variant/log.jsonl" | wc -l)" = 40 ] && [ "$n" = 40 ]'
    # 0.005: measured max 8.2e-4 (MoE, SSE41) over three ISAs, 6.1x (header)
    check "$variant: bf16 loss within 0.5% of fp32 at every step (worst $worst)" 'awk -v w="$worst" "BEGIN { exit !(w <= 0.005) }"'
    # a learning threshold, not roundoff: measured drops 33.1% (dense), 32.7% (MoE) on all three ISAs
    # (last-5 means 6.022 / 6.057 from 9.002): the 15% line (7.65) is 1.6 nats away, >1000x the ISA spread (6e-4)
    check "$variant: bf16 loss falls >= 15% ($first -> $last5)" 'awk -v f="$first" -v l="$last5" "BEGIN { exit !(l <= 0.85 * f) }"'
    # bf16 rounding (2^-9 per activation) makes an fp32-equal loss a coincidence: measured 0-1 of 40
    check "$variant: bf16 storage changes the losses (only $bitsame of 40 bit-equal)" '[ "$bitsame" -lt 20 ]'
done

# exact resume with bf16 storage (the dense model, with the trainer state of ckpt_common's TINY)
X=("${TINY[@]}" --train.steps=12 --checkpoint.checkpoint_every=3 --checkpoint.keep_last=0)
"$build/train_gpt_bf16emu" "${X[@]}" --log.run_dir="$tmp/straight" > "$tmp/straight.out" 2>&1 || { echo "FAIL: straight run"; cat "$tmp/straight.out"; exit 1; }
"$build/train_gpt_bf16emu" "${X[@]}" --log.run_dir="$tmp/split" --stop-after 6 > "$tmp/split1.out" 2>&1 || { echo "FAIL: first half"; cat "$tmp/split1.out"; exit 1; }
"$build/train_gpt_bf16emu" "${X[@]}" --log.run_dir="$tmp/split" --resume auto > "$tmp/split2.out" 2>&1 || { echo "FAIL: resumed half"; cat "$tmp/split2.out"; exit 1; }
check "resume: continued from step 6" 'grep -q "step_00000006: step 6" "$tmp/split2.out"'
check "resume: every step record identical" 'diff <(steps_of "$tmp/straight/log.jsonl") <(steps_of "$tmp/split/log.jsonl") > /dev/null'
check "resume: model.bin at step 12 identical" 'cmp -s "$tmp/straight/checkpoints/step_00000012/model.bin" "$tmp/split/checkpoints/step_00000012/model.bin"'
check "resume: rank_00000.bin at step 12 identical" 'cmp -s "$tmp/straight/checkpoints/step_00000012/rank_00000.bin" "$tmp/split/checkpoints/step_00000012/rank_00000.bin"'

# ZeRO-1 with bf16 storage: each process updates its shard, the parameters are all-gathered,
# and only then is the weights' bf16 copy refreshed (at the next forward): the same bits as
# ZeRO-0 (2 processes), in the weights and in the AdamW state of the step-10 checkpoints
if command -v mpirun > /dev/null && ldd "$build/train_gpt_bf16emu" | grep -q libmpi; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
        Z=("${TINY[@]}" --train.steps=10 --checkpoint.checkpoint_every=10)
    zck() { echo "$tmp/$1/checkpoints/step_00000010"; }
    mpirun -np 2 "$build/train_gpt_bf16emu" "${Z[@]}" --log.run_dir="$tmp/z0" > "$tmp/z0.out" 2>&1
    check "2 processes, ZeRO-0, bf16: the run finished with its step-10 checkpoint" '[ -f "$(zck z0)/DONE" ] || { tail -5 "$tmp/z0.out"; false; }'
    mpirun -np 2 "$build/train_gpt_bf16emu" "${Z[@]}" --train.zero_stage=1 --log.run_dir="$tmp/z1" > "$tmp/z1.out" 2>&1
    check "2 processes, ZeRO-1, bf16: the run finished with its step-10 checkpoint" '[ -f "$(zck z1)/DONE" ] || { tail -5 "$tmp/z1.out"; false; }'
    check "2 processes, bf16: ZeRO-1 model.bin == ZeRO-0, byte for byte" 'cmp "$(zck z1)/model.bin" "$(zck z0)/model.bin"'
    "$PY" tests/compare_ckpt.py adam "$(zck z1)" "$(zck z0)" > "$tmp/z.adam" 2>&1
    rc=$?
    echo "2 processes, bf16, ZeRO-1 vs ZeRO-0: $(cat "$tmp/z.adam")"
    check "2 processes, bf16: ZeRO-1 AdamW moments and rank state == ZeRO-0, byte for byte" '[ "$rc" = 0 ]'
    check "2 processes, bf16: ZeRO-1 logged losses == ZeRO-0, 10 steps" \
        'cmp -s <(steps_of "$tmp/z0/log.jsonl" | sed "s/,\"comm_ms\":[^,}]*//") <(steps_of "$tmp/z1/log.jsonl" | sed "s/,\"comm_ms\":[^,}]*//") && [ "$(steps_of "$tmp/z1/log.jsonl" | wc -l)" = 10 ]'
else
    echo "ZeRO-1 with bf16 storage: skipped (no mpirun or no MPI build)"
fi
finish
