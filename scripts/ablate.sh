#!/usr/bin/env bash
# scripts/ablate.sh: run every config of an ablation with the same seed and data, then compare
# them with scripts/report.py.
#
# usage: scripts/ablate.sh configs/ablations/NAME.txt [--steps N] [--np P] [--out DIR]
#                          [--lrs LR,LR,...] [--seeds S,S,...] [--build DIR]
#                          [-- --section.key=value ...]
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
#   --lrs LIST   a learning-rate sweep: comma-separated values > 0 (e.g. 1e-3,3e-3,1e-2), each
#                crossed with every config of the list (--train.lr=VALUE); run X.ini at lr V
#                goes to DIR/X_lrV (V as written). The list and the overrides must not set
#                [train] lr then. report.py draws final loss against lr and the LR sensitivity
#   --seeds LIST a seed sweep: comma-separated integers, crossed the same way (--train.seed=S);
#                DIR/X_sS, or DIR/X_lrV_sS with --lrs. Runs go seed by seed, lr by lr, the
#                configs of the list innermost
#   --build DIR  where train_gpt is (default build)
#   --tasks F1,F2  multiple-choice task files scored during every run ([eval] tasks; report.py
#                tabulates them); --eval.task_every=N after -- sets how often (default 100)
#   -- ...       further overrides, passed to every run (e.g. -- --train.lr=3e-3)
#
# First every config is checked (train_gpt --check with the same overrides): they must all load,
# and agree on [train] seed and the data ([data] train_glob, val_glob, shuffle), so that the runs
# differ only where the configs mean them to (the seed: among runs of the same --seeds value).
# Then the runs go one after another; a run that fails stops the ablation with an error naming it
# (its log: DIR/X/train.log), except a run the trainer stopped for non-finite losses ("N
# non-finite steps in a row"): that run diverged, which is a result (report.py counts it as
# such), so the ablation goes on. Non-interactive.
# Relative paths on the command line are relative to the current directory; the runs themselves
# start in the repository root (the configs' data paths are relative to it).
set -euo pipefail

die() { echo "ablate: error: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | grep '^#' | sed 's/^# \{0,1\}//'; }

list="" steps="" np=1 out="" build="build" tasks="" lrs="" seeds=""
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
        --lrs) [ $# -ge 2 ] || die "--lrs needs a comma-separated list of learning rates"; lrs=$2; shift 2 ;;
        --lrs=*) lrs=${1#*=}; shift ;;
        --seeds) [ $# -ge 2 ] || die "--seeds needs a comma-separated list of seeds"; seeds=$2; shift 2 ;;
        --seeds=*) seeds=${1#*=}; shift ;;
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
# the sweeps: lr_list (the values as written, for the run names) and seed_list; "" = no sweep
lr_list=() seed_list=()
if [ -n "$lrs" ]; then
    IFS=, read -r -a lr_list <<<"$lrs"
    [ ${#lr_list[@]} -gt 0 ] || die "--lrs '$lrs' lists no learning rate"
    for v in "${lr_list[@]}"; do
        [[ "$v" =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$ ]] \
            || die "--lrs: '$v' is not a number (write e.g. --lrs 1e-3,3e-3,1e-2, no spaces)"
        awk -v x="$v" 'BEGIN { exit !(x + 0 > 0) }' || die "--lrs: '$v' is not > 0"
    done
    dup=$(printf '%s\n' "${lr_list[@]}" | awk '{ v = sprintf("%.9g", $1 + 0); if (v in seen) { print seen[v] " and " $1; exit } seen[v] = $1 }')
    [ -z "$dup" ] || die "--lrs: $dup are the same learning rate"
fi
if [ -n "$seeds" ]; then
    IFS=, read -r -a seed_list <<<"$seeds"
    [ ${#seed_list[@]} -gt 0 ] || die "--seeds '$seeds' lists no seed"
    for v in "${seed_list[@]}"; do
        [[ "$v" =~ ^[0-9]+$ ]] || die "--seeds: '$v' is not a non-negative integer (write e.g. --seeds 1337,2024, no spaces)"
    done
    dup=$(printf '%s\n' "${seed_list[@]}" | sed 's/^0*\([0-9]\)/\1/' | sort | uniq -d | head -1)
    [ -z "$dup" ] || die "--seeds: seed $dup is listed twice"
fi
# an override that sets what a sweep sets would be silently replaced: refuse it ($1: where it is)
sweep_clash() {
    case "$2" in
        --train.lr=*) [ -z "$lrs" ] || die "$1'$2' sets [train] lr, which --lrs sweeps (drop one of them)" ;;
        --train.seed=*) [ -z "$seeds" ] || die "$1'$2' sets [train] seed, which --seeds sweeps (drop one of them)" ;;
    esac
}
for o in ${extra[@]+"${extra[@]}"}; do
    [[ "$o" == --*.*=* ]] || die "extra argument '$o' is not an override --section.key=value"
    case "$o" in --log.run_dir=*) die "'$o': each run's run_dir is set by ablate.sh (use --out)" ;; esac
    sweep_clash "" "$o"
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
        sweep_clash "$list:$lineno: " "$o"
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

# ---- the runs: every config crossed with the sweeps (seed outermost, then lr, the configs
# innermost); run_cfg: index into configs, run_sweep: its --train.lr / --train.seed overrides ----
lr_axis=("") seed_axis=("")
[ ${#lr_list[@]} -eq 0 ] || lr_axis=("${lr_list[@]}")
[ ${#seed_list[@]} -eq 0 ] || seed_axis=("${seed_list[@]}")
run_cfg=() run_name=() run_sweep=() run_seedref=()
for si in "${!seed_axis[@]}"; do
    s=${seed_axis[$si]}
    for lv in "${lr_axis[@]}"; do
        for i in "${!configs[@]}"; do
            n=${names[$i]} sw=""
            [ -z "$lv" ] || { n+="_lr$lv"; sw+=" --train.lr=$lv"; }
            [ -z "$s" ] || { n+="_s$s"; sw+=" --train.seed=$s"; }
            run_cfg+=("$i"); run_name+=("$n"); run_sweep+=("$sw")
            run_seedref+=($((si * ${#lr_axis[@]} * ${#configs[@]})))   # the first run of its seed
        done
    done
done
nrun=${#run_name[@]}

echo "ablate: $name: $nrun runs (${run_name[*]}) -> $out"
[ ${#lr_list[@]} -eq 0 ] || echo "ablate: learning-rate sweep: ${lr_list[*]} (x ${#configs[@]} configs)"
[ ${#seed_list[@]} -eq 0 ] || echo "ablate: seeds: ${seed_list[*]}"
[ ${#common[@]} -eq 0 ] || echo "ablate: overrides for every run: ${common[*]}"
[ ${#launch[@]} -eq 0 ] || echo "ablate: launcher: ${launch[*]}"

# the command line of run r (without the launcher): config, its line's overrides, the common
# overrides, the sweep's, the run directory
run_cmd() {
    local i=${run_cfg[$1]} mine sw
    read -r -a mine <<<"${own[$i]}"
    read -r -a sw <<<"${run_sweep[$1]}"
    cmd=("$train" --config "${configs[$i]}" ${mine[@]+"${mine[@]}"} ${common[@]+"${common[@]}"} \
         ${sw[@]+"${sw[@]}"} --log.run_dir="$out/${run_name[$1]}")
}

# ---- check every run first, and that they share the seed and the data ----
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
for r in $(seq 0 $((nrun - 1))); do
    i=${run_cfg[$r]}
    chk="$chkdir/${run_name[$r]}.ini"
    run_cmd "$r"
    if ! "${cmd[@]}" --check >"$chk" 2>"$chk.err"; then
        cat "$chk.err" >&2
        die "config ${configs[$i]} (run '${run_name[$r]}') does not load with these overrides; nothing was run"
    fi
    for sk in "${same_keys[@]}"; do
        sec=${sk% *} key=${sk#* }
        ref=0
        [ "$sk" != "train seed" ] || ref=${run_seedref[$r]}   # runs of another --seeds value differ in it
        a=$(resolved "$chkdir/${run_name[$ref]}.ini" "$sec" "$key")
        b=$(resolved "$chk" "$sec" "$key")
        [ "$a" = "$b" ] || die "run '${run_name[$r]}' (${configs[$i]}) has [$sec] $key = '$b' but '${run_name[$ref]}' has '$a': an ablation compares runs on the same seed and data (fix the config or pass -- --$sec.$key=...)"
    done
done
seed=$(resolved "$chkdir/${run_name[0]}.ini" train seed)
data=$(resolved "$chkdir/${run_name[0]}.ini" data train_glob)
if [ ${#seed_list[@]} -eq 0 ]; then
    echo "ablate: all configs load; shared seed $seed, data $data"
else
    echo "ablate: all configs load; seeds ${seed_list[*]}, data $data"
fi
# what differs from the first config (the baseline), as "[section] key = value"; runs 0 .. the
# number of configs - 1 are the configs at the first lr and seed
keyvals() {
    awk '/^\[/ { sec = $0; next }
         /^[a-z_0-9]+ =/ { v = $0; sub(/[ \t]+;.*$/, "", v); sub(/[ \t]+$/, "", v)
                          if (v !~ /^run_dir =/) print sec " " v }' "$1"
}
for i in "${!configs[@]}"; do
    [ "$i" -gt 0 ] || continue
    d=$(diff <(keyvals "$chkdir/${run_name[0]}.ini") <(keyvals "$chkdir/${run_name[$i]}.ini") \
        | sed -n 's/^> //p' | paste -sd ';' | sed 's/;/; /g' || true)
    echo "ablate: ${names[$i]} differs from ${names[0]} in: ${d:-nothing (identical configs)}"
done

# ---- the runs ----
# line-buffered stdout (coreutils stdbuf) keeps the trainer's stdout and stderr in order in train.log
linebuf=()
! command -v stdbuf >/dev/null 2>&1 || linebuf=(stdbuf -oL)
dirs=() diverged=()
t_all=$SECONDS
for r in $(seq 0 $((nrun - 1))); do
    i=${run_cfg[$r]}
    n=${run_name[$r]}
    dir="$out/$n"
    mkdir -p "$dir"
    run_cmd "$r"
    echo "ablate: [$((r + 1))/$nrun] $n: ${launch[*]+${launch[*]} }${cmd[*]}"
    echo "ablate:   console output: $dir/train.log"
    t0=$SECONDS
    set +e
    ${launch[@]+"${launch[@]}"} ${linebuf[@]+"${linebuf[@]}"} "${cmd[@]}" </dev/null 2>&1 | tee "$dir/train.log" \
        | grep --line-buffered -E '^(model:|step |done:|warning|error|config error)' | sed -u "s/^/  [$n] /"
    rc=${PIPESTATUS[0]}
    set -e
    if [ "$rc" -ne 0 ] && grep -qE '^error: [0-9]+ non-finite steps in a row: stopping' "$dir/train.log" \
            && [ -s "$dir/log.jsonl" ]; then
        # diverged: a result of the ablation (a learning rate too high), not a failure of it
        echo "ablate: [$((r + 1))/$nrun] $n diverged (stopped on non-finite losses) after $((SECONDS - t0)) s; going on"
        diverged+=("$n")
        dirs+=("$dir")
        continue
    fi
    if [ "$rc" -ne 0 ]; then
        if grep -qE '^(error|config error|warning)' "$dir/train.log"; then
            echo "ablate: errors and warnings in $dir/train.log:" >&2
            grep -E '^(error|config error|warning)' "$dir/train.log" | tail -n 15 | sed 's/^/  | /' >&2
        else
            echo "ablate: last lines of $dir/train.log:" >&2
            tail -n 15 "$dir/train.log" | sed 's/^/  | /' >&2
        fi
        die "run '$n' (${configs[$i]}) failed with exit status $rc; the ablation stopped after $r of $nrun runs"
    fi
    [ -s "$dir/log.jsonl" ] || die "run '$n' (${configs[$i]}) exited 0 but wrote no $dir/log.jsonl"
    echo "ablate: [$((r + 1))/$nrun] $n done in $((SECONDS - t0)) s"
    dirs+=("$dir")
done
echo "ablate: $nrun runs done in $((SECONDS - t_all)) s${diverged[0]+ (diverged: ${diverged[*]})}"

# ---- the report ----
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3 || true)
[ -n "$py" ] || die "python3 not found: install python3 python3-numpy python3-matplotlib, then run scripts/report.py ${dirs[*]} --out $out"
if ! "$py" "$root/scripts/report.py" "${dirs[@]}" --out "$out"; then
    die "the report failed (the runs are complete in $out); rerun it with: scripts/report.py ${dirs[*]} --out $out"
fi
echo "ablate: report: $out/report.md"
