#!/usr/bin/env bash
# tests/isa.sh TRAIN_GPT: prints the second CPU instruction set the tolerance-sensitive tests run
# under on this host (oneDNN's ONEDNN_MAX_CPU_ISA value, one level below the host's best: AVX2 on
# an AVX-512 host, AVX on an AVX2 host, SSE41 on an AVX host), or nothing when the binary does not
# use oneDNN (OpenBLAS ignores the variable) or the host has nothing lower. The sums of a GEMM are
# blocked differently at each ISA, so a bound set from one ISA's roundoff is checked at two.
# Sourced by tests, or run: `bash tests/isa.sh build/train_gpt`.
isa_second() {
    local bin=$1 flags
    ldd "$bin" 2>/dev/null | grep -q 'libdnnl' || return 0
    flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
    case " $flags " in
        *" avx512f "*) echo AVX2 ;;
        *" avx2 "*)    echo AVX ;;
        *" avx "*)     echo SSE41 ;;
    esac
}
if [ "${BASH_SOURCE[0]}" = "$0" ] && [ "${1:-}" != "--run" ]; then isa_second "$1"; fi
# bash tests/isa.sh --run BIN [ARGS...]: BIN ARGS under the second ISA (its name printed first), or
# a line saying there is none and exit 0.
if [ "${BASH_SOURCE[0]}" = "$0" ] && [ "${1:-}" = "--run" ]; then
    shift
    isa=$(isa_second "$1")
    if [ -z "$isa" ]; then echo "skipped: no lower oneDNN ISA on this host or build (tests/isa.sh)"; echo "0 passed, 0 failed"; exit 0; fi
    echo "ONEDNN_MAX_CPU_ISA=$isa"
    ONEDNN_MAX_CPU_ISA=$isa exec "$@"
fi
