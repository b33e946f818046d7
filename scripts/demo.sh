#!/bin/sh
# The main job, on a fresh machine: install and build, prepare the real data
# sets, then train BudgetFormer on WordNet glosses with live progress, and
# evaluate the result (accuracy, heads used, attention FLOPs, wall time).
# (The daemon + sweep demo replaces this once bfd lands.)
set -eu
cd "$(dirname "$0")/.."
sh scripts/setup.sh
sh scripts/prepare_data.sh
out=${BF_RUNS:-runs}/demo-budgetformer
./build/worker/bfworker train examples/budgetformer.yaml --out "$out" "$@"
echo "== evaluation of $out ==" >&2
./build/worker/bfworker eval "$out"
