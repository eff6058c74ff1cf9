#!/usr/bin/python3
"""gpu_report.py: what the compiler made of every CUDA kernel, and checks on it (issue #21).

For every __global__ kernel of kernels/cuda/*.cu (found by reading the sources and the compiled
code, never from a list), compiled for sm_90 (H100/H200) and sm_80 (A100) with the flags of the
CMake build (-O3 -lineinfo -std=c++17, the bf16 build: -DGATEDGPT_ACT_BF16=1), this prints:
registers per thread, static and dynamic shared memory, stack frame, spill stores/loads (ptxas
-v), local-memory instructions (LDL/STL) and tensor-core instructions (HMMA, HGMMA) in the SASS
(nvdisasm), the block size and dynamic shared memory each kernel is launched with (read off its
launch site: `kernel<<<grid, block, smem, stream>>>`, macros, local constants and constexpr
size functions evaluated; a run-time value is said so and replaced by the value of the typical
shape, below), and the theoretical occupancy from those on an H200 (sm_90) and an A100 (sm_80),
computed as CUDA's occupancy calculator does (cuda_occupancy.h: registers allocated per warp in
units of 256 over 4 sub-partitions, shared memory in units of 128 bytes plus the 1 KiB the
driver reserves per block, the default carveout = the whole 228 KiB / 164 KiB, 64 warps and 32
blocks per SM, barriers). It writes the same as JSON, and fails (exit 1, one line of reason at
the end) when a check fails:

  spills      no spill stores/loads (ptxas) in a kernel of the checked categories, matched by
              name: attention (attn|attention|flash|mma_|kv_|rope|cached|sdpa), GEMM epilogue
              (gemm|matmul|epilogue|bias|gelu|swiglu), norm (norm), MoE dispatch
              (router|plan_|gather|combine|dispatch|expert|moe), optimizer
              (adamw|sumsq|optim|sgd|lion|clip), Gated DeltaNet (^gdn_)
  local-mem   no LDL/STL in the SASS of any kernel (a spill, or an array the compiler could not
              keep in registers), except the entries of ALLOWED_LOCAL below, each with its reason
              and the most bytes it may use; without a disassembler, the ptxas stack frame stands
              in for the SASS
  hmma        every bf16 flash kernel (attention_flash.cu, WMMA; attention_mma.cu, mma.sync)
              and, in the bf16 build, every chunked delta-rule kernel (deltanet_chunk.cu,
              mma.sync) issues bf16 tensor-core instructions (HMMA.*.BF16) inside a loop of its
              SASS (an HMMA between a backward branch and its target), on every architecture
  fits        every kernel's launch configuration fits an SM (at least one block: registers x
              threads <= 64K, shared memory <= the opt-in limit) on sm_90 and sm_80
  found       at least one kernel, and at least one kernel for the hmma check (so that a rename
              cannot make the checks pass vacuously)

Typical shapes for run-time launch values: head_dim 64 (GPT-2 124M, the sink pair) where a
kernel's shared memory depends on it and no template argument fixes it; the fp32 attention
kernels attention_*_kernel<NC> serve head_dim <= 32*NC and are reported at head_dim = 32*NC.

Usage:
  scripts/gpu_report.py                    compile into build-gpurep/ (cached by content), report
  scripts/gpu_report.py --build build      read the objects of a CMake build instead (cuobjdump)
  scripts/gpu_report.py --maxrregcount norm.cu=16
                                           the deliberate bug: compile one file with 16 registers
  scripts/gpu_report.py --fetch-tools      fetch cuobjdump + nvdisasm (pip wheels) when missing

Mutant demonstration (the spill check catches a deliberate bug): `--arch 90 --maxrregcount
norm.cu=16` compiles norm.cu with -maxrregcount=16. Measured (2026-12-02, nvcc 13.0): ptxas
spills 8 bytes in norm_forward_kernel and norm_backward_partial_kernel, and the report exits 1
with "gpu_report: FAIL: spills: norm kernel norm_backward_partial_kernel on sm_90: 8 bytes spill
stores, 8 bytes spill loads; ..." (local-mem fails too, on the STL/LDL the spills became). The
same option on a file whose kernels carry __launch_bounds__ (attention_mma.cu) changes nothing:
ptxas lets __launch_bounds__ win over -maxrregcount, so those kernels keep their 104-252
registers and the report passes; that is ptxas's rule, not a hole in the check.

Tools: nvcc (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin); nvdisasm/cuobjdump from the same places,
from third_party/cuda_tools/ (where --fetch-tools puts NVIDIA's pip wheels
nvidia-cuda-nvdisasm / nvidia-cuda-cuobjdump) or from a pip install (nvidia/cu13/bin). Without
a disassembler the SASS checks are reported SKIP (exit 0) unless --require-sass.
Python 3 standard library only. Status of the numbers: compiler output, not measurements;
no kernel has run on a GPU yet (docs/gpu.md).
"""
import argparse
import concurrent.futures
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ---- what the checks apply to -------------------------------------------------------------
CATEGORIES = [   # (category, regex on the kernel's name); a kernel may have several
    ("attention", r"attn|attention|flash|^mma_|kv_|rope|cached|sdpa"),
    ("gemm_epilogue", r"gemm|matmul|epilogue|bias|gelu|swiglu"),
    ("norm", r"norm"),
    ("moe_dispatch", r"router|^plan_|gather|combine|dispatch|expert|moe"),
    ("optimizer", r"adamw|sumsq|optim|sgd|lion|clip"),
    ("deltanet", r"^gdn_"),
]
# the bf16 tensor-core kernels: (file regex, kernel-name regex, the builds in which they use tensor
# cores). The chunked delta rule's kernels multiply bf16 operands on tensor cores in the bf16 build
# only (the fp32 build's are fp32 products on CUDA cores: no HMMA there, by design).
HMMA_KERNELS = [(r"^attention_flash\.cu$", r"^flash_.*kernel$", ("bf16", "fp32")),
                (r"^attention_mma\.cu$", r"^mma_.*kernel$", ("bf16", "fp32")),
                (r"^deltanet_chunk\.cu$", r"^gdn_chunk_.*kernel$", ("bf16",))]

# Kernels allowed to use local memory, each with its reason and the most bytes (ptxas stack frame)
# it may use: (kernel regex on the name with template arguments, arch or None for any, max stack
# bytes, reason). A kernel that grows past its bytes fails again. Keep this list short and true.
ALLOWED_LOCAL = [
    (r"^attention_forward_kernel<1,0>$", "sm_90", 8,
     "fp32 CUDA-core reference kernel (attn_impl = fused) instantiated for head_dim <= 32: one "
     "4-byte spill (1 STL + 1 LDL); head_dim 64/128 run <2>/<4>, which do not spill, or the "
     "tensor-core kernels"),
    (r"^attention_backward_dkv_kernel<1,[01]>$", "sm_80", 8,
     "the same fp32 reference kernel's dK/dV pass at head_dim <= 32, on A100 only: one 4-byte spill, "
     "causal (<1,0>) and under the document mask (<1,1>) alike"),
    (r"^flash_dkv_kernel<128,0>$", "sm_80", 8,
     "the WMMA cross-check kernel (GATEDGPT_FLASH_WMMA=1, not the default flash path) at head_dim "
     "128 on A100: 255 registers and one 4-byte spill (docs/gpu.md); none on sm_90"),
]

# ---- the chips (NVIDIA's published figures; CUDA occupancy calculator's per-SM limits) -------
ARCHS = {
    "sm_90": dict(chip="H200 SXM", sms=132, regs_sm=65536, regs_block=65536, max_regs_thread=255,
                  threads_sm=2048, threads_block=1024, blocks_sm=32, smem_sm=228 * 1024,
                  smem_block_optin=227 * 1024, smem_block_default=48 * 1024, smem_reserved=1024,
                  smem_gran=128, reg_gran=256, subpartitions=4, barriers_per_block_slot=2),
    "sm_80": dict(chip="A100", sms=108, regs_sm=65536, regs_block=65536, max_regs_thread=255,
                  threads_sm=2048, threads_block=1024, blocks_sm=32, smem_sm=164 * 1024,
                  smem_block_optin=163 * 1024, smem_block_default=48 * 1024, smem_reserved=1024,
                  smem_gran=128, reg_gran=256, subpartitions=4, barriers_per_block_slot=2),
}
TYPICAL_HD = 64

# cuobjdump / nvdisasm wheels for --fetch-tools (NVIDIA's, on PyPI; newer tools read older cubins)
TOOL_WHEELS = ["nvidia-cuda-nvdisasm==13.2.51", "nvidia-cuda-cuobjdump==13.2.51"]
TOOLS_DIR = os.path.join(ROOT, "third_party", "cuda_tools")

SIZEOF = {"float": 4, "double": 8, "int": 4, "unsigned": 4, "unsigned int": 4, "size_t": 8,
          "uint32_t": 4, "int32_t": 4, "uint16_t": 2, "int64_t": 8, "uint64_t": 8, "char": 1,
          "unsigned char": 1, "__nv_bfloat16": 2, "bf16": 2, "__half": 2, "half": 2,
          "float2": 8, "float4": 16, "int4": 16, "uint4": 16, "double2": 16, "__nv_bfloat162": 4}


def log(msg):
    print(msg, flush=True)


# ---- tools ----------------------------------------------------------------------------------
def find_tool(name, extra_dirs=()):
    dirs = list(extra_dirs)
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            dirs.append(os.path.join(os.environ[env], "bin"))
    dirs += ["/usr/local/cuda/bin"]
    dirs += glob.glob(os.path.join(TOOLS_DIR, "nvidia", "cu*", "bin"))
    for sp in sys.path + glob.glob("/usr/local/lib/python3*/dist-packages") + \
            glob.glob(os.path.expanduser("~/.local/lib/python3*/site-packages")) + \
            glob.glob("/usr/lib/python3/dist-packages"):
        dirs += glob.glob(os.path.join(sp, "nvidia", "cu*", "bin"))
        dirs += glob.glob(os.path.join(sp, "nvidia", "cuda_*", "bin"))
    p = shutil.which(name)
    if p:
        return p
    for d in dirs:
        c = os.path.join(d, name)
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def fetch_tools():
    """Download NVIDIA's nvdisasm / cuobjdump wheels into third_party/cuda_tools (pip download)."""
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([py, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                            "-d", tmp] + TOOL_WHEELS, capture_output=True, text=True)
        if r.returncode != 0:
            return "pip download failed: " + (r.stderr.strip().splitlines() or ["?"])[-1]
        n = 0
        for whl in glob.glob(os.path.join(tmp, "*.whl")):
            with zipfile.ZipFile(whl) as z:
                for name in z.namelist():
                    if "/bin/" in name and not name.endswith("/"):
                        z.extract(name, TOOLS_DIR)
                        os.chmod(os.path.join(TOOLS_DIR, name), 0o755)
                        n += 1
        return None if n else "no binaries in the wheels"


def tool_version(path):
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
        m = re.search(r"release ([\d.]+), V([\d.]+)", out) or re.search(r"V([\d.]+)", out)
        return m.group(0) if m else out.strip().splitlines()[-1]
    except OSError:
        return "?"


# ---- source reading -------------------------------------------------------------------------
def strip_comments(text):
    # keep offsets: replace comments by spaces of the same length (newlines kept)
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r"//[^\n]*|/\*.*?\*/", blank, text, flags=re.S)


def include_closure(path, seen=None):
    seen = seen if seen is not None else []
    if path in seen:
        return seen
    seen.append(path)
    try:
        text = open(path, encoding="utf-8", errors="replace").read()
    except OSError:
        return seen
    for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, flags=re.M):
        for base in (os.path.dirname(path), ROOT, os.path.join(ROOT, "kernels", "cuda")):
            c = os.path.normpath(os.path.join(base, inc))
            if os.path.isfile(c):
                include_closure(c, seen)
                break
    return seen


def balanced(text, i, open_ch="(", close_ch=")"):
    """Index just past the bracket that closes text[i] (text[i] == open_ch)."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_ch:
            depth += 1
        elif text[j] == close_ch:
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


def split_args(s):
    """split_top at commas, then parts rejoined while one opens more template brackets than it
    closes: f<DK, DV>() is one argument (a '<' right after a name opens one, each '>' closes one;
    '<<' and spaced comparisons 'a < b' open none)."""
    out = []
    for part in split_top(s):
        if out and len(re.findall(r"\w<(?!<)", out[-1])) > out[-1].count(">"):
            out[-1] = out[-1] + ", " + part
        else:
            out.append(part)
    return out


def split_top(s, sep=","):
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == sep and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [x.strip() for x in out]


def c_conditional(toks):
    """C's  c ? a : b  (lowest precedence, right-associative) as Python's  (a if c else b), in a
    token list, inside every pair of parentheses."""
    out, i = [], 0
    while i < len(toks):   # the parenthesised groups first (function-call parentheses too)
        if toks[i] == "(":
            depth, j = 0, i
            while j < len(toks):
                depth += toks[j] == "("
                depth -= toks[j] == ")"
                if depth == 0:
                    break
                j += 1
            out += ["("] + c_conditional(toks[i + 1:j]) + [")"]
            i = j + 1
        else:
            out.append(toks[i])
            i += 1
    # top level: split at commas (arguments of min/max were handled above), then the first '?'
    if "?" not in out:
        return out
    parts, cur = [], []
    for t in out:
        if t == ",":
            parts.append(cur)
            cur = []
        else:
            cur.append(t)
    parts.append(cur)
    if len(parts) > 1:
        res = []
        for k, p in enumerate(parts):
            res += ([","] if k else []) + c_conditional(p)
        return res
    q = out.index("?")
    nest, k = 0, q + 1
    while k < len(out):   # the ':' that matches this '?'
        if out[k] == "?":
            nest += 1
        elif out[k] == ":":
            if nest == 0:
                break
            nest -= 1
        k += 1
    cond, yes, no = out[:q], out[q + 1:k], out[k + 1:]
    return ["("] + c_conditional(yes) + [")", "if", "("] + cond + [")", "else", "("] + c_conditional(no) + [")"]


class SourceFile:
    """One .cu with its includes: kernels, launch sites, macros, constants, constexpr functions."""

    def __init__(self, path):
        self.path = path
        self.name = os.path.basename(path)
        self.raw = open(path, encoding="utf-8", errors="replace").read()
        self.text = strip_comments(self.raw)
        self.includes = include_closure(path)[1:]
        self.macros, self.consts, self.funcs = {}, [], {}
        for p in self.includes + [path]:
            t = self.text if p == path else strip_comments(open(p, encoding="utf-8", errors="replace").read())
            glob_pos = None if p == path else -1
            self._scan(t, glob_pos)
        self.kernels = self._kernels()
        self.launches = self._launches()

    def _scan(self, t, glob_pos):
        for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(?!\()[ \t]+([^\n]*)$", t, flags=re.M):
            self.macros.setdefault(m.group(1), m.group(2).strip())
        # declarations with initialisers: int|size_t|... NAME = EXPR[, NAME = EXPR];
        for m in re.finditer(r"\b(?:int|size_t|unsigned|long|auto|uint32_t)\s+(?=\w+\s*=[^=])", t):
            end = t.find(";", m.end())
            if end < 0:
                continue
            for decl in split_args(t[m.end():end]):
                dm = re.match(r"(\w+)\s*=\s*(.+)$", decl, flags=re.S)
                if dm:
                    pos = m.start() if glob_pos is None else -1
                    self.consts.append((pos, dm.group(1), dm.group(2).strip()))
        # constexpr functions without arguments, with int template parameters or none:
        # template <int A[, int B ...]> [static] [__host__] [__device__] constexpr T name() { return EXPR; }
        for m in re.finditer(r"(?:template\s*<\s*(int\s+\w+(?:\s*,\s*int\s+\w+)*)\s*>\s*)?(?:static\s+)?"
                             r"(?:__host__\s+)?(?:__device__\s+)?constexpr\s+(?:static\s+)?[\w:]+\s+(\w+)\s*\(\s*\)\s*"
                             r"\{\s*return\s+(.*?);\s*\}", t, flags=re.S):
            params = [x.split()[-1] for x in m.group(1).split(",")] if m.group(1) else []
            self.funcs.setdefault(m.group(2), (params, m.group(3)))

    def _kernels(self):
        out = {}
        for m in re.finditer(r"\b__global__\b", self.text):
            i = m.end()
            lb = None
            # the kernel's name: the identifier before the first '(' that is not __launch_bounds__'s
            j = i
            name = None
            while j < len(self.text):
                k = self.text.find("(", j)
                if k < 0:
                    break
                before = self.text[i:k]
                idm = re.search(r"(\w+)\s*$", before)
                if idm and idm.group(1) == "__launch_bounds__":
                    e = balanced(self.text, k)
                    lb = self.text[k + 1:e - 1].strip()
                    j = e
                    continue
                name = idm.group(1) if idm else None
                break
            if not name:
                continue
            tm = re.search(r"template\s*<([^<>]*)>\s*$", self.text[max(0, m.start() - 200):m.start()])
            tparams = [p.split()[-1] for p in split_top(tm.group(1))] if tm else []
            line = self.text.count("\n", 0, m.start()) + 1
            out[name] = dict(name=name, launch_bounds=lb, tparams=tparams, line=line)
        return out

    def _launches(self):
        out = {}
        for m in re.finditer(r"\b(\w+)\s*(<[^<>;]*>)?\s*<<<", self.text):
            e = self.text.find(">>>", m.end())
            if e < 0:
                continue
            args = split_args(self.text[m.end():e])
            targs = split_top(m.group(2)[1:-1]) if m.group(2) else []
            line = self.text.count("\n", 0, m.start()) + 1
            out.setdefault(m.group(1), []).append(dict(
                pos=m.start(), line=line, targs=targs, grid=args[0] if args else "",
                block=args[1] if len(args) > 1 else "", smem=args[2] if len(args) > 2 else "0"))
        return out

    # -- constant expressions --
    def evaluate(self, expr, env, pos, notes, depth=0):
        """Evaluate a C integer expression; env binds template parameters and run-time names."""
        if depth > 20:
            raise ValueError("recursion")
        e = expr
        e = re.sub(r"sizeof\s*\(\s*([\w: ]+?)\s*\)",
                   lambda mm: str(self._sizeof(mm.group(1), env)), e)
        e = re.sub(r"\(\s*(?:const\s+)?(?:size_t|int|unsigned(?:\s+int)?|long(?:\s+long)?|uint32_t|int64_t)\s*\)", "", e)
        e = re.sub(r"static_cast<\s*\w+\s*>", "", e)

        def call(mm):
            fname, targ = mm.group(1), mm.group(2)
            if fname not in self.funcs:
                raise ValueError("unknown function " + fname)
            params, body = self.funcs[fname]
            sub = dict(env)
            if params and targ is not None:
                for pname, a in zip(params, split_top(targ)):
                    sub[pname] = self.evaluate(a, env, pos, notes, depth + 1)
            return "(" + str(self.evaluate(body, sub, pos, notes, depth + 1)) + ")"
        # template arguments may hold parentheses: DK, (DK > DV ? DK : DV)
        e = re.sub(r"\b(\w+)\s*(?:<((?:[^<>()]|\([^()]*\))*)>)?\s*\(\s*\)", call, e)
        out = []
        for tok in re.findall(r"[A-Za-z_]\w*(?:(?:\.|->)\w+)*|\d+[uUlL]*|<<|>>|\S", e):
            if re.match(r"\d", tok):
                out.append(tok.rstrip("uUlL"))
            elif re.match(r"[A-Za-z_]", tok):
                if tok in ("min", "max"):
                    out.append(tok)
                else:
                    out.append("(" + str(self._ident(tok, env, pos, notes, depth)) + ")")
            elif tok == "/":
                out.append("//")
            elif tok in "+-*%(),<>?:" or tok in ("<<", ">>"):
                out.append(tok)
            else:
                raise ValueError("token " + tok)
        v = eval(" ".join(c_conditional(out)), {"__builtins__": {}, "min": min, "max": max})
        return int(v)

    def _sizeof(self, t, env):
        t = t.strip()
        if t == "cact_t" or t == "act_t":
            return env.get("__act_bytes__", 2)
        if t in SIZEOF:
            return SIZEOF[t]
        raise ValueError("sizeof " + t)

    def _ident(self, tok, env, pos, notes, depth):
        if tok in env:
            return env[tok]
        if tok in self.macros:
            return self.evaluate(self.macros[tok], env, pos, notes, depth + 1)
        best = None
        for (p, n, ex) in self.consts:
            if n == tok and p < pos and (best is None or p > best[0]):
                best = (p, ex)
        if best is not None:
            return self.evaluate(best[1], env, pos, notes, depth + 1)
        last = re.split(r"\.|->", tok)[-1]
        if last in ("hd", "head_dim", "HD"):   # a run-time head_dim
            v = env.get("__hd__", TYPICAL_HD)
            notes.append("%s is a run-time value: head_dim %d used" % (tok, v))
            return v
        raise ValueError("run-time value " + tok)


# ---- compiled code ----------------------------------------------------------------------------
def parse_mangled(mangled):
    """(display name, base name, [template args]) of an Itanium-mangled kernel name: int template
    arguments are kept (flash_dq_kernel<64>), others shown as <...>; nested names as first::last."""
    m = re.match(r"_Z(N?)L?", mangled)
    if not m or not mangled.startswith("_Z"):
        return mangled, mangled, []
    i = m.end()
    parts = []
    while True:
        nm = re.match(r"L?(\d+)", mangled[i:])
        if not nm:
            break
        n = int(nm.group(1))
        i += nm.end()
        parts.append(mangled[i:i + n])
        i += n
        if not m.group(1) or i >= len(mangled) or mangled[i] in "IE":
            break
    if not parts:
        return mangled, mangled, []
    args = []
    if i < len(mangled) and mangled[i] == "I":
        i += 1
        while i < len(mangled) and mangled[i] != "E":
            am = re.match(r"L[a-z](n?\d+)E", mangled[i:])
            if not am:
                args = ["..."]
                break
            args.append(am.group(1).replace("n", "-"))
            i += am.end()
    base = parts[-1]
    disp = (parts[0] + "::" + base) if len(parts) > 1 else base
    if args:
        disp += "<%s>" % ",".join(args)
    return disp, base, [a for a in args if a != "..."]


def nv_info(cubin):
    """{mangled: {attr id: value}} from a cubin's .nv.info.<function> ELF sections (stdlib only).
    Entries are 4-byte aligned: format 1 (no value), 2 (byte), 3 (half), 4 (u16 size + bytes).
    Attribute 0x05 = EIATTR_MAX_THREADS (the kernel's __launch_bounds__, x y z)."""
    import struct
    b = open(cubin, "rb").read()
    if b[:4] != b"\x7fELF":
        return {}
    shoff, = struct.unpack_from("<Q", b, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3a)
    secs = [struct.unpack_from("<IIQQQQIIQQ", b, shoff + k * shentsize) for k in range(shnum)]
    stroff = secs[shstrndx][4]
    out = {}
    for sec in secs:
        name_off, off, size = sec[0], sec[4], sec[5]
        e = b.index(b"\0", stroff + name_off)
        name = b[stroff + name_off:e].decode("ascii", "replace")
        if not name.startswith(".nv.info."):
            continue
        attrs, i = {}, off
        while i + 2 <= off + size:
            fmt, attr = b[i], b[i + 1]
            i += 2
            if fmt == 1:
                val = None
                i += 2
            elif fmt == 2:
                val = b[i]
                i += 2
            elif fmt == 3:
                val = struct.unpack_from("<H", b, i)[0]
                i += 2
            elif fmt == 4:
                sz = struct.unpack_from("<H", b, i)[0]
                val = b[i + 2:i + 2 + sz]
                i += 2 + sz
            else:
                break
            if attr == 0x05 and isinstance(val, bytes) and len(val) == 12:
                val = struct.unpack("<3I", val)
            attrs[attr] = val
        out[name[len(".nv.info."):]] = attrs
    return out


def parse_ptxas(logtext):
    """{mangled: {regs, smem, stack, spill_st, spill_ld, barriers, cmem}} of entry functions."""
    res, cur, entries = {}, None, set()
    for line in logtext.splitlines():
        m = re.search(r"Compiling entry function '(\S+)' for '(\w+)'", line)
        if m:
            cur = m.group(1)
            entries.add(cur)
            res.setdefault(cur, dict(regs=0, smem=0, stack=0, spill_st=0, spill_ld=0, barriers=0))
            continue
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            cur = m.group(1)
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and cur in res:
            res[cur].update(stack=int(m.group(1)), spill_st=int(m.group(2)), spill_ld=int(m.group(3)))
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and cur in res:
            res[cur]["regs"] = int(m.group(1))
            b = re.search(r"used (\d+) barriers", line)
            s = re.search(r"(\d+) bytes smem", line)
            res[cur]["barriers"] = int(b.group(1)) if b else 0
            res[cur]["smem"] = int(s.group(1)) if s else 0
    return {k: v for k, v in res.items() if k in entries}


def parse_sass(text):
    """{mangled: stats} from nvdisasm -c (labels) or cuobjdump -sass (hex targets) output."""
    funcs, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"\s*\.text\.(\S+):\s*$", line) or re.match(r"\s*Function : (\S+)\s*$", line)
        if m:
            cur = m.group(1)
            funcs[cur] = dict(ins=[], labels={})
            continue
        if cur is None:
            continue
        m = re.match(r"\s*(\.L\w+):", line)
        if m:
            funcs[cur]["pending"] = funcs[cur].get("pending", []) + [m.group(1)]
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m:
            addr = int(m.group(1), 16)
            for lab in funcs[cur].pop("pending", []):
                funcs[cur]["labels"][lab] = addr
            funcs[cur]["ins"].append((addr, m.group(2)))
    out = {}
    for name, f in funcs.items():
        ins = f["ins"]
        loops = []
        ops = []
        for addr, t in ins:
            t2 = re.sub(r"^@!?\w+\s+", "", t)
            op = t2.split()[0] if t2.split() else ""
            ops.append((addr, op, t2))
            base = op.split(".")[0]
            if base in ("BRA", "JMP"):
                tm = re.search(r"`\((\.L\w+)\)", t2)
                target = f["labels"].get(tm.group(1)) if tm else None
                if target is None:
                    hm = re.search(r"\b0x([0-9a-f]+)\b", t2)
                    target = int(hm.group(1), 16) if hm else None
                if target is not None and target <= addr:
                    loops.append((target, addr))
        st = dict(n_ins=len(ins), loops=len(loops), ldl=0, stl=0, lmem_in_loop=0, hmma=0, hmma_bf16=0,
                  hmma_in_loop=0, hgmma=0, hmma_kinds=[])
        kinds = set()
        for addr, op, t2 in ops:
            base = op.split(".")[0]
            if base in ("LDL", "STL"):
                st["ldl" if base == "LDL" else "stl"] += 1
                if any(a <= addr <= b for a, b in loops):
                    st["lmem_in_loop"] += 1
            elif base == "HMMA":
                st["hmma"] += 1
                kinds.add(op)
                if "BF16" in op:
                    st["hmma_bf16"] += 1
                if any(a <= addr <= b for a, b in loops):
                    st["hmma_in_loop"] += 1
            elif base in ("HGMMA", "WGMMA"):
                st["hgmma"] += 1
                kinds.add(op)
        st["hmma_kinds"] = sorted(kinds)
        out[name] = st
    return out


def occupancy(arch, threads, regs, static_smem, dyn_smem, barriers):
    a = ARCHS[arch]
    warps = (threads + 31) // 32
    lim = {}
    lim["warps"] = (a["threads_sm"] // 32) // warps if threads <= a["threads_block"] else 0
    lim["blocks"] = a["blocks_sm"]
    regs_alloc = max(regs, 1)
    per_warp = -(-regs_alloc * 32 // a["reg_gran"]) * a["reg_gran"]
    assumed = per_warp * (-(-warps // a["subpartitions"]) * a["subpartitions"])
    if assumed > a["regs_block"] or per_warp * warps > a["regs_block"] or regs > a["max_regs_thread"]:
        lim["regs"] = 0
    else:
        lim["regs"] = ((a["regs_sm"] // a["subpartitions"]) // per_warp) * a["subpartitions"] // warps
    total = static_smem + dyn_smem + a["smem_reserved"]
    alloc = -(-total // a["smem_gran"]) * a["smem_gran"]
    if static_smem + dyn_smem > a["smem_block_optin"]:
        lim["smem"] = 0
    else:
        lim["smem"] = a["smem_sm"] // alloc
    if barriers:
        lim["barriers"] = (a["blocks_sm"] * a["barriers_per_block_slot"]) // barriers
    blocks = min(lim.values())
    limiter = min(lim, key=lambda k: (lim[k], k != "regs"))
    occ = blocks * warps / (a["threads_sm"] // 32)
    return dict(blocks_per_sm=blocks, warps_per_sm=blocks * warps, occupancy=occ, limiter=limiter,
                limits=lim, optin_needed=dyn_smem + static_smem > a["smem_block_default"])


# ---- compiling --------------------------------------------------------------------------------
def compile_flags(arch, variant, maxrreg):
    num = arch.split("_")[1]
    f = ["-cubin", "-gencode", "arch=compute_%s,code=%s" % (num, arch), "-O3", "-lineinfo",
         "-std=c++17", "-I", ROOT, "-Xptxas", "-v"]
    if variant == "bf16":
        f.append("-DGATEDGPT_ACT_BF16=1")
    if maxrreg:
        f.append("-maxrregcount=%d" % maxrreg)
    return f


def content_hash(src, nvcc_ver, flags):
    h = hashlib.sha256()
    h.update(nvcc_ver.encode())
    h.update(" ".join(flags).encode())
    for p in include_closure(src):
        h.update(p.encode())
        h.update(open(p, "rb").read())
    return h.hexdigest()[:16]


def compile_one(nvcc, src, arch, variant, maxrreg, cache_dir, nvcc_ver, use_cache):
    flags = compile_flags(arch, variant, maxrreg)
    key = content_hash(src, nvcc_ver, flags)
    stem = os.path.basename(src)[:-3] + (".r%d" % maxrreg if maxrreg else "")   # a mutant keeps its own entry
    d = os.path.join(cache_dir, variant, arch)
    os.makedirs(d, exist_ok=True)
    cubin = os.path.join(d, "%s-%s.cubin" % (stem, key))
    logf = os.path.join(d, "%s-%s.ptxas.txt" % (stem, key))
    if use_cache and os.path.exists(cubin) and os.path.exists(logf):
        return dict(src=src, arch=arch, cubin=cubin, log=open(logf).read(), cached=True, ok=True, secs=0.0)
    t0 = time.time()
    tmp = cubin + ".tmp%d" % os.getpid()
    r = subprocess.run([nvcc] + flags + ["-o", tmp, src], capture_output=True, text=True, cwd=ROOT)
    text = r.stdout + r.stderr
    if r.returncode != 0 or not os.path.exists(tmp):
        return dict(src=src, arch=arch, cubin=None, log=text, cached=False, ok=False, secs=time.time() - t0)
    with open(logf, "w") as f:
        f.write(text)
    os.replace(tmp, cubin)
    for old in glob.glob(os.path.join(d, "%s-*.cubin" % stem)) + glob.glob(os.path.join(d, "%s-*.ptxas.txt" % stem)):
        if key not in old:   # keep the cache small: the last version of each file only
            try:
                os.remove(old)
            except OSError:
                pass
    return dict(src=src, arch=arch, cubin=cubin, log=text, cached=False, ok=True, secs=time.time() - t0)


def sass_stats(cubin, nvdisasm, cuobjdump, cache_dir):
    """Parsed SASS statistics of a cubin (nvdisasm -c, else cuobjdump -sass), cached by content."""
    h = hashlib.sha256(open(cubin, "rb").read()).hexdigest()[:20]
    cpath = os.path.join(cache_dir, "sass", "v2-" + h + ".json")
    if os.path.exists(cpath):
        try:
            st = json.load(open(cpath))
            st["__cached__"] = True
            return st
        except ValueError:
            pass
    if nvdisasm:
        r = subprocess.run([nvdisasm, "-c", cubin], capture_output=True, text=True)
    elif cuobjdump:
        r = subprocess.run([cuobjdump, "-sass", cubin], capture_output=True, text=True)
    else:
        return None
    if r.returncode != 0:
        raise RuntimeError("disassembling %s: %s" % (os.path.basename(cubin), r.stderr.strip()[:200]))
    st = parse_sass(r.stdout)
    os.makedirs(os.path.dirname(cpath), exist_ok=True)
    with open(cpath + ".tmp", "w") as f:
        json.dump(st, f)
    os.replace(cpath + ".tmp", cpath)
    return st


def resource_usage(cuobjdump, cubin):
    """{mangled: resources} from cuobjdump --dump-resource-usage (no spill counts there)."""
    out = subprocess.run([cuobjdump, "--dump-resource-usage", cubin], capture_output=True, text=True).stdout
    d = {}
    for fm in re.finditer(r"Function (\S+):\s*\n\s*REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", out):
        d[fm.group(1)] = dict(regs=int(fm.group(2)), stack=int(fm.group(3)), smem=int(fm.group(4)),
                              spill_st=None, spill_ld=None, barriers=None)
    return d


def from_build(build, variant, cuobjdump, work):
    """The cubins inside a CMake build's objects (cuobjdump -xelf): [(src, arch, cubin, res)]."""
    target = "gatedgpt_cuda_bf16" if variant == "bf16" else "gatedgpt_cuda"
    objs = sorted(glob.glob(os.path.join(build, "CMakeFiles", target + ".dir", "kernels", "cuda", "*.cu.o")))
    out = []
    for obj in objs:
        stem = os.path.basename(obj)[:-len(".cu.o")]
        d = os.path.join(work, variant, stem)
        os.makedirs(d, exist_ok=True)
        r = subprocess.run([cuobjdump, "-xelf", "all", os.path.abspath(obj)], capture_output=True, text=True, cwd=d)
        if r.returncode != 0:
            raise RuntimeError("cuobjdump -xelf %s: %s" % (obj, r.stderr.strip()[:200]))
        for cubin in sorted(glob.glob(os.path.join(d, "*.cubin"))):
            am = re.search(r"\.(sm_\d+a?)\.cubin$", cubin)
            if am:
                out.append((os.path.join(ROOT, "kernels", "cuda", stem + ".cu"), am.group(1), cubin,
                            resource_usage(cuobjdump, cubin)))
    return out


# ---- report -----------------------------------------------------------------------------------
def categories_of(name):
    return [c for c, rx in CATEGORIES if re.search(rx, name)]


def fmt_bytes(n):
    if n is None:
        return "?"
    return "%d" % n if n < 10240 else "%.1fK" % (n / 1024)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", help="read the objects of this CMake build dir (cuobjdump) instead of compiling")
    ap.add_argument("--arch", default="90,80", help="architectures, e.g. 90,80 (default); the first is the table's")
    ap.add_argument("--variant", default="bf16", choices=["bf16", "fp32", "both"],
                    help="activation storage build: bf16 (GATEDGPT_ACT_BF16=1, default), fp32, both")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "build-gpurep"), help="cache and output dir (default build-gpurep/)")
    ap.add_argument("--json", help="JSON output path (default OUT_DIR/gpu_report.json)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="parallel nvcc processes")
    ap.add_argument("--files", default="*.cu", help="glob of kernels/cuda files to report (default *.cu)")
    ap.add_argument("--maxrregcount", action="append", default=[], metavar="FILE=N",
                    help="compile FILE (a kernels/cuda file name) with -maxrregcount=N: the deliberate-bug demo")
    ap.add_argument("--no-cache", action="store_true", help="recompile even when the cache has the objects")
    ap.add_argument("--fetch-tools", action="store_true",
                    help="when nvdisasm/cuobjdump are missing, fetch NVIDIA's pip wheels into third_party/cuda_tools")
    ap.add_argument("--require-sass", action="store_true", help="fail when no disassembler is available")
    ap.add_argument("--quiet", action="store_true", help="print only the checks and the result")
    ap.add_argument("--markdown", action="store_true", help="print the table as markdown (docs/gpu.md)")
    args = ap.parse_args()
    t_start = time.time()
    archs = ["sm_" + a.strip().replace("sm_", "") for a in args.arch.split(",") if a.strip()]
    for a in archs:
        if a not in ARCHS:
            print("gpu_report: FAIL: unknown arch %s (known: %s)" % (a, ", ".join(ARCHS)))
            return 2
    variants = ["bf16", "fp32"] if args.variant == "both" else [args.variant]
    maxrreg = {}
    for s in args.maxrregcount:
        f, _, n = s.partition("=")
        if not n.isdigit():
            print("gpu_report: FAIL: --maxrregcount wants FILE=N, got %r" % s)
            return 2
        maxrreg[os.path.basename(f)] = int(n)
    os.makedirs(args.out_dir, exist_ok=True)
    json_path = args.json or os.path.join(args.out_dir, "gpu_report.json")

    nvcc = find_tool("nvcc")
    nvdisasm = find_tool("nvdisasm")
    cuobjdump = find_tool("cuobjdump")
    fetch_note = None
    if args.fetch_tools and (not nvdisasm or (args.build and not cuobjdump)):
        log("gpu_report: fetching nvdisasm/cuobjdump (%s) into %s" % (", ".join(TOOL_WHEELS), os.path.relpath(TOOLS_DIR, ROOT)))
        fetch_note = fetch_tools()
        nvdisasm = find_tool("nvdisasm")
        cuobjdump = find_tool("cuobjdump")
        if fetch_note:
            log("gpu_report: warning: " + fetch_note)
    if not args.build and not nvcc:
        print("gpu_report: FAIL: nvcc not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")
        return 2
    if args.build and not cuobjdump:
        print("gpu_report: FAIL: --build needs cuobjdump (try --fetch-tools)")
        return 2

    srcs = sorted(glob.glob(os.path.join(ROOT, "kernels", "cuda", args.files)))
    srcs = [s for s in srcs if s.endswith(".cu")]
    sources = {}
    for s in srcs:
        try:
            sources[os.path.basename(s)] = SourceFile(s)
        except OSError as e:
            print("gpu_report: FAIL: cannot read %s: %s" % (s, e))
            return 2

    # -- compile (or read a build) --
    units = []   # dict(src, arch, variant, cubin, res={mangled: ...}, sass=None or {mangled: ...}, info)
    compile_secs, cached = 0.0, 0
    nvcc_ver = tool_version(nvcc) if nvcc else "?"
    cache_dir = os.path.join(args.out_dir, "cache")
    work = tempfile.mkdtemp(prefix="gpurep-")
    try:
        if args.build:
            for v in variants:
                for src, arch, cubin, res in from_build(args.build, v, cuobjdump, work):
                    if arch in archs and os.path.basename(src) in sources:
                        units.append(dict(src=src, arch=arch, variant=v, cubin=cubin, res=res))
            if not units:
                print("gpu_report: FAIL: no CUDA objects for %s under %s (build the CUDA backend first)" % (
                    ",".join(archs), args.build))
                return 2
            missing = sorted(set(sources) - {os.path.basename(u["src"]) for u in units})
            if missing:
                log("gpu_report: warning: not in the build (reconfigure it?): " + ", ".join(missing))
        else:
            jobs = []
            order = sorted(srcs, key=lambda s: -os.path.getsize(s))   # largest first: they take longest
            with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
                for v in variants:
                    for a in archs:
                        for s in order:
                            jobs.append((v, ex.submit(compile_one, nvcc, s, a, v, maxrreg.get(os.path.basename(s)),
                                                      cache_dir, nvcc_ver, not args.no_cache)))
                results = [(v, j.result()) for v, j in jobs]
            failed = [r for v, r in results if not r["ok"]]
            for v, r in results:
                compile_secs = max(compile_secs, r["secs"])
                cached += r["cached"]
            if failed:
                for r in failed:
                    log("---- nvcc failed: %s (%s)\n%s" % (os.path.relpath(r["src"], ROOT), r["arch"], r["log"][-3000:]))
                r = failed[0]
                print("gpu_report: FAIL: %s does not compile for %s (nvcc output above)" % (
                    os.path.relpath(r["src"], ROOT), r["arch"]))
                return 1
            for v, r in results:
                units.append(dict(src=r["src"], arch=r["arch"], variant=v, cubin=r["cubin"], res=parse_ptxas(r["log"])))
        # SASS (parallel, cached by content) and the ELF attributes
        sass_err, sass_cached = None, 0
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
            futs = [(u, ex.submit(sass_stats, u["cubin"], nvdisasm, cuobjdump, cache_dir)) for u in units]
            for u, f in futs:
                try:
                    u["sass"] = f.result()
                    if u["sass"] is not None and u["sass"].pop("__cached__", False):
                        sass_cached += 1
                except RuntimeError as e:
                    u["sass"] = None
                    sass_err = str(e)
                u["info"] = nv_info(u["cubin"])
        if sass_err:
            log("gpu_report: warning: " + sass_err)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    have_sass = all(u["sass"] is not None for u in units)
    sass_reason = None
    if not have_sass:
        sass_reason = "no disassembler (nvdisasm or cuobjdump): SASS checks skipped; --fetch-tools fetches NVIDIA's wheels"

    # -- rows: one per (variant, kernel instantiation), with each arch's numbers --
    rows = {}
    for u in units:
        sf = sources[os.path.basename(u["src"])]
        for mangled, res in u["res"].items():
            disp, base, targs = parse_mangled(mangled)
            key = (u["variant"], sf.name, disp)
            row = rows.get(key)
            maxt = (u["info"].get(mangled) or {}).get(0x05)
            maxt = maxt[0] * maxt[1] * maxt[2] if isinstance(maxt, tuple) else None
            L = launch_config(sf, base, targs, u["variant"], maxt)
            if row is None:
                row = dict(variant=u["variant"], file=sf.name, kernel=disp, base=base, mangled={},
                           template_args=targs, categories=categories_of(base), launch=L, arch={})
                rows[key] = row
            row["mangled"][u["arch"]] = mangled
            s = (u["sass"] or {}).get(mangled) if u["sass"] is not None else None
            bars = res.get("barriers")
            occ = occupancy(u["arch"], L["block"], res["regs"], res["smem"], L["dyn_smem"], 1 if bars is None else bars)
            row["arch"][u["arch"]] = dict(block=L["block"], dyn_smem=L["dyn_smem"], max_threads=maxt,
                                          regs=res["regs"], static_smem=res["smem"], stack=res["stack"],
                                          spill_st=res["spill_st"], spill_ld=res["spill_ld"],
                                          barriers=bars, sass=s, **occ)
    rows = [rows[k] for k in sorted(rows, key=lambda k: (k[0], k[1], k[2]))]

    # -- checks --
    failures, checks = [], []

    def check(name, status, detail):
        checks.append(dict(check=name, status=status, detail=detail))
        if status == "FAIL":
            failures.append("%s: %s" % (name, detail))

    # found
    if not rows:
        check("found", "FAIL", "no kernels found in kernels/cuda/%s" % args.files)
    else:
        check("found", "PASS", "%d kernel instantiations in %d files, %s, %s" % (
            len({(r["file"], r["kernel"]) for r in rows}), len(sources), "/".join(archs), "+".join(variants)))
    # spills
    n_checked, bad = 0, []
    for r in rows:
        if not r["categories"]:
            continue
        for a, x in r["arch"].items():
            n_checked += 1
            if x["spill_st"] is None:   # --build: no ptxas log; the STL count stands in
                sp = (x["sass"] or {}).get("stl", 0) if x["sass"] else x["stack"]
                if sp and not allowed_local(r["kernel"], a, x["stack"]):
                    bad.append("%s kernel %s on %s: %s STL in SASS (stack %d bytes)" % (
                        r["categories"][0], r["kernel"], a, sp, x["stack"]))
            elif (x["spill_st"] or x["spill_ld"]) and not allowed_local(r["kernel"], a, x["stack"]):
                bad.append("%s kernel %s on %s: %d bytes spill stores, %d bytes spill loads" % (
                    r["categories"][0], r["kernel"], a, x["spill_st"], x["spill_ld"]))
    check("spills", "FAIL" if bad else "PASS",
          "; ".join(bad) if bad else "no spills in %d checked (kernel, arch) pairs of the attention, GEMM-epilogue, "
          "norm, MoE-dispatch, optimizer and Gated DeltaNet kernels%s" % (n_checked, allowed_note(rows)))
    # local memory
    users, bad = [], []
    for r in rows:
        for a, x in r["arch"].items():
            s = x["sass"]
            n = (s["ldl"] + s["stl"]) if s else (1 if x["stack"] else 0)
            if not n:
                continue
            if x["spill_st"] is None:
                why = "spill or local array (%d-byte stack frame; --build has no ptxas log to tell)" % x["stack"]
            elif x["spill_st"] or x["spill_ld"]:
                why = "spill (%d/%d bytes st/ld)" % (x["spill_st"], x["spill_ld"])
            else:
                why = "local array (%d-byte stack frame, no spill)" % x["stack"]
            allow = allowed_local(r["kernel"], a, x["stack"])
            users.append(dict(kernel=r["kernel"], file=r["file"], arch=a, variant=r["variant"],
                              ldl=s["ldl"] if s else None, stl=s["stl"] if s else None,
                              in_loop=s["lmem_in_loop"] if s else None, stack=x["stack"], why=why, allowed=allow))
            if not allow:
                bad.append("%s on %s (%s): %s" % (r["kernel"], a, r["variant"], why))
    detail = "; ".join(bad) if bad else (
        "no LDL/STL except: " + "; ".join("%s %s (%s): %s" % (u["kernel"], u["arch"], u["variant"], u["allowed"])
                                          for u in users) if users else "no kernel uses local memory")
    if not have_sass and not bad:
        detail += " (ptxas stack frames: %s)" % sass_reason
    check("local-mem", "FAIL" if bad else "PASS", detail)
    # hmma
    hm_rows = [r for r in rows if any(re.search(fr, r["file"]) and re.search(kr, r["base"]) and r["variant"] in vs
                                      for fr, kr, vs in HMMA_KERNELS)]
    if not hm_rows:
        check("hmma", "FAIL", "no bf16 tensor-core kernels found (patterns %s)" % HMMA_KERNELS)
    elif not have_sass:
        check("hmma", "FAIL" if args.require_sass else "SKIP", sass_reason)
    else:
        bad, ok = [], []
        for r in hm_rows:
            for a, x in r["arch"].items():
                s = x["sass"]
                if not s or s["hmma_bf16"] == 0:
                    bad.append("%s on %s: no HMMA.*.BF16" % (r["kernel"], a))
                elif s["hmma_in_loop"] == 0:
                    bad.append("%s on %s: %d HMMA, none inside a loop" % (r["kernel"], a, s["hmma"]))
                else:
                    ok.append("%s/%s %d/%d" % (r["kernel"], a, s["hmma_in_loop"], s["hmma"]))
        kinds = sorted({k for r in hm_rows for x in r["arch"].values() for k in (x["sass"] or {}).get("hmma_kinds", [])})
        check("hmma", "FAIL" if bad else "PASS", "; ".join(bad) if bad else
              "all %d (kernel, arch) pairs of the flash and chunked delta-rule kernels issue %s inside loops (%d of %d HMMA in loops; "
              "no HGMMA: mma.sync/WMMA, not wgmma)" % (
                  len(ok), "/".join(kinds), sum(x["sass"]["hmma_in_loop"] for r in hm_rows for x in r["arch"].values()),
                  sum(x["sass"]["hmma"] for r in hm_rows for x in r["arch"].values())))
    # fits
    bad = ["%s on %s: 0 blocks per SM (limited by %s)" % (r["kernel"], a, x["limiter"])
           for r in rows for a, x in r["arch"].items() if x["blocks_per_sm"] == 0]
    bad += ["%s on %s: launched with %d threads, __launch_bounds__ %d" % (r["kernel"], a, x["block"], x["max_threads"])
            for r in rows for a, x in r["arch"].items() if x["max_threads"] and x["block"] > x["max_threads"]]
    check("fits", "FAIL" if bad else "PASS", "; ".join(bad) if bad else
          "every launch configuration fits an SM on %s" % "/".join(archs))

    # -- print --
    main_arch = archs[0]
    other = archs[1] if len(archs) > 1 else None
    if args.markdown:
        print_markdown(rows, main_arch, other)
    elif not args.quiet:
        print_table(rows, main_arch, other)
        if users:
            log("\nkernels with local memory (LDL/STL in SASS, or a ptxas stack frame):")
            for u in users:
                log("  %-36s %-6s %-5s LDL %s STL %s (in loops %s) stack %dB: %s%s" % (
                    u["kernel"], u["arch"], u["variant"], u["ldl"], u["stl"], u["in_loop"], u["stack"], u["why"],
                    "; allowed: " + u["allowed"] if u["allowed"] else "  <-- not allowed"))
    log("\nchecks:")
    for c in checks:
        log("  %-9s %-4s %s" % (c["check"], c["status"], c["detail"]))
    elapsed = time.time() - t_start
    report = dict(
        tool="scripts/gpu_report.py", status="builds, not yet run on a GPU (compiler output, not measurements)",
        nvcc=nvcc_ver, nvcc_path=nvcc, nvdisasm=nvdisasm, cuobjdump=cuobjdump,
        source=("build " + args.build) if args.build else "compiled: nvcc " + " ".join(compile_flags("sm_XX", "bf16", None)),
        maxrregcount=maxrreg, archs={a: ARCHS[a] for a in archs}, typical_head_dim=TYPICAL_HD,
        categories=CATEGORIES, allowed_local=[dict(kernel=k, arch=a, max_stack=b, reason=w) for k, a, b, w in ALLOWED_LOCAL],
        kernels=rows, local_memory=users, checks=checks, elapsed_s=round(elapsed, 1), cached_objects=cached,
        result="FAIL" if failures else "PASS", reason=failures[0] if failures else None)
    with open(json_path, "w") as f:
        json.dump(report, f, indent=1)
    n_k = len({(r["file"], r["kernel"]) for r in rows})
    log("\ngpu_report: %d kernels x %s x %s; %s; JSON %s; %.1f s (cache: %s%d of %d disassemblies)" % (
        n_k, "/".join(archs), "+".join(variants), ", ".join("%s %s" % (c["check"], c["status"]) for c in checks),
        os.path.relpath(json_path, os.getcwd()), elapsed,
        "" if args.build else "%d of %d compiles, " % (cached, len(units)), sass_cached, len(units)))
    if failures:
        more = " (+%d more; see the checks above)" % (len(failures) - 1) if len(failures) > 1 else ""
        print("gpu_report: FAIL: " + failures[0][:400] + more)
        return 1
    print("gpu_report: PASS")
    return 0


def allowed_local(kernel, arch, stack):
    for rx, a, maxb, why in ALLOWED_LOCAL:
        if re.search(rx, kernel) and (a is None or a == arch) and stack <= maxb:
            return why
    return None


def allowed_note(rows):
    n = sum(1 for r in rows for a, x in r["arch"].items()
            if r["categories"] and (x["spill_st"] or x["spill_ld"]) and allowed_local(r["kernel"], a, x["stack"]))
    return "" if not n else " (%d allowed, listed under local-mem)" % n


def launch_config(sf, base, targs, variant, elf_max_threads=None):
    """Block size and dynamic shared memory of a kernel instantiation, from its launch site."""
    notes = []
    env = {"__act_bytes__": 2 if variant == "bf16" else 4}
    k = sf.kernels.get(base, dict(tparams=[], launch_bounds=None, line=0))
    for p, v in zip(k["tparams"], targs):
        try:
            env[p] = int(v)
        except ValueError:
            pass
    if "HD" in env:
        env["__hd__"] = env["HD"]
    elif "NC" in env:
        env["__hd__"] = 32 * env["NC"]
    sites = sf.launches.get(base, [])
    site = None
    for s in sites:   # the site whose literal template arguments match, else the first
        if all(not re.fullmatch(r"\d+", t) or t == v for t, v in zip(s["targs"], targs)):
            site = s
            break
    block, block_src, dyn, dyn_src = None, None, 0, "0"
    if site:
        senv = dict(env)
        for t, v in zip(site["targs"], targs):   # names used at the launch (the caller's template params)
            if re.fullmatch(r"[A-Za-z_]\w*", t):
                try:
                    senv[t] = int(v)
                except ValueError:
                    pass
        if "HD" in senv:
            senv["__hd__"] = senv["HD"]
        elif "NC" in senv:
            senv["__hd__"] = 32 * senv["NC"]
        block_src = site["block"]
        try:
            block = sf.evaluate(site["block"], senv, site["pos"], notes)
        except (ValueError, SyntaxError, TypeError, ZeroDivisionError) as e:
            notes.append("block '%s' is a run-time value (%s)" % (site["block"], e))
        dyn_src = site["smem"]
        try:
            dyn = sf.evaluate(site["smem"], senv, site["pos"], notes)
        except (ValueError, SyntaxError, TypeError, ZeroDivisionError) as e:
            notes.append("dynamic smem '%s' not evaluated (%s): 0 used" % (site["smem"], e))
            dyn = 0
        if len(sites) > 1:
            notes.append("%d launch sites; line %d used" % (len(sites), site["line"]))
    else:
        notes.append("no launch site in %s%s" % (sf.name, "" if base in sf.kernels else
                                                 " (a library kernel, launched inside the library: CUB)"))
    if block is None and elf_max_threads:
        block = elf_max_threads
        notes.append("block = its __launch_bounds__ (ELF EIATTR_MAX_THREADS %d)" % block)
    if block is None and k.get("launch_bounds"):
        try:
            block = sf.evaluate(split_top(k["launch_bounds"])[0], env, 1 << 60, notes)
            notes.append("block from __launch_bounds__")
        except (ValueError, SyntaxError, TypeError):
            pass
    if block is None:
        block = 256
        notes.append("block size unknown: 256 assumed")
    return dict(block=block, block_src=block_src, dyn_smem=dyn, dyn_smem_src=dyn_src,
                line=site["line"] if site else None, notes=notes)


def print_markdown(rows, a1, a2):
    log("| file | kernel | category | block | dyn. smem | %s regs | static smem | stack | spill st/ld | LDL/STL | "
        "HMMA (in loops) | blocks/SM | occupancy (limit) | %s regs | spill | occupancy |" % (a1, a2 or "-"))
    log("|---|---|---|---:|---:|---:|---:|---:|---|---|---|---:|---|---:|---|---|")
    for r in rows:
        x = r["arch"].get(a1)
        if not x:
            continue
        s = x["sass"]
        y = r["arch"].get(a2) if a2 else None
        sp = lambda z: "%d/%d" % (z["spill_st"], z["spill_ld"]) if z["spill_st"] is not None else "n/a"
        log("| %s | `%s` | %s | %d | %s | %d | %s | %d | %s | %s | %s | %d | %.0f%% (%s) | %s | %s | %s |" % (
            r["file"], r["kernel"], ", ".join(r["categories"]) or "-", x["block"], fmt_bytes(x["dyn_smem"]), x["regs"],
            fmt_bytes(x["static_smem"]), x["stack"], sp(x), "%d/%d" % (s["ldl"], s["stl"]) if s else "?",
            ("%d (%d)" % (s["hmma"], s["hmma_in_loop"]) if s["hmma"] else "-") if s else "?", x["blocks_per_sm"],
            100 * x["occupancy"], x["limiter"], y["regs"] if y else "-", sp(y) if y else "-",
            "%.0f%%" % (100 * y["occupancy"]) if y else "-"))


def print_table(rows, a1, a2):
    cols = "%-5s %-16s %-34s %-9s %5s %7s |%5s %6s %5s %7s %7s %9s %3s %5s %-9s"
    hdr = cols % ("build", "file", "kernel", "category", "block", "dynsmem", "regs", "smem", "stack",
                  "spill", "LDL/STL", "HMMA(lp)", "B/S", "occ", "limit")
    top = " " * 82 + "| " + ("%s (%s): registers, static smem, stack, spill bytes st/ld, SASS, blocks/SM, occupancy" % (
        a1, ARCHS[a1]["chip"]))
    if a2:
        hdr += " |%5s %7s %5s" % ("regs", "spill", "occ")
        top += " | %s (%s)" % (a2, ARCHS[a2]["chip"])
    log(top)
    log(hdr)
    log("-" * len(hdr))
    for r in rows:
        x = r["arch"].get(a1)
        if not x:
            continue
        s = x["sass"]
        sp = "%d/%d" % (x["spill_st"], x["spill_ld"]) if x["spill_st"] is not None else "n/a"
        ls = "%d/%d" % (s["ldl"], s["stl"]) if s else "?"
        hm = ("%d(%d)" % (s["hmma"] + s["hgmma"], s["hmma_in_loop"]) if s["hmma"] + s["hgmma"] else "-") if s else "?"
        line = cols % (r["variant"], r["file"][:16], r["kernel"][:34], (r["categories"] or ["-"])[0][:9], x["block"],
                       fmt_bytes(x["dyn_smem"]), x["regs"], fmt_bytes(x["static_smem"]), x["stack"], sp, ls, hm,
                       x["blocks_per_sm"], "%.0f%%" % (100 * x["occupancy"]), x["limiter"][:9])
        y = r["arch"].get(a2) if a2 else None
        if y:
            sp2 = "%d/%d" % (y["spill_st"], y["spill_ld"]) if y["spill_st"] is not None else "n/a"
            line += " |%5d %7s %5s" % (y["regs"], sp2, "%.0f%%" % (100 * y["occupancy"]))
        log(line)
    notes = [(r["kernel"], n) for r in rows for n in r["launch"]["notes"]]
    if notes:
        log("\nlaunch notes (block / dynamic shared memory read off the launch sites):")
        seen = set()
        for k, n in notes:
            if (k, n) not in seen:
                seen.add((k, n))
                log("  %-36s %s" % (k, n))


if __name__ == "__main__":
    sys.exit(main())
