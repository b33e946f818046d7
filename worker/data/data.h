/* data — the loaders: TSV classification sets, UTF-8 corpora, IDX images, the
 * tokenized cache, and the batcher that cuts deterministic, rank-sharded
 * batches from them.
 *
 * Contract for every fallible call: returns 0 (DATA_OK) or a DATA_E* code and
 * writes a one-line message into err (errlen bytes; errlen 0 = no message).
 * Messages about input name FILE:LINE and say what would be valid. Nothing
 * here exits or prints to stdout. Objects returned through `**out` are owned
 * by the caller and freed by the matching *_destroy(&p), which nulls p. */
#ifndef DATA_H
#define DATA_H

#include <stddef.h>
#include <stdint.h>

#include "worker/data/tok.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    DATA_OK = 0,
    DATA_EINVAL = 1,  /* bad argument */
    DATA_EIO = 2,     /* cannot open/read/write */
    DATA_EFORMAT = 3, /* malformed input file (message names FILE:LINE) */
    DATA_ETOOBIG = 4, /* over a size cap */
    DATA_ENOMEM = 5,
    DATA_ESTALE = 6,   /* cache does not match its source or tokenizer */
    DATA_ECORRUPT = 7, /* cache is damaged or truncated */
    DATA_ETOK = 8,     /* tokenizer failed */
    DATA_END = 9,      /* a non-wrapping batcher has no more batches */
};

#define DATA_MAX_LINE (64 * 1024)        /* TSV line cap, bytes, newline excluded */
#define DATA_MAX_TSV_BYTES (1ull << 30)  /* TSV file cap */
#define DATA_MAX_TEXT_LINE (1024 * 1024) /* corpus line cap */
#define DATA_MAX_TEXT_BYTES (2ull << 30) /* corpus file cap */
#define DATA_MAX_IDX_BYTES (1ull << 31)  /* decompressed IDX payload cap */
#define DATA_MAX_CLASSES 65536

/* Returns 1 when s[0..n) is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF). */
int data_utf8_valid(const char *s, size_t n);

/* ---- TSV classification sets ------------------------------------------- */

/* label<TAB>text, or label<TAB>text_a<TAB>text_b (pairs). The first line fixes
 * which; every line must match it. No header line; a trailing '\r' is dropped. */
typedef struct data_tsv {
    size_t n;       /* examples */
    int is_pair;    /* 1: text_b is set */
    int32_t *label; /* [n] class id, index into class_names */
    char **text_a;  /* [n] */
    char **text_b;  /* [n] or NULL */
    size_t n_classes;
    char **class_names; /* [n_classes], sorted by strcmp: the id order */
    char *buf_;         /* private: the file's bytes, which text_a/b point into */
} data_tsv_t;

/* Reads a TSV file. labels_from NULL: the classes are this file's labels,
 * sorted. labels_from set (val/test against train): the classes are copied
 * from it and a label it lacks is an error naming FILE:LINE. An empty file is
 * an error. */
int data_tsv_load(const char *path, const data_tsv_t *labels_from, data_tsv_t **out, char *err,
                  size_t errlen);
void data_tsv_destroy(data_tsv_t **self_p);
/* Class id of name, or -1. */
int32_t data_tsv_class_id(const data_tsv_t *d, const char *name);

/* ---- UTF-8 corpora ------------------------------------------------------ */

/* A text file split into lines (the '\n' removed, a final line without '\n'
 * kept). Empty lines are kept: they are paragraph breaks. */
typedef struct data_text {
    size_t n_lines;
    char **lines;       /* [n_lines], NUL-terminated */
    size_t *line_bytes; /* [n_lines] */
    size_t total_bytes;
    size_t val_start; /* first validation line (see data_text_split) */
    char *buf_;       /* private: the file's bytes, which lines point into */
} data_text_t;

/* Reads a UTF-8 file (invalid UTF-8 or a line over DATA_MAX_TEXT_LINE is an
 * error naming FILE:LINE) and sets val_start by data_text_split(val_fraction). */
int data_text_load(const char *path, double val_fraction, data_text_t **out, char *err,
                   size_t errlen);
void data_text_destroy(data_text_t **self_p);
/* The deterministic split: the validation part is the shortest tail of whole
 * lines holding at least val_fraction of the bytes (0 → no validation lines;
 * at least one training line is kept). Returns the first validation line. */
size_t data_text_split(const data_text_t *t, double val_fraction);

/* ---- tokenized sets (what the cache holds) ------------------------------ */

typedef enum { DATA_KIND_CLS = 1, DATA_KIND_LM = 2 } data_kind;

/* Sequences of token ids, one per example (CLS: BOS a [SEP b] EOS) or per
 * corpus line (LM: the line's ids then EOS, so the concatenation is the token
 * stream). */
typedef struct data_tok {
    data_kind kind;
    int32_t vocab;
    size_t n_seq;
    uint64_t *offsets;  /* [n_seq + 1]; sequence i is tokens[offsets[i] .. offsets[i+1]) */
    int32_t *tokens;    /* [offsets[n_seq]] */
    int32_t *labels;    /* CLS: [n_seq]; LM: NULL */
    size_t n_classes;   /* CLS */
    char **class_names; /* CLS: [n_classes] */
    size_t val_start;   /* LM: first validation sequence (line); CLS: n_seq */
} data_tok_t;

void data_tok_destroy(data_tok_t **self_p);

/* Tokenizes a TSV set / a corpus. */
int data_tok_from_tsv(const data_tsv_t *d, const tok_t *tok, data_tok_t **out, char *err,
                      size_t errlen);
int data_tok_from_text(const data_text_t *t, const tok_t *tok, data_tok_t **out, char *err,
                       size_t errlen);

/* ---- the tokenized cache (data_cache.c) --------------------------------- */

/* What a source file was when a cache was built from it: its contents, not
 * its path or mtime. */
typedef struct data_src_id {
    uint64_t size;
    uint64_t fnv; /* FNV-1a of the contents */
} data_src_id;

int data_src_identify(const char *path, data_src_id *id, char *err, size_t errlen);

/* Writes d to path atomically (data_tmp_name, then rename). extra: a value the
 * caller wants the cache keyed on too (e.g. the val_fraction's bits, or the
 * label set's source); compared on read like the tokenizer hash. */
int data_cache_write(const char *path, const data_tok_t *d, const data_src_id *src,
                     uint64_t tok_hash, uint64_t extra, char *err, size_t errlen);
/* Reads a cache. DATA_ESTALE when src, tok_hash or extra differ from what it
 * was built from; DATA_ECORRUPT when its magic, version, header checksum,
 * payload checksum, length or contents are wrong. Never returns partial data. */
int data_cache_read(const char *path, const data_src_id *src, uint64_t tok_hash, uint64_t extra,
                    data_tok_t **out, char *err, size_t errlen);

/* The folder caches live in (tokenized sets, trained tokenizers): $BF_CACHE,
 * else $XDG_CACHE_HOME/bf, else $HOME/.cache/bf, else /tmp/bf-cache-UID.
 * Creates it (mode 0700) when missing. buf gets the path. */
int data_cache_dir(char *buf, size_t buflen, char *err, size_t errlen);
/* The key a tokenized set is cached under: a hash of its source's contents,
 * the tokenizer, the caller's extra and the kind (DATA_KIND_*). */
uint64_t data_cache_key(const data_src_id *src, uint64_t tok_hash, uint64_t extra, int kind);
/* Cache path "<dir>/data-<16 hex of key>.bfcache". buf gets it. */
int data_cache_path(char *buf, size_t buflen, const char *dir, uint64_t key);
/* A temporary name beside path that no other writer uses at the same time
 * (host, pid, clock, counter): write there, then rename onto path. */
int data_tmp_name(char *buf, size_t buflen, const char *path);

/* The loaders a pipeline calls: read the cache when it is valid, else parse
 * + tokenize src_path and (re)write the cache. *rebuilt (nullable) says
 * which happened. cache_path NULL → data_cache_path(data_cache_dir(),
 * data_cache_key(...)).
 * data_open_tsv: labels_from as in data_tsv_load (the train split's data_tok_t
 * class list, or NULL). data_open_text: the token stream with val_start set
 * by val_fraction. */
int data_open_tsv(const char *src_path, const tok_t *tok, const data_tok_t *labels_from,
                  const char *cache_path, data_tok_t **out, int *rebuilt, char *err, size_t errlen);
int data_open_text(const char *src_path, double val_fraction, const tok_t *tok,
                   const char *cache_path, data_tok_t **out, int *rebuilt, char *err,
                   size_t errlen);

/* ---- IDX images (data_idx.c) -------------------------------------------- */

/* An IDX array (LeCun's format), gzipped or not. Values are converted to
 * host byte order; data holds count * elem_size bytes. */
typedef struct data_idx {
    uint8_t dtype; /* 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64 */
    int ndim;
    uint32_t dims[8];
    size_t count; /* product of dims */
    size_t elem_size;
    void *data;
} data_idx_t;

/* Reads an IDX file; a short payload (truncated), trailing bytes, a bad magic,
 * or a payload over max_bytes (0 → DATA_MAX_IDX_BYTES) is an error. */
int data_idx_read(const char *path, size_t max_bytes, data_idx_t **out, char *err, size_t errlen);
void data_idx_destroy(data_idx_t **self_p);

/* An image classification set: u8 images [n, rows, cols] with u8 labels [n]
 * that must agree in n and be < n_classes (n_classes 0 → max label + 1). */
typedef struct data_images {
    size_t n;
    int rows, cols;
    int n_classes;
    uint8_t *pixels; /* [n, rows, cols] */
    int32_t *labels; /* [n] */
} data_images_t;

int data_images_load(const char *images_path, const char *labels_path, data_images_t **out,
                     char *err, size_t errlen);
void data_images_destroy(data_images_t **self_p);
/* Images [from, to) of im as a CLS set: one sequence of rows*cols pixel
 * values (0..255) per image, its label, classes "0".."n_classes-1". */
int data_tok_from_images(const data_images_t *im, size_t from, size_t to, int n_classes,
                         data_tok_t **out, char *err, size_t errlen);
/* The n images idx[0..n) of im (in that order) as a CLS set; idx NULL: the
 * images [from, from + n). */
int data_tok_from_images_at(const data_images_t *im, const size_t *idx, size_t from, size_t n,
                            int n_classes, data_tok_t **out, char *err, size_t errlen);

/* ---- validation splits (data_split.c) ----------------------------------- */

/* How a validation split is taken from a labelled training file
 * (data.val_split): a sample of each class in proportion to its count,
 * drawn from data.split_seed (stratified), or the file's last items (tail,
 * what bf did before; on a file sorted by label it is one class). */
typedef enum { DATA_SPLIT_STRATIFIED = 0, DATA_SPLIT_TAIL = 1 } data_split_kind;
const char *data_split_name(data_split_kind k);

/* Indices into the file, each list ascending (file order). */
typedef struct data_split {
    size_t n_train, n_val;
    size_t *train_idx, *val_idx;
} data_split_t;

/* Splits n items with labels[i] in 0..n_classes-1: round(val_fraction * n)
 * items (at least 1, at most n - 1) go to validation. Stratified: class k
 * gives its share of them (largest remainder: floor or ceil of
 * val_fraction * count_k, the total kept), never its last item (a class of
 * one stays in training), chosen by a partial Fisher-Yates shuffle from
 * Philox (seed, class): a pure function of (labels, val_fraction, seed).
 * Tail: the last items. Returns 0 with out filled (data_split_free), or an
 * error (bad labels; no class with 2 items under stratified). */
int data_split_make(const int32_t *labels, size_t n, size_t n_classes, double val_fraction,
                    data_split_kind kind, uint64_t seed, data_split_t *out, char *err,
                    size_t errlen);
void data_split_free(data_split_t *s);
/* Runs of equal labels in file order: the number of classes when the file
 * is sorted (grouped) by label, about n (1 - 1/classes) when shuffled. */
size_t data_label_runs(const int32_t *labels, size_t n);
/* The CLS sequences idx[0..n) of src, in that order, with src's classes. */
int data_tok_subset(const data_tok_t *src, const size_t *idx, size_t n, data_tok_t **out, char *err,
                    size_t errlen);

/* ---- the batcher (data_batch.c) ----------------------------------------- */

/* Items: CLS → one sequence per item; LM → a window of seq_len + 1 tokens of
 * the stream (non-overlapping, window w starts at token w * seq_len).
 *
 * The global batch of step s holds items [s*B, (s+1)*B) of the order, where
 * the order of epoch e = floor(k / N) is a permutation of the N items seeded
 * by (seed, e) when shuffle is on, else the identity. Rank r of W takes rows
 * [r*B/W, (r+1)*B/W) of it, so ranks 0..W-1 together hold the global batch
 * exactly once. Nothing depends on the rank but the choice of rows. */
typedef struct data_batcher_opts {
    int global_batch; /* B, divisible by world */
    int seq_len;      /* T */
    int rank, world;  /* 0 <= rank < world */
    uint64_t seed;
    int shuffle; /* 1: new permutation each epoch */
    int wrap;    /* 1: endless (training); 0: one pass, last batch padded, then DATA_END */
    int split;   /* LM: 0 = train (tokens before val_start), 1 = val (from val_start) */
} data_batcher_opts;

typedef struct data_batcher data_batcher_t;

/* d is borrowed and must outlive the batcher. */
int data_batcher_new(const data_tok_t *d, const data_batcher_opts *o, data_batcher_t **out,
                     char *err, size_t errlen);
void data_batcher_destroy(data_batcher_t **self_p);
/* Batches per epoch (rounded up). */
size_t data_batcher_steps_per_epoch(const data_batcher_t *b);

/* This rank's rows of a batch. Buffers are owned by the batch; allocate with
 * data_batch_alloc(rows = B/world, T), free with data_batch_free. */
typedef struct data_batch {
    int rows, seq_len;
    int valid_rows;   /* rows holding an item; the rest are all pad, mask 0, label -1 */
    int32_t *ids;     /* [rows, T], pad 0 */
    float *mask;      /* [rows, T], 1 = token */
    int32_t *labels;  /* CLS: [rows], -1 on empty rows */
    int32_t *targets; /* LM: [rows, T], next token; -1 where mask is 0 */
    uint64_t step;    /* the global step this batch is */
    uint64_t epoch;
} data_batch_t;

int data_batch_alloc(data_batch_t *bt, int rows, int seq_len);
void data_batch_free(data_batch_t *bt);

/* Fills bt with this rank's rows of global step `step` (stateless in step:
 * resuming at step s gives the same batch as having run to s). */
int data_batch_at(data_batcher_t *b, uint64_t step, data_batch_t *bt, char *err, size_t errlen);
/* data_batch_at(next step), then advances; DATA_END when a one-pass batcher is done. */
int data_batch_next(data_batcher_t *b, data_batch_t *bt, char *err, size_t errlen);
/* Sets the next step data_batch_next will produce (resume from a checkpoint). */
void data_batcher_seek(data_batcher_t *b, uint64_t step);

#ifdef __cplusplus
}
#endif
#endif
