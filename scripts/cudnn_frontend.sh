#!/usr/bin/env bash
# scripts/cudnn_frontend.sh: fetch NVIDIA's cudnn-frontend headers (header-only C++, MIT) into
# third_party/cudnn_frontend/include (ignored by git), for the cuDNN attention of the CUDA
# backend (kernels/cuda/attention_cudnn.cpp, [train] attn_impl = cudnn). The headers come from
# the pinned PyPI wheel nvidia-cudnn-frontend (its include/ folder; the Python module in it is
# not used). Idempotent; a machine without nvcc skips it. If the download fails the build goes
# on without the cuDNN attention (cmake says "cuDNN attention: OFF") and this prints why.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VERSION=1.32.0
dest=third_party/cudnn_frontend
if [ -f "$dest/include/cudnn_frontend.h" ] && [ "$(cat "$dest/VERSION" 2>/dev/null)" = "$VERSION" ]; then exit 0; fi
command -v nvcc > /dev/null 2>&1 || exit 0   # no CUDA toolkit: nothing uses the headers
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
if ! "$PY" -m pip --version > /dev/null 2>&1; then
    echo "cudnn_frontend: warning: pip is missing (apt-get install python3-pip): building without the cuDNN attention" >&2
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! "$PY" -m pip download --quiet --no-deps --only-binary=:all: "nvidia-cudnn-frontend==$VERSION" -d "$tmp" > "$tmp/log" 2>&1; then
    echo "cudnn_frontend: warning: could not download nvidia-cudnn-frontend $VERSION (offline?): building without the cuDNN attention" >&2
    tail -3 "$tmp/log" >&2
    exit 0
fi
rm -rf "$dest"
mkdir -p "$dest"
"$PY" - "$tmp" "$dest" <<'PYEOF'
import glob, sys, zipfile
tmp, dest = sys.argv[1], sys.argv[2]
whl = glob.glob(tmp + "/*.whl")[0]
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if n.startswith("include/") and not n.endswith("/")]
    for n in names:
        z.extract(n, dest)
    # the licence travels with the headers
    for n in z.namelist():
        if n.upper().endswith("LICENSE") or n.upper().endswith("LICENSE.TXT"):
            with open(dest + "/LICENSE", "wb") as f:
                f.write(z.read(n))
            break
print(f"cudnn_frontend: {len(names)} headers from {whl.split('/')[-1]} into {dest}/include")
PYEOF
echo "$VERSION" > "$dest/VERSION"
