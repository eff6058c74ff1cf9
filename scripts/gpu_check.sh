#!/usr/bin/env bash
# scripts/gpu_check.sh: the GPU check in one command, sized for one H200 (any sm_90 GPU) and at
# most ~8 minutes: build for sm_90 only, run the GPU tests (make test-gpu), benchmark a GPT-2
# 124M-shaped model (the bf16 build with the flash or cuDNN attention; fp32 storage with bf16
# GEMMs, fp32, TF32), the paper's 1.7B dense shape (8 layers) and its 15B MoE shape (2 layers),
# in the bf16 build, each with no gate, the headwise
# and the elementwise gate, and print a table last. The whole log goes to $OUT/gpu_check.log (or
# build-gpu/gpu_check.log), the benchmark rows to bench.tsv beside it.
#
#   scripts/gpu_check.sh
#   env: OUT (log directory), GATEDGPT_CUDA_ARCH (default 90), GPU_CHECK_BUDGET (seconds, 480),
#        GPU_CHECK_BUILD (build directory, build-gpu; kept between calls on a warm machine),
#        GPU_CHECK_CLEAN=1 (build from scratch)
#
# On a machine without the Debian packages: run scripts/gpu_deps.sh where they are installed and
# carry gpu-deps/ (libinih); without a BLAS the CPU reference builds with GATEDGPT_GEMM=naive.
# The benchmark skips whatever no longer fits in the budget. The exit status is non-zero if the
# build or a GPU test failed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUTDIR=${OUT:-build-gpu-logs}   # not the build folder: a clean build must not delete the log
mkdir -p "$OUTDIR"
LOG="$OUTDIR/gpu_check.log"
TSV="$OUTDIR/bench.tsv"

main() {
    local start budget arch build
    start=$(date +%s)
    budget=${GPU_CHECK_BUDGET:-480}
    arch=${GATEDGPT_CUDA_ARCH:-90}
    build=${GPU_CHECK_BUILD:-build-gpu}
    left() { echo $(( budget - ($(date +%s) - start) )); }
    say() { echo "== gpu_check [$(( $(date +%s) - start ))s] $*"; }

    say "machine"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 || echo "(no nvidia-smi)"
    # nvcc: on PATH, in the usual toolkit folder, or in pip's CUDA wheels
    local nvcc_bin
    nvcc_bin=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc 2>/dev/null | head -1 ||
               true)
    if [ -z "$nvcc_bin" ]; then
        nvcc_bin=$(python3 -c 'import nvidia, glob, os; print(next(iter(sorted(glob.glob(os.path.join(list(nvidia.__path__)[0], "*", "bin", "nvcc")))), ""))' 2>/dev/null)
    fi
    [ -n "$nvcc_bin" ] || { say "FAILED: no nvcc found (PATH, /usr/local/cuda, pip nvidia wheels)"; return 1; }
    "$nvcc_bin" --version 2>&1 | tail -1
    cmake --version | head -1
    echo "cores: $(nproc)"

    say "configure (sm_$arch)"
    # warnings are not errors here: another compiler version must not cost the whole run
    local flags=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" -DGATEDGPT_MPI=OFF
                 -DGATEDGPT_WERROR=OFF -DCMAKE_CUDA_COMPILER="$nvcc_bin")
    # the toolkit's libraries (cuDNN's runtime-compiled engines open libnvrtc themselves)
    local cudalib
    for cudalib in "$(dirname "$(dirname "$nvcc_bin")")/lib64" "$(dirname "$(dirname "$nvcc_bin")")/lib"; do
        [ -d "$cudalib" ] && export LD_LIBRARY_PATH="$cudalib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    done
    command -v ninja > /dev/null && flags+=(-G Ninja)
    [ -d gpu-deps ] && flags+=(-DCMAKE_PREFIX_PATH="$PWD/gpu-deps")
    # cuDNN and NCCL from the pip wheels (nvidia-cudnn-cu13, nvidia-nccl-cu13) where the toolkit has none
    local pyroot
    if pyroot=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null); then
        flags+=(-DCUDNN_ROOT="$pyroot")
        export LD_LIBRARY_PATH="$pyroot/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"   # libcudnn.so.9 is loaded at run time
    fi
    if pyroot=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null); then
        flags+=(-DNCCL_ROOT="$pyroot")
        export LD_LIBRARY_PATH="$pyroot/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    [ "${GPU_CHECK_CLEAN:-0}" = 1 ] && rm -rf "$build"
    if ! cmake -S . -B "$build" "${flags[@]}" > "$OUTDIR/configure.log" 2>&1; then
        if grep -q "no CPU GEMM library" "$OUTDIR/configure.log"; then
            say "no BLAS here: the CPU reference uses GATEDGPT_GEMM=naive"
            rm -rf "$build"
            flags+=(-DGATEDGPT_GEMM=naive)
            cmake -S . -B "$build" "${flags[@]}" > "$OUTDIR/configure.log" 2>&1 || { cat "$OUTDIR/configure.log"; say "FAILED: configure"; return 1; }
        else
            cat "$OUTDIR/configure.log"; say "FAILED: configure (the first error is above: libinih or zlib missing? carry gpu-deps/ from scripts/gpu_deps.sh)"; return 1
        fi
    fi
    grep "gatedgpt:" "$OUTDIR/configure.log"

    say "build"
    local t0=$(date +%s)
    cmake --build "$build" -j "$(nproc)" --target train_gpt train_gpt_cuda prepare test_gpu_ops test_golden_cuda bench_gpu bench_attn_gpu \
        train_gpt_bf16emu train_gpt_cuda_bf16 test_golden_cuda_bf16 test_gpu_ops_bf16 bench_gpu_bf16 \
        > "$OUTDIR/build.log" 2>&1 || { grep -m 5 -A 4 -E "error|Error" "$OUTDIR/build.log"; tail -15 "$OUTDIR/build.log"; say "FAILED: build"; return 1; }
    say "built in $(( $(date +%s) - t0 ))s"

    local gpu_note="a GPU is visible"
    "$build/tests/test_gpu_ops" --has-device || gpu_note="NO GPU VISIBLE: every GPU test only took its skip path"
    say "$gpu_note"
    say "GPU tests (ctest -L gpu, GATEDGPT_CUDA_SYNC=1: a failing kernel is named)"
    local tests_ok=1
    # a hung kernel must not eat the whole budget: 150 s per test, and the tests together leave
    # at least 120 s for the benchmark
    local tmax=$(( $(left) - 120 )); [ "$tmax" -lt 60 ] && tmax=60
    (cd "$build" && GATEDGPT_CUDA_SYNC=1 timeout "$tmax" ctest -L gpu --output-on-failure --timeout 150) > "$OUTDIR/tests.log" 2>&1 || tests_ok=0
    cat "$OUTDIR/tests.log"
    local test_summary
    test_summary=$(grep -E "tests passed|tests failed" "$OUTDIR/tests.log" | tail -1)
    # a failure in the op tests: compute-sanitizer names the first bad access (if it is installed)
    local sanitizer
    sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
    local t
    for t in gpu_ops gpu_ops_bf16; do
        if [ $tests_ok = 0 ] && [ -n "$sanitizer" ] && [ "$(left)" -gt 200 ] && grep -qE " $t \.+\**(Failed|Exception|Timeout)" "$OUTDIR/tests.log"; then
            say "$t failed: compute-sanitizer memcheck on it (100 s at most)"
            timeout 100 "$sanitizer" --tool memcheck --print-limit 10 "$build/tests/test_$t" > "$OUTDIR/sanitizer_$t.log" 2>&1
            grep -E "=========|FAIL" "$OUTDIR/sanitizer_$t.log" | head -40
        fi
    done

    say "benchmark ($(left)s left)"
    printf "config\tB x T\tparams\tGFLOP/tok\tms/step\ttok/s\tTFLOP/s\tMFU(fp32|tf32)\tMFU(bf16)\tgate ovh (FLOPs)\tpeak MiB\tdevice MiB\n" > "$TSV"
    # row NAME MIN_SECONDS_LEFT STEPS CONFIG [--set ...]: one benchmark row (3 gate variants), run
    # only while the budget allows; environment variables before `row` apply to it; BENCH=bf16
    # runs the bf16 build (bf16 activation storage), else the fp32-storage build
    row() {
        local name=$1 need=$2 steps=$3 cfg=$4; shift 4
        local bench="$build/bench_gpu"; [ "${BENCH:-}" = bf16 ] && bench="$build/bench_gpu_bf16"
        [ "$(left)" -gt "$need" ] || { say "benchmark $name: skipped (budget)"; return; }
        timeout $(( $(left) - 20 )) "$bench" --steps "$steps" --warmup 2 --tsv "$TSV" --shape "$name" "$cfg" "$@" \
            || say "benchmark $name: failed or out of time"
    }
    # B 16 x T 1024 = 16k tokens a step: enough that AdamW, the gradient norm and the weights' bf16
    # copy (a few ms over 124M parameters) do not dominate, as gradient accumulation would do
    local G2=(configs/gpt2_124m.ini --set train.batch_size=16 --set train.seq_len=1024)
    # the attention kernels alone: the gated flash kernel vs cuDNN's ungated one (goal >= 0.90)
    if [ "$(left)" -gt 60 ]; then
        timeout 60 "$build/bench_attn_gpu" --iters 10 --tsv "$OUTDIR/attn.tsv" > "$OUTDIR/attn.txt" 2>&1 \
            || say "bench_attn_gpu: failed or out of time"
        cat "$OUTDIR/attn.txt"
    fi
    # the issue's target numerics first: bf16 storage (the bf16 build) + the tensor-core flash attention
    BENCH=bf16 row gpt2_124m_b16t1024_bf16_flash 60 5 "${G2[@]}" --set train.attn_impl=flash
    # where the time of that step goes, op by op (the device synchronised around every op)
    if [ "$(left)" -gt 90 ]; then
        GATEDGPT_CUDA_PROFILE=1 timeout 60 "$build/bench_gpu_bf16" --steps 2 --warmup 1 --gates elementwise \
            --shape gpt2_124m_profile "${G2[@]}" --set train.attn_impl=flash 2>/dev/null | grep -A 60 "^per-op profile" \
            > "$OUTDIR/profile.txt" || say "per-op profile: failed or out of time"
        cat "$OUTDIR/profile.txt"
    fi
    # cuDNN's attention as the reference for the attention kernel (the gate is a separate pass there)
    if "$build/tests/test_gpu_ops" --has-cudnn; then
        BENCH=bf16 row gpt2_124m_b16t1024_bf16_cudnn 60 5 "${G2[@]}" --set train.attn_impl=cudnn
    fi
    # the paper's dense 1.7B shape (d 2048, 16 q / 8 kv heads x 128, SwiGLU 6144, vocab 151936)
    # cut to 8 of its 28 layers, 2 x 2048 tokens
    BENCH=bf16 row dense1p7b_8layers_b2t2048_bf16_flash 90 3 configs/paper/dense_1p7b_baseline.ini \
        --set model.n_layer=8 --set train.batch_size=2 --set train.seq_len=2048 --set train.attn_impl=flash
    # the paper's MoE 15B-A2B shape (128 experts x 768, top-8) cut to 2 of its 24 layers
    BENCH=bf16 row moe15b_2layers_b2t2048_bf16_flash 90 3 configs/paper/moe_15b_a2b_baseline.ini \
        --set model.n_layer=2 --set train.batch_size=2 --set train.seq_len=2048 --set train.attn_impl=flash
    BENCH=bf16 GATEDGPT_MOE_GEMM=grouped row moe15b_2layers_b2t2048_bf16_flash_groupedgemm 90 3 \
        configs/paper/moe_15b_a2b_baseline.ini --set model.n_layer=2 --set train.batch_size=2 --set train.seq_len=2048 \
        --set train.attn_impl=flash
    # fp32 storage: bf16 GEMM inputs on fp32 tensors (what bf16 storage saves), then fp32
    GATEDGPT_CUDA_BF16_GEMM=1 row gpt2_124m_b16t1024_bf16gemm_flash 60 5 "${G2[@]}" --set train.attn_impl=flash
    row gpt2_124m_b16t1024_fp32 60 5 "${G2[@]}"
    GATEDGPT_CUDA_TF32=1 row gpt2_124m_b16t1024_tf32 60 5 "${G2[@]}"
    GATEDGPT_CUDA_BF16_GEMM=1 row gpt2_124m_b16t1024_bf16gemm 60 5 "${G2[@]}"
    # the hybrid (issue #30): the delta rule alone at Qwen3-Next's linear-attention shape (32 value
    # heads on 16 key heads, dk = dv = 128) at T 4096 and 32K, chunked vs recurrent kernels (bf16
    # build; docs/gpu.md has the roofline and FlashQLA's / fla's H200 times beside it); then a hybrid
    # training step: the dense 1.7B shape cut to 8 layers laid out LLLA with those linear heads
    if [ "$(left)" -gt 90 ]; then
        timeout 80 "$build/bench_gpu_bf16" --steps 3 --warmup 1 --tsv "$TSV" --gdn qwen3next_t4096 1,4096,16,32,128,128 \
            --gdn qwen3next_t32k 1,32768,16,32,128,128 | tee "$OUTDIR/gdn.txt" || say "bench_gpu --gdn: failed or out of time"
    fi
    BENCH=bf16 row hybrid1p7b_8layers_b2t2048_bf16_flash 90 3 configs/paper/dense_1p7b_baseline.ini \
        --set model.n_layer=8 --set model.layer_pattern=LLLA --set model.linear_n_v_head=32 --set model.linear_n_k_head=16 \
        --set model.linear_k_head_dim=128 --set model.linear_v_head_dim=128 --set train.batch_size=2 --set train.seq_len=2048 \
        --set train.attn_impl=flash

    say "done in $(( $(date +%s) - start ))s; log: $LOG"
    echo
    echo "GPU tests: ${test_summary:-none ran} $([ $tests_ok = 1 ] && echo "(all passed)" || echo "(FAILURES: see above)"); $gpu_note"
    echo "benchmark (rows *_bf16_*: bf16 storage; the others fp32 storage with GEMMs fp32 / TF32 / bf16 by row; MFU against that peak and the bf16 dense peak; gate overhead vs the same shape's ungated step):"
    if command -v column > /dev/null; then column -t -s $'\t' "$TSV"; else cat "$TSV"; fi
    [ -f "$OUTDIR/attn.txt" ] && { echo "attention kernels alone (bench_attn_gpu):"; tail -n +2 "$OUTDIR/attn.txt"; }
    [ $tests_ok = 1 ]
}

main "$@" 2>&1 | tee "$LOG"
exit "${PIPESTATUS[0]}"
