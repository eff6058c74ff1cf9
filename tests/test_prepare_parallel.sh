#!/usr/bin/env bash
# tests/test_prepare_parallel.sh BUILD_DIR: prepare -j N (data/encode_pool.h) writes the same bytes
# as -j 1 (the single-threaded stream, another code path) for N = 2 and 3, at several batch sizes:
#   the KJV text (many documents; scripts/prepare_kjv.sh), train and val; one long document without
#   separators (cut between batches where a space follows a non-space byte); documents whose first
#   batch is far slower to encode than the ones after it (long uncached pre-tokens), so that a writer
#   that did not keep the document order would put later batches first; several files with an empty
#   one and one of separators only; JSON lines; a Hugging Face tokenizer.json (documents never cut);
#   a tokenizer trained in the same run (in memory for -j 1, read back from the sidecar for -j 2).
#   Bad -j values fail in one line.
set -u
if [ $# -ne 1 ]; then
    echo "usage: $0 BUILD_DIR" >&2
    exit 2
fi
BIN=$1/prepare
[ -x "$BIN" ] || { echo "FAIL: $BIN not found or not executable"; echo "0 passed, 1 failed"; exit 1; }
bash scripts/prepare_kjv.sh "$BIN" >/dev/null || { echo "FAIL: scripts/prepare_kjv.sh"; echo "0 passed, 1 failed"; exit 1; }
KJV=data/kjv
TOK=$KJV/tokenizer.bin
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
check() { local what=$1; shift; if "$@"; then ok; else bad "$what"; fi; }

# same NAME TOKENIZER BATCH_BYTES FILE...: -j 2 and -j 3 give -j 1's train shards (and summary line)
same() {
    local name=$1 tok=$2 bb=$3
    shift 3
    "$BIN" --train "$@" --tokenizer "$tok" --out "$TMP/j1" -j 1 --shard-tokens 300000 --quiet >"$TMP/s1" 2>"$TMP/e1"
    check "$name -j 1 runs: $(cat "$TMP/e1")" [ -s "$TMP/j1/train_000000.bin" ]
    for j in 2 3; do
        "$BIN" --train "$@" --tokenizer "$tok" --out "$TMP/j$j" -j $j --batch-bytes "$bb" --shard-tokens 300000 --quiet \
            >"$TMP/s$j" 2>"$TMP/e$j"
        check "$name -j $j runs: $(cat "$TMP/e$j")" [ -s "$TMP/j$j/train_000000.bin" ]
        check "$name -j $j: as many shards as -j 1" [ "$(ls "$TMP/j1" | grep -c '^train_')" = "$(ls "$TMP/j$j" | grep -c '^train_')" ]
        local f
        for f in "$TMP/j1"/train_*.bin; do
            check "$name -j $j --batch-bytes $bb: $(basename "$f") = -j 1's" cmp -s "$f" "$TMP/j$j/$(basename "$f")"
        done
        check "$name -j $j: the summary line of -j 1" [ "$(grep '^train:' "$TMP/s1")" = "$(grep '^train:' "$TMP/s$j")" ]
    done
}

same "KJV" "$TOK" 65536 "$KJV/train.txt"
same "KJV, default batches" "$TOK" 1048576 "$KJV/train.txt"
"$BIN" --train "$KJV/train.txt" --val "$KJV/val.txt" --tokenizer "$TOK" --out "$TMP/v1" -j 1 --quiet >/dev/null 2>&1
"$BIN" --train "$KJV/train.txt" --val "$KJV/val.txt" --tokenizer "$TOK" --out "$TMP/v2" -j 2 --batch-bytes 8192 --quiet >/dev/null 2>&1
check "KJV val shard: -j 2 = -j 1" cmp -s "$TMP/v1/val_000000.bin" "$TMP/v2/val_000000.bin"

# one document of 1 MB: cut between batches (4 KiB and 1000 bytes)
grep -v '^<|endoftext|>$' "$KJV/train.txt" | head -c 1000000 >"$TMP/one_doc.txt"
same "one long document" "$TOK" 4096 "$TMP/one_doc.txt"
sed 's/ /  /g' "$TMP/one_doc.txt" | head -c 300000 >"$TMP/double.txt"
same "one long document, double spaces" "$TOK" 1000 "$TMP/double.txt"

# slow first batch: documents of long random words (no cache: pre-tokens over 256 bytes are not
# cached) before cheap KJV documents; batches of 4 KiB
awk 'BEGIN { srand(11); for (d = 0; d < 3; d++) { for (w = 0; w < 8; w++) { s = ""; for (i = 0; i < 3000; i++)
         s = s sprintf("%c", 97 + int(rand() * 26)); printf "%s\n", s } print "<|endoftext|>" } }' >"$TMP/slow.txt"
head -c 300000 "$KJV/train.txt" >>"$TMP/slow.txt"
same "slow first batches" "$TOK" 4096 "$TMP/slow.txt"

# several files: an empty one, one of separators only, one without a trailing newline
: >"$TMP/empty.txt"
printf '<|endoftext|>\n<|endoftext|>\n' >"$TMP/seps.txt"
printf 'no newline at the end' >"$TMP/nonl.txt"
head -c 50000 "$KJV/val.txt" >"$TMP/v50.txt"
same "several files" "$TOK" 2048 "$TMP/v50.txt" "$TMP/empty.txt" "$TMP/seps.txt" "$TMP/nonl.txt" "$TMP/v50.txt"

# JSON lines
awk 'NR <= 2000 { gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); printf "{\"text\": \"%s\"}\n", $0 }' "$KJV/train.txt" >"$TMP/d.jsonl"
same "JSON lines" "$TOK" 4096 "$TMP/d.jsonl"

# a Hugging Face tokenizer.json (GPT-2's regex): its documents go whole to a worker
same "tokenizer.json (gpt2)" tests/hf_tokenizer/gpt2.json 4096 "$TMP/v50.txt" "$TMP/one_doc.txt"

# a tokenizer trained in the same run: -j 1 encodes with the trained one in memory, -j 2 with
# copies read back from the sidecar
for j in 1 2; do
    "$BIN" --train "$TMP/v50.txt" "$TMP/double.txt" --out "$TMP/t$j" --vocab-size 700 -j $j --batch-bytes 4096 --quiet \
        >/dev/null 2>&1
done
check "trained tokenizer: -j 2's train shard = -j 1's" cmp -s "$TMP/t1/train_000000.bin" "$TMP/t2/train_000000.bin"
check "trained tokenizer: the same tokenizer.bin" cmp -s "$TMP/t1/tokenizer.bin" "$TMP/t2/tokenizer.bin"

# bad -j values: one line
for v in 0 257 x; do
    "$BIN" --train "$TMP/v50.txt" --tokenizer "$TOK" --out "$TMP/bad" -j $v >"$TMP/o" 2>"$TMP/e"
    rc=$?
    check "-j $v refused in one line (rc $rc): $(cat "$TMP/e")" [ $rc -ne 0 -a "$(wc -l <"$TMP/e")" = 1 ]
    check "-j $v: the message names -j and the range" grep -qF -- "-j must be an integer in [1, 256], got '$v'" "$TMP/e"
done

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
