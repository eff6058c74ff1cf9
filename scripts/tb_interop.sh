#!/usr/bin/env bash
# scripts/tb_interop.sh: `make interop`'s TensorBoard part. A tiny run with [log] tensorboard = true
# (eval and probe every 2 steps, a checkpoint every 3) killed at step 9 (an injected failure:
# steps 7 and 8 were logged past the step-6 checkpoint) and resumed to step 12; its event files
# read by tensorboard's own readers (scripts/tb_interop.py: EventAccumulator, and the server's
# Python and Rust loaders over HTTP) against log.jsonl. Not part of `make test`: it needs
# tensorboard, which goes into BUILD/venv-interop (scripts/interop.sh's venv) on first use,
# pinned to the version this was checked with.
#
# usage: scripts/tb_interop.sh [--build DIR] [--keep DIR]
set -euo pipefail
TB_VERSION=2.21.0
build=build
keep=
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build=$2; shift 2 ;;
        --keep) keep=$2; shift 2 ;;
        -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "tb_interop: error: unknown argument '$1' (see --help)" >&2; exit 1 ;;
    esac
done
[ -x "$build/train_gpt" ] || { echo "tb_interop: error: $build/train_gpt missing: run make build first" >&2; exit 1; }
venv="$build/venv-interop"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
if ! "$venv/bin/python" -c "import tensorboard, sys; sys.exit(tensorboard.__version__ != '$TB_VERSION')" 2>/dev/null; then
    echo "tb_interop: installing tensorboard==$TB_VERSION into $venv (first use only)"
    "$venv/bin/pip" install -q "tensorboard==$TB_VERSION"
fi
bash scripts/prepare_kjv.sh "$build/prepare" > /dev/null
tmp=${keep:-$(mktemp -d)}
[ -n "$keep" ] && { rm -rf "$keep"; mkdir -p "$keep"; } || trap 'rm -rf "$tmp"' EXIT
# tests/ckpt_common.sh's tiny model (2 layers of width 32, one thread, a spike detector that writes records)
TINY=(--config configs/tiny_gated.ini --model.n_layer=2 --model.d_model=32 --model.n_head=2
      --model.n_kv_head=1 --model.head_dim=16 --model.d_ff=64 --model.max_seq_len=32
      --train.batch_size=2 --train.seq_len=32 --train.tokens_per_step=128 --train.warmup_steps=2
      --train.threads=1 --log.log_every=1000 --metrics.spike_window=4 --metrics.spike_z=0.5
      --metrics.skip_loss_z=0.5 --log.sample_every=0)
X=("${TINY[@]}" --train.steps=12 --checkpoint.checkpoint_every=3 --log.val_every=2 --log.val_batches=1
   --metrics.probe_every=2 --log.tensorboard=true --log.run_dir="$tmp/run")
if GATEDGPT_FAIL_RANK=0 GATEDGPT_FAIL_STEP=9 "$build/train_gpt" "${X[@]}" > "$tmp/killed.out" 2>&1; then
    echo "tb_interop: error: the run was not stopped at step 9 (see $tmp/killed.out)" >&2; exit 1
fi
cp "$tmp/run/log.jsonl" "$tmp/killed.jsonl"
"$build/train_gpt" "${X[@]}" --resume auto > "$tmp/resumed.out" 2>&1 || { echo "tb_interop: error: the resumed run failed" >&2; tail -5 "$tmp/resumed.out" >&2; exit 1; }
"$venv/bin/python" scripts/tb_interop.py "$tmp/run" --killed "$tmp/killed.jsonl" --resume-step 6
