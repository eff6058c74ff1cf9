#!/usr/bin/env bash
# tests/test_ablate.sh BUILD_DIR: scripts/ablate.sh on a two-run list of 3-step runs on the KJV
# data: per-line overrides reach their run only, the runs and the report are written, what
# differs is printed; a bad list line and a list that does not exist are refused.
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
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
