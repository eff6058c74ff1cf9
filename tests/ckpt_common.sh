# tests/ckpt_common.sh: shared by the checkpoint shell tests (sourced). A tiny model on the KJV
# shards (scripts/prepare_kjv.sh): 2 layers of width 32, batches of 2 x 32 tokens, 2 micro-steps
# per step (gradient accumulation), shuffled data, and a spike detector that skips updates, so
# that every piece of trainer state matters for the trajectory. One thread (the test machine is shared): a step takes ~20 ms.
TINY=(--config configs/tiny_gated.ini --model.n_layer=2 --model.d_model=32 --model.n_head=2
      --model.n_kv_head=1 --model.head_dim=16 --model.d_ff=64 --model.max_seq_len=32
      --train.batch_size=2 --train.seq_len=32 --train.tokens_per_step=128 --train.warmup_steps=2
      --train.threads=1 --log.log_every=1000 --metrics.spike_window=4 --metrics.spike_z=0.5
      --metrics.skip_loss_z=0.5 --log.val_every=0 --metrics.probe_every=0 --log.sample_every=0)

# Sourced right after `build=$1`: the KJV shards (scripts/prepare_kjv.sh), $PY (the python with
# numpy) and a scratch directory $tmp removed at exit (a test that needs more at exit sets its own
# trap after sourcing this).
bash scripts/prepare_kjv.sh "$build/prepare" > /dev/null || exit 1
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

pass=0; fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1"; fi; }
finish() { echo "$pass passed, $fail failed"; [ "$fail" = 0 ]; }

# The step records of a log.jsonl without the timing fields: what must match between runs.
steps_of() { grep '"type":"step"' "$1" | sed -E 's/"(ms|tokens_per_s|mfu|elapsed_s|eta_s)":[^,]*,//g'; }
# Records of the given type, as they are.
records_of() { grep "\"type\":\"$2\"" "$1"; }
