#!/usr/bin/env bash
# tests/test_recompute_ep.sh BUILD_DIR: activation recomputation ([train] recompute) under expert
# parallelism ([moe] expert_parallel > 1) changes memory, never the numbers.
#
# A tiny MoE (4 experts, top-2, a gated shared expert, 2 layers) trained 3 steps of 2 micro-steps
# under mpirun: expert_parallel 2 on 2 processes and 4 on 4 processes (ZeRO-1), each under
# recompute = none, selective and full. Against none's run of the same P, selective's and
# full's must give the same step records (loss and grad norm at 17 digits, timing fields
# removed) and the last checkpoint's model.bin and every rank's optimizer file (AdamW m, v of
# its shard) byte for byte, with a smaller activation arena (full < selective < none, as the
# trainer prints it). The recomputation reruns a layer's forward without the all-to-all: the
# received rows and the experts' outputs (yp) are kept (model/gpt.c, model/moe.c); a run that
# exchanged again, or read a stale shared buffer, would differ. ~15 s on 2 shared cores.
# Skips (exit 0) when mpirun is missing.
set -u
build=$(cd "$1" && pwd)
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
source tests/mpi_common.sh
mpi_require
kjv_shards
trap '[ -n "${KEEP_TMP:-}" ] || rm -rf "$TMP"' EXIT INT TERM
TINY=(--config configs/tiny_gated.ini --model.n_layer=2 --model.d_model=64 --model.n_head=4
      --model.n_kv_head=2 --model.head_dim=16 --model.d_ff=128 --model.max_seq_len=32
      --train.seq_len=32 --train.tokens_per_step=256 --train.steps=3 --train.warmup_steps=1
      --train.threads=1 --train.zero_stage=1 --log.log_every=1 --log.val_every=0 --metrics.probe_every=0
      --log.sample_every=0 --checkpoint.checkpoint_every=3
      --moe.n_expert=4 --moe.top_k=2 --moe.d_expert=64 --moe.aux_loss_coef=0.05 --moe.z_loss_coef=0.001
      --moe.n_shared_expert=1 --moe.shared_expert_gate=true)
CK=checkpoints/step_00000003
# the step records' numbers (timing fields and the ranks they name left out)
steps_of() { grep '"type":"step"' "$1" | grep -oE '"(step|loss|lr|grad_norm|skipped|moe_[a-z_]*|ep_bytes)":[^,}]*' | tr '\n' ' '; }
acts_of() { sed -n 's/^activations: \([0-9]*\) bytes.*/\1/p' "$1"; }
for P in 2 4; do
    for mode in none selective full; do
        name=p${P}_$mode
        # B x 32 tokens a process, B = 4 / P: 2 micro-steps a step (B * T * P * 2 = 256)
        timeout 120 mpirun -np $P --oversubscribe ${ONEDNN_MAX_CPU_ISA:+-x ONEDNN_MAX_CPU_ISA} "$build/train_gpt" \
            "${TINY[@]}" --train.batch_size=$((4 / P)) --moe.expert_parallel=$P \
            --train.recompute=$mode --log.run_dir="$TMP/$name" >"$TMP/$name.out" 2>&1
        rc=$?
        check "P=$P $mode: exit 0 (rc $rc; $(grep -m1 error: "$TMP/$name.out"))" [ $rc -eq 0 ]
    done
    n=p${P}_none
    check "P=$P none: 3 step records" [ "$(grep -c '"type":"step"' "$TMP/$n/log.jsonl")" -eq 3 ]
    for mode in selective full; do
        r=p${P}_$mode
        check "P=$P $mode: step records equal none's" cmp -s <(steps_of "$TMP/$n/log.jsonl") <(steps_of "$TMP/$r/log.jsonl")
        check "P=$P $mode: model.bin byte for byte" cmp -s "$TMP/$n/$CK/model.bin" "$TMP/$r/$CK/model.bin"
        for f in "$TMP/$n/$CK"/rank_*.bin; do
            check "P=$P $mode: $(basename "$f") byte for byte" cmp -s "$f" "$TMP/$r/$CK/$(basename "$f")"
        done
    done
    check "P=$P: one optimizer file per process" [ "$(ls "$TMP/$n/$CK"/rank_*.bin | wc -l)" -eq $P ]
    a=$(acts_of "$TMP/p${P}_none.out"); b=$(acts_of "$TMP/p${P}_selective.out"); c=$(acts_of "$TMP/p${P}_full.out")
    check "P=$P: activations full $c < selective $b" [ "${c:-0}" -lt "${b:-0}" ]
    check "P=$P: activations selective $b < none $a" [ "${b:-0}" -lt "${a:-0}" ]
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
