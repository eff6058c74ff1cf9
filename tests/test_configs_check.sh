#!/usr/bin/env bash
# tests/test_configs_check.sh BIN: every shipped config says what it is, and `BIN --check` agrees.
#
# Each configs/*.ini and configs/paper/*.ini carries lines "# check: key=value ..." in its header
# comment, written by hand from the shapes (the arithmetic is in the same comment), never copied
# from the program's output. For each config this runs
#   BIN --config FILE --check
# and compares every stated pair with what it prints:
#   section.key=V    the resolved value of [section] key (numbers compared as numbers);
#   params_total=N   "params: total=N" (every parameter; tied embeddings counted once);
#   params_active=N  "params: ... active=N" (one token's: top_k of n_expert experts per MoE layer);
#   tokens=N         the token budget, [train] steps x tokens_per_step (after its derivation).
# Every config must state params_total, params_active, tokens and its shape: n_layer, d_model,
# n_head, n_kv_head, head_dim, vocab_size, attn_gate, and d_ff (dense) or n_expert, top_k and
# d_expert (MoE).
#
# The hand arithmetic, e.g. configs/paper/dense_1p7b_baseline.ini (dense, tied):
#   embedding 151936 x 2048 = 311,164,928; per layer wqkv (2048 + 1024 + 1024) x 2048 =
#   8,388,608, wo 2048 x 2048 = 4,194,304, SwiGLU 3 x 2048 x 6144 = 37,748,736, RMSNorms
#   2 x 2048 + QK-norms 2 x 128 = 4,352: 50,336,000; x 28 = 1,409,408,000; + final norm 2048
#   -> params_total = params_active = 1,720,574,976; tokens 95,367 x 4,194,304 = 399,998,189,568.
# configs/paper/moe_15b_a2b_baseline.ini (MoE, untied):
#   embedding + LM head 2 x 151936 x 2048 = 622,329,856; per layer wqkv (4096 + 512 + 512) x 2048
#   = 10,485,760, wo 4096 x 2048 = 8,388,608, router 128 x 2048 = 262,144, experts 128 x
#   (3 x 2048 x 768 = 4,718,592) = 603,979,776, norms 4,352: 623,120,640; x 24 + 622,329,856 +
#   2048 -> params_total = 15,577,227,264; active: per layer 18,874,368 + 262,144 + 8 x 4,718,592
#   + 4,352 = 56,889,600; x 24 + 622,329,856 + 2048 -> params_active = 1,987,682,304.
#
# Then the gated/baseline pairs of configs/paper: every file there belongs to a pair; a pair
# differs only in [model] attn_gate and d_ff (and run_dir); the dense pairs are parameter-matched
# to within 0.5% (the paper shrinks the gated model's FFN), the MoE pair differs by exactly the
# gate's n_layer x d_model x n_head x head_dim (the paper keeps the MoE's shape).
# Last, every configs/ablations/*.txt line must pass --check with its overrides and satisfy the
# list's own "# check:" pairs; the high-learning-rate lists of the paper run the 48-layer pair.
set -u
if [ $# -ne 1 ]; then
    echo "usage: $0 path/to/train_gpt" >&2
    exit 2
fi
BIN=$1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
pass=0
fail=0
check() { local what=$1; shift; if "$@"; then pass=$((pass + 1)); else echo "FAIL: $what"; fail=$((fail + 1)); fi; }

# resolve OUT ARGS...: BIN ARGS --check into OUT.raw, and OUT as "section.key=value" lines plus
# params_total=, params_active= and tokens=; returns BIN's exit status
resolve() {
    local out=$1; shift
    "$BIN" "$@" --check >"$out.raw" 2>"$out.err" </dev/null
    local rc=$?
    awk '/^\[[a-z]+\]$/ { sec = substr($0, 2, length($0) - 2); next }
         /^[a-z_0-9]+ =/ { k = $1; v = $0; sub(/^[^=]*= ?/, "", v); sub(/[ \t]+;.*$/, "", v); sub(/[ \t]+$/, "", v)
                           print sec "." k "=" v; next }
         /^params: total=[0-9]+ active=[0-9]+/ { split($2, t, "="); split($3, a, "=")
                           print "params_total=" t[2]; print "params_active=" a[2] }' "$out.raw" >"$out"
    local steps tps
    steps=$(get "$out" train.steps)
    tps=$(get "$out" train.tokens_per_step)
    if [[ "$steps" =~ ^[0-9]+$ && "$tps" =~ ^[0-9]+$ ]]; then echo "tokens=$((steps * tps))" >>"$out"; fi
    return $rc
}
# get MAP KEY: the value of KEY in a map written by resolve (empty if absent)
get() { awk -v k="$2" 'index($0, k "=") == 1 { print substr($0, length(k) + 2); found = 1; exit } END { exit !found }' "$1"; }
has() { get "$1" "$2" >/dev/null; }
# same A B: equal as numbers when both are numbers (4e-3 = 0.004), else as strings
same() {
    local num='^-?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$'
    if [[ "$1" =~ $num && "$2" =~ $num ]]; then awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 == b + 0) }'
    else [ "$1" = "$2" ]; fi
}
# stated FILE: the "key=value" words of FILE's "# check:" lines, one per line
stated() { sed -n 's/^# check://p' "$1" | tr -s ' \t' '\n\n' | sed '/^$/d'; }
# compare_stated NAME MAP FILE: every pair FILE states against MAP, one check each
compare_stated() {
    local name=$1 map=$2 file=$3 kv k v got
    while IFS= read -r kv; do
        if [[ "$kv" != *=* ]]; then
            check "$name: '# check:' word '$kv' is not key=value" false
            continue
        fi
        k=${kv%%=*} v=${kv#*=}
        if ! got=$(get "$map" "$k"); then
            check "$name: states $k, which --check does not print" false
            continue
        fi
        check "$name: $k = $got, its comment says $v" same "$got" "$v"
    done < <(stated "$file")
}

# ---- every config: its stated shape, parameters and token budget ----
n_configs=0
for f in "$ROOT"/configs/*.ini "$ROOT"/configs/paper/*.ini; do
    [ -f "$f" ] || continue
    n_configs=$((n_configs + 1))
    rel=${f#"$ROOT/configs/"}
    map="$TMP/$(echo "$rel" | tr '/' '_').map"
    resolve "$map" --config "$f"
    rc=$?
    check "$rel: --check exits 0 (rc $rc: $(head -c 300 "$map.err"))" [ $rc -eq 0 ]
    [ $rc -eq 0 ] || continue
    check "$rel: --check prints the parameter counts" has "$map" params_total
    words=$(stated "$f" | sed 's/=.*//')
    need="params_total params_active tokens model.n_layer model.d_model model.n_head model.n_kv_head model.head_dim model.vocab_size model.attn_gate"
    if [ "$(get "$map" moe.n_expert)" = 0 ]; then need="$need model.d_ff"; else need="$need moe.n_expert moe.top_k moe.d_expert"; fi
    missing=""
    for k in $need; do echo "$words" | grep -qxF "$k" || missing="$missing $k"; done
    check "$rel: its '# check:' lines state$missing" [ -z "$missing" ]
    compare_stated "$rel" "$map" "$f"
done
check "configs found (got $n_configs)" [ "$n_configs" -ge 10 ]

# ---- the gated/baseline pairs of configs/paper ----
pairs=("dense_1p7b" "dense_1p7b_48l" "sink_124m" "moe_15b_a2b")
for f in "$ROOT"/configs/paper/*.ini; do
    b=$(basename "$f" .ini); b=${b%_baseline}; b=${b%_gated}
    inpair=0
    for p in "${pairs[@]}"; do [ "$p" = "$b" ] && inpair=1; done
    check "paper/$(basename "$f") belongs to a gated/baseline pair this test knows" [ $inpair -eq 1 ]
done
for p in "${pairs[@]}"; do
    mb="$TMP/paper_${p}_baseline.ini.map" mg="$TMP/paper_${p}_gated.ini.map"
    if [ ! -s "$mb" ] || [ ! -s "$mg" ]; then check "paper/${p}_{baseline,gated}.ini both load" false; continue; fi
    check "paper/${p}: baseline has attn_gate = none" same "$(get "$mb" model.attn_gate)" none
    check "paper/${p}: gated has attn_gate = elementwise" same "$(get "$mg" model.attn_gate)" elementwise
    d=$(diff <(grep -vE '^(model\.attn_gate|model\.d_ff|log\.run_dir|params_total|params_active)=' "$mb") \
             <(grep -vE '^(model\.attn_gate|model\.d_ff|log\.run_dir|params_total|params_active)=' "$mg") | grep '^[<>]' | paste -sd ' ')
    check "paper/${p}: the pair differs only in attn_gate and d_ff (also: $d)" [ -z "$d" ]
    tb=$(get "$mb" params_total) tg=$(get "$mg" params_total)
    gate=$(( $(get "$mg" model.n_layer) * $(get "$mg" model.d_model) * $(get "$mg" model.n_head) * $(get "$mg" model.head_dim) ))
    if [ "$(get "$mb" moe.n_expert)" = 0 ]; then
        # |tg - tb| / tb <= 0.5%, in integers: 1000 x |tg - tb| <= 5 x tb
        dd=$((tg - tb)); [ $dd -ge 0 ] || dd=$((-dd))
        check "paper/${p}: gated $tg vs baseline $tb parameters within 0.5%" [ $((1000 * dd)) -le $((5 * tb)) ]
        check "paper/${p}: the gated FFN is narrower than the baseline's" [ "$(get "$mg" model.d_ff)" -lt "$(get "$mb" model.d_ff)" ]
    else
        check "paper/${p}: gated $tg = baseline $tb + the gate's $gate (unmatched, as the paper)" [ $((tg - tb)) -eq $gate ]
    fi
done

# ---- the ablation lists ----
n_lists=0
for list in "$ROOT"/configs/ablations/*.txt; do
    [ -f "$list" ] || continue
    n_lists=$((n_lists + 1))
    lname=$(basename "$list")
    n=0 lineno=0
    while IFS= read -r line || [ -n "$line" ]; do
        lineno=$((lineno + 1))
        line=${line%%#*}
        read -r -a words <<<"$line"
        [ ${#words[@]} -gt 0 ] || continue
        n=$((n + 1))
        cfg=${words[0]}
        where="$lname:$lineno ($cfg${words[1]+ ${words[*]:1}})"
        if [ ! -f "$ROOT/configs/$cfg" ]; then check "$where: configs/$cfg exists" false; continue; fi
        map="$TMP/list_${lname%.txt}_$lineno.map"
        resolve "$map" --config "$ROOT/configs/$cfg" "${words[@]:1}"
        rc=$?
        check "$where: --check exits 0 with the line's overrides (rc $rc: $(head -c 300 "$map.err"))" [ $rc -eq 0 ]
        [ $rc -eq 0 ] || continue
        compare_stated "$where" "$map" "$list"
        case "$lname" in
            paper_*highlr*) check "$where: the high-lr comparison runs the 48-layer pair" [ "$(get "$map" model.n_layer)" = 48 ] ;;
        esac
    done <"$list"
    check "$lname lists configs" [ $n -gt 0 ]
    case "$lname" in
        paper_*) check "$lname states its token budget ('# check: ... tokens=')" grep -qE '^# check:.* tokens=[0-9]+' "$list" ;;
    esac
done
check "ablation lists found (got $n_lists)" [ "$n_lists" -ge 5 ]

echo "test_configs_check: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
