#!/usr/bin/env bash
# tests/test_mc.sh BUILD_DIR: multiple-choice evaluation (train/mc_eval.h, data/mc_task.h) on a tiny
# model trained a few steps with [eval] tasks = a 40-example KJV task (scripts/make_kjv_task.py):
#   records   train_gpt writes a "task" record at steps 0, 4, 8; `gatedgpt_ckpt mc` on the step-8
#             checkpoint reproduces the step-8 record (the same forwards)
#   scores    each choice's log-likelihood of `mc --lls` against an independent computation from
#             the full logits (`gatedgpt_ckpt logits`, numpy log-softmax; tokens from tok_encode, split
#             as lm-eval's _encode_pair) within 1e-4: each token's log-probability is a float32
#             logsumexp (~10) minus a logit, a few ulps (~6e-7) apart between the batched forward and
#             the one-sequence forward, over <= 40 tokens: <= 2.4e-5, x4 margin; measured max 5.8e-6
#             (AVX-512) and 6.7e-6 (ONEDNN_MAX_CPU_ISA=AVX2); acc, acc_norm (characters), acc_bytes and lm-eval's stderrs
#             recomputed from the dump, on a task with non-ASCII choices too (characters != bytes) and
#             contexts longer than max_seq_len (cut from the left), and 20 of ASCII junk against CJK text
#             (where dividing by characters and by bytes pick differently: acc_norm by bytes is caught)
#   processes the same figures at 1, 2 and 3 processes (mpirun --oversubscribe): the step-0 records
#             of training (the same initial weights) and `mc` on the trained checkpoint, exactly
#   HellaSwag tests/mc/hellaswag.jsonl's context and choices after our preprocessing == lm-eval's
#             (tests/mc/hellaswag_expected.jsonl, written by lm-eval 0.4.13's hellaswag utils)
#   --fields  other field names give the same figures
#   report    scripts/report.py's task table and tasks.png from the run
#   errors    not JSON, a missing field, gold out of range, empty choices (and more): one line on
#             stderr naming the file, line and field, exit 1, no --lls file; the same from train_gpt
set -uo pipefail
build=$1
source tests/ckpt_common.sh   # the KJV shards, $PY, $tmp, check, finish
tool="$build/gatedgpt_ckpt"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

"$PY" scripts/make_kjv_task.py --n 40 --seed 3 --out "$tmp/kjv.jsonl" > /dev/null || { echo "FAIL: make_kjv_task.py"; exit 1; }
# T = 64 (the longest KJV continuation is ~40 tokens); 768 tokens a step: 1, 2 or 3 processes
M=("${TINY[@]}" --model.max_seq_len=64 --train.seq_len=64 --train.tokens_per_step=768 --eval.tasks="$tmp/kjv.jsonl"
   --eval.task_every=4)
no_ms() { grep '"type":"task"' "$1" | sed -E 's/,"ms":[^,}]*//'; }

"$build/train_gpt" "${M[@]}" --train.steps=8 --checkpoint.checkpoint_every=8 --log.run_dir="$tmp/a" > "$tmp/a.out" 2>&1 \
    || { echo "FAIL: training run"; tail -5 "$tmp/a.out"; exit 1; }
ck="$tmp/a/checkpoints/step_00000008"
check "task records at steps 0, 4, 8, n 40, chance 0.25" '[ "$(grep "\"type\":\"task\"" "$tmp/a/log.jsonl" | grep -c "\"task\":\"kjv\",.*\"n\":40,.*\"chance\":0.25,")" = 3 ] && [ "$(no_ms "$tmp/a/log.jsonl" | sed -E "s/.*\"step\":([0-9]+).*/\1/" | tr "\n" " ")" = "0 4 8 " ]'
check "a console line per task evaluation" '[ "$(grep -c "| task kjv: acc .* (chance 0.2500, n 40)" "$tmp/a.out")" = 3 ]'

"$tool" mc "$ck" --task "$tmp/kjv.jsonl" --json --lls "$tmp/lls.jsonl" --progress -1 > "$tmp/mc.out" 2>&1
check "mc: exit 0, reproduces the trainer's step-8 record" '[ "$(tail -1 "$tmp/mc.out" | sed -E "s/,\"ms\":[^,}]*//")" = "$(no_ms "$tmp/a/log.jsonl" | tail -1)" ]'

# report.py: the task table and the accuracy-over-steps figure
"$PY" scripts/report.py "$tmp/a" --out "$tmp/rep" > "$tmp/rep.out" 2>&1
check "report.py: a task table row (run a, task kjv, step 8, n 40) and tasks.png" 'grep -q "^| a | kjv | 8 | 40 | " "$tmp/rep/report.md" && [ -s "$tmp/rep/tasks.png" ] || cat "$tmp/rep.out"'

# the scores against the full logits (numpy), and the figures from the scores
cat > "$tmp/check.py" <<'EOF'
import json, subprocess, sys
import numpy as np
build, ck, task, lls, rec_line, tok, work = sys.argv[1:8]
docs = [json.loads(l) for l in open(task, encoding="utf-8")]
dump = [json.loads(l) for l in open(lls, encoding="utf-8")]
rec = json.loads(rec_line)
def enc(texts):
    r = subprocess.run([build + "/tok_encode", tok, "--nul"], input="\0".join(texts).encode(), capture_output=True, check=True)
    return [[int(x) for x in l.split()] for l in r.stdout.decode().splitlines()]
worst = 0.0
for e in sorted(set(range(0, len(docs), 7)) | {len(docs) - 2, len(docs) - 1}):   # every 7th and the last 2, every choice
    d = docs[e]
    ctx = d["context"].rstrip()
    moved = d["context"][len(ctx):]
    ids = enc([ctx] + [ctx + moved + " " + c for c in d["choices"]])
    for c, whole in enumerate(ids[1:]):
        row = whole[-65:]   # max_seq_len 64: cut from the left to 65 tokens
        cont = len(whole) - len(ids[0])
        out = f"{work}/lg.bin"
        subprocess.run([build + "/gatedgpt_ckpt", "logits", ck, "--ids", ",".join(map(str, row[:-1])), "--out", out],
                       capture_output=True, check=True)
        lg = np.fromfile(out, dtype="<f4").reshape(len(row) - 1, -1).astype(np.float64)
        lp = lg - (lg.max(1, keepdims=True) + np.log(np.exp(lg - lg.max(1, keepdims=True)).sum(1, keepdims=True)))
        n = len(row) - 1
        ll = sum(lp[q, row[q + 1]] for q in range(n - cont, n))
        worst = max(worst, abs(ll - dump[e]["lls"][c]))
        assert cont == dump[e]["cont_tokens"][c], (e, c, cont, dump[e]["cont_tokens"][c])
def fig(den):
    hits = []
    for d, o in zip(docs, dump):
        v = [l / den(ch) for l, ch in zip(o["lls"], d["choices"])]
        hits.append(float(int(np.argmax(v)) == d["gold"]))
    h = np.array(hits)
    return h.mean(), h.std(ddof=1) / np.sqrt(len(h))
ok = worst <= 1e-4
for name, den in (("acc", lambda s: 1.0), ("acc_norm", lambda s: float(len(s))), ("acc_bytes", lambda s: float(len(s.encode())))):
    m, se = fig(den)
    ok &= abs(m - rec[name]) <= 1e-12 and abs(se - rec[name + "_stderr"]) <= 1e-12
    print(f"{name} {m:.6f} (record {rec[name]:.6f}) stderr {se:.6f} (record {rec[name + '_stderr']:.6f})")
print(f"max |ll - logits'| {worst:.3e}")
sys.exit(0 if ok else 1)
EOF
tokbin=data/kjv/tokenizer.bin
check "scores == log-softmax of the full logits (1e-4); acc, acc_norm, acc_bytes, stderrs from the scores" \
    '"$PY" "$tmp/check.py" "$build" "$ck" "$tmp/kjv.jsonl" "$tmp/lls.jsonl" "$(tail -1 "$tmp/mc.out")" "$tokbin" "$tmp" > "$tmp/check.out" 2>&1 && tail -1 "$tmp/check.out" || { cat "$tmp/check.out"; false; }'
# non-ASCII choices: acc_norm divides by characters, acc_bytes by bytes
"$PY" - "$tmp/kjv.jsonl" "$tmp/accents.jsonl" <<'EOF'
import json, random, sys
words = ["caf\u00e9", "na\u00efve", "\u00fcber", "\u6771\u4eac", "\u00c6thel", "r\u00e9sum\u00e9 \u00e9t\u00e9"]
with open(sys.argv[2], "w", encoding="utf-8") as f:
    for i, l in enumerate(open(sys.argv[1], encoding="utf-8")):
        d = json.loads(l)
        d["choices"] = [c if j % 2 else words[(i + j) % len(words)] + " " + c for j, c in enumerate(d["choices"])]
        f.write(json.dumps(d, ensure_ascii=False) + "\n")
        last = d
    rng = random.Random(5)
    for k in range(20):   # ASCII junk against CJK (3 bytes a character): acc_norm and acc_bytes tend to differ
        junk = "".join(rng.choice("qxzjkvw#%&@~^") for _ in range(rng.randint(6, 14)))
        cjk = "".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(rng.randint(3, 8)))
        f.write(json.dumps({"context": last["context"], "choices": [junk, cjk], "gold": k % 2}, ensure_ascii=False) + "\n")
    for k in range(2):   # contexts of ~100 tokens: cut from the left to max_seq_len 64
        f.write(json.dumps({"context": " ".join([last["context"]] * 5), "choices": last["choices"][k:k + 2], "gold": 1},
                           ensure_ascii=False) + "\n")
EOF
"$tool" mc "$ck" --task "$tmp/accents.jsonl" --json --lls "$tmp/lls2.jsonl" --progress -1 > "$tmp/mc2.out" 2>&1
check "the accented task has rows cut from the left" 'grep -q "\"truncated\":[1-9]" "$tmp/mc2.out"'
check "the same on non-ASCII choices and rows cut from the left" '"$PY" "$tmp/check.py" "$build" "$ck" "$tmp/accents.jsonl" "$tmp/lls2.jsonl" "$(tail -1 "$tmp/mc2.out")" "$tokbin" "$tmp" > "$tmp/check2.out" 2>&1 && tail -1 "$tmp/check2.out" || { cat "$tmp/check2.out"; false; }'

# 1, 2, 3 processes
if command -v mpirun > /dev/null 2>&1; then
    for P in 1 2 3; do
        mpirun --oversubscribe -np $P "$build/train_gpt" "${M[@]}" --train.steps=2 --log.run_dir="$tmp/p$P" > "$tmp/p$P.out" 2>&1 \
            || { echo "FAIL: training on $P processes"; tail -5 "$tmp/p$P.out"; }
        mpirun --oversubscribe -np $P "$tool" mc "$ck" --task "$tmp/kjv.jsonl" --json --progress -1 > "$tmp/mcp$P.out" 2>&1
    done
    for P in 2 3; do
        check "train_gpt: the step-0 task record at $P processes == 1 process" '[ -n "$(no_ms "$tmp/p1/log.jsonl" | head -1)" ] && [ "$(no_ms "$tmp/p$P/log.jsonl" | head -1)" = "$(no_ms "$tmp/p1/log.jsonl" | head -1)" ]'
        check "gatedgpt_ckpt mc at $P processes == 1 process" '[ "$(tail -1 "$tmp/mcp$P.out" | sed -E "s/,\"ms\":[^,}]*//")" = "$(tail -1 "$tmp/mc.out" | sed -E "s/,\"ms\":[^,}]*//")" ]'
    done
else
    echo "skipped: 1/2/3 processes (mpirun not installed)"
fi

# HellaSwag's form: our preprocessing == lm-eval's
"$tool" mc "$ck" --task tests/mc/hellaswag.jsonl --lls "$tmp/hs.jsonl" --progress -1 > "$tmp/hs.out" 2>&1
check "HellaSwag lines: context and choices as lm-eval's hellaswag preprocessing" '"$PY" -c "
import json, sys
a = [json.loads(l) for l in open(\"$tmp/hs.jsonl\", encoding=\"utf-8\")]
b = [json.loads(l) for l in open(\"tests/mc/hellaswag_expected.jsonl\", encoding=\"utf-8\")]
sys.exit(0 if len(a) == len(b) == 3 and all(x[k] == y[k] for x, y in zip(a, b) for k in (\"context\", \"choices\", \"gold\")) else 1)"'

# --fields: the same task under other names
"$PY" -c "
import json
with open('$tmp/renamed.jsonl', 'w') as f:
    for l in open('$tmp/kjv.jsonl'):
        d = json.loads(l); f.write(json.dumps({'q': d['context'], 'opts': d['choices'], 'ans': d['gold']}) + '\n')"
"$tool" mc "$ck" --task "$tmp/renamed.jsonl" --fields ctx=q,choices=opts,gold=ans --json --progress -1 > "$tmp/ren.out" 2>&1
check "--fields ctx=q,choices=opts,gold=ans: the same figures" '[ "$(tail -1 "$tmp/ren.out" | sed -E "s/\"task\".*\"n\"/\"n\"/; s/,\"ms\":[^,}]*//")" = "$(tail -1 "$tmp/mc.out" | sed -E "s/\"task\".*\"n\"/\"n\"/; s/,\"ms\":[^,}]*//")" ]'

# bad task files: one line naming the file, the line and the field; nothing written
bad() {   # bad NAME LINE-NUMBER FIELD-OR-TEXT EXPECTED-TEXT CONTENT
    local name=$1 line=$2 field=$3 want=$4 f="$tmp/bad_$1.jsonl"
    printf '%s\n' "$5" > "$f"
    "$tool" mc "$ck" --task "$f" --lls "$tmp/bad.lls" --progress -1 > /dev/null 2> "$tmp/bad.err"
    local rc=$?
    check "bad task ($name): exit 1, one line naming $f:$line, $field: $want" '[ "$rc" = 1 ] && [ "$(wc -l < "$tmp/bad.err")" = 1 ] && grep -qF "error: task $f:$line: $field" "$tmp/bad.err" && grep -qF "$want" "$tmp/bad.err" && [ ! -e "$tmp/bad.lls" ] || { cat "$tmp/bad.err"; false; }'
}
ok='{"context": "a", "choices": ["b", "c"], "gold": 1}'
bad not_json 2 "not a JSON object" "invalid JSON" "$ok
{\"context\": \"a\", \"choices\": [\"b\"], \"gold\": 0"
bad missing 3 "field 'choices'" "missing" "$ok

{\"context\": \"a\", \"gold\": 0}"
bad gold_range 1 "field 'gold'" "2 is out of range for 2 choices" '{"context": "a", "choices": ["b", "c"], "gold": 2}'
bad gold_negative 1 "field 'gold'" "out of range" '{"context": "a", "choices": ["b", "c"], "gold": -1}'
bad empty_choices 2 "field 'choices'" "empty list" "$ok
{\"context\": \"a\", \"choices\": [], \"gold\": 0}"
bad empty_choice 1 "field 'choices'" "choice 1 is empty" '{"context": "a", "choices": ["b", ""], "gold": 0}'
bad not_string 1 "field 'choices'" "element 0 is not a string" '{"context": "a", "choices": [3, "c"], "gold": 0}'
bad gold_float 1 "field 'gold'" "not an integer" '{"context": "a", "choices": ["b", "c"], "gold": 0.5}'
bad array 1 "not a JSON object" "another JSON value" '["a", "b"]'
bad hs_label 1 "field 'label'" "not an integer (or a string of digits)" '{"activity_label": "x", "ctx_a": "a", "ctx_b": "b", "endings": ["c", "d"], "label": "x"}'
bad ws_context 1 "choice 0" "the context is only whitespace" '{"context": "  ", "choices": ["b", "c"], "gold": 0}'
bad hs_missing 1 "field 'ctx_b'" "missing" '{"activity_label": "x", "ctx_a": "a", "endings": ["c", "d"], "label": "0"}'
"$build/train_gpt" "${M[@]}" --train.steps=2 --eval.tasks="$tmp/bad_gold_range.jsonl" --log.run_dir="$tmp/badrun" > /dev/null 2> "$tmp/badrun.err"
rc=$?
check "train_gpt with a bad task file: exit 1, the same one line, no run directory" '[ "$rc" = 1 ] && [ "$(wc -l < "$tmp/badrun.err")" = 1 ] && grep -qF "error: task $tmp/bad_gold_range.jsonl:1: field '"'"'gold'"'"'" "$tmp/badrun.err" && [ ! -e "$tmp/badrun" ]'
"$tool" mc "$ck" --task "$tmp/kjv.jsonl" --fields ctx=q,answer=x > /dev/null 2> "$tmp/f.err"
check "--fields with an unknown key: one line" '[ "$(wc -l < "$tmp/f.err")" = 1 ] && grep -q "unknown key .answer." "$tmp/f.err"'
finish
