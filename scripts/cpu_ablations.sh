#!/usr/bin/env bash
# scripts/cpu_ablations.sh: the CPU-scale ablations of docs/results/cpu_tiny (the stability
# issue's runs): the tiny dense trio (no gate / headwise / elementwise) and the high-learning-rate
# pair, each for two seeds, then one report over all ten runs (with the seed spread).
#
# usage: scripts/cpu_ablations.sh [--steps N] [--seeds "S1 S2 ..."] [--out DIR] [--build DIR]
#   defaults: 600 steps, seeds "1337 2024", out runs/cpu_ablations, build build
# Needs the KJV data (scripts/prepare_kjv.sh build/prepare) and a built train_gpt.
# Takes about 2 minutes per run on an idle 2-core machine (10 runs).
set -euo pipefail
steps=600 seeds="1337 2024" out=runs/cpu_ablations build=build
while [ $# -gt 0 ]; do
    case "$1" in
        --steps) steps=$2; shift 2 ;;
        --seeds) seeds=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --build) build=$2; shift 2 ;;
        -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "cpu_ablations: error: unknown argument '$1' (see --help)" >&2; exit 1 ;;
    esac
done
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
dirs=()
for list in tiny_trio tiny_highlr; do
    for seed in $seeds; do
        bash scripts/ablate.sh "$list" --steps "$steps" --out "$out/${list}_s$seed" --build "$build" \
            -- --train.seed="$seed"
        for d in "$out/${list}_s$seed"/*/; do [ -f "$d/log.jsonl" ] && dirs+=("${d%/}"); done
    done
done
/usr/bin/python3 scripts/report.py "${dirs[@]}" --out "$out"
echo "cpu_ablations: report: $out/report.md"
