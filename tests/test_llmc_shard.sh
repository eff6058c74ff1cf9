#!/usr/bin/env bash
# tests/test_llmc_shard.sh BUILD_DIR: llm.c shard compatibility, checked against an independent
# implementation of the format (numpy, tests/llmc_shard.py), both ways:
#   1. numpy writes shards as llm.c's dev/data/data_common.py does (256 x int32 header: magic
#      20240520 version 1 with uint16 tokens, magic 20240801 version 7 with uint32 tokens), and
#      the project reads them: `prepare --decode` (data/shard.c, the trainer's reader) gives back
#      exactly the token ids written (each token followed by a separator byte, so the decoded
#      text splits back into ids), with a small tokenizer and with a 70000-token one (ids above
#      65535 in a uint32 shard); train_gpt trains on the uint16 and the uint32 shard of the same
#      tokens to the same model.bin, byte for byte.
#   2. `prepare` writes shards and numpy reads them: header magic, version, zero padding, the
#      count against the file size and the summary line, and the tokens: their bytes (our
#      tokenizer.bin parsed in Python) are the input text with <|endoftext|> before each
#      document, and equal `prepare --decode`'s; a vocabulary over 65535 gives uint32 shards.
#   Damage must be caught: a wrong magic, a wrong version and a header count past the end are
#   refused by prepare and train_gpt with one error line naming the file; a token >= vocab is
#   refused; one changed token is found (by position) by the id comparison and changes the
#   trained model; numpy's reader refuses a wrong magic and its text comparison sees a changed
#   token of prepare's shard.
# Skips (exit 0) when numpy is missing. PYTHON overrides the interpreter (default /usr/bin/python3).
set -u
build=$(cd "$1" && pwd)
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
PY=${PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || PY=$(command -v python3 || echo python3)
if ! "$PY" -c 'import numpy' >/dev/null 2>&1; then
    echo "skipped: numpy missing (install python3-numpy)"
    exit 0
fi
BIN=$build/prepare
H=tests/llmc_shard.py
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
pass=0 fail=0
check() { local what=$1; shift; if "$@"; then pass=$((pass + 1)); else echo "FAIL: $what"; fail=$((fail + 1)); fi; }
not() { ! "$@"; }
# a refusal: non-zero exit, no crash, exactly one error line, naming the file and the problem
refused() {  # refused OUTFILE RC FILE SUBSTRING
    [ "$2" -ne 0 ] && [ "$2" -lt 128 ] && [ "$(grep -c '^error' "$1")" = 1 ] && grep -qF -- "'$3'" "$1" && grep -qF -- "$4" "$1"
}
# what decoding prepare's shards of these files must give (as tests/test_prepare.sh)
expected() {
    awk 'FNR == 1 { started = 0 }
         $0 == "<|endoftext|>" || $0 == "<|endoftext|>\r" { started = 0; next }
         { if (!started) { printf "<|endoftext|>"; started = 1 } print }' "$@"
}

# ---- texts and tokenizers (prepare): a small vocabulary, and one over 65535 -----------------
cat >"$TMP/a.txt" <<'EOF'
In the beginning God created the heaven and the earth.
And the earth was without form, and void; and darkness was upon the face of the deep.
<|endoftext|>
And God said, Let there be light: and there was light. 1234 5678
And God saw the light, that it was good: and God divided the light from the darkness.
EOF
for i in $(seq 1 30); do echo "Line $i: the quick brown fox jumps over the lazy dog, again and again."; done >"$TMP/b.txt"
printf 'Validation text, the first.\n<|endoftext|>\nAnd the second one.\n' >"$TMP/v.txt"
"$BIN" --train "$TMP/a.txt" "$TMP/b.txt" --val "$TMP/v.txt" --out "$TMP/p" --vocab-size 300 --quiet >"$TMP/p.out" 2>&1
rc=$?
check "prepare, vocab 300 (rc $rc): $(tail -2 "$TMP/p.out")" [ $rc -eq 0 ]
TOK=$TMP/p/tokenizer.bin
awk 'BEGIN { srand(11); for (i = 0; i < 60000; i++) { w = ""; for (j = 0; j < 8; j++) w = w sprintf("%c", 97 + int(rand() * 26));
             printf "%s%s", w, (i % 12 == 11) ? "\n" : " " } }' >"$TMP/words.txt"
"$BIN" --train "$TMP/words.txt" --out "$TMP/big" --vocab-size 70000 --quiet >"$TMP/big.out" 2>&1
rc=$?
check "prepare, vocab 70000 (rc $rc): $(tail -2 "$TMP/big.out")" [ $rc -eq 0 ]
BIGTOK=$TMP/big/tokenizer.bin

# ---- 1. numpy writes, the project reads ---------------------------------------------------------
"$PY" $H gen "$TMP/toks.npy" 3000 "$TOK" 1 && "$PY" $H gen "$TMP/bigtoks.npy" 3000 "$BIGTOK" 2
check "numpy: random token sequences generated" [ $? -eq 0 ]
"$PY" $H write "$TMP/n16.bin" "$TMP/toks.npy" u16 && "$PY" $H write "$TMP/n32.bin" "$TMP/toks.npy" u32 &&
    "$PY" $H write "$TMP/big32.bin" "$TMP/bigtoks.npy" u32
check "numpy: shards written" [ $? -eq 0 ]
for s in n16:$TOK n32:$TOK big32:$BIGTOK; do
    name=${s%%:*} tok=${s#*:}
    "$BIN" --decode "$TMP/$name.bin" --tokenizer "$tok" >"$TMP/$name.dec" 2>"$TMP/$name.err"
    rc=$?
    check "$name: prepare --decode reads numpy's shard (rc $rc): $(cat "$TMP/$name.err")" [ $rc -eq 0 ]
    npy=$TMP/toks.npy; [ "$name" = big32 ] && npy=$TMP/bigtoks.npy
    "$PY" $H ids "$tok" "$npy" "$TMP/$name.dec" >"$TMP/$name.ids" 2>&1
    rc=$?
    check "$name: the ids read == the ids written: $(cat "$TMP/$name.ids")" [ $rc -eq 0 ]
    echo "$name: $(cat "$TMP/$name.ids")"
done
check "big32: ids above 65535 among them" grep -qE 'ids 0\.\.(6553[6-9]|655[4-9][0-9]|65[6-9][0-9]{2}|6[6-9][0-9]{3})' "$TMP/big32.ids"

# the trainer's loader: the same tokens as uint16 and as uint32 train to the same weights
train() {  # train NAME SHARD: 2 steps of a tiny model on SHARD, data in file order
    "$build/train_gpt" --config configs/tiny_gated.ini --model.vocab_size=300 --model.n_layer=1 --model.d_model=32 \
        --model.n_head=2 --model.n_kv_head=1 --model.head_dim=16 --model.d_ff=64 --model.max_seq_len=32 \
        --train.batch_size=2 --train.seq_len=32 --train.tokens_per_step=64 --train.steps=2 --train.warmup_steps=0 \
        --train.threads=1 --data.train_glob="$2" --data.val_glob= --data.tokenizer="$TOK" --data.shuffle=false \
        --log.val_every=0 --log.sample_every=0 --metrics.probe_every=0 --checkpoint.checkpoint_every=2 \
        --log.run_dir="$TMP/run_$1" >"$TMP/run_$1.out" 2>&1
}
ckm() { echo "$TMP/run_$1/checkpoints/step_00000002/model.bin"; }
train n16 "$TMP/n16.bin"
rc=$?
check "train_gpt on numpy's uint16 shard (rc $rc): $(grep -m1 error "$TMP/run_n16.out")" [ $rc -eq 0 ]
check "... 2 step records" [ "$(grep -c '"type":"step"' "$TMP/run_n16/log.jsonl" 2>/dev/null)" = 2 ]
train n32 "$TMP/n32.bin"
rc=$?
check "train_gpt on numpy's uint32 shard (rc $rc): $(grep -m1 error "$TMP/run_n32.out")" [ $rc -eq 0 ]
check "uint32 and uint16 shards of the same tokens: the same model.bin after 2 steps" cmp -s "$(ckm n16)" "$(ckm n32)"

# damage written by numpy: refused with one line naming the file, or found
"$PY" $H write "$TMP/magic.bin" "$TMP/toks.npy" u16 --magic 20240521
"$PY" $H write "$TMP/version.bin" "$TMP/toks.npy" u16 --version 7
"$PY" $H write "$TMP/count.bin" "$TMP/toks.npy" u16 --count 6001
"$PY" $H write "$TMP/vocab.bin" "$TMP/bigtoks.npy" u32
for s in "magic:wrong magic 20240521" "version:version 7 with magic 20240520" "count:header says 6001 tokens" "vocab:is >= vocab_size 300"; do
    name=${s%%:*} msg=${s#*:}
    "$BIN" --decode "$TMP/$name.bin" --tokenizer "$TOK" >/dev/null 2>"$TMP/$name.err"
    rc=$?
    check "bad $name: prepare --decode refuses it (rc $rc), naming the file: $(cat "$TMP/$name.err")" refused "$TMP/$name.err" $rc "$TMP/$name.bin" "$msg"
done
train magic "$TMP/magic.bin"
rc=$?
check "bad magic: train_gpt refuses it (rc $rc), naming the file: $(grep error "$TMP/run_magic.out")" \
    refused "$TMP/run_magic.out" $rc "$TMP/magic.bin" "wrong magic 20240521"
check "bad magic: train_gpt trained no step" not grep -qs '"type":"step"' "$TMP/run_magic/log.jsonl"
"$PY" $H write "$TMP/flip.bin" "$TMP/toks.npy" u16 --flip 2000
"$BIN" --decode "$TMP/flip.bin" --tokenizer "$TOK" >"$TMP/flip.dec" 2>/dev/null
"$PY" $H ids "$TOK" "$TMP/toks.npy" "$TMP/flip.dec" >"$TMP/flip.ids" 2>&1
rc=$?
check "one changed token (shard position 2000) is found: $(cat "$TMP/flip.ids")" \
    bash -c '[ "$1" = 1 ] && grep -qF "1 of 3000 tokens differ; the first: token 1000 (shard position 2000)" "$2"' _ $rc "$TMP/flip.ids"
"$PY" $H write "$TMP/flip0.bin" "$TMP/toks.npy" u16 --flip 4
train flip "$TMP/flip0.bin"
check "one changed token in the first batch changes the trained model" not cmp -s "$(ckm n16)" "$(ckm flip)"

# ---- 2. the project writes, numpy reads ---------------------------------------------------------
for s in train val; do
    f=$TMP/p/${s}_000000.bin
    "$PY" $H read "$f" "$TOK" >"$TMP/$s.np" 2>"$TMP/$s.hdr"
    rc=$?
    check "$s: numpy reads prepare's shard (rc $rc): $(cat "$TMP/$s.hdr")" [ $rc -eq 0 ]
    check "$s: magic 20240520, version 1" grep -q "^magic 20240520 version 1 count" "$TMP/$s.hdr"
    n=$(sed -n 's/.* count \([0-9]*\) .*/\1/p' "$TMP/$s.hdr")
    check "$s: header count $n = the summary line's token count" grep -q "^$s: .* $n tokens" "$TMP/p.out"
    "$BIN" --decode "$f" >"$TMP/$s.dec"
    check "$s: numpy's tokens give prepare --decode's text" cmp -s "$TMP/$s.np" "$TMP/$s.dec"
done
check "train: numpy's tokens give the input text, <|endoftext|> before each document" cmp -s "$TMP/train.np" <(expected "$TMP/a.txt" "$TMP/b.txt")
check "val: numpy's tokens give the input text, <|endoftext|> before each document" cmp -s "$TMP/val.np" <(expected "$TMP/v.txt")
"$PY" $H read "$TMP/big/train_000000.bin" "$BIGTOK" >"$TMP/big.np" 2>"$TMP/big.hdr"
rc=$?
check "vocab 70000: numpy reads prepare's shard (rc $rc): $(cat "$TMP/big.hdr")" [ $rc -eq 0 ]
check "vocab 70000: magic 20240801, version 7 (uint32)" grep -q "^magic 20240801 version 7 count" "$TMP/big.hdr"
check "vocab 70000: tokens above 65535 in it" awk '{ exit !($8 > 65535) }' "$TMP/big.hdr"
check "vocab 70000: numpy's tokens give the input text" cmp -s "$TMP/big.np" <(expected "$TMP/words.txt")
echo "numpy read prepare's shards: train $(cat "$TMP/train.hdr"); val $(cat "$TMP/val.hdr"); vocab 70000 $(cat "$TMP/big.hdr")"

# numpy's reader catches damage too: a wrong magic, a changed token
cp "$TMP/p/train_000000.bin" "$TMP/pm.bin"
printf '\x21' | dd of="$TMP/pm.bin" bs=1 seek=0 conv=notrunc 2>/dev/null
"$PY" $H read "$TMP/pm.bin" "$TOK" >/dev/null 2>"$TMP/pm.err"
rc=$?
check "numpy's reader refuses a wrong magic: $(cat "$TMP/pm.err")" bash -c '[ "$1" = 1 ] && grep -q "magic .*not an llm.c shard" "$2"' _ $rc "$TMP/pm.err"
cp "$TMP/p/train_000000.bin" "$TMP/pt.bin"
printf '\x20\x00' | dd of="$TMP/pt.bin" bs=1 seek=$((1024 + 2 * 10)) conv=notrunc 2>/dev/null   # token 10 := 32 (a space)
"$PY" $H read "$TMP/pt.bin" "$TOK" >"$TMP/pt.np" 2>/dev/null
check "a changed token of prepare's shard is seen by the text comparison" not cmp -s "$TMP/pt.np" <(expected "$TMP/a.txt" "$TMP/b.txt")

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
