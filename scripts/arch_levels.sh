# Sourced by scripts/test_arches.sh, golden_spread.sh and learning_margins.sh:
# what each x86-64 level of a build in build-arch/LEVEL needs.
#   arch_can_run LEVEL   0 when this CPU can run code built for LEVEL
#   arch_coretype LEVEL  the OpenBLAS kernels of a CPU of that level
#                        (empty for native: OpenBLAS' own choice)

arch_can_run() {
    case "$1" in
    x86-64-v2) flags="sse4_2 popcnt" ;;
    x86-64-v3) flags="avx2 fma bmi2 movbe" ;;
    x86-64-v4) flags="avx512f avx512bw avx512vl avx512dq avx512cd" ;;
    *) return 0 ;;
    esac
    for f in $flags; do
        grep -qw "$f" /proc/cpuinfo || return 1
    done
}

arch_coretype() {
    case "$1" in
    x86-64-v2) echo Nehalem ;;
    x86-64-v3) echo Haswell ;;
    x86-64-v4) echo SkylakeX ;;
    *) echo "" ;;
    esac
}
