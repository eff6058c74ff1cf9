#!/usr/bin/env bash
# tests/test_report.sh: scripts/report.py on synthetic run directories
# (tests/report_fixtures/make_runs.py: a baseline and a gated run with probe and spike records,
# and a minimal run with step records only).
#   the summary table holds the numbers the generator computed from the values it wrote;
#   the PNGs exist and are valid PNG files; missing data gives '-' and skipped figures, not a
#   crash; a stale figure is removed; a bad log (invalid JSON, no "type", a missing field, an
#   empty file, no log, no run directory) stops the report with an error naming the file and
#   line, and a non-zero exit; an incomplete last line (a run still writing) is only a warning.
#   Long context: with long_context.jsonl (tests/report_fixtures/long_context/) in two seeds of the
#   baseline and of the gated run and in the minimal run, the "Long context" section's length and
#   stream rows and its sentences hold the numbers recomputed here from the fixture files, its 3
#   PNGs are valid; without the files there is no section and stale PNGs are removed; a malformed
#   line in long_context.jsonl fails like one in log.jsonl (file:line, non-zero exit).
#   Figures (tests/report_fixtures/check_figures.py, on each figure as drawn): no legend overlaps
#   any axes, and every log axis has a labelled major tick at each decade from floor(log10 min)
#   to ceil(log10 max) of what it shows; m_act.png's decades reach the M-Act maximum read from
#   the runs' log.jsonl. --replot redraws m_act.png and f_attn.png from a report.md's tables
#   (the same checks); a report.md without them is an error naming the file.
#   Learning-rate sensitivity (tests/report_fixtures/make_lr_runs.py: 2 variants x 2 seeds x 3
#   learning rates, a run stopped on non-finite losses, a null final eval, a final loss above
#   L0, mid-run evals below the final one): the section's per-lr and per-seed rows equal the
#   numbers worked by hand below; lr_sweep.png is valid and passes the figure checks; a run cut
#   short is left out with a note (no sensitivity for its seed); no section, and a stale
#   lr_sweep.png removed, when no config ran at 2 learning rates.
# Skips (exit 0) when python3-numpy or python3-matplotlib is missing. PYTHON overrides the
# interpreter (default /usr/bin/python3, the one Debian's packages serve).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
PY=${PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || PY=$(command -v python3 || echo python3)
if ! "$PY" -c 'import numpy, matplotlib' >/dev/null 2>&1; then
    echo "skipped: numpy/matplotlib missing (install python3-numpy python3-matplotlib, e.g. scripts/deps.sh)"
    exit 0
fi
REPORT=scripts/report.py
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
check() { local what=$1; shift; if "$@"; then ok; else bad "$what"; fi; }
not() { ! "$@"; }

# a valid PNG: the 8-byte signature, an IHDR chunk first with a non-zero size, IEND last
is_png() {
    [ -s "$1" ] || return 1
    [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || return 1
    [ "$(head -c 16 "$1" | tail -c 4)" = "IHDR" ] || return 1
    local w h
    w=$(head -c 20 "$1" | tail -c 4 | od -An -tu1 | awk '{print $1*16777216 + $2*65536 + $3*256 + $4}')
    h=$(head -c 24 "$1" | tail -c 4 | od -An -tu1 | awk '{print $1*16777216 + $2*65536 + $3*256 + $4}')
    [ "$w" -gt 0 ] && [ "$h" -gt 0 ] || return 1
    [ "$(tail -c 8 "$1" | head -c 4)" = "IEND" ]
}

# ---- fixtures ----
RUNS=$TMP/runs
"$PY" tests/report_fixtures/make_runs.py "$RUNS" >"$TMP/expect.txt" 2>"$TMP/gen.err"
rc=$?   # (not $? inside the check: the $(cat) in its message would reset it)
check "fixture generator exits 0 (rc $rc): $(cat "$TMP/gen.err")" [ $rc -eq 0 ]
check "generator printed 3 expected rows" [ "$(grep -c '^EXPECT | ' "$TMP/expect.txt")" = 3 ]
uniform=$(awk '/^UNIFORM/ {print $2}' "$TMP/expect.txt")

# ---- the full report: baseline, gated, minimal ----
# (run by check_figures.py: report.py's main() in-process, the figures it saves inspected as drawn)
OUT=$TMP/out
FIGCHECK=tests/report_fixtures/check_figures.py
"$PY" $FIGCHECK $REPORT --m-act-from "$RUNS/baseline" --m-act-from "$RUNS/gated" -- \
    "$RUNS/baseline" "$RUNS/gated" "$RUNS/minimal" --out "$OUT" >"$TMP/r.out" 2>"$TMP/r.err"
rc=$?
check "report exits 0 and its figures pass (rc $rc): $(cat "$TMP/r.err") $(grep FAIL "$TMP/r.out" | head -4)" [ $rc -eq 0 ]
check "no traceback" not grep -q Traceback "$TMP/r.err"
check "report.md written" [ -s "$OUT/report.md" ]
check "summary header" grep -qxF "| run | attn_gate | steps | final val loss | spikes (loss/grad) | skipped steps | M-Act | F-Attn | mean gate | median tokens/s |" "$OUT/report.md"
while IFS= read -r line; do
    row=${line#EXPECT }
    name=$(echo "$row" | cut -d'|' -f2 | tr -d ' ')
    got=$(grep -E "^\| $name \| " "$OUT/report.md" | head -1)
    check "summary row of $name: want '$row', got '$got'" [ "$got" = "$row" ]
done < <(grep '^EXPECT | ' "$TMP/expect.txt")
check "uniform F-Attn $uniform noted" grep -qF "F-Attn = $uniform" "$OUT/report.md"
check "config difference: attn_gate none vs elementwise" grep -qxF "| [model] attn_gate | none | elementwise |" "$OUT/report.md"
for v in 0.467 0.048 1053 94 0.116; do
    check "paper reference $v in the report" grep -qE "\| $v \||\| $v\$" "$OUT/report.md"
done
check "spike table lists the loss spike at step 37" grep -qE '^\| 37 \| loss \| ' "$OUT/report.md"
check "spike table lists the grad-norm spike at step 150" grep -qE '^\| 150 \| grad_norm \| ' "$OUT/report.md"
check "spike table: the skipped loss spike at step 37" grep -qE '^\| 37 \| loss \| .* \| yes \|$' "$OUT/report.md"
check "spike table: the non-finite step 90 (null fields as '-')" grep -qxF '| 90 | nonfinite | - | - | - | - | yes |' "$OUT/report.md"
check "per-layer table: a null m_act_ratio shows '-'" grep -qE '^\| 3 \| [0-9.]+ \| [0-9.]+ \| [0-9]+ \| [0-9.]+ \| 0 \| - \| ' "$OUT/report.md"
check "probe-batch loss in the per-layer heading" grep -qE '^\*\*gated\*\*, step 200, probe-batch loss [0-9.]+, 42 ms:' "$OUT/report.md"
check "per-layer table of the gated run has a gate column" grep -qF "| layer | F-Attn | largest head | sink heads | M-Act | at pos | max/median | attn out max | at pos | MLP out max | at pos | gate mean |" "$OUT/report.md"
check "non-finite step (-nan) noted" grep -qF "baseline: 1 step(s) with a non-finite loss (first at step 90)" "$OUT/report.md"
check "missing config.ini noted" grep -qF "minimal: no config.ini" "$OUT/report.md"
check "a sample is quoted" grep -qF 'And God said, Let there be "light" | and there was light.' "$OUT/report.md"
for f in loss m_act f_attn gate_hist probes; do
    check "$f.png is a valid PNG" is_png "$OUT/$f.png"
    check "$f.png referenced in report.md" grep -qF "]($f.png)" "$OUT/report.md"
done
check "no figure skipped" not grep -q "Figure skipped" "$OUT/report.md"

# ---- the figures as drawn: legends outside the axes, log axes labelled at every decade ----
check "figures: legends outside the axes, every decade labelled: $(grep FAIL "$TMP/r.out" | head -4)" not grep -q FAIL "$TMP/r.out"
check "figures: m_act.png checked against log.jsonl" grep -q "^m_act.png: .*log.jsonl M-Act max" "$TMP/r.out"
check "figures: 5 figures inspected" [ "$(grep -cE '^(loss|m_act|f_attn|gate_hist|probes).png: ' "$TMP/r.out")" = 5 ]

# --replot: m_act.png and f_attn.png from report.md's per-layer tables, the same checks
"$PY" $FIGCHECK $REPORT --m-act-from "$RUNS/baseline" --m-act-from "$RUNS/gated" -- \
    --replot "$OUT/report.md" --out "$TMP/replot" >"$TMP/rp.out" 2>&1
rc=$?
check "replot: exits 0, figures pass (rc $rc): $(grep -E 'FAIL|error' "$TMP/rp.out" | head -3)" [ $rc -eq 0 ]
for f in m_act f_attn; do
    check "replot: $f.png valid" is_png "$TMP/replot/$f.png"
done
check "replot: 2 runs read from report.md" grep -qF "2 run(s) from $OUT/report.md" "$TMP/rp.out"
printf '# gatedgpt run comparison\n\n## Summary\n' >"$TMP/noprobe.md"
"$PY" $REPORT --replot "$TMP/noprobe.md" --out "$TMP/replot2" >"$TMP/e.out" 2>"$TMP/e.err"
rc=$?
check "replot of a report.md without per-layer tables: non-zero exit (rc $rc)" [ $rc -ne 0 ]
check "replot error names the file: $(cat "$TMP/e.err")" grep -qF "$TMP/noprobe.md: no '## Per-layer probe values (last probe)' section" "$TMP/e.err"

# ---- seeds: a copy of the baseline with another seed and another final val loss is grouped
# with it; the group's cell is mean [min, max] of the two runs' values ----
check "no seed table without repeated configs" not grep -qF "## Across seeds" "$OUT/report.md"
cp -r "$RUNS/baseline" "$RUNS/baseline_s2"
sed -i 's/^seed = 1337 /seed = 2024 /' "$RUNS/baseline_s2/config.ini"
last=$(grep '"type":"eval"' "$RUNS/baseline/log.jsonl" | tail -1 | sed 's/.*"val_loss":\([0-9.]*\).*/\1/')
other=$(awk -v a="$last" 'BEGIN { printf "%.6f", a + 0.5 }')
sed -i "s/\"val_loss\":$last}/\"val_loss\":$other}/" "$RUNS/baseline_s2/log.jsonl"
want=$(awk -v a="$last" -v b="$other" 'BEGIN { printf "%.4f [%.4f, %.4f]", (a + b) / 2, a, b }')
"$PY" $REPORT "$RUNS/baseline" "$RUNS/gated" "$RUNS/baseline_s2" --out "$TMP/seeds" >"$TMP/s.out" 2>"$TMP/s.err"
rc=$?
check "seed report exits 0 (rc $rc): $(cat "$TMP/s.err")" [ $rc -eq 0 ]
check "seed table present" grep -qF "## Across seeds" "$TMP/seeds/report.md"
row=$(grep -F "| (first group) | none | 1337, 2024 | " "$TMP/seeds/report.md" | head -1)
check "seed group row: seeds 1337, 2024 and val loss $want, got '$row'" [ -n "$row" ]
check "seed group val loss mean [min, max] = $want" grep -qF "| 1337, 2024 | $want | " "$TMP/seeds/report.md"
check "the gated run (one seed) forms no group" not grep -qE "^\| .* \| elementwise \| 1337 \| " "$TMP/seeds/report.md"
rm -rf "$RUNS/baseline_s2"

# ---- long context: long_context.jsonl (tests/report_fixtures/long_context/) in 2 baseline and
# 2 gated runs (seeds 1337, 2024) and the minimal run; the tables' cells are recomputed here
# from the fixture files (mean [min, max] over the group's runs, 4 decimals) ----
check "no long-context section without long_context.jsonl" not grep -qF "## Long context" "$OUT/report.md"
check "no long-context figure without long_context.jsonl" not grep -qF "long_context_" "$OUT/report.md"
FIX=tests/report_fixtures/long_context
LC=$TMP/lc
mkdir -p "$LC"
for n in baseline gated minimal; do cp -r "$RUNS/$n" "$LC/$n"; done
for n in baseline gated; do
    cp -r "$RUNS/$n" "$LC/${n}_s2"
    sed -i 's/^seed = 1337 /seed = 2024 /' "$LC/${n}_s2/config.ini"
done
for n in baseline baseline_s2 gated gated_s2 minimal; do cp "$FIX/$n.jsonl" "$LC/$n/long_context.jsonl"; done
"$PY" - "$FIX" >"$TMP/lc_expect.txt" 2>"$TMP/lc_expect.err" <<'PYEOF'
import json, sys
fix = sys.argv[1]
def recs(n):
    return [json.loads(l) for l in open(f"{fix}/{n}.jsonl") if l.strip()]
def find(n, **kv):
    for r in recs(n):
        if all(r.get(k) == v for k, v in kv.items()):
            return r
def cell(vals):
    v = [x for x in vals if x is not None]
    if not v:
        return "-"
    if len(v) == 1:
        return "%.4f" % v[0] + (" (1 of %d runs)" % len(vals) if len(vals) > 1 else "")
    return "%.4f [%.4f, %.4f]" % (sum(v) / len(v), min(v), max(v))
def mean(vals):
    return sum(vals) / len(vals)
B, G = ["baseline", "baseline_s2"], ["gated", "gated_s2"]
def loss(n, sc, L):
    r = find(n, type="length_eval", scaling=sc, length=L)
    return r and r["loss"]
for sc, L, lab in [("none", 1024, "1024 (8T)"), ("none", 128, "128 (T)"), ("linear", 1024, "1024 (8T)"), ("yarn", 1024, "1024 (8T)")]:
    print("LROW | %s | %s | %s | %s | %s |" % (sc, lab, cell([loss(n, sc, L) for n in B]), cell([loss(n, sc, L) for n in G]), cell([loss("minimal", sc, L)])))
def srow(names, **kv):
    rs = [find(n, type="stream_eval", **kv) for n in names]
    return [[r["loss"] for r in rs], [r["loss_after_window"] for r in rs], [r["f_attn"][-1] for r in rs],
            [mean(r["f_attn"][-2:]) for r in rs]]
for lead, kv in [("256 | 4 | cache | no", dict(window=256, sinks=4, positions="cache", dense=False)),
                 ("full | 0 | original | yes", dict(dense=True))]:
    b, g = srow(B, **kv), srow(G, **kv)
    print("SROW | %s | %s |" % (lead, " | ".join(cell(x) + " | " + cell(y) for x, y in zip(b, g))))
d_T = mean([loss(n, "none", 128) for n in G]) - mean([loss(n, "none", 128) for n in B])
d_8 = mean([loss(n, "none", 1024) for n in G]) - mean([loss(n, "none", 1024) for n in B])
print("LSENT **gated (elementwise)** minus **baseline**: at T %+.3f; at 1024: scaling none %+.3f," % (d_T, d_8))
def after(names, S):
    return mean([find(n, type="stream_eval", window=256, sinks=S, positions="cache", dense=False)["loss_after_window"] for n in names])
print("SSENT window 256, positions cache, S=4 minus S=0: %+.3f (baseline), %+.3f (gated (elementwise))"
      % (after(B, 4) - after(B, 0), after(G, 4) - after(G, 0)))
PYEOF
rc=$?
check "long-context expectations computed (rc $rc): $(cat "$TMP/lc_expect.err")" [ $rc -eq 0 ]
check "4 expected length rows" [ "$(grep -c '^LROW ' "$TMP/lc_expect.txt")" = 4 ]
check "2 expected stream rows" [ "$(grep -c '^SROW ' "$TMP/lc_expect.txt")" = 2 ]
LCOUT=$TMP/lc_out
"$PY" $FIGCHECK $REPORT -- "$LC/baseline" "$LC/baseline_s2" "$LC/gated" "$LC/gated_s2" "$LC/minimal" --out "$LCOUT" \
    >"$TMP/lc.out" 2>"$TMP/lc.err"
rc=$?
check "long-context report exits 0 and its figures pass (rc $rc): $(cat "$TMP/lc.err") $(grep FAIL "$TMP/lc.out" | head -4)" [ $rc -eq 0 ]
check "long-context report: no traceback" not grep -q Traceback "$TMP/lc.err"
check "long-context section present" grep -qxF "## Long context" "$LCOUT/report.md"
check "groups listed with seeds and steps" grep -qF "**baseline**: baseline (seed 1337, step 200), baseline_s2 (seed 2024, step 200); **gated (elementwise)**: gated (seed 1337, step 200), gated_s2 (seed 2024, step 200); **minimal**: minimal (seed ?, step 20)." "$LCOUT/report.md"
check "length table header" grep -qxF "| scaling | length | baseline | gated (elementwise) | minimal |" "$LCOUT/report.md"
while IFS= read -r line; do
    row=${line#LROW }
    key=$(echo "$row" | cut -d'|' -f2-3)
    got=$(grep -F "|$key|" "$LCOUT/report.md" | head -1)
    check "length row$key: want '$row', got '$got'" [ "$got" = "$row" ]
done < <(grep '^LROW ' "$TMP/lc_expect.txt")
check "stream table header" grep -qxF "| window | S | positions | dense | loss: baseline | loss: gated (elementwise) | loss after window: baseline | loss after window: gated (elementwise) | F-Attn last layer: baseline | F-Attn last layer: gated (elementwise) | F-Attn last 2 layers: baseline | F-Attn last 2 layers: gated (elementwise) |" "$LCOUT/report.md"
while IFS= read -r line; do
    row=${line#SROW }
    key=$(echo "$row" | cut -d'|' -f2-5)
    got=$(grep -F "|$key|" "$LCOUT/report.md" | head -1)
    check "stream row$key: want '$row', got '$got'" [ "$got" = "$row" ]
done < <(grep '^SROW ' "$TMP/lc_expect.txt")
check "minimal (no stream records) has no stream column" not grep -qF "loss: minimal" "$LCOUT/report.md"
check "minimal's missing stream records noted" grep -qF "no stream_eval records for minimal" "$LCOUT/report.md"
want=$(sed -n 's/^LSENT //p' "$TMP/lc_expect.txt")
check "length sentence: '$want'" grep -qF "$want" "$LCOUT/report.md"
want=$(sed -n 's/^SSENT //p' "$TMP/lc_expect.txt")
check "stream sentence: '$want'" grep -qF "$want" "$LCOUT/report.md"
for f in long_context_length long_context_buckets long_context_stream; do
    check "$f.png is a valid PNG" is_png "$LCOUT/$f.png"
    check "$f.png referenced in report.md" grep -qF "]($f.png)" "$LCOUT/report.md"
done
check "long-context report: no figure skipped" not grep -q "Figure skipped" "$LCOUT/report.md"
check "long-context figures: legends outside the axes: $(grep FAIL "$TMP/lc.out" | head -4)" not grep -q FAIL "$TMP/lc.out"
check "long-context figures: 8 figures inspected" [ "$(grep -cE '^[a-z_]+.png: ' "$TMP/lc.out")" = 8 ]
# the same runs without long_context.jsonl: no section, and the stale figures are removed
for n in baseline baseline_s2 gated gated_s2 minimal; do rm "$LC/$n/long_context.jsonl"; done
"$PY" $REPORT "$LC/baseline" "$LC/gated" --out "$LCOUT" >"$TMP/lc.out" 2>"$TMP/lc.err"
rc=$?
check "report after removing long_context.jsonl exits 0 (rc $rc): $(cat "$TMP/lc.err")" [ $rc -eq 0 ]
check "no long-context section once the files are gone" not grep -qF "## Long context" "$LCOUT/report.md"
for f in long_context_length long_context_buckets long_context_stream; do
    check "stale $f.png removed" [ ! -e "$LCOUT/$f.png" ]
done

# ---- missing data: a run with step records only; figures skipped with a note ----
"$PY" $REPORT "$RUNS/minimal" --out "$OUT" >"$TMP/m.out" 2>"$TMP/m.err"
rc=$?
check "report on a steps-only run exits 0 (rc $rc): $(cat "$TMP/m.err")" [ $rc -eq 0 ]
check "steps-only: loss.png still a valid PNG" is_png "$OUT/loss.png"
for f in m_act f_attn gate_hist probes; do
    check "steps-only: stale $f.png removed" [ ! -e "$OUT/$f.png" ]
done
check "steps-only: 4 figures skipped with a note" [ "$(grep -c '^_Figure skipped: ' "$OUT/report.md")" = 4 ]
check "steps-only: no config comparison with one run" not grep -q "What differs" "$OUT/report.md"

# one run, default output directory = the run directory; baseline only: no gate figure
cp -r "$RUNS/baseline" "$TMP/solo"
"$PY" $REPORT "$TMP/solo" >"$TMP/s.out" 2>"$TMP/s.err"
rc=$?
check "single run, default --out (rc $rc): $(cat "$TMP/s.err")" [ $rc -eq 0 ]
check "single run: report.md in the run directory" [ -s "$TMP/solo/report.md" ]
check "single run: gate figure skipped (no gate)" grep -qF "_Figure skipped: no run has a gate" "$TMP/solo/report.md"
check "single run: m_act.png valid" is_png "$TMP/solo/m_act.png"

# ---- errors: non-zero exit, the file (and line) named, no traceback ----
expect_error() {  # what, pattern, report args...
    local what=$1 pat=$2
    shift 2
    "$PY" $REPORT "$@" --out "$TMP/err_out" >"$TMP/e.out" 2>"$TMP/e.err"
    local rc=$?
    check "$what: non-zero exit" [ $rc -ne 0 ]
    check "$what: message matches '$pat', got: $(cat "$TMP/e.err")" grep -qF "$pat" "$TMP/e.err"
    check "$what: no traceback" not grep -q Traceback "$TMP/e.err"
}
mkrun() { rm -rf "${TMP:?}/$1"; cp -r "$RUNS/baseline" "$TMP/$1"; }

mkrun badjson
sed -i '5s/.*/{"type":"step","step":4,"loss":/' "$TMP/badjson/log.jsonl"
expect_error "invalid JSON on line 5" "$TMP/badjson/log.jsonl:5: invalid JSON" "$RUNS/gated" "$TMP/badjson"

mkrun notype
sed -i '3s/.*/{"step":2,"loss":8.1}/' "$TMP/notype/log.jsonl"
expect_error "record without a type" "$TMP/notype/log.jsonl:3: record without a \"type\"" "$TMP/notype"

mkrun noloss
sed -i '7s/.*/{"type":"step","step":6,"lr":1e-3}/' "$TMP/noloss/log.jsonl"
expect_error "step record without loss" "$TMP/noloss/log.jsonl:7: \"step\" record: field \"loss\" is missing" "$TMP/noloss"

mkrun notobject
sed -i '2s/.*/[1, 2, 3]/' "$TMP/notobject/log.jsonl"
expect_error "a line that is not an object" "$TMP/notobject/log.jsonl:2: a record must be a JSON object" "$TMP/notobject"

mkrun empty
: >"$TMP/empty/log.jsonl"
expect_error "empty log" "$TMP/empty/log.jsonl: the log is empty" "$TMP/empty"

mkrun nolog
rm "$TMP/nolog/log.jsonl"
expect_error "no log.jsonl" "$TMP/nolog: no log.jsonl" "$TMP/nolog"

expect_error "missing run directory" "$TMP/does_not_exist: no such run directory" "$RUNS/gated" "$TMP/does_not_exist"

# an incomplete last line (no newline: the trainer is still writing it) is a warning only
mkrun partial
printf '{"type":"step","step":201,"lo' >>"$TMP/partial/log.jsonl"
"$PY" $REPORT "$TMP/partial" --out "$TMP/partial_out" >"$TMP/p.out" 2>"$TMP/p.err"
rc=$?
check "incomplete last line: exit 0 (rc $rc): $(cat "$TMP/p.err")" [ $rc -eq 0 ]
check "incomplete last line: warning names the line" grep -qF "$TMP/partial/log.jsonl:$(wc -l <"$TMP/partial/log.jsonl" | awk '{print $1 + 1}'): ignoring an incomplete last line" "$TMP/p.err"

# ---- long_context.jsonl errors: as for log.jsonl, the file and line named, non-zero exit ----
mklc() { mkrun "$1"; cp "tests/report_fixtures/long_context/baseline.jsonl" "$TMP/$1/long_context.jsonl"; }
mklc lc_badjson
sed -i '4s/.*/{"type":"length_eval","step":200,"scaling":"ntk",/' "$TMP/lc_badjson/long_context.jsonl"
expect_error "long_context.jsonl: invalid JSON on line 4" "$TMP/lc_badjson/long_context.jsonl:4: invalid JSON" "$RUNS/gated" "$TMP/lc_badjson"
mklc lc_noloss
sed -i '3s/"loss":[0-9.]*,"buckets"/"buckets"/' "$TMP/lc_noloss/long_context.jsonl"
expect_error "long_context.jsonl: length_eval without loss" "$TMP/lc_noloss/long_context.jsonl:3: \"length_eval\" record: field \"loss\" is missing" "$TMP/lc_noloss"
mklc lc_nowindow
sed -i '14s/"window":256,//' "$TMP/lc_nowindow/long_context.jsonl"
expect_error "long_context.jsonl: stream_eval without window" "$TMP/lc_nowindow/long_context.jsonl:14: \"stream_eval\" record: field \"window\" is missing" "$TMP/lc_nowindow"
mklc lc_badbucket
sed -i '2s/{"lo":128,"hi":256,"loss":[0-9.]*}/{"lo":128,"hi":256}/' "$TMP/lc_badbucket/long_context.jsonl"
expect_error "long_context.jsonl: a bucket without loss" "$TMP/lc_badbucket/long_context.jsonl:2: \"length_eval\" record: field \"buckets\"" "$TMP/lc_badbucket"
mklc lc_notype
sed -i '5s/"type":"length_eval",//' "$TMP/lc_notype/long_context.jsonl"
expect_error "long_context.jsonl: record without a type" "$TMP/lc_notype/long_context.jsonl:5: record without a \"type\"" "$TMP/lc_notype"
mklc lc_empty
: >"$TMP/lc_empty/long_context.jsonl"
expect_error "long_context.jsonl: empty" "$TMP/lc_empty/long_context.jsonl: the long-context file is empty" "$TMP/lc_empty"
mklc lc_partial
printf '{"type":"stream_eval","step":200,"win' >>"$TMP/lc_partial/long_context.jsonl"
"$PY" $REPORT "$TMP/lc_partial" --out "$TMP/lc_partial_out" >"$TMP/p.out" 2>"$TMP/p.err"
rc=$?
check "long_context.jsonl incomplete last line: exit 0 (rc $rc): $(cat "$TMP/p.err")" [ $rc -eq 0 ]
check "long_context.jsonl incomplete last line: warning names the line" grep -qF "$TMP/lc_partial/long_context.jsonl:$(wc -l <"$TMP/lc_partial/long_context.jsonl" | awk '{print $1 + 1}'): ignoring an incomplete last line" "$TMP/p.err"
check "long_context.jsonl incomplete last line: section still written" grep -qxF "## Long context" "$TMP/lc_partial_out/report.md"

# ---- learning-rate sensitivity (tests/report_fixtures/make_lr_runs.py: 2 variants x 2 seeds x
# lr 1e-3, 1e-2, 1e-1). Expected numbers worked by hand from the fixture's table (docs/metrics.md:
# S = mean over lr of min(L, L0) - min over lr of L, a diverged run counting as L0; per seed):
#   baseline s1: L0 9.00; 4.50, 4.00 (final, not the 3.80 at step 50), stopped -> 9.00:
#                (4.50 + 4.00 + 9.00) / 3 = 5.8333; - 4.00 = 1.8333
#   baseline s2: L0 9.10; 4.70, 4.10, 9.50 -> min with L0 = 9.10:
#                (4.70 + 4.10 + 9.10) / 3 = 5.9667; - 4.10 = 1.8667
#   gated s1:    L0 9.05; 4.40, 3.90, 5.00 (final, not the 4.20 at step 50):
#                (4.40 + 3.90 + 5.00) / 3 = 4.4333; - 3.90 = 0.5333
#   gated s2:    L0 9.15; 4.50, 4.00, final eval null -> 9.15:
#                (4.50 + 4.00 + 9.15) / 3 = 5.8833; - 4.00 = 1.8833
#   over seeds:  baseline (1.8333 + 1.8667) / 2 = 1.8500; gated (0.5333 + 1.8833) / 2 = 1.2083
#   lr 1e-1 cells: baseline (9.00 + 9.10) / 2 = 9.0500, 1 diverged; gated (5.00 + 9.15) / 2 = 7.0750
LR=$TMP/lr
"$PY" tests/report_fixtures/make_lr_runs.py "$LR/runs" >"$TMP/lrgen.out" 2>&1
check "lr fixture generator exits 0: $(cat "$TMP/lrgen.out")" grep -qF "12 runs" "$TMP/lrgen.out"
"$PY" $FIGCHECK $REPORT -- "$LR"/runs/* --out "$LR/out" >"$TMP/lr.out" 2>"$TMP/lr.err"
rc=$?
check "lr sweep report exits 0 and its figures pass (rc $rc): $(cat "$TMP/lr.err") $(grep FAIL "$TMP/lr.out" | head -3)" [ $rc -eq 0 ]
check "lr sweep: section present" grep -qxF "## Learning-rate sensitivity" "$LR/out/report.md"
check "lr sweep: lr_sweep.png valid" is_png "$LR/out/lr_sweep.png"
check "lr sweep: lr_sweep.png inspected (legend outside, log x decades)" grep -q "^lr_sweep.png: " "$TMP/lr.out"
check "lr sweep: header" grep -qxF "| variant | seeds | L0 | lr 1e-3 | lr 1e-2 | lr 1e-1 | LR sensitivity |" "$LR/out/report.md"
for row in \
    "| **baseline** | 1, 2 | 9.0500 [9.0000, 9.1000] | 4.6000 [4.5000, 4.7000] | 4.0500 [4.0000, 4.1000] | 9.0500 [9.0000, 9.1000] (1 diverged) | 1.8500 [1.8333, 1.8667] |" \
    "| **gated (elementwise)** | 1, 2 | 9.1000 [9.0500, 9.1500] | 4.4500 [4.4000, 4.5000] | 3.9500 [3.9000, 4.0000] | 7.0750 [5.0000, 9.1500] (1 diverged) | 1.2083 [0.5333, 1.8833] |" \
    "| **baseline** | 1 | 9.0000 | 1e-2 | 4.0000 | 5.8333 | 1.8333 | 1e-1 |" \
    "| **baseline** | 2 | 9.1000 | 1e-2 | 4.1000 | 5.9667 | 1.8667 | none |" \
    "| **gated (elementwise)** | 1 | 9.0500 | 1e-2 | 3.9000 | 4.4333 | 0.5333 | none |" \
    "| **gated (elementwise)** | 2 | 9.1500 | 1e-2 | 4.0000 | 5.8833 | 1.8833 | 1e-1 |"; do
    got=$(grep -F "$(echo "$row" | cut -d'|' -f1-3)|" "$LR/out/report.md" | grep -vF "| seeds |" | head -3 | tr '\n' ' ')
    check "lr sweep row: want '$row', got '$got'" grep -qxF "$row" "$LR/out/report.md"
done
check "no lr section for runs at one lr" not grep -qF "## Learning-rate sensitivity" "$OUT/report.md"
check "no lr figure for runs at one lr" [ ! -e "$OUT/lr_sweep.png" ]
# a run cut short (no final eval, no sign of divergence): left out with a note, no sensitivity
# for its seed; a stale lr_sweep.png of an earlier report is removed when no sweep is left
cp -r "$LR/runs" "$LR/cut"
sed -i '/"step":100/d' "$LR/cut/gated_lr1e-2_s1/log.jsonl"
"$PY" $REPORT "$LR"/cut/* --out "$LR/cutout" >"$TMP/lrc.out" 2>"$TMP/lrc.err"
rc=$?
check "lr sweep with a cut run: exit 0 (rc $rc): $(cat "$TMP/lrc.err")" [ $rc -eq 0 ]
check "lr sweep with a cut run: noted" grep -qF "gated_lr1e-2_s1 (lr 1e-2, seed 1): no final eval and no sign of divergence" "$LR/cutout/report.md"
check "lr sweep with a cut run: no sensitivity for that seed" grep -qxF "| **gated (elementwise)** | 1 | 9.0500 | - | - | - | - | none |" "$LR/cutout/report.md"
check "lr sweep with a cut run: no mean over seeds" grep -qE '^\| \*\*gated \(elementwise\)\*\* \| 1, 2 \| .* \| - \|$' "$LR/cutout/report.md"
cp "$LR/out/lr_sweep.png" "$LR/cutout/lr_sweep.png"
"$PY" $REPORT "$LR"/cut/baseline_lr1e-3_s1 "$LR"/cut/gated_lr1e-3_s1 --out "$LR/cutout" >/dev/null 2>&1
check "a stale lr_sweep.png is removed" [ ! -e "$LR/cutout/lr_sweep.png" ]

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
