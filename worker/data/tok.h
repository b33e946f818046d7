/* tok — subword tokenizer: a thin C interface over sentencepiece (unigram or
 * BPE). The C++ lives in tok_spm.cc only; no exception crosses into C.
 *
 * Reserved ids, the same in every model this module trains:
 *   pad = 0, unk = 1, bos = 2, eos = 3, sep = 4 ("<sep>", joins TSV pairs).
 * Every fallible call returns 0 on success or a TOK_E* code and writes a
 * message into err (errlen bytes, may be 0). */
#ifndef TOK_H
#define TOK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { TOK_PAD = 0, TOK_UNK = 1, TOK_BOS = 2, TOK_EOS = 3, TOK_SEP = 4 };
#define TOK_SEP_PIECE "<sep>"

enum { TOK_OK = 0, TOK_EINVAL = 1, TOK_EIO = 2, TOK_ELIB = 3, TOK_ENOMEM = 4 };

typedef enum { TOK_UNIGRAM = 0, TOK_BPE = 1 } tok_kind;

typedef struct tok_train_opts {
    tok_kind kind;
    int vocab;                 /* total pieces incl. the 5 reserved; >= 16 */
    const char *prefix;        /* writes PREFIX.model and PREFIX.vocab */
    double character_coverage; /* 0 → 1.0 (all characters of the training text) */
    int byte_fallback;         /* 1: unseen characters become byte pieces, never unk */
    int threads;               /* 0 → 2 */
    int hard_vocab_limit;      /* 0: vocab is an upper bound (tiny corpora) */
    int quiet;                 /* 1: silence sentencepiece's own progress log */
} tok_train_opts;

/* Fills o with defaults: unigram, vocab 8192, coverage 1.0, 2 threads, quiet. */
void tok_train_opts_init(tok_train_opts *o);

/* Trains from a UTF-8 text file, one sentence per line. */
int tok_train_file(const char *path, const tok_train_opts *o, char *err, size_t errlen);

/* Trains from n in-memory NUL-terminated sentences (borrowed). */
int tok_train_sentences(const char *const *sents, size_t n, const tok_train_opts *o, char *err,
                        size_t errlen);

typedef struct tok tok_t;

/* Loads PREFIX.model (pass the .model path). Checks that the reserved ids are
 * as above. *out is owned by the caller: free with tok_destroy. */
int tok_load(tok_t **out, const char *model_path, char *err, size_t errlen);
void tok_destroy(tok_t **self_p);

/* Encodes len bytes of UTF-8 (no BOS/EOS added). *ids is malloc'd, owned by
 * the caller; *n its length. */
int tok_encode(const tok_t *t, const char *text, size_t len, int32_t **ids, size_t *n, char *err,
               size_t errlen);

/* Decodes ids into a malloc'd NUL-terminated string owned by the caller.
 * Reserved ids decode to nothing. An id outside [0, vocab) is TOK_EINVAL. */
int tok_decode(const tok_t *t, const int32_t *ids, size_t n, char **text, char *err, size_t errlen);

int tok_vocab_size(const tok_t *t);
/* Piece text of id ("" when out of range); borrowed, valid while t lives. */
const char *tok_piece(const tok_t *t, int32_t id);
/* 64-bit FNV-1a of the model file's bytes: identifies the tokenizer in caches. */
uint64_t tok_hash(const tok_t *t);

#ifdef __cplusplus
}
#endif
#endif
