#!/usr/bin/env bash
# scripts/long_context.sh: the long-context evaluation of runs, for the report's "Long context"
# section (scripts/report.py): for each run directory, its newest checkpoint is scored by
#   gatedgpt_ckpt lengths  loss at context lengths T, 2T, 4T, 8T under each RoPE scaling
#   gatedgpt_ckpt stream   streaming loss with a rolling KV window (S = 0 and 4 sink tokens,
#                          positions in the cache and in the text) and the dense reference
# into RUN_DIR/long_context.jsonl (written as .tmp, renamed when both are done).
#
# usage: scripts/long_context.sh RUN_DIR [RUN_DIR ...] [--build DIR] [--tokens N]
#                                [--stream-tokens N] [--window W] [--threads N]
#   --tokens N         tokens scored per length (default 16384)
#   --stream-tokens N  length of the stream (default 20000)
#   --window W         the rolling window (default 2T)
#   --build DIR        where gatedgpt_ckpt is (default build)
# Then: scripts/report.py RUN_DIR ... --out DIR
set -euo pipefail
die() { echo "long_context: error: $*" >&2; exit 1; }
build=build tokens=16384 stokens=20000 window="" threads=""
dirs=()
while [ $# -gt 0 ]; do
    case "$1" in
        --build) [ $# -ge 2 ] || die "--build needs a directory"; build=$2; shift 2 ;;
        --tokens) [ $# -ge 2 ] || die "--tokens needs a number"; tokens=$2; shift 2 ;;
        --stream-tokens) [ $# -ge 2 ] || die "--stream-tokens needs a number"; stokens=$2; shift 2 ;;
        --window) [ $# -ge 2 ] || die "--window needs a number"; window=$2; shift 2 ;;
        --threads) [ $# -ge 2 ] || die "--threads needs a number"; threads=$2; shift 2 ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) die "unknown option '$1' (see --help)" ;;
        *) dirs+=("$1"); shift ;;
    esac
done
[ ${#dirs[@]} -gt 0 ] || die "no run directory given (see --help)"
tool="$build/gatedgpt_ckpt"
[ -x "$tool" ] || die "$tool not found: build first (make build) or pass --build DIR"
opt=()
[ -n "$threads" ] && opt+=(--threads "$threads")
for d in "${dirs[@]}"; do
    [ -d "$d/checkpoints" ] || die "$d/checkpoints: no checkpoints (train with [checkpoint] checkpoint_every > 0)"
    out="$d/long_context.jsonl"
    rm -f "$out.tmp"
    echo "long_context: $d"
    "$tool" lengths "$d/checkpoints" --out "$out.tmp" --tokens "$tokens" "${opt[@]}" || die "lengths failed for $d"
    sopt=(--tokens "$stokens")
    [ -n "$window" ] && sopt+=(--window "$window")
    "$tool" stream "$d/checkpoints" --out "$out.tmp" "${sopt[@]}" "${opt[@]}" || die "stream failed for $d"
    mv "$out.tmp" "$out"
    echo "long_context: wrote $out"
done
