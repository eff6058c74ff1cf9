#!/usr/bin/env bash
# tests/test_tokenizer_export.sh BUILD_DIR: the Hugging Face tokenizer export (tools/export_tokenizer.h,
# via `tok_encode TOK --export-hf DIR`) with python's standard library only (no transformers):
#   - the KJV tokenizer: tokenizer.json parses; its vocab, merges, end-of-text token, Split regex
#     and pipeline match tokenizer.bin; a python re-implementation of tokenizer.json's pipeline
#     gives our ids on the edge cases, random strings and KJV lines (tests/interop/check_tokenizer.py
#     light); tokenizer_config.json and special_tokens_map.json; no .tmp files left;
#   - the same for a tokenizer with ~2700 merges, most of them non-ASCII, trained on synthetic text
#     (check_tokenizer.py synth), and for one without merges (vocab 257);
#   - one-line errors naming the file, nothing left under a final name: an llm.c tokenizer (no
#     merges), two tokens with the same bytes, an output directory that cannot be created, a
#     file that cannot be written.
# The full check against `tokenizers` / `transformers` is `check_tokenizer.py run` (docs/formats.md).
set -u
if [ $# -ne 1 ]; then echo "usage: $0 BUILD_DIR" >&2; exit 2; fi
build=$1
cd "$(dirname "${BASH_SOURCE[0]}")/.."
TOK=$build/tok_encode
[ -x "$TOK" ] || { echo "FAIL: $TOK not found"; echo "0 passed, 1 failed"; exit 1; }
bash scripts/prepare_kjv.sh "$build/prepare" > /dev/null || { echo "FAIL: prepare_kjv.sh"; exit 1; }
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
CHECK=tests/interop/check_tokenizer.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1"; fi; }

# ---- the KJV tokenizer -----------------------------------------------------------------------
"$PY" "$CHECK" light --tok-encode "$TOK" --tokenizer data/kjv/tokenizer.bin --out "$tmp/kjv" --text-file data/kjv/val.txt \
    > "$tmp/light.txt" 2>&1
rc=$?
check "check_tokenizer.py light on the KJV tokenizer (rc $rc): $(grep FAIL "$tmp/light.txt" | head -3)" '[ $rc -eq 0 ]'
grep '^light:' "$tmp/light.txt"
# exporting again over an existing export replaces it
"$TOK" data/kjv/tokenizer.bin --export-hf "$tmp/kjv" --model-max-length 64 > /dev/null 2>&1
check "re-export over an existing directory" 'grep -q "\"model_max_length\": 64" "$tmp/kjv/tokenizer_config.json"'
check "no .tmp files after a re-export" '[ -z "$(ls "$tmp/kjv" | grep tmp)" ]'

# ---- a tokenizer with many non-ASCII merges (the KJV one has none): trained on synthetic text -------
"$PY" "$CHECK" synth "$tmp/syn_train.txt" --bytes 300000 --seed 1 && "$PY" "$CHECK" synth "$tmp/syn_val.txt" --bytes 20000 --seed 2
"$build/prepare" --train "$tmp/syn_train.txt" --out "$tmp/syn" --vocab-size 3000 --quiet > /dev/null 2>&1
"$PY" "$CHECK" light --tok-encode "$TOK" --tokenizer "$tmp/syn/tokenizer.bin" --out "$tmp/synhf" --text-file "$tmp/syn_val.txt" \
    --random 1000 > "$tmp/lightsyn.txt" 2>&1
rc=$?
check "check_tokenizer.py light on a non-ASCII tokenizer (rc $rc): $(grep FAIL "$tmp/lightsyn.txt" | head -3)" '[ $rc -eq 0 ]'
grep '^light:' "$tmp/lightsyn.txt"

# ---- a tokenizer without merges ----------------------------------------------------------------
printf 'Just a little text, caf\xc3\xa9 42.\n' > "$tmp/small.txt"
"$build/prepare" --train "$tmp/small.txt" --out "$tmp/v257" --vocab-size 257 --quiet > /dev/null 2>&1
"$PY" "$CHECK" light --tok-encode "$TOK" --tokenizer "$tmp/v257/tokenizer.bin" --out "$tmp/v257hf" --text-file "$tmp/small.txt" \
    --random 100 > "$tmp/light257.txt" 2>&1
rc=$?
check "vocab 257 (no merges) exports and checks (rc $rc): $(grep FAIL "$tmp/light257.txt" | head -3)" '[ $rc -eq 0 ]'

# ---- errors --------------------------------------------------------------------------------------
# expect_error NAME DIR TOKENIZER PATTERN: export fails, one line on stderr matching PATTERN, no
# tokenizer.json / .tmp left in DIR
expect_error() {
    name=$1; dir=$2; pat=$4
    "$TOK" "$3" --export-hf "$dir" > "$tmp/out.txt" 2> "$tmp/err.txt"
    erc=$?
    check "$name: exit 1 (rc $erc)" '[ $erc -eq 1 ]'
    check "$name: one line on stderr: $(cat "$tmp/err.txt")" '[ "$(wc -l < "$tmp/err.txt")" -eq 1 ]'
    check "$name: message matches '$pat': $(cat "$tmp/err.txt")" 'grep -qE "$pat" "$tmp/err.txt"'
    check "$name: nothing left under tokenizer.json or .tmp" \
        '[ ! -f "$dir/tokenizer.json" ] && [ -z "$(ls "$dir" 2>/dev/null | grep "tmp$" | grep -v "^tokenizer.json.tmp$")" ]'
}
"$PY" - "$tmp" <<'EOF'
import struct, sys
d = sys.argv[1]
# llm.c's gpt2_tokenizer.bin layout: 256 x uint32 header, then each token as 1 length byte + bytes
toks = [bytes([b]) for b in range(256)] + [b"ab", b"<|endoftext|>"]
with open(d + "/llmc.bin", "wb") as f:
    f.write(struct.pack("<256I", *([20240328, 2, len(toks), len(toks) - 1] + [0] * 252)))
    for t in toks:
        f.write(bytes([len(t)]) + t)
# our format with merges (a,a) -> "aa", (aa,a) -> "aaa" and (a,aa) -> "aaa" again: two ids, same bytes
merges = [(97, 97), (256, 97), (97, 256)]
toks = [bytes([b]) for b in range(256)] + [b"aa", b"aaa", b"aaa", b"<|endoftext|>"]
V, M = len(toks), len(merges)
body = b"".join(struct.pack("<2i", a, b) for a, b in merges) + struct.pack(f"<{V}i", *map(len, toks)) + b"".join(toks)
h = 1469598103934665603  # data/tokenizer.c fnv1a64 (docs/formats.md says 14695981039346656037)
for c in body:
    h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
hdr = [20250611, 1, V, V - 1, M, 1, sum(map(len, toks)), 0, h & 0xFFFFFFFF, h >> 32] + [0] * 54
with open(d + "/dup.bin", "wb") as f:
    f.write(struct.pack("<10I54i", *hdr) + body)
EOF
expect_error "llm.c tokenizer" "$tmp/e1" "$tmp/llmc.bin" "e1/tokenizer.json.*no merges"
expect_error "two tokens with the same bytes" "$tmp/e2" "$tmp/dup.bin" "e2/tokenizer.json.*tokens 257 and 258 have the same bytes"
touch "$tmp/afile"
expect_error "output directory under a file" "$tmp/afile/sub" data/kjv/tokenizer.bin "cannot create the output directory '.*afile/sub'"
mkdir -p "$tmp/e3/tokenizer.json.tmp"   # a directory where the temporary file goes
expect_error "unwritable tokenizer.json" "$tmp/e3" data/kjv/tokenizer.bin "cannot create '.*e3/tokenizer.json.tmp'"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
