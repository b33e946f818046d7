#!/bin/sh
# Prepares the real data sets from their Debian packages into $BF_DATA
# (default ./data): WordNet gloss classification, the KJV corpus, Fashion-MNIST,
# and a sentencepiece tokenizer for each text set, trained on its training part
# only. Idempotent: a step is skipped when its outputs exist and are newer than
# its sources.
#
#   BF_DATA=DIR      where to write (default ./data)
#   BFPREP=PATH      the bfprep binary (default: build/bfprep, else bfprep on PATH)
#   BF_VOCAB=N       tokenizer size (default 8192)
#   BF_TOK_TYPE=T    unigram | bpe (default unigram)
#   BF_VAL_FRACTION  KJV validation tail used when training its tokenizer (default 0.05,
#                    the default of data.val_fraction)
set -eu

D=${BF_DATA:-./data}
VOCAB=${BF_VOCAB:-8192}
TOK_TYPE=${BF_TOK_TYPE:-unigram}
VALF=${BF_VAL_FRACTION:-0.05}
here=$(cd "$(dirname "$0")/.." && pwd)

if [ -z "${BFPREP:-}" ]; then
    for c in "$here/build/bfprep" "$here"/build*/bfprep; do
        if [ -x "$c" ]; then BFPREP=$c; break; fi
    done
fi
if [ -z "${BFPREP:-}" ]; then BFPREP=$(command -v bfprep || true); fi
if [ -z "${BFPREP:-}" ] || [ ! -x "$BFPREP" ]; then
    echo "prepare_data: bfprep not found; build it (cmake --build build --target bfprep) or set BFPREP" >&2
    exit 1
fi

say() { echo "prepare_data: $*" >&2; }

# fresh OUT... -- SRC...: true when every OUT exists and is newer than every SRC.
fresh() {
    outs=""
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do outs="$outs $1"; shift; done
    shift
    for o in $outs; do
        [ -e "$o" ] || return 1
        for s in "$@"; do
            [ -e "$s" ] || continue
            [ "$o" -nt "$s" ] || return 1
        done
    done
    return 0
}

tokenizer() { # INPUT  (model at INPUT.tok$VOCAB.model, the name bfworker looks for)
    in=$1
    prefix=$in.tok$VOCAB
    if fresh "$prefix.model" -- "$in"; then
        say "tokenizer $prefix.model is up to date"
    else
        "$BFPREP" tokenizer --input "$in" --vocab "$VOCAB" --type "$TOK_TYPE" \
            --val-fraction "$VALF" --out "$prefix"
    fi
}

# WordNet
WN=/usr/share/wordnet/data.noun
if [ -r "$WN" ]; then
    if fresh "$D/wordnet/train.tsv" "$D/wordnet/val.tsv" "$D/wordnet/test.tsv" -- "$WN"; then
        say "wordnet is up to date"
    else
        "$BFPREP" wordnet --src "$WN" --out "$D"
    fi
    tokenizer "$D/wordnet/train.tsv"
else
    say "skipping wordnet: $WN not found (apt-get install wordnet-base)"
fi

# King James Bible
if command -v bible >/dev/null 2>&1; then
    if fresh "$D/kjv/kjv.txt" -- /usr/lib/bible.data "$(command -v bible)"; then
        say "kjv is up to date"
    else
        "$BFPREP" kjv --out "$D"
    fi
    tokenizer "$D/kjv/kjv.txt"
else
    say "skipping kjv: the bible command is not installed (apt-get install bible-kjv)"
fi

# Fashion-MNIST
FM=/usr/share/datasets/fashion-mnist
if [ -r "$FM/train-images-idx3-ubyte.gz" ]; then
    if [ -e "$D/fashion_mnist/t10k-labels-idx1-ubyte.gz" ] && [ -e "$D/fashion_mnist/train-images-idx3-ubyte.gz" ]; then
        say "fashion_mnist is up to date"
    else
        "$BFPREP" fashion-mnist --src "$FM" --out "$D"
    fi
else
    say "skipping fashion-mnist: $FM not found (apt-get install dataset-fashion-mnist)"
fi
say "done: $D"
