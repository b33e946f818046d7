/* safetensors.c — reads and writes the safetensors format with no outside
 * code (safetensors.h): header JSON, tensor lookup, dtype conversion to f32,
 * data hashes and atomic writes. */

#include "worker/io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/hash.h"
#include "common/input_path.h"
#include "kernels/bk_bf16.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c writes host floats as the file's little-endian data"
#endif

/* Every dtype of the format, with its width in bits (the reference's list). */
static const struct {
    const char *name;
    int bits;
} DTYPES[] = {{"BOOL", 8},    {"U8", 8},   {"I8", 8},   {"F8_E5M2", 8}, {"F8_E4M3", 8},
              {"F8_E8M0", 8}, {"I16", 16}, {"U16", 16}, {"F16", 16},    {"BF16", 16},
              {"I32", 32},    {"U32", 32}, {"F32", 32}, {"F64", 64},    {"I64", 64},
              {"U64", 64},    {"C64", 64}, {"F4", 4},   {"F6_E2M3", 6}, {"F6_E3M2", 6}};

static int dtype_bits(const char *s) {
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
        if (strcmp(DTYPES[i].name, s) == 0) return DTYPES[i].bits;
    return 0;
}

void st_close(st_file *f) {
    if (f->f) fclose(f->f);
    for (int i = 0; i < f->n; i++) free(f->t[i].name);
    free(f->t);
    for (int i = 0; i < f->n_meta; i++) {
        free(f->meta_key[i]);
        free(f->meta_val[i]);
    }
    free(f->meta_key);
    free(f->meta_val);
    memset(f, 0, sizeof *f);
}

static int cmp_begin(const void *a, const void *b) {
    const st_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* A JSON integer that is a valid unsigned size, else -1. */
static int json_u64(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int parse_meta(st_file *f, const json_t *m, char *err, size_t errlen) {
    if (!json_is_object(m)) {
        snprintf(err, errlen, "%s: __metadata__ is not an object of strings", f->path);
        return -1;
    }
    size_t n = json_object_size(m);
    if (n > ST_MAX_META) {
        snprintf(err, errlen, "%s: __metadata__ has %zu entries, over the cap of %d", f->path, n,
                 ST_MAX_META);
        return -1;
    }
    f->meta_key = calloc(n ? n : 1, sizeof(char *));
    f->meta_val = calloc(n ? n : 1, sizeof(char *));
    if (!f->meta_key || !f->meta_val) {
        snprintf(err, errlen, "%s: out of memory", f->path);
        return -1;
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)m, k, v) {
        if (!json_is_string(v)) {
            snprintf(err, errlen, "%s: __metadata__ value of \"%.64s\" is not a string", f->path,
                     k);
            return -1;
        }
        if (strlen(k) > ST_MAX_NAME) {
            snprintf(err, errlen, "%s: __metadata__ key of %zu bytes, over the cap of %d", f->path,
                     strlen(k), ST_MAX_NAME);
            return -1;
        }
        f->meta_key[f->n_meta] = strdup(k);
        f->meta_val[f->n_meta] = strdup(json_string_value(v));
        if (!f->meta_key[f->n_meta] || !f->meta_val[f->n_meta]) {
            free(f->meta_key[f->n_meta]);
            free(f->meta_val[f->n_meta]);
            snprintf(err, errlen, "%s: out of memory", f->path);
            return -1;
        }
        f->n_meta++;
    }
    return 0;
}

/* Fills t from one header entry; name is the key. */
static int parse_tensor(st_file *f, const char *name, const json_t *v, st_tensor *t, char *err,
                        size_t errlen) {
    const char *p = f->path;
    if (!*name || strlen(name) > ST_MAX_NAME) {
        snprintf(err, errlen, "%s: a tensor name of %zu bytes (1 to %d allowed)", p, strlen(name),
                 ST_MAX_NAME);
        return -1;
    }
    if (!json_is_object(v)) {
        snprintf(err, errlen, "%s: tensor \"%s\": entry is not an object", p, name);
        return -1;
    }
    const json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
                 *off = json_object_get(v, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(sh) || !json_is_array(off)) {
        snprintf(err, errlen,
                 "%s: tensor \"%s\": needs \"dtype\" (string), \"shape\" (array) and "
                 "\"data_offsets\" (array)",
                 p, name);
        return -1;
    }
    const char *ds = json_string_value(dt);
    t->dtype_bits = dtype_bits(ds);
    if (!t->dtype_bits) {
        snprintf(err, errlen,
                 "%s: tensor \"%s\": unknown dtype \"%.32s\" (F32, F16, BF16, F64, "
                 "I8..I64, U8..U64, BOOL, F8_*, ...)",
                 p, name, ds);
        return -1;
    }
    snprintf(t->dtype, sizeof t->dtype, "%s", ds);
    size_t nd = json_array_size(sh);
    if (nd > ST_MAX_DIMS) {
        snprintf(err, errlen, "%s: tensor \"%s\": %zu dimensions, over the cap of %d", p, name, nd,
                 ST_MAX_DIMS);
        return -1;
    }
    t->ndim = (int)nd;
    t->numel = 1;
    for (size_t i = 0; i < nd; i++) {
        uint64_t d;
        if (json_u64(json_array_get(sh, i), &d) || d > ST_MAX_DIM) {
            snprintf(err, errlen, "%s: tensor \"%s\": shape[%zu] is not an integer in [0, 2^40]", p,
                     name, i);
            return -1;
        }
        t->shape[i] = d;
        if (d && t->numel > UINT64_MAX / 64 / d) {
            snprintf(err, errlen, "%s: tensor \"%s\": shape overflows", p, name);
            return -1;
        }
        t->numel *= d;
    }
    if (json_array_size(off) != 2 || json_u64(json_array_get(off, 0), &t->begin) ||
        json_u64(json_array_get(off, 1), &t->end)) {
        snprintf(err, errlen,
                 "%s: tensor \"%s\": data_offsets must be [begin, end], non-negative integers", p,
                 name);
        return -1;
    }
    uint64_t bits = t->numel * (uint64_t)t->dtype_bits;
    if (bits % 8) {
        snprintf(err, errlen, "%s: tensor \"%s\": %llu elements of %s do not fill whole bytes", p,
                 name, (unsigned long long)t->numel, t->dtype);
        return -1;
    }
    if (t->end < t->begin || t->end - t->begin != bits / 8) {
        snprintf(err, errlen,
                 "%s: tensor \"%s\": data_offsets [%llu, %llu] span %lld bytes, but %s of %llu "
                 "elements needs %llu",
                 p, name, (unsigned long long)t->begin, (unsigned long long)t->end,
                 (long long)(t->end - t->begin), t->dtype, (unsigned long long)t->numel,
                 (unsigned long long)(bits / 8));
        return -1;
    }
    t->name = strdup(name);
    if (!t->name) {
        snprintf(err, errlen, "%s: out of memory", p);
        return -1;
    }
    return 0;
}

/* Offsets must tile [0, data_len) exactly, in begin order. */
static int check_layout(st_file *f, char *err, size_t errlen) {
    qsort(f->t, (size_t)f->n, sizeof *f->t, cmp_begin);
    uint64_t at = 0;
    for (int i = 0; i < f->n; i++) {
        const st_tensor *t = &f->t[i];
        if (t->end > f->data_len) {
            snprintf(err, errlen,
                     "%s: tensor \"%s\" ends at data byte %llu, past the end of the data section "
                     "(%llu bytes): the file is truncated",
                     f->path, t->name, (unsigned long long)t->end, (unsigned long long)f->data_len);
            return -1;
        }
        if (t->begin != at) {
            snprintf(err, errlen,
                     "%s: tensor \"%s\" begins at data byte %llu, but the tensors before it end at "
                     "%llu (%s; offsets must be contiguous and not overlap)",
                     f->path, t->name, (unsigned long long)t->begin, (unsigned long long)at,
                     t->begin < at ? "overlap" : "gap");
            return -1;
        }
        at = t->end;
    }
    if (at != f->data_len) {
        snprintf(err, errlen,
                 "%s: the tensors cover %llu bytes of a %llu-byte data section (trailing bytes: "
                 "damaged or not a safetensors file)",
                 f->path, (unsigned long long)at, (unsigned long long)f->data_len);
        return -1;
    }
    return 0;
}

int st_open(st_file *f, const char *path, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    char *hdr = NULL;
    json_t *root = NULL;
    char why[1100]; /* "not found" may name the working folder */
    f->f = input_path_open(path, why, sizeof why);
    if (!f->f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, why);
        return -1;
    }
    struct stat st;
    unsigned char lb[8];
    if (fstat(fileno(f->f), &st)) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        goto fail;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < 8 || fread(lb, 1, 8, f->f) != 8) {
        snprintf(err, errlen, "%s: %llu bytes, shorter than the 8-byte header length: truncated",
                 path, (unsigned long long)size);
        goto fail;
    }
    for (int i = 0; i < 8; i++) f->header_len |= (uint64_t)lb[i] << (8 * i);
    if (f->header_len > ST_MAX_HEADER) {
        snprintf(err, errlen,
                 "%s: header length %llu is over the cap of %u bytes (not a safetensors file?)",
                 path, (unsigned long long)f->header_len, ST_MAX_HEADER);
        goto fail;
    }
    if (f->header_len < 2 || 8 + f->header_len > size) {
        snprintf(err, errlen,
                 "%s: header length %llu does not fit a file of %llu bytes (truncated or not a "
                 "safetensors file)",
                 path, (unsigned long long)f->header_len, (unsigned long long)size);
        goto fail;
    }
    f->data_start = 8 + f->header_len;
    f->data_len = size - f->data_start;
    hdr = malloc(f->header_len);
    if (!hdr) {
        snprintf(err, errlen, "%s: out of memory for a %llu-byte header", path,
                 (unsigned long long)f->header_len);
        goto fail;
    }
    if (fread(hdr, 1, f->header_len, f->f) != f->header_len) {
        snprintf(err, errlen, "%s: short read of the header", path);
        goto fail;
    }
    if (hdr[0] != '{') {
        snprintf(err, errlen, "%s: the header does not start with '{' (not a safetensors file)",
                 path);
        goto fail;
    }
    json_error_t je;
    root = json_loadb(hdr, f->header_len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        snprintf(err, errlen, "%s: header is not valid JSON at byte %d: %s", path, je.position,
                 je.text);
        goto fail;
    }
    if (!json_is_object(root)) {
        snprintf(err, errlen, "%s: header is not a JSON object", path);
        goto fail;
    }
    size_t nt = json_object_size(root);
    if (nt > ST_MAX_TENSORS + 1) {
        snprintf(err, errlen, "%s: %zu tensors, over the cap of %d", path, nt, ST_MAX_TENSORS);
        goto fail;
    }
    f->t = calloc(nt ? nt : 1, sizeof *f->t);
    if (!f->t) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto fail;
    }
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        if (strcmp(k, "__metadata__") == 0) {
            if (parse_meta(f, v, err, errlen)) goto fail;
            continue;
        }
        if (parse_tensor(f, k, v, &f->t[f->n], err, errlen)) goto fail;
        f->n++;
    }
    if (check_layout(f, err, errlen)) goto fail;
    json_decref(root);
    free(hdr);
    return 0;
fail:
    json_decref(root);
    free(hdr);
    st_close(f);
    return -1;
}

int st_find(const st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0) return i;
    return -1;
}

const char *st_meta(const st_file *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_key[i], key) == 0) return f->meta_val[i];
    return NULL;
}

static int read_at(const st_file *f, uint64_t off, void *buf, size_t n, char *err, size_t errlen) {
    int fd = fileno(f->f);
    char *c = buf;
    while (n) {
        ssize_t r = pread(fd, c, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            snprintf(err, errlen, "%s: read at byte %llu failed: %s", f->path,
                     (unsigned long long)off, r < 0 ? strerror(errno) : "end of file");
            return -1;
        }
        c += r;
        off += (uint64_t)r;
        n -= (size_t)r;
    }
    return 0;
}

int st_read_f32(const st_file *f, int i, float *out, char *err, size_t errlen) {
    if (i < 0 || i >= f->n) {
        snprintf(err, errlen, "%s: no tensor %d", f->path, i);
        return -1;
    }
    const st_tensor *t = &f->t[i];
    if (strcmp(t->dtype, "F32") != 0) {
        snprintf(err, errlen,
                 "%s: tensor \"%s\" is %s; bf reads F32 tensors only (save it as float32)", f->path,
                 t->name, t->dtype);
        return -1;
    }
    return read_at(f, f->data_start + t->begin, out, (size_t)(t->end - t->begin), err, errlen);
}

int st_dtype_converts(const char *dtype) {
    return strcmp(dtype, "F32") == 0 || strcmp(dtype, "F16") == 0 || strcmp(dtype, "BF16") == 0 ||
           strcmp(dtype, "F64") == 0;
}

/* IEEE half (binary16) bits to float, exactly (subnormals, Inf, NaN kept). */
static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                man <<= 1;
                e++;
            } while (!(man & 0x400));
            bits = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
        }
    } else {
        bits = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    float v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

int st_read_as_f32(const st_file *f, int i, float *out, char *err, size_t errlen) {
    if (i < 0 || i >= f->n) {
        snprintf(err, errlen, "%s: no tensor %d", f->path, i);
        return -1;
    }
    const st_tensor *t = &f->t[i];
    if (strcmp(t->dtype, "F32") == 0) return st_read_f32(f, i, out, err, errlen);
    if (!st_dtype_converts(t->dtype)) {
        snprintf(err, errlen,
                 "%s: tensor \"%s\" is %s; bf reads F32, F16, BF16 and F64 tensors (save it as "
                 "one of those)",
                 f->path, t->name, t->dtype);
        return -1;
    }
    size_t bytes = (size_t)(t->end - t->begin), n = (size_t)t->numel;
    unsigned char *raw = malloc(bytes ? bytes : 1);
    if (!raw) {
        snprintf(err, errlen, "%s: out of memory for tensor \"%s\" (%zu bytes)", f->path, t->name,
                 bytes);
        return -1;
    }
    if (read_at(f, f->data_start + t->begin, raw, bytes, err, errlen)) {
        free(raw);
        return -1;
    }
    /* little-endian, as the format says */
    if (strcmp(t->dtype, "F64") == 0) {
        for (size_t k = 0; k < n; k++) {
            uint64_t b = 0;
            for (int j = 0; j < 8; j++) b |= (uint64_t)raw[8 * k + j] << (8 * j);
            double d;
            memcpy(&d, &b, sizeof d);
            out[k] = (float)d;
        }
    } else {
        int bf16 = strcmp(t->dtype, "BF16") == 0;
        for (size_t k = 0; k < n; k++) {
            uint16_t h = (uint16_t)(raw[2 * k] | raw[2 * k + 1] << 8);
            if (bf16) {
                uint32_t bits = (uint32_t)h << 16;
                memcpy(&out[k], &bits, sizeof bits);
            } else {
                out[k] = half_to_float(h);
            }
        }
    }
    free(raw);
    return 0;
}

int st_data_fnv(const st_file *f, uint64_t *out, char *err, size_t errlen) {
    enum { CHUNK = 1 << 20 };
    char *buf = malloc(CHUNK);
    if (!buf) {
        snprintf(err, errlen, "%s: out of memory", f->path);
        return -1;
    }
    uint64_t h = FNV1A64_SEED;
    for (uint64_t at = 0; at < f->data_len;) {
        size_t n = f->data_len - at < CHUNK ? (size_t)(f->data_len - at) : CHUNK;
        if (read_at(f, f->data_start + at, buf, n, err, errlen)) {
            free(buf);
            return -1;
        }
        h = fnv1a64(h, buf, n);
        at += n;
    }
    free(buf);
    *out = h;
    return 0;
}

/* ---- writing ---- */

int st_write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const st_entry *const *)a)->name, (*(const st_entry *const *)b)->name);
}

/* Names present, unique, not the metadata key; shapes valid. */
static int check_entries(const char *path, const st_entry *t, int n, char *err, size_t errlen) {
    if (n < 0 || n > ST_MAX_TENSORS) {
        snprintf(err, errlen, "%s: %d tensors (0 to %d can be written)", path, n, ST_MAX_TENSORS);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        const char *nm = t[i].name ? t[i].name : "";
        if (!*nm || strlen(nm) > ST_MAX_NAME || strcmp(nm, "__metadata__") == 0) {
            snprintf(err, errlen,
                     "%s: tensor %d has the name \"%.64s\" (1 to %d bytes, not "
                     "__metadata__)",
                     path, i, nm, ST_MAX_NAME);
            return -1;
        }
        if (t[i].ndim < 0 || t[i].ndim > ST_MAX_DIMS) {
            snprintf(err, errlen, "%s: tensor \"%s\": %d dimensions (0 to %d)", path, nm, t[i].ndim,
                     ST_MAX_DIMS);
            return -1;
        }
        for (int d = 0; d < t[i].ndim; d++)
            if (t[i].shape[d] < 0 || (uint64_t)t[i].shape[d] > ST_MAX_DIM) {
                snprintf(err, errlen, "%s: tensor \"%s\": shape[%d] = %lld", path, nm, d,
                         (long long)t[i].shape[d]);
                return -1;
            }
    }
    const st_entry **s = malloc((size_t)(n ? n : 1) * sizeof *s);
    if (!s) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    for (int i = 0; i < n; i++) s[i] = &t[i];
    qsort(s, (size_t)n, sizeof *s, cmp_name);
    for (int i = 1; i < n; i++)
        if (strcmp(s[i - 1]->name, s[i]->name) == 0) {
            snprintf(err, errlen, "%s: two tensors named \"%s\"", path, s[i]->name);
            free(s);
            return -1;
        }
    free(s);
    return 0;
}

static uint64_t entry_numel(const st_entry *e) {
    uint64_t n = 1;
    for (int d = 0; d < e->ndim; d++) n *= (uint64_t)e->shape[d];
    return n;
}

/* The header JSON, padded with spaces to a multiple of 8; *len its length.
 * Every tensor is written as dtype (F32 or BF16). */
static char *build_header(const char *path, const st_entry *t, int n, const char *const *meta,
                          int n_meta, int bf16, size_t *len, char *err, size_t errlen) {
    json_t *root = json_object(), *md = NULL;
    char *text = NULL;
    int bad = !root;
    if (!bad && n_meta > 0) {
        md = json_object();
        bad = !md || json_object_set_new(root, "__metadata__", md);
        for (int i = 0; !bad && i < n_meta; i++) {
            const char *k = meta[2 * i], *v = meta[2 * i + 1];
            if (!k || !v || json_object_get(md, k)) {
                json_decref(root);
                snprintf(err, errlen,
                         "%s: metadata key %d (\"%.64s\") is missing, has no value "
                         "or is repeated",
                         path, i, k ? k : "");
                return NULL;
            }
            bad = json_object_set_new(md, k, json_string(v));
        }
    }
    uint64_t at = 0;
    for (int i = 0; !bad && i < n; i++) {
        json_t *shape = json_array();
        for (int d = 0; shape && d < t[i].ndim; d++)
            if (json_array_append_new(shape, json_integer((json_int_t)t[i].shape[d]))) {
                json_decref(shape);
                shape = NULL;
            }
        uint64_t nb = entry_numel(&t[i]) * (bf16 ? sizeof(uint16_t) : sizeof(float));
        json_t *e = shape
                        ? json_pack("{s:s, s:o, s:[I,I]}", "dtype", bf16 ? "BF16" : "F32", "shape",
                                    shape, "data_offsets", (json_int_t)at, (json_int_t)(at + nb))
                        : NULL;
        bad = !e || json_object_set_new(root, t[i].name, e);
        at += nb;
    }
    if (!bad) text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!text) {
        snprintf(err, errlen,
                 "%s: out of memory building the header (or a name or metadata "
                 "value is not UTF-8)",
                 path);
        return NULL;
    }
    size_t n0 = strlen(text), pad = (8 - n0 % 8) % 8;
    if (n0 + pad > ST_MAX_HEADER) {
        snprintf(err, errlen, "%s: header of %zu bytes is over the cap of %u", path, n0 + pad,
                 ST_MAX_HEADER);
        free(text);
        return NULL;
    }
    char *h = realloc(text, n0 + pad + 1);
    if (!h) {
        free(text);
        snprintf(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    memset(h + n0, ' ', pad);
    h[n0 + pad] = '\0';
    *len = n0 + pad;
    return h;
}

static void fsync_dir_of(const char *path) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    int dfd = open(dirname(tmp), O_RDONLY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
}

/* Writes n floats of p to fd as BF16 (each rounded to nearest even, in
 * chunks: no copy of the tensor); 0, or -1 with errno set. */
static int write_bf16(int fd, const float *p, uint64_t n) {
    uint16_t buf[4096];
    for (uint64_t at = 0; at < n;) {
        size_t k = n - at < 4096 ? (size_t)(n - at) : 4096;
        for (size_t j = 0; j < k; j++) buf[j] = bk_bf16_from_f32(p[at + j]);
        if (st_write_all(fd, buf, k * sizeof(uint16_t))) return -1;
        at += k;
    }
    return 0;
}

int st_write(const char *path, const st_entry *t, int n, const char *const *meta, int n_meta,
             char *err, size_t errlen) {
    return st_write_as(path, t, n, meta, n_meta, 0, err, errlen);
}

int st_write_as(const char *path, const st_entry *t, int n, const char *const *meta, int n_meta,
                int bf16, char *err, size_t errlen) {
    if (check_entries(path, t, n, err, errlen)) return -1;
    if (n_meta < 0 || n_meta > ST_MAX_META) {
        snprintf(err, errlen, "%s: %d metadata entries (0 to %d)", path, n_meta, ST_MAX_META);
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (!t[i].data && entry_numel(&t[i])) {
            snprintf(err, errlen, "%s: tensor \"%s\" has no data", path, t[i].name);
            return -1;
        }
    size_t hlen;
    char *hdr = build_header(path, t, n, meta, n_meta, bf16, &hlen, err, errlen);
    if (!hdr) return -1;
    char tmp[4200], dirbuf[4096], basebuf[4096];
    snprintf(dirbuf, sizeof dirbuf, "%s", path);
    snprintf(basebuf, sizeof basebuf, "%s", path);
    const char *base = basename(basebuf);
    size_t bl = strlen(base);
    /* a name that is a temporary already (.NAME.tmp, a checkpoint member
     * before its commit) gets only the pid, not "..NAME.tmp.tmp.PID" */
    int is_tmp = base[0] == '.' && bl > 4 && strcmp(base + bl - 4, ".tmp") == 0;
    snprintf(tmp, sizeof tmp, is_tmp ? "%s/%s.%ld" : "%s/.%s.tmp.%ld", dirname(dirbuf), base,
             (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot create %s: %s", path, tmp, strerror(errno));
        free(hdr);
        return -1;
    }
    unsigned char lb[8];
    for (int i = 0; i < 8; i++) lb[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    int bad = st_write_all(fd, lb, 8) || st_write_all(fd, hdr, hlen);
    free(hdr);
    for (int i = 0; !bad && i < n; i++)
        bad = bf16 ? write_bf16(fd, t[i].data, entry_numel(&t[i]))
                   : st_write_all(fd, t[i].data, (size_t)entry_numel(&t[i]) * sizeof(float));
    if (bad || fsync(fd)) {
        snprintf(err, errlen, "%s: cannot write %s: %s", path, tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        return -1;
    }
    if (close(fd)) {
        snprintf(err, errlen, "%s: cannot close %s: %s", path, tmp, strerror(errno));
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, path)) {
        snprintf(err, errlen, "%s: cannot rename %s over it: %s", path, tmp, strerror(errno));
        unlink(tmp);
        return -1;
    }
    fsync_dir_of(path);
    return 0;
}
