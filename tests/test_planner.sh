#!/usr/bin/env bash
# tests/test_planner.sh BUILD_DIR [--emu]: the memory plan of `train_gpt --check` (train/plan.h,
# docs/config.md "Memory plan") against what training holds.
#
# CPU (default), a dense (tiny_gated with d_ff 1536), an MoE (tiny_moe_gated) and a hybrid
# (tiny_hybrid_gated) model at 1, 2 and 3 processes, zero_stage 0 and 1, [train] recompute none,
# selective and full (9 combinations a model), 2 training steps each (one thread per process):
#   - the trainer's peak RSS (VmHWM, the largest over the processes) within 10% of the plan's
#     total (`--check --nproc N`): the acceptance bound; the plan's runtime line is this
#     process's RSS, measured, and its scratch, MPI and LIBXSMM lines are allowances (docs/config.md);
#   - the arena lines to the byte against what the trainer counts in ops_malloc: params =
#     weights + master + grads, adamw (rank 0's shard), activations = activations + logits +
#     backward (the counts come from the allocation wrapper, the plan from the size functions);
#   - the MoE with expert parallelism (P = 2 on 2 processes, P = 4 on 4, P = 2 on 4 with ZeRO-0 and
#     ZeRO-1: two replicas of each expert): the same two checks (each process holds 1/P of the
#     experts; the received rows at balanced routing);
#   - gradient accumulation (2 micro-steps, 2 processes, ZeRO-1): the same checks;
#   - the paper MoE (configs/paper/moe_15b_a2b_gated.ini) on 8 and 64 H200s, expert_parallel 1
#     and 8: the parameter lines against the parameter count of its header (15,778,553,856,
#     derived there by hand) times the bytes per parameter, the ZeRO-1 shards by
#     docs/distributed.md's rule and the fp32-read tensors by the config's shape, in Python;
#   - under mpirun the process count defaults to the real one; bad --nproc / --device / --layout
#     values are one line naming the flag, exit 1.
# --emu: the CUDA emulator's trainers (fp32 and bf16 act_t; 1 process, and 2 over the emulated
# NCCL where it is built): the device bytes each holds, by group after setup and at its peak at
# the end of a step, equal the plan's device lines (`--check` of the same binary) to the byte.
# Skips (exit 0) what is not built (mpirun, the emulator).
set -u
build=$(cd "$1" && pwd)
mode=${2:-cpu}
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
source tests/mpi_common.sh
trap 'rm -rf "$TMP"' EXIT INT TERM
kjv_shards
# 2 steps, nothing else: no validation, probe, sample or checkpoint (the plan sizes the step)
RUN=(--train.steps=2 --train.warmup_steps=1 --train.threads=1 --log.log_every=1 --log.val_every=0
     --metrics.probe_every=0 --log.sample_every=0 --checkpoint.checkpoint_every=0)
have_mpi=1; command -v mpirun >/dev/null 2>&1 || have_mpi=0
launch() {  # launch NP BINARY ARGS...: the binary under mpirun -np NP (NP > 1), else alone
    local np=$1; shift
    if [ "$np" -gt 1 ]; then timeout 600 mpirun -np "$np" --oversubscribe "$@"; else timeout 600 "$@"; fi
}
field() { local v; v=$(grep -m1 "^  $1 " "$2" | awk '{print $2}'); echo "${v:-0}"; }   # a plan line's bytes (0: none)

# ratio PLAN RSS: 0 when |PLAN / RSS - 1| <= 0.10
within10() { "$PY" -c "import sys; p, r = int(sys.argv[1]), int(sys.argv[2]); sys.exit(0 if r > 0 and abs(p / r - 1) <= 0.10 else 1)" "$1" "$2"; }
# the trainer's "memory: the backend holds params P + adamw A + activations C + scratch S = T bytes"
held() { grep -m1 "^memory: the backend holds" "$2" | sed 's/.*params \([0-9]*\) + adamw \([0-9]*\) + activations \([0-9]*\) + scratch \([0-9]*\) = \([0-9]*\) bytes.*/\1 \2 \3 \4 \5/' | awk -v k="$1" '{print $k}'; }
peak() { grep -m1 "^memory: peak RSS" "$2" | sed "s/.*$1 \([0-9]*\) bytes.*/\1/"; }
# train_vs_plan NAME NP ARGS...: train ARGS on NP processes into $TMP/NAME.out and check it against
# the plan already in $TMP/NAME.plan: the total within 10% of the peak RSS, and the arena lines
# (params, adamw, activations) to the byte against what the trainer holds
train_vs_plan() {
    local name=$1 np=$2
    shift 2
    launch "$np" "$build/train_gpt" "$@" --log.run_dir="$TMP/$name" > "$TMP/$name.out" 2>&1
    check "$name: trains (rc $?)" grep -q "^memory: peak RSS" "$TMP/$name.out"
    local plan rss ratio w m g acts
    plan=$(field total "$TMP/$name.plan"); rss=$(peak "peak RSS" "$TMP/$name.out")
    ratio=$("$PY" -c "import sys; print('%.3f' % (int(sys.argv[1]) / max(int(sys.argv[2] or 0), 1)))" "$plan" "${rss:-0}")
    echo "$name: plan $plan bytes, peak RSS ${rss:-?} bytes: plan / RSS = $ratio"
    check "$name: plan total $plan within 10% of the peak RSS ${rss:-?} (ratio $ratio)" within10 "$plan" "${rss:-0}"
    w=$(field weights "$TMP/$name.plan"); m=$(field master "$TMP/$name.plan"); g=$(field grads "$TMP/$name.plan")
    acts=$(( $(field activations "$TMP/$name.plan") + $(field logits "$TMP/$name.plan") + $(field backward "$TMP/$name.plan") ))
    check "$name: params $((w + m + g)) == held $(held 1 "$TMP/$name.out")" [ "$((w + m + g))" = "$(held 1 "$TMP/$name.out")" ]
    check "$name: adamw $(field adamw "$TMP/$name.plan") == held $(held 2 "$TMP/$name.out")" [ "$(field adamw "$TMP/$name.plan")" = "$(held 2 "$TMP/$name.out")" ]
    check "$name: activations + logits + backward $acts == held $(held 3 "$TMP/$name.out")" [ "$acts" = "$(held 3 "$TMP/$name.out")" ]
}

if [ "$mode" = "--emu" ]; then
    # ---------------------------------------------------------------------------------------------
    # the CUDA emulator: the device bytes to the byte
    for bin in train_gpt_cudaemu train_gpt_cudaemu_bf16; do
        if [ ! -x "$build/$bin" ]; then echo "skipped: $build/$bin not built (the CUDA emulator needs the CUDA headers)"; continue; fi
        nps="1"; [ "$have_mpi" = 1 ] && [ "${GATEDGPT_EMU_NCCL:-1}" = 1 ] && nps="1 2"
        for cfg in dense moe hybrid; do
            case $cfg in
                dense) C=(--config configs/tiny_gated.ini) ;;
                moe) C=(--config configs/tiny_moe_gated.ini --moe.d_expert=64) ;;
                hybrid) C=(--config configs/tiny_hybrid_gated.ini --model.layer_pattern=LA) ;;
            esac
            # a small step: the emulator runs every GPU thread on one CPU thread
            C+=(--model.n_layer=2 --model.d_model=64 --model.n_head=4 --model.n_kv_head=2 --model.head_dim=16
                --model.d_ff=128 --model.max_seq_len=32 --train.batch_size=2 --train.seq_len=32
                --train.zero_stage=1 "${RUN[@]}" --train.steps=1 --train.warmup_steps=0)
            for np in $nps; do
                name="$bin.$cfg.$np"
                "$build/$bin" "${C[@]}" --check --nproc "$np" > "$TMP/$name.plan" 2>&1
                check "$name: --check runs" grep -q "^  total " "$TMP/$name.plan"
                launch "$np" "$build/$bin" "${C[@]}" --log.run_dir="$TMP/$name" > "$TMP/$name.out" 2>&1
                check "$name: 1 step runs (rc $?)" grep -q "^memory: peak RSS" "$TMP/$name.out"
                w=$(field weights "$TMP/$name.plan"); m=$(field master "$TMP/$name.plan"); g=$(field grads "$TMP/$name.plan")
                a=$(field adamw "$TMP/$name.plan"); s=$(field scratch "$TMP/$name.plan")
                acts=$(( $(field activations "$TMP/$name.plan") + $(field logits "$TMP/$name.plan") + $(field backward "$TMP/$name.plan") ))
                dev=$((w + m + g + a + acts + s + $(field comm "$TMP/$name.plan")))
                check "$name: params (weights + master + grads) $((w + m + g)) == held $(held 1 "$TMP/$name.out")" [ "$((w + m + g))" = "$(held 1 "$TMP/$name.out")" ]
                check "$name: adamw $a == held $(held 2 "$TMP/$name.out")" [ "$a" = "$(held 2 "$TMP/$name.out")" ]
                check "$name: activations + logits + backward $acts == held $(held 3 "$TMP/$name.out")" [ "$acts" = "$(held 3 "$TMP/$name.out")" ]
                check "$name: scratch $s == held $(held 4 "$TMP/$name.out")" [ "$s" = "$(held 4 "$TMP/$name.out")" ]
                # the peak over the step: nothing grew beyond the plan (a scratch slot, an allocation of its own)
                check "$name: device peak $(peak "backend peak" "$TMP/$name.out") == the plan's device lines $dev" \
                    [ "$dev" = "$(peak "backend peak" "$TMP/$name.out")" ]
                echo "$name: plan $dev bytes on the device, held at the peak $(peak "backend peak" "$TMP/$name.out")"
                # the CPU binary plans the same layout with the same size functions (all but the
                # scratch, where it estimates CUB's storage, and the allowances)
                lay=cuda-fp32; [ "$bin" = train_gpt_cudaemu_bf16 ] && lay=cuda-bf16
                "$build/train_gpt" "${C[@]}" --check --nproc "$np" --layout $lay --device 80G > "$TMP/$name.cpuplan" 2>&1
                for l in weights master grads adamw activations logits backward comm; do
                    check "$name: train_gpt --layout $lay plans $l as $bin does" [ "$(field $l "$TMP/$name.cpuplan")" = "$(field $l "$TMP/$name.plan")" ]
                done
            done
        done
    done
    echo "$pass passed, $fail failed"
    [ $fail -eq 0 ]
    exit
fi

# -------------------------------------------------------------------------------------------------
# CPU: peak RSS within 10%, the arenas to the byte
CONFIGS="dense moe hybrid"
for cfg in $CONFIGS; do
    case $cfg in
        dense) C=(--config configs/tiny_gated.ini --model.d_ff=1536) ;;   # its MLP activations: a large line
        moe) C=(--config configs/tiny_moe_gated.ini) ;;
        hybrid) C=(--config configs/tiny_hybrid_gated.ini) ;;
    esac
    # processes:zero_stage:recompute; every recompute mode at 1, 2 and 3 processes
    for run in 1:0:none 2:0:none 2:1:none 3:0:none 3:1:none 1:0:full 2:1:selective 3:0:full 3:1:selective; do
        IFS=: read -r np z rc <<< "$run"
        if [ "$np" -gt 1 ] && [ "$have_mpi" = 0 ]; then echo "skipped: $cfg x $np: mpirun not installed"; continue; fi
        name="$cfg.np$np.z$z.$rc"
        "$build/train_gpt" "${C[@]}" "${RUN[@]}" --train.zero_stage="$z" --train.recompute="$rc" --check --nproc "$np" > "$TMP/$name.plan" 2>&1
        check "$name: --check --nproc $np prints a plan" grep -q "^  total " "$TMP/$name.plan"
        train_vs_plan "$name" "$np" "${C[@]}" "${RUN[@]}" --train.zero_stage="$z" --train.recompute="$rc"
    done
done

# expert parallelism (tiny_moe_gated, [moe] expert_parallel = P): each process holds the dense
# parameters and 1/P of the experts, and the received rows in buffers sized from the counts (the
# plan's "expert rows" line, at balanced routing): P = 2 on 2 processes (zero_stage 0), P = 4 on 4
# (zero_stage 1: the experts' AdamW state over 1 replica), P = 2 on 4 processes (2 replicas of
# each expert: zero_stage 1 cuts the experts' AdamW state over the 2 replicas, the dense one over
# all 4; and zero_stage 0): the same checks
if [ "$have_mpi" = 1 ]; then
    for run in 2:0:2 4:1:4 4:1:2 4:0:2; do
        IFS=: read -r np z ep <<< "$run"
        name="moe_ep$ep.np$np.z$z"
        C=(--config configs/tiny_moe_gated.ini --moe.expert_parallel="$ep")
        "$build/train_gpt" "${C[@]}" "${RUN[@]}" --train.zero_stage="$z" --check --nproc "$np" > "$TMP/$name.plan" 2>&1
        check "$name: --check --nproc $np plans the expert rows" grep -q "^  expert rows .*at balanced routing" "$TMP/$name.plan"
        train_vs_plan "$name" "$np" "${C[@]}" "${RUN[@]}" --train.zero_stage="$z"
    done
fi

# gradient accumulation (2 micro-steps a step on 2 processes, ZeRO-1): the arenas are sized for one
# micro-batch, whatever the global batch
if [ "$have_mpi" = 1 ]; then
    name="dense.np2.z1.accum2"
    C=(--config configs/tiny_gated.ini --train.tokens_per_step=4096)
    "$build/train_gpt" "${C[@]}" "${RUN[@]}" --train.zero_stage=1 --check --nproc 2 > "$TMP/$name.plan" 2>&1
    check "$name: --check --nproc 2 prints a plan" grep -q "^  total " "$TMP/$name.plan"
    train_vs_plan "$name" 2 "${C[@]}" "${RUN[@]}" --train.zero_stage=1
    check "$name: the run took 2 micro-steps a step" grep -q '"grad_accum":2,' "$TMP/$name/log.jsonl"
fi

# -------------------------------------------------------------------------------------------------
# the paper MoE on 8 and 64 H200s, expert_parallel 1 and 8: the parameter lines by independent
# arithmetic (ZeRO-1 in this bf16 layout shards the fp32 master too, except under expert
# parallelism, where each process holds the dense region and its 1/8 of the experts whole)
P=configs/paper/moe_15b_a2b_gated.ini
for pc in "8 1" "64 1" "8 8" "64 8"; do
    np=${pc% *} ep=${pc#* }
    "$build/train_gpt" --config $P --check --nproc $np --device h200 --train.zero_stage=1 --moe.expert_parallel=$ep \
        > "$TMP/paper.$np.$ep.plan" 2>&1
    check "paper MoE $np/$ep: --check --device h200 plans the cuda bf16 layout" \
        grep -q "^memory plan: cuda bf16 layout, $np processes, zero_stage 1" "$TMP/paper.$np.$ep.plan"
    "$PY" - "$P" "$TMP/paper.$np.$ep.plan" "$np" "$ep" <<'PY'
import re, sys
ini, plan, N, EP = open(sys.argv[1]).read(), open(sys.argv[2]).read(), int(sys.argv[3]), int(sys.argv[4])
n = int(re.search(r"check: params_total=(\d+)", ini).group(1))   # derived by hand in the header
line = {m.group(1): int(m.group(2)) for m in re.finditer(r"^  (\w+(?: \w+)?) +(\d+) ", plan, re.M)}
r256 = lambda b: -(-b // 256) * 256              # cudaMalloc's 256-byte units (kernels/scratch.h)
def shard(total, parts):                          # rank 0's: whole 4096-float chunks, the largest
    chunks = -(-total // 4096)
    return min(-(-chunks // parts) * 4096, total)
L, d, hd, V, E = 24, 2048, 128, 151936, 128
experts = L * E * 3 * d * 768                    # the header's 603,979,776 a layer
if EP == 1:
    # ZeRO-1 shards the master: rank 0's shard, and the tensors read in fp32 whole: the input
    # embedding (untied: the LM head is a GEMM's) and the norms (ln1, ln2, q_norm, k_norm per layer,
    # the final one); each range a multiple of 64 floats, so their packing adds nothing
    f32 = V * d + L * (2 * d + 2 * hd) + d
    held, master = n, r256(4 * shard(n, N)) + r256(4 * f32)
    adamw = 3 * r256(4 * shard(n, N))
else:
    # expert parallelism: the dense region and 1/EP of the experts, the master whole (not sharded)
    dense = n - experts
    held = dense + experts // EP
    master = r256(4 * held)
    adamw = 3 * r256(4 * (shard(dense, N) + shard(experts // EP, N // EP)))
want = {"weights": r256(2 * held), "master": master, "grads": r256(4 * held), "adamw": adamw}
bad = [f"{k}: plan {line.get(k)} != {v}" for k, v in want.items() if line.get(k) != v]
print(f"paper MoE, {n} parameters on {N} H200s, expert_parallel {EP}: bf16 weights {want['weights']/1e9:.2f} GB, fp32 master "
      f"{want['master']/1e9:.2f} GB, fp32 grads {want['grads']/1e9:.2f} GB, AdamW 1/{N} + weights' copy {want['adamw']/1e9:.2f} GB"
      + ("" if not bad else "; " + "; ".join(bad)))
sys.exit(1 if bad else 0)
PY
    check "paper MoE $np/$ep: the parameter lines == the parameter count x bytes, the ZeRO-1 shards" [ $? = 0 ]
done
check "paper MoE: does not fit on 8 H200s at batch_size 2 (activations)" grep -q "^largest batch_size that fits: none" "$TMP/paper.8.1.plan"

# -------------------------------------------------------------------------------------------------
# the real process count under mpirun; bad input
if [ "$have_mpi" = 1 ]; then
    launch 2 "$build/train_gpt" --config configs/tiny_gated.ini --check > "$TMP/mpi.plan" 2>&1
    check "under mpirun -np 2: the plan is for 2 processes" grep -q "^memory plan: cpu fp32 layout, 2 processes" "$TMP/mpi.plan"
fi
bad() {  # bad NAME PATTERN ARGS...: exit status 1, one line on stderr that matches PATTERN
    local name=$1 pat=$2; shift 2
    "$build/train_gpt" --config configs/tiny_gated.ini "$@" > "$TMP/bad.out" 2> "$TMP/bad.err"
    local rc=$?
    check "$name: exit 1 (got $rc)" [ $rc = 1 ]
    check "$name: one line: $(head -c 300 "$TMP/bad.err")" [ "$(wc -l < "$TMP/bad.err")" = 1 ]
    check "$name: names the flag and the fix" grep -q -- "$pat" "$TMP/bad.err"
}
bad "--nproc 0" "^error: --nproc needs a process count >= 1 (got '0')" --check --nproc 0
bad "--nproc -3" "^error: --nproc needs a process count >= 1 (got '-3')" --check --nproc -3
bad "--nproc two" "^error: --nproc needs a process count >= 1 (got 'two')" --check --nproc two
bad "--device h300" "^error: --device 'h300': unknown device (known: h100, h200, a100-80g" --check --device h300
bad "--device 12X" "^error: --device '12X': unknown device" --check --device 12X
bad "--layout tpu" "^error: --layout 'tpu': unknown layout (accepted: cpu, cpu-bf16, cuda-fp32, cuda-bf16)" --check --layout tpu
bad "--nproc without --check" "^error: --nproc, --device and --layout size the memory plan of --check" --nproc 2

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
