#!/usr/bin/env bash
# bench/bench_prepare.sh: `make bench`'s prepare part: encoding throughput of `prepare -j 1` and
# `-j 2` side by side on the same text (the KJV train text repeated to --mb MB, our tokenizer.bin
# from scripts/prepare_kjv.sh), their ratio, and that both runs wrote the same shard bytes. With
# --rss-gb G also the peak resident memory (/usr/bin/time -v) of -j 2 on a G GB input, against the
# bound docs/performance.md states (4 x shard tokens + (2N + 1) x 5 x batch bytes + tokenizers).
# On a machine shared with other work the ratio is low: say so when quoting it.
#
# usage: bench/bench_prepare.sh [--build DIR] [--mb 200] [--rss-gb 0]
set -euo pipefail
build=build
mb=200
rss_gb=0
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build=$2; shift 2 ;;
        --mb) mb=$2; shift 2 ;;
        --rss-gb) rss_gb=$2; shift 2 ;;
        -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench_prepare: error: unknown argument '$1' (see --help)" >&2; exit 1 ;;
    esac
done
[[ "$mb" =~ ^[1-9][0-9]*$ ]] || { echo "bench_prepare: error: --mb must be a positive integer, got '$mb'" >&2; exit 1; }
[[ "$rss_gb" =~ ^[0-9]+$ ]] || { echo "bench_prepare: error: --rss-gb must be an integer >= 0, got '$rss_gb'" >&2; exit 1; }
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ -x "$build/prepare" ] || { echo "bench_prepare: error: $build/prepare missing: run make build first" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "bench_prepare: error: /usr/bin/time missing: apt-get install time" >&2; exit 1; }
bash scripts/prepare_kjv.sh "$build/prepare" > /dev/null
work="$build/bench-prepare"
mkdir -p "$work"
tok=data/kjv/tokenizer.bin

# the KJV train text repeated to at least MB megabytes (its documents stay documents)
make_input() {  # MB PATH
    local want=$(($1 * 1000000)) path=$2
    [ -f "$path" ] && [ "$(stat -c %s "$path")" -ge "$want" ] && return 0
    : > "$path.tmp"
    while [ "$(stat -c %s "$path.tmp")" -lt "$want" ]; do
        cat data/kjv/train.txt >> "$path.tmp"
        echo "<|endoftext|>" >> "$path.tmp"
    done
    mv "$path.tmp" "$path"
}

# run J IN OUT: seconds of wall time and peak RSS (KB) of prepare -j J
run() {
    local j=$1 in=$2 out=$3
    rm -rf "$out"
    /usr/bin/time -v "$build/prepare" --train "$in" --tokenizer "$tok" --out "$out" -j "$j" --quiet \
        > "$out.log" 2> "$out.time" || { echo "bench_prepare: error: prepare -j $j failed:" >&2; tail -5 "$out.time" >&2; exit 1; }
    local wall rss
    wall=$(sed -nE 's/.*Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (.*)$/\1/p' "$out.time" |
           awk -F: '{ s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; print s }')
    rss=$(sed -nE 's/.*Maximum resident set size \(kbytes\): ([0-9]+)$/\1/p' "$out.time")
    echo "$wall $rss"
}

in="$work/kjv_${mb}mb.txt"
make_input "$mb" "$in"
bytes=$(stat -c %s "$in")
echo "bench_prepare: $in ($((bytes / 1000000)) MB), tokenizer $tok, $(nproc) cores online"
read -r w1 r1 < <(run 1 "$in" "$work/j1")
read -r w2 r2 < <(run 2 "$in" "$work/j2")
same=yes
for f in "$work"/j1/train_*.bin; do cmp -s "$f" "$work/j2/$(basename "$f")" || same=NO; done
[ "$(ls "$work/j1" | grep -c '^train_')" = "$(ls "$work/j2" | grep -c '^train_')" ] || same=NO
awk -v b="$bytes" -v w1="$w1" -v w2="$w2" -v r1="$r1" -v r2="$r2" -v same="$same" 'BEGIN {
    printf "  -j 1: %7.2f s  %7.1f MB/s  peak RSS %6.0f MB\n", w1, b / 1e6 / w1, r1 / 1024
    printf "  -j 2: %7.2f s  %7.1f MB/s  peak RSS %6.0f MB\n", w2, b / 1e6 / w2, r2 / 1024
    printf "  -j 2 / -j 1 throughput: %.2fx; shards byte-identical: %s\n", w1 / w2, same }'
[ "$same" = yes ] || { echo "bench_prepare: error: -j 1 and -j 2 wrote different shards" >&2; exit 1; }
rm -rf "$work/j1" "$work/j2"

if [ "$rss_gb" -gt 0 ]; then
    big="$work/kjv_${rss_gb}gb.txt"
    make_input "$((rss_gb * 1000))" "$big"
    read -r wb rb < <(run 2 "$big" "$work/big")
    # the bound (docs/performance.md): the shard buffer (4 bytes a token, 100M tokens by default),
    # 2N + 1 batches of text and ids (5 x 1 MiB each, N = 2), two tokenizers and the counts; +64 MB
    # for the program, libraries and allocator slack
    bound=$(( (400000000 + 5 * 5 * 1048576 + 64000000) / 1048576 ))
    echo "  -j 2 on $(( $(stat -c %s "$big") / 1000000 )) MB: ${wb} s, peak RSS $((rb / 1024)) MB (bound ${bound} MB): $( [ $((rb / 1024)) -le $bound ] && echo within || echo EXCEEDED)"
    rm -rf "$work/big"
    [ $((rb / 1024)) -le $bound ] || exit 1
fi
