#!/usr/bin/env bash
# tests/test_jsonl.sh BUILD_DIR: every line of a run's log.jsonl is valid JSON (train/jsonl.c
# writes them all), an object with a "type" and a "step". The run (tests/ckpt_common.sh's tiny
# model, its spike detector skipping updates) writes every kind of record: run, eval, probe,
# sample, step, spike, checkpoint, resume (it stops after step 6 and is resumed), and a second
# run diverges for the non-finite spike records (nulls where the numbers would be NaN).
set -uo pipefail
build=$1
source tests/ckpt_common.sh   # the KJV shards, $PY, $tmp (removed at exit)
RUN=("${TINY[@]}" --train.steps=12 --log.val_every=3 --log.val_batches=1 --metrics.probe_every=3
     --log.sample_every=6 --log.sample_tokens=8 --checkpoint.checkpoint_every=3 --log.run_dir="$tmp/run")
"$build/train_gpt" "${RUN[@]}" --stop-after 6 > "$tmp/a.out" 2>&1 || { echo "FAIL: run to step 6"; tail -5 "$tmp/a.out"; exit 1; }
"$build/train_gpt" "${RUN[@]}" --resume auto > "$tmp/b.out" 2>&1 || { echo "FAIL: resumed run"; tail -5 "$tmp/b.out"; exit 1; }
"$build/train_gpt" --config configs/tiny_gated.ini --train.steps=6 --train.warmup_steps=0 --train.lr=1e30 \
    --train.grad_clip=0 --train.threads=1 --log.val_every=0 --metrics.probe_every=0 --log.sample_every=0 \
    --metrics.max_nonfinite=2 --log.run_dir="$tmp/nan" > "$tmp/nan.out" 2>&1
[ $? = 1 ] || { echo "FAIL: the diverging run did not stop"; tail -5 "$tmp/nan.out"; exit 1; }
"$PY" - "$tmp/run/log.jsonl" "$tmp/nan/log.jsonl" <<'PY'
import json, sys
def no_constant(c): raise ValueError(f"{c} is not JSON")   # NaN, Infinity: Python's extension
want = {"run", "eval", "probe", "sample", "step", "spike", "checkpoint", "resume"}
seen, bad, n = set(), 0, 0
for path in sys.argv[1:]:
    for i, line in enumerate(open(path, encoding="utf-8"), 1):
        n += 1
        try:
            r = json.loads(line, parse_constant=no_constant)
        except ValueError as e:
            print(f"FAIL: {path}:{i}: not valid JSON ({e}): {line[:200]}"); bad += 1; continue
        if not isinstance(r, dict) or not isinstance(r.get("type"), str) or not isinstance(r.get("step"), int):
            print(f"FAIL: {path}:{i}: no \"type\" or \"step\": {line[:200]}"); bad += 1; continue
        seen.add(r["type"] if r["type"] != "spike" or r["kind"] != "nonfinite" else "spike:nonfinite")
missing = (want | {"spike:nonfinite"}) - seen
if missing: print(f"FAIL: no {sorted(missing)} records"); bad += 1
print(f"{n} records parsed, types {sorted(seen)}")
sys.exit(1 if bad else 0)
PY
rc=$?
[ $rc = 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed"
exit $rc
