#!/usr/bin/env bash
# tests/test_zero_master.sh BUILD_DIR [cpu|cudaemu]: ZeRO-1 with the fp32 master sharded
# (train/dist.h dist_master_init; the master's memory too: model/gpt.h gpt_build_shard) trains
# bit for bit like ZeRO-0.
#
# In the bf16 layouts (the GEMMs read a bf16 compute copy of the weights) ZeRO-1 updates only
# the process's shard of the fp32 master, rounds that shard into the bf16 copy (stochastic
# rounding seeded by each element's global index: ops_weights_to_act_at) and all-gathers the
# copy, and the fp32 of the tensors read in fp32; ZeRO-0 keeps the whole master everywhere and
# rounds it whole. Under mpirun, the same run under zero_stage 0 and 1 must give
#   - the same losses and gradient norms (17 digits: the same doubles),
#   - the last checkpoint's model.bin (the fp32 master, gathered for the checkpoint) byte for byte,
#   - the AdamW m and v byte for byte (ZeRO-1's shards reassembled in rank order against
#     ZeRO-0's full copies: tests/compare_ckpt.py adam),
# and ZeRO-1 must say the master is sharded (ZeRO-0 must not). A shard rounded with the wrong
# indices, a tensor read in fp32 but not gathered, or a stale compute copy changes the bits.
# cpu: train_gpt_bf16emu (the CPU emulation of the CUDA bf16 build; the MPI path: MPI_UINT16_T),
# 2 and 3 processes (unequal shards), a dense SwiGLU model with qk-norm, a GPT-2-style one
# (learned positions, LayerNorm biases, linear biases, GELU) and a hybrid with Gated DeltaNet
# layers and MoE, 4 steps of 2 micro-steps; then the ZeRO-1 checkpoint of step 2 resumed to step
# 4 on 2 processes equals the straight run byte for byte; the 3-process one resumed on 2 and the
# 2-process one on 3 (each process loads only its new shard): re-saved at once byte for byte
# (model.bin, AdamW), and steps 3-4 byte for byte those of the same checkpoint resumed at
# zero_stage 0; the memory: each process allocates only its master shard (+ the fp32-read
# tensors whole), the backend's params bytes against arithmetic from model.bin's table. ~45 s
# on 2 shared cores (15 launches of 2-3 processes).
# cudaemu: train_gpt_cudaemu_bf16 (the CUDA bf16 build on the CUDA emulator; the NCCL path with
# ncclBfloat16 broadcasts), the dense model on 2 and 3 processes, 2 steps. ~30 s.
# Skips (exit 0) when mpirun is missing.
set -u
build=$(cd "$1" && pwd)
where=${2:-cpu}
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
source tests/mpi_common.sh
mpi_require
kjv_shards
trap '[ -n "${KEEP_TMP:-}" ] || rm -rf "$TMP"' EXIT INT TERM
S=4; BIN=train_gpt_bf16emu
[ "$where" = cudaemu ] && { S=2; BIN=train_gpt_cudaemu_bf16; }
[ -x "$build/$BIN" ] || { echo "FAIL: $build/$BIN missing"; exit 1; }
TINY=(--model.n_layer=2 --model.d_model=64 --model.n_head=4 --model.n_kv_head=2 --model.head_dim=16
      --model.d_ff=128 --model.max_seq_len=32 --train.seq_len=32 --train.tokens_per_step=384
      --train.batch_size=2 --train.steps=$S --train.warmup_steps=1 --train.threads=1 --log.log_every=1
      --log.val_every=0 --metrics.probe_every=0 --log.sample_every=0 --checkpoint.checkpoint_every=2)
GPT2=(--config configs/tiny_gated.ini --model.pos=learned --model.norm=layernorm --model.qk_norm=false
      --model.mlp=gelu --model.bias=true --model.attn_gate=headwise --model.gate_position=value)
HYB=(--config configs/tiny_hybrid_gated.ini --model.n_layer=4 --moe.n_expert=4 --moe.top_k=2 --moe.d_expert=64
     --moe.moe_every=2)
run() {  # run NAME NP [overrides...]
    local name=$1 np=$2; shift 2
    timeout 300 mpirun -np "$np" --oversubscribe ${ONEDNN_MAX_CPU_ISA:+-x ONEDNN_MAX_CPU_ISA} \
        "$build/$BIN" "${TINY[@]}" "$@" --log.run_dir="$TMP/$name" >"$TMP/$name.out" 2>&1
}
ck() { echo "$TMP/$1/checkpoints/step_$(printf %08d "$2")"; }
pair() {  # pair NAME NP [overrides...]: zero_stage 0 and 1, compared
    local name=$1 np=$2; shift 2
    run "${name}_z0" "$np" "$@" --train.zero_stage=0
    check "$name: ZeRO-0 run ($(grep -m1 error: "$TMP/${name}_z0.out"))" [ -f "$(ck "${name}_z0" $S)/DONE" ]
    run "${name}_z1" "$np" "$@" --train.zero_stage=1
    check "$name: ZeRO-1 run ($(grep -m1 error: "$TMP/${name}_z1.out"))" [ -f "$(ck "${name}_z1" $S)/DONE" ]
    check "$name: ZeRO-1 says the master is sharded" grep -q "fp32 master sharded" "$TMP/${name}_z1.out"
    check "$name: ZeRO-0 does not" bash -c "! grep -q 'fp32 master sharded' '$TMP/${name}_z0.out'"
    check "$name: losses and grad norms bitwise" "$PY" tests/compare_ckpt.py losses "$TMP/${name}_z1/log.jsonl" "$TMP/${name}_z0/log.jsonl" 0
    check "$name: model.bin (fp32 master) byte for byte" cmp "$(ck "${name}_z1" $S)/model.bin" "$(ck "${name}_z0" $S)/model.bin"
    "$PY" tests/compare_ckpt.py adam "$(ck "${name}_z1" $S)" "$(ck "${name}_z0" $S)" >"$TMP/$name.a.cmp" 2>&1
    local rc=$?
    check "$name: AdamW m, v byte for byte ($(tail -1 "$TMP/$name.a.cmp"))" [ $rc -eq 0 ]
}
if [ "$where" = cpu ]; then
    pair dense2 2 --config configs/tiny_gated.ini
    pair dense3 3 --config configs/tiny_gated.ini
    pair gpt2 2 "${GPT2[@]}"
    pair hybrid3 3 "${HYB[@]}"
    # the sharded checkpoint of step 2 resumed to step 4: the straight run's bytes
    run res 2 --config configs/tiny_gated.ini --train.zero_stage=1 --resume "$(ck dense2_z1 2)"
    check "resume: ran ($(grep -m1 error: "$TMP/res.out"))" [ -f "$(ck res 4)/DONE" ]
    check "resume: model.bin == the straight run's" cmp "$(ck res 4)/model.bin" "$(ck dense2_z1 4)/model.bin"
    "$PY" tests/compare_ckpt.py adam "$(ck res 4)" "$(ck dense2_z1 4)" >"$TMP/res.a.cmp" 2>&1
    rc=$?
    check "resume: AdamW state == the straight run's ($(tail -1 "$TMP/res.a.cmp"))" [ $rc -eq 0 ]
    # another process count: the 3-process sharded checkpoint of step 2 under 2 processes and the
    # 2-process one under 3 (the new shards cut elsewhere). Right after the load the state is
    # written again (GATEDGPT_RESAVE_DIR): each process loaded only its new shard and the save
    # gathered them, so model.bin and AdamW are the checkpoint's bytes. Then steps 3-4: the same
    # checkpoint resumed at ZeRO-0 (the whole master loaded everywhere) gives the same bytes.
    for el in "dense3_z1 2" "dense2_z1 3"; do
        from=${el% *} np=${el#* }
        for z in 1 0; do
            GATEDGPT_RESAVE_DIR="$TMP/el${np}_z$z/resaved" run "el${np}_z$z" "$np" --config configs/tiny_gated.ini \
                --train.zero_stage=$z --resume "$(ck "$from" 2)"
            check "el${np}_z$z: resumed on $np ($(grep -m1 error: "$TMP/el${np}_z$z.out"))" [ -f "$(ck "el${np}_z$z" 4)/DONE" ]
        done
        check "el$np: ZeRO-1 on $np says the master is sharded" grep -q "fp32 master sharded" "$TMP/el${np}_z1.out"
        rs="$TMP/el${np}_z1/resaved/step_00000002"
        check "el$np: resaved model.bin == $from's" cmp "$rs/model.bin" "$(ck "$from" 2)/model.bin"
        "$PY" tests/compare_ckpt.py adam "$rs" "$(ck "$from" 2)" >"$TMP/el$np.a.cmp" 2>&1
        rc=$?
        check "el$np: resaved AdamW == $from's ($(tail -1 "$TMP/el$np.a.cmp"))" [ $rc -eq 0 ]
        check "el$np: step-4 model.bin, ZeRO-1 == ZeRO-0 resume" cmp "$(ck "el${np}_z1" 4)/model.bin" "$(ck "el${np}_z0" 4)/model.bin"
        check "el$np: losses, ZeRO-1 == ZeRO-0 resume" "$PY" tests/compare_ckpt.py losses "$TMP/el${np}_z1/log.jsonl" \
            "$TMP/el${np}_z0/log.jsonl" 0
    done
    # the memory: a model whose matrices outweigh its embedding (d_model 256, 4 layers, an untied
    # LM head) on 3 processes, ZeRO-0 and ZeRO-1. The backend's own count of what it holds
    # (ops_malloc: the "memory: the backend holds params" line) must drop by the master's floats
    # outside rank 0's shard, less the fp32-read tensors held whole besides; the shard by the
    # 4096-float chunk rule (docs/distributed.md) and the fp32-read tensors from model.bin's
    # table (1-D tensors, the embeddings), in Python. Peak RSS of both printed (the largest rank).
    MEM=(--config configs/tiny_gated.ini --model.n_layer=4 --model.d_model=256 --model.n_head=4 --model.n_kv_head=2
         --model.head_dim=64 --model.d_ff=768 --model.tie_embeddings=false --train.steps=2)
    run mem_z0 3 "${MEM[@]}" --train.zero_stage=0
    run mem_z1 3 "${MEM[@]}" --train.zero_stage=1
    check "mem: both ran ($(grep -h -m1 error: "$TMP/mem_z0.out" "$TMP/mem_z1.out"))" \
        bash -c "[ -f '$(ck mem_z0 2)/DONE' ] && [ -f '$(ck mem_z1 2)/DONE' ]"
    "$PY" - "$TMP/mem_z0.out" "$TMP/mem_z1.out" "$(ck mem_z1 2)" >"$TMP/mem.cmp" 2>&1 <<'PY'
import re, sys
sys.path.insert(0, "tests")
from check_ckpt import read_model
z0, z1 = open(sys.argv[1]).read(), open(sys.argv[2]).read()
tensors, arena = read_model(sys.argv[3])
total = len(arena) // 4
f32 = sum(numel for name, shape, off, numel in tensors if len(shape) == 1 or name in ("wte", "wpe"))
chunks = -(-total // 4096)
shard = min(-(-chunks // 3) * 4096, total)           # rank 0's, the largest
held = lambda t: int(re.search(r"the backend holds params (\d+) ", t).group(1))
rss = lambda t: int(re.search(r"peak RSS (\d+) bytes", t).group(1))
m = re.search(r"fp32 master held: shard (\d+) \+ fp32-read (\d+) = (\d+) bytes \(whole: (\d+)\)", z1)
bad = []
if not m: bad.append("no 'fp32 master held' line")
else:
    if int(m.group(1)) != 4 * shard: bad.append(f"shard {m.group(1)} != 4 x {shard}")
    if int(m.group(2)) != 4 * f32: bad.append(f"fp32-read {m.group(2)} != 4 x {f32}")
    if int(m.group(4)) != 4 * total: bad.append(f"whole {m.group(4)} != 4 x {total}")
saved, want = held(z0) - held(z1), 4 * (total - shard - f32)
# the allocations' 64-byte rounding and the packed ranges' 64-float starts: at most 4 KiB here
if not (0 <= want - saved <= 4096): bad.append(f"params held dropped by {saved}, want {want} (- up to 4096)")
print(f"mem: {total} floats, rank 0's shard {shard}, fp32-read {f32}: backend params {held(z0)} -> {held(z1)} bytes "
      f"({saved} less; the master {4 * total} -> {4 * (shard + f32)}); peak RSS {rss(z0)} -> {rss(z1)} bytes"
      + ("" if not bad else "; FAIL: " + "; ".join(bad)))
sys.exit(1 if bad else 0)
PY
    rc=$?
    cat "$TMP/mem.cmp"
    check "mem: ZeRO-1 holds the master's shard only ($(tail -1 "$TMP/mem.cmp"))" [ $rc -eq 0 ]
else
    pair dense2 2 --config configs/tiny_gated.ini
    pair dense3 3 --config configs/tiny_gated.ini
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
