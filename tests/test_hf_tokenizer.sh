#!/usr/bin/env bash
# tests/test_hf_tokenizer.sh BUILD_DIR: Hugging Face tokenizer.json in prepare (data/hf_tokenizer.h),
# against fixed vectors from the `tokenizers` library (no python packages needed here):
#   - tests/hf_tokenizer/{gpt2,qwen2,llama3}.json: three byte-level BPEs that `tokenizers` trained
#     with GPT-2's, Qwen2's and Llama 3's pre-tokenizer (the qwen2 one with "a b" merges, the others
#     with ["a", "b"]; llama3 with ignore_merges), with special and plain added tokens; texts.bin:
#     300 texts of every script, digits, whitespace, emoji, code, added tokens and invalid UTF-8;
#     ids_NAME.txt: the ids `tokenizers` gives them (tests/interop/hf_tokenizers.py fixtures wrote
#     all of it). tok_encode must give the same ids, text by text;
#   - prepare --tokenizer X.json: the sidecar is X.json byte for byte; one document of 2.5 MB (cut
#     into pre-tokens while streaming, 1 MiB at a time) gives the ids of tok_encode on the whole
#     text, and so does tok_encode --stream-step (the text arriving 997 or 65521 bytes at a time);
#     prepare --decode gives the text back, invalid UTF-8 included;
#   - .jsonl input with --field: one document per line; a line without the field is an error;
#   - tok_encode --export-hf writes the tokenizer.json back unchanged;
#   - a tiny model trained 3 steps on tokenizer.json shards ([data] tokenizer = the sidecar):
#     gatedgpt_ckpt sample encodes a prompt with an added token and decodes it back; export writes
#     the tokenizer.json unchanged and its end-of-text id into config.json;
#   - bad tokenizer.json files: one line naming the file and the part, exit 1, no shards.
# The check on 100,000 texts against `tokenizers` itself is `make interop`
# (scripts/hf_tokenizer_interop.sh).
set -u
if [ $# -ne 1 ]; then echo "usage: $0 BUILD_DIR" >&2; exit 2; fi
build=$1
cd "$(dirname "${BASH_SOURCE[0]}")/.."
TOK=$build/tok_encode
PREP=$build/prepare
FX=tests/hf_tokenizer
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1"; fi; }

# ---- 1. fixed vectors: ids equal to the `tokenizers` library's ----------------------------------
for name in gpt2 qwen2 llama3; do
    "$TOK" "$FX/$name.json" --nul < "$FX/texts.bin" > "$tmp/ids_$name.txt" 2> "$tmp/err"
    rc=$?
    nd=$(diff "$tmp/ids_$name.txt" "$FX/ids_$name.txt" | grep -c '^<')
    check "$name: tok_encode rc $rc ($(head -c 200 "$tmp/err")), $nd of 300 texts with other ids than tokenizers'" \
        '[ $rc -eq 0 ] && [ "$nd" -eq 0 ] && [ "$(wc -l < "$tmp/ids_$name.txt")" -eq 300 ]'
done

# ---- 2. prepare: sidecar, streaming == whole-text encoding, decode round trip ------------------
# one document of ~2.5 MB: the fixture texts repeated (invalid UTF-8 and added tokens included),
# with no line that is only <|endoftext|> (it would end the document)
"$PY" - "$FX/texts.bin" "$tmp/doc.txt" <<'EOF'
import sys
texts = open(sys.argv[1], "rb").read().split(b"\0")[:-1]
body = b"".join(texts)
body = b"\n".join(l for l in body.split(b"\n") if l.rstrip(b"\r") != b"<|endoftext|>")
out = (body * (2_500_000 // len(body) + 1))[:2_500_000]
open(sys.argv[2], "wb").write(out)
EOF
for name in gpt2 qwen2 llama3; do
    out=$tmp/p_$name
    "$PREP" --train "$tmp/doc.txt" --tokenizer "$FX/$name.json" --out "$out" --quiet > "$tmp/prep.log" 2>&1
    rc=$?
    check "prepare --tokenizer $name.json (rc $rc): $(tail -2 "$tmp/prep.log")" '[ $rc -eq 0 ]'
    check "$name: the sidecar tokenizer.json is the file, byte for byte" 'cmp -s "$out/tokenizer.json" "$FX/$name.json"'
    "$TOK" "$FX/$name.json" "$tmp/doc.txt" > "$tmp/whole.txt"
    # the shard: end-of-text, then the document's ids (read here with python, not data/shard.c)
    res=$("$PY" - "$out/train_000000.bin" "$tmp/whole.txt" <<'EOF'
import struct, sys
b = open(sys.argv[1], "rb").read()
h = struct.unpack("<256i", b[:1024])
w = 2 if h[0] == 20240520 else 4
ids = list(struct.unpack("<%d%s" % (h[2], "H" if w == 2 else "I"), b[1024:1024 + w * h[2]]))
whole = [int(x) for x in open(sys.argv[2]).read().split()]
print("same" if ids[1:] == whole else "differ: %d vs %d ids, first difference at %d" % (len(ids) - 1, len(whole),
      next((i for i, (x, y) in enumerate(zip(ids[1:], whole)) if x != y), min(len(ids) - 1, len(whole)))))
EOF
)
    check "$name: prepare's streamed ids == tok_encode on the whole text ($res)" '[ "$res" = same ]'
    # the same cut thousands of times: the text arriving 997 (then 65521) bytes at a time
    for step in 997 65521; do
        "$TOK" "$FX/$name.json" --stream-step $step "$tmp/doc.txt" > "$tmp/streamed.txt"
        check "$name: ids streamed $step bytes at a time == the whole text's" 'cmp -s "$tmp/streamed.txt" "$tmp/whole.txt"'
    done
    "$PREP" --decode "$out/train_000000.bin" > "$tmp/dec.txt" 2> "$tmp/err"
    eot=$([ $name = llama3 ] && echo '<|end_of_text|>' || echo '<|endoftext|>')
    # qwen2.json has normalizer NFC: its ids decode to the text with each part between added tokens
    # in NFC (valid UTF-8 only; python's unicodedata), as the `tokenizers` library normalizes
    "$PY" - "$tmp/doc.txt" "$tmp/want.txt" "$eot" "$FX/$name.json" <<'EOF'
import json, re, sys, unicodedata
s = open(sys.argv[1], "rb").read().decode("utf-8", "surrogateescape")
j = json.load(open(sys.argv[4], encoding="utf-8"))
if (j.get("normalizer") or {}).get("type") == "NFC":
    added = sorted((a["content"] for a in j["added_tokens"]), key=len, reverse=True)
    cut = re.compile("(" + "|".join(map(re.escape, added)) + ")")
    nfc = lambda t: "".join(p if "\udc80" <= p[0] <= "\udcff" else unicodedata.normalize("NFC", p)
                            for p in re.findall(r"[\udc80-\udcff]+|[^\udc80-\udcff]+", t))
    s = "".join(p if i % 2 else nfc(p) for i, p in enumerate(cut.split(s)))
open(sys.argv[2], "wb").write(sys.argv[3].encode() + s.encode("utf-8", "surrogateescape"))
EOF
    check "$name: prepare --decode (sidecar found by itself) == end-of-text + the text, bytes ($(head -c 200 "$tmp/err"))" \
        'cmp -s "$tmp/dec.txt" "$tmp/want.txt"'
done
# a run with our own tokenizer in the same directory replaces the other sidecar
"$PREP" --train "$tmp/doc.txt" --vocab-size 300 --out "$tmp/p_gpt2" --quiet > "$tmp/prep.log" 2>&1
check "our tokenizer over a tokenizer.json run: tokenizer.bin written, tokenizer.json removed" \
    '[ -f "$tmp/p_gpt2/tokenizer.bin" ] && [ ! -e "$tmp/p_gpt2/tokenizer.json" ]'

# ---- 3. .jsonl input with --field ---------------------------------------------------------------
"$PY" - "$tmp/docs.jsonl" "$tmp/docs_texts.bin" <<'EOF'
import json, sys
docs = ["Привет, мир! 12345 don't", "  tabs\tand\n\nnewlines  ", "<|im_start|>user\n你好<|im_end|>", "x"]
with open(sys.argv[1], "w") as f:
    for i, d in enumerate(docs):
        f.write(json.dumps({"id": i, "body": d}) + "\n" + ("\n" if i == 1 else ""))  # a blank line is skipped
open(sys.argv[2], "wb").write(b"\0".join(d.encode() for d in docs) + b"\0")
EOF
"$PREP" --train "$tmp/docs.jsonl" --field body --tokenizer "$FX/qwen2.json" --out "$tmp/pj" --quiet > "$tmp/prep.log" 2>&1
rc=$?
"$TOK" "$FX/qwen2.json" --nul < "$tmp/docs_texts.bin" > "$tmp/doc_ids.txt"
res=$("$PY" - "$tmp/pj/train_000000.bin" "$tmp/doc_ids.txt" <<'EOF'
import struct, sys
b = open(sys.argv[1], "rb").read()
h = struct.unpack("<256i", b[:1024])
ids = list(struct.unpack("<%dH" % h[2], b[1024:1024 + 2 * h[2]]))
want = []
for line in open(sys.argv[2]).read().split("\n")[:-1]:
    want += [0] + [int(x) for x in line.split()]  # end-of-text (id 0) before every document
print("same" if ids == want else "differ: %s vs %s" % (ids[:12], want[:12]))
EOF
)
check "prepare .jsonl --field body (rc $rc): end-of-text + each line's ids ($res)" '[ $rc -eq 0 ] && [ "$res" = same ]'
printf '{"body": "a"}\n{"text": "b"}\n' > "$tmp/bad.jsonl"
"$PREP" --train "$tmp/bad.jsonl" --field body --tokenizer "$FX/qwen2.json" --out "$tmp/pjb" --quiet > /dev/null 2> "$tmp/err"
rc=$?
check "a .jsonl line without the field: exit 1, one line naming the file, line 2 and the field ($(cat "$tmp/err"))" \
    '[ $rc -eq 1 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q "bad.jsonl.*line 2.*\"body\"" "$tmp/err"'

# ---- 4. export writes the tokenizer.json back unchanged -----------------------------------------
"$TOK" "$FX/qwen2.json" --export-hf "$tmp/ex" > /dev/null 2>&1
check "tok_encode --export-hf of qwen2.json: tokenizer.json unchanged, config names <|endoftext|>" \
    'cmp -s "$tmp/ex/tokenizer.json" "$FX/qwen2.json" && grep -q "\"eos_token\": \"<|endoftext|>\"" "$tmp/ex/tokenizer_config.json"'

# ---- 5. a model trained on shards of a tokenizer.json samples and exports with it -------------------
# (the 2.5 MB document above as qwen2 shards, vocab 1001, 3 steps)
"$PREP" --train "$tmp/doc.txt" --tokenizer "$FX/qwen2.json" --out "$tmp/pk" --quiet > /dev/null 2>&1
"$build/train_gpt" --config configs/tiny_gated.ini --model.vocab_size=1001 --model.n_layer=1 --model.d_model=32 --model.n_head=2 \
    --model.n_kv_head=1 --model.head_dim=16 --model.d_ff=64 --model.max_seq_len=32 --train.batch_size=2 --train.seq_len=32 \
    --train.steps=3 --train.warmup_steps=1 --train.threads=1 --log.val_every=0 --metrics.probe_every=0 --log.sample_every=0 \
    --checkpoint.checkpoint_every=3 --data.train_glob="$tmp/pk/train_*.bin" --data.val_glob="$tmp/pk/train_*.bin" \
    --data.tokenizer="$tmp/pk/tokenizer.json" --log.run_dir="$tmp/run" > "$tmp/train.log" 2>&1
rc=$?
check "train_gpt on tokenizer.json shards (rc $rc): $(tail -1 "$tmp/train.log")" '[ $rc -eq 0 ]'
"$build/gatedgpt_ckpt" sample "$tmp/run/checkpoints" --prompt "Привет <|im_start|>And God" --tokens 8 --greedy > "$tmp/sample.txt" 2>&1
rc=$?
check "gatedgpt_ckpt sample encodes the prompt and decodes with the sidecar tokenizer.json (rc $rc: $(head -c 300 "$tmp/sample.txt"))" \
    '[ $rc -eq 0 ] && grep -q "Привет <|im_start|>And God" "$tmp/sample.txt"'
"$build/gatedgpt_ckpt" export "$tmp/run/checkpoints" --out "$tmp/hf" > "$tmp/export.log" 2>&1
rc=$?
check "gatedgpt_ckpt export ([data] tokenizer = tokenizer.json) writes it unchanged (rc $rc)" \
    '[ $rc -eq 0 ] && cmp -s "$tmp/hf/tokenizer.json" "$FX/qwen2.json" && grep -q "\"eos_token_id\": 0" "$tmp/hf/config.json"'

# ---- 6. bad tokenizer.json: one line naming the file and the part, exit 1, nothing written ----
"$PY" - "$FX/gpt2.json" "$tmp" <<'EOF'
import json, sys
src, d = sys.argv[1], sys.argv[2]
j = json.load(open(src))
def put(name, obj):
    json.dump(obj, open(f"{d}/{name}.json", "w"))
w = json.loads(json.dumps(j)); w["model"] = {"type": "WordPiece", "vocab": {"a": 0}, "unk_token": "[UNK]"}; put("wordpiece", w)
u = json.loads(json.dumps(j)); u["model"] = {"type": "Unigram", "vocab": [["a", 0.0]]}; put("unigram", u)
m = json.loads(json.dumps(j)); m["model"]["merges"][5] = ["Ġ", "ZZZnotatoken"]; put("unknown_merge", m)
n = json.loads(json.dumps(j)); n["normalizer"] = {"type": "NFKC"}; put("nfkc", n)
p = json.loads(json.dumps(j)); p["pre_tokenizer"] = {"type": "Whitespace"}; put("whitespace", p)
b = json.loads(json.dumps(j)); del b["model"]["vocab"]["Ā"]; put("no_byte", b)
open(f"{d}/broken.json", "w").write(open(src).read()[:20000])
raw = open(src, encoding="utf-8").read()
open(f"{d}/bom.json", "w", encoding="utf-8").write("\ufeff" + raw)
open(f"{d}/array.json", "w", encoding="utf-8").write("[" + raw + "]")
open(f"{d}/nul_ws.json", "w", encoding="utf-8").write(raw.replace("{", "{\x00", 1))
open(f"{d}/trailing.json", "w", encoding="utf-8").write(raw + " x")
k = json.loads(raw); k["model"]["vocab"]["a\u0000b"] = 5000; put("nul_key", k)
k = json.loads(raw); k["model"]["vocab"]["zzzz"] = 2**30 - 1; put("big_id", k)
k = json.loads(raw); k["added_tokens"].append({"id": 5, "content": "<x>", "special": True}); put("collide", k)
EOF
for c in "wordpiece:model.type is 'WordPiece'" "unigram:model.type is 'Unigram'" \
         "unknown_merge:model.merges\[5\].*ZZZnotatoken.*not in model.vocab" "nfkc:normalizer 'NFKC'" \
         "whitespace:pre_tokenizer 'Whitespace'" "no_byte:no token for byte 0x00" "broken:broken JSON at line" \
         "bom:byte-order mark" "array:top level is an array" "nul_ws:byte 0x00 at line 1, column 2 outside a string" \
         "trailing:text after the JSON value" "nul_key:u0000 (a NUL character) in a string" \
         "big_id:id 1073741823 (\"zzzz\") is far above" "collide:added token '<x>' has id 5, which model.vocab gives to"; do
    f=${c%%:*}; want=${c#*:}
    "$PREP" --train "$tmp/doc.txt" --tokenizer "$tmp/$f.json" --out "$tmp/bad_$f" --quiet > /dev/null 2> "$tmp/err"
    rc=$?
    check "bad $f.json: exit 1, one line naming $f.json and /$want/ ($(head -c 300 "$tmp/err"))" \
        '[ $rc -eq 1 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q "$f.json" "$tmp/err" && grep -q "$want" "$tmp/err" && [ -z "$(ls "$tmp/bad_$f" 2>/dev/null)" ]'
done

# ---- 7. Split patterns as the `tokenizers` library reads them (Oniguruma, Ruby syntax) -----------
# tests/hf_tokenizer/patterns.json (tests/interop/hf_patterns.py fixtures): for each construct a
# pattern in patterns_base.json (a BPE whose merges cross the cuts, so a wrong cut shows in the ids),
# texts and the library's ids; patterns refused in one line; PCRE2's match limit: prepare stops
"$PY" - "$FX/patterns.json" "$FX/patterns_base.json" "$tmp" <<'EOF'
import json, random, sys
fx, base, d = sys.argv[1:4]
P = json.load(open(fx, encoding="utf-8"))
b = json.load(open(base, encoding="utf-8"))
def put(name, pat):
    b["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = pat
    json.dump(b, open(f"{d}/pat_{name}.json", "w", encoding="utf-8"), ensure_ascii=False)
with open(f"{d}/pat_cases.txt", "w") as f:
    for c in P["cases"]:
        put(c["name"], c["pattern"])
        open(f"{d}/pat_{c['name']}.bin", "wb").write(b"".join(t.encode() + b"\0" for t in c["texts"]))
        open(f"{d}/pat_{c['name']}.ids", "w").write("".join(" ".join(map(str, i)) + "\n" for i in c["ids"]))
        f.write(c["name"] + "\n")
with open(f"{d}/pat_refused.txt", "w") as f:
    for c in P["refused"]:
        put(c["name"], c["pattern"])
        f.write(c["name"] + "\t" + c["message"] + "\n")
n = P["nfc"]
open(f"{d}/nfc.bin", "wb").write(b"".join(t.encode() + b"\0" for t in n["texts"]))
open(f"{d}/nfc.ids", "w").write("".join(" ".join(map(str, i)) + "\n" for i in n["ids"]))
m = P["match_limit"]
put("match_limit", m["pattern"])
open(f"{d}/limit.txt", "w").write("first document\n<|endoftext|>\nok " + m["text"] + "\n")
# streaming with a pattern that looks behind (\b, ^, (?<=)): a 1.2 MB document of short pieces
put("lookbehind", r"\b\p{L}+|^\p{L}|(?<=\p{L})\p{N}|\s+|.")
r = random.Random(1)
w = ["ab", "क्ष", "x_y", "12", "ab\u0301c", "\n", "  ", "a1", "q", "ZZ9"]
open(f"{d}/lb_doc.txt", "w").write("".join(r.choice(w) + r.choice(["", " ", "\n"]) for _ in range(300000)))
EOF
while read -r name; do
    "$TOK" "$tmp/pat_$name.json" --nul < "$tmp/pat_$name.bin" > "$tmp/pat_$name.got" 2> "$tmp/err"
    nd=$(diff "$tmp/pat_$name.got" "$tmp/pat_$name.ids" | grep -c '^<')
    check "pattern $name: ids equal to the tokenizers library's ($nd texts differ; $(head -c 200 "$tmp/err"))" \
        '[ "$nd" -eq 0 ] && [ "$(wc -l < "$tmp/pat_$name.got")" -eq "$(wc -l < "$tmp/pat_$name.ids")" ]'
done < "$tmp/pat_cases.txt"
"$TOK" "$FX/qwen2.json" --nul < "$tmp/nfc.bin" > "$tmp/nfc.got"
nd=$(diff "$tmp/nfc.got" "$tmp/nfc.ids" | grep -c '^<')
check "NFC as the library's older tables: combining marks of Unicode 10-15 not reordered ($nd of 60 texts differ)" '[ "$nd" -eq 0 ]'
while IFS=$'\t' read -r name want; do
    "$PREP" --train "$tmp/doc.txt" --tokenizer "$tmp/pat_$name.json" --out "$tmp/bad_$name" --quiet > /dev/null 2> "$tmp/err"
    rc=$?
    check "pattern $name refused: exit 1, one line naming the file and /$want/ ($(head -c 300 "$tmp/err"))" \
        '[ $rc -eq 1 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q "pat_$name.json" "$tmp/err" && grep -Eq "$want" "$tmp/err"'
done < "$tmp/pat_refused.txt"
"$PREP" --train "$tmp/limit.txt" --tokenizer "$tmp/pat_match_limit.json" --out "$tmp/limit_out" --quiet > /dev/null 2> "$tmp/err"
rc=$?
check "PCRE2's match limit stops prepare: exit 1, one line naming the file, document 2, byte 3 ($(head -c 300 "$tmp/err"))" \
    '[ $rc -eq 1 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q "limit.txt.*document 2, byte 3 of it (byte 32 of the file).*match limit" "$tmp/err" && [ ! -e "$tmp/limit_out/train_000000.bin" ]'
"$TOK" "$tmp/pat_lookbehind.json" "$tmp/lb_doc.txt" > "$tmp/lb_whole.txt"
for step in 997 65521; do
    "$TOK" "$tmp/pat_lookbehind.json" --stream-step $step "$tmp/lb_doc.txt" > "$tmp/lb_streamed.txt"
    check "a pattern that looks behind: ids streamed $step bytes at a time (context kept) == the whole text's" \
        'cmp -s "$tmp/lb_streamed.txt" "$tmp/lb_whole.txt"'
done
"$PREP" --train "$tmp/lb_doc.txt" --tokenizer "$tmp/pat_lookbehind.json" --out "$tmp/lb" --quiet > /dev/null 2>&1
res=$("$PY" - "$tmp/lb/train_000000.bin" "$tmp/lb_whole.txt" <<'EOF'
import struct, sys
b = open(sys.argv[1], "rb").read()
h = struct.unpack("<256i", b[:1024])
ids = list(struct.unpack("<%dH" % h[2], b[1024:1024 + 2 * h[2]]))
print("same" if ids[1:] == [int(x) for x in open(sys.argv[2]).read().split()] else "differ")
EOF
)
check "a pattern that looks behind: prepare's streamed ids (1 MiB reads, context kept) == tok_encode on the whole text ($res)" '[ "$res" = same ]'

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
