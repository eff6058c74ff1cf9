#!/usr/bin/env bash
# tests/test_resume_epochs.sh BUILD_DIR: exact resume where a long run meets the ends of its data.
# test_resume.sh resumes inside the first pass over the data; a run of the paper's length crosses
# epoch and shard boundaries many times, and a resume that restored the position but lost the
# pass it is in (each pass has its own shuffled order) would pass there. Here the data are 3 tiny
# shards, so a 16-step run makes 2.7 passes; 2 processes (mpirun), gradient accumulation
# (2 micro-steps a step), shuffled data, the tiny model of tests/ckpt_common.sh.
#
# Geometry: a global batch (one micro-step of both processes) is nproc*B*T = 2*2*32 = 128 tokens,
# a step 2 of them (tokens_per_step 256); a shard holds whole steps (data/dataloader.h,
# dataloader_set_accum): the shards hold 513, 600 and 700 tokens, (n-1)/256 = 2 steps = 4 global
# batches each (the tails differ, so the shuffled shards have 16, 18 and 21 samples of which 16
# are used), 12 a pass. Step s ends at global batch 2s: with equal shards the position (epoch,
# shard_idx, batch_idx) after step s is (2s/12, 2s%12/4, 2s%4) whatever order the shuffle draws.
# Four runs stop (--stop-after) and resume:
#   step  5: epoch 0 shard 2 batch 2  the last step of pass 1, inside its last shard
#   step  9: epoch 1 shard 1 batch 2  the middle of pass 2, inside a shard
#   step 10: epoch 1 shard 2 batch 0  right after a shard boundary in pass 2
#   step 12: epoch 2 shard 0 batch 0  exactly on the boundary of passes 2 and 3: the saved position
#                                     is a pass whose shard order has not been drawn yet
# and each resumed run goes on to step 16 (epoch 2 shard 2 batch 0), crossing at least one more
# pass and shard boundary. Checked for each: the resume line names the position above; every
# step record of the resumed run's log.jsonl (loss and grad norm at 17 digits, lr, skipped; the
# timing fields removed) equals the uninterrupted run's; and every checkpoint from the stop to
# step 16 (model.bin, both rank files: AdamW m, v, t, data position, spike windows) is byte for
# byte the uninterrupted run's. Skips (exit 0) without mpirun. ~16 s on 2 cores (9 runs of ~1 s plus mpirun start-up).
set -uo pipefail
build=$1
if ! command -v mpirun >/dev/null 2>&1; then echo "skipped: mpirun not installed (apt-get install openmpi-bin)"; exit 0; fi
source tests/ckpt_common.sh   # the KJV shards (the tokens we cut), $PY, $tmp, check, finish, steps_of
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

# 3 shards: consecutive slices of the KJV training tokens, written by tests/llmc_shard.py (numpy)
SIZES=(513 600 700)
mkdir -p "$tmp/data"
"$PY" - "$tmp/data" "${SIZES[@]}" <<'EOF' || { echo "FAIL: cutting the shards"; exit 1; }
import sys
import numpy as np
out, sizes = sys.argv[1], [int(n) for n in sys.argv[2:]]
head = np.fromfile("data/kjv/train_000000.bin", dtype=np.int32, count=256)
assert head[0] == 20240520 and head[1] == 1, "data/kjv/train_000000.bin: expected uint16 tokens"
toks = np.fromfile("data/kjv/train_000000.bin", dtype=np.uint16, offset=1024)
off = 0
for i, n in enumerate(sizes):
    np.save(f"{out}/s{i}.npy", toks[off:off + n].astype(np.int64))
    off += n
EOF
for i in 0 1 2; do
    "$PY" tests/llmc_shard.py write "$tmp/data/train_00000$i.bin" "$tmp/data/s$i.npy" u16 || { echo "FAIL: writing shard $i"; exit 1; }
done

G=128   # tokens per global batch: nproc x B x T; a step is 2 of them, and a shard holds whole steps
per_shard=(); per_epoch=0
for n in "${SIZES[@]}"; do b=$(( (n - 1) / (2 * G) * 2 )); per_shard+=($b); per_epoch=$((per_epoch + b)); done
check "3 shards of 4 global batches each (the case positions below assume equal shards)" '[ "${per_shard[*]}" = "4 4 4" ]'

N=16
X=("${TINY[@]}" --train.tokens_per_step=256 --train.steps=$N --data.shuffle=true --data.train_glob="$tmp/data/train_*.bin"
   --checkpoint.checkpoint_every=1 --checkpoint.keep_last=0)
run() {  # run NAME [args...]: 2 processes into $tmp/NAME; output appended to $tmp/NAME.out
    local name=$1; shift
    timeout 120 mpirun -np 2 --oversubscribe "$build/train_gpt" "${X[@]}" --log.run_dir="$tmp/$name" "$@" >> "$tmp/$name.out" 2>&1
}
ck() { echo "$tmp/$1/checkpoints/step_$(printf %08d "$2")"; }
# the step records without the timing fields (steps_of leaves comm_ms, written under mpirun)
records() { steps_of "$1" | sed 's/,"comm_ms":[0-9.]*//'; }

run straight || { echo "FAIL: the uninterrupted run"; cat "$tmp/straight.out"; exit 1; }
check "uninterrupted: 2 processes, 2 micro-steps a step" 'grep -q "\"processes\":2,\"batch_size\":2,\"seq_len\":32,\"grad_accum\":2,\"tokens_per_step\":256" "$tmp/straight/log.jsonl"'
check "uninterrupted: $N step records" '[ "$(records "$tmp/straight/log.jsonl" | wc -l)" = $N ]'

for s in 5 9 10 12; do
    pos=$((2 * s))
    epoch=$((pos / per_epoch)) shard=$((pos % per_epoch / 4)) batch=$((pos % 4))
    run c$s --stop-after $s || { echo "FAIL: step $s: the interrupted run"; cat "$tmp/c$s.out"; exit 1; }
    run c$s --resume auto || { echo "FAIL: step $s: the resumed run"; cat "$tmp/c$s.out"; exit 1; }
    what="resume at step $s (epoch $epoch shard $shard batch $batch)"
    check "$what: the resume line names that position" \
        'grep -q "resume: continuing from $(ck c$s $s): step $s, AdamW t [0-9]*, data epoch $epoch shard $shard batch $batch\$" "$tmp/c$s.out"'
    check "$what: one resume record" '[ "$(grep -c "\"type\":\"resume\",\"step\":$s," "$tmp/c$s/log.jsonl")" = 1 ]'
    check "$what: all $N step records equal the uninterrupted run's" \
        'diff <(records "$tmp/straight/log.jsonl") <(records "$tmp/c$s/log.jsonl") > "$tmp/c$s.diff"'
    same=0
    for ((k = s; k <= N; k++)); do
        for f in model.bin rank_00000.bin rank_00001.bin; do
            if cmp -s "$(ck straight $k)/$f" "$(ck c$s $k)/$f"; then same=$((same + 1)); else echo "  step $k: $f differs"; fi
        done
    done
    check "$what: checkpoints of steps $s..$N byte for byte equal ($same of $((3 * (N - s + 1))) files)" '[ $same = $((3 * (N - s + 1))) ]'
done
echo "resume across epochs: 4 resumes (steps 5, 9, 10, 12 of $N; $per_epoch global batches a pass), logs and checkpoints equal; model.bin $(stat -c %s "$(ck straight $N)/model.bin") bytes, rank files $(stat -c %s "$(ck straight $N)/rank_00000.bin") bytes"
finish
