#!/usr/bin/env bash
# scripts/ablate.sh: run every config of an ablation with the same seed and data, then compare
# them with scripts/report.py.
#
# usage: scripts/ablate.sh configs/ablations/NAME.txt [--steps N] [--np P] [--out DIR]
#                          [--build DIR] [-- --section.key=value ...]
#
#   NAME.txt     one config file per line, relative to configs/, optionally followed by
#                overrides for that run only (e.g. "tiny_gated.ini --train.lr=5e-3"; values
#                without spaces); blank lines and # comments allowed; NAME alone means
#                configs/ablations/NAME.txt
#   --steps N    override [train] steps of every run (--train.steps=N)
#   --np P       run each config under `mpirun -np P --oversubscribe` (P > 1)
#   --out DIR    where the runs and the report go (default runs/ablate_NAME); run X.ini goes to
#                DIR/X (its [log] run_dir), its console output to DIR/X/train.log; the report
#                to DIR/report.md and DIR/*.png
#   --build DIR  where train_gpt is (default build)
#   --tasks F1,F2  multiple-choice task files scored during every run ([eval] tasks; report.py
#                tabulates them); --eval.task_every=N after -- sets how often (default 100)
#   -- ...       further overrides, passed to every run (e.g. -- --train.lr=3e-3)
#
# First every config is checked (train_gpt --check with the same overrides): they must all load,
# and agree on [train] seed and the data ([data] train_glob, val_glob, shuffle), so that the runs
# differ only where the configs mean them to. Then the runs go one after another; a run that fails
# stops the ablation with an error naming it (its log: DIR/X/train.log). Non-interactive.
# Relative paths on the command line are relative to the current directory; the runs themselves
# start in the repository root (the configs' data paths are relative to it).
set -euo pipefail

die() { echo "ablate: error: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | grep '^#' | sed 's/^# \{0,1\}//'; }

list="" steps="" np=1 out="" build="build" tasks=""
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --steps) [ $# -ge 2 ] || die "--steps needs a number"; steps=$2; shift 2 ;;
        --steps=*) steps=${1#*=}; shift ;;
        --np) [ $# -ge 2 ] || die "--np needs a number"; np=$2; shift 2 ;;
        --np=*) np=${1#*=}; shift ;;
        --out) [ $# -ge 2 ] || die "--out needs a directory"; out=$2; shift 2 ;;
        --out=*) out=${1#*=}; shift ;;
        --build) [ $# -ge 2 ] || die "--build needs a directory"; build=$2; shift 2 ;;
        --build=*) build=${1#*=}; shift ;;
        --tasks) [ $# -ge 2 ] || die "--tasks needs a comma-separated list of task files"; tasks=$2; shift 2 ;;
        --tasks=*) tasks=${1#*=}; shift ;;
        --) shift; extra=("$@"); break ;;
        -*) die "unknown option '$1' (see --help)" ;;
        *) [ -z "$list" ] || die "one ablation list only (got '$list' and '$1'); overrides go after --"
           list=$1; shift ;;
    esac
done
[ -n "$list" ] || { usage >&2; die "no ablation list given (e.g. configs/ablations/tiny_gate.txt)"; }
[ -z "$steps" ] || [[ "$steps" =~ ^[1-9][0-9]*$ ]] || die "--steps must be a positive integer, got '$steps'"
[[ "$np" =~ ^[1-9][0-9]*$ ]] || die "--np must be a positive integer, got '$np'"
for o in ${extra[@]+"${extra[@]}"}; do
    [[ "$o" == --*.*=* ]] || die "extra argument '$o' is not an override --section.key=value"
    case "$o" in --log.run_dir=*) die "'$o': each run's run_dir is set by ablate.sh (use --out)" ;; esac
done

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
abspath() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
if [ ! -f "$list" ] && [ -f "$root/configs/ablations/$list.txt" ]; then list="$root/configs/ablations/$list.txt"; fi
[ -f "$list" ] || die "ablation list '$list' not found (expected configs/ablations/NAME.txt)"
list=$(abspath "$list")
name=$(basename "$list"); name=${name%.txt}
[ -n "$out" ] || out="$root/runs/ablate_$name"
out=$(abspath "$out")
build=$(abspath "$build")
if [ -n "$tasks" ]; then   # absolute paths (the runs start in the repository root), as [eval] tasks of every run
    abs_tasks=""
    IFS=, read -ra tlist <<< "$tasks"
    for t in "${tlist[@]}"; do [ -f "$t" ] || die "--tasks: '$t' not found"; abs_tasks+="${abs_tasks:+,}$(abspath "$t")"; done
    extra+=("--eval.tasks=$abs_tasks")
fi
cd "$root"

train="$build/train_gpt"
[ -x "$train" ] || die "$train not found or not executable: build it first (make)"
launch=()
if [ "$np" -gt 1 ]; then
    command -v mpirun >/dev/null 2>&1 || die "--np $np needs mpirun (Debian: openmpi-bin), which is not installed"
    launch=(mpirun -np "$np" --oversubscribe)
    [ "$(id -u)" -ne 0 ] || launch+=(--allow-run-as-root)
fi

# ---- the configs of the list ----
configs=() names=() own=()
lineno=0
while IFS= read -r line || [ -n "$line" ]; do
    lineno=$((lineno + 1))
    line=${line%%#*}
    line=$(echo "$line" | tr -d '\r' | sed 's/^[[:space:]]*//; s/[[:space:]]*$//')
    [ -n "$line" ] || continue
    read -r -a words <<<"$line"
    line=${words[0]}
    for o in "${words[@]:1}"; do
        [[ "$o" == --*.*=* ]] || die "$list:$lineno: '$o' is not an override --section.key=value"
        case "$o" in --log.run_dir=*) die "$list:$lineno: '$o': each run's run_dir is set by ablate.sh" ;; esac
    done
    [ -f "configs/$line" ] || die "$list:$lineno: configs/$line not found"
    n=$(basename "$line"); n=${n%.ini}
    for prev in ${names[@]+"${names[@]}"}; do
        [ "$prev" != "$n" ] || die "$list:$lineno: two configs named '$n' (each run directory is named after its config)"
    done
    configs+=("configs/$line"); names+=("$n"); own+=("${words[*]:1}")
done <"$list"
[ ${#configs[@]} -gt 0 ] || die "$list lists no configs"

common=()
[ -z "$steps" ] || common+=("--train.steps=$steps")
common+=(${extra[@]+"${extra[@]}"})

echo "ablate: $name: ${#configs[@]} runs (${names[*]}) -> $out"
[ ${#common[@]} -eq 0 ] || echo "ablate: overrides for every run: ${common[*]}"
[ ${#launch[@]} -eq 0 ] || echo "ablate: launcher: ${launch[*]}"

# ---- check every config first, and that they share the seed and the data ----
mkdir -p "$out" || die "cannot create $out"
chkdir=$(mktemp -d)
trap 'rm -rf "$chkdir"' EXIT
resolved() {  # value of [section] key in a resolved config dump (train_gpt --check output)
    awk -v sec="[$2]" -v key="$3" '
        /^\[/ { cur = $0; next }
        cur == sec && index($0, key " =") == 1 {
            v = substr($0, length(key) + 3); sub(/^ /, "", v); sub(/[ \t]+;.*$/, "", v); sub(/[ \t]+$/, "", v)
            print v; exit }' "$1"
}
same_keys=("train seed" "data train_glob" "data val_glob" "data shuffle")
for i in "${!configs[@]}"; do
    chk="$chkdir/${names[$i]}.ini"
    read -r -a mine <<<"${own[$i]}"
    if ! "$train" --config "${configs[$i]}" ${mine[@]+"${mine[@]}"} ${common[@]+"${common[@]}"} --log.run_dir="$out/${names[$i]}" --check \
            >"$chk" 2>"$chk.err"; then
        cat "$chk.err" >&2
        die "config ${configs[$i]} (run '${names[$i]}') does not load with these overrides; nothing was run"
    fi
    for sk in "${same_keys[@]}"; do
        sec=${sk% *} key=${sk#* }
        a=$(resolved "$chkdir/${names[0]}.ini" "$sec" "$key")
        b=$(resolved "$chk" "$sec" "$key")
        [ "$a" = "$b" ] || die "run '${names[$i]}' (${configs[$i]}) has [$sec] $key = '$b' but '${names[0]}' has '$a': an ablation compares runs on the same seed and data (fix the config or pass -- --$sec.$key=...)"
    done
done
seed=$(resolved "$chkdir/${names[0]}.ini" train seed)
data=$(resolved "$chkdir/${names[0]}.ini" data train_glob)
echo "ablate: all configs load; shared seed $seed, data $data"
# what differs from the first config (the baseline), as "[section] key = value"
keyvals() {
    awk '/^\[/ { sec = $0; next }
         /^[a-z_0-9]+ =/ { v = $0; sub(/[ \t]+;.*$/, "", v); sub(/[ \t]+$/, "", v)
                          if (v !~ /^run_dir =/) print sec " " v }' "$1"
}
for i in "${!configs[@]}"; do
    [ "$i" -gt 0 ] || continue
    d=$(diff <(keyvals "$chkdir/${names[0]}.ini") <(keyvals "$chkdir/${names[$i]}.ini") \
        | sed -n 's/^> //p' | paste -sd ';' | sed 's/;/; /g' || true)
    echo "ablate: ${names[$i]} differs from ${names[0]} in: ${d:-nothing (identical configs)}"
done

# ---- the runs ----
# line-buffered stdout (coreutils stdbuf) keeps the trainer's stdout and stderr in order in train.log
linebuf=()
! command -v stdbuf >/dev/null 2>&1 || linebuf=(stdbuf -oL)
dirs=()
t_all=$SECONDS
for i in "${!configs[@]}"; do
    n=${names[$i]}
    dir="$out/$n"
    mkdir -p "$dir"
    read -r -a mine <<<"${own[$i]}"
    cmd=("$train" --config "${configs[$i]}" ${mine[@]+"${mine[@]}"} ${common[@]+"${common[@]}"} --log.run_dir="$dir")
    echo "ablate: [$((i + 1))/${#configs[@]}] $n: ${launch[*]+${launch[*]} }${cmd[*]}"
    echo "ablate:   console output: $dir/train.log"
    t0=$SECONDS
    set +e
    ${launch[@]+"${launch[@]}"} ${linebuf[@]+"${linebuf[@]}"} "${cmd[@]}" </dev/null 2>&1 | tee "$dir/train.log" \
        | grep --line-buffered -E '^(model:|step |done:|warning|error|config error)' | sed -u "s/^/  [$n] /"
    rc=${PIPESTATUS[0]}
    set -e
    if [ "$rc" -ne 0 ]; then
        if grep -qE '^(error|config error|warning)' "$dir/train.log"; then
            echo "ablate: errors and warnings in $dir/train.log:" >&2
            grep -E '^(error|config error|warning)' "$dir/train.log" | tail -n 15 | sed 's/^/  | /' >&2
        else
            echo "ablate: last lines of $dir/train.log:" >&2
            tail -n 15 "$dir/train.log" | sed 's/^/  | /' >&2
        fi
        die "run '$n' (${configs[$i]}) failed with exit status $rc; the ablation stopped after $((i)) of ${#configs[@]} runs"
    fi
    [ -s "$dir/log.jsonl" ] || die "run '$n' (${configs[$i]}) exited 0 but wrote no $dir/log.jsonl"
    echo "ablate: [$((i + 1))/${#configs[@]}] $n done in $((SECONDS - t0)) s"
    dirs+=("$dir")
done
echo "ablate: ${#configs[@]} runs done in $((SECONDS - t_all)) s"

# ---- the report ----
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3 || true)
[ -n "$py" ] || die "python3 not found: install python3 python3-numpy python3-matplotlib, then run scripts/report.py ${dirs[*]} --out $out"
if ! "$py" "$root/scripts/report.py" "${dirs[@]}" --out "$out"; then
    die "the report failed (the runs are complete in $out); rerun it with: scripts/report.py ${dirs[*]} --out $out"
fi
echo "ablate: report: $out/report.md"
