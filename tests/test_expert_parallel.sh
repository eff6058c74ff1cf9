#!/usr/bin/env bash
# tests/test_expert_parallel.sh BUILD_DIR: expert parallelism under mpirun ([moe] expert_parallel
# = P; docs/distributed.md, "Expert parallelism"). A tiny MoE (2 layers, 4 experts, top-2) on the
# KJV shards, 512 tokens per step, 6 steps, one OpenMP thread per process:
#   - dropless routing (softmax router without a shared expert; sigmoid router with a gated shared
#     expert): P = 2 over 2 processes, P = 2 and P = 4 over 4 processes against 1 process on the
#     same global batch. Bounds: docs/distributed.md "N processes vs 1 process" (the MoE pair):
#     losses and gradient norms per step within 1e-6 relative; parameters per tensor within 3e-4
#     of max|b| and 1e-5 rms. Expert parallelism changes only which process sums each expert's
#     rows (one GEMM over the rows of every process instead of one per process, added by the
#     reduce-scatter), which is the same kind of difference as data parallelism's.
#   - capacity-limited routing (capacity_factor 1: slots dropped): each process routes its own
#     tokens with the capacity of its own micro-batch, as data parallelism does, so the drops
#     depend on the process count; P = 2 and P = 4 are held against data parallelism (P = 1) on
#     the same process count (the same routing and drops) to the same bounds, and the drops
#     are checked to happen.
#   - the routing statistics are those of data parallelism: the logged moe_aux, moe_z,
#     moe_max_load and moe_dropped of P = 2 and 4 equal those of P = 1 on as many processes
#     (1e-6 relative: the routing is the same, the values differ by the weights' roundoff), and
#     moe_max_load (from the expert counts summed over all processes) equals 1 process's.
#   - the storage is sharded: each process holds the dense parameters and n_expert / P experts
#     of each MoE layer (the start line's floats against the arithmetic of the config, and their
#     sum against the whole model in the 1-process model.bin);
#   - 2 micro-steps a step with the gradients reduced layer by layer (GATEDGPT_DIST_OVERLAP),
#     evaluations, probes and samples (rank 0 with the other members of its group, which hold
#     the experts it lacks): P = 2 vs data parallelism on 2, same bounds, the validation losses
#     within 1e-6;
#   - ZeRO-1 under P = 2 trains bit for bit like ZeRO-0 (losses, model.bin), on 2 processes and
#     on 4 (there the expert shards' AdamW state is cut between 2 replicas);
#   - gatedgpt_ckpt inspects and evaluates P = 2 on 4's ZeRO-1 checkpoint (global expert shapes);
#   - checkpoints hold every expert by its global index: P = 2's ZeRO-1 checkpoint of step 3
#     resumes under P = 4 and P = 2 on 4 processes and under 1 process, and P = 2 on 4's (the
#     replicas' shards) under 1 process, and 1 process's under P = 2 on 2 (ZeRO-1); each tracks
#     the straight run to step 6 within the same bounds (losses of steps 4-6, parameters at 6);
#   - bad input: P not dividing n_expert, P > 1 on one process, P not dividing the process count,
#     expert_parallel in a dense model, recomputation with P > 1: one-line errors, non-zero exit.
# With a second argument `cudaemu`, only this: the emulated CUDA trainer (train_gpt_cudaemu,
# tests/cudaemu: device arenas, the gradients over the emulated NCCL, the experts' rows by the
# emulated ncclSend / ncclRecv), P = 2 on 2 processes against data parallelism on 2 (sigmoid
# router, gated shared expert, capacity 1), 3 steps, to the same bounds (~30 s).
# Skips (exit 0) when mpirun is missing.
set -u
build=$(cd "$1" && pwd)
mode=${2:-cpu}
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
source tests/mpi_common.sh
mpi_require
kjv_shards
trap '[ -n "${KEEP_TMP:-}" ] || rm -rf "$TMP"' EXIT INT TERM
TINY=(--config configs/tiny_gated.ini --model.n_layer=2 --model.d_model=64 --model.n_head=4
      --model.n_kv_head=2 --model.head_dim=16 --model.d_ff=128 --model.max_seq_len=64
      --train.seq_len=64 --train.tokens_per_step=512 --train.steps=6 --train.warmup_steps=3
      --train.threads=1 --log.log_every=1000 --log.val_every=0 --metrics.probe_every=0
      --log.sample_every=0 --checkpoint.checkpoint_every=3
      --moe.n_expert=4 --moe.top_k=2 --moe.d_expert=64 --moe.aux_loss_coef=0.05 --moe.z_loss_coef=0.001)
TRAIN=train_gpt
if [ "$mode" = cudaemu ]; then
    TRAIN=train_gpt_cudaemu
    [ -x "$build/$TRAIN" ] || { echo "FAIL: $build/$TRAIN missing"; exit 1; }
    TINY+=(--train.steps=3 --train.warmup_steps=1)
fi
run() {  # run NAME NP [overrides...]: a 6-step run into $TMP/NAME (batch 512 / NP / 64); output in $TMP/NAME.out
    local name=$1 np=$2; shift 2
    local launch=()
    [ "$np" -eq 1 ] || launch=(mpirun -np "$np" --oversubscribe ${ONEDNN_MAX_CPU_ISA:+-x ONEDNN_MAX_CPU_ISA})
    timeout 120 ${launch[@]+"${launch[@]}"} "$build/$TRAIN" "${TINY[@]}" --train.batch_size=$((8 / np)) \
        --log.run_dir="$TMP/$name" "$@" >"$TMP/$name.out" 2>&1
}
last=6; [ "$mode" = cudaemu ] && last=3
ck() { echo "$TMP/$1/checkpoints/step_0000000$last"; }
cmp_runs() {  # cmp_runs WHAT A B: losses 1e-6, params 3e-4 (max) and 1e-5 (rms), A against B
    local what=$1 a=$2 b=$3 rc
    check "$what: $a ran" [ -f "$(ck "$a")/DONE" ]
    "$PY" tests/compare_ckpt.py losses "$TMP/$a/log.jsonl" "$TMP/$b/log.jsonl" 1e-6 >"$TMP/$a.$b.l" 2>&1
    rc=$?
    check "$what: $(cat "$TMP/$a.$b.l")" [ $rc -eq 0 ]
    "$PY" tests/compare_ckpt.py params "$(ck "$a")" "$(ck "$b")" 3e-4 1e-5 >"$TMP/$a.$b.p" 2>&1
    rc=$?
    check "$what: $(cat "$TMP/$a.$b.p")" [ $rc -eq 0 ]
    echo "$what: $(cat "$TMP/$a.$b.l"); $(cat "$TMP/$a.$b.p")"
}

if [ "$mode" = cudaemu ]; then
    E=(--moe.router=sigmoid_topk --moe.n_shared_expert=1 --moe.d_shared_expert=32 --moe.shared_expert_gate=true --moe.capacity_factor=1)
    run emu_dp2 2 "${E[@]}"
    run emu_ep2 2 "${E[@]}" --moe.expert_parallel=2
    check "emulated CUDA: the CUDA backend ran" grep -q "^backend: cuda" "$TMP/emu_ep2.out"
    check "emulated CUDA: P = 2 over NCCL send/recv" grep -q "expert parallel: groups of 2 processes.*NCCL send/recv" "$TMP/emu_ep2.out"
    check "emulated CUDA: slots are dropped" grep -q '"moe_dropped":[1-9]' "$TMP/emu_dp2/log.jsonl"
    cmp_runs "emulated CUDA, capacity 1, P = 2 vs P = 1 on 2 processes" emu_ep2 emu_dp2
    echo "$pass passed, $fail failed"
    [ $fail -eq 0 ]
    exit
fi

# dropless: against 1 process
V1=(--moe.router=softmax_topk)
V2=(--moe.router=sigmoid_topk --moe.n_shared_expert=1 --moe.d_shared_expert=32 --moe.shared_expert_gate=true)
for v in 1 2; do
    eval "ov=(\"\${V$v[@]}\")"
    run d${v}_one 1 "${ov[@]}"
    run d${v}_ep2n2 2 "${ov[@]}" --moe.expert_parallel=2
    run d${v}_ep2n4 4 "${ov[@]}" --moe.expert_parallel=2
    run d${v}_ep4n4 4 "${ov[@]}" --moe.expert_parallel=4
    check "variant $v: 1 process ran" [ -f "$(ck d${v}_one)/DONE" ]
    check "variant $v: P = 2 says so" grep -q "expert parallel: groups of 2 processes, 2 of the 4 experts" "$TMP/d${v}_ep2n2.out"
    check "variant $v: P = 4 says so" grep -q "expert parallel: groups of 4 processes, 1 of the 4 experts" "$TMP/d${v}_ep4n4.out"
    cmp_runs "dropless ${ov[*]}, P = 2 on 2 processes vs 1 process" d${v}_ep2n2 d${v}_one
    cmp_runs "dropless ${ov[*]}, P = 2 on 4 processes vs 1 process" d${v}_ep2n4 d${v}_one
    cmp_runs "dropless ${ov[*]}, P = 4 on 4 processes vs 1 process" d${v}_ep4n4 d${v}_one
done

# the storage: the dense floats on every process, El = 4 / P experts of each of the 2 MoE layers:
# w_in [El, 2 x 64, 64] (swiglu) + w_out [El, 64, 64] = El x 12288 floats a layer (multiples of 16:
# no padding); the dense region = the whole model's arena (the 1-process model.bin) less its 4
# experts' worth, rounded up to whole 4096-float norm chunks (train/dist.h)
held() { grep -o "held per process: [0-9]* floats ([0-9]* dense + [0-9]* experts)" "$TMP/$1.out" | tr -dc '0-9 ' | awk '{print $1, $2, $3}'; }
read -r t2 d2 x2 <<<"$(held d1_ep2n2)"
read -r t4 d4 x4 <<<"$(held d1_ep4n4)"
whole=$("$PY" -c "import struct,sys; b=open(sys.argv[1],'rb').read(48); print(struct.unpack('<Q', b[40:48])[0])" "$(ck d1_one)/model.bin")
check "storage: P = 2 holds 2 layers x 2 experts x 12288 expert floats (${x2:-none})" [ "${x2:-0}" -eq 49152 ]
check "storage: P = 4 holds 2 layers x 1 expert x 12288 expert floats (${x4:-none})" [ "${x4:-0}" -eq 24576 ]
check "storage: the dense floats are the same under P = 2 and 4 (${d2:-none}, ${d4:-none})" [ "${d2:-0}" -eq "${d4:-1}" ]
check "storage: held = dense + experts under P = 2 (${t2:-none})" [ "${t2:-0}" -eq $(( ${d2:-1} + ${x2:-1} )) ]
check "storage: the dense region ${d2:-none} = the whole model's arena ${whole:-none} less 4 x 2 x 12288 expert floats, in 4096-float chunks" [ $(( (${whole:-0} - 98304 + 4095) / 4096 * 4096 )) -eq "${d2:-0}" ]
echo "storage per process: P = 2: ${d2:-?} dense + ${x2:-?} expert floats; P = 4: ${d4:-?} + ${x4:-?}; the whole model: ${whole:-?}"

# capacity-limited: against data parallelism on the same process count (the same drops)
C=(--moe.capacity_factor=1 --moe.router=softmax_topk --moe.n_shared_expert=1 --moe.d_shared_expert=32)
run c_dp2 2 "${C[@]}"
run c_ep2n2 2 "${C[@]}" --moe.expert_parallel=2
run c_dp4 4 "${C[@]}"
run c_ep4n4 4 "${C[@]}" --moe.expert_parallel=4
check "capacity 1: slots are dropped" grep -q '"moe_dropped":[1-9]' "$TMP/c_dp2/log.jsonl"
cmp_runs "capacity 1, P = 2 vs P = 1, 2 processes" c_ep2n2 c_dp2
cmp_runs "capacity 1, P = 4 vs P = 1, 4 processes" c_ep4n4 c_dp4
check "capacity 1: the same drops under P = 2 and P = 1" [ "$(grep -o '"moe_dropped":[0-9]*' "$TMP/c_ep2n2/log.jsonl")" = "$(grep -o '"moe_dropped":[0-9]*' "$TMP/c_dp2/log.jsonl")" ]

# the routing statistics (tests/compare_ckpt.py's log reader)
stats() {  # stats WHAT A B KEYS...: the step records' KEYS of A against B, 1e-6 relative
    local what=$1 a=$2 b=$3 out rc; shift 3
    out=$("$PY" - "$TMP/$a/log.jsonl" "$TMP/$b/log.jsonl" "$@" <<'PYEOF'
import json, sys
def recs(p):
    return {r["step"]: r for r in map(json.loads, open(p)) if r.get("type") == "step"}
a, b = recs(sys.argv[1]), recs(sys.argv[2])
worst, at = 0.0, ""
assert set(a) <= set(b) and len(a) >= 3, "steps: %s vs %s" % (sorted(a), sorted(b))
for k in sys.argv[3:]:
    for s in a:
        x, y = float(a[s][k]), float(b[s][k])
        d = abs(x - y) / max(abs(y), 1e-30)
        if d >= worst: worst, at = d, "%s step %d (%g vs %g)" % (k, s, x, y)
print("%s: worst relative difference %.3g at %s" % (",".join(sys.argv[3:]), worst, at))
sys.exit(0 if worst <= 1e-6 else 1)
PYEOF
)
    rc=$?
    check "$what: $out" [ $rc -eq 0 ]
    echo "$what: $out"
}
stats "routing statistics, capacity 1, P = 2 vs P = 1 on 2 processes" c_ep2n2 c_dp2 moe_aux moe_z moe_max_load moe_dropped
stats "routing statistics, capacity 1, P = 4 vs P = 1 on 4 processes" c_ep4n4 c_dp4 moe_aux moe_z moe_max_load moe_dropped
stats "expert load (global counts), dropless, P = 2 on 2 processes vs 1 process" d1_ep2n2 d1_one moe_max_load
stats "expert load (global counts), dropless, P = 4 on 4 processes vs 1 process" d2_ep4n4 d2_one moe_max_load

# 2 micro-steps a step, the gradients reduced layer by layer (GATEDGPT_DIST_OVERLAP: the world's
# reductions interleaved with the groups' all-to-alls), evaluations, probes and samples on rank 0
# (every expert computed locally there): P = 2 against data parallelism on 2 processes
MS=(--train.batch_size=2 --log.val_every=3 --metrics.probe_every=3 --log.sample_every=3)
GATEDGPT_DIST_OVERLAP=1 run ms_dp2 2 "${V1[@]}" "${MS[@]}"
GATEDGPT_DIST_OVERLAP=1 run ms_ep2 2 "${V1[@]}" "${MS[@]}" --moe.expert_parallel=2
check "2 micro-steps: says so" grep -q "grad_accum=2 processes=2" "$TMP/ms_ep2.out"
check "overlap: says so" grep -q "gradients reduced layer by layer" "$TMP/ms_ep2.out"
cmp_runs "2 micro-steps, overlapped reduction, P = 2 vs P = 1 on 2 processes" ms_ep2 ms_dp2
check "2 micro-steps: 3 evaluations, 3 probes, 2 samples" [ "$(grep -c '"type":"eval"' "$TMP/ms_ep2/log.jsonl")$(grep -c '"type":"probe"' "$TMP/ms_ep2/log.jsonl")$(grep -c '"type":"sample"' "$TMP/ms_ep2/log.jsonl")" = 332 ]
"$PY" - "$TMP/ms_ep2/log.jsonl" "$TMP/ms_dp2/log.jsonl" >"$TMP/ms.val" 2>&1 <<'PYEOF'
import json, sys
def ev(p):
    return {r["step"]: r["val_loss"] for r in map(json.loads, open(p)) if r.get("type") == "eval"}
a, b = ev(sys.argv[1]), ev(sys.argv[2])
d = max(abs(a[s] - b[s]) / abs(b[s]) for s in b) if sorted(a) == sorted(b) == [0, 3, 6] else float("inf")
print("validation losses at steps 0, 3, 6: max relative difference %.3g (tolerance 1e-6)" % d)
sys.exit(0 if d <= 1e-6 else 1)
PYEOF
rc=$?
check "2 micro-steps, the evaluations of rank 0's group, P = 2 vs P = 1: $(cat "$TMP/ms.val")" [ $rc -eq 0 ]

# ZeRO-1 under expert parallelism: bit for bit ZeRO-0
run z1_ep2n2 2 "${V1[@]}" --moe.expert_parallel=2 --train.zero_stage=1
check "P = 2, ZeRO-1 vs ZeRO-0: losses and grad norms bitwise" "$PY" tests/compare_ckpt.py losses "$TMP/z1_ep2n2/log.jsonl" "$TMP/d1_ep2n2/log.jsonl" 0
check "P = 2, ZeRO-1 vs ZeRO-0: model.bin byte for byte" cmp -s "$(ck z1_ep2n2)/model.bin" "$(ck d1_ep2n2)/model.bin"
run z1_ep2n4 4 "${V1[@]}" --moe.expert_parallel=2 --train.zero_stage=1
check "P = 2 on 4 processes (2 replicas), ZeRO-1 vs ZeRO-0: losses and grad norms bitwise" "$PY" tests/compare_ckpt.py losses "$TMP/z1_ep2n4/log.jsonl" "$TMP/d1_ep2n4/log.jsonl" 0
check "P = 2 on 4 processes (2 replicas), ZeRO-1 vs ZeRO-0: model.bin byte for byte" cmp -s "$(ck z1_ep2n4)/model.bin" "$(ck d1_ep2n4)/model.bin"
# resume P = 2's checkpoint of step 3 under P = 4 and P = 2 (4 processes) and P = 1 (1 process);
# P = 2 on 4's (each replica's part of the expert shards' AdamW state) under 1 process
ck3="$TMP/z1_ep2n2/checkpoints/step_00000003"
run r_ep4n4 4 "${V1[@]}" --moe.expert_parallel=4 --resume "$ck3"
run r_ep2n4 4 "${V1[@]}" --moe.expert_parallel=2 --resume "$ck3"
run r_one 1 "${V1[@]}" --resume "$ck3"
run r2_one 1 "${V1[@]}" --resume "$TMP/z1_ep2n4/checkpoints/step_00000003"
run r3_ep2n2 2 "${V1[@]}" --moe.expert_parallel=2 --train.zero_stage=1 --resume "$TMP/d1_one/checkpoints/step_00000003"
for r in r_ep4n4 r_ep2n4 r_one r2_one r3_ep2n2; do
    # the checkpoint's writer and its straight run
    from="P = 2 on 2 (ZeRO-1, step 3)"; ref=d1_ep2n2
    [ $r = r2_one ] && { from="P = 2 on 4 (ZeRO-1, step 3)"; ref=d1_ep2n4; }
    [ $r = r3_ep2n2 ] && { from="1 process (step 3)"; ref=d1_one; }
    check "$r: resumed from step 3" grep -q '"type":"resume","step":3' "$TMP/$r/log.jsonl"
    stats "resume of $from as $r vs the straight run, steps 4-6" $r $ref loss grad_norm
    "$PY" tests/compare_ckpt.py params "$(ck $r)" "$(ck $ref)" 3e-4 1e-5 >"$TMP/$r.p" 2>&1
    rc=$?
    check "resume of $from as $r vs the straight run at step 6: $(cat "$TMP/$r.p")" [ $rc -eq 0 ]
    echo "resume of $from as $r vs the straight run at step 6: $(cat "$TMP/$r.p")"
done
check "resume under P = 1: says the key changed" grep -q "resume: \[moe\] expert_parallel = 1 (checkpoint: 2): accepted" "$TMP/r_one.out"
# the tools read an expert-parallel checkpoint as any other (model.bin: the whole model; the rank
# files' AdamW segments): the expert tensors by their global shape, the writer's ZeRO stage from
# the segments, and an evaluation of the ZeRO-1 checkpoint (segments of shards) equal to the
# ZeRO-0 twin's (the same model.bin, checked above), to the last digit printed
"$build/gatedgpt_ckpt" inspect "$(ck z1_ep2n4)" >"$TMP/inspect.out" 2>&1
check "gatedgpt_ckpt inspect of P = 2 on 4 (ZeRO-1): the whole expert tensors" grep -q "^h.1.moe.w_out  *\[4, 64, 64\]" "$TMP/inspect.out"
check "gatedgpt_ckpt inspect of P = 2 on 4 (ZeRO-1): the writer's ZeRO-1 shards" grep -q "written by 4 processes, zero_stage 1" "$TMP/inspect.out"
e1=$("$build/gatedgpt_ckpt" eval "$(ck z1_ep2n4)" --batches 2 2>&1 | grep -o "loss [0-9.]*")
e0=$("$build/gatedgpt_ckpt" eval "$(ck d1_ep2n4)" --batches 2 2>&1 | grep -o "loss [0-9.]*")
check "gatedgpt_ckpt eval: P = 2 on 4, ZeRO-1 (${e1:-none}) = ZeRO-0 (${e0:-none})" [ "${e1:-none}" = "${e0:-missing}" ]

# bad input: one line each, non-zero exit
one_bad() {  # one_bad WHAT NP PATTERN [overrides...]
    local what=$1 np=$2 pat=$3 rc; shift 3
    run bad_$np "$np" "$@"
    rc=$?
    check "$what: non-zero exit (rc $rc)" [ $rc -ne 0 ]
    check "$what: not a timeout (rc $rc)" [ $rc -ne 124 ]
    check "$what: the message ($(grep -m1 error: "$TMP/bad_$np.out"))" grep -q "$pat" "$TMP/bad_$np.out"
}
one_bad "P = 3 with 4 experts" 1 "\[moe\] expert_parallel = 3: must divide n_expert = 4" --moe.expert_parallel=3
one_bad "P = 2 on one process" 1 "\[moe\] expert_parallel = 2 needs processes to split the experts over, this run has 1" --moe.expert_parallel=2
one_bad "P = 4 on 2 processes" 2 "\[moe\] expert_parallel = 4 does not divide the 2 processes" --moe.expert_parallel=4
# a dense model: the [moe] keys are left out (each one would be refused the same way)
timeout 60 "$build/train_gpt" --config configs/tiny_gated.ini --train.steps=1 --log.run_dir="$TMP/dense" \
    --moe.expert_parallel=2 >"$TMP/dense.out" 2>&1
rc=$?
check "P = 2 in a dense model: non-zero exit (rc $rc)" [ $rc -ne 0 ]
check "P = 2 in a dense model: the message ($(grep -m1 error: "$TMP/dense.out"))" grep -q "expert_parallel.*n_expert" "$TMP/dense.out"
# (recomputation with P > 1 is accepted since #42 item 4: tests/test_recompute_ep.sh)
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
