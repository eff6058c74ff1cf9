#!/usr/bin/env bash
# tests/test_ablate.sh BUILD_DIR: scripts/ablate.sh on a two-run list of 3-step runs on the KJV
# data: per-line overrides reach their run only, the runs and the report are written, what
# differs is printed; a bad list line and a list that does not exist are refused. Sweeps: --lrs
# crossed with --seeds (4 runs of 2 steps): the run names and order, each run's lr and seed, a
# diverged run (lr 1e30) reported and the sweep going on; bad --lrs / --seeds values and
# overrides that clash with a sweep refused before anything runs.
set -u
build=$(cd "$1" && pwd)
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
bash scripts/prepare_kjv.sh "$build/prepare" >/dev/null || { echo "FAIL: prepare_kjv.sh"; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
pass=0 fail=0
check() { local what=$1; shift; if "$@"; then pass=$((pass + 1)); else echo "FAIL: $what"; fail=$((fail + 1)); fi; }

printf '# a comment\n\ntiny_baseline.ini --train.lr=2e-3   # its own lr\ntiny_gated.ini\n' >"$TMP/pair.txt"
bash scripts/ablate.sh "$TMP/pair.txt" --steps 3 --out "$TMP/out" --build "$build" -- \
    --train.warmup_steps=1 --log.val_every=3 --log.val_batches=1 --metrics.probe_every=3 \
    --log.sample_every=0 >"$TMP/log" 2>&1
rc=$?
check "ablate.sh exits 0 (rc $rc; log: $(tail -3 "$TMP/log"))" [ $rc -eq 0 ]
check "the baseline ran with its own lr 2e-3" grep -qE '^lr = 0.002 ' "$TMP/out/tiny_baseline/config.ini"
check "the gated run kept the config's lr 1e-3" grep -qE '^lr = 0.001 ' "$TMP/out/tiny_gated/config.ini"
check "common overrides reached both runs" grep -qE '^steps = 3 ' "$TMP/out/tiny_gated/config.ini"
for r in tiny_baseline tiny_gated; do
    check "3 step records in run $r" [ "$(grep -c '"type":"step"' "$TMP/out/$r/log.jsonl")" = 3 ]
done
check "difference printed" grep -qF "tiny_gated differs from tiny_baseline in: [model] attn_gate = elementwise" "$TMP/log"
check "report written with both runs" grep -qF "**tiny_gated**" "$TMP/out/report.md"

printf 'tiny_gated.ini lr=5\n' >"$TMP/bad.txt"
bash scripts/ablate.sh "$TMP/bad.txt" --steps 3 --out "$TMP/bad" --build "$build" >"$TMP/badlog" 2>&1
rc=$?
check "a bad override in the list is refused (rc $rc)" [ $rc -ne 0 ]
check "... naming the line and the word" grep -qF "bad.txt:1: 'lr=5' is not an override --section.key=value" "$TMP/badlog"
check "... before anything ran" [ ! -e "$TMP/bad/tiny_gated/log.jsonl" ]
bash scripts/ablate.sh "$TMP/none.txt" >"$TMP/nolog" 2>&1
rc=$?
check "a missing list is refused (rc $rc)" [ $rc -ne 0 ]
check "... saying it is not found" grep -qF "not found" "$TMP/nolog"

# ---- sweeps: --lrs crossed with --seeds and the list; names DIR/<config>_lr<V>_s<S>; a diverged
# run (lr 1e30, no clipping: the non-finite guard stops it) is a result, the sweep goes on ----
printf 'tiny_baseline.ini\n' >"$TMP/one.txt"
bash scripts/ablate.sh "$TMP/one.txt" --steps 2 --lrs 2e-3,1e30 --seeds 7,8 --out "$TMP/sw" --build "$build" -- \
    --train.warmup_steps=0 --train.grad_clip=0 --metrics.max_nonfinite=1 --log.val_every=2 \
    --log.val_batches=1 --metrics.probe_every=0 --log.sample_every=0 >"$TMP/swlog" 2>&1
rc=$?
check "sweep exits 0 with a diverged run in it (rc $rc; log: $(tail -3 "$TMP/swlog"))" [ $rc -eq 0 ]
order=$(sed -n 's/^ablate: \[[0-9]*\/4\] \([^ ]*\): .*/\1/p' "$TMP/swlog" | paste -sd ' ')
check "4 runs, seed outermost, named <config>_lr<V>_s<S>: got '$order'" \
    [ "$order" = "tiny_baseline_lr2e-3_s7 tiny_baseline_lr1e30_s7 tiny_baseline_lr2e-3_s8 tiny_baseline_lr1e30_s8" ]
check "run lr2e-3_s8 trained at lr 2e-3" grep -qE '^lr = 0.002 ' "$TMP/sw/tiny_baseline_lr2e-3_s8/config.ini"
check "... with seed 8" grep -qE '^seed = 8 ' "$TMP/sw/tiny_baseline_lr2e-3_s8/config.ini"
check "run lr1e30_s7 has seed 7" grep -qE '^seed = 7 ' "$TMP/sw/tiny_baseline_lr1e30_s7/config.ini"
check "run lr1e30_s7 has lr 1e30" grep -qE '^lr = 1e\+30 ' "$TMP/sw/tiny_baseline_lr1e30_s7/config.ini"
check "the lr 1e30 runs are reported as diverged" grep -qF "4 runs done in" "$TMP/swlog"
check "... both named" grep -qF "(diverged: tiny_baseline_lr1e30_s7 tiny_baseline_lr1e30_s8)" "$TMP/swlog"
check "the report has the sweep" grep -qF "## Learning-rate sensitivity" "$TMP/sw/report.md"
check "... counting the diverged runs" grep -qE '^\| \*\*baseline\*\* \| 7 \| .* \| 1e30 \|$' "$TMP/sw/report.md"

# refused before anything runs: one line naming what is wrong
refuse() {  # what, expected message, ablate.sh arguments...
    local what=$1 msg=$2; shift 2
    rm -rf "$TMP/ref"
    bash scripts/ablate.sh "$@" --out "$TMP/ref" --build "$build" >"$TMP/reflog" 2>&1
    local rc=$?
    check "$what: refused (rc $rc)" [ $rc -ne 0 ]
    check "$what: says '$msg' (got: $(tail -1 "$TMP/reflog"))" grep -qF -e "$msg" "$TMP/reflog"
    check "$what: nothing ran" [ -z "$(ls "$TMP/ref" 2>/dev/null)" ]
}
refuse "a non-number lr" "--lrs: 'x3' is not a number" "$TMP/one.txt" --lrs 1e-3,x3
refuse "a zero lr" "--lrs: '0' is not > 0" "$TMP/one.txt" --lrs 0,1e-3
refuse "the same lr twice" "--lrs: 1e-3 and 0.001 are the same learning rate" "$TMP/one.txt" --lrs 1e-3,0.001
refuse "a negative seed" "--seeds: '-1' is not a non-negative integer" "$TMP/one.txt" --seeds 1,-1
refuse "a seed twice" "--seeds: seed 7 is listed twice" "$TMP/one.txt" --seeds 7,8,7
refuse "--lrs with an lr override" "'--train.lr=1e-3' sets [train] lr, which --lrs sweeps" "$TMP/one.txt" --lrs 1e-3,2e-3 -- --train.lr=1e-3
refuse "--seeds with a seed override" "'--train.seed=3' sets [train] seed, which --seeds sweeps" "$TMP/one.txt" --seeds 1,2 -- --train.seed=3
printf 'tiny_baseline.ini --train.lr=2e-3\n' >"$TMP/own_lr.txt"
refuse "--lrs with an lr in the list" "own_lr.txt:1: '--train.lr=2e-3' sets [train] lr, which --lrs sweeps" "$TMP/own_lr.txt" --lrs 1e-3,2e-3

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
