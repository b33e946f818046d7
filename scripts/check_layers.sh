#!/bin/sh
# The layering rule of docs/architecture.md, checked:
#   sh scripts/check_layers.sh [BUILD_DIR]
# 1. every #include "..." of a tracked source outside tests/ and bench/ names
#    a folder its own folder may include (the table below, which is the one
#    in docs/architecture.md);
# 2. every tracked source (tests/ and bench/ too) opens with a comment that
#    says what it is for: its first non-blank line starts with /* or //;
# 3. with BUILD_DIR: no circle of library object files that call each other
#    (read from the symbols each object defines and uses, `nm`);
# 4. with BUILD_DIR: no dead code: a public function a library of the build
#    defines must be used by some object of the build (library, executable,
#    test, bench). One no object uses passes only when a source calls it
#    from code this build did not compile (#if'd out for another CPU, CUDA,
#    NCCL, fuzzing) or from its own file: an indented, non-comment line of a
#    tracked source that names it. C++ symbols (_Z..., nvcc's kernel stubs)
#    are not checked;
# 5. with BUILD_DIR: the layers at link time: each room of worker/ is its
#    own library (worker/libbfw_ROOM.a, worker/CMakeLists.txt); every symbol
#    a room's objects use that another room defines must come from a room
#    its row below allows (read with nm, as the linker would resolve it).
# Prints each violation and exits 1 when there is one; 0 and a count else.
set -eu
cd "$(dirname "$0")/.."

# folder: the folders its files may include (its own is always allowed).
# worker/top is worker/ itself (bfworker_main.c).
RULES='
common:
kernels: kernels/cuda
kernels/cuda: kernels
protocol: common
jobs: common kernels
daemon: common protocol jobs
ctl: common protocol jobs
worker/data: common kernels
worker/nn: common kernels worker/data
worker/models: common kernels worker/data worker/nn
worker/pipelines: common kernels worker/data worker/nn worker/models
worker/io: common kernels worker/data worker/nn worker/models
worker/link: common kernels protocol
worker/host: common kernels protocol worker/data worker/nn worker/models worker/pipelines worker/io worker/link
worker/cmd: common kernels protocol worker/data worker/nn worker/models worker/pipelines worker/io worker/link worker/host
worker/bfprep: common kernels worker/data
worker/top: common kernels worker/cmd
'

folder_of() {
    d=$(dirname "$1")
    [ "$d" = worker ] && d=worker/top
    echo "$d"
}

bad=0
checked=0
files=$(git ls-files '*.c' '*.h' '*.cc' '*.cu' 2>/dev/null | grep -v '^tests/\|^bench/' || true)
if [ -z "$files" ]; then
    echo "check_layers: no tracked sources (not a git checkout?)" >&2
    exit 1
fi
for f in $files; do
    from=$(folder_of "$f")
    allowed=$(printf '%s\n' "$RULES" | sed -n "s#^$from:##p")
    if ! printf '%s\n' "$RULES" | grep -q "^$from:"; then
        echo "check_layers: $f: folder $from has no rule (add it to scripts/check_layers.sh and docs/architecture.md)"
        bad=1
        continue
    fi
    for inc in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f"); do
        checked=$((checked + 1))
        to=$(folder_of "$inc")
        [ "$to" = "$from" ] && continue
        ok=0
        for a in $allowed; do [ "$a" = "$to" ] && ok=1; done
        if [ "$ok" = 0 ]; then
            echo "check_layers: $f includes $inc: $from may include only:${allowed:- its own folder}"
            bad=1
        fi
    done
done

# Purpose comments: the first non-blank line of every source is a comment.
for f in $(git ls-files '*.c' '*.h' '*.cc' '*.cu' | grep -v '/corpus/'); do
    first=$(grep -m1 -v '^[[:space:]]*$' "$f" || true)
    case "$first" in
    '/*'* | '//'*) ;;
    *)
        echo "check_layers: $f: does not open with a comment saying what it is for"
        bad=1
        ;;
    esac
done

circles=0
if [ $# -ge 1 ]; then
    build=$1
    objs=$(find "$build" -path '*CMakeFiles*' -name '*.o' 2>/dev/null |
        grep -v '/tests/\|/bench/\|/test_\|/bench_\|_main\.c\.o$\|/bfprep\.c\.o$\|/fuzz' || true)
    if [ -z "$objs" ]; then
        echo "check_layers: no object files under $build (build it first)" >&2
        exit 1
    fi
    out=$(for o in $objs; do
        name=$(echo "$o" | sed 's#.*CMakeFiles/[^/]*\.dir/##; s#\.o$##')
        nm "$o" 2>/dev/null | awk -v f="$name" '
            NF == 3 && $2 ~ /^[TDBR]$/ { print "D", f, $3 }
            NF == 2 && $1 == "U" { print "U", f, $2 }'
    done | awk '
        $1 == "D" { def[$3] = $2; next }
        { use[++n] = $2 " " $3 }
        END {
            for (i = 1; i <= n; i++) {
                split(use[i], a, " ")
                if (!(a[2] in def) || def[a[2]] == a[1]) continue
                e = a[1] SUBSEP def[a[2]]
                if (e in seen) continue
                seen[e] = 1
                adj[a[1]] = adj[a[1]] " " def[a[2]]
                node[a[1]] = 1
            }
            # a circle through s whose other files all sort after s: each
            # circle is reported once, from its smallest file
            for (s in node) {
                split("", vis); split("", path)
                top = 0; stack[++top] = s; path[s] = s
                while (top > 0) {
                    x = stack[top--]
                    k = split(adj[x], nb, " ")
                    for (j = 1; j <= k; j++) {
                        y = nb[j]
                        if (y == s && !found[s]) { print "check_layers: circle: " path[x] " -> " s; found[s] = 1 }
                        else if (!(y in vis) && y > s) { vis[y] = 1; path[y] = path[x] " -> " y; stack[++top] = y }
                    }
                }
            }
        }')
    if [ -n "$out" ]; then
        echo "$out"
        circles=1
    fi
fi

dead=0
if [ $# -ge 1 ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    find "$build" -path '*CMakeFiles*' -name '*.o' -exec nm -u {} + 2>/dev/null |
        awk '$1 == "U" { print $2 }' | sort -u >"$tmp/used"
    find "$build" -name '*.a' -not -path '*/pydeps/*' -exec nm -A --defined-only {} + 2>/dev/null |
        awk 'NF == 3 && $2 == "T" && $3 != "main" && $3 !~ /^_Z/ { sub(/:[^:]*$/, "", $1); print $3, $1 }' |
        sort -k1,1 -u >"$tmp/defs"
    cut -d' ' -f1 "$tmp/defs" | comm -23 - "$tmp/used" >"$tmp/unused"
    srcs=$(git ls-files '*.c' '*.h' '*.cc' '*.cu' | grep -v '/corpus/')
    for s in $(cat "$tmp/unused"); do
        # a use the build did not compile, or one inside the defining file
        # (nm shows no undefined reference for a call within one object)
        if grep -hw -- "$s" $srcs | grep -v '^[^[:space:]]' |
            grep -qv '^[[:space:]]*\(\*\|/\*\|//\)'; then
            continue
        fi
        where=$(sed -n "s#^$s ##p" "$tmp/defs" | sed "s#^$build/##")
        echo "check_layers: dead code: $s ($where) is called by no object of the build and no source"
        dead=1
    done
fi

rooms=0
if [ $# -ge 1 ]; then
    libs=$(find "$build/worker" -maxdepth 1 -name 'libbfw_*.a' 2>/dev/null | sort)
    if [ -z "$libs" ]; then
        echo "check_layers: no room libraries (libbfw_*.a) under $build/worker" >&2
        exit 1
    fi
    out=$(for a in $libs; do
        room=$(basename "$a" .a | sed 's/^libbfw_//')
        nm -A "$a" 2>/dev/null | awk -v r="$room" '
            NF == 3 && $2 ~ /^[TDBRC]$/ { print "D", r, $3 }
            NF == 2 && $2 == "U" { print "U", r, $3 }
            NF == 3 && $2 == "U" { print "U", r, $3 }'
    done | awk -v rules="$RULES" '
        BEGIN {
            n = split(rules, line, "\n")
            for (i = 1; i <= n; i++) {
                if (line[i] !~ /^worker\/[a-z]+:/) continue
                split(line[i], kv, ":")
                sub(/^worker\//, "", kv[1])
                k = split(kv[2], al, " ")
                for (j = 1; j <= k; j++)
                    if (al[j] ~ /^worker\//) { sub(/^worker\//, "", al[j]); ok[kv[1], al[j]] = 1 }
                allowed[kv[1]] = kv[2]
            }
        }
        $1 == "D" { def[$3] = $2; next }
        { use[++m] = $2 " " $3 }
        END {
            for (i = 1; i <= m; i++) {
                split(use[i], a, " ")
                if (!(a[2] in def) || def[a[2]] == a[1] || ok[a[1], def[a[2]]]) continue
                e = a[1] SUBSEP def[a[2]] SUBSEP a[2]
                if (e in seen) continue
                seen[e] = 1
                print "check_layers: room worker/" a[1] " uses " a[2] " of worker/" def[a[2]] \
                    ": worker/" a[1] " may use only:" allowed[a[1]]
            }
        }')
    if [ -n "$out" ]; then
        echo "$out"
        rooms=1
    fi
fi

if [ "$bad" != 0 ] || [ "$circles" != 0 ] || [ "$dead" != 0 ] || [ "$rooms" != 0 ]; then
    echo "check_layers: the layers of docs/architecture.md are broken (above)"
    exit 1
fi
echo "check_layers: $checked includes in $(echo "$files" | wc -l) files keep the layers${1:+; no circle of files, no dead code and no room using one above it in $1}"
