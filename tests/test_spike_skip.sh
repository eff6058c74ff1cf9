#!/usr/bin/env bash
# tests/test_spike_skip.sh BUILD_DIR: a skipped update changes nothing the optimizer owns.
# A 12-step run (tests/ckpt_common.sh: a spike detector that skips updates) writes a checkpoint
# after every step. For every step S the detector skipped, the checkpoints of S-1 and S must hold:
#   - model.bin byte for byte equal (no parameter moved, not even by weight decay);
#   - the AdamW moments m and v byte for byte equal, and AdamW's t equal (the bias correction of
#     the next update is as if the skipped step never happened);
#   - the data position one global batch further on (the skipped batch is consumed, not
#     replayed: docs/architecture.md), and the step counter one further (the LR schedule runs on);
# and for a step that was not skipped, the opposite (so the comparison itself can fail).
set -uo pipefail
build=$1
source tests/ckpt_common.sh   # the KJV shards, $PY, $tmp (removed at exit)
"$build/train_gpt" "${TINY[@]}" --train.steps=12 --checkpoint.checkpoint_every=1 --checkpoint.keep_last=0 \
    --log.run_dir="$tmp/run" > "$tmp/run.out" 2>&1 || { echo "FAIL: run"; tail -5 "$tmp/run.out"; exit 1; }
ck() { echo "$tmp/run/checkpoints/step_$(printf %08d "$1")"; }
# the optimizer's and the loader's state of a checkpoint's rank file (tests/compare_ckpt.py's reader)
state() {
    "$PY" - "$1" <<'PY'
import glob, hashlib, os, sys
sys.path.insert(0, "tests")
from compare_ckpt import read_rank
f, _, m, v = read_rank(os.path.join(sys.argv[1], "rank_00000.bin"))
print(f"step={f['step']} t={f['t']} epoch={f['epoch']} shard={f['shard']} batch={f['batch']} "
      f"m={hashlib.sha256(m).hexdigest()[:16]} v={hashlib.sha256(v).hexdigest()[:16]}")
PY
}
field() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
skipped=$(steps_of "$tmp/run/log.jsonl" | grep '"skipped":true' | sed 's/.*"step":\([0-9]*\),.*/\1/')
taken=$(steps_of "$tmp/run/log.jsonl" | grep '"skipped":false' | sed 's/.*"step":\([0-9]*\),.*/\1/')
n_skip=$(echo $skipped | wc -w)
check "the detector skipped some steps after step 1 ($n_skip: $(echo $skipped))" '[ -n "$(echo "$skipped" | awk "\$1 > 1")" ]'
for s in $skipped; do
    [ "$s" -gt 1 ] || continue
    a=$(state "$(ck $((s - 1)))"); b=$(state "$(ck "$s")")
    check "skipped step $s: model.bin == step $((s - 1)), byte for byte" 'cmp -s "$(ck $((s - 1)))/model.bin" "$(ck "$s")/model.bin"'
    check "skipped step $s: AdamW m unchanged" '[ "$(field "$a" m)" = "$(field "$b" m)" ]'
    check "skipped step $s: AdamW v unchanged" '[ "$(field "$a" v)" = "$(field "$b" v)" ]'
    check "skipped step $s: AdamW t unchanged ($(field "$a" t) -> $(field "$b" t))" '[ "$(field "$a" t)" = "$(field "$b" t)" ]'
    check "skipped step $s: step counter advanced" '[ "$(field "$b" step)" = "$s" ]'
    check "skipped step $s: data position advanced ($(field "$a" batch) -> $(field "$b" batch))" \
          '[ "$(field "$a" epoch)/$(field "$a" shard)/$(field "$a" batch)" != "$(field "$b" epoch)/$(field "$b" shard)/$(field "$b" batch)" ]'
done
# a step that was taken moves all of them (the comparisons above can fail)
s=$(echo "$taken" | awk '$1 > 1' | head -1)
a=$(state "$(ck $((s - 1)))"); b=$(state "$(ck "$s")")
check "taken step $s: model.bin changed" '! cmp -s "$(ck $((s - 1)))/model.bin" "$(ck "$s")/model.bin"'
check "taken step $s: m and v changed" '[ "$(field "$a" m)" != "$(field "$b" m)" ] && [ "$(field "$a" v)" != "$(field "$b" v)" ]'
check "taken step $s: t advanced by 1" '[ "$(field "$b" t)" = "$(( $(field "$a" t) + 1 ))" ]'
# the spike records carry the step's instability signals (docs/metrics.md): per layer, and a
# skipped update's ratios are 0 (a taken one's are not; a step's two records each say whether
# their own detector skipped it: the loss's skip makes the grad-norm record's ratios 0 too)
n_spk=$(records_of "$tmp/run/log.jsonl" spike | wc -l)
check "every spike record ($n_spk) carries the signals per layer" \
      '[ "$(records_of "$tmp/run/log.jsonl" spike | grep -c "\"out_z\":.*\"layers\":\[{\"layer\":0,\"attn_logit_max\":")" = "$n_spk" ]'
check "skipped spikes: update ratio 0" \
      '! records_of "$tmp/run/log.jsonl" spike | grep "\"skipped\":true" | grep -vq "\"update_ratio_attn\":0,"'
for s in $taken; do   # a spike of a step whose update was taken (by both detectors)
    check "taken step $s: no spike record with update ratio 0" \
          '! records_of "$tmp/run/log.jsonl" spike | grep "\"step\":$s," | grep -q "\"update_ratio_attn\":0,"'
done
echo "spike skip: $n_skip of 12 steps skipped ($(echo $skipped)); each left model.bin, m, v and t as they were"
finish
