#!/usr/bin/env bash
# bench/bench_bf16_ab.sh [BUILD_DIR] [ROUNDS] [STEPS] [MODES]: the fast CPU bf16 step under the GEMM
# switches of kernels/cpu_bf16/matmul_bf16.c, side by side, GPT-2 124M B=8 T=256, no gate, 2 threads.
# MODES (default "packed plain transa"), each an environment for bench_train_bf16:
#   packed  the default: B packed per call with oneDNN's reorder into the kernel's layout
#   plain   GATEDGPT_BF16MM_PLAIN=1: B read as it is (the matmul copies its blocks inside the call)
#   transa  GATEDGPT_BF16MM_TRANSPOSE_A=1: a transposed A (the weight gradients) transposed once per
#           call by oneDNN's reorder, instead of the matmul's in-call transposed copy
# The modes run in turn, ROUNDS times (default 3), STEPS timed steps each after one warm-up
# (default 4), so all see the same machine; the medians over all their timed steps and the ratios
# to the first mode. Then one step of each under ONEDNN_VERBOSE=1: oneDNN's own time in its matmul
# and reorder primitives (the GEMMs alone), and for the first mode the GEMMs shape by shape (calls,
# ms, GFLOP/s, share of the step): where an AMX host's step goes, in one run.
# Needs bench_train_bf16 (a build with oneDNN) and a CPU with bf16 units.
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
steps=${3:-4}
read -r -a modes <<< "${4:-packed plain transa}"
bin=$build/bench_train_bf16
[ -x "$bin" ] || { echo "error: $bin not built (cmake --build $build --target bench_train_bf16)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mode_env() {
    case $1 in
    packed) echo "GATEDGPT_BF16MM_PLAIN=0 GATEDGPT_BF16MM_TRANSPOSE_A=0" ;;
    plain) echo "GATEDGPT_BF16MM_PLAIN=1 GATEDGPT_BF16MM_TRANSPOSE_A=0" ;;
    transa) echo "GATEDGPT_BF16MM_PLAIN=0 GATEDGPT_BF16MM_TRANSPOSE_A=1" ;;
    *) echo "error: unknown mode '$1' (packed, plain, transa)" >&2; exit 1 ;;
    esac
}
for m in "${modes[@]}"; do mode_env "$m" > /dev/null; done
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') | flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_bf16|amx_tile)$' | tr '\n' ' ')"
common=(--no-torch --only gpt2_124m_b8t256/none --gates none --warmup 1 --wait-idle 0 --busy-max 100 --threads 2
        --json "$tmp/bench.json")
for r in $(seq "$rounds"); do
    for m in "${modes[@]}"; do
        env $(mode_env "$m") "$bin" "${common[@]}" --steps "$steps" > "$tmp/$m.$r.out" 2>&1
        grep -m1 -q 'oneDNN bf16 matmul' "$tmp/$m.$r.out" || { echo "error: no bf16 units here: nothing to compare"; exit 1; }
        grep -E "step +[0-9]+/$steps .* ours" "$tmp/$m.$r.out" | sed -E 's/.* ours +([0-9.]+) ms.*/\1/' >> "$tmp/$m.ms"
        echo "round $r, $m: $(tr '\n' ' ' < <(tail -n "$steps" "$tmp/$m.ms"))ms"
    done
done
median() { sort -g "$1" | awk '{ a[NR] = $1 } END { print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }'; }
m0=$(median "$tmp/${modes[0]}.ms")
for m in "${modes[@]}"; do
    mm=$(median "$tmp/$m.ms")
    echo "median step over $((rounds * steps)) timed steps, $m: $mm ms ($(echo "$mm / $m0" | bc -l | cut -c1-5)x the time of ${modes[0]})"
done
for m in "${modes[@]}"; do
    env $(mode_env "$m") ONEDNN_VERBOSE=1 "$bin" "${common[@]}" --steps 1 --json "$tmp/$m.json" > "$tmp/$m.verbose" 2>&1
    # the second half of the exec lines: the timed step (the first half is the warm-up step); the
    # bf16 peak's 1024^3 products (measured once, at start) left out
    grep -E '^(onednn|dnnl)_verbose,exec,cpu,(matmul|reorder),' "$tmp/$m.verbose" | grep -v ',1024x1024' > "$tmp/$m.exec" || true
    n=$(wc -l < "$tmp/$m.exec")
    tail -n $((n / 2)) "$tmp/$m.exec" > "$tmp/$m.step"
    awk -F, -v m="$m" '{ t[$4 " " $5] += $NF; c[$4 " " $5]++ }
        END { for (k in t) printf "one step, %s: %-32s %6d calls %9.1f ms\n", m, k, c[k], t[k] }' "$tmp/$m.step" | sort
done
# the first mode's GEMMs shape by shape: problem M x K : K x N, layouts, post-ops; the attention's
# tiles are per-thread calls (their ms are thread time, about twice their share of the wall)
/usr/bin/python3 - "$tmp/${modes[0]}.step" "$tmp/${modes[0]}.json" "${modes[0]}" <<'PY'
import collections, json, sys
agg = collections.defaultdict(lambda: [0, 0.0, 0.0])
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split(",")
    prim, impl, mds, attr, shape, ms = f[3], f[4], f[6], f[7], f[-2], float(f[-1])
    flop = 0.0
    if prim == "matmul":
        (m, k), (_, n) = (list(map(int, x.split("x")))[-2:] for x in shape.split(":")[:2])
        flop = 2.0 * m * n * k
    lay = " ".join(x.split("::")[0] + ":" + x.split(":")[-2] for x in mds.replace("blocked:", "").split())
    key = (prim, impl, shape, lay, attr.replace("attr-", ""))
    agg[key][0] += 1; agg[key][1] += ms; agg[key][2] += flop
step = json.load(open(sys.argv[2]))["configs"][0]["ours"]["median_ms"]   # the verbose step (its printing included)
tot = sum(v[1] for v in agg.values())
print(f"\n{sys.argv[3]}: one step's oneDNN calls by shape ({tot:.1f} ms of oneDNN time; the step {step:.1f} ms)")
print(f"{'ms':>8} {'share':>6} {'calls':>6} {'GFLOP/s':>8}  primitive shape layouts attributes")
for (prim, impl, shape, lay, attr), (n, ms, fl) in sorted(agg.items(), key=lambda x: -x[1][1])[:24]:
    gf = f"{fl / ms / 1e6:8.0f}" if fl else f"{'-':>8}"
    share = f"{100 * ms / step:5.1f}%" if step else "    -"
    print(f"{ms:8.1f} {share} {n:6d} {gf}  {prim} {impl} {shape} {lay} {attr}")
PY
