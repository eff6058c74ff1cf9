# tests/mpi_common.sh: sourced by the tests that launch train_gpt under mpirun
# (test_mpi_train.sh, test_elastic_resume.sh, test_expert_parallel.sh, test_planner.sh) once
# they have set `build` and changed to the repository root. It sets mpirun up for root with one
# OpenMP thread a rank, picks the python, makes the scratch directory $TMP (each test sets its
# own trap to remove it), and defines the pass / fail counters with check(), mpi_require (exit 0,
# "skipped", without mpirun) and kjv_shards (the demo corpus's shards, scripts/prepare_kjv.sh).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
TMP=$(mktemp -d)
pass=0 fail=0
# check WHAT COMMAND...: counts COMMAND's success; names WHAT when it fails
check() { local what=$1; shift; if "$@"; then pass=$((pass + 1)); else echo "FAIL: $what"; fail=$((fail + 1)); fi; }
mpi_require() {
    if ! command -v mpirun >/dev/null 2>&1; then
        rm -rf "$TMP"
        echo "skipped: mpirun not installed (apt-get install openmpi-bin)"
        exit 0
    fi
}
kjv_shards() { bash scripts/prepare_kjv.sh "$build/prepare" >/dev/null || { echo "FAIL: prepare_kjv.sh"; exit 1; }; }
