/* data_cache — the tokenized cache file, and the open-or-rebuild loaders.
 *
 * Layout (host byte order; a byte-order word rejects a foreign file):
 *   header (struct cache_hdr, 120 bytes, ends with the FNV-1a of the bytes before it)
 *   offsets  u64[n_seq + 1]
 *   tokens   i32[n_tokens]
 *   labels   i32[n_seq]            (CLS only)
 *   names    names_bytes bytes: n_classes NUL-terminated class names (CLS only)
 * The file's size must be exactly what the header implies (truncation and
 * trailing junk are both corruption), payload_fnv covers everything after the
 * header, and every value is range-checked before the data is handed out.
 *
 * Where caches live: one folder (data_cache_dir: $BF_CACHE, else the user's
 * cache directory), never beside the user's data, so a read-only or shared
 * data folder works and two users never write into each other's folders.
 * A cache's name is a hash of what it was built from (the source's contents,
 * the tokenizer, the caller's key): a copy of a file at another path, or a
 * touched file, finds the same cache; a changed file gets a new one. Writers
 * write under a name of their own and rename it into place, so readers only
 * ever see whole files, and two writers of the same cache at once both
 * succeed (the last rename wins; the contents are the same). */
#include "worker/data/data.h"
#include "worker/data/data_priv.h"

#include "common/hash.h"
#include "common/input_path.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Fuzz builds (FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION) do not enforce the
 * checksums, which random bytes never match, so the fuzzer reaches the
 * checks behind them. */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define BF_FUZZING 1
#else
#define BF_FUZZING 0
#endif

#define CACHE_MAGIC "BFTOKCA\0"
#define CACHE_VERSION 1u
#define CACHE_BYTE_ORDER 0x01020304u

typedef struct cache_hdr {
    char magic[8];
    uint32_t version, byte_order;
    uint32_t kind;
    int32_t vocab;
    uint64_t n_seq, n_tokens, n_classes, val_start, names_bytes;
    uint64_t src_size;
    int64_t unused; /* was the source's mtime; the contents decide now */
    uint64_t src_fnv;
    uint64_t tok_hash, extra;
    uint64_t payload_fnv;
    uint64_t header_fnv;
} cache_hdr;

_Static_assert(sizeof(cache_hdr) == 120, "cache header must have no padding");

int data_src_identify(const char *path, data_src_id *id, char *err, size_t errlen) {
    if (!path || !id)
        return data_fail(err, errlen, DATA_EINVAL, "data_src_identify: null argument");
    memset(id, 0, sizeof *id);
    char why[1100]; /* "not found" may name the working folder */
    FILE *f = input_path_open(path, why, sizeof why);
    if (!f) return data_fail(err, errlen, DATA_EIO, "%s: %s", path, why);
    uint64_t h = FNV1A64_SEED, n = 0;
    unsigned char buf[1 << 16];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0) {
        h = fnv1a64(h, buf, k);
        n += k;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) return data_fail(err, errlen, DATA_EIO, "%s: read error", path);
    id->size = n;
    id->fnv = h;
    return DATA_OK;
}

/* mkdir -p; mode for the folders it creates. */
static int make_dirs(const char *path, mode_t mode, char *err, size_t errlen) {
    char p[4096];
    int w = snprintf(p, sizeof p, "%s", path);
    if (w < 0 || (size_t)w >= sizeof p)
        return data_fail(err, errlen, DATA_EINVAL, "cache folder path too long: %.200s", path);
    for (char *s = p + 1;; s++) {
        char c = *s;
        if (c != '/' && c != '\0') continue;
        *s = '\0';
        if (mkdir(p, mode) != 0 && errno != EEXIST)
            return data_fail(err, errlen, DATA_EIO, "cannot create the cache folder %s: %s", p,
                             strerror(errno));
        *s = c;
        if (!c) break;
    }
    struct stat st;
    if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode))
        return data_fail(err, errlen, DATA_EIO, "cache folder %s is not a folder", p);
    return DATA_OK;
}

int data_cache_dir(char *buf, size_t buflen, char *err, size_t errlen) {
    const char *env = getenv("BF_CACHE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int w;
    if (env && *env)
        w = snprintf(buf, buflen, "%s", env);
    else if (xdg && *xdg == '/')
        w = snprintf(buf, buflen, "%s/bf", xdg);
    else if (home && *home == '/')
        w = snprintf(buf, buflen, "%s/.cache/bf", home);
    else
        w = snprintf(buf, buflen, "/tmp/bf-cache-%ld", (long)getuid());
    if (w < 0 || (size_t)w >= buflen)
        return data_fail(err, errlen, DATA_EINVAL, "cache folder path too long (BF_CACHE?)");
    int rc = make_dirs(buf, 0700, err, errlen);
    if (rc && env && *env) {
        size_t l = strlen(err);
        if (l + 40 < errlen) snprintf(err + l, errlen - l, " (from BF_CACHE)");
    }
    return rc;
}

uint64_t data_cache_key(const data_src_id *src, uint64_t tok_hash, uint64_t extra, int kind) {
    uint64_t v[5] = {src->size, src->fnv, tok_hash, extra, (uint64_t)kind};
    return fnv1a64(FNV1A64_SEED, v, sizeof v);
}

int data_cache_path(char *buf, size_t buflen, const char *dir, uint64_t key) {
    int w = snprintf(buf, buflen, "%s/data-%016" PRIx64 ".bfcache", dir, key);
    return (w < 0 || (size_t)w >= buflen) ? DATA_EINVAL : DATA_OK;
}

int data_tmp_name(char *buf, size_t buflen, const char *path) {
    static unsigned counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char host[64] = "";
    if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    host[sizeof host - 1] = '\0';
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    int w = snprintf(buf, buflen, "%s.tmp-%s-%ld-%lx-%u", path, host, (long)getpid(),
                     (unsigned long)ts.tv_nsec, counter++);
    return (w < 0 || (size_t)w >= buflen) ? DATA_EINVAL : DATA_OK;
}

static size_t names_size(const data_tok_t *d) {
    size_t s = 0;
    if (d->kind == DATA_KIND_CLS)
        for (size_t i = 0; i < d->n_classes; i++) s += strlen(d->class_names[i]) + 1;
    return s;
}

int data_cache_write(const char *path, const data_tok_t *d, const data_src_id *src,
                     uint64_t tok_hash, uint64_t extra, char *err, size_t errlen) {
    if (!path || !d || !src)
        return data_fail(err, errlen, DATA_EINVAL, "data_cache_write: null argument");
    cache_hdr h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, CACHE_MAGIC, 8);
    h.version = CACHE_VERSION;
    h.byte_order = CACHE_BYTE_ORDER;
    h.kind = (uint32_t)d->kind;
    h.vocab = d->vocab;
    h.n_seq = d->n_seq;
    h.n_tokens = d->offsets[d->n_seq];
    h.n_classes = d->kind == DATA_KIND_CLS ? d->n_classes : 0;
    h.val_start = d->val_start;
    h.names_bytes = names_size(d);
    h.src_size = src->size;
    h.src_fnv = src->fnv;
    h.tok_hash = tok_hash;
    h.extra = extra;
    uint64_t p = FNV1A64_SEED;
    p = fnv1a64(p, d->offsets, (d->n_seq + 1) * sizeof(uint64_t));
    p = fnv1a64(p, d->tokens, h.n_tokens * sizeof(int32_t));
    if (d->kind == DATA_KIND_CLS) {
        p = fnv1a64(p, d->labels, d->n_seq * sizeof(int32_t));
        for (size_t i = 0; i < d->n_classes; i++)
            p = fnv1a64(p, d->class_names[i], strlen(d->class_names[i]) + 1);
    }
    h.payload_fnv = p;
    h.header_fnv = fnv1a64(FNV1A64_SEED, &h, offsetof(cache_hdr, header_fnv));

    char tmp[4200];
    if (data_tmp_name(tmp, sizeof tmp, path))
        return data_fail(err, errlen, DATA_EINVAL, "%s: path too long", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return data_fail(err, errlen, DATA_EIO, "%s: %s", tmp, strerror(errno));
    int ok = fwrite(&h, sizeof h, 1, f) == 1 &&
             fwrite(d->offsets, sizeof(uint64_t), d->n_seq + 1, f) == d->n_seq + 1 &&
             fwrite(d->tokens, sizeof(int32_t), h.n_tokens, f) == h.n_tokens;
    if (ok && d->kind == DATA_KIND_CLS) {
        ok = fwrite(d->labels, sizeof(int32_t), d->n_seq, f) == d->n_seq;
        for (size_t i = 0; ok && i < d->n_classes; i++) {
            size_t l = strlen(d->class_names[i]) + 1;
            ok = fwrite(d->class_names[i], 1, l, f) == l;
        }
    }
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int e = errno;
    if (fclose(f) != 0) ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        if (ok) e = errno;
        unlink(tmp);
        return data_fail(err, errlen, DATA_EIO, "%s: cannot write cache: %s", path, strerror(e));
    }
    return DATA_OK;
}

int data_cache_read(const char *path, const data_src_id *src, uint64_t tok_hash, uint64_t extra,
                    data_tok_t **out, char *err, size_t errlen) {
    if (!path || !out) return data_fail(err, errlen, DATA_EINVAL, "data_cache_read: null argument");
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return data_fail(err, errlen, DATA_EIO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fclose(f);
        return data_fail(err, errlen, DATA_EIO, "%s: %s", path, strerror(errno));
    }
    uint64_t fsize = (uint64_t)st.st_size;
    cache_hdr h;
    data_tok_t *d = NULL;
    int rc;
    if (fread(&h, sizeof h, 1, f) != 1) {
        rc = data_fail(err, errlen, DATA_ECORRUPT,
                       "%s: shorter than a cache header (%" PRIu64 " bytes)", path, fsize);
        goto fail;
    }
    if (memcmp(h.magic, CACHE_MAGIC, 8) != 0) {
        rc = data_fail(err, errlen, DATA_ECORRUPT, "%s: not a bf token cache (bad magic)", path);
        goto fail;
    }
    if (!BF_FUZZING && h.header_fnv != fnv1a64(FNV1A64_SEED, &h, offsetof(cache_hdr, header_fnv))) {
        rc = data_fail(err, errlen, DATA_ECORRUPT, "%s: header checksum mismatch", path);
        goto fail;
    }
    if (h.version != CACHE_VERSION || h.byte_order != CACHE_BYTE_ORDER) {
        rc = data_fail(err, errlen, DATA_ESTALE,
                       "%s: cache version %u (this build reads %u) or foreign byte order", path,
                       h.version, CACHE_VERSION);
        goto fail;
    }
    if (h.kind != DATA_KIND_CLS && h.kind != DATA_KIND_LM) {
        rc = data_fail(err, errlen, DATA_ECORRUPT, "%s: unknown kind %u", path, h.kind);
        goto fail;
    }
    if ((src && (h.src_size != src->size || h.src_fnv != src->fnv)) || h.tok_hash != tok_hash ||
        h.extra != extra) {
        rc = data_fail(err, errlen, DATA_ESTALE, "%s: built from another %s", path,
                       h.tok_hash != tok_hash ? "tokenizer"
                       : h.extra != extra     ? "configuration"
                                              : "source file");
        goto fail;
    }
    /* Exact expected size, computed without overflow: each count is first
     * bounded by the file size. */
    int cls = h.kind == DATA_KIND_CLS;
    if (h.n_seq > fsize / 8 || h.n_tokens > fsize / 4 || h.names_bytes > fsize ||
        h.n_classes > DATA_MAX_CLASSES || h.val_start > h.n_seq || h.vocab <= 0) {
        rc = data_fail(err, errlen, DATA_ECORRUPT, "%s: header counts do not fit the file", path);
        goto fail;
    }
    uint64_t want =
        sizeof h + (h.n_seq + 1) * 8 + h.n_tokens * 4 + (cls ? h.n_seq * 4 + h.names_bytes : 0);
    if (want != fsize) {
        rc = data_fail(err, errlen, DATA_ECORRUPT,
                       "%s: %" PRIu64 " bytes but the header says %" PRIu64 " (%s)", path, fsize,
                       want, fsize < want ? "truncated" : "trailing bytes");
        goto fail;
    }
    d = calloc(1, sizeof *d);
    if (!d) goto nomem;
    d->kind = (data_kind)h.kind;
    d->vocab = h.vocab;
    d->n_seq = h.n_seq;
    d->val_start = h.val_start;
    d->offsets = malloc((h.n_seq + 1) * 8);
    d->tokens = malloc(h.n_tokens ? h.n_tokens * 4 : 4);
    if (!d->offsets || !d->tokens) goto nomem;
    char *names = NULL;
    if (cls) {
        d->labels = malloc(h.n_seq ? h.n_seq * 4 : 4);
        d->class_names = calloc(h.n_classes ? h.n_classes : 1, sizeof(char *));
        names = malloc(h.names_bytes + 1);
        if (!d->labels || !d->class_names || !names) {
            free(names);
            goto nomem;
        }
    }
    int ok = fread(d->offsets, 8, h.n_seq + 1, f) == h.n_seq + 1 &&
             fread(d->tokens, 4, h.n_tokens, f) == h.n_tokens &&
             (!cls || (fread(d->labels, 4, h.n_seq, f) == h.n_seq &&
                       fread(names, 1, h.names_bytes, f) == h.names_bytes));
    if (!ok) {
        free(names);
        rc = data_fail(err, errlen, DATA_ECORRUPT, "%s: short read (truncated while reading?)",
                       path);
        goto fail;
    }
    uint64_t p = FNV1A64_SEED;
    p = fnv1a64(p, d->offsets, (h.n_seq + 1) * 8);
    p = fnv1a64(p, d->tokens, h.n_tokens * 4);
    if (cls) {
        p = fnv1a64(p, d->labels, h.n_seq * 4);
        p = fnv1a64(p, names, h.names_bytes);
    }
    if (!BF_FUZZING && p != h.payload_fnv) {
        free(names);
        rc = data_fail(err, errlen, DATA_ECORRUPT, "%s: payload checksum mismatch", path);
        goto fail;
    }
    int bad = d->offsets[0] != 0 || d->offsets[h.n_seq] != h.n_tokens;
    for (uint64_t i = 0; !bad && i < h.n_seq; i++) bad = d->offsets[i] > d->offsets[i + 1];
    for (uint64_t i = 0; !bad && i < h.n_tokens; i++)
        bad = d->tokens[i] < 0 || d->tokens[i] >= h.vocab;
    for (uint64_t i = 0; cls && !bad && i < h.n_seq; i++)
        bad = d->labels[i] < 0 || (uint64_t)d->labels[i] >= h.n_classes;
    if (cls && !bad) {
        /* names: exactly n_classes NUL-terminated strings filling names_bytes */
        names[h.names_bytes] = 0;
        uint64_t at = 0, k = 0;
        while (!bad && k < h.n_classes) {
            if (at >= h.names_bytes) {
                bad = 1;
                break;
            }
            size_t l = strnlen(names + at, h.names_bytes - at);
            if (at + l >= h.names_bytes || !(d->class_names[k] = strdup(names + at))) {
                bad = 1;
                break;
            }
            d->n_classes = ++k;
            at += l + 1;
        }
        if (at != h.names_bytes) bad = 1;
    }
    free(names);
    if (bad) {
        rc = data_fail(err, errlen, DATA_ECORRUPT, "%s: values out of range", path);
        goto fail;
    }
    fclose(f);
    *out = d;
    return DATA_OK;
nomem:
    rc = data_fail(err, errlen, DATA_ENOMEM, "%s: out of memory", path);
fail:
    fclose(f);
    data_tok_destroy(&d);
    return rc;
}

/* What a val/test split's cache also depends on: the class list it was
 * mapped against. */
static uint64_t labels_key(const data_tok_t *labels_from) {
    if (!labels_from) return 0;
    uint64_t h = FNV1A64_SEED;
    for (size_t i = 0; i < labels_from->n_classes; i++)
        h = fnv1a64(h, labels_from->class_names[i], strlen(labels_from->class_names[i]) + 1);
    return h;
}

static uint64_t fraction_key(double f) {
    uint64_t u;
    memcpy(&u, &f, sizeof u);
    return fnv1a64(FNV1A64_SEED, &u, sizeof u);
}

/* Shared tail of data_open_*: try the cache, else build and rewrite it. */
typedef int (*build_fn)(const char *src, const tok_t *tok, const void *arg, data_tok_t **out,
                        char *err, size_t errlen);

static int open_cached(const char *src_path, const tok_t *tok, const char *cache_path,
                       data_kind kind, uint64_t extra, build_fn build, const void *arg,
                       data_tok_t **out, int *rebuilt, char *err, size_t errlen) {
    if (!src_path || !tok || !out)
        return data_fail(err, errlen, DATA_EINVAL, "data_open: null argument");
    *out = NULL;
    if (rebuilt) *rebuilt = 0;
    data_src_id id;
    int rc = data_src_identify(src_path, &id, err, errlen);
    if (rc) return rc;
    char pbuf[4200], dir[4096];
    if (!cache_path) {
        if ((rc = data_cache_dir(dir, sizeof dir, err, errlen))) return rc;
        if (data_cache_path(pbuf, sizeof pbuf, dir,
                            data_cache_key(&id, tok_hash(tok), extra, (int)kind)))
            return data_fail(err, errlen, DATA_EINVAL, "%s: cache path too long", dir);
        cache_path = pbuf;
    }
    if (data_cache_read(cache_path, &id, tok_hash(tok), extra, out, NULL, 0) == DATA_OK &&
        (*out)->vocab == tok_vocab_size(tok))
        return DATA_OK;
    data_tok_destroy(out);
    rc = build(src_path, tok, arg, out, err, errlen);
    if (rc) return rc;
    if (rebuilt) *rebuilt = 1;
    /* A cache that cannot be written (a full or read-only cache folder)
     * costs time, not correctness: the freshly built data is returned
     * either way. */
    (void)data_cache_write(cache_path, *out, &id, tok_hash(tok), extra, NULL, 0);
    return DATA_OK;
}

static int build_tsv(const char *src, const tok_t *tok, const void *arg, data_tok_t **out,
                     char *err, size_t errlen) {
    const data_tok_t *lf = arg;
    data_tsv_t ref;
    memset(&ref, 0, sizeof ref);
    if (lf) {
        ref.n_classes = lf->n_classes;
        ref.class_names = lf->class_names;
    }
    data_tsv_t *t;
    int rc = data_tsv_load(src, lf ? &ref : NULL, &t, err, errlen);
    if (rc) return rc;
    rc = data_tok_from_tsv(t, tok, out, err, errlen);
    data_tsv_destroy(&t);
    return rc;
}

static int build_text(const char *src, const tok_t *tok, const void *arg, data_tok_t **out,
                      char *err, size_t errlen) {
    data_text_t *t;
    int rc = data_text_load(src, *(const double *)arg, &t, err, errlen);
    if (rc) return rc;
    rc = data_tok_from_text(t, tok, out, err, errlen);
    data_text_destroy(&t);
    return rc;
}

int data_open_tsv(const char *src_path, const tok_t *tok, const data_tok_t *labels_from,
                  const char *cache_path, data_tok_t **out, int *rebuilt, char *err,
                  size_t errlen) {
    if (labels_from && labels_from->kind != DATA_KIND_CLS)
        return data_fail(err, errlen, DATA_EINVAL,
                         "data_open_tsv: labels_from is not a classification set");
    return open_cached(src_path, tok, cache_path, DATA_KIND_CLS, labels_key(labels_from), build_tsv,
                       labels_from, out, rebuilt, err, errlen);
}

int data_open_text(const char *src_path, double val_fraction, const tok_t *tok,
                   const char *cache_path, data_tok_t **out, int *rebuilt, char *err,
                   size_t errlen) {
    if (!(val_fraction >= 0 && val_fraction < 1))
        return data_fail(err, errlen, DATA_EINVAL, "val_fraction %g is outside [0, 1)",
                         val_fraction);
    return open_cached(src_path, tok, cache_path, DATA_KIND_LM, fraction_key(val_fraction),
                       build_text, &val_fraction, out, rebuilt, err, errlen);
}
