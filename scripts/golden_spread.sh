#!/bin/sh
# Measures how far the golden trajectories (tests/test_golden.c: train/loss
# and train/grad_norm of 20 steps of each model kind) move between the builds
# of scripts/test_arches.sh, for several seeds: the figures behind the bound
# test_golden compares with. Run scripts/test_arches.sh first (it makes the
# builds). Prints, per step, the largest relative difference between any two
# builds over every case, metric and seed, and that difference over the
# step's bound (test_golden's golden_bound, which must stay well below 1).
#
#   sh scripts/golden_spread.sh                 seeds: the configs' own, 1, 2
#   sh scripts/golden_spread.sh --seeds '3 4'   (the configs' own is "own")
set -eu
cd "$(dirname "$0")/.."
seeds="own 1 2"
while [ $# -gt 0 ]; do
    case "$1" in
    --seeds)
        [ $# -ge 2 ] || { echo "golden_spread: --seeds needs a list" >&2; exit 2; }
        seeds="$2"; shift ;;
    -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "golden_spread: unknown option '$1' (valid: --seeds LIST, --help)" >&2; exit 2 ;;
    esac
    shift
done
. scripts/arch_levels.sh
out=$(mktemp -d /tmp/bf-golden-spread-XXXXXX)
trap 'rm -rf "$out"' EXIT
n=0
for b in build-arch/*/; do
    lv=$(basename "$b")
    [ -x "$b/test_golden" ] || continue
    ct=$(arch_coretype "$lv")
    if ! arch_can_run "$lv"; then
        echo "golden_spread: $lv skipped (this CPU lacks its instructions)" >&2
        continue
    fi
    for s in $seeds; do
        sv=""
        [ "$s" = own ] || sv="$s"
        echo "golden_spread: $lv seed $s" >&2
        env ${ct:+OPENBLAS_CORETYPE=$ct} BF_GOLDEN_SEED="$sv" BF_GOLDEN_OUT="$out/$lv.$s.tsv" \
            OMP_NUM_THREADS=2 "$b/test_golden" >/dev/null 2>&1 ||
            { echo "golden_spread: $b/test_golden failed (seed $s)" >&2; exit 1; }
    done
    n=$((n + 1))
done
[ "$n" -ge 2 ] || { echo "golden_spread: fewer than 2 builds in build-arch/" >&2; exit 1; }
# per step: the worst relative difference between two builds, same seed
awk -F '\t' '
    FNR == 1 { split(FILENAME, p, "/"); f = p[length(p)]; split(f, q, "."); seed = q[length(q) - 1]; next }
    { for (m = 3; m <= 4; m++) {
          k = seed SUBSEP $1 SUBSEP $2 SUBSEP m
          v = $m + 0
          if (!(k in lo) || v < lo[k]) lo[k] = v
          if (!(k in hi) || v > hi[k]) hi[k] = v
      } }
    END {
        for (k in lo) {
            split(k, a, SUBSEP); step = a[3]
            d = hi[k] - lo[k]; r = d / (lo[k] < 0 ? -lo[k] : lo[k])
            if (r > worst[step]) worst[step] = r
        }
        # the bound of tests/test_golden.c (golden_bound): keep the two in step
        u = 2 ^ -24
        printf "step\tworst_rel\tin_u_s2\tbound\tworst/bound\n"
        for (s = 1; s <= 20; s++) {
            b = 16 * u * s * s
            printf "%d\t%.3g\t%.2f\t%.3g\t%.3f\n", s, worst[s], worst[s] / (u * s * s), b, worst[s] / b
        }
    }' "$out"/*.tsv
