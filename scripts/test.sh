#!/bin/sh
# Sets up (packages + build), then runs the whole test suite twice: the
# release build (CPU, with the CUDA backend compiled when nvcc exists; GPU
# tests skip without a GPU) and a CPU build under AddressSanitizer and
# UndefinedBehaviorSanitizer; then each libFuzzer target for a short time.
set -eu
cd "$(dirname "$0")/.."
sh scripts/setup.sh
jobs=$(nproc 2>/dev/null || echo 2)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# the code is formatted as .clang-format says (checked where clang-format and
# the git checkout are there, as on the CI machines)
if command -v clang-format >/dev/null 2>&1 && git rev-parse --git-dir >/dev/null 2>&1; then
    echo "== clang-format check ==" >&2
    sh scripts/format.sh --check
fi

echo "== sanitizer build (ASan + UBSan) ==" >&2
cmake -S . -B build-san -DBF_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-san -j "$jobs"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-san --output-on-failure -L unit
# the integration tests that face outside input (bfd's sockets and bfctl, a
# client written from docs/protocol.md, bfd killed at random moments, the
# dashboard's HTTP server driven by a browser: 18 s) run
# under the sanitizers too: about 2 minutes on 2 cores. The long training
# ones (daemon 140 s, ddp, slurm, adaptive under ASan) run in release only,
# and so does test_it_cluster (a 3-host Slurm in network namespaces, about
# 90 s; skipped, exit 77, where namespaces are refused).
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-san --output-on-failure -L integration \
    -R 'test_it_(bfd_edges|pyclient|bfctl_results|crashpoints|dashboard)$'

echo "== release build ==" >&2
ctest --test-dir build --output-on-failure

# the unit tests again at each other x86-64 level (x86-64-v2, -v3, -v4, each
# with OpenBLAS kernels of that level; native is the release build above):
# no test may hold a number only one CPU computes. About 6 minutes on 2
# cores; BF_ARCHES=0 skips it.
if [ "${BF_ARCHES:-1}" != 0 ]; then
    echo "== unit tests at each x86-64 level ==" >&2
    sh scripts/test_arches.sh --levels 'x86-64-v2 x86-64-v3 x86-64-v4'
fi

# every decoder under libFuzzer for a short while (clang build in
# ./build-fuzz; scripts/fuzz.sh TARGET SECONDS runs one longer)
if command -v clang >/dev/null 2>&1; then
    echo "== fuzz: each target ${BF_FUZZ_SECONDS:-20} s ==" >&2
    sh scripts/fuzz.sh all "${BF_FUZZ_SECONDS:-20}"
fi
