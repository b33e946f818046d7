#!/bin/sh
# check_keys_doc.sh BFCTL DOC — the key table in DOC (docs/sweeps.md),
# between the markers "<!-- keys:begin" and "<!-- keys:end -->", must be
# exactly what `BFCTL keys --markdown` prints; a difference (a key added to
# common/cfg_schema.c, a changed help text or default) fails, with the diff
# and the command that regenerates it.
set -eu
if [ "${1:-}" = "--write" ]; then
    # rewrite the table in place from the schema
    shift
    tmp=$(mktemp)
    "$1" keys --markdown >"$tmp.keys"
    awk -v keys="$tmp.keys" '
        /^<!-- keys:end/ {on = 0}
        !on {print}
        /^<!-- keys:begin/ {on = 1; while ((getline l < keys) > 0) print l}' "$2" >"$tmp"
    mv "$tmp" "$2"
    rm -f "$tmp.keys"
    exit 0
fi
bfctl=$1
doc=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bfctl" keys --markdown >"$tmp/want"
awk '/^<!-- keys:end/ {on = 0} on {print} /^<!-- keys:begin/ {on = 1}' "$doc" >"$tmp/have"
if [ ! -s "$tmp/have" ]; then
    echo "check_keys_doc: no '<!-- keys:begin' ... '<!-- keys:end -->' table in $doc" >&2
    exit 1
fi
if ! diff -u "$tmp/have" "$tmp/want" >"$tmp/diff"; then
    cat "$tmp/diff" >&2
    echo "check_keys_doc: the key table in $doc differs from \`bfctl keys --markdown\`;" >&2
    echo "  regenerate it: sh scripts/check_keys_doc.sh --write BUILD/bfctl $doc" >&2
    exit 1
fi
echo "check_keys_doc: $doc lists the $(($(wc -l <"$tmp/want") - 2)) keys of the schema"
