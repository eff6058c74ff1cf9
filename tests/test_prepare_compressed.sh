#!/usr/bin/env bash
# tests/test_prepare_compressed.sh BUILD_DIR: prepare reads gzip, zstd and xz input (data/decompress.h).
#   The KJV text (scripts/prepare_kjv.sh) compressed three ways, each also cut into several
#   members / frames / streams at arbitrary byte offsets (cat a.gz b.gz), gives train and val shards
#   byte-identical to the plain files', with -j 1 and -j 2; a tokenizer trained on the compressed
#   file is the plain file's; a .jsonl.gz is read as JSON lines. A truncated .zst/.gz/.xz and a
#   corrupt .gz or trailing garbage give one line naming the file and the compressed offset, a
#   non-zero exit, and no shard under a final name (shards written before the error are removed).
set -u
if [ $# -ne 1 ]; then
    echo "usage: $0 BUILD_DIR" >&2
    exit 2
fi
BIN=$1/prepare
[ -x "$BIN" ] || { echo "FAIL: $BIN not found or not executable"; echo "0 passed, 1 failed"; exit 1; }
bash scripts/prepare_kjv.sh "$BIN" >/dev/null || { echo "FAIL: scripts/prepare_kjv.sh"; echo "0 passed, 1 failed"; exit 1; }
KJV=data/kjv
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
check() { local what=$1; shift; if "$@"; then ok; else bad "$what"; fi; }
TOK=$KJV/tokenizer.bin

# the reference: the plain files on one thread
"$BIN" --train "$KJV/train.txt" --val "$KJV/val.txt" --tokenizer "$TOK" --out "$TMP/plain" -j 1 --quiet >/dev/null 2>"$TMP/err"
check "plain run: $(cat "$TMP/err")" [ -s "$TMP/plain/train_000000.bin" ]

# one-piece and many-piece compressed copies: the pieces cut at odd byte offsets, inside lines
size=$(stat -c %s "$KJV/train.txt")
a=$((size / 3 + 17)); b=$((2 * size / 3 + 5))
head -c $a "$KJV/train.txt" >"$TMP/p1"
tail -c +$((a + 1)) "$KJV/train.txt" | head -c $((b - a)) >"$TMP/p2"
tail -c +$((b + 1)) "$KJV/train.txt" >"$TMP/p3"
check "the pieces are the text" cmp -s <(cat "$TMP/p1" "$TMP/p2" "$TMP/p3") "$KJV/train.txt"
gzip -c "$KJV/train.txt" >"$TMP/one.gz"
zstd -q -c "$KJV/train.txt" >"$TMP/one.zst"
xz -c "$KJV/train.txt" >"$TMP/one.xz"
for p in p1 p2 p3; do gzip -c "$TMP/$p"; done >"$TMP/multi.gz"
for p in p1 p2 p3; do zstd -q -c "$TMP/$p"; done >"$TMP/multi.zst"
for p in p1 p2 p3; do xz -c "$TMP/$p"; done >"$TMP/multi.xz"
xz -c "$KJV/val.txt" >"$TMP/val.xz"
zstd -q -c "$KJV/val.txt" >"$TMP/val.zst"
check "gzip -t multi.gz" gzip -t "$TMP/multi.gz"
for f in one.gz one.zst one.xz multi.gz multi.zst multi.xz; do
    v=val.xz; case $f in *.xz) v=val.zst ;; esac
    for j in 1 2; do
        o=$TMP/out_${f}_$j
        "$BIN" --train "$TMP/$f" --val "$TMP/$v" --tokenizer "$TOK" --out "$o" -j $j --batch-bytes 262144 --quiet \
            >"$TMP/o" 2>"$TMP/e"
        rc=$?
        check "$f -j $j runs (rc $rc): $(cat "$TMP/e")" [ $rc -eq 0 ]
        check "$f -j $j: train shard = the plain file's" cmp -s "$o/train_000000.bin" "$TMP/plain/train_000000.bin"
        check "$f -j $j: val shard ($v) = the plain file's" cmp -s "$o/val_000000.bin" "$TMP/plain/val_000000.bin"
    done
done
# training reads the compressed text too: the same tokenizer as from the plain text
head -c 400000 "$KJV/train.txt" >"$TMP/small.txt"
gzip -c "$TMP/small.txt" >"$TMP/small.txt.gz"
"$BIN" --train "$TMP/small.txt" --out "$TMP/tp" --vocab-size 600 --quiet >/dev/null 2>&1
"$BIN" --train "$TMP/small.txt.gz" --out "$TMP/tz" --vocab-size 600 --quiet >/dev/null 2>&1
check "a tokenizer trained on the .gz is the plain text's" cmp -s "$TMP/tp/tokenizer.bin" "$TMP/tz/tokenizer.bin"
check "and so are its shards" cmp -s "$TMP/tp/train_000000.bin" "$TMP/tz/train_000000.bin"
# JSON lines, compressed: name.jsonl.gz counts as .jsonl
awk 'NR <= 3000 { gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); printf "{\"id\": %d, \"text\": \"%s\"}\n", NR, $0 }' \
    "$KJV/train.txt" >"$TMP/d.jsonl"
gzip -c "$TMP/d.jsonl" >"$TMP/d.jsonl.gz"
"$BIN" --train "$TMP/d.jsonl" --tokenizer "$TOK" --out "$TMP/jp" -j 1 --quiet >/dev/null 2>&1
"$BIN" --train "$TMP/d.jsonl.gz" --tokenizer "$TOK" --out "$TMP/jz" -j 2 --quiet >"$TMP/o" 2>&1
check "d.jsonl.gz: 3000 documents (JSON lines): $(grep '^train:' "$TMP/o")" grep -q '^train: 3000 documents' "$TMP/o"
check "d.jsonl.gz: the shard of d.jsonl" cmp -s "$TMP/jp/train_000000.bin" "$TMP/jz/train_000000.bin"

# ---- broken streams: one line naming the file and the offset, exit != 0, no shard left ----
expect_broken() {  # NAME FILE SUBSTRING: with -j 1 and -j 2, small shards so that some were written before the error
    local name=$1 f=$2 sub=$3
    for j in 1 2; do
        local o=$TMP/broken_$j
        rm -rf "$o"
        "$BIN" --train "$f" --tokenizer "$TOK" --out "$o" -j $j --shard-tokens 20000 --batch-bytes 65536 --quiet \
            >"$TMP/o" 2>"$TMP/e"
        local rc=$?
        if [ $rc -eq 0 ]; then bad "$name -j $j: exit status 0"
        elif [ $rc -gt 128 ]; then bad "$name -j $j: killed by signal $((rc - 128))"
        elif ! grep -qF -- "$sub" "$TMP/e"; then bad "$name -j $j: stderr lacks '$sub': $(cat "$TMP/e")"
        elif [ "$(wc -l <"$TMP/e")" -ne 1 ]; then bad "$name -j $j: want one line: $(cat "$TMP/e")"
        else ok; fi
        check "$name -j $j: no shard left ($(ls "$o" | tr '\n' ' '))" [ -z "$(ls "$o" | grep -E '^(train|val)_')" ]
    done
}
tz=$(( $(stat -c %s "$TMP/one.zst") / 2 ))
head -c $tz "$TMP/one.zst" >"$TMP/trunc.zst"
expect_broken "truncated .zst" "$TMP/trunc.zst" \
    "error: text '$TMP/trunc.zst': truncated zstd stream at compressed offset $tz (the file ends inside a frame)"
tg=$(( $(stat -c %s "$TMP/multi.gz") - 3 ))
head -c $tg "$TMP/multi.gz" >"$TMP/trunc.gz"
expect_broken "truncated .gz (in its last member's trailer)" "$TMP/trunc.gz" \
    "error: text '$TMP/trunc.gz': truncated gzip stream at compressed offset $tg (the file ends inside a member)"
tx=$(( $(stat -c %s "$TMP/one.xz") / 2 ))
head -c $tx "$TMP/one.xz" >"$TMP/trunc.xz"
expect_broken "truncated .xz" "$TMP/trunc.xz" "error: text '$TMP/trunc.xz': truncated xz stream at compressed offset"
# corrupt: bytes overwritten in the middle of the deflate data
cp "$TMP/one.gz" "$TMP/corrupt.gz"
printf '\xff\xff\xff\xff\xff\xff\xff\xff' | dd of="$TMP/corrupt.gz" bs=1 seek=600000 conv=notrunc 2>/dev/null
expect_broken "corrupt .gz" "$TMP/corrupt.gz" "error: text '$TMP/corrupt.gz': corrupt gzip stream at compressed offset"
off=$(sed -nE 's/.*compressed offset ([0-9]+):.*/\1/p' "$TMP/e")
check "corrupt .gz: the offset ($off) is at or after the damage (600000) and within the file" \
    [ "${off:-0}" -ge 600000 -a "${off:-0}" -le "$(stat -c %s "$TMP/one.gz")" ]
# bytes after the last member that are not another member
{ cat "$TMP/one.gz"; printf 'garbage after the member\n'; } >"$TMP/trailing.gz"
expect_broken "trailing garbage after a .gz member" "$TMP/trailing.gz" \
    "error: text '$TMP/trailing.gz': corrupt gzip stream at compressed offset $(stat -c %s "$TMP/one.gz"): the bytes after a member are not another gzip member"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
