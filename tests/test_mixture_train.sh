#!/usr/bin/env bash
# tests/test_mixture_train.sh BUILD_DIR: training on a [data] sources mixture (data/mixture.h).
# Sources: web:0.7 (the KJV train shard) and code:0.3 (a 300-token shard cut from the val shard:
# 9 sequences, so it wraps its epochs several times in 16 steps of 4 sequences).
#   - 16 steps straight vs 6 (--stop-after) + --resume auto: every step record (loss, grad norm,
#     tokens_<name>, epoch_<name>) and eval record (val_loss_<name>) identical; the step-16
#     checkpoints' model.bin, rank_00000.bin and data.bin byte for byte identical;
#   - per-source counts by arithmetic: after 16 x 4 = 64 sequences, web 7/10 and code 3/10 to
#     within the schedule's bound (0.9 sequences), code's epochs = its sequences drawn / 9;
#   - the step-6 checkpoint resumed under 2 processes (mpirun), and a 2-process run stopped at 8
#     resumed on 1: the same sources and positions (tokens_/epoch_ fields identical, data.bin at
#     16 byte for byte the straight run's), losses within 1e-5 (sums grouped otherwise);
#   - a one-source mixture reads train_glob's order: its losses equal a train_glob run's;
#     train_glob runs write no data.bin and no tokens_ fields;
#   - resuming a mixture's checkpoint with train_glob (and the reverse), or with a source renamed,
#     is refused with one error line.
# ~15 s on 2 cores. The mpirun parts skip (said) without mpirun.
set -uo pipefail
build=$1
source tests/ckpt_common.sh   # the KJV shards, $PY, $tmp (removed at exit), check, steps_of
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

"$PY" - "$tmp/code.bin" <<'EOF'
import sys, numpy as np
src = np.fromfile("data/kjv/val_000000.bin", dtype=np.uint16, offset=1024)
tok = src[:300]
head = np.zeros(256, dtype=np.int32); head[0], head[1], head[2] = 20240520, 1, len(tok)
with open(sys.argv[1], "wb") as f: f.write(head.tobytes()); f.write(tok.astype(np.uint16).tobytes())
EOF
SRC="web:0.7:data/kjv/train_*.bin, code:0.3:$tmp/code.bin"
VSRC="web:1:data/kjv/val_*.bin code:1:$tmp/code.bin"
X=("${TINY[@]}" --data.train_glob= --data.val_glob= "--data.sources=$SRC" "--data.val_sources=$VSRC" --train.steps=16
   --checkpoint.checkpoint_every=4 --checkpoint.keep_last=0 --log.val_every=4 --log.val_batches=2 --metrics.probe_every=4)
# the step records without timing and without the per-source fields (for runs of other data)
losses_of() { steps_of "$1" | sed -E 's/,"(tokens|epoch)_[a-z]+":[0-9]+//g'; }
# the per-source fields of every step record: "step tokens_web epoch_web tokens_code epoch_code"
sources_of() { grep '"type":"step"' "$1" | sed -E 's/.*"step":([0-9]+),.*"tokens_web":([0-9]+),"epoch_web":([0-9]+),"tokens_code":([0-9]+),"epoch_code":([0-9]+).*/\1 \2 \3 \4 \5/'; }
ck() { echo "$tmp/$1/checkpoints/step_$(printf %08d "$2")"; }

"$build/train_gpt" "${X[@]}" --log.run_dir="$tmp/straight" > "$tmp/straight.out" 2>&1 || { echo "FAIL: straight run"; cat "$tmp/straight.out"; exit 1; }
check "banner: W = 10, bound 0.90" 'grep -q "schedule period W = 10 sequences .*within 0.90 sequences.*: web 7/10 code 3/10" "$tmp/straight.out"'
"$build/train_gpt" "${X[@]}" --log.run_dir="$tmp/split" --stop-after 6 > "$tmp/split1.out" 2>&1 || { echo "FAIL: first part"; cat "$tmp/split1.out"; exit 1; }
"$build/train_gpt" "${X[@]}" --log.run_dir="$tmp/split" --resume auto > "$tmp/split2.out" 2>&1 || { echo "FAIL: resumed part"; cat "$tmp/split2.out"; exit 1; }
check "resumed at step 6 with the mixture's position" 'grep -q "resume: mixture at global sequence 24: web [0-9]* drawn (epoch 0) code [0-9]* drawn (epoch [0-9]*)" "$tmp/split2.out"'
check "16 step records with tokens_ and epoch_ per source" '[ "$(sources_of "$tmp/straight/log.jsonl" | grep -c "^[0-9]* [0-9]* [0-9]* [0-9]* [0-9]*$")" = 16 ]'
check "resumed at 6: every step record identical (losses, tokens_<name>, epoch_<name>)" 'diff <(steps_of "$tmp/straight/log.jsonl") <(steps_of "$tmp/split/log.jsonl")'
check "eval records identical, with val_loss_web and val_loss_code" 'diff <(records_of "$tmp/straight/log.jsonl" eval) <(records_of "$tmp/split/log.jsonl" eval) && records_of "$tmp/split/log.jsonl" eval | grep -q "\"val_loss_web\":.*\"val_loss_code\":"'
for f in model.bin rank_00000.bin data.bin; do
    check "step 16 $f byte for byte the straight run's" 'cmp "$(ck straight 16)/$f" "$(ck split 16)/$f"'
done
check "DONE lists data.bin, verify passes" 'grep -q "^file data.bin " "$(ck split 16)/DONE" && "$build/gatedgpt_ckpt" inspect "$(ck split 16)" > "$tmp/inspect.out"'
check "inspect prints the sources" 'grep -q "^data: a mixture of 2 sources, next global sequence 64" "$tmp/inspect.out" && grep -q "^  source web .* sequences drawn | epoch 0, shard 0, sequence" "$tmp/inspect.out"'

# the counts by arithmetic: 64 sequences of 32 tokens, 7/10 and 3/10 within 0.9 sequences; the
# code source's 9 sequences a pass: epoch = drawn / 9 (whole passes)
read -r s tw ew tc ec <<<"$(sources_of "$tmp/straight/log.jsonl" | tail -1)"
check "step 16: tokens_web $tw + tokens_code $tc = 64 x 32" '[ $((tw + tc)) = 2048 ]'
check "step 16: web $((tw / 32)) of 64 sequences within 0.9 of 44.8" '[ $((tw / 32)) -ge 44 ] && [ $((tw / 32)) -le 45 ]'
check "step 16: epoch_code $ec = $((tc / 32)) sequences / 9" '[ "$ec" = $((tc / 32 / 9)) ] && [ "$ec" -ge 2 ] && [ "$ew" = 0 ]'
bad=$(sources_of "$tmp/straight/log.jsonl" | awk '{ n = $1 * 4; w = $2 / 32; d = w - 0.7 * n; if (d < 0) d = -d; if (d > 0.9 + 1e-9) print }')
check "after every step: web's count within 0.9 of 0.7 x sequences${bad:+ (not: $bad)}" '[ -z "$bad" ]'
echo "mixture: 16 steps, web $((tw / 32)) / code $((tc / 32)) sequences (epoch_code $ec); resumed at 6: records and checkpoints identical"

# another process count: the 1-process checkpoint of step 6 resumed under 2 processes, and a
# 2-process run stopped at 8 resumed on 1 process
if command -v mpirun > /dev/null 2>&1; then
    MPI=(timeout 120 mpirun -np 2 --oversubscribe ${ONEDNN_MAX_CPU_ISA:+-x ONEDNN_MAX_CPU_ISA})
    "${MPI[@]}" "$build/train_gpt" "${X[@]}" --resume "$(ck split 6)" --log.run_dir="$tmp/np2" > "$tmp/np2.out" 2>&1 || { echo "FAIL: 2 processes"; tail "$tmp/np2.out"; }
    check "1 -> 2 processes at step 6: tokens_/epoch_ of steps 7..16 identical" 'diff <(sources_of "$tmp/straight/log.jsonl" | tail -10) <(sources_of "$tmp/np2/log.jsonl")'
    check "1 -> 2 processes: data.bin at 16 byte for byte the straight run's" 'cmp "$(ck straight 16)/data.bin" "$(ck np2 16)/data.bin"'
    grep '"type":"step"' "$tmp/straight/log.jsonl" | tail -10 > "$tmp/straight_7_16.jsonl"   # the steps np2 ran
    "$PY" tests/compare_ckpt.py losses "$tmp/straight_7_16.jsonl" "$tmp/np2/log.jsonl" 1e-5 > "$tmp/np2.cmp"; rc=$?
    check "1 -> 2 processes: $(cat "$tmp/np2.cmp")" '[ $rc = 0 ]'
    "${MPI[@]}" "$build/train_gpt" "${X[@]}" --log.run_dir="$tmp/two" --stop-after 8 > "$tmp/two1.out" 2>&1 || { echo "FAIL: 2 processes to 8"; tail "$tmp/two1.out"; }
    "$build/train_gpt" "${X[@]}" --log.run_dir="$tmp/two" --resume auto > "$tmp/two2.out" 2>&1 || { echo "FAIL: 1 process from 8"; tail "$tmp/two2.out"; }
    check "2 -> 1 process at step 8: tokens_/epoch_ of all 16 steps identical" 'diff <(sources_of "$tmp/straight/log.jsonl") <(sources_of "$tmp/two/log.jsonl")'
    check "2 -> 1 process: data.bin at 8 and 16 byte for byte the straight run's" 'cmp "$(ck straight 8)/data.bin" "$(ck two 8)/data.bin" && cmp "$(ck straight 16)/data.bin" "$(ck two 16)/data.bin"'
    "$PY" tests/compare_ckpt.py losses "$tmp/straight/log.jsonl" "$tmp/two/log.jsonl" 1e-5 > "$tmp/two.cmp"; rc=$?
    check "2 -> 1 process: $(cat "$tmp/two.cmp")" '[ $rc = 0 ]'
    echo "other process counts: $(cat "$tmp/np2.cmp"); $(cat "$tmp/two.cmp")"
else
    echo "skipped: the process-count parts (mpirun not installed)"
fi

# one source = train_glob's order (within the shard's first pass); train_glob runs are unchanged
G=("${TINY[@]}" --train.steps=8 --data.val_glob=)
"$build/train_gpt" "${G[@]}" --log.run_dir="$tmp/glob" --checkpoint.checkpoint_every=8 > "$tmp/glob.out" 2>&1 || { echo "FAIL: train_glob run"; cat "$tmp/glob.out"; }
"$build/train_gpt" "${G[@]}" --data.train_glob= "--data.sources=all:1:data/kjv/train_*.bin" --log.run_dir="$tmp/one" > "$tmp/one.out" 2>&1 || { echo "FAIL: one source"; cat "$tmp/one.out"; }
check "one source: the losses of train_glob's run" '[ "$(losses_of "$tmp/one/log.jsonl" | wc -l)" = 8 ] && diff <(losses_of "$tmp/glob/log.jsonl") <(losses_of "$tmp/one/log.jsonl")'
check "train_glob: no data.bin, no per-source fields" '[ -e "$(ck glob 8)/DONE" ] && [ ! -e "$(ck glob 8)/data.bin" ] && ! grep -q "\"epoch_" "$tmp/glob/log.jsonl"'

# refusals: one error line each, nothing written
"$build/train_gpt" "${G[@]}" --train.steps=16 --log.run_dir="$tmp/glob" --resume "$(ck split 8)" > "$tmp/r1.out" 2>&1; rc=$?
check "a mixture's checkpoint resumed with train_glob: refused" '[ $rc = 1 ] && grep -q "error: --resume .*step_00000008: the checkpoint holds a \[data\] sources mixture.s position (data.bin), but this run reads \[data\] train_glob" "$tmp/r1.out"'
"$build/train_gpt" "${X[@]}" --log.run_dir="$tmp/r2" --resume "$(ck glob 8)" > "$tmp/r2.out" 2>&1; rc=$?
check "a train_glob checkpoint resumed with sources: refused" '[ $rc = 1 ] && grep -q "the checkpoint holds one data set.s position (no data.bin), but this run reads \[data\] sources" "$tmp/r2.out"'
"$build/train_gpt" "${X[@]}" "--data.sources=web:0.7:data/kjv/train_*.bin, news:0.3:$tmp/code.bin" --log.run_dir="$tmp/r3" --resume "$(ck split 8)" > "$tmp/r3.out" 2>&1; rc=$?
check "a source renamed: refused, naming it" '[ $rc = 1 ] && grep -q "data.bin: the checkpoint.s mixture has source .code., which \[data\] sources lacks" "$tmp/r3.out"'
check "the refused runs wrote no checkpoint" '[ ! -e "$tmp/r2/checkpoints" ] && [ ! -e "$tmp/r3/checkpoints" ] && [ ! -e "$(ck glob 16)" ]'
finish
