#!/bin/sh
# tests/test_config_errors.sh BIN: every bad config must be rejected with a clear message.
#
# For each tests/config_errors/*.ini (first line "# expect: <substring>") runs
#   BIN --config FILE --check
# and checks that it exits non-zero and that stderr contains the substring (fixed string).
# Also checks an unknown command-line override, a malformed override, a key without effect and an
# out-of-bounds value on the command line, a missing config file, and that every config in
# configs/ passes --check.
set -u
if [ $# -ne 1 ]; then
    echo "usage: $0 path/to/train_gpt" >&2
    exit 2
fi
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
pass=0
fail=0

# expect_fail NAME EXPECTED_SUBSTRING ARGS...: BIN ARGS must exit non-zero and print the substring
expect_fail() {
    name=$1; expect=$2; shift 2
    "$BIN" "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    if [ "$rc" -eq 0 ]; then
        echo "FAIL $name: exit status 0, expected non-zero"
        fail=$((fail + 1))
    elif [ "$rc" -gt 128 ]; then
        echo "FAIL $name: killed by signal $((rc - 128))"
        fail=$((fail + 1))
    elif ! grep -qF -- "$expect" "$TMP/err"; then
        echo "FAIL $name: stderr lacks: $expect"
        sed 's/^/    stderr: /' "$TMP/err"
        fail=$((fail + 1))
    elif [ "$(grep -c 'config error:' "$TMP/err")" -ne 1 ]; then
        echo "FAIL $name: expected exactly one 'config error:' line"
        sed 's/^/    stderr: /' "$TMP/err"
        fail=$((fail + 1))
    else
        pass=$((pass + 1))
    fi
}

# expect_fail_any NAME EXPECTED_SUBSTRING ARGS...: like expect_fail, for errors the trainer's own
# argument parsing may report before the config module sees them (any message format)
expect_fail_any() {
    name=$1; expect=$2; shift 2
    "$BIN" "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    if [ "$rc" -eq 0 ] || [ "$rc" -gt 128 ]; then
        echo "FAIL $name: exit status $rc, expected a non-zero exit"
        fail=$((fail + 1))
    elif ! grep -qF -- "$expect" "$TMP/err"; then
        echo "FAIL $name: stderr lacks: $expect"
        sed 's/^/    stderr: /' "$TMP/err"
        fail=$((fail + 1))
    else
        pass=$((pass + 1))
    fi
}

# expect_ok NAME ARGS...: BIN ARGS must exit 0
expect_ok() {
    name=$1; shift
    if "$BIN" "$@" >"$TMP/out" 2>"$TMP/err"; then
        pass=$((pass + 1))
    else
        echo "FAIL $name: exit status non-zero"
        sed 's/^/    stderr: /' "$TMP/err"
        fail=$((fail + 1))
    fi
}

n_files=0
for f in "$HERE"/config_errors/*.ini; do
    n_files=$((n_files + 1))
    first=$(head -n 1 "$f")
    case "$first" in
        "# expect: "*) expect=${first#"# expect: "} ;;
        *) echo "FAIL $(basename "$f"): first line is not '# expect: <substring>'"; fail=$((fail + 1)); continue ;;
    esac
    expect_fail "$(basename "$f")" "$expect" --config "$f" --check
done
if [ "$n_files" -eq 0 ]; then
    echo "FAIL no files in $HERE/config_errors"
    fail=$((fail + 1))
fi

good="$ROOT/configs/tiny_gated.ini"
expect_fail "override unknown key" "command line: [model] nope = 1: unknown key in [model]" \
    --config "$good" --check --model.nope=1
expect_fail "override near key" "(did you mean n_layer?)" --config "$good" --check --model.n_layyer=2
expect_fail "override unknown section" "unknown section [modle]" --config "$good" --check --modle.n_layer=2
expect_fail_any "override malformed" "model.n_layer" --config "$good" --check --model.n_layer
expect_fail "override bad value" "command line: [train] steps = ten: not an integer" \
    --config "$good" --check --train.steps=ten
expect_fail "override breaks a rule" "command line: [model] n_kv_head = 3: n_head (4, set at" \
    --config "$good" --check --model.n_kv_head=3
# a key without effect set on the command line is refused like one in a file; the setting that
# uses it makes it count
expect_fail "override without effect" \
    "command line: [model] yarn_attn_factor = 2: has no effect with rope_scaling = none (default): only yarn uses it" \
    --config "$good" --check --model.yarn_attn_factor=2
expect_ok "override with its setting" --config "$good" --check --model.rope_scaling=yarn --model.rope_factor=2 \
    --model.yarn_attn_factor=2
expect_fail "override out of bounds" "command line: [model] yarn_attn_factor = 1e+30: outside 0.25 .. 4" \
    --config "$good" --check --model.rope_scaling=yarn --model.rope_factor=2 --model.yarn_attn_factor=1e30
expect_fail "missing config file" "$TMP/no_such.ini: cannot open config file" --config "$TMP/no_such.ini" --check

for f in "$ROOT"/configs/*.ini "$ROOT"/configs/*/*.ini; do
    expect_ok "$(basename "$f") --check" --config "$f" --check
done
expect_ok "override fixes a bad file value" --config "$HERE/config_errors/steps_zero.ini" --check --train.steps=10

echo "test_config_errors: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
