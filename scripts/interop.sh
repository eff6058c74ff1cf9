#!/usr/bin/env bash
# scripts/interop.sh: `make interop`: every exportable model kind through Hugging Face transformers
# (scripts/interop.py has what it checks). Not part of `make test`: it needs torch and
# transformers, which go into a virtual environment created here on first use
# (BUILD/venv-interop; pip: torch, transformers, safetensors, tokenizers, numpy, lm-eval: a few GB with
# torch's CUDA libraries). Needs a built tree (make build) and the KJV shards (made here).
#
# usage: scripts/interop.sh [--build DIR] [-- interop.py options, e.g. --kinds qwen3,gpt2 --keep DIR]
set -euo pipefail
build=build
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build=$2; shift 2 ;;
        --) shift; break ;;
        -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "interop: error: unknown argument '$1' (see --help)" >&2; exit 1 ;;
    esac
done
[ -x "$build/train_gpt" ] && [ -x "$build/gatedgpt_ckpt" ] || { echo "interop: error: $build/train_gpt or gatedgpt_ckpt missing: run make build first" >&2; exit 1; }
venv="$build/venv-interop"
if ! "$venv/bin/python" -c "import torch, transformers, tokenizers, numpy" 2>/dev/null; then
    echo "interop: creating $venv (torch, transformers, safetensors, tokenizers, numpy, tensorboard; first use only)"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q torch transformers safetensors tokenizers numpy tensorboard==2.21.0   # tensorboard: scripts/tb_interop.sh
fi
# lm-evaluation-harness for the multiple-choice rows (scripts/interop_mc.py), pinned: its
# definitions are what those rows compare with; it leaves torch and transformers as they are
if ! "$venv/bin/python" -c "import lm_eval" 2>/dev/null; then
    echo "interop: installing lm-eval==0.4.13 into $venv (first use only)"
    "$venv/bin/pip" install -q "lm-eval==0.4.13"
fi
bash scripts/prepare_kjv.sh "$build/prepare" > /dev/null
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1   # lm-eval reads the task files from disk; nothing to download
exec "$venv/bin/python" scripts/interop.py --build "$build" "$@"
