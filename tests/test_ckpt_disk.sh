#!/usr/bin/env bash
# tests/test_ckpt_disk.sh BUILD_DIR: checkpoint writes that fail. A run writes step 4, then a
# resumed run continues to step 12 while its checkpoint directory cannot take more:
#   full disk:   the directory is a 4.5 MiB tmpfs already holding the 3.4 MB step-4 checkpoint
#                (mounted in a private mount namespace: unshare -rm); where that is not allowed,
#                a file-size limit (ulimit -f, SIGXFSZ ignored) makes the writes fail with EFBIG
#   unwritable:  the directory bind-mounted read-only (unshare), else chmod 555 (not root), else
#                a path below a regular file
# With [checkpoint] on_write_error = continue: each failed write is one clear error line, the
# run trains to the end with the same losses as an uninterrupted run, step 4 still verifies and
# no partial checkpoint is left. With on_write_error = exit: the run stops with status 1 at
# the first failed write, step 4 verifies, and resuming from it reproduces the run.
set -uo pipefail
build=$1
source tests/ckpt_common.sh   # the KJV shards, $PY, $tmp (removed at exit)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
X=("${TINY[@]}" --train.steps=12 --checkpoint.checkpoint_every=4 --checkpoint.keep_last=1)
train=$(cd "$build" && pwd)/train_gpt
inspect="$(cd "$build" && pwd)/gatedgpt_ckpt inspect"

"$train" "${X[@]}" --log.run_dir="$tmp/ref" > "$tmp/ref.out" 2>&1 || { echo "FAIL: reference run"; cat "$tmp/ref.out"; exit 1; }
# can we mount in a private mount namespace? (try exactly what the test does)
have_ns=0
mkdir -p "$tmp/probe"
unshare -rm sh -c "mount -t tmpfs -o size=64k tmpfs '$tmp/probe' && mount --bind '$tmp/probe' '$tmp/probe' && mount -o remount,bind,ro '$tmp/probe'" 2>/dev/null && have_ns=1
[ "${CKPT_TEST_NO_NS:-0}" = 1 ] && have_ns=0   # to exercise the fallbacks

# $1 = full | ro, $2 = continue | exit, $3 = run dir: resume from step 4 with failing writes
failing_run() {
    local kind=$1 policy=$2 run=$3
    local args=("${X[@]}" --log.run_dir="$run" --resume "$run/checkpoints/step_00000004" --checkpoint.on_write_error="$policy")
    local cmd
    printf -v cmd '%q ' "$train" "${args[@]}"
    if [ $have_ns = 1 ] && [ "$kind" = full ]; then
        # a 4.5 MiB tmpfs over the checkpoint directory, holding a copy of step 4
        unshare -rm bash -c "set -e; cp -r '$run/checkpoints' '$run/ck.copy'; mount -t tmpfs -o size=4608k tmpfs '$run/checkpoints';
            cp -r '$run/ck.copy/.' '$run/checkpoints/'; df -k '$run/checkpoints' | tail -1 | awk '{print \"tmpfs: \" \$4 \" KiB free\"}' >&2;
            set +e; $cmd; rc=\$?; $inspect '$run/checkpoints/step_00000004' > '$run/inspect.out' 2>&1; echo \"inspect rc \$?\" >> '$run/inspect.out';
            ls -A '$run/checkpoints' > '$run/left.txt'; exit \$rc"
    elif [ "$kind" = full ]; then
        echo "note: mount namespaces unavailable: the full disk is simulated with a file-size limit (EFBIG)" >&2
        bash -c "trap '' XFSZ; ulimit -f 1500; $cmd"
    elif [ $have_ns = 1 ]; then
        unshare -rm bash -c "set -e; mount --bind '$run/checkpoints' '$run/checkpoints'; mount -o remount,bind,ro '$run/checkpoints'; set +e; $cmd"
    elif [ "$(id -u)" != 0 ]; then
        echo "note: mount namespaces unavailable: the directory is made unwritable with chmod 555" >&2
        chmod 555 "$run/checkpoints"; "$train" "${args[@]}"; local rc=$?; chmod 755 "$run/checkpoints"; return $rc
    else
        echo "note: mount namespaces unavailable and running as root: the checkpoint dir is a path below a regular file" >&2
        touch "$run/afile"; "$train" "${args[@]}" --checkpoint.dir="$run/afile/ck"
    fi
}

for kind in full ro; do
    for policy in continue exit; do
        run="$tmp/$kind-$policy"
        "$train" "${X[@]}" --log.run_dir="$run" --stop-after 4 > "$tmp/first.out" 2>&1 || { echo "FAIL: first run"; cat "$tmp/first.out"; exit 1; }
        failing_run $kind $policy "$run" > "$run/out.txt" 2> "$run/err.txt"
        rc=$?
        nerr=$(grep -c "^error: checkpoint" "$run/err.txt")
        echo "[$kind, on_write_error = $policy] exit $rc; $(grep -m1 '^error: checkpoint' "$run/err.txt")"
        grep -m1 "^note:\|^tmpfs:" "$run/err.txt"
        if [ "$policy" = continue ]; then
            check "$kind/$policy: exit 0" '[ "$rc" = 0 ]'
            check "$kind/$policy: both writes (steps 8, 12) failed with one error line each" '[ "$nerr" = 2 ] && [ "$(grep -c "checkpoint write failed (above); training continues" "$run/err.txt")" = 2 ]'
            check "$kind/$policy: losses equal the uninterrupted run" 'diff <(steps_of "$tmp/ref/log.jsonl") <(steps_of "$run/log.jsonl")'
        else
            check "$kind/$policy: exit 1 at the first failed write" '[ "$rc" = 1 ] && [ "$nerr" = 1 ] && grep -q "error: step 8: checkpoint write failed (above); stopping" "$run/err.txt"'
        fi
        check "$kind/$policy: the error says what to check" 'grep "^error: checkpoint" "$run/err.txt" | head -1 | grep -q -E "(disk|writable)"'
        if [ -f "$run/inspect.out" ]; then   # verified inside the namespace (the tmpfs is gone now)
            check "$kind/$policy: step 4 untouched, verifies" 'grep -q "inspect rc 0" "$run/inspect.out"'
            check "$kind/$policy: no partial checkpoint left" '[ "$(cat "$run/left.txt" | tr "\n" " ")" = "step_00000004 " ]'
        else
            check "$kind/$policy: step 4 untouched, verifies" '$inspect "$run/checkpoints/step_00000004" > /dev/null'
            check "$kind/$policy: no partial checkpoint left" '[ "$(ls -A "$run/checkpoints" | tr "\n" " ")" = "step_00000004 " ]'
        fi
        if [ "$policy" = exit ]; then   # and the run continues from step 4 once there is room
            "$train" "${X[@]}" --log.run_dir="$run" --resume auto > "$run/resume.out" 2>&1
            check "$kind/$policy: resumed from step 4 afterwards, losses equal the uninterrupted run" 'grep -q "continuing from .*step_00000004: step 4" "$run/resume.out" && diff <(steps_of "$tmp/ref/log.jsonl") <(steps_of "$run/log.jsonl")'
        fi
    done
done
finish
