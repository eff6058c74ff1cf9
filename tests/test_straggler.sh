#!/usr/bin/env bash
# tests/test_straggler.sh BUILD_DIR: the straggler report (train/straggler.h, docs/metrics.md)
# under mpirun, 3 processes on the CPU, a report every 10 steps (log_every = 10).
#  1. healthy, 60 steps: the step records at steps 10, 20, ... 60 (and only those) carry the
#     report's fields; no warning, no "straggler" record.
#  2. rank 1 slowed on purpose (GATEDGPT_TEST_SLOW_RANK=1 GATEDGPT_TEST_SLOW_MS=100: test-only,
#     100 ms of sleep in each micro-step's forward, 200 ms a step), 30 steps: each of the 3
#     reports names rank 1 the slowest; the third (step 30) warns, naming rank 1 and its host,
#     and the log gets a "straggler" record for it.
# The factor, 3, is chosen from the healthy ratios measured on this 2-core machine shared with
# other jobs (3 oversubscribed processes): slowest/median reached 2.36 over 20 reports of 5
# steps and 1.64 over 10 reports of 10 steps (docs/distributed.md); 3 reports in a row above 3
# did not occur. With 3 processes a factor of 3 also tells the median from the mean: no rank's
# time can exceed 3x the mean of 3 non-negative times, so a report that compared with the mean
# would never warn (the mutant straggler_vs_mean).
set -uo pipefail
build=$1
source tests/mpi_common.sh
mpi_require
kjv_shards
trap 'rm -rf "$TMP"' EXIT
export OMPI_MCA_rmaps_base_oversubscribe=1
X=(--config configs/tiny_gated.ini --model.n_layer=2 --model.d_model=32 --model.n_head=2 --model.n_kv_head=1
   --model.head_dim=16 --model.d_ff=64 --model.max_seq_len=32 --train.batch_size=2 --train.seq_len=32
   --train.tokens_per_step=384 --train.warmup_steps=2 --train.threads=1 --log.log_every=10
   --log.val_every=0 --metrics.probe_every=0 --log.sample_every=0 --checkpoint.checkpoint_every=0
   --train.straggler_factor=3 --train.straggler_reports=3)
# the step numbers of the records that carry the report, and a field of them
report_steps() { grep '"type":"step"' "$1" | grep '"compute_ms_max"' | sed -E 's/.*"step":([0-9]+),.*/\1/' | tr '\n' ' '; }
field() { grep '"type":"step"' "$1" | grep -o "\"$2\":[0-9.]*" | sed 's/.*://' | tr '\n' ' '; }

# ---- 1. healthy ----
mpirun -np 3 "$build/train_gpt" "${X[@]}" --train.steps=60 --log.run_dir="$TMP/ok" > "$TMP/ok.out" 2>&1 || { echo "FAIL: healthy run"; tail -5 "$TMP/ok.out"; exit 1; }
check "healthy: the report at steps 10 20 30 40 50 60" [ "$(report_steps "$TMP/ok/log.jsonl")" = "10 20 30 40 50 60 " ]
"$PY" - "$TMP/ok/log.jsonl" <<'PYEOF'
import json, sys
rs = [r for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "step" and "compute_ms_max" in r]
print("healthy: slowest/median per report: " + " ".join("%.2f" % (r["compute_ms_max"] / r["compute_ms_median"]) for r in rs)
      + " | median compute %.1f ms per 10 steps" % sorted(r["compute_ms_median"] for r in rs)[len(rs) // 2])
ok = all(r["compute_ms_min"] <= r["compute_ms_median"] <= r["compute_ms_max"] and 0 <= r["rank_fastest"] < 3 and 0 <= r["rank_slowest"] < 3 for r in rs)
sys.exit(0 if ok else 1)
PYEOF
check "healthy: min <= median <= max, ranks in 0..2" [ $? = 0 ]
check "healthy: no straggler warning" bash -c "! grep -q 'is a straggler' '$TMP/ok.out'"
check "healthy: no straggler record" bash -c "! grep -q '\"type\":\"straggler\"' '$TMP/ok/log.jsonl'"

# ---- 2. rank 1 slowed ----
GATEDGPT_TEST_SLOW_RANK=1 GATEDGPT_TEST_SLOW_MS=100 mpirun -np 3 "$build/train_gpt" "${X[@]}" --train.steps=30 \
    --log.run_dir="$TMP/slow" > "$TMP/slow.out" 2>&1 || { echo "FAIL: slowed run"; tail -5 "$TMP/slow.out"; exit 1; }
echo "slowed: slowest $(field "$TMP/slow/log.jsonl" rank_slowest)| max ms $(field "$TMP/slow/log.jsonl" compute_ms_max)| median ms $(field "$TMP/slow/log.jsonl" compute_ms_median)"
check "slowed: each of the 3 reports names rank 1 the slowest" [ "$(field "$TMP/slow/log.jsonl" rank_slowest)" = "1 1 1 " ]
grep 'is a straggler' "$TMP/slow.out"
host=$(hostname)
check "slowed: one warning, at the third report, naming rank 1 and its host ($host)" \
    bash -c "[ \$(grep -c '^warning: rank 1 of 3 (host $host) is a straggler: .* in 3 reports in a row' '$TMP/slow.out') = 1 ] && [ \$(grep -c 'is a straggler' '$TMP/slow.out') = 1 ]"
check "slowed: the log's straggler record: step 30, rank 1, 3 reports" grep -q '"type":"straggler","step":30,"rank":1,.*"reports":3' "$TMP/slow/log.jsonl"

echo "straggler: $pass passed, $fail failed"
[ "$fail" = 0 ]
