/* data_sets — the data one run trains and evaluates on, from a resolved
 * config: a prepared set under data.dir by name, or the user's own files;
 * trains (or reuses) the tokenizer and opens the tokenized splits through the
 * cache. Tokenizers and tokenized sets live in the cache folder
 * (data_cache_dir), keyed by a hash of the data's contents; a tokenizer
 * prepared beside the data (SRC.tokV.model, from bfprep tokenizer) is used
 * when one is there. Pipeline vit opens IDX images instead (data.set fashion_mnist or
 * data.train_images/...). Validation of images, and of a TSV set without
 * data.val, is data.val_fraction of the training file: a stratified sample
 * from data.split_seed, or its tail (data.val_split; data_split.c); a
 * training file that looks sorted by label is warned about (not quiet). */
#ifndef DATA_SETS_H
#define DATA_SETS_H

#include "common/cfg.h"
#include "worker/data/data.h"

typedef struct data_sets {
    tok_t *tok;
    char tok_path[4400];            /* the tokenizer's .model file ("" for vit) */
    data_tok_t *train, *val, *test; /* lm: train only, with val_start; val/test NULL */
    int n_classes;                  /* 0 for lm */
    int image_rows, image_cols;     /* vit: every item is rows*cols pixel values 0..255 as
                                       token ids (row-major); 0 for text */
} data_sets;

/* Resolves the data of c, trains or loads the tokenizer, and opens the
 * tokenized sets (cached). Progress goes to stderr unless quiet. Returns 0
 * or -1 with a message (nothing to close then). */
int data_sets_open(const bf_config *c, data_sets *d, int quiet, char *err, size_t errlen);
void data_sets_close(data_sets *d);

/* Why c's training images are known not to be mirror-symmetric, so that a
 * random horizontal flip (aug.hflip) turns an image into one of another
 * class: a phrase for a warning ("'mnist' in the name of FILE: digits"),
 * or NULL when nothing says so. Known by a word of the file's name or its
 * folder's that starts with: mnist (not with a word fashion), kmnist,
 * emnist, usps, svhn, digit, letter, text. Fashion-MNIST's clothes mirror
 * alike: NULL. buf holds the phrase. */
const char *data_sets_not_mirror(const bf_config *c, char *buf, size_t len);

/* The file name a run folder keeps its tokenizer under, so that `bfworker
 * generate` needs only the run folder, not the data it was trained on. */
#define DATA_RUN_TOKENIZER "tokenizer.model"
/* Copies d's tokenizer model to dir/DATA_RUN_TOKENIZER (a temporary name,
 * then rename). Nothing to do for data without one (vit). Returns 0 or -1
 * with a message. */
int data_sets_save_tokenizer(const data_sets *d, const char *dir, char *err, size_t errlen);

#endif
