#!/usr/bin/env bash
# bench/bench_bf16_pack.sh [BUILD_DIR] [ROUNDS] [STEPS]: the fast CPU bf16 step with its GEMMs' B
# packed per call (kernels/cpu_bf16/matmul_bf16.c, the default) against B read as it is
# (GATEDGPT_BF16MM_PLAIN=1), GPT-2 124M B=8 T=256, no gate, 2 threads. The two run in turn,
# ROUNDS times (default 3), STEPS timed steps each after one warm-up (default 4), so both see the
# same machine; the medians over all their timed steps, and the ratio. Then one step of each under
# ONEDNN_VERBOSE=1: oneDNN's own time in its matmul and reorder primitives (the GEMMs alone).
# Needs bench_train_bf16 (a build with oneDNN) and a CPU with bf16 units (else nothing is packed).
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
steps=${3:-4}
bin=$build/bench_train_bf16
[ -x "$bin" ] || { echo "error: $bin not built (cmake --build $build --target bench_train_bf16)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--no-torch --only gpt2_124m_b8t256/none --gates none --warmup 1 --wait-idle 0 --busy-max 100 --threads 2
        --json "$tmp/bench.json")
args=("${common[@]}" --steps "$steps")
for r in $(seq "$rounds"); do
    for mode in packed plain; do
        plain=0; [ "$mode" = plain ] && plain=1
        GATEDGPT_BF16MM_PLAIN=$plain "$bin" "${args[@]}" > "$tmp/$mode.$r.out" 2>&1
        grep -m1 -q 'oneDNN bf16 matmul' "$tmp/$mode.$r.out" || { echo "error: no bf16 units here: nothing to compare"; exit 1; }
        grep -E "step +[0-9]+/$steps .* ours" "$tmp/$mode.$r.out" | sed -E 's/.* ours +([0-9.]+) ms.*/\1/' >> "$tmp/$mode.ms"
        echo "round $r, B $mode: $(tr '\n' ' ' < <(tail -n "$steps" "$tmp/$mode.ms"))ms"
    done
done
median() { sort -g "$1" | awk '{ a[NR] = $1 } END { print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }'; }
mp=$(median "$tmp/packed.ms"); ml=$(median "$tmp/plain.ms")
echo "median step over $((rounds * steps)) timed steps each: B packed $mp ms, B as it is $ml ms; packed is $(echo "$ml / $mp" | bc -l | cut -c1-5)x"
for mode in packed plain; do
    plain=0; [ "$mode" = plain ] && plain=1
    GATEDGPT_BF16MM_PLAIN=$plain ONEDNN_VERBOSE=1 "$bin" "${common[@]}" --steps 1 > "$tmp/$mode.verbose" 2>&1
    # the second half of the exec lines: the timed step (the first half is the warm-up step)
    grep -E '^(onednn|dnnl)_verbose,exec,cpu,(matmul|reorder),' "$tmp/$mode.verbose" > "$tmp/$mode.exec" || true
    n=$(wc -l < "$tmp/$mode.exec")
    tail -n $((n / 2)) "$tmp/$mode.exec" | awk -F, -v m="$mode" '{ t[$4 " " $5] += $NF; c[$4 " " $5]++ }
        END { for (k in t) printf "one step, B %s: %-32s %6d calls %9.1f ms\n", m, k, c[k], t[k] }' | sort
done
