#!/bin/sh
# The references of the tree hold (run by ctest as test_docs):
#   sh scripts/check_docs.sh
# 1. every reference to a section of a doc, `docs/NAME.md#anchor` (code,
#    scripts, examples) or `NAME.md#anchor` (inside docs/), names a doc that
#    exists and a heading of it whose GitHub slug is the anchor;
# 2. no reference points outside the clone (`../shared/`);
# 3. every backquoted function name in docs/*.md and README.md exists in the
#    code: `name()` must be called or defined in a C/C++/CUDA source, a
#    backquoted lower-case snake_case word (`launch_slurm`) must occur in a
#    tracked source, script or config, or be a tracked file's name (a test
#    program), or be one of the few names of other projects the docs cite.
# Prints each violation and exits 1 when there is one.
set -eu
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bad=0

# the slugs of every doc's headings: "doc<TAB>slug" (GitHub: lower case,
# punctuation but - and _ dropped, spaces to -)
for d in docs/*.md README.md; do
    awk -v doc="$d" '
        /^```/ { fence = !fence; next }
        !fence && /^#+ / {
            h = $0; sub(/^#+ +/, "", h)
            h = tolower(h)
            gsub(/[^a-z0-9 _-]/, "", h)
            gsub(/ /, "-", h)
            print doc "\t" h
        }' "$d"
done >"$tmp/slugs"

# 1 and 2: references with an anchor, and any ../shared/ one
files=$(git ls-files | grep -v '^tests/fuzz/corpus/\|\.png$\|\.gz$\|\.safetensors$\|^scripts/check_docs\.sh$')
# shellcheck disable=SC2086
grep -HnoE '(\.\./shared/|docs/)?[A-Za-z_]+\.md#[A-Za-z0-9_-]+' $files 2>/dev/null >"$tmp/refs" || true
while IFS= read -r line; do
    src=${line%%:*}
    rest=${line#*:}
    ln=${rest%%:*}
    ref=${rest#*:}
    doc=${ref%%#*}
    anchor=${ref#*#}
    case "$doc" in
    ../shared/*)
        echo "check_docs: $src:$ln: $ref points outside the clone (docs/ has bf's own)"
        bad=1
        continue ;;
    docs/*) ;;
    *)
        case "$src" in
        docs/*) doc="docs/$doc" ;;
        *) doc="$(dirname "$src")/$doc" ;;
        esac ;;
    esac
    if [ ! -f "$doc" ]; then
        echo "check_docs: $src:$ln: $ref: no file $doc"
        bad=1
    elif ! grep -q "^$doc	$anchor\$" "$tmp/slugs"; then
        echo "check_docs: $src:$ln: $ref: $doc has no heading whose anchor is #$anchor"
        bad=1
    fi
done <"$tmp/refs"
# shellcheck disable=SC2086
if grep -Hn '\.\./shared/\(design\|style\)\.md' $files; then
    echo "check_docs: the lines above point to ../shared/ (docs/design.md and docs/style.md are bf's own)"
    bad=1
fi

# 3: every identifier the code, scripts and configs use
# names of other projects that the docs cite (NVlabs A-ViT's code, Open MPI's
# tools): they are not bf's to define
EXTERNAL="get_distribution_target distr_prior_alpha target_depth ompi_info"
{
    git ls-files '*.c' '*.h' '*.cc' '*.cu' '*.py' '*.sh' '*.yaml' '*.txt' '*.cmake' |
        xargs grep -ohE '[A-Za-z_][A-Za-z0-9_]*'
    git ls-files | sed 's#.*/##; s#\..*##' # file names: test programs, scripts
    printf '%s\n' $EXTERNAL
} | sort -u >"$tmp/words"
git ls-files '*.c' '*.h' '*.cc' '*.cu' |
    xargs grep -ohE '[A-Za-z_][A-Za-z0-9_]*[[:space:]]*\(' | tr -d ' \t(' | sort -u >"$tmp/calls"
for d in docs/*.md README.md; do
    # backquoted spans outside code fences, one per line
    awk '/^```/ { fence = !fence; next } !fence' "$d" |
        grep -oE '`[A-Za-z_][A-Za-z0-9_]*(\(\))?`' | tr -d '`' | sort -u | while read -r w; do
        case "$w" in
        *"()")
            f=${w%??}
            grep -qx "$f" "$tmp/calls" ||
                echo "check_docs: $d: \`$w\` is not a function of the code" ;;
        [a-z]*_*[a-z0-9])
            # snake_case (not a prefix such as bk_, not a macro or env name)
            grep -qx "$w" "$tmp/words" ||
                echo "check_docs: $d: \`$w\` names nothing in the code, scripts or configs" ;;
        esac
    done
done >"$tmp/names"
if [ -s "$tmp/names" ]; then
    cat "$tmp/names"
    bad=1
fi

n=$(wc -l <"$tmp/refs")
if [ "$bad" = 0 ]; then
    echo "check_docs: $n section references resolve; backquoted names exist" >&2
fi
exit "$bad"
