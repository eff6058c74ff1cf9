#!/usr/bin/env bash
# tests/test_prepare.sh BUILD_DIR: the `prepare` command end to end on small temporary texts.
#   shards and tokenizer written, no temporary files left; shard headers; decoding the shards
#   (prepare --decode) gives back the input with an end-of-text before every document; the
#   summary and --stats lines; several shards; re-running removes old shards; --tokenizer reuses
#   a tokenizer bit for bit; a vocabulary over 65536 gives uint32 shards; bad inputs fail with
#   one line naming the file and leave nothing under a final name; binary input (bzip2, zip, llm.c
#   shards, UTF-16, a NUL byte) is refused (gzip, zstd and xz are read: tests/test_prepare_compressed.sh);
#   --progress shows documents, tokens/s and elapsed time.
set -u
if [ $# -ne 1 ]; then
    echo "usage: $0 BUILD_DIR" >&2
    exit 2
fi
BIN=$1/prepare
[ -x "$BIN" ] || { echo "FAIL: $BIN not found or not executable"; echo "0 passed, 1 failed"; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
check() { local what=$1; shift; if "$@"; then ok; else bad "$what"; fi; }

# header int32 number i (0-based) of a shard
hdr() { od -An -t d4 -j $((4 * $2)) -N 4 "$1" | tr -d ' '; }
# what decoding the shards of these input files must give: "<|endoftext|>" before each
# non-empty document, separator lines dropped (inputs end with a newline)
expected() {
    awk 'FNR == 1 { started = 0 }
         $0 == "<|endoftext|>" || $0 == "<|endoftext|>\r" { started = 0; next }
         { if (!started) { printf "<|endoftext|>"; started = 1 } print }' "$@"
}

# ---- inputs: several documents per file, a file without separators, CRLF, UTF-8, digits ----
cat >"$TMP/a.txt" <<'EOF'
<|endoftext|>
In the beginning was the Word, and the Word was with God.
It's 1234 o'clock; they're   here -- aren't they?

A second paragraph of the first document.
<|endoftext|>
Second document: café, naïve, résumé.
	Tabbed line.
<|endoftext|>
<|endoftext|>
Third document after an empty one.
EOF
printf 'Fourth document, from a file without separators.\nLine two.\n' >"$TMP/b.txt"
printf 'Validation one.\r\n<|endoftext|>\r\nValidation two, the end.\n' >"$TMP/v.txt"
# more text so that the tokenizer has something to merge
for i in $(seq 1 40); do echo "Line $i of filler text: the quick brown fox jumps over the lazy dog."; done >>"$TMP/b.txt"

OUT=$TMP/out
"$BIN" --train "$TMP/a.txt" "$TMP/b.txt" --val "$TMP/v.txt" --out "$OUT" --vocab-size 300 --stats --quiet \
    >"$TMP/stdout" 2>"$TMP/stderr"
rc=$?
check "prepare exits 0 (rc $rc): $(cat "$TMP/stderr")" [ $rc -eq 0 ]
for f in tokenizer.bin train_000000.bin val_000000.bin; do
    check "$f written" [ -s "$OUT/$f" ]
done
check "no temporary files left: $(ls "$OUT")" [ -z "$(ls "$OUT" | grep -E '\.(tmp|pending)$')" ]
check "exactly one train shard: $(ls "$OUT")" [ "$(ls "$OUT" | grep -c '^train_')" = 1 ]
check "exactly one val shard: $(ls "$OUT")" [ "$(ls "$OUT" | grep -c '^val_')" = 1 ]

# headers: uint16 llm.c shards, token count matching the file size and the summary
for s in train val; do
    f=$OUT/${s}_000000.bin
    n=$(hdr "$f" 2)
    check "$s magic 20240520" [ "$(hdr "$f" 0)" = 20240520 ]
    check "$s version 1" [ "$(hdr "$f" 1)" = 1 ]
    check "$s size = 1024 + 2 * $n" [ "$(stat -c %s "$f")" = $((1024 + 2 * n)) ]
    check "$s summary has $n tokens: $(grep "^$s:" "$TMP/stdout")" grep -q "^$s: .* $n tokens" "$TMP/stdout"
done

# decoding gives back the text
"$BIN" --decode "$OUT/train_000000.bin" >"$TMP/train.dec"
expected "$TMP/a.txt" "$TMP/b.txt" >"$TMP/train.exp"
check "train shard decodes to the input with end-of-text before each document" cmp -s "$TMP/train.dec" "$TMP/train.exp"
"$BIN" --decode "$OUT/val_000000.bin" --tokenizer "$OUT/tokenizer.bin" >"$TMP/val.dec"
expected "$TMP/v.txt" >"$TMP/val.exp"
check "val shard decodes to the input (CRLF separator)" cmp -s "$TMP/val.dec" "$TMP/val.exp"

# summary lines: documents, bytes (the documents' text, separators excluded), tokens, bytes/token
tb=$(( $(stat -c %s "$TMP/train.exp") - 13 * 4 ))
vb=$(( $(stat -c %s "$TMP/val.exp") - 13 * 2 ))
check "train summary: $(grep '^train:' "$TMP/stdout")" \
    grep -qE "^train: 4 documents, $tb bytes, [0-9]+ tokens \(4 end-of-text\), [0-9]+\.[0-9]+ bytes/token, 1 shard$" "$TMP/stdout"
check "val summary: $(grep '^val:' "$TMP/stdout")" \
    grep -qE "^val: 2 documents, $vb bytes, [0-9]+ tokens \(2 end-of-text\), [0-9]+\.[0-9]+ bytes/token, 1 shard$" "$TMP/stdout"
check "stats line" grep -qE '^stats: unigram entropy .* train [0-9.]+, val [0-9.]+; val under train frequencies \(add-one\) [0-9.]+' "$TMP/stdout"
check "tokenizer vocab 300 (header)" [ "$(hdr "$OUT/tokenizer.bin" 2)" = 300 ]

# several shards; their concatenated decoding is the same text
"$BIN" --train "$TMP/a.txt" "$TMP/b.txt" --val "$TMP/v.txt" --out "$OUT" --vocab-size 300 --shard-tokens 50 --quiet \
    >"$TMP/stdout2" 2>&1
check "prepare with --shard-tokens 50" [ $? -eq 0 ]
nshards=$(ls "$OUT" | grep -c '^train_')
check "several train shards ($nshards)" [ "$nshards" -gt 2 ]
for f in "$OUT"/train_*.bin; do "$BIN" --decode "$f"; done >"$TMP/train2.dec"
check "shards decode, in order, to the same text" cmp -s "$TMP/train2.dec" "$TMP/train.exp"
check "summary counts the shards" grep -qE "^train: .*, $nshards shards$" "$TMP/stdout2"
# a re-run with big shards removes the old small ones
"$BIN" --train "$TMP/a.txt" "$TMP/b.txt" --val "$TMP/v.txt" --out "$OUT" --vocab-size 300 --quiet >"$TMP/stdout3" 2>&1
check "re-run removes old shards: $(ls "$OUT" | tr '\n' ' ')" [ "$(ls "$OUT" | grep -c '^train_')" = 1 ]
check "re-run says so" grep -q "removed $((nshards + 1)) old shards" "$TMP/stdout3"

# --tokenizer: reuse a tokenizer; identical shards
"$BIN" --train "$TMP/a.txt" "$TMP/b.txt" --val "$TMP/v.txt" --out "$TMP/out2" --tokenizer "$OUT/tokenizer.bin" --quiet \
    >/dev/null 2>&1
check "--tokenizer run" [ $? -eq 0 ]
check "--tokenizer: identical train shard" cmp -s "$OUT/train_000000.bin" "$TMP/out2/train_000000.bin"
check "--tokenizer: identical tokenizer.bin" cmp -s "$OUT/tokenizer.bin" "$TMP/out2/tokenizer.bin"
"$BIN" --train "$TMP/a.txt" "$TMP/b.txt" --val "$TMP/v.txt" --out "$TMP/out3" --vocab-size 300 --quiet >/dev/null 2>&1
check "training is deterministic: a second run gives the same tokenizer.bin" cmp -s "$OUT/tokenizer.bin" "$TMP/out3/tokenizer.bin"
check "training is deterministic: a second run gives the same val shard" cmp -s "$OUT/val_000000.bin" "$TMP/out3/val_000000.bin"

# a vocabulary over 65536 gives uint32 shards: random 8-letter words have enough distinct pairs
awk 'BEGIN { srand(7); for (i = 0; i < 60000; i++) { w = ""; for (j = 0; j < 8; j++) w = w sprintf("%c", 97 + int(rand() * 26));
             printf "%s%s", w, (i % 12 == 11) ? "\n" : " " } }' >"$TMP/words.txt"
"$BIN" --train "$TMP/words.txt" --out "$TMP/big" --vocab-size 70000 --quiet >"$TMP/stdout4" 2>&1
rc=$?   # (not $? inside the check: the $(tail) in its message would reset it)
check "vocab 70000 run (rc $rc): $(tail -2 "$TMP/stdout4")" [ $rc -eq 0 ]
check "vocab 70000: uint32 shard (magic 20240801)" [ "$(hdr "$TMP/big/train_000000.bin" 0)" = 20240801 ]
check "vocab 70000: version 7" [ "$(hdr "$TMP/big/train_000000.bin" 1)" = 7 ]
"$BIN" --decode "$TMP/big/train_000000.bin" >"$TMP/big.dec"
check "vocab 70000: decodes back" cmp -s "$TMP/big.dec" <(expected "$TMP/words.txt")

# ---- errors: one line naming the file, non-zero exit, nothing under a final name ----
expect_fail() {  # NAME SUBSTRING ARGS...
    local name=$1 sub=$2
    shift 2
    "$BIN" "$@" >"$TMP/o" 2>"$TMP/e"
    local rc=$?
    if [ $rc -eq 0 ]; then bad "$name: exit status 0"
    elif [ $rc -gt 128 ]; then bad "$name: killed by signal $((rc - 128))"
    elif ! grep -qF -- "$sub" "$TMP/e"; then bad "$name: stderr lacks '$sub': $(cat "$TMP/e")"
    elif [ "$(grep -c 'error' "$TMP/e")" -ne 1 ]; then bad "$name: want one error line: $(cat "$TMP/e")"
    else ok; fi
}
expect_fail "missing train file" "$TMP/nope.txt" --train "$TMP/a.txt" "$TMP/nope.txt" --out "$TMP/e1"
check "missing train file: nothing written" [ ! -e "$TMP/e1/tokenizer.bin" ]
expect_fail "missing val file" "$TMP/nope_val.txt" --train "$TMP/a.txt" --val "$TMP/nope_val.txt" --out "$TMP/e2"
check "missing val file: nothing written" [ ! -e "$TMP/e2/tokenizer.bin" ]
expect_fail "train file is a directory" "$TMP" --train "$TMP" --out "$TMP/e3"
touch "$TMP/afile"
expect_fail "out dir under a file" "$TMP/afile" --train "$TMP/a.txt" --out "$TMP/afile/sub"
if [ "$(id -u)" -ne 0 ]; then
    mkdir "$TMP/ro" && chmod 555 "$TMP/ro"
    expect_fail "read-only out dir" "$TMP/ro" --train "$TMP/a.txt" --out "$TMP/ro"
fi
: >"$TMP/empty.txt"
expect_fail "empty train file" "$TMP/empty.txt" --train "$TMP/empty.txt" --out "$TMP/e4"
check "empty train file: no shard under a final name" [ ! -e "$TMP/e4/train_000000.bin" ]
expect_fail "vocab too small" "--vocab-size" --train "$TMP/a.txt" --out "$TMP/e5" --vocab-size 100
expect_fail "unknown option" "--frobnicate" --train "$TMP/a.txt" --out "$TMP/e6" --frobnicate
expect_fail "no --out" "--out" --train "$TMP/a.txt"
expect_fail "bad tokenizer file" "$TMP/a.txt" --train "$TMP/a.txt" --out "$TMP/e7" --tokenizer "$TMP/a.txt"
expect_fail "decode a non-shard" "$TMP/a.txt" --decode "$TMP/a.txt" --tokenizer "$OUT/tokenizer.bin"
expect_fail "decode with a too-small tokenizer" "vocab_size" --decode "$TMP/big/train_000000.bin" --tokenizer "$OUT/tokenizer.bin"
# binary input: bzip2 files, archives, token shards, UTF-16 and text with a NUL byte are refused
# in one line naming the file and what it looks like; nothing written
printf 'BZh91AY&SY\x01\x02\x03' >"$TMP/c.txt.bz2"
printf 'PK\x03\x04\x14\x00\x00\x00' >"$TMP/c.zip"
printf '\xff\xfeh\x00i\x00\n\x00' >"$TMP/c16.txt"
{ printf 'text, then\n'; head -c 3000000 /dev/zero | tr '\0' 'x'; printf '\n\0binary\n'; } >"$TMP/nul.txt"
for c in "c.txt.bz2:bzip2-compressed" "c.zip:a zip archive" "c16.txt:UTF-16"; do
    f=${c%%:*}; want=${c#*:}
    expect_fail "binary input $f" "'$TMP/$f' looks like $want" --train "$TMP/a.txt" "$TMP/$f" --out "$TMP/bin_$f"
    check "binary input $f: nothing written" [ ! -e "$TMP/bin_$f" ]
done
expect_fail "an llm.c token shard as text" "looks like an llm.c token shard" --train "$OUT/train_000000.bin" --out "$TMP/bin_shard"
expect_fail "a NUL byte 3 MB into a text" "text '$TMP/nul.txt': a NUL byte at offset 3000012" \
    --train "$TMP/nul.txt" --tokenizer "$OUT/tokenizer.bin" --out "$TMP/bin_nul"
check "a NUL byte in the text: no shard under a final name" [ ! -e "$TMP/bin_nul/train_000000.bin" ]

# progress: --progress prints it on a non-terminal: the final line has the documents, tokens/s and
# the elapsed time (a line after 1 s, with an ETA, only on a longer input), with -j 1 and -j 2
for j in 1 2; do
    "$BIN" --train "$TMP/a.txt" "$TMP/b.txt" --tokenizer "$OUT/tokenizer.bin" --out "$TMP/prog" --progress -j $j >/dev/null 2>"$TMP/prog.err"
    check "--progress -j $j: a final line with percent, MB/s, 4 docs, tokens/s and elapsed ($(cat "$TMP/prog.err"))" \
        grep -qE '^encoding train +100\.0% +[0-9.]+ MB +[0-9.]+ MB/s +4 docs +[0-9.]+ M tokens/s  elapsed [0-9]+s$' "$TMP/prog.err"
done
"$BIN" --train "$TMP/b.txt" --tokenizer "$OUT/tokenizer.bin" --out "$TMP/prog" >/dev/null 2>"$TMP/prog.err"
check "no --progress, stderr not a terminal: no progress line ($(cat "$TMP/prog.err"))" [ ! -s "$TMP/prog.err" ]

"$BIN" --help >"$TMP/help" 2>&1
rc=$?
check "--help exits 0 (rc $rc)" [ $rc -eq 0 ]
check "--help documents the options" grep -q -- "--shard-tokens" "$TMP/help"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
