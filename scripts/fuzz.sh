#!/bin/sh
# Runs one libFuzzer target for a while:  sh scripts/fuzz.sh TARGET SECONDS
#   TARGET: proto | sweep | set | loaders | ckpt | all (each in turn)
# Builds the targets into ./build-fuzz first (clang, -DBF_FUZZ=ON; ASan +
# UBSan). Starts from the seeds in tests/fuzz/corpus/TARGET/ plus what
# earlier runs found (build-fuzz/corpus/TARGET/, which grows); a crash is
# saved under build-fuzz/crashes/TARGET/ and makes the exit status 1.
# Prints one line per target: executions, seconds, corpus size, crashes.
set -eu
cd "$(dirname "$0")/.."
if [ $# -ne 2 ]; then
    echo "usage: sh scripts/fuzz.sh proto|sweep|set|loaders|ckpt|all SECONDS" >&2
    exit 64
fi
target=$1
secs=$2
case "$secs" in
'' | *[!0-9]*)
    echo "fuzz.sh: SECONDS must be a whole number, got '$secs'" >&2
    exit 64
    ;;
esac
all="proto sweep set loaders ckpt"
if [ "$target" = all ]; then
    targets=$all
else
    case " $all " in
    *" $target "*) targets=$target ;;
    *)
        echo "fuzz.sh: unknown target '$target' (valid: $all, all)" >&2
        exit 64
        ;;
    esac
fi
if ! command -v clang >/dev/null 2>&1; then
    echo "fuzz.sh: clang is not installed (sh scripts/setup.sh installs it)" >&2
    exit 1
fi
jobs=$(nproc 2>/dev/null || echo 2)
if [ ! -f build-fuzz/CMakeCache.txt ]; then
    cmake -S . -B build-fuzz -DBF_FUZZ=ON -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
# shellcheck disable=SC2086
cmake --build build-fuzz -j "$jobs" --target $(for t in $targets; do printf 'fuzz_%s ' "$t"; done) >/dev/null
status=0
for t in $targets; do
    work=build-fuzz/corpus/$t
    crashes=build-fuzz/crashes/$t
    mkdir -p "$work" "$crashes"
    log=build-fuzz/fuzz_$t.log
    before=$(find "$crashes" -type f | wc -l)
    rc=0
    # leaks: OpenMP and sentencepiece keep per-process allocations that
    # LeakSanitizer reports on exit; leak checks run in the ASan unit tests
    ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
        "build-fuzz/fuzz_$t" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 \
        -max_len=262144 -print_final_stats=1 -artifact_prefix="$crashes/" \
        "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    found=$(($(find "$crashes" -type f | wc -l) - before)) # this run's, not earlier ones
    size=$(find "$work" -type f | wc -l | tr -d ' ')
    echo "fuzz $t: ${runs:-?} executions in $secs s, corpus $size, crashes $found (log: $log)"
    if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
        grep -E "ERROR|runtime error|SUMMARY|Test unit written" "$log" | head -n 5 >&2 || true
        status=1
    fi
done
exit $status
