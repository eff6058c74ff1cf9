#!/usr/bin/env bash
# scripts/deps.sh: install the Debian packages that the build, the tests and the demo need.
# Idempotent, non-interactive, and silent when everything is already installed.
set -euo pipefail

PACKAGES=(
  cmake make gcc pkg-config     # build
  libinih-dev                   # INI parsing of configs
  zlib1g-dev                    # crc32 checksums of checkpoint files, gzip input of prepare
  libzstd-dev liblzma-dev       # zstd and xz input of prepare (data/decompress.c)
  zstd xz-utils time            # the tests' compressed inputs; /usr/bin/time -v in bench/bench_prepare.sh
  libpcre2-dev libcjson-dev libutf8proc-dev   # Hugging Face tokenizer.json: its regex (PCRE2, JIT), the JSON, NFC (data/hf_tokenizer.c)
  libdnnl-dev                   # oneDNN: the CPU GEMM (docs/gemm_choice.md)
  libopenblas-dev               # the GEMM we compare against (bench), and a fallback
  libxsmm-dev                   # LIBXSMM: JIT kernels for the delta rule's small GEMMs (kernels/cpu/gemm_small.c)
  libopenmpi-dev openmpi-bin    # data-parallel training under mpirun (train/comm_mpi.c)
  bible-kjv                     # the demo corpus (King James Bible), no download needed
  python3-numpy python3-matplotlib   # scripts/report.py (ablation reports)
  python3-pip                   # fetches the cudnn-frontend headers (scripts/cudnn_frontend.sh)
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# with a CUDA toolkit: the cudnn-frontend headers for the cuDNN attention (a soft dependency)
frontend() { bash "$(dirname "${BASH_SOURCE[0]}")/cudnn_frontend.sh"; }
[ ${#missing[@]} -eq 0 ] && { frontend; exit 0; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "deps: missing packages: ${missing[*]}; run as root: apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" > /tmp/gatedgpt-deps.log 2>&1; then
  $SUDO apt-get update -q > /tmp/gatedgpt-deps.log 2>&1
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >> /tmp/gatedgpt-deps.log 2>&1 \
    || { echo "deps: apt-get failed; log:" >&2; tail -20 /tmp/gatedgpt-deps.log >&2; exit 1; }
fi
echo "deps: done"
frontend
