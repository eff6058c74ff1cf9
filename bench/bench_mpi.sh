#!/usr/bin/env bash
# bench/bench_mpi.sh: data-parallel scaling on this machine (docs/distributed.md). Trains the
# same global batch with 1 process (all cores, gradient accumulation) and with P processes
# (cores / P threads each) and prints tokens/s, the speed-up, and the time per step spent in
# communication (the step records' comm_ms). KJV data (prepared if missing), real steps of
# train_gpt, median over the timed steps after one warm-up step.
#
# With --ep P (an MoE config), the P processes run with [moe] expert_parallel = P and the table
# adds the experts' all-to-all: its time per step (ep_ms), its share of the step, and the bytes
# rank 0 sent by it per token of its own (ep_bytes / its tokens per step), against the
# arithmetic 4 x top_k x d_model x 4 bytes x (P - 1) / P per MoE layer (fp32 rows; forward and
# backward each send a token's rows out and other tokens' outputs back, evenly routed).
#
# usage: bench/bench_mpi.sh [--config bench/configs/qwen_dense_b8t256.ini] [--np 2] [--steps 6]
#                           [--ep P] [--build build] [--out FILE.json]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
config=bench/configs/qwen_dense_b8t256.ini np=2 steps=6 build=build out="" ep=1
while [ $# -gt 0 ]; do
    case "$1" in
        --config) config=$2; shift 2 ;;
        --np) np=$2; shift 2 ;;
        --steps) steps=$2; shift 2 ;;
        --ep) ep=$2; shift 2 ;;
        --build) build=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench_mpi: error: unknown argument '$1' (see --help)" >&2; exit 1 ;;
    esac
done
command -v mpirun >/dev/null 2>&1 || { echo "bench_mpi: skipped: mpirun not installed (apt-get install openmpi-bin)"; exit 0; }
[ -x "$build/train_gpt" ] || { echo "bench_mpi: error: $build/train_gpt missing: run make first" >&2; exit 1; }
bash scripts/prepare_kjv.sh "$build/prepare" >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cores=$(nproc)
threads=$((cores / np)); [ "$threads" -ge 1 ] || threads=1
B=$(sed -n 's/^batch_size *= *\([0-9][0-9]*\).*/\1/p' "$config" | head -1)
T=$(sed -n 's/^seq_len *= *\([0-9][0-9]*\).*/\1/p' "$config" | head -1)
[ -n "$B" ] && [ -n "$T" ] || { echo "bench_mpi: error: $config: no [train] batch_size / seq_len" >&2; exit 1; }
global=$((B * T * np))
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(--config "$config" --data.train_glob='data/kjv/train_*.bin' --data.val_glob= --train.steps=$((steps + 1))
        --train.warmup_steps=1 --train.tokens_per_step=$global --log.val_every=0 --log.sample_every=0
        --metrics.probe_every=0 --log.log_every=1)
median() { sort -n | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2] + a[NR/2+1]) / 2}'; }
field() { grep '"type":"step"' "$1" | awk -v k="\"$2\":" -F, '{for (i = 1; i <= NF; i++) if (index($i, k) == 1) { sub(k, "", $i); sub(/}/, "", $i); print $i }}' | tail -n +2; }
echo "bench_mpi: $config, global batch $global tokens (B=$B T=$T x $np), $steps timed steps, $cores cores" >&2
echo "bench_mpi: 1 process x $cores threads (grad_accum $np)" >&2
"$build/train_gpt" "${common[@]}" --train.threads="$cores" --log.run_dir="$tmp/p1" >"$tmp/p1.out" 2>&1 || { tail "$tmp/p1.out"; exit 1; }
echo "bench_mpi: $np processes x $threads threads" >&2
epargs=(); [ "$ep" -le 1 ] || epargs=(--moe.expert_parallel="$ep")
mpirun -np "$np" --oversubscribe --bind-to none -x OMP_NUM_THREADS="$threads" "$build/train_gpt" "${common[@]}" \
    --train.threads="$threads" --log.run_dir="$tmp/pn" ${epargs[@]+"${epargs[@]}"} >"$tmp/pn.out" 2>&1 || { tail "$tmp/pn.out"; exit 1; }
t1=$(field "$tmp/p1/log.jsonl" tokens_per_s | median)
tn=$(field "$tmp/pn/log.jsonl" tokens_per_s | median)
ms1=$(field "$tmp/p1/log.jsonl" ms | median)
msn=$(field "$tmp/pn/log.jsonl" ms | median)
cn=$(field "$tmp/pn/log.jsonl" comm_ms | median)
printf '\n%-28s %12s %10s %10s %12s\n' "run" "tokens/s" "ms/step" "comm ms" "comm share"
printf '%-28s %12.0f %10.1f %10s %12s\n' "1 process x $cores threads" "$t1" "$ms1" "-" "-"
printf '%-28s %12.0f %10.1f %10.1f %11.1f%%\n' "$np processes x $threads threads" "$tn" "$msn" "$cn" "$(awk -v c="$cn" -v m="$msn" 'BEGIN {print 100 * c / m}')"
printf 'speed-up %d processes / 1 process: %.3fx (same cores, same global batch)\n' "$np" "$(awk -v a="$tn" -v b="$t1" 'BEGIN {print a / b}')"
if [ "$ep" -gt 1 ]; then
    epms=$(field "$tmp/pn/log.jsonl" ep_ms | median)
    epb=$(field "$tmp/pn/log.jsonl" ep_bytes | median)
    k=$(sed -n 's/^top_k *= *\([0-9][0-9]*\).*/\1/p' "$config" | head -1)
    d=$(sed -n 's/^d_model *= *\([0-9][0-9]*\).*/\1/p' "$config" | head -1)
    L=$(sed -n 's/^n_layer *= *\([0-9][0-9]*\).*/\1/p' "$config" | head -1)
    every=$(sed -n 's/^moe_every *= *\([0-9][0-9]*\).*/\1/p' "$config" | head -1); every=${every:-1}
    printf 'expert parallel P = %d: all-to-all %.2f ms/step (%.1f%% of the step), %.0f bytes sent per token by rank 0 (arithmetic, even routing: %.0f = 4 x top_k %d x d_model %d x 4 B x %d/%d x %d MoE layers)\n' \
        "$ep" "$epms" "$(awk -v c="$epms" -v m="$msn" 'BEGIN {print 100 * c / m}')" \
        "$(awk -v b="$epb" -v t="$((global / np))" 'BEGIN {print b / t}')" \
        "$(awk -v k="$k" -v d="$d" -v P="$ep" -v L="$L" -v e="$every" 'BEGIN {print 16 * k * d * (P - 1) / P * int(L / e)}')" \
        "$k" "$d" "$((ep - 1))" "$ep" "$((L / every))"
fi
if [ -n "$out" ]; then
    printf '{"config":"%s","np":%d,"cores":%d,"global_tokens":%d,"tokens_per_s_1":%s,"tokens_per_s_n":%s,"ms_1":%s,"ms_n":%s,"comm_ms_n":%s}\n' \
        "$config" "$np" "$cores" "$global" "$t1" "$tn" "$ms1" "$msn" "$cn" >"$out"
fi
