#!/bin/sh
# Measures the margin of every learning check of the suite (tests/learning.h:
# "training improves X by at least R") over the builds of
# scripts/test_arches.sh and several seeds (BF_TEST_SEED), and prints per
# check the smallest effect measured and its ratio to the effect required,
# which must stay at 3 or more. Run scripts/test_arches.sh first (it makes
# the builds in build-arch/).
#
#   sh scripts/learning_margins.sh                  seeds 0 1 2, every check
#   sh scripts/learning_margins.sh --seeds '3 4' --tests 'test_it_vit'
set -eu
cd "$(dirname "$0")/.."
seeds="0 1 2"
tests="test_budget_learning test_mixer_modules test_it_vit test_it_s2s"
while [ $# -gt 0 ]; do
    case "$1" in
    --seeds)
        [ $# -ge 2 ] || { echo "learning_margins: --seeds needs a list" >&2; exit 2; }
        seeds="$2"; shift ;;
    --tests)
        [ $# -ge 2 ] || { echo "learning_margins: --tests needs a list" >&2; exit 2; }
        tests="$2"; shift ;;
    -h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *)
        echo "learning_margins: unknown option '$1' (valid: --seeds LIST, --tests LIST, --help)" >&2
        exit 2 ;;
    esac
    shift
done
. scripts/arch_levels.sh
log=$(mktemp /tmp/bf-learning-XXXXXX)
trap 'rm -f "$log"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=2
n=0
for b in build-arch/*/; do
    b=${b%/}
    lv=$(basename "$b")
    ct=$(arch_coretype "$lv")
    if ! arch_can_run "$lv"; then
        echo "learning_margins: $lv skipped (this CPU lacks its instructions)" >&2
        continue
    fi
    for t in $tests; do
        [ -x "$b/$t" ] || { echo "learning_margins: no $b/$t" >&2; exit 1; }
        for s in $seeds; do
            echo "learning_margins: $lv $t seed $s" >&2
            # a failing check is what this measures: keep going, record it
            env ${ct:+OPENBLAS_CORETYPE=$ct} BF_TEST_SEED="$s" BF_CACHE="$b/test-cache" \
                "$b/$t" --jobs 1 2>&1 | sed -n "s/^learning: /$lv $s /p" >>"$log" || true
        done
    done
    n=$((n + 1))
done
[ "$n" -ge 1 ] || { echo "learning_margins: no build in build-arch/" >&2; exit 1; }
# per check: runs, the smallest effect, the required one, the smallest margin
awk '{ k = $3; eff = $9; req = $11; m = $13
       runs[k]++; if (!(k in lo) || eff < lo[k]) { lo[k] = eff; at[k] = $1 " seed " $2 }
       if (!(k in hi) || eff > hi[k]) hi[k] = eff; rq[k] = req
       if (!(k in mm) || m < mm[k]) mm[k] = m }
     END { printf "%-44s %4s %10s %10s %9s %7s  %s\n", "check", "runs", "min_effect", "max_effect",
                  "required", "margin", "smallest at"
           for (k in runs) printf "%-44s %4d %10.4g %10.4g %9.4g %7.2f  %s\n", k, runs[k], lo[k],
                                  hi[k], rq[k], mm[k], at[k] }' "$log" | sort
