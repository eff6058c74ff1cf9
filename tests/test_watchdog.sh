#!/usr/bin/env bash
# tests/test_watchdog.sh BUILD_DIR: the watchdog ([train] hang_timeout_s, train/watchdog.h) under
# mpirun, 3 processes on the CPU, hang_timeout_s = 5. Runs of 24 steps, a checkpoint every 4:
#  1. the watchdog on (5 s) and off (0): the same step records and byte-identical checkpoints;
#  2. rank 1 stops itself with SIGSTOP at the start of step 14 (GATEDGPT_TEST_STOP_RANK/STEP,
#     test-only): every process is gone within hang_timeout_s + 10 s of the stop, mpirun exits
#     with status 3 (WATCHDOG_EXIT_STATUS, MPI_Abort's errorcode), ranks 0 and 2 each print one
#     line naming step 14 and the phase (all-reduce of gradients), rank 1 prints none; then
#     --resume auto finishes the run with the same step records and checkpoint as (1);
#  3. the same with rank 1 stopped from outside (kill -STOP) inside a checkpoint write (the
#     writes slowed with GATEDGPT_CKPT_SLOW_MS as in tests/test_crash.sh): the lines name the
#     checkpoint's step and a checkpoint phase;
#  4. one process: a slow checkpoint write whose stages each end within the timeout completes;
#     a stage that does not ends the process with status 3 (each stage is progress).
# mpirun runs with OMPI_MCA_orte_abort_on_non_zero_status=0: Open MPI's mpirun would otherwise
# end the job itself once one process exits with an error, which hides whether the watchdog's
# abort reaches the other processes (MPI_Abort) or only its own (a launcher that does not tear
# the job down, or a process that ends quietly, then leaves the job hanging).
# KEEP=1 keeps the scratch directory (its path is printed) for a look at the runs' output.
set -uo pipefail
build=$1
source tests/mpi_common.sh
mpi_require
kjv_shards
mpid=
# every rank of a launch (children of mpirun), killed at exit: a stopped rank outlives mpirun
kill_job() {
    [ -n "$mpid" ] || return 0
    for p in $(pgrep -P "$mpid"); do kill -9 "$p" 2>/dev/null; done
    kill -9 "$mpid" 2>/dev/null
    wait "$mpid" 2>/dev/null
    mpid=
}
trap 'kill_job; [ -n "${KEEP:-}" ] && echo kept $TMP || rm -rf "$TMP"' EXIT
export OMPI_MCA_rmaps_base_oversubscribe=1

H=5   # hang_timeout_s
X=(--config configs/tiny_gated.ini --model.n_layer=2 --model.d_model=32 --model.n_head=2 --model.n_kv_head=1
   --model.head_dim=16 --model.d_ff=64 --model.max_seq_len=32 --train.batch_size=2 --train.seq_len=32
   --train.tokens_per_step=384 --train.warmup_steps=2 --train.threads=1 --train.steps=24 --log.log_every=1000
   --log.val_every=0 --metrics.probe_every=0 --log.sample_every=0 --checkpoint.checkpoint_every=4
   --checkpoint.keep_last=10 --train.zero_stage=1)
# the step records without their timing fields
steps() { grep '"type":"step"' "$1" | sed -E 's/,"(ms|tokens_per_s|mfu|elapsed_s|eta_s|comm_ms)":[^,}]*//g'; }
# the checkpoint files that hold numbers (config.ini holds hang_timeout_s itself)
same_ckpt() {
    local a=$1/checkpoints/step_00000024 b=$2/checkpoints/step_00000024 f
    for f in model.bin rank_00000.bin rank_00001.bin rank_00002.bin; do cmp -s "$a/$f" "$b/$f" || return 1; done
}
launch() {   # launch OUT ARGS...: mpirun -np 3 in the background, $mpid
    local out=$1; shift
    OMPI_MCA_orte_abort_on_non_zero_status=0 mpirun -np 3 "$build/train_gpt" "${X[@]}" "$@" > "$out" 2>&1 &
    mpid=$!
}
rank_pid() {   # the pid of rank $1 of the current launch (empty until it has started)
    local p
    for p in $(pgrep -P "$mpid" 2>/dev/null); do
        tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && { echo "$p"; return; }
    done
}
is_stopped() { [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = T ]; }
now() { date +%s.%N; }
# waits for the launch to end, at most $1 s; sets rc (124: still running, then killed) and took
wait_end() {
    local t0 deadline
    t0=$(now); deadline=$(echo "$t0 + $1" | bc)
    while kill -0 "$mpid" 2>/dev/null && [ "$(echo "$(now) < $deadline" | bc)" = 1 ]; do sleep 0.1; done
    if kill -0 "$mpid" 2>/dev/null; then rc=124; kill_job; else wait "$mpid"; rc=$?; mpid=; fi
    took=$(echo "$(now) - $t0" | bc)
}

# ---- the CUDA emulator (second argument cudaemu): the NCCL path's abort ----
# train_gpt_cudaemu under mpirun runs the CUDA backend's data parallelism over the emulator's NCCL
# (tests/cudaemu/cudaemu_nccl.cpp: each collective a blocking MPI call on the emulated device
# memory). Rank 1 stops at step 3; the waiting rank's watchdog must call ncclCommAbort on its
# communicator (the emulator prints a line for it) before MPI_Abort, and the job must end.
if [ "${2:-}" = cudaemu ]; then
    [ -x "$build/train_gpt_cudaemu" ] || { echo "skipped: $build/train_gpt_cudaemu not built"; exit 0; }
    [ "${GATEDGPT_EMU_NCCL:-0}" = 1 ] || { echo "skipped: the emulator has no NCCL in this build (nccl.h not found)"; exit 0; }
    X=("${X[@]}" --train.tokens_per_step=256 --train.steps=6 --checkpoint.checkpoint_every=0)
    build_bin=train_gpt_cudaemu
    OMPI_MCA_orte_abort_on_non_zero_status=0 GATEDGPT_TEST_STOP_RANK=1 GATEDGPT_TEST_STOP_STEP=3 \
        mpirun -np 2 "$build/$build_bin" "${X[@]}" --train.hang_timeout_s=$H --log.run_dir="$TMP/emu" > "$TMP/emu.out" 2>&1 &
    mpid=$!
    p1=
    for _ in $(seq 1200); do [ -n "$p1" ] || p1=$(rank_pid 1); [ -n "$p1" ] && is_stopped "$p1" && break; kill -0 "$mpid" 2>/dev/null || break; sleep 0.1; done
    stopped=0; [ -n "$p1" ] && is_stopped "$p1" && stopped=1
    check "emulator: rank 1 stopped (SIGSTOP) at step 3" [ "$stopped" = 1 ]
    wait_end $((H + 10))
    echo "emulator: the job ended $took s after rank 1 stopped (rc $rc)"
    grep -E '^(error: rank|cudaemu: ncclCommAbort)' "$TMP/emu.out"
    check "emulator: every process gone within hang_timeout_s + 10 s, exit status 3" [ "$rc" = 3 ]
    check "emulator: rank 0 names step 3 and the gradients' reduction, and that NCCL was aborted first" \
        grep -q '^error: rank 0 of 2: no progress for [0-9]* s at step 3 in .*gradients.*(NCCL.s communicators aborted first: ncclCommAbort)$' "$TMP/emu.out"
    check "emulator: rank 0 called ncclCommAbort on its communicator of 2 ranks" grep -q '^cudaemu: ncclCommAbort(communicator of 2 ranks, rank 0)' "$TMP/emu.out"
    echo "watchdog (emulator): $pass passed, $fail failed"
    [ "$fail" = 0 ]
    exit
fi

# ---- 1. on and off: the same numbers ----
t0=$(now)
mpirun -np 3 "$build/train_gpt" "${X[@]}" --train.hang_timeout_s=$H --log.run_dir="$TMP/on" > "$TMP/on.out" 2>&1 || { echo "FAIL: run with the watchdog"; tail -5 "$TMP/on.out"; exit 1; }
echo "a 24-step run of 3 processes: $(echo "$(now) - $t0" | bc | cut -c1-5) s"
mpirun -np 3 "$build/train_gpt" "${X[@]}" --train.hang_timeout_s=0 --log.run_dir="$TMP/off" > "$TMP/off.out" 2>&1 || { echo "FAIL: run without the watchdog"; tail -5 "$TMP/off.out"; exit 1; }
same_steps() { [ "$(steps "$1" | wc -l)" = 24 ] && diff <(steps "$1") <(steps "$2") > /dev/null; }
check "watchdog on vs off: 24 step records, equal (losses and grad norms at 17 digits)" same_steps "$TMP/on/log.jsonl" "$TMP/off/log.jsonl"
check "watchdog on vs off: the step-24 checkpoints byte-identical (model.bin, 3 rank files)" same_ckpt "$TMP/on" "$TMP/off"

# ---- 2. rank 1 stops itself at step 14 ----
run="$TMP/stop"
GATEDGPT_TEST_STOP_RANK=1 GATEDGPT_TEST_STOP_STEP=14 launch "$TMP/stop.out" --train.hang_timeout_s=$H --log.run_dir="$run"
p1=
for _ in $(seq 600); do [ -n "$p1" ] || p1=$(rank_pid 1); [ -n "$p1" ] && is_stopped "$p1" && break; sleep 0.1; done
stopped=0; [ -n "$p1" ] && is_stopped "$p1" && stopped=1
check "stop: rank 1 stopped (SIGSTOP)" [ "$stopped" = 1 ]
wait_end $((H + 10))
echo "stop at step 14: the job ended $took s after rank 1 stopped (rc $rc)"
check "stop: every process gone within hang_timeout_s + 10 s of the stop" [ "$rc" != 124 ]
check "stop: mpirun's exit status is 3 (WATCHDOG_EXIT_STATUS)" [ "$rc" = 3 ]
# both waiting ranks time out together; the first MPI_Abort may end the other before it prints
check "stop: rank 0 or rank 2 prints the line: step 14, the gradients' reduce-scatter (ZeRO-1)" \
    grep -q '^error: rank [02] of 3: no progress for [0-9]* s at step 14 in reduce-scatter of gradients (host ' "$TMP/stop.out"
check "stop: rank 1 prints no such line" bash -c "! grep -q '^error: rank 1 of 3' '$TMP/stop.out'"
sleep 0.5
check "stop: no process left (rank 1 killed too)" bash -c "[ ! -e /proc/$p1 ] || [ \"\$(awk '{print \$3}' /proc/$p1/stat)\" = Z ]"
mpirun -np 3 "$build/train_gpt" "${X[@]}" --train.hang_timeout_s=$H --log.run_dir="$run" --resume auto > "$TMP/stop2.out" 2>&1
rc2=$?
check "stop: --resume auto continues from step 12 and finishes" bash -c "[ $rc2 = 0 ] && grep -q 'resume: continuing from .*step_00000012' '$TMP/stop2.out'"
check "stop: the resumed run's 24 step records equal the uninterrupted run's" same_steps "$run/log.jsonl" "$TMP/on/log.jsonl"
check "stop: its step-24 checkpoint equals the uninterrupted run's" same_ckpt "$TMP/on" "$run"

# ---- 3. rank 1 stopped from outside inside the write of checkpoint 16 ----
run="$TMP/ckpt"
GATEDGPT_CKPT_SLOW_MS=150 launch "$TMP/ckpt.out" --train.hang_timeout_s=$H --log.run_dir="$run"
for _ in $(seq 1200); do [ -d "$run/checkpoints/step_00000016.tmp" ] && break; kill -0 "$mpid" 2>/dev/null || break; sleep 0.02; done
sleep 0.1
p1=$(rank_pid 1)
[ -n "$p1" ] && kill -STOP "$p1"
wrote=$(ls "$run/checkpoints/step_00000016.tmp" 2>/dev/null | tr '\n' ' ')
check "checkpoint: rank 1 stopped while step_00000016.tmp/ exists (it holds: $wrote)" bash -c "[ -n '$p1' ] && [ -d '$run/checkpoints/step_00000016.tmp' ]"
wait_end $((H + 10))
echo "stop inside the write of checkpoint 16: the job ended $took s after rank 1 stopped (rc $rc)"
check "checkpoint: every process gone within hang_timeout_s + 10 s of the stop" [ "$rc" != 124 ]
check "checkpoint: mpirun's exit status is 3" [ "$rc" = 3 ]
check "checkpoint: the lines name step 16 and a checkpoint phase; none from rank 1" \
    bash -c "grep -q '^error: rank [02] of 3: no progress for [0-9]* s at step 16 in checkpoint ' '$TMP/ckpt.out' && ! grep -q '^error: rank 1 of 3' '$TMP/ckpt.out'"
grep -o '^error: rank [0-9] of 3: no progress for [0-9]* s at step [0-9]* in [a-z -]*' "$TMP/ckpt.out"
check "checkpoint: step 16 was never completed" bash -c "[ ! -f '$run/checkpoints/step_00000016/DONE' ]"
mpirun -np 3 "$build/train_gpt" "${X[@]}" --train.hang_timeout_s=$H --log.run_dir="$run" --resume auto > "$TMP/ckpt2.out" 2>&1
rc2=$?
check "checkpoint: --resume auto continues from step 12 and finishes" bash -c "[ $rc2 = 0 ] && grep -q 'resume: continuing from .*step_00000012' '$TMP/ckpt2.out'"
check "checkpoint: the resumed run's 24 step records equal the uninterrupted run's" same_steps "$run/log.jsonl" "$TMP/on/log.jsonl"
check "checkpoint: its step-24 checkpoint equals the uninterrupted run's" same_ckpt "$TMP/on" "$run"

# ---- 4. one process (no MPI): only time without progress counts ----
# a checkpoint write of 9 stages of 0.6 s (5.4 s) under hang_timeout_s = 2 completes: each stage
# re-arms the watchdog; one stage of 5 s does not: the process ends with exit status 3
O=(--config configs/tiny_gated.ini --model.n_layer=2 --model.d_model=32 --model.n_head=2 --model.n_kv_head=1
   --model.head_dim=16 --model.d_ff=64 --model.max_seq_len=32 --train.batch_size=2 --train.seq_len=32
   --train.tokens_per_step=128 --train.steps=4 --train.warmup_steps=1 --train.threads=1 --log.val_every=0
   --metrics.probe_every=0 --log.sample_every=0 --checkpoint.checkpoint_every=4 --train.hang_timeout_s=2)
GATEDGPT_CKPT_SLOW_MS=600 "$build/train_gpt" "${O[@]}" --log.run_dir="$TMP/one_ok" > "$TMP/one_ok.out" 2>&1
rc=$?
check "one process: a 5.4 s checkpoint write of 0.6 s stages under a 2 s timeout completes ($(grep -o '[0-9]* ms$' "$TMP/one_ok.out" | tail -1))" \
    bash -c "[ $rc = 0 ] && [ -f '$TMP/one_ok/checkpoints/step_00000004/DONE' ]"
GATEDGPT_CKPT_SLOW_MS=5000 "$build/train_gpt" "${O[@]}" --log.run_dir="$TMP/one_hang" > "$TMP/one_hang.out" 2>&1
rc=$?
check "one process: a 5 s stage ends it with exit status 3, one line naming step 4 and the checkpoint write" \
    bash -c "[ $rc = 3 ] && [ \$(grep -c '^error: no progress for [0-9]* s at step 4 in checkpoint write (host ' '$TMP/one_hang.out') = 1 ] && [ ! -e '$TMP/one_hang/checkpoints/step_00000004' ]"

echo "watchdog: $pass passed, $fail failed"
[ "$fail" = 0 ]
