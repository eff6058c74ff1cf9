#!/usr/bin/env bash
# tests/test_import_sharded.sh BUILD_DIR: `gatedgpt_ckpt import` of directories written by hand
# (tests/safetensors_fixture.py: python's standard library + numpy, no torch), a tiny Llama:
#   dtypes   F16, BF16, F32 and a mix: every imported float equal bit for bit to numpy's own
#            conversion (F16: float16 -> float32; BF16: bits << 16), over every finite F16 and
#            BF16 bit pattern (subnormals, -0.0, the extremes); an inf or NaN weight refused
#            in one line naming the file, the tensor and the element
#   shards   the same tensors as model.safetensors and as 3 and as 21 shards + index (transformers'
#            save_pretrained layout, tensors dealt round-robin): the checkpoints byte-identical
#   errors   a missing shard, a tensor in two shards, an index entry naming a shard that lacks
#            its tensor, a shard tensor the index does not list, no weight_map, an entry twice,
#            a tensor twice in one header, neither model.safetensors nor an index: one line
#            each, exit 1, nothing written
# Needs only gatedgpt_ckpt and python3 with numpy (about 5 s).
set -uo pipefail
build=$1
tool="$build/gatedgpt_ckpt"
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
FIX=tests/safetensors_fixture.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1"; fi; }

# dtypes: each imported value against numpy's conversion of the source, bit for bit
for dt in f16 bf16 f32 mixed; do
    $PY $FIX write "$tmp/$dt" --dtype $dt > /dev/null
    "$tool" import "$tmp/$dt" --out "$tmp/imp_$dt" > "$tmp/$dt.out" 2>&1; rc=$?
    $PY $FIX check "$tmp/imp_$dt/step_00000000" "$tmp/$dt" > "$tmp/$dt.check" 2>&1
    check "import $dt: exit 0, every value bit for bit as numpy converts it" '[ "$rc" = 0 ] && grep -q ": equal$" "$tmp/$dt.check"'
    cat "$tmp/$dt.check"
done
check "the F16 source held every finite F16 bit pattern (63488, 2046 subnormal)" 'grep -q "F16: 192832 values, 63488 distinct bit patterns, 2046 subnormal" "$tmp/f16.check"'
check "the BF16 source held every finite BF16 bit pattern (65280, 254 subnormal)" 'grep -q "BF16: 192832 values, 65280 distinct bit patterns, 254 subnormal" "$tmp/bf16.check"'

# shards: one file and the same tensors in shards, imported from the same path (config.ini names
# it as the origin of each [model] key), give byte-identical checkpoints
$PY $FIX write "$tmp/hf" --dtype mixed > /dev/null
"$tool" import "$tmp/hf" --out "$tmp/one" > /dev/null 2>&1
for n in 3 21; do
    rm -rf "$tmp/hf"
    $PY $FIX write "$tmp/hf" --dtype mixed --shards $n > /dev/null
    "$tool" import "$tmp/hf" --out "$tmp/sh$n" > "$tmp/sh$n.out" 2>&1; rc=$?
    check "import of $n shards + index: exit 0, '$n shards' reported" '[ "$rc" = 0 ] && grep -q "(llama, $n shards, 192832 parameters)" "$tmp/sh$n.out"'
    check "$n shards: the checkpoint equals the single file's byte for byte (model.bin, rank_00000.bin, config.ini, DONE)" \
        'diff -r "$tmp/one" "$tmp/sh$n" > /dev/null && [ -s "$tmp/sh$n/step_00000000/model.bin" ]'
    check "$n shards: every value bit for bit as numpy converts the shards" '$PY $FIX check "$tmp/sh$n/step_00000000" "$tmp/hf" | grep -q ": equal$"'
done
# model.safetensors, when present, is read (as transformers does) even beside a broken index
cp "$tmp/one/step_00000000/model.bin" "$tmp/one_model.bin"
$PY $FIX write "$tmp/both" --dtype mixed --shards 3 > /dev/null
$PY $FIX write "$tmp/both_one" --dtype mixed > /dev/null
mv "$tmp/both_one/model.safetensors" "$tmp/both/"
rm "$tmp/both/model-00002-of-00003.safetensors"
"$tool" import "$tmp/both" --out "$tmp/imp_both" > "$tmp/both.out" 2>&1; rc=$?
check "model.safetensors beside an index: the single file is read" '[ "$rc" = 0 ] && cmp -s "$tmp/imp_both/step_00000000/model.bin" "$tmp/one_model.bin" && ! grep -q shards "$tmp/both.out"'

# errors: one line naming the file and what is wrong, exit 1, nothing written
refused() {   # refused NAME PATTERN DIR: import of DIR fails as it should
    local name=$1 pat=$2 dir=$3
    rm -rf "$tmp/bad_out"
    "$tool" import "$dir" --out "$tmp/bad_out" > "$tmp/e.out" 2>&1; local rc=$?
    check "refused: $name: exit 1, one line, nothing written" '[ "$rc" = 1 ] && [ "$(wc -l < "$tmp/e.out")" = 1 ] && [ ! -e "$tmp/bad_out" ]'
    check "refused: $name: the message names it: $pat" 'grep -q "$pat" "$tmp/e.out"'
    sed 's/^/  /' "$tmp/e.out"
}
broken() {   # broken NAME CASE PATTERN [SHARDS]: a fixture damaged by safetensors_fixture.py break CASE
    local name=$1 case=$2 pat=$3 shards=${4:-3}
    rm -rf "$tmp/bad"
    $PY $FIX write "$tmp/bad" --dtype mixed --shards $shards > /dev/null
    $PY $FIX break "$tmp/bad" $case
    refused "$name" "$pat" "$tmp/bad"
}
I="$tmp/bad/model.safetensors.index.json"
broken "a missing shard" missing_shard "^error: import: $I: weight_map names the shard 'model-00002-of-00003.safetensors' (for tensor '.*'), which is not in $tmp/bad"
broken "a tensor in two shards" two_shards "^error: import: $I: tensor 'model.embed_tokens.weight' is in two shards, $tmp/bad/model-00001-of-00003.safetensors and $tmp/bad/model-00003-of-00003.safetensors"
broken "an entry naming a shard that lacks its tensor" wrong_map "^error: import: $I: weight_map maps tensor 'model.embed_tokens.weight' to 'model-00002-of-00003.safetensors', which does not hold it (it is in $tmp/bad/model-00001-of-00003.safetensors)"
broken "a shard's tensor the index does not list" unlisted "^error: import: $I: the shard $tmp/bad/model-00003-of-00003.safetensors holds tensor 'lm_head.weight', which weight_map does not list"
broken "an index without weight_map" no_weight_map "^error: import: $I: field \"weight_map\" is missing"
broken "an index entry twice" twice_in_index "^error: import: $I: weight_map lists tensor 'model.embed_tokens.weight' twice"
broken "neither model.safetensors nor an index" neither "^error: import: $tmp/bad: no weights: neither model.safetensors nor model.safetensors.index.json"
broken "a tensor twice in one header" twice_in_header "^error: import: $tmp/bad/model.safetensors: tensor 'model.layers.0.self_attn.q_proj.weight' appears twice in the header" 1

# inf and NaN weights: refused naming the file, the tensor and the element (raw bits set in the source)
poisoned() {   # poisoned DTYPE SHARDS NAME:INDEX:HEXBITS WHAT FILE
    local dt=$1 shards=$2 spec=$3 what=$4 file=$5
    rm -rf "$tmp/bad"
    $PY $FIX write "$tmp/bad" --dtype $dt --shards $shards --poison "$spec" > /dev/null
    local name=${spec%%:*} rest=${spec#*:}
    refused "$dt $what in $name" "^error: import: $tmp/bad/$file: tensor '$name' element ${rest%%:*} is $what: a weight that is not finite" "$tmp/bad"
}
poisoned f16 1 model.embed_tokens.weight:12345:7c00 inf model.safetensors
poisoned f16 1 lm_head.weight:65535:fc00 -inf model.safetensors
poisoned f16 1 model.layers.1.mlp.up_proj.weight:7:7e01 NaN model.safetensors
poisoned bf16 1 model.layers.0.self_attn.k_proj.weight:100:ffc0 NaN model.safetensors
poisoned bf16 1 model.norm.weight:3:7f80 inf model.safetensors
poisoned f32 1 model.layers.0.input_layernorm.weight:63:ff800000 -inf model.safetensors
poisoned f32 3 model.layers.1.mlp.down_proj.weight:0:7fc00000 NaN model-00002-of-00003.safetensors

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
