#!/usr/bin/env bash
# scripts/prepare_tinytext.sh: the default corpus, the King James Bible from Debian's bible-kjv
# package (public domain, ~4.3 MB, no download beyond the distribution), as byte-level shards:
#   data/tinytext/kjv.txt            plain text, one verse per line, references stripped
#   data/tinytext/train_000000.bin   byte tokens (vocab 256), llm.c shard format
#   data/tinytext/val_000000.bin     every 20th 64 KiB block
#
# usage: scripts/prepare_tinytext.sh [path/to/prepare_bytes]   (default build/prepare_bytes)
# Idempotent and non-interactive: does nothing when the train shard already exists.
set -euo pipefail

die() { echo "prepare_tinytext: error: $*" >&2; exit 1; }

# resolve the tool path against the caller's directory, then work from the repository root
# (a given path is relative to the caller's directory, the default to the repository root)
tool="${1:-}"
[[ -n "$tool" && "$tool" != /* ]] && tool="$PWD/$tool"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[[ -n "$tool" ]] || tool="$PWD/build/prepare_bytes"

out=data/tinytext
if [[ -f "$out/train_000000.bin" ]]; then
    echo "prepare_tinytext: $out/train_000000.bin exists, nothing to do"
    exit 0
fi

[[ -x "$tool" ]] || die "prepare_bytes not found at '$tool'; build it first (make) or pass its path as the first argument"

# the bible command (package bible-kjv): install it quietly if missing
if ! command -v bible >/dev/null 2>&1; then
    sudo=""
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null 2>&1 || die "the 'bible' command is missing and we are not root; install it with: apt-get install bible-kjv"
        sudo="sudo -n"
    fi
    apt_install() { $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bible-kjv >/dev/null; }
    echo "prepare_tinytext: installing bible-kjv"
    if ! apt_install 2>/dev/null; then
        echo "prepare_tinytext: install failed, running apt-get update and retrying"
        $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null || die "apt-get update failed"
        apt_install || die "could not install bible-kjv (apt-get install -y bible-kjv)"
    fi
    command -v bible >/dev/null 2>&1 || die "bible-kjv installed but the 'bible' command is still missing"
fi

mkdir -p "$out"
raw="$out/kjv.raw.tmp"
txt="$out/kjv.txt"
# stdin from /dev/null: bible never waits at its interactive prompt
bible -f Gen1:1-Rev22:21 </dev/null >"$raw" 2>/dev/null || die "'bible -f Gen1:1-Rev22:21' failed"

# the output is one verse per line, "Ge1:1 In the beginning ...", "1Sm3:4 ...", "Rev22:21 ..."
verses=$(grep -cE '^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ ' "$raw" || true)
(( verses >= 31000 )) || die "expected ~31102 verses from bible, got $verses; see $raw"
[[ "$(head -n1 "$raw")" == *"In the beginning God created the heaven and the earth."* ]] \
    || die "unexpected first line from bible: $(head -n1 "$raw")"

# strip references and blank lines, trailing spaces; keep plain English, one verse per line
sed -E -e 's/^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ +//' -e 's/[[:space:]]+$//' "$raw" | grep -v '^$' >"$txt.tmp"
if grep -qE '[0-9]+:[0-9]+' "$txt.tmp"; then
    die "verse references left in the text after stripping: $(grep -m1 -nE '[0-9]+:[0-9]+' "$txt.tmp")"
fi
mv "$txt.tmp" "$txt"
rm -f "$raw"
echo "prepare_tinytext: $txt: $(wc -l <"$txt") verses, $(wc -c <"$txt") bytes"

"$tool" --input "$txt" --out "$out" --val-every 20
