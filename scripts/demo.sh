#!/bin/sh
# The main command, on a fresh machine: install and build, prepare the real
# data sets, start the bfd daemon, submit a small BudgetFormer sweep
# (examples/demo_sweep.yaml: 3 trials, about two minutes on 2 CPU cores),
# follow its metrics live, print the results table (accuracy and heads used
# per trial, the best trial marked) and stop bfd.
#
#   BF_HOME=DIR   the daemon's state folder (default ./.bf-demo): its database,
#                 sockets, trial folders (checkpoints, metrics.jsonl) and logs
#   BF_DATA=DIR   where the data sets are prepared (default ./data)
#   BF_SWEEP=FILE another sweep to run instead of examples/demo_sweep.yaml
#
# A bfd already serving BF_HOME is used as it is and left running. Ctrl-C
# cancels the sweep and stops the bfd this script started.
set -eu
cd "$(dirname "$0")/.."
root=$(pwd)

sh scripts/setup.sh
sh scripts/prepare_data.sh

BF_HOME=${BF_HOME:-$root/.bf-demo}
BF_DATA=${BF_DATA:-$root/data}
export BF_HOME BF_DATA
sweep=${BF_SWEEP:-examples/demo_sweep.yaml}
bin=$root/build
say() { echo "demo: $*" >&2; }

started=""
job=""
finished=""
cleanup() {
    if [ -n "$job" ] && [ -z "$finished" ]; then
        say "cancelling job $job"
        "$bin/bfctl" cancel "$job" >/dev/null 2>&1 || true
    fi
    if [ -n "$started" ]; then
        pid=$(cat "$BF_HOME/bfd.lock" 2>/dev/null || true)
        if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
            # bfd exits once its event loop has seen SIGTERM
            i=0
            while kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
            say "bfd stopped (its log: $BF_HOME/bfd.log)"
        fi
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$bin/bfctl" validate "$sweep" >&2

# a bfd holds $BF_HOME/bfd.lock (with its pid) while it runs; a socket file
# left by a stopped one does not count
pid=$(cat "$BF_HOME/bfd.lock" 2>/dev/null || true)
if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null &&
    BF_TIMEOUT=3 "$bin/bfctl" daemon status >/dev/null 2>&1; then
    say "using the bfd already serving $BF_HOME"
else
    "$bin/bfd" --daemonize >&2
    started=1
    i=0
    until BF_TIMEOUT=1 "$bin/bfctl" daemon status >/dev/null 2>&1; do
        i=$((i + 1))
        if [ $i -gt 100 ]; then
            say "bfd did not come up within 10 s; its log:"
            tail -n 20 "$BF_HOME/bfd.log" >&2 || true
            exit 1
        fi
        sleep 0.1
    done
fi
"$bin/bfctl" daemon status >&2

job=$("$bin/bfctl" submit "$sweep")
# the same job in a browser, live (bfd serves it on loopback unless
# bfd.yaml says http: off; the URL carries the access token once)
if url=$("$bin/bfctl" dashboard 2>/dev/null); then
    say "watch it in a browser: $url#/job/$job"
fi
say "following job $job live (bfctl tail $job -f); Ctrl-C cancels it"
"$bin/bfctl" tail "$job" -f
status=0
"$bin/bfctl" wait "$job" >&2 || status=$?
finished=1

echo
echo "== results of job $job =="
"$bin/bfctl" results "$job"
echo
echo "== curves of job $job =="
plot=$("$bin/bfctl" plot "$job" --metric val/acc --metric train/loss -o "$BF_HOME/job$job.png") ||
    status=1
echo "plot: $plot"
echo "TensorBoard: tensorboard --logdir $BF_HOME/tensorboard"
echo "more: BF_HOME=$BF_HOME $bin/bfctl show $job | best $job | export $job --csv | logs tTRIAL"
exit $status
