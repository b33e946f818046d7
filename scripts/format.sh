#!/bin/sh
# clang-format over every C, C++ and CUDA source the repository tracks, with
# the checked-in .clang-format. `sh scripts/format.sh` rewrites the files;
# `sh scripts/format.sh --check` only reports, and fails if any would change.
set -eu
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null 2>&1; then
    echo "format: clang-format is not installed (apt-get install clang-format)" >&2
    exit 1
fi
files=$(git ls-files '*.c' '*.h' '*.cc' '*.cu')
if [ "${1:-}" = "--check" ]; then
    # shellcheck disable=SC2086
    clang-format --dry-run --Werror $files
    echo "format: $(echo "$files" | wc -l) files formatted as .clang-format says" >&2
else
    # shellcheck disable=SC2086
    clang-format -i $files
fi
