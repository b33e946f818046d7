#!/bin/sh
# Does the predicted budget s rise with input difficulty? Evaluates a budget
# run and a baseline run on the same test split (same order) and prints the
# Pearson correlation of the budget model's mean s with: the gloss length in
# tokens, the budget model's own loss, and the baseline's loss (difficulty as
# the baseline sees it).
# Usage: sh scripts/difficulty.sh BUDGET_RUN_DIR BASELINE_RUN_DIR [BFWORKER]
set -eu
[ $# -ge 2 ] || { echo "usage: $0 BUDGET_RUN_DIR BASELINE_RUN_DIR [BFWORKER]" >&2; exit 64; }
bfw=${3:-./build/bfworker}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bfw" eval "$1" --samples "$tmp/budget.tsv" >/dev/null
"$bfw" eval "$2" --samples "$tmp/base.tsv" >/dev/null
# columns after paste: s len loss correct | s' len' base_loss base_correct
paste "$tmp/budget.tsv" "$tmp/base.tsv" | awk -F '\t' '
function r(sxy, sx, sy, sxx, syy, n) { return (n*sxy - sx*sy) / sqrt((n*sxx - sx*sx) * (n*syy - sy*sy)) }
NR == 1 { next }
{
    s = $1; len = $2; loss = $3; bl = $7; n++
    ss += s; sss += s*s
    sl += len; sll += len*len; ssl += s*len
    so += loss; soo += loss*loss; sso += s*loss
    sb += bl; sbb += bl*bl; ssb += s*bl
}
END {
    printf "samples                      %d\n", n
    printf "mean s                       %.4f\n", ss/n
    printf "corr(s, tokens)              %+.4f\n", r(ssl, ss, sl, sss, sll, n)
    printf "corr(s, own loss)            %+.4f\n", r(sso, ss, so, sss, soo, n)
    printf "corr(s, baseline loss)       %+.4f\n", r(ssb, ss, sb, sss, sbb, n)
}'
