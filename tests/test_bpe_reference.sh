#!/usr/bin/env bash
# tests/test_bpe_reference.sh BUILD_DIR: the BPE encoder (data/tokenizer.c via tok_encode) against
# tests/bpe_reference.py, an independent python (standard library) encoder written from
# docs/formats.md: two tokenizers written by the script (hand-chosen competing merges, 300 random
# merges over 5 letters) and the KJV one (scripts/prepare_kjv.sh), on competing-merge texts, random
# strings, pieces over 64 bytes, bytes >= 0x80, invalid UTF-8, NUL bytes and 2000 KJV val lines.
set -u
if [ $# -ne 1 ]; then echo "usage: $0 BUILD_DIR" >&2; exit 2; fi
build=$1
cd "$(dirname "${BASH_SOURCE[0]}")/.."
TOK=$build/tok_encode
[ -x "$TOK" ] || { echo "FAIL: $TOK not found"; exit 1; }
bash scripts/prepare_kjv.sh "$build/prepare" > /dev/null || { echo "FAIL: prepare_kjv.sh"; exit 1; }
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PY" tests/bpe_reference.py --tok-encode "$TOK" --work "$tmp" --tokenizer data/kjv/tokenizer.bin \
    --text-file data/kjv/val.txt --lines 2000
