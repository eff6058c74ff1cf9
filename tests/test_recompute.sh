#!/usr/bin/env bash
# tests/test_recompute.sh BUILD_DIR [cpu|cudaemu]: activation recomputation ([train] recompute,
# model/gpt.c "Activation recomputation") changes memory, never the numbers.
#
# For each model variant, the same short run under recompute = none, selective and full: 4
# optimizer steps of 2 micro-steps (gradient accumulation), B 2 x T 32, with a probe every 2
# steps (it reads every layer's tensors after a forward: under full they are recomputed first),
# a validation loss every 2, a sample at step 4 (KV-cache decoding on the same model) and a
# checkpoint every 2. Against none's run, selective's and full's must give
#   - the same step records (loss and grad norm at 17 digits; timing fields removed),
#   - the same probe, eval and sample records (timing fields removed),
#   - the last checkpoint's model.bin and optimizer state (AdamW m, v, the data position:
#     rank_00000.bin) byte for byte,
# and a smaller activation arena: bytes(full) < bytes(selective) < bytes(none), as the trainer
# prints them (gpt_acts_bytes; tests/test_kv_cache.c checks it equals what is allocated).
# Bit identity is the bar, not a tolerance: the recomputation runs the same ops on the same
# inputs in the same order, so anything but equal bytes is a bug (a stale shared buffer, an op
# skipped, the routing recomputed or its statistics counted twice).
#
# Variants (each a different set of tensors the modes drop or share):
#   dense      tiny_gated: SwiGLU, RMSNorm, qk-norm, GQA, the elementwise gate at the SDPA output
#   gpt2       learned positions, LayerNorm (mean + rstd), GELU (fused in the GEMM: kept by
#              selective), the headwise gate on V (yg is y)
#   moe        tiny_moe_gated: every layer MoE, 8 experts top-2, dropless
#   moe_cap    capacity-limited routing (capacity_factor 1: slots dropped), the sigmoid router,
#              a gated shared expert, GELU experts, MoE every 2nd layer (dense and MoE layers
#              share one recompute set)
#   hybrid     tiny_hybrid_gated: 3 Gated DeltaNet layers + 1 attention layer
#   hybrid_moe the hybrid with MoE every 2nd layer: four kinds of layer in one model
# cpu: every variant on train_gpt (fp32), gpt2 and moe_cap also on train_gpt_bf16emu (bf16
# storage, the CPU emulation of the CUDA bf16 build), and a run resumed across modes (none's
# step-2 checkpoint continued under full: its step 4 equals none's byte for byte), and moe_cap
# under mpirun with 2 processes and ZeRO-1, none against full (the expert counts' reduction over
# processes is not run again). ~30 s.
# cudaemu: the CUDA backend's kernels on the CUDA emulator (tests/cudaemu): moe_cap and
# hybrid_moe on train_gpt_cudaemu (fp32), gpt2 and moe on train_gpt_cudaemu_bf16 (bf16 storage:
# the GELU epilogue, the gate from the unrounded y), 2 steps each without probe, evaluation or
# sample (the emulator runs each GPU thread on the CPU: ~1 s a micro-step). ~1 min.
# The corpus is the repository's own Markdown (BPE 512 via `prepare`), as tests/test_gpu_train.sh.
set -u
build=$1
where=${2:-cpu}
tmp=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
"$build/prepare" --train README.md docs/*.md bench/README.md --val tests/reference/README.md \
    --out "$tmp/data" --vocab-size 512 --quiet > /dev/null || { echo "FAIL: prepare"; exit 1; }

pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# cpu: 4 steps with probes, evaluations and a sample; cudaemu: 2 steps, no probe, evaluation or
# sample (the emulator takes ~1 s a micro-step; the model code they run is the CPU runs')
if [ "$where" = cpu ]; then
    S=4; NP=3; NE=3; NSM=1
    EXTRA=(--log.val_every=2 --log.val_batches=1 --log.sample_every=4 --log.sample_tokens=8 --metrics.probe_every=2)
else
    S=2; NP=0; NE=0; NSM=0
    EXTRA=(--log.val_every=0 --log.sample_every=0 --metrics.probe_every=0)
fi
CK=$(printf 'step_%08d' "$S")   # the last checkpoint
COMMON=(--model.vocab_size=512 --data.train_glob="$tmp/data/train_*.bin" --data.val_glob="$tmp/data/val_*.bin"
        --data.tokenizer="$tmp/data/tokenizer.bin" --train.steps=$S --train.warmup_steps=1 --train.batch_size=2
        --train.seq_len=32 --train.tokens_per_step=128 --train.threads=1 --log.log_every=1
        --checkpoint.checkpoint_every=2 "${EXTRA[@]}")
GPT2=(--model.pos=learned --model.norm=layernorm --model.qk_norm=false --model.mlp=gelu --model.n_kv_head=4
      --model.attn_gate=headwise --model.gate_position=value)
MOE_CAP=(--moe.capacity_factor=1 --moe.router=sigmoid_topk --moe.n_shared_expert=1 --moe.shared_expert_gate=true
         --model.mlp=gelu --moe.moe_every=2)
HYB_MOE=(--moe.n_expert=4 --moe.top_k=2 --moe.d_expert=192 --moe.moe_every=2)

# The step records without the timing fields (as tests/ckpt_common.sh's steps_of); the other
# records a run writes (probe, eval, sample) with every timing field removed.
steps_of() { grep '"type":"step"' "$1" | sed -E 's/"(ms|tokens_per_s|mfu|elapsed_s|eta_s)":[^,]*,//g'; }
others_of() { grep -E '"type":"(probe|eval|sample)"' "$1" | sed -E 's/"(ms|tokens_per_s|mfu)":[^,}]*,?//g'; }
acts_of() { sed -n 's/^activations: \([0-9]*\) bytes.*/\1/p' "$1"; }

# variant NAME BIN CONFIG [overrides...]: the three modes, each compared with none
variant() {
    local name=$1 bin=$2 cfg=$3; shift 3
    local mode d0="$tmp/$name.none" t0
    t0=$(date +%s%N)
    for mode in none selective full; do
        if ! "$build/$bin" --config "$cfg" "${COMMON[@]}" "$@" --train.recompute=$mode \
                --log.run_dir="$tmp/$name.$mode" > "$tmp/$name.$mode.out" 2>&1; then
            bad "$name: $bin with recompute = $mode failed"; tail -n 5 "$tmp/$name.$mode.out"; return
        fi
    done
    # none's run has the records the comparisons need (else they would pass on empty files)
    local ns np ne nsm
    ns=$(steps_of "$d0/log.jsonl" | wc -l)
    np=$(grep -c '"type":"probe"' "$d0/log.jsonl"); ne=$(grep -c '"type":"eval"' "$d0/log.jsonl")
    nsm=$(grep -c '"type":"sample"' "$d0/log.jsonl")
    if [ "$ns" = "$S" ] && [ "$np" = "$NP" ] && [ "$ne" = "$NE" ] && [ "$nsm" = "$NSM" ] &&
       [ -s "$d0/checkpoints/$CK/model.bin" ] && [ -s "$d0/checkpoints/$CK/rank_00000.bin" ]; then ok
    else bad "$name: none's run lacks records or its checkpoint ($ns steps, $np probes, $ne evals, $nsm samples)"; fi
    for mode in selective full; do
        local d="$tmp/$name.$mode"
        if [ "$(steps_of "$d/log.jsonl")" = "$(steps_of "$d0/log.jsonl")" ]; then ok
        else bad "$name: $mode's step records differ from none's:"; diff <(steps_of "$d0/log.jsonl") <(steps_of "$d/log.jsonl") | head -n 4; fi
        if [ "$(others_of "$d/log.jsonl")" = "$(others_of "$d0/log.jsonl")" ]; then ok
        else bad "$name: $mode's probe/eval/sample records differ from none's"; fi
        local f
        for f in model.bin rank_00000.bin; do
            if [ -s "$d/checkpoints/$CK/$f" ] && cmp -s "$d0/checkpoints/$CK/$f" "$d/checkpoints/$CK/$f"; then ok
            else bad "$name: $mode's $CK/$f differs from none's"; fi
        done
    done
    local a0 a1 a2
    a0=$(acts_of "$tmp/$name.none.out"); a1=$(acts_of "$tmp/$name.selective.out"); a2=$(acts_of "$tmp/$name.full.out")
    if [ -n "$a0" ] && [ -n "$a1" ] && [ -n "$a2" ] && [ "$a2" -lt "$a1" ] && [ "$a1" -lt "$a0" ]; then ok
    else bad "$name: activation bytes not full < selective < none: $a2, $a1, $a0"; fi
    local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    printf '  %-14s %-24s activations none %8s, selective %8s, full %8s bytes (%d.%01d s)\n' "$name" "$bin" \
        "$a0" "$a1" "$a2" $((ms / 1000)) $((ms % 1000 / 100))
}

if [ "$where" = cpu ]; then
    variant dense train_gpt configs/tiny_gated.ini
    variant gpt2 train_gpt configs/tiny_gated.ini "${GPT2[@]}"
    variant moe train_gpt configs/tiny_moe_gated.ini
    variant moe_cap train_gpt configs/tiny_moe_gated.ini "${MOE_CAP[@]}"
    variant hybrid train_gpt configs/tiny_hybrid_gated.ini
    variant hybrid_moe train_gpt configs/tiny_hybrid_gated.ini "${HYB_MOE[@]}"
    variant gpt2_bf16 train_gpt_bf16emu configs/tiny_gated.ini "${GPT2[@]}"
    variant moe_cap_bf16 train_gpt_bf16emu configs/tiny_moe_gated.ini "${MOE_CAP[@]}"

    # the mode may change on resume (a free key, train/resume.c): none's step-2 checkpoint
    # continued under full gives none's step 4
    d0="$tmp/moe_cap.none"
    if "$build/train_gpt" --resume "$d0/checkpoints/step_00000002" --train.recompute=full \
            --log.run_dir="$tmp/resumed" --checkpoint.dir="$tmp/resumed/ck" > "$tmp/resumed.out" 2>&1; then
        if grep -q '^resume: \[train\] recompute = full (checkpoint: none): accepted' "$tmp/resumed.out"; then ok
        else bad "resume: the changed recompute mode was not reported as accepted"; fi
        if [ "$(steps_of "$tmp/resumed/log.jsonl")" = "$(steps_of "$d0/log.jsonl" | tail -n 2)" ] &&
           [ "$(steps_of "$tmp/resumed/log.jsonl" | wc -l)" = 2 ]; then ok
        else bad "resume: steps 3-4 under full differ from none's"; fi
        for f in model.bin rank_00000.bin; do
            if cmp -s "$d0/checkpoints/step_00000004/$f" "$tmp/resumed/ck/step_00000004/$f"; then ok
            else bad "resume: the step-4 $f under full differs from none's"; fi
        done
    else
        bad "resume of moe_cap's step-2 checkpoint under recompute = full failed"; tail -n 5 "$tmp/resumed.out"
    fi

    # 2 processes (MPI, ZeRO-1): each MoE layer's expert counts are summed over the processes in
    # the forward (moe_reduce, a collective); the recomputation must not run it again. none and
    # full: the same step records (comm_ms, a timing, removed) and every checkpoint file
    if command -v mpirun > /dev/null 2>&1; then
        for mode in none full; do
            env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
                mpirun -np 2 --oversubscribe "$build/train_gpt" --config configs/tiny_moe_gated.ini "${COMMON[@]}" \
                "${MOE_CAP[@]}" --train.tokens_per_step=256 --train.zero_stage=1 --train.recompute=$mode \
                --log.run_dir="$tmp/mpi.$mode" > "$tmp/mpi.$mode.out" 2>&1 || { bad "mpirun, recompute = $mode, failed"; tail -n 5 "$tmp/mpi.$mode.out"; }
        done
        mpi_steps() { steps_of "$1" | sed -E 's/,"(comm_ms|compute_ms_[a-z]+|rank_slowest|rank_fastest)":[^,}]*//g'; }
        if [ "$(mpi_steps "$tmp/mpi.none/log.jsonl" | wc -l)" = "$S" ] &&
           [ "$(mpi_steps "$tmp/mpi.full/log.jsonl")" = "$(mpi_steps "$tmp/mpi.none/log.jsonl")" ]; then ok
        else bad "2 processes: full's step records differ from none's (or are missing)"; fi
        for f in model.bin rank_00000.bin rank_00001.bin; do
            if [ -s "$tmp/mpi.none/checkpoints/$CK/$f" ] && cmp -s "$tmp/mpi.none/checkpoints/$CK/$f" "$tmp/mpi.full/checkpoints/$CK/$f"; then ok
            else bad "2 processes: full's $CK/$f differs from none's"; fi
        done
        echo "  2 processes (mpirun, ZeRO-1), moe_cap: none and full identical"
    else
        echo "  (no mpirun: the 2-process comparison is skipped)"
    fi
else
    variant moe_cap train_gpt_cudaemu configs/tiny_moe_gated.ini "${MOE_CAP[@]}"
    variant hybrid_moe train_gpt_cudaemu configs/tiny_hybrid_gated.ini "${HYB_MOE[@]}"
    variant gpt2_bf16 train_gpt_cudaemu_bf16 configs/tiny_gated.ini "${GPT2[@]}"
    variant moe_bf16 train_gpt_cudaemu_bf16 configs/tiny_moe_gated.ini
fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
