#!/usr/bin/env bash
# tests/test_tb.sh BUILD_DIR: [log] tensorboard = true on a run killed past a checkpoint and
# resumed. tests/ckpt_common.sh's tiny model (its spike detector writes spike records), eval and
# probe every 2 steps, a checkpoint every 3; an injected failure at step 9 (after steps 7 and 8
# were logged past the step-6 checkpoint), then --resume auto to step 12. tests/tb_check.py reads
# the two event files with a reader of its own (CRCs, wire types, the restart marker) and finds
# each (tag, step) once and every number of log.jsonl, as float32; without the marker's purge,
# exactly the numbers the killed run logged after step 6 would be there twice. Then: off by
# default (no tb/), and a tb/ that cannot be made is one error line naming it.
set -uo pipefail
build=$1
source tests/ckpt_common.sh   # the KJV shards, $PY, $tmp (removed at exit)
X=("${TINY[@]}" --train.steps=12 --checkpoint.checkpoint_every=3 --log.val_every=2 --log.val_batches=1
   --metrics.probe_every=2 --log.tensorboard=true --log.run_dir="$tmp/run")

GATEDGPT_FAIL_RANK=0 GATEDGPT_FAIL_STEP=9 "$build/train_gpt" "${X[@]}" > "$tmp/a.out" 2>&1
check "the first launch stopped at the injected failure" '[ $? = 1 ] && grep -q "injected failure at step 9" "$tmp/a.out"'
cp "$tmp/run/log.jsonl" "$tmp/killed.jsonl"
"$build/train_gpt" "${X[@]}" --resume auto > "$tmp/b.out" 2>&1 || { echo "FAIL: resumed run"; tail -5 "$tmp/b.out"; exit 1; }
check "resumed from step 6" 'grep -q "step_00000006: step 6" "$tmp/b.out"'
check "two event files" '[ "$(ls "$tmp/run/tb" | grep -c "^events\.out\.tfevents\.[0-9]\{10\}\.")" = 2 ]'
# the numbers the killed run logged after its last checkpoint: what the restart marker drops
n_after=$("$PY" -c '
import json, sys
sys.path.insert(0, "tests")
from tb_check import numbers, tag_of
n = 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["type"] != "run" and r["step"] > 6:
        n += sum(tag_of(r, p) is not None for p, _ in numbers({k: v for k, v in r.items() if k not in ("type", "step")}, ""))
print(n)' "$tmp/killed.jsonl")
check "the killed run logged numbers after step 6 ($n_after)" '[ "$n_after" -gt 0 ]'
check "event files = log.jsonl, each step once (tests/tb_check.py)" '"$PY" tests/tb_check.py "$tmp/run" --expect-purged "$n_after" --require step/loss,eval/val_loss,probe/f_attn/layer_1,spike/loss/z,checkpoint/ms > "$tmp/check.out"; rc=$?; cat "$tmp/check.out"; [ $rc = 0 ]'

# off by default: no tb/
"$build/train_gpt" "${TINY[@]}" --train.steps=2 --log.run_dir="$tmp/off" > "$tmp/off.out" 2>&1 || { echo "FAIL: run without tensorboard"; tail -5 "$tmp/off.out"; exit 1; }
check "no tb/ when [log] tensorboard is off" '[ ! -e "$tmp/off/tb" ]'
# tb/ cannot be made (a file of that name): one line naming it, exit 1
mkdir -p "$tmp/bad" && touch "$tmp/bad/tb"
"$build/train_gpt" "${TINY[@]}" --train.steps=2 --log.tensorboard=true --log.run_dir="$tmp/bad" > "$tmp/bad.out" 2>&1
rc=$?
check "an uncreatable tb/ is an error naming it" '[ $rc = 1 ] && grep -q "^error: cannot create the TensorBoard event file $tmp/bad/tb/events\.out\.tfevents\.[0-9]*\.[^ ]* (\[log\] tensorboard = true): Not a directory" "$tmp/bad.out" && [ ! -e "$tmp/bad/log.jsonl" ]'
finish
