#!/bin/sh
# Reproduces the BudgetFormer rows of docs/results.md: baseline vs budget
# (two seeds), then budget ranges x temperature schedules (one seed), each a
# standalone `bfworker train` of examples/budgetformer.yaml into runs/.
# Usage: sh scripts/results_budgetformer.sh [BFWORKER]
set -eu
cd "$(dirname "$0")/.."
bfw=${1:-./build/bfworker}
cfg=examples/budgetformer.yaml
run() { # out, then --set overrides
    out=$1; shift
    [ -f "$out/checkpoint.bin" ] && grep -q '"test/acc"' "$out/metrics.jsonl" 2>/dev/null && return 0
    rm -rf "$out"
    echo "== $out $*" >&2
    "$bfw" train "$cfg" --out "$out" --quiet "$@"
}
for seed in 1 2; do
    run runs/bf-base-s$seed --set budget.enabled=false --set train.seed=$seed
    run runs/bf-budget-s$seed --set train.seed=$seed
done
for range in 0.1,0.3 0.3,0.6 0.6,1.0; do
    r=$(echo "$range" | tr , -)
    run runs/bf-sweep-$r-exp --set "budget.range=[$range]" \
        --set 'budget.temperature={schedule: exp, start: 1.0, end: 0.1}'
    run runs/bf-sweep-$r-linear --set "budget.range=[$range]" \
        --set 'budget.temperature={schedule: linear, start: 2.0, end: 0.2}'
done
