#!/usr/bin/env bash
# scripts/gpu_deps.sh [DIR]: stage, from this machine's Debian packages, what a bare GPU machine
# lacks for scripts/gpu_check.sh: libinih, zlib, libzstd, liblzma, PCRE2 and utf8proc (static libraries and headers), cJSON
# (its shared library: Debian has no static one) and the
# cudnn-frontend headers (scripts/cudnn_frontend.sh) into DIR (default
# gpu-deps/ in the repository, ignored by git). Carry DIR to the GPU machine with the working
# tree; gpu_check.sh finds it there (CMAKE_PREFIX_PATH). No BLAS is staged: without one,
# gpu_check.sh builds the CPU reference of the GPU tests with GATEDGPT_GEMM=naive.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dir=${1:-gpu-deps}
hdr=""; lib=""
for p in /usr/include/ini.h /usr/local/include/ini.h; do [ -f "$p" ] && { hdr=$p; break; }; done
for p in /usr/lib/x86_64-linux-gnu/libinih.a /usr/lib/libinih.a /usr/local/lib/libinih.a; do [ -f "$p" ] && { lib=$p; break; }; done
if [ -z "$hdr" ] || [ -z "$lib" ]; then
    echo "gpu_deps: error: libinih's ini.h or libinih.a not found: apt-get install libinih-dev (scripts/deps.sh)" >&2
    exit 1
fi
mkdir -p "$dir/include" "$dir/lib"
cp "$hdr" "$dir/include/ini.h"
cp "$lib" "$dir/lib/libinih.a"
# zlib (checkpoint checksums): header and static library, for a machine without zlib1g-dev
for p in /usr/lib/x86_64-linux-gnu/libz.a /usr/lib/libz.a; do
    if [ -f "$p" ] && [ -f /usr/include/zlib.h ]; then
        cp /usr/include/zlib.h /usr/include/zconf.h "$dir/include/" 2>/dev/null || cp /usr/include/zlib.h "$dir/include/"
        [ -f /usr/include/x86_64-linux-gnu/zconf.h ] && cp /usr/include/x86_64-linux-gnu/zconf.h "$dir/include/"
        cp "$p" "$dir/lib/libz.a"
        break
    fi
done
# libzstd and liblzma (static) for prepare's compressed input (data/decompress.c)
for l in zstd lzma; do
    if [ -f /usr/include/$l.h ] && [ -f /usr/lib/x86_64-linux-gnu/lib$l.a ]; then
        cp /usr/include/$l.h "$dir/include/" && cp /usr/lib/x86_64-linux-gnu/lib$l.a "$dir/lib/"
        if [ $l = zstd ]; then cp /usr/include/zstd_errors.h "$dir/include/"; else cp -r /usr/include/lzma "$dir/include/"; fi
    else echo "gpu_deps: error: $l.h or lib$l.a not found: apt-get install lib$l-dev (scripts/deps.sh)" >&2; exit 1; fi
done
# PCRE2 (static) and cJSON (Debian ships it shared only: the binaries find it by their build RPATH)
# for data/hf_tokenizer.c
if [ -f /usr/include/pcre2.h ] && [ -f /usr/lib/x86_64-linux-gnu/libpcre2-8.a ]; then
    cp /usr/include/pcre2.h "$dir/include/" && cp /usr/lib/x86_64-linux-gnu/libpcre2-8.a "$dir/lib/"
else echo "gpu_deps: error: pcre2.h or libpcre2-8.a not found: apt-get install libpcre2-dev (scripts/deps.sh)" >&2; exit 1; fi
if [ -f /usr/include/cjson/cJSON.h ] && [ -e /usr/lib/x86_64-linux-gnu/libcjson.so.1 ]; then
    mkdir -p "$dir/include/cjson" && cp /usr/include/cjson/cJSON.h "$dir/include/cjson/"
    cp -L /usr/lib/x86_64-linux-gnu/libcjson.so.1 "$dir/lib/libcjson.so.1" && ln -sf libcjson.so.1 "$dir/lib/libcjson.so"
else echo "gpu_deps: error: cjson/cJSON.h or libcjson.so.1 not found: apt-get install libcjson-dev (scripts/deps.sh)" >&2; exit 1; fi
if [ -f /usr/include/utf8proc.h ] && [ -f /usr/lib/x86_64-linux-gnu/libutf8proc.a ]; then
    cp /usr/include/utf8proc.h "$dir/include/" && cp /usr/lib/x86_64-linux-gnu/libutf8proc.a "$dir/lib/"
else echo "gpu_deps: error: utf8proc.h or libutf8proc.a not found: apt-get install libutf8proc-dev (scripts/deps.sh)" >&2; exit 1; fi
# the cudnn-frontend headers (header-only) for the cuDNN attention, if fetched here
if bash scripts/cudnn_frontend.sh && [ -f third_party/cudnn_frontend/include/cudnn_frontend.h ]; then
    cp -r third_party/cudnn_frontend/include/. "$dir/include/"
fi
echo "gpu_deps: staged $hdr and $lib (and the cudnn-frontend headers, if fetched) under $dir/ ($(du -sh "$dir" | cut -f1)); carry it to the GPU machine"
