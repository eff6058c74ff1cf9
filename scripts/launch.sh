#!/usr/bin/env bash
# scripts/launch.sh: a thin mpirun wrapper for data-parallel training (docs/distributed.md).
#
# usage: scripts/launch.sh [-n NP] [--hostfile FILE] [--threads T] [--dry-run] -- PROGRAM ARGS...
#   e.g. scripts/launch.sh -n 2 -- ./build/train_gpt --config configs/tiny_gated.ini
#
#   -n NP            processes (default 1; on a CPU, one per socket is the usual choice)
#   --hostfile FILE  Open MPI hostfile for a multi-node run (docs/distributed.md has an example)
#   --threads T      OpenMP threads per process (default: this machine's cores / NP, at least 1;
#                    exported to every rank as OMP_NUM_THREADS)
#   --dry-run        print the mpirun command and exit
#
# What it adds to mpirun: --oversubscribe when NP exceeds this machine's cores (tests, laptops);
# --allow-run-as-root when run as root (containers); on one node --bind-to none (Open MPI's
# default pins each rank to one core, which would stack a rank's OpenMP threads on it); with a
# hostfile --map-by socket:PE=T --bind-to core (each rank gets T cores of one socket);
# OMP_NUM_THREADS for every rank. Anything else goes straight to mpirun via MPIRUN_ARGS.
set -euo pipefail
die() { echo "launch: error: $*" >&2; exit 1; }
np=1 hostfile="" threads="" dry=0
while [ $# -gt 0 ]; do
    case "$1" in
        -n|-np|--np) [ $# -ge 2 ] || die "$1 needs a number"; np=$2; shift 2 ;;
        --hostfile) [ $# -ge 2 ] || die "--hostfile needs a file"; hostfile=$2; shift 2 ;;
        --threads) [ $# -ge 2 ] || die "--threads needs a number"; threads=$2; shift 2 ;;
        --dry-run) dry=1; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
        --) shift; break ;;
        *) die "unknown option '$1' (the program goes after --; see --help)" ;;
    esac
done
[ $# -gt 0 ] || die "no program given (e.g. scripts/launch.sh -n 2 -- ./build/train_gpt --config FILE)"
[[ "$np" =~ ^[1-9][0-9]*$ ]] || die "-n must be a positive integer, got '$np'"
[ -z "$hostfile" ] || [ -f "$hostfile" ] || die "hostfile '$hostfile' not found"
command -v mpirun >/dev/null 2>&1 || die "mpirun not found: apt-get install openmpi-bin libopenmpi-dev (scripts/deps.sh), then rebuild"
cores=$(nproc)
if [ -z "$threads" ]; then threads=$((cores / np)); [ "$threads" -ge 1 ] || threads=1; fi
[[ "$threads" =~ ^[1-9][0-9]*$ ]] || die "--threads must be a positive integer, got '$threads'"

args=(-np "$np" -x OMP_NUM_THREADS="$threads")
[ "$(id -u)" -ne 0 ] || args+=(--allow-run-as-root)
[ -z "$hostfile" ] || args+=(--hostfile "$hostfile")
if [ -z "$hostfile" ] && [ $((np * threads)) -gt "$cores" ]; then
    args+=(--oversubscribe --bind-to none)
elif [ -z "$hostfile" ]; then
    args+=(--bind-to none)   # one node, enough cores: let the OS place the OpenMP threads
else
    args+=(--map-by "socket:PE=$threads" --bind-to core)
fi
# shellcheck disable=SC2206
extra=(${MPIRUN_ARGS:-})
cmd=(mpirun "${args[@]}" ${extra[@]+"${extra[@]}"} "$@")
echo "launch: ${cmd[*]}" >&2
[ "$dry" -eq 0 ] || exit 0
exec "${cmd[@]}"
