#!/usr/bin/env bash
# tests/test_bias.sh BUILD_DIR: GPT-2 with its linear biases ([model] bias = true) end to end.
#   - llm.c's model file (tools/import_llmc.c): files written by tests/llmc_model.py from the
#     format's description (not llm.c's code), fp32 (version 3) and bf16 (version 5), Vp = ours
#     and Vp < ours (padding rows dropped): `gatedgpt_ckpt import FILE.bin`, then its logits against
#     the float64 logits of the written parameters (numpy) within 1e-5 of their max (fp32 forward
#     of a 2-layer model: measured 2.4e-7); bad headers and a truncated file: one line naming the
#     file and field, exit 1, nothing written;
#   - a tiny GPT-2 with biases trains (loss falls), resumes exactly (8 + 8 steps vs 16: the step
#     records and model.bin identical), exports as GPT2LMHeadModel with its biases (nonzero after
#     training), and export -> import -> export is byte-identical, the import a bias = true model
#     with the same logits (exact); an export of a model without biases imports as bias = false;
#   - [train] recompute = selective and full train it bit for bit as none;
#   - the memory plan (`--check`) counts the biases: its parameter and AdamW lines equal what the
#     trainer holds, to the byte;
#   - data parallelism (mpirun, skipped without it): 2 processes vs 1 with the same global batch,
#     the gradients reduced layer by layer during the backward (GATEDGPT_DIST_OVERLAP=1), ZeRO-0
#     and ZeRO-1: step losses within 1e-5 relative and parameters after 10 steps within 1e-5 of
#     each tensor's max (tests/test_mpi_train.sh's bounds; a bias gradient left unreduced moves
#     the biases by ~1e-3).
set -uo pipefail
build=$(cd "$1" && pwd)
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
source tests/ckpt_common.sh
tool="$build/gatedgpt_ckpt"
L="$PY tests/llmc_model.py"

# ---- llm.c's model file -------------------------------------------------------------------------
IDS=3,17,99,0,42,42,7,64,12,5,88,1
for spec in "3 128" "5 128" "3 112"; do
    set -- $spec
    v=$1 vp=$2 n=llmc_v${1}_vp$2
    $L write "$tmp/$n.bin" --version "$v" --Vp "$vp" --seed "$v" --ids $IDS --logits "$tmp/$n.ref" > /dev/null
    "$tool" import "$tmp/$n.bin" --out "$tmp/$n" > "$tmp/$n.out" 2>&1
    check "llm.c version $v, Vp $vp: imports" 'grep -q "llm.c model file, version '"$v"'" "$tmp/$n.out"'
    check "llm.c version $v: bias = true in the checkpoint's config" 'grep -q "^bias = true" "$tmp/$n/step_00000000/config.ini"'
    "$tool" logits "$tmp/$n" --ids $IDS --out "$tmp/$n.got" > /dev/null 2>&1
    check "llm.c version $v, Vp $vp: logits = the written model's ($($L compare "$tmp/$n.got" "$tmp/$n.ref" 12 100 1e-5))" \
        "$L compare '$tmp/$n.got' '$tmp/$n.ref' 12 100 1e-5 > /dev/null"
done
bad_llmc() {   # bad_llmc WHAT PATTERN FILE: import must fail with one line matching PATTERN, write nothing
    "$tool" import "$3" --out "$tmp/bad_imp" > "$tmp/bad.out" 2>&1
    local rc=$? pat=$2
    check "llm.c $1: one line, exit 1 ($(head -c 200 "$tmp/bad.out"))" '[ "$rc" = 1 ] && [ "$(wc -l < "$tmp/bad.out")" = 1 ] && grep -q "$pat" "$tmp/bad.out"'
    check "llm.c $1: nothing written" '[ ! -e "$tmp/bad_imp" ]'
}
$L corrupt "$tmp/llmc_v3_vp128.bin" "$tmp/v4.bin" 1 4
bad_llmc "version 4" "v4.bin: header\[1\] version = 4: llm.c writes 3 (fp32 parameters) or 5" "$tmp/v4.bin"
$L corrupt "$tmp/llmc_v3_vp128.bin" "$tmp/nh.bin" 5 5
bad_llmc "NH not dividing C" "nh.bin: header\[5\] NH = 5: does not divide C" "$tmp/nh.bin"
$L corrupt "$tmp/llmc_v3_vp128.bin" "$tmp/vp.bin" 7 64
bad_llmc "Vp < V" "vp.bin: header\[7\] Vp = 64: smaller than V" "$tmp/vp.bin"
$L truncate "$tmp/llmc_v5_vp128.bin" "$tmp/short.bin" 2
bad_llmc "a truncated file" "short.bin: .* bytes, but the header (version 5" "$tmp/short.bin"

# ---- training, exact resume, export / import ----------------------------------------------------
G=(--config configs/tiny_baseline.ini --model.pos=learned --model.norm=layernorm --model.mlp=gelu
   --model.qk_norm=false --model.n_layer=2 --model.d_model=32 --model.n_head=2 --model.n_kv_head=2
   --model.head_dim=16 --model.d_ff=64 --model.max_seq_len=32 --model.bias=true
   --train.batch_size=2 --train.seq_len=32 --train.tokens_per_step=128 --train.warmup_steps=2 --train.lr=3e-3
   --train.threads=1 --log.log_every=1000 --log.val_every=0 --metrics.probe_every=0 --log.sample_every=0
   --train.steps=16 --checkpoint.checkpoint_every=8 --checkpoint.keep_last=0)
"$build/train_gpt" "${G[@]}" --log.run_dir="$tmp/straight" > "$tmp/straight.out" 2>&1
check "a bias model trains 16 steps" '[ -f "$tmp/straight/checkpoints/step_00000016/DONE" ]'
check "its loss falls" "$PY -c \"import json,sys; l=[json.loads(x)['loss'] for x in open('$tmp/straight/log.jsonl') if '\\\"type\\\":\\\"step\\\"' in x]; sys.exit(0 if l[-1] < l[0] - 0.5 else 1)\""
"$build/train_gpt" "${G[@]}" --log.run_dir="$tmp/split" --stop-after 8 > "$tmp/split1.out" 2>&1
"$build/train_gpt" "${G[@]}" --log.run_dir="$tmp/split" --resume auto > "$tmp/split2.out" 2>&1
check "resumed from step 8" 'grep -q "resume: continuing from $tmp/split/checkpoints/step_00000008: step 8" "$tmp/split2.out"'
check "resume: every step record identical" '[ "$(steps_of "$tmp/split/log.jsonl")" = "$(steps_of "$tmp/straight/log.jsonl")" ]'
check "resume: model.bin at step 16 byte for byte" 'cmp -s "$tmp/split/checkpoints/step_00000016/model.bin" "$tmp/straight/checkpoints/step_00000016/model.bin"'
ck="$tmp/straight/checkpoints/step_00000016"
"$tool" export "$ck" --out "$tmp/hf" > "$tmp/export.out" 2>&1
check "export: GPT2LMHeadModel" 'grep -q "GPT2LMHeadModel" "$tmp/hf/config.json"'
check "export: the trained biases, not zeros" "$PY -c \"
import json, struct, sys
d = open('$tmp/hf/model.safetensors', 'rb').read(); n = struct.unpack('<Q', d[:8])[0]; h = json.loads(d[8:8 + n])
for k in ('attn.c_attn.bias', 'attn.c_proj.bias', 'mlp.c_fc.bias', 'mlp.c_proj.bias'):
    a, b = h['transformer.h.1.' + k]['data_offsets']
    x = struct.unpack('<%df' % ((b - a) // 4), d[8 + n + a:8 + n + b])
    sys.exit(1) if max(abs(v) for v in x) == 0 else None
\""
"$tool" import "$tmp/hf" --out "$tmp/imp" > /dev/null 2>&1
check "import of the export: bias = true" 'grep -q "^bias = true" "$tmp/imp/step_00000000/config.ini"'
"$tool" export "$tmp/imp" --out "$tmp/hf2" > /dev/null 2>&1
check "export -> import -> export byte-identical" '$PY tests/compare_safetensors.py "$tmp/hf/model.safetensors" "$tmp/hf2/model.safetensors" > /dev/null'
"$tool" logits "$ck" --ids 5,9,200,3,77 --out "$tmp/a.f32" > /dev/null 2>&1
"$tool" logits "$tmp/imp" --ids 5,9,200,3,77 --out "$tmp/b.f32" > /dev/null 2>&1
check "the imported model's logits = the trained model's, exactly" 'cmp -s "$tmp/a.f32" "$tmp/b.f32"'
"$build/train_gpt" "${G[@]}" --model.bias=false --train.steps=2 --checkpoint.checkpoint_every=2 --log.run_dir="$tmp/nob" > /dev/null 2>&1
"$tool" export "$tmp/nob/checkpoints" --out "$tmp/hf_nob" > /dev/null 2>&1
"$tool" import "$tmp/hf_nob" --out "$tmp/imp_nob" > /dev/null 2>&1
check "an export without biases (zeros) imports as bias = false" 'grep -q "^bias = false" "$tmp/imp_nob/step_00000000/config.ini"'

# ---- [train] recompute: the biased GEMMs recomputed give the same bits ----------------------------
for rc in selective full; do
    "$build/train_gpt" "${G[@]}" --train.recompute=$rc --log.run_dir="$tmp/rc_$rc" > /dev/null 2>&1
    check "recompute = $rc: the same step records and model.bin as none" '[ "$(steps_of "$tmp/rc_'$rc'/log.jsonl")" = "$(steps_of "$tmp/straight/log.jsonl")" ] && cmp -s "$tmp/rc_'$rc'/checkpoints/step_00000016/model.bin" "$tmp/straight/checkpoints/step_00000016/model.bin"'
done

# ---- the memory plan counts the biases ----------------------------------------------------------
field() { local v; v=$(grep -m1 "^  $1 " "$2" | awk '{print $2}'); echo "${v:-0}"; }
held() { grep -m1 "^memory: the backend holds" "$2" | sed 's/.*params \([0-9]*\) + adamw \([0-9]*\) + .*/\1 \2/' | awk -v k="$1" '{print $k}'; }
"$build/train_gpt" "${G[@]}" --train.steps=2 --checkpoint.checkpoint_every=0 --check > "$tmp/plan.out" 2>&1
"$build/train_gpt" "${G[@]}" --train.steps=2 --checkpoint.checkpoint_every=0 --log.run_dir="$tmp/plan" > "$tmp/plan_run.out" 2>&1
pw=$(( $(field weights "$tmp/plan.out") + $(field master "$tmp/plan.out") + $(field grads "$tmp/plan.out") ))
check "plan: params $pw == held $(held 1 "$tmp/plan_run.out")" '[ "$pw" = "$(held 1 "$tmp/plan_run.out")" ]'
check "plan: adamw == held $(held 2 "$tmp/plan_run.out")" '[ "$(field adamw "$tmp/plan.out")" = "$(held 2 "$tmp/plan_run.out")" ]'

# ---- 2 processes vs 1: the bias gradients are reduced -------------------------------------------
if command -v mpirun > /dev/null 2>&1; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
    # [train] eps 1e-4: the key rows of attn.bqkv have a zero gradient up to roundoff (the softmax
    # cancels q.b, tests/golden/gpt2_bias.ini), which differs between 1 and 2 processes; AdamW with
    # eps 1e-8 would turn that into updates of up to lr, 1e-4 keeps them below 1e-5 lr
    D=("${G[@]}" --train.steps=10 --checkpoint.checkpoint_every=10 --train.tokens_per_step=256 --train.eps=1e-4)
    "$build/train_gpt" "${D[@]}" --log.run_dir="$tmp/one" > "$tmp/one.out" 2>&1
    for z in 0 1; do
        GATEDGPT_DIST_OVERLAP=1 timeout 300 mpirun -np 2 --oversubscribe -x GATEDGPT_DIST_OVERLAP "$build/train_gpt" "${D[@]}" \
            --train.zero_stage=$z --log.run_dir="$tmp/two$z" > "$tmp/two$z.out" 2>&1
        check "2 processes, ZeRO-$z, overlapped reduction: runs" '[ -f "$tmp/two'$z'/checkpoints/step_00000010/DONE" ]'
        $PY tests/compare_ckpt.py losses "$tmp/two$z/log.jsonl" "$tmp/one/log.jsonl" 1e-5 > "$tmp/l$z.cmp"
        rc=$?
        check "2 processes vs 1, ZeRO-$z: $(cat "$tmp/l$z.cmp")" '[ $rc = 0 ]'
        $PY tests/compare_ckpt.py params "$tmp/two$z/checkpoints/step_00000010" "$tmp/one/checkpoints/step_00000010" 1e-5 > "$tmp/p$z.cmp"
        rc=$?
        check "2 processes vs 1 after 10 steps, ZeRO-$z: $(cat "$tmp/p$z.cmp")" '[ $rc = 0 ]'
        echo "bias, 2 processes vs 1, ZeRO-$z: $(cat "$tmp/l$z.cmp"); $(cat "$tmp/p$z.cmp")"
    done
else
    echo "skipped: 2 processes (mpirun not installed)"
fi
finish
