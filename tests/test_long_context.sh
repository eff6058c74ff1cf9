#!/usr/bin/env bash
# tests/test_long_context.sh BUILD_DIR: long-context evaluation (gatedgpt_ckpt lengths / stream,
# tools/long_context.h) and greedy sampling on a tiny trained model (T = 32):
#   lengths  one record per length x scaling with buckets of T; at L = T every scaling is the same
#            computation (factor 1: equal losses); at L = T its loss equals `eval` over the same
#            windows (the windows are the data loader's, in order); scalings differ beyond T
#   stream   S = 0 / 4, positions cache / original, and the dense reference, whose loss equals
#            `lengths` over the same tokens as one window (both feed a growing cache in chunks of T)
#   errors   a length beyond a learned-position model's max_seq_len (naming the key), a length the
#            memory cannot hold (with the bytes, before allocating), a window larger than the
#            stream, S >= W, an unknown scaling, a missing --out: one line, exit 1
#   sample   --greedy is deterministic and equals --temperature 0
set -uo pipefail
build=$1
source tests/ckpt_common.sh   # the KJV shards, $PY, $tmp (removed at exit)
tool="$build/gatedgpt_ckpt"
"$build/train_gpt" "${TINY[@]}" --train.steps=6 --checkpoint.checkpoint_every=6 --log.run_dir="$tmp/a" > "$tmp/a.out" 2>&1 \
    || { echo "FAIL: training run"; cat "$tmp/a.out"; exit 1; }
ck="$tmp/a/checkpoints/step_00000006"

# lengths: 4 lengths x 4 scalings, 256 tokens scored at each length
"$tool" lengths "$ck" --out "$tmp/lc.jsonl" --tokens 256 > "$tmp/len.txt" 2>&1
rc=$?
check "lengths: exit 0" '[ "$rc" = 0 ]'
cat "$tmp/len.txt"
check "lengths: 16 length_eval records" '[ "$(grep -c "\"type\":\"length_eval\"" "$tmp/lc.jsonl")" = 16 ]'
$PY - "$tmp/lc.jsonl" > "$tmp/len_check.txt" 2>&1 <<'PYEOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
by = {(r["scaling"], r["length"]): r for r in recs}
ok = lambda c, msg: print(("ok " if c else "bad ") + msg)
ok(sorted({r["length"] for r in recs}) == [32, 64, 128, 256], "lengths T, 2T, 4T, 8T")
ok(all(len(r["buckets"]) == r["length"] // 32 and r["tokens"] == r["windows"] * r["length"] == 256 for r in recs),
   "buckets of T; 256 tokens at every length")
ok(all(abs(sum(b["loss"] for b in r["buckets"]) / len(r["buckets"]) - r["loss"]) < 1e-9 * r["loss"] for r in recs),
   "loss = mean of the buckets (equal sizes)")
ok(len({by[(s, 32)]["loss"] for s in ("none", "linear", "ntk", "yarn")}) == 1, "at L = T the four scalings give the same loss")
ok(all(by[(s, 32)]["factor"] == 1 and by[(s, 256)]["factor"] == (1 if s == "none" else 8) for s in ("none", "linear", "ntk", "yarn")),
   "factor = L / T")
ok(len({by[(s, 256)]["loss"] for s in ("none", "linear", "ntk", "yarn")}) == 4, "at L = 8T the scalings differ")
print("loss_T", repr(by[("none", 32)]["loss"]))
PYEOF
cat "$tmp/len_check.txt"
for what in "lengths T, 2T, 4T, 8T" "buckets of T; 256 tokens at every length" "loss = mean of the buckets (equal sizes)" \
            "at L = T the four scalings give the same loss" "factor = L / T" "at L = 8T the scalings differ"; do
    check "lengths: $what" 'grep -qx "ok $what" "$tmp/len_check.txt"'
done
# eval over the same 8 windows of 32 (4 batches of 2 x 32)
ev=$("$tool" eval "$ck" --batches 4 | sed -n 's/.*: loss \([0-9.]*\) over 4 batches.*/\1/p')
lt=$(sed -n 's/^loss_T //p' "$tmp/len_check.txt")
# derived: the same 256 fp32 losses summed in double in another grouping (1e-15), eval printed with
# 9 digits (5e-9 relative): 1e-7 is far above both
check "lengths at L = T equals eval over the same windows ($lt vs $ev)" \
    '[ -n "$ev" ] && $PY -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if abs(a - b) <= 1e-7 * b else 1)" "$lt" "$ev"'

# stream: W = 64, 600 tokens
"$tool" stream "$ck" --out "$tmp/st.jsonl" --tokens 600 --window 64 > "$tmp/st.txt" 2>&1
rc=$?
check "stream: exit 0" '[ "$rc" = 0 ]'
cat "$tmp/st.txt"
"$tool" lengths "$ck" --out "$tmp/len600.jsonl" --lengths 600 --scalings none --tokens 600 > /dev/null 2>&1
$PY - "$tmp/st.jsonl" "$tmp/len600.jsonl" > "$tmp/st_check.txt" 2>&1 <<'PYEOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
ref = json.loads(open(sys.argv[2]).readline())
ok = lambda c, msg: print(("ok " if c else "bad ") + msg)
kinds = sorted((r["sinks"], r["positions"], r["dense"]) for r in recs)
ok(kinds == [(0, "cache", False), (0, "original", True), (4, "cache", False), (4, "original", False)],
   "S = 0 and 4, positions cache and original, and the dense reference")
ok(all(r["tokens"] == 600 and len(r["f_attn"]) == 2 and len(r["buckets"]) == 10 for r in recs), "fields")
d = [r for r in recs if r["dense"]][0]
# derived: the same forward passes (a growing cache in chunks of 32 over the same 600 tokens): the
# losses agree to the double sums' order (1e-15); 1e-12 relative
ok(abs(d["loss"] - ref["loss"]) <= 1e-12 * ref["loss"], "dense reference = lengths over the same 600 tokens")
ok(all(0.0 < f < 1.0 for r in recs for f in r["f_attn"]), "F-Attn within (0, 1)")
w = [r for r in recs if not r["dense"]]
ok(all(r["window"] == 64 and r["loss_after_window"] is not None for r in w), "window 64, loss after the window")
PYEOF
cat "$tmp/st_check.txt"
for what in "S = 0 and 4, positions cache and original, and the dense reference" "fields" \
            "dense reference = lengths over the same 600 tokens" "F-Attn within (0, 1)" "window 64, loss after the window"; do
    check "stream: $what" 'grep -qx "ok $what" "$tmp/st_check.txt"'
done

# a hybrid (layer_pattern LA: layer 0 a Gated DeltaNet): the stream counts its queries at the
# attention layer, so F-Attn is a number there and null for the linear layer
"$build/train_gpt" "${TINY[@]}" --train.steps=2 --checkpoint.checkpoint_every=2 --log.run_dir="$tmp/h" \
    --model.layer_pattern=LA > /dev/null 2>&1
"$tool" stream "$tmp/h/checkpoints" --out "$tmp/sth.jsonl" --tokens 200 --window 32 --sinks 4 > /dev/null 2>&1
rc=$?
check "stream on a hybrid: exit 0" '[ "$rc" = 0 ]'
$PY - "$tmp/sth.jsonl" > "$tmp/sth_check.txt" 2>&1 <<'PYEOF2'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
good = len(recs) >= 2 and all(r["f_attn"][0] is None and r["f_attn"][1] is not None and 0.0 < r["f_attn"][1] < 1.0
                              for r in recs)
print("ok hybrid f_attn" if good else "bad hybrid f_attn: %s" % [r.get("f_attn") for r in recs])
PYEOF2
cat "$tmp/sth_check.txt"
check "stream on a hybrid: F-Attn null for the linear layer, in (0, 1) for the attention layer" \
    'grep -qx "ok hybrid f_attn" "$tmp/sth_check.txt"'

# errors: one line, exit 1, nothing appended
err() {   # err NAME PATTERN ARGS...: the tool fails with one line matching PATTERN
    local name=$1 pat=$2; shift 2
    "$tool" "$@" > "$tmp/e.out" 2>&1
    local rc=$?
    check "$name: exit 1" '[ "$rc" = 1 ]'
    check "$name: one line: $pat" '[ "$(wc -l < "$tmp/e.out")" = 1 ] && grep -q "$pat" "$tmp/e.out"'
}
"$build/train_gpt" "${TINY[@]}" --train.steps=2 --checkpoint.checkpoint_every=2 --log.run_dir="$tmp/b" --model.pos=learned > /dev/null 2>&1
err "learned positions past max_seq_len" "length 64 > \[model\] max_seq_len = 32 of a learned-position model" \
    lengths "$tmp/b/checkpoints" --out "$tmp/e.jsonl" --lengths 32,64 --scalings none
err "a length beyond the memory" "needs [0-9.]* GB (KV cache [0-9.]* GB + activations [0-9.]* GB), but [0-9.]* GB are available" \
    lengths "$ck" --out "$tmp/e.jsonl" --lengths 200000000
err "window larger than the stream" "window 700 is larger than the stream" stream "$ck" --out "$tmp/e.jsonl" --tokens 600 --window 700
err "S >= W" "sinks 64 >= --window 64" stream "$ck" --out "$tmp/e.jsonl" --window 64 --sinks 0,64
err "unknown scaling" "unknown scaling 'rope2x'" lengths "$ck" --out "$tmp/e.jsonl" --scalings none,rope2x
err "missing --out" "needs --out FILE" stream "$ck"
err "stream on a learned-position model" "rolling KV window needs rope" stream "$tmp/b/checkpoints" --out "$tmp/e.jsonl" --tokens 100 --window 16
check "nothing written by the failed runs" '[ ! -s "$tmp/e.jsonl" ]'

# greedy sampling: deterministic, the same as temperature 0
"$tool" sample "$ck" --greedy --tokens 24 --seed 1 > "$tmp/g1.txt" 2>&1
"$tool" sample "$ck" --temperature 0 --tokens 24 --seed 2 > "$tmp/g2.txt" 2>&1
check "sample --greedy = --temperature 0 (any seed)" '[ -s "$tmp/g1.txt" ] && [ "$(sed 1d "$tmp/g1.txt")" = "$(sed 1d "$tmp/g2.txt")" ]'
finish
