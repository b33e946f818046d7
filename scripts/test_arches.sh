#!/bin/sh
# Builds bf for several x86-64 instruction sets and runs the tests in each
# build, so that no test holds a number only one CPU computes (golden values,
# learning thresholds). Each build also asks OpenBLAS for the kernels of a CPU
# of that level, since OpenBLAS picks its kernels at run time, not at -march:
#
#   x86-64-v2  SSE4.2, no FMA          OPENBLAS_CORETYPE=Nehalem
#   x86-64-v3  AVX2 + FMA              OPENBLAS_CORETYPE=Haswell
#   x86-64-v4  AVX-512                 OPENBLAS_CORETYPE=SkylakeX
#   native     this machine            OpenBLAS' own choice
#
# A level this CPU cannot run is built (so it is known to compile) and its
# tests are skipped, said, not hidden. CPU-only builds (no CUDA: it decides
# no CPU number) in build-arch/LEVEL.
#
#   sh scripts/test_arches.sh                  the unit label (what CI runs)
#   sh scripts/test_arches.sh --all            every test
#   sh scripts/test_arches.sh -R 'test_golden' only tests matching a regex
#   sh scripts/test_arches.sh --levels 'x86-64-v3 native' ...
#
# Exit status: 0 when every level that ran passed, 1 otherwise.
set -eu
cd "$(dirname "$0")/.."
label="-L unit"
regex=""
levels="x86-64-v2 x86-64-v3 x86-64-v4 native"
while [ $# -gt 0 ]; do
    case "$1" in
    --all) label="" ;;
    -R)
        [ $# -ge 2 ] || { echo "test_arches: -R needs a regex" >&2; exit 2; }
        regex="$2"; label=""; shift ;;
    --levels)
        [ $# -ge 2 ] || { echo "test_arches: --levels needs a list" >&2; exit 2; }
        levels="$2"; shift ;;
    -h | --help)
        sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
        exit 0 ;;
    *)
        echo "test_arches: unknown option '$1' (valid: --all, -R REGEX, --levels LIST, --help)" >&2
        exit 2 ;;
    esac
    shift
done
jobs=$(nproc 2>/dev/null || echo 2)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

. scripts/arch_levels.sh

failed=""
ran=""
skipped=""
start=$(date +%s)
for lv in $levels; do
    b="build-arch/$lv"
    echo "== $lv: build in $b ==" >&2
    t0=$(date +%s)
    if [ "$lv" = native ]; then
        cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=Release -DBF_CUDA=OFF -DBF_MARCH= -DBF_NATIVE=ON >/dev/null
    else
        cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=Release -DBF_CUDA=OFF -DBF_MARCH="$lv" >/dev/null
    fi
    cmake --build "$b" -j "$jobs" >"$b.build.log" 2>&1 || {
        tail -30 "$b.build.log" >&2
        failed="$failed $lv(build)"
        continue
    }
    # the Python clients the integration tests play outside parties with
    [ -d build/pydeps ] && [ ! -e "$b/pydeps" ] && ln -s "$(pwd)/build/pydeps" "$b/pydeps"
    t1=$(date +%s)
    if ! arch_can_run "$lv"; then
        # built (so it compiles there), but this CPU cannot run it
        echo "== $lv: built in $((t1 - t0)) s; tests skipped, this CPU lacks its instructions ==" >&2
        skipped="$skipped $lv"
        continue
    fi
    ct=$(arch_coretype "$lv")
    echo "== $lv: tests (OPENBLAS_CORETYPE=${ct:-auto}; built in $((t1 - t0)) s) ==" >&2
    # shellcheck disable=SC2086
    if env ${ct:+OPENBLAS_CORETYPE=$ct} ctest --test-dir "$b" --output-on-failure $label \
        ${regex:+-R "$regex"}; then
        ran="$ran $lv"
    else
        failed="$failed $lv"
    fi
    echo "== $lv: $(($(date +%s) - t1)) s of tests ==" >&2
done
echo "test_arches: passed:${ran:- none}; failed:${failed:- none}; built, not run here:${skipped:- none}; $(($(date +%s) - start)) s" >&2
[ -z "$failed" ]
