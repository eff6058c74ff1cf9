#!/usr/bin/env python3
"""tests/cudaemu/cudaemu_rewrite.py: turn a kernels/cuda/*.cu file into C++ that g++ compiles
against the CUDA emulator (tests/cudaemu/cudaemu.h, docs/gpu.md "The CUDA emulator").

    cudaemu_rewrite.py IN.cu OUT.cpp

Four rewrites, each keeping the line count (so compiler errors and __LINE__ point at the .cu):
  kernel<<<grid, block[, smem[, stream]]>>>(args);
      -> emu_launch("kernel", emu_fn_key(kernel), grid, block[, smem[, stream]]).run([&] { kernel(args); });
  extern __shared__ [__align__(n)] T name[];   ->  T* name = (T*)emu_dyn_smem();
  __shared__ T name[N]...;                     ->  static T name[N]...; emu_static_smem(name, sizeof(name));
      (the runtime fills the array with its poison when the first thread of a block reaches the
      declaration: a __shared__ array starts each block unwritten, docs/gpu.md "The CUDA emulator")
  #include <cub/...> and <mma.h>              ->  dropped (cudaemu.h has their emulations)
Everything else is left as written: the emulator runs the project's own kernels.
"""
import os
import re
import sys

LAUNCH = re.compile(r"([A-Za-z_]\w*(?:\s*<[^<>;(){}]*>)?)\s*<<<")
EXTERN_SHARED = re.compile(r"extern\s+__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?([A-Za-z_][\w\s]*?)\s+([A-Za-z_]\w*)\s*\[\s*\]\s*;")
STATIC_SHARED = re.compile(r"__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?([A-Za-z_][\w\s:<>]*?)\s+([A-Za-z_]\w*)\s*((?:\[[^\]]+\])+)\s*;")
DROP_INCLUDE = re.compile(r"^\s*#\s*include\s*<(cub/[^>]*|mma\.h)>.*$", re.M)


def match_paren(s, i):
    """s[i] == '(' -> the index of its closing ')' (strings and chars skipped)."""
    depth, j, n = 0, i, len(s)
    while j < n:
        c = s[j]
        if c in "\"'":
            q = c
            j += 1
            while j < n and s[j] != q:
                j += 2 if s[j] == "\\" else 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return j
        j += 1
    raise SystemExit("cudaemu_rewrite: unbalanced parentheses in a kernel launch")


def rewrite_launches(src, path):
    out, pos = [], 0
    while True:
        m = LAUNCH.search(src, pos)
        if not m:
            out.append(src[pos:])
            return "".join(out)
        kernel = m.group(1)
        cfg_end = src.find(">>>", m.end())
        if cfg_end < 0:
            raise SystemExit(f"cudaemu_rewrite: {path}: '<<<' without '>>>'")
        cfg = src[m.end():cfg_end]
        j = cfg_end + 3
        while src[j].isspace():
            j += 1
        if src[j] != "(":
            raise SystemExit(f"cudaemu_rewrite: {path}: a kernel launch without arguments")
        close = match_paren(src, j)
        args = src[j:close + 1]
        name = re.sub(r"\s+", "", kernel)
        out.append(src[pos:m.start()])
        out.append(f'emu_launch("{name}", emu_fn_key({kernel}), {cfg}).run([&] {{ {kernel}{args}; }})')
        pos = close + 1


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: cudaemu_rewrite.py IN.cu OUT.cpp")
    path = sys.argv[1]
    with open(path) as f:
        src = f.read()
    src = DROP_INCLUDE.sub("", src)
    src = EXTERN_SHARED.sub(lambda m: f"{m.group(1)}* {m.group(2)} = ({m.group(1)}*)emu_dyn_smem();", src)
    src = STATIC_SHARED.sub(lambda m: f"static {m.group(1)} {m.group(2)}{m.group(3)}; emu_static_smem({m.group(2)}, sizeof({m.group(2)}));", src)
    for i, line in enumerate(src.split("\n")):
        code = re.sub(r'"(?:\\.|[^"\\])*"', '""', line).split("//")[0]   # not in strings or comments
        if "__shared__" in code:
            raise SystemExit(f"cudaemu_rewrite: {path}:{i + 1}: a __shared__ declaration the rewriter does not know "
                             "(one array per declaration: __shared__ T name[N];)")
    src = rewrite_launches(src, path)
    os.makedirs(os.path.dirname(os.path.abspath(sys.argv[2])), exist_ok=True)
    with open(sys.argv[2] + ".tmp", "w") as f:
        f.write(f'#line 1 "{path}"\n' + src)
    os.replace(sys.argv[2] + ".tmp", sys.argv[2])


if __name__ == "__main__":
    main()
