#!/usr/bin/env bash
# bench/bench_ckpt.sh: what a checkpoint costs the step loop, synchronous vs asynchronous
# ([checkpoint] async, train/ckpt_async.h; docs/performance.md "Asynchronous checkpoints").
# GPT-2 124M (bench/configs/gpt2_124m_b4t64.ini: B=4 T=64) on the KJV shards (prepared if
# missing), a checkpoint every --every steps (keep_last 1), once synchronous and once
# asynchronous, for each thread count of --threads. From the step records (the first step, a
# warm-up, left out) and the checkpoint records:
#   median      the median step time (ms) of the steps that overlap no write
#   overlap     async: the steps that ran while a write was in flight (the steps after a
#               checkpoint's step up to its done_step): the worst and the mean / median
#   stall       the loop's time between the records of a checkpoint step and the next step,
#               beyond that step's own time: the synchronous write itself, or the asynchronous
#               snapshot + the commit (mean over the checkpoints)
#   write, cpu  the checkpoint records: the write's wall time and (async) the writer thread's CPU
#   total       the run's elapsed time at its last step record
# The machine may be shared: the numbers are only comparable side by side, within one run.
#
# usage: bench/bench_ckpt.sh [--steps 17] [--every 4] [--threads "1 2"] [--build build] [--dir DIR]
#   --dir: where the checkpoints go (default: a scratch directory under $TMPDIR; the disk matters)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
steps=17 every=4 threads="1 2" build=build dir=""
while [ $# -gt 0 ]; do
    case "$1" in
        --steps) steps=$2; shift 2 ;;
        --every) every=$2; shift 2 ;;
        --threads) threads=$2; shift 2 ;;
        --build) build=$2; shift 2 ;;
        --dir) dir=$2; shift 2 ;;
        -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench_ckpt: error: unknown argument '$1' (see --help)" >&2; exit 1 ;;
    esac
done
[ -x "$build/train_gpt" ] || { echo "bench_ckpt: error: $build/train_gpt missing: run make first" >&2; exit 1; }
bash scripts/prepare_kjv.sh "$build/prepare" >/dev/null
tmp=$(mktemp -d ${dir:+-p "$dir"})
trap 'rm -rf "$tmp"' EXIT
config=bench/configs/gpt2_124m_b4t64.ini
common=(--config "$config" --data.train_glob='data/kjv/train_*.bin' --data.val_glob= --train.steps="$steps"
        --train.warmup_steps=1 --log.val_every=0 --log.sample_every=0 --metrics.probe_every=0 --log.log_every=1
        --checkpoint.checkpoint_every="$every" --checkpoint.keep_last=1)
echo "bench_ckpt: $config, $steps steps, a checkpoint every $every, threads: $threads; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for t in $threads; do
    for mode in false true; do
        echo "bench_ckpt: threads $t, async $mode" >&2
        "$build/train_gpt" "${common[@]}" --train.threads="$t" --checkpoint.async="$mode" --log.run_dir="$tmp/t${t}_$mode" \
            > "$tmp/t${t}_$mode.out" 2>&1 || { tail "$tmp/t${t}_$mode.out"; exit 1; }
    done
done
echo "bench_ckpt: load after the runs $(cut -d' ' -f1-3 /proc/loadavg)" >&2
python3 - "$tmp" "$threads" <<'EOF'
import json, statistics, sys
tmp, threads = sys.argv[1], sys.argv[2].split()
print(f"\n{'threads':>7} {'mode':>5} {'median':>9} {'worst overlap':>14} {'mean overlap':>13} {'stall':>9} "
      f"{'write':>9} {'writer cpu':>10} {'total':>8}")
for t in threads:
    for mode in ("false", "true"):
        recs = [json.loads(l) for l in open(f"{tmp}/t{t}_{mode}/log.jsonl")]
        steps = {r["step"]: r for r in recs if r["type"] == "step"}
        cks = [r for r in recs if r["type"] == "checkpoint" and r.get("ok")]
        overlap = set()
        for c in cks:
            if c.get("async"): overlap.update(range(c["step"] + 1, c["done_step"] + 1))
        first = min(steps)
        free = [steps[s]["ms"] for s in steps if s != first and s not in overlap]
        med = statistics.median(free)
        ov = [steps[s]["ms"] / med for s in sorted(overlap) if s in steps and s != first]
        stall = [(steps[c["step"] + 1]["elapsed_s"] - steps[c["step"]]["elapsed_s"]) * 1e3 - steps[c["step"] + 1]["ms"]
                 for c in cks if c["step"] + 1 in steps]
        write = [c.get("write_ms", c["ms"]) for c in cks]
        cpu = [c["write_cpu_ms"] for c in cks if "write_cpu_ms" in c]
        name = "async" if mode == "true" else "sync"
        w = f"{max(ov):.3f}x" if ov else "-"
        m = f"{statistics.mean(ov):.3f}x" if ov else "-"
        print(f"{t:>7} {name:>5} {med:>7.0f}ms {w:>14} {m:>13} {statistics.mean(stall):>7.0f}ms {statistics.mean(write):>7.0f}ms "
              f"{(f'{statistics.mean(cpu):.0f}ms' if cpu else '-'):>10} {steps[max(steps)]['elapsed_s']:>7.1f}s")
        if ov: print(f"{'':>13} overlapping steps / median: " + " ".join(f"{x:.3f}" for x in ov))
EOF
