#!/usr/bin/env bash
# tests/test_crash.sh BUILD_DIR: SIGKILL during checkpoint writes. A 24-step run checkpoints
# every 2 steps with GATEDGPT_CKPT_SLOW_MS=60 (a 60 ms pause at each of the 9 stages of a write,
# so a write lasts over 0.5 s and a kill can land in it). Six times: start the trainer with
# --resume auto, wait until a checkpoint write begins (a step_N.tmp/ appears), wait a random
# 0-400 ms more, SIGKILL it, and record what the kill left: a step_N.tmp/ (killed before the
# rename), a step_N/ without DONE (between the rename and DONE), or neither. Each time: every
# complete checkpoint left must verify, and the next start must resume from the newest complete
# one. At the end the log's step records and the last checkpoint must equal an uninterrupted
# run's. The kill times come from bash's RANDOM seeded with CRASH_SEED (default 1, printed first
# and in the summary): the same seed gives the same targets and delays, so a failure can be rerun
# with CRASH_SEED=N (the moments a kill lands at still depend on the machine's speed).
set -uo pipefail
build=$1
source tests/ckpt_common.sh   # the KJV shards, $PY, $tmp (removed at exit)
pid=
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$tmp"' EXIT
seed=${CRASH_SEED:-1}
case "$seed" in ''|*[!0-9]*) echo "FAIL: CRASH_SEED must be a non-negative integer, got '$seed'"; exit 1 ;; esac
echo "crash test: CRASH_SEED=$seed (rerun with CRASH_SEED=$seed bash $0 $build)"
RANDOM=$seed
X=("${TINY[@]}" --train.steps=24 --checkpoint.checkpoint_every=2 --checkpoint.keep_last=2)

"$build/train_gpt" "${X[@]}" --log.run_dir="$tmp/ref" > "$tmp/ref.out" 2>&1 || { echo "FAIL: reference run"; cat "$tmp/ref.out"; exit 1; }

run="$tmp/run"; ck="$run/checkpoints"
# the newest step_N with DONE (0 when none)
newest_complete() {
    local n=0 d
    for d in $(ls "$ck" 2>/dev/null | grep -E '^step_[0-9]{8}$' | sort); do [ -f "$ck/$d/DONE" ] && n=$((10#${d#step_})); done
    echo $n
}

kills=0; before_rename=0; before_done=0; pruning=0; resumed_ok=0; expect=0
for k in 1 2 3 4 5 6; do
    GATEDGPT_CKPT_SLOW_MS=60 "$build/train_gpt" "${X[@]}" --log.run_dir="$run" --resume auto > "$tmp/run$k.out" 2>&1 &
    pid=$!
    # the resume decision of this start
    for _ in $(seq 3000); do grep -q -E "resume: (continuing from|no complete checkpoint)" "$tmp/run$k.out" 2>/dev/null && break; sleep 0.01; done
    if [ "$expect" = 0 ]; then
        check "start $k: fresh start (no complete checkpoint yet)" 'grep -q "resume: no complete checkpoint" "$tmp/run$k.out"'
    else
        grep -q "resume: continuing from $ck/step_$(printf %08d "$expect"): step $expect," "$tmp/run$k.out" && resumed_ok=$((resumed_ok+1))
        check "start $k: resumed from the newest complete checkpoint, step $expect" 'grep -q "resume: continuing from $ck/step_$(printf %08d "$expect"): step $expect," "$tmp/run$k.out"'
    fi
    # wait until the write of a checkpoint 1-3 writes past the resume point begins, then a random moment
    target=$((expect + 2 * (1 + RANDOM % 3))); [ $target -gt 24 ] && target=24
    for _ in $(seq 2000); do [ -d "$ck/step_$(printf %08d $target).tmp" ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.005; done
    delay=$((RANDOM % 400))
    sleep "0.$(printf %03d $delay)"
    kill -9 $pid 2>/dev/null && kills=$((kills+1))
    wait $pid 2>/dev/null
    pid=
    expect=$(newest_complete)
    state="between writes"
    tmpd=$(ls "$ck" | grep '\.tmp$' | head -1)
    if [ -n "$tmpd" ]; then
        state="inside the write, before the rename ($tmpd holds: $(ls "$ck/$tmpd" | tr '\n' ' '))"; before_rename=$((before_rename+1))
    else
        for d in $(ls "$ck" | grep -E '^step_[0-9]{8}$'); do
            [ -f "$ck/$d/DONE" ] && continue
            if [ $((10#${d#step_})) -gt "$expect" ]; then state="inside the write, after the rename, before DONE ($d)"; before_done=$((before_done+1))
            else state="while removing the old $d (retention)"; pruning=$((pruning+1)); fi
        done
    fi
    bad=0
    for d in $(ls "$ck" | grep -E '^step_[0-9]{8}$'); do
        [ -f "$ck/$d/DONE" ] || continue
        "$build/gatedgpt_ckpt" inspect "$ck/$d" > /dev/null 2> "$tmp/verify.err" || { bad=$((bad+1)); cat "$tmp/verify.err"; }
    done
    check "kill $k: every complete checkpoint verifies" '[ "$bad" = 0 ]'
    echo "kill $k: killed $delay ms after the write of step $target began (during or after it): $state; newest complete checkpoint: step $expect"
done
"$build/train_gpt" "${X[@]}" --log.run_dir="$run" --resume auto > "$tmp/final.out" 2>&1
rc=$?
check "final start: resumed from step $expect and finished" '[ "$rc" = 0 ] && grep -q "resume: continuing from $ck/step_$(printf %08d "$expect"): step $expect," "$tmp/final.out"'
[ "$expect" -gt 0 ] && grep -q "resume: continuing from $ck/step_$(printf %08d "$expect")" "$tmp/final.out" && resumed_ok=$((resumed_ok+1))
in_write=$((before_rename + before_done))
check "at least 4 of 6 kills landed inside a checkpoint write" '[ "$in_write" -ge 4 ]'
check "the log's 24 step records equal the uninterrupted run's" 'diff <(steps_of "$tmp/ref/log.jsonl") <(steps_of "$run/log.jsonl")'
check "the final checkpoint equals the uninterrupted run's (model.bin, rank_00000.bin)" 'cmp "$tmp/ref/checkpoints/step_00000024/model.bin" "$ck/step_00000024/model.bin" && cmp "$tmp/ref/checkpoints/step_00000024/rank_00000.bin" "$ck/step_00000024/rank_00000.bin"'
check "no leftovers: only the 2 newest checkpoints" '[ "$(ls "$ck" | tr "\n" " ")" = "step_00000022 step_00000024 " ]'
echo "crash test (seed $seed): $kills SIGKILLs, $in_write inside a write ($before_rename before the rename, $before_done between rename and DONE), $pruning while removing an old one; $resumed_ok restarts resumed from the newest complete checkpoint; loss sequence and final state equal the uninterrupted run"
[ "$fail" = 0 ] || echo "crash test failed with CRASH_SEED=$seed: rerun with CRASH_SEED=$seed bash $0 $build"
finish
