#!/usr/bin/env bash
# scripts/prepare_kjv.sh: the King James Bible (Debian's bible-kjv package, public domain, no
# download beyond the distribution) as BPE token shards:
#   data/kjv/train.txt, val.txt      plain text, one verse per line, references stripped; each
#                                    chapter is a document ("<|endoftext|>" lines between them);
#                                    every 20th chapter (20, 40, ...) goes to val
#   data/kjv/tokenizer.bin           byte-level BPE trained on train.txt (default vocab 8192)
#   data/kjv/train_000000.bin, val_000000.bin   llm.c token shards
#
# usage: scripts/prepare_kjv.sh [path/to/prepare] [vocab_size]   (default build/prepare 8192)
# Idempotent and non-interactive: does nothing when the shards and tokenizer already exist
# (remove data/kjv/ to prepare again, e.g. with another vocab_size).
set -euo pipefail

die() { echo "prepare_kjv: error: $*" >&2; exit 1; }

# a given tool path is relative to the caller's directory; the default to the repository root
tool="${1:-}"
vocab="${2:-8192}"
[[ -n "$tool" && "$tool" != /* ]] && tool="$PWD/$tool"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[[ -n "$tool" ]] || tool="$PWD/build/prepare"
[[ "$vocab" =~ ^[0-9]+$ ]] || die "vocab_size must be a positive integer, got '$vocab'"

out=data/kjv
if [[ -f "$out/train_000000.bin" && -f "$out/val_000000.bin" && -f "$out/tokenizer.bin" ]]; then
    echo "prepare_kjv: $out already holds train_000000.bin, val_000000.bin and tokenizer.bin; nothing to do (remove $out to redo)"
    exit 0
fi

[[ -x "$tool" ]] || die "prepare not found at '$tool'; build it first (make) or pass its path as the first argument"

# the bible command (package bible-kjv): install it quietly if missing
if ! command -v bible >/dev/null 2>&1; then
    sudo=""
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null 2>&1 || die "the 'bible' command is missing and we are not root; install it with: apt-get install bible-kjv"
        sudo="sudo -n"
    fi
    apt_install() { $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bible-kjv >/dev/null; }
    echo "prepare_kjv: installing bible-kjv"
    if ! apt_install 2>/dev/null; then
        echo "prepare_kjv: install failed, running apt-get update and retrying"
        $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null || die "apt-get update failed"
        apt_install || die "could not install bible-kjv (apt-get install -y bible-kjv)"
    fi
    command -v bible >/dev/null 2>&1 || die "bible-kjv installed but the 'bible' command is still missing"
fi

mkdir -p "$out"
raw="$out/kjv.raw.tmp"
# stdin from /dev/null: bible never waits at its interactive prompt
bible -f Gen1:1-Rev22:21 </dev/null >"$raw" 2>/dev/null || die "'bible -f Gen1:1-Rev22:21' failed"

# one verse per line, "Ge1:1 In the beginning ...", "1Sm3:4 ...", "Rev22:21 ..."
verses=$(grep -cE '^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ ' "$raw" || true)
(( verses >= 31000 )) || die "expected ~31102 verses from bible, got $verses; see $raw"
[[ "$(head -n1 "$raw")" == *"In the beginning God created the heaven and the earth."* ]] \
    || die "unexpected first line from bible: $(head -n1 "$raw")"

# strip the reference, group verses into chapters (book + chapter number of the reference),
# every 20th chapter to val; "<|endoftext|>" lines between the chapters of a file
awk -v train="$out/train.txt.tmp" -v val="$out/val.txt.tmp" '
    match($0, /^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ +/) {
        ref = substr($0, 1, RLENGTH)
        text = substr($0, RLENGTH + 1)
        sub(/:[0-9]+ +$/, "", ref)            # "Ge1:1 " -> "Ge1": the chapter
        if (ref != chapter) {
            chapter = ref
            n++
            dest = (n % 20 == 0) ? val : train
            if (docs[dest]++) print "<|endoftext|>" > dest
        }
        sub(/[ \t\r]+$/, "", text)
        if (text != "") print text > dest
        next
    }
    NF { bad++; if (!first_bad) first_bad = $0 }
    END {
        if (bad) { print "prepare_kjv: error: " bad " lines without a verse reference, first: " first_bad > "/dev/stderr"; exit 1 }
        print n > "/dev/stderr"
    }' "$raw" 2>"$out/chapters.tmp" || { cat "$out/chapters.tmp" >&2; die "splitting the text into chapters failed"; }
chapters=$(cat "$out/chapters.tmp")
(( chapters >= 1180 )) || die "expected 1189 chapters, got $chapters"
if grep -qE '[0-9]+:[0-9]+' "$out/train.txt.tmp" "$out/val.txt.tmp"; then
    die "verse references left in the text after stripping: $(grep -m1 -nE '[0-9]+:[0-9]+' "$out/train.txt.tmp" "$out/val.txt.tmp")"
fi
mv "$out/train.txt.tmp" "$out/train.txt"
mv "$out/val.txt.tmp" "$out/val.txt"
rm -f "$raw" "$out/chapters.tmp"
echo "prepare_kjv: $chapters chapters, $verses verses: $out/train.txt ($(wc -c <"$out/train.txt") bytes), $out/val.txt ($(wc -c <"$out/val.txt") bytes)"

"$tool" --train "$out/train.txt" --val "$out/val.txt" --out "$out" --vocab-size "$vocab" --stats
