#!/usr/bin/env bash
# tests/test_ckpt_async.sh BUILD_DIR: asynchronous checkpoints ([checkpoint] async = true,
# train/ckpt_async.h) against synchronous ones.
#  1. Byte-identical: a 12-step run checkpointing every 2 steps, once synchronous and once
#     asynchronous with GATEDGPT_CKPT_SLOW_MS=40 (a 40 ms pause at each stage of a write, so the
#     writer is still writing while the next steps train: the records' done_step shows it), both
#     in the same run_dir. Every file of every checkpoint is compared: model.bin and
#     rank_00000.bin with cmp; config.ini differs in exactly the `async` line (the config is
#     another one; so does its first line's size and checksum), DONE in exactly config.ini's size
#     and checksum line (and its own first line's checksum). The same with a [data] sources
#     mixture, whose position (data.bin) is part of the snapshot. The step records equal.
#  2. SIGKILL in the middle of an asynchronous write: GATEDGPT_CKPT_SLOW_MS=300; kill -9 once the
#     write of step 4 is underway (step_00000004.tmp/ exists, step 2 is complete). Then: no
#     step_N/ without DONE (nothing half-written under a final name), every complete checkpoint
#     verifies, --resume auto continues from step 2, and the resumed run's step records and final
#     checkpoint equal the uninterrupted run's.
#  3. Two processes (where mpirun is): the same comparison as 1 for rank_00000.bin, rank_00001.bin
#     and model.bin, the writers' completion agreed between the ranks.
#  4. The CUDA build on the emulator (where built): the same comparison, the snapshot copied from
#     device memory into pinned host memory.
# Also the memory plan's `snapshot` line (arithmetic: 3 x 4 bytes a parameter), and the watchdog
# over the wait for a write in flight.
set -uo pipefail
build=$1
source tests/ckpt_common.sh   # the KJV shards, $PY, $tmp (removed at exit), check, finish, steps_of
pid=
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$tmp"' EXIT
X=("${TINY[@]}" --train.steps=12 --checkpoint.checkpoint_every=2 --checkpoint.keep_last=0)

# compare_ckpts A B: every checkpoint of A's checkpoints/ against B's (B asynchronous)
compare_ckpts() {
    local a=$1/checkpoints b=$2/checkpoints d f bad=0 n=0
    [ "$(ls "$a" | tr '\n' ' ')" = "$(ls "$b" | tr '\n' ' ')" ] || { echo "different checkpoints: $(ls "$a" | tr '\n' ' ') / $(ls "$b" | tr '\n' ' ')"; return 1; }
    for d in $(ls "$a"); do
        [ "$(ls "$a/$d" | tr '\n' ' ')" = "$(ls "$b/$d" | tr '\n' ' ')" ] || { echo "$d: different files"; bad=1; continue; }
        for f in $(ls "$a/$d"); do
            n=$((n+1))
            case $f in
                config.ini)   # the async line differs, and so the first line's size and checksum
                    diff -q <(tail -n +2 "$a/$d/$f" | grep -v '^async = ') <(tail -n +2 "$b/$d/$f" | grep -v '^async = ') > /dev/null \
                        && grep -q '^async = false' "$a/$d/$f" && grep -q '^async = true ' "$b/$d/$f" || { echo "$d/$f: differs beyond the async line"; bad=1; } ;;
                DONE)         # config.ini's line (its size and checksum), and so the first line's checksum
                    diff -q <(tail -n +2 "$a/$d/$f" | grep -v '^file config.ini ') <(tail -n +2 "$b/$d/$f" | grep -v '^file config.ini ') > /dev/null \
                        && [ "$(grep -c '^file ' "$a/$d/$f")" -ge 3 ] || { echo "$d/DONE: differs beyond config.ini's line"; bad=1; } ;;
                *) cmp -s "$a/$d/$f" "$b/$d/$f" || { echo "$d/$f: differs"; bad=1; } ;;
            esac
        done
    done
    echo "compared $n files"
    [ "$bad" = 0 ] && [ "$n" -gt 0 ]
}

# overlaps LOG: the checkpoint records committed after a later step than the one they hold
overlaps() {
    grep '"type":"checkpoint"' "$1" | "$PY" -c '
import json, sys
print(sum(1 for l in sys.stdin if json.loads(l)["done_step"] > json.loads(l)["step"]))'
}

# ---- 1. the same files, synchronous and asynchronous
"$build/train_gpt" "${X[@]}" --log.run_dir="$tmp/run" > "$tmp/sync.out" 2>&1 || { echo "FAIL: synchronous run"; cat "$tmp/sync.out"; exit 1; }
mv "$tmp/run" "$tmp/sync"
GATEDGPT_CKPT_SLOW_MS=40 "$build/train_gpt" "${X[@]}" --checkpoint.async=true --log.run_dir="$tmp/run" > "$tmp/async.out" 2>&1 \
    || { echo "FAIL: asynchronous run"; cat "$tmp/async.out"; exit 1; }
mv "$tmp/run" "$tmp/async"
check "6 checkpoints, each file byte-identical to the synchronous write (config.ini and DONE: but the async line)" 'compare_ckpts "$tmp/sync" "$tmp/async"'
check "the step records equal the synchronous run's" 'diff <(steps_of "$tmp/sync/log.jsonl") <(steps_of "$tmp/async/log.jsonl")'
recs=$(grep '"type":"checkpoint"' "$tmp/async/log.jsonl")
check "6 checkpoint records, ok, async, with snapshot_ms, write_ms, write_cpu_ms, done_step" \
    '[ "$(echo "$recs" | grep -c "\"ok\":true,.*\"async\":true,\"snapshot_ms\":[0-9.]*,\"write_ms\":[0-9.]*,\"write_cpu_ms\":[0-9.]*,\"done_step\":[0-9]*")" = 6 ]'
# the writes overlapped training: committed steps later than they were taken (but the last)
check "5 writes overlapped later steps (done_step > step; the last is waited for at once)" '[ "$(overlaps "$tmp/async/log.jsonl")" = 5 ]'
check "synchronous records say async false" '[ "$(grep "\"type\":\"checkpoint\"" "$tmp/sync/log.jsonl" | grep -c "\"async\":false")" = 6 ]'

# ---- a [data] sources mixture: its position (data.bin, rank 0) is part of the snapshot
XM=("${X[@]}" --data.train_glob= --data.val_glob= "--data.sources=a:0.7:data/kjv/train_*.bin, b:0.3:data/kjv/val_*.bin")
"$build/train_gpt" "${XM[@]}" --log.run_dir="$tmp/run" > "$tmp/msync.out" 2>&1 || { echo "FAIL: mixture, synchronous run"; cat "$tmp/msync.out"; exit 1; }
mv "$tmp/run" "$tmp/msync"
GATEDGPT_CKPT_SLOW_MS=40 "$build/train_gpt" "${XM[@]}" --checkpoint.async=true --log.run_dir="$tmp/run" > "$tmp/masync.out" 2>&1 \
    || { echo "FAIL: mixture, asynchronous run"; cat "$tmp/masync.out"; exit 1; }
mv "$tmp/run" "$tmp/masync"
check "mixture: every file byte-identical to the synchronous write, data.bin included" \
    'compare_ckpts "$tmp/msync" "$tmp/masync" && [ -f "$tmp/masync/checkpoints/step_00000012/data.bin" ] && [ "$(overlaps "$tmp/masync/log.jsonl")" = 5 ]'

# ---- the memory plan: a `snapshot` line with async on (rank 0's weights, m and v: 3 x 4 bytes a
# parameter, the count from the master line), none without; host memory apart on a CUDA layout
"$build/train_gpt" "${X[@]}" --checkpoint.async=true --check > "$tmp/plan.out" 2>&1
np=$(sed -nE 's/^  master .*\(([0-9]+) x 4 bytes.*/\1/p' "$tmp/plan.out")
snap=$(awk '$1 == "snapshot" {print $2}' "$tmp/plan.out")
check "planner: snapshot line = 12 x $np parameters ($snap bytes)" '[ -n "$np" ] && [ "$snap" = "$((12 * np))" ]'
"$build/train_gpt" "${X[@]}" --check --layout cuda-bf16 --device h100 --checkpoint.async=true > "$tmp/plan2.out" 2>&1
check "planner (cuda-bf16 layout): the snapshot listed apart as host memory" 'grep -qE "^  snapshot +$((12 * np)) .*host, not on the GPU" "$tmp/plan2.out"'
"$build/train_gpt" "${X[@]}" --check > "$tmp/plan3.out" 2>&1
check "planner: no snapshot line without async" '! grep -q "^  snapshot" "$tmp/plan3.out" && grep -q "^  master" "$tmp/plan3.out"'

# ---- 2. SIGKILL in the middle of an asynchronous write
run="$tmp/kill"; ck="$run/checkpoints"
GATEDGPT_CKPT_SLOW_MS=300 "$build/train_gpt" "${X[@]}" --checkpoint.async=true --log.run_dir="$run" --resume auto > "$tmp/kill.out" 2>&1 &
pid=$!
for _ in $(seq 3000); do [ -d "$ck/step_00000004.tmp" ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.01; done
sleep 1.0   # inside the write: it lasts > 2 s (the pause in checkpoint_begin, then 6 pauses of 300 ms on the writer)
ls "$ck/step_00000004.tmp" > "$tmp/inflight" 2>/dev/null
kill -9 $pid 2>/dev/null; killed=$?
wait $pid 2>/dev/null
pid=
check "the kill landed inside the write of step 4 (step_00000004.tmp/ held: $(tr '\n' ' ' < "$tmp/inflight"))" '[ "$killed" = 0 ] && [ -s "$tmp/inflight" ] && [ -d "$ck/step_00000004.tmp" ]'
half=0
for d in $(ls "$ck" | grep -E '^step_[0-9]{8}$'); do [ -f "$ck/$d/DONE" ] || half=$((half+1)); done
check "nothing half-written under a final name (no step_N/ without DONE): $(ls "$ck" | tr '\n' ' ')" '[ "$half" = 0 ] && [ "$(ls "$ck" | grep -E "^step_[0-9]{8}$" | tr "\n" " ")" = "step_00000002 " ]'
check "the complete checkpoint verifies" '"$build/gatedgpt_ckpt" inspect "$ck/step_00000002" > /dev/null'
"$build/train_gpt" "${X[@]}" --checkpoint.async=true --log.run_dir="$run" --resume auto > "$tmp/resumed.out" 2>&1
rc=$?
check "--resume auto continues from the previous checkpoint (step 2) and finishes" '[ "$rc" = 0 ] && grep -q "resume: continuing from $ck/step_00000002: step 2," "$tmp/resumed.out"'
check "the resumed run's step records equal the uninterrupted run's" 'diff <(steps_of "$tmp/sync/log.jsonl") <(steps_of "$run/log.jsonl")'
check "its final checkpoint equals the uninterrupted run's (model.bin, rank_00000.bin)" \
    'cmp "$tmp/sync/checkpoints/step_00000012/model.bin" "$ck/step_00000012/model.bin" && cmp "$tmp/sync/checkpoints/step_00000012/rank_00000.bin" "$ck/step_00000012/rank_00000.bin"'
check "no leftover step_N.tmp/" '! ls "$ck" | grep -q "\.tmp$"'

# ---- the watchdog ([train] hang_timeout_s = 2) over the wait for a write in flight (the run's
# only checkpoint, step 2, waited for at once): a writer stuck 5 s before its first file
# (GATEDGPT_TEST_CKPT_WRITE_DELAY_MS, no progress meanwhile) ends the job with status 3 in that
# phase; a 3 s write of 0.5 s stages (each re-arms it) completes
W=("${TINY[@]}" --train.steps=2 --checkpoint.checkpoint_every=2 --checkpoint.async=true --train.hang_timeout_s=2)
GATEDGPT_TEST_CKPT_WRITE_DELAY_MS=5000 "$build/train_gpt" "${W[@]}" --log.run_dir="$tmp/wd1" > "$tmp/wd1.out" 2>&1
rc=$?
check "watchdog: a stuck writer ends the job (status $rc, want 3) in the wait for the asynchronous write" \
    '[ "$rc" = 3 ] && grep -q "no progress for 2 s at step 2 in waiting for the asynchronous checkpoint write" "$tmp/wd1.out"'
GATEDGPT_CKPT_SLOW_MS=500 "$build/train_gpt" "${W[@]}" --log.run_dir="$tmp/wd2" > "$tmp/wd2.out" 2>&1
rc=$?
check "watchdog: a 3 s asynchronous write of 0.5 s stages completes under a 2 s timeout (status $rc)" \
    '[ "$rc" = 0 ] && [ -f "$tmp/wd2/checkpoints/step_00000002/DONE" ]'

# ---- 3. two processes (one thread each; mpirun as root allowed as in tests/mpi_common.sh)
if command -v mpirun > /dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
    M=(mpirun -np 2 --oversubscribe)
    "${M[@]}" "$build/train_gpt" "${X[@]}" --log.run_dir="$tmp/run" > "$tmp/sync2.out" 2>&1 || { echo "FAIL: 2-process synchronous run"; tail "$tmp/sync2.out"; exit 1; }
    mv "$tmp/run" "$tmp/sync2"
    GATEDGPT_CKPT_SLOW_MS=40 "${M[@]}" "$build/train_gpt" "${X[@]}" --checkpoint.async=true --log.run_dir="$tmp/run" > "$tmp/async2.out" 2>&1 \
        || { echo "FAIL: 2-process asynchronous run"; tail "$tmp/async2.out"; exit 1; }
    mv "$tmp/run" "$tmp/async2"
    check "2 processes: every file byte-identical to the synchronous write (2 rank files each)" \
        'compare_ckpts "$tmp/sync2" "$tmp/async2" && [ -f "$tmp/async2/checkpoints/step_00000012/rank_00001.bin" ]'
    check "2 processes: 5 writes overlapped later steps" '[ "$(overlaps "$tmp/async2/log.jsonl")" = 5 ]'
else
    echo "skip: 2 processes (no mpirun)"
fi
# ---- 4. the CUDA build on the emulator (tests/cudaemu): the snapshot in pinned memory
# (cudaMallocHost), copied from device memory; 4 steps, checkpoints at 2 and 4
if [ -x "$build/train_gpt_cudaemu" ] && [ -x "$build/tests/test_gpu_ops_emu" ] && GATEDGPT_GPU_EMU=1 "$build/tests/test_gpu_ops_emu" --has-device > /dev/null 2>&1; then
    X4=("${TINY[@]}" --train.steps=4 --checkpoint.checkpoint_every=2 --checkpoint.keep_last=0)
    GATEDGPT_GPU_EMU=1 "$build/train_gpt_cudaemu" "${X4[@]}" --log.run_dir="$tmp/run" > "$tmp/emu.out" 2>&1 || { echo "FAIL: emulator synchronous run"; tail "$tmp/emu.out"; exit 1; }
    mv "$tmp/run" "$tmp/emu_sync"
    GATEDGPT_GPU_EMU=1 GATEDGPT_CKPT_SLOW_MS=40 "$build/train_gpt_cudaemu" "${X4[@]}" --checkpoint.async=true --log.run_dir="$tmp/run" > "$tmp/emu2.out" 2>&1 \
        || { echo "FAIL: emulator asynchronous run"; tail "$tmp/emu2.out"; exit 1; }
    mv "$tmp/run" "$tmp/emu_async"
    check "CUDA (emulator): every file byte-identical to the synchronous write" 'compare_ckpts "$tmp/emu_sync" "$tmp/emu_async"'
    check "CUDA (emulator): the write of step 2 overlapped step 3" '[ "$(overlaps "$tmp/emu_async/log.jsonl")" = 1 ]'
else
    echo "skip: the CUDA build on the emulator (train_gpt_cudaemu not built)"
fi
finish
