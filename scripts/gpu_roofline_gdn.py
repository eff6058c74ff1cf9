#!/usr/bin/python3
"""gpu_roofline_gdn.py: the H200 roofline of the chunked gated delta rule (kernels/cuda/
deltanet_chunk.cu, bf16 build), kernel by kernel, for one Gated DeltaNet layer's ops_gdn_forward
and ops_gdn_backward, next to published H200 timings.

For each kernel launch it counts, from the kernels' code (docs/gpu.md "The chunked delta rule"):
  FLOPs   the GEMMs as executed (2 M N K; K K^T and Q K^T once per key head where the kernel
          shares them, else per value head) on bf16 tensor cores, and the triangular solve
          (C^3 / 3 per chunk and value head) on fp32 CUDA cores
  bytes   what its blocks read and write in global memory, each block's own loads counted (a
          tensor read by several blocks or twice by one counts each time: no L2 reuse assumed)
  time    max(tensor FLOPs / tensor peak + solve FLOPs / fp32 peak, bytes / bandwidth), the
          peaks scaled by the share of the 132 SMs the launch can fill (a launch of fewer
          blocks than SMs leaves the others idle)
and for the two sequential passes (the state pass, the reverse state pass) a latency floor:
chunks x (2 dependent global-memory round trips + the chunk's FLOPs at one SM's share of the
peak), since each block walks its chunks one after another with the loads not overlapped.
Peaks as scripts/gpu_roofline.py (NVIDIA's H200 SXM figures; the attainable column at the
mma.sync efficiency class 0.35 and the measured 4.3 TB/s copy rate).

Everything is a prediction from counts and datasheet rates: nothing has run on a GPU.
Usage: scripts/gpu_roofline_gdn.py [--markdown] [B,T,Hk,Hv,dk,dv ...]
       (default: Qwen3-Next's linear-attention layer, 16 key / 32 value heads, dk = dv = 128,
        at T = 4096 and 32768, B = 1)
Python 3 standard library only.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_roofline import PEAK_BF16, PEAK_FP32, HBM_BW, MEAS_BW, EFF_MMA_SYNC  # noqa: E402

SMS = 132
C = 64            # tokens per chunk
A = 2             # a bf16 operand (the scratch and the staged tiles of the bf16 build)
F = 4             # fp32 (the op's inputs and outputs)
LAT = 1.0e-6      # one dependent global-memory round trip with its barrier, seconds (H100/H200 ~0.6-1 us)
# published H200 times for T = 32768, 32 value heads, d = 128 (FlashQLA's benchmark table)
PUBLISHED = {"FlashQLA": (0.885e-3, 2.515e-3), "flash-linear-attention": (1.885e-3, 5.697e-3)}


def kernels(B, T, Hk, Hv, dk, dv):
    """[(name, pass, blocks, tensor FLOPs, solve FLOPs, bytes, sequential chunks)] of one forward
    and one backward, bf16 build."""
    rep = Hv // Hk
    nc = (T + C - 1) // C
    ch = B * Hv * nc                 # (chunk, value head) pairs
    sl = dv // 64                    # 64-column slices of the state passes
    gemm = lambda m, n, k: 2.0 * m * n * k
    out = []

    def wy(phase, tinv):
        fl = ch * (gemm(C, C, dk) / rep + gemm(C, dv, C) + gemm(C, dk, C))
        solve = ch * C ** 3 / 3.0
        by = ch * (C * dk * F * (1.0 / rep + 1) + C * dv * F + 2 * C * F + C * (dv + dk) * A + (C * C * A if tinv else 0))
        out.append(("gdn_chunk_wy_kernel", phase, B * Hk * nc, fl, solve, by, 0))

    def state(phase):
        fl = ch * (gemm(C, dv, dk) + gemm(dk, dv, C))
        by = ch * (dk * dv * A + sl * C * dk * A + sl * C * dk * F + sl * C * F + 2 * C * dv * A)
        out.append(("gdn_chunk_state_kernel", phase, B * Hv * sl, fl, 0.0, by, nc))

    wy("forward", False)
    state("forward")
    out.append(("gdn_chunk_out_kernel", "forward", B * Hk * nc,
                ch * (gemm(C, C, dk) / rep + gemm(C, dv, dk) + gemm(C, dv, C)), 0.0,
                ch * (2 * C * dk * F / rep + C * F + dk * dv * A + C * dv * A + C * dv * F), 0))
    wy("backward", True)
    state("backward")
    out.append(("gdn_chunk_dstate_kernel", "backward", B * Hv * sl,
                ch * (sl * gemm(C, C, dk) + gemm(C, dv, C) + 3 * gemm(dk, dv, C)), 0.0,
                ch * (dk * dv * A + sl * 4 * C * dk * F + C * dv * F + sl * C * dk * A + C * dv * A + sl * C * F), nc))
    out.append(("gdn_chunk_dqk_kernel", "backward", B * Hk * nc,
                ch * (3 * gemm(C, dk, dv) + gemm(C, C, dk) + gemm(C, C, dv) + 2 * gemm(C, dk, C)), 0.0,
                ch * (C * dv * F + 3 * dk * dv * A + 2 * C * dv * A + 4 * C * dk * F + 8 * C * dk * F + C * dk * A + 2 * C * F), 0))
    out.append(("gdn_chunk_dwy_kernel", "backward", B * Hk * nc,
                ch * (gemm(C, dv, C) + gemm(C, dk, C) + gemm(C, C, dv) + gemm(C, C, dk) + gemm(C, C, dk) + 2 * gemm(C, dk, C)), 0.0,
                ch * (C * dk * F / rep + C * C * A + 2 * C * dv * A + 2 * C * dk * A + 3 * C * F + C * dv * F + C * dk * F
                      + 4 * C * dk * F + C * dv * F + 2 * C * F), 0))
    return out


def times(k, tensor_peak, bw):
    name, phase, blocks, fl, solve, by, seq = k
    f = min(1.0, blocks / float(SMS))   # the SMs a launch can occupy (at least one block each)
    comp = fl / (tensor_peak * f) + solve / (PEAK_FP32 * f)
    mem = by / bw
    t = max(comp, mem)
    lat = 0.0
    if seq:   # the sequential passes: per chunk 2 round trips + its FLOPs at one SM's share
        per_block_fl = fl / blocks / seq
        lat = seq * (2 * LAT + per_block_fl / (tensor_peak / SMS))
    return comp, mem, t, lat


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shapes", nargs="*", help="B,T,Hk,Hv,dk,dv (default: 1,4096,16,32,128,128 and 1,32768,16,32,128,128)")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    shapes = [tuple(int(x) for x in s.split(",")) for s in a.shapes] or [(1, 4096, 16, 32, 128, 128), (1, 32768, 16, 32, 128, 128)]
    md = a.markdown
    summary = []
    for sh in shapes:
        B, T, Hk, Hv, dk, dv = sh
        ks = kernels(*sh)
        print()
        title = "B %d x T %d, %d key / %d value heads, dk %d, dv %d (bf16 build, H200 SXM)" % sh
        if md:
            print(title + ":\n")
            print("| kernel | pass | blocks | GFLOP (tensor + solve) | MB | roofline us | attainable us | sequential floor us | bound |")
            print("|---|---|---:|---:|---:|---:|---:|---:|---|")
        else:
            print(title)
        tot = {"forward": [0, 0, 0, 0, 0], "backward": [0, 0, 0, 0, 0]}
        for k in ks:
            c1, m1, t1, l1 = times(k, PEAK_BF16, HBM_BW)
            c2, m2, t2, l2 = times(k, PEAK_BF16 * EFF_MMA_SYNC, MEAS_BW)
            bound = "compute" if c1 > m1 else "memory"
            t2f = max(t2, l2)
            if l2 > t2:
                bound += ", sequential (attainable)"
            row = (k[0], k[1], k[2], (k[3] + k[4]) / 1e9, k[5] / 1e6, t1 * 1e6, t2f * 1e6, l2 * 1e6 if k[6] else 0, bound)
            if md:
                print("| `%s` | %s | %d | %.1f | %.0f | %.0f | %.0f | %s | %s |" % (row[:7] + ("%.0f" % row[7] if k[6] else "-",) + row[8:]))
            else:
                print("  %-26s %-8s %6d blocks %8.1f GFLOP %8.0f MB  roofline %8.0f us  attainable %8.0f us  seq %8.0f us  %s" % row)
            s = tot[k[1]]
            s[0] += k[3] + k[4]; s[1] += k[5]; s[2] += t1; s[3] += t2f; s[4] += max(t1, l1)
        for ph in ("forward", "backward"):
            s = tot[ph]
            summary.append((sh, ph, s))
            line = "%s total: %.1f GFLOP, %.2f GB, roofline %.3f ms (with the sequential floor at peak rates %.3f ms), attainable %.3f ms" % (
                ph, s[0] / 1e9, s[1] / 1e9, s[2] * 1e3, s[4] * 1e3, s[3] * 1e3)
            print(("\n" if md and ph == "forward" else "") + line + ("  " if md else ""))
    if md:
        print("\n| shape | pass | GFLOP | GB | roofline ms | attainable ms | FlashQLA ms (H200) | fla ms (H200) |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for sh, ph, s in summary:
            pub = [""] * 2
            if sh[1] == 32768 and sh[3] == 32 and sh[4] == 128 and sh[5] == 128 and sh[0] == 1:
                i = 0 if ph == "forward" else 1
                pub = ["%.3f" % (PUBLISHED["FlashQLA"][i] * 1e3), "%.3f" % (PUBLISHED["flash-linear-attention"][i] * 1e3)]
            print("| T %d | %s | %.1f | %.2f | %.3f | %.3f | %s | %s |" % (sh[1], ph, s[0] / 1e9, s[1] / 1e9, s[2] * 1e3,
                                                                       s[3] * 1e3, pub[0] or "-", pub[1] or "-"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
