#!/usr/bin/env bash
# tests/test_import_configs.sh BUILD_DIR: `gatedgpt_ckpt import` of config.json as transformers
# writes it (tests/hf_config_fixture.py: the keys and values transformers 5.25's save_pretrained
# writes for each class import reads, checked against transformers by `make interop`; tensors
# written by python3 + numpy, no torch):
#   classes    GPT-2, Llama, Qwen3, Qwen3-MoE (num_local_experts), Qwen2-MoE, Qwen3-Next dense,
#              hybrid (LLLA) and MoE (LA): exit 0, the [model]/[moe] values config.json gives,
#              and export of the import holds the source's tensors bit for bit
#   spelling 4 the same directories as transformers 4.57 spelled them (num_experts, top-level
#              rope_theta / partial_rotary_factor, no GPT-2 tie_word_embeddings): model.bin
#              byte-identical, the same [model]/[moe] values; GPT-2's attribute_map aliases
#              (hidden_size, num_hidden_layers, ...) the same too
#   defaults   what transformers takes for an absent field where it has a rule (Qwen3-Next's
#              norm_topk_prob true; rope_scaling before rope_parameters)
#   refusals   an architecture-deciding field absent (the expert count, head_dim, key-value
#              heads, GPT-2's width): one line naming every name looked for; two spellings that
#              disagree: one line naming both; exit 1, nothing written
# Needs only gatedgpt_ckpt and python3 with numpy (about 5 s).
set -uo pipefail
build=$1
tool="$build/gatedgpt_ckpt"
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
FIX=tests/hf_config_fixture.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
check() { if eval "$2"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1"; fi; }
# the [model] and [moe] lines of a checkpoint's config.ini without their origin comments
model_keys() { sed -n '/^\[model\]/,/^\[train\]/p' "$1/config.ini" | sed 's/ *;.*//'; }

for kind in gpt2 llama qwen3 qwen3_moe qwen2_moe qwen3_next hybrid qwen3_next_moe; do
    $PY $FIX write "$tmp/$kind" $kind > /dev/null
    "$tool" import "$tmp/$kind" --out "$tmp/imp_$kind" > "$tmp/$kind.out" 2>&1; rc=$?
    check "$kind (transformers 5.25's config.json): import exits 0" '[ "$rc" = 0 ]'
    [ "$rc" = 0 ] || cat "$tmp/$kind.out"
    $PY $FIX expect "$tmp/imp_$kind/step_00000000" $kind > "$tmp/$kind.expect" 2>&1
    check "$kind: the [model]/[moe] values config.json gives" 'grep -q "as config.json gives$" "$tmp/$kind.expect"'
    cat "$tmp/$kind.expect"
    "$tool" export "$tmp/imp_$kind/step_00000000" --out "$tmp/exp_$kind" > /dev/null 2>&1
    $PY $FIX roundtrip "$tmp/$kind" "$tmp/exp_$kind" > "$tmp/$kind.rt" 2>&1
    check "$kind: export of the import holds the source's tensors bit for bit" 'grep -q "bit for bit$" "$tmp/$kind.rt"'
    cat "$tmp/$kind.rt"
    # the same model as transformers 4.57 spelled its config.json
    $PY $FIX write "$tmp/${kind}_4" $kind --spelling 4 > /dev/null
    "$tool" import "$tmp/${kind}_4" --out "$tmp/imp4_$kind" > "$tmp/${kind}_4.out" 2>&1; rc=$?
    check "$kind (transformers 4.57's spelling): exit 0, model.bin byte-identical, the same [model]/[moe] values" \
        '[ "$rc" = 0 ] && cmp -s "$tmp/imp_$kind/step_00000000/model.bin" "$tmp/imp4_$kind/step_00000000/model.bin" &&
         [ "$(model_keys "$tmp/imp_$kind/step_00000000")" = "$(model_keys "$tmp/imp4_$kind/step_00000000")" ]'
done
check "the Qwen3-MoE fixture spells the expert count as transformers 5.25 does (num_local_experts only)" \
    'grep -q "\"num_local_experts\": 4" "$tmp/qwen3_moe/config.json" && ! grep -q "\"num_experts\"" "$tmp/qwen3_moe/config.json" &&
     grep -q "\"num_experts\": 4" "$tmp/qwen3_moe_4/config.json"'

# GPT-2's config class maps hidden_size, num_hidden_layers, num_attention_heads and
# max_position_embeddings onto n_embd, n_layer, n_head, n_positions (attribute_map)
$PY $FIX write "$tmp/gpt2_alias" gpt2 --drop n_embd --drop n_layer --drop n_head --drop n_positions \
    --set hidden_size=64 --set num_hidden_layers=2 --set num_attention_heads=4 --set max_position_embeddings=64 > /dev/null
"$tool" import "$tmp/gpt2_alias" --out "$tmp/imp_gpt2_alias" > /dev/null 2>&1; rc=$?
check "gpt2 with attribute_map's names (hidden_size, ...): model.bin byte-identical, the same values" \
    '[ "$rc" = 0 ] && cmp -s "$tmp/imp_gpt2/step_00000000/model.bin" "$tmp/imp_gpt2_alias/step_00000000/model.bin" &&
     [ "$(model_keys "$tmp/imp_gpt2/step_00000000")" = "$(model_keys "$tmp/imp_gpt2_alias/step_00000000")" ]'

# absent fields transformers fills by a rule: Qwen3-Next's norm_topk_prob is true
$PY $FIX write "$tmp/next_nt" qwen3_next_moe --drop norm_topk_prob > /dev/null
"$tool" import "$tmp/next_nt" --out "$tmp/imp_next_nt" > /dev/null 2>&1; rc=$?
check "qwen3_next_moe without norm_topk_prob: imported (Qwen3NextConfig's default is true)" '[ "$rc" = 0 ]'
# rope_scaling (transformers 4's name) replaces rope_parameters when both are there, as in
# transformers 5 (AutoConfig reads this one as {rope_type linear, factor 2, rope_theta 10000}:
# rope_parameters' theta 50000 is dropped with it)
$PY $FIX write "$tmp/llama_rs" llama --set 'rope_scaling={"rope_type": "linear", "factor": 2.0}' > /dev/null
"$tool" import "$tmp/llama_rs" --out "$tmp/imp_llama_rs" > /dev/null 2>&1; rc=$?
check "llama with rope_scaling beside rope_parameters: rope_scaling's linear factor 2, theta 10000 as transformers reads it" \
    '[ "$rc" = 0 ] && grep -q "^rope_scaling = linear " "$tmp/imp_llama_rs/step_00000000/config.ini" &&
     grep -q "^rope_factor = 2 " "$tmp/imp_llama_rs/step_00000000/config.ini" && grep -q "^rope_base = 10000 " "$tmp/imp_llama_rs/step_00000000/config.ini"'

# refusals: one line naming the field(s), exit 1, nothing written
refused() {   # refused NAME PATTERN KIND FIXTURE-OPTIONS...
    local name=$1 pat=$2 kind=$3; shift 3
    rm -rf "$tmp/bad" "$tmp/bad_out"
    $PY $FIX write "$tmp/bad" $kind "$@" > /dev/null
    "$tool" import "$tmp/bad" --out "$tmp/bad_out" > "$tmp/e.out" 2>&1; local rc=$?
    check "refused: $name: exit 1, one line, nothing written" '[ "$rc" = 1 ] && [ "$(wc -l < "$tmp/e.out")" = 1 ] && [ ! -e "$tmp/bad_out" ]'
    check "refused: $name: the message names it: $pat" 'grep -q "$pat" "$tmp/e.out"'
    sed 's/^/  /' "$tmp/e.out"
}
C="^error: import: $tmp/bad/config.json:"
refused "Qwen3-MoE without an expert count" "$C field \"num_local_experts\" (or \"num_experts\") is missing: the expert count decides which layers are MoE" \
    qwen3_moe --drop num_local_experts
refused "Qwen3-MoE's two spellings disagreeing" "$C fields \"num_local_experts\" (4) and \"num_experts\" (8) are the same setting and disagree" \
    qwen3_moe --set num_experts=8
refused "Qwen3-Next MoE without num_experts" "$C field \"num_experts\" is missing: the expert count decides which layers are MoE" \
    qwen3_next_moe --drop num_experts
refused "Qwen2-MoE without num_experts" "$C field \"num_experts\" is missing" qwen2_moe --drop num_experts
refused "Qwen3 without head_dim" "$C field \"head_dim\" is missing: transformers' default for this class is one model size's" qwen3 --drop head_dim
refused "Qwen3-MoE without num_key_value_heads" "$C field \"num_key_value_heads\" is missing" qwen3_moe --drop num_key_value_heads
refused "GPT-2 without its width" "$C field \"n_embd\" (or \"hidden_size\") is missing" gpt2 --drop n_embd
refused "Qwen3-MoE without norm_topk_prob (its default is false)" "$C norm_topk_prob: gatedgpt renormalises the top-k weights" \
    qwen3_moe --drop norm_topk_prob
refused "rope_parameters per layer type" "$C full_attention: RoPE parameters per layer type are not mapped" \
    qwen3 --set 'rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 10000.0}}'

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
