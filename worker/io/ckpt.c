/* ckpt.c — checkpoints (ckpt.h): the older checkpoint.bin, the config check
 * between a checkpoint and the current run, the v3 checkpoint set
 * (model.safetensors + state.json) saved and loaded, and init.from. */

#include "worker/io/ckpt.h"
#include "worker/io/ckpt_map.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/input_path.h"
#include "worker/io/safetensors.h"

/* Fuzz builds (FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION) do not enforce the
 * checksums, which random bytes never match, so the fuzzer reaches the
 * checks behind them. */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define BF_FUZZING 1
#else
#define BF_FUZZING 0
#endif

static const char MAGIC[8] = {'B', 'F', 'C', 'K', 'P', 'T', 0, 0};
#define HEADER_BYTES 80
#define FNV_INIT 1469598103934665603ull

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) {
        h ^= c[i];
        h *= 1099511628211ull;
    }
    return h;
}

static void put64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t get64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static uint32_t get32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int ckpt_write(const char *dir, const ckpt_state *s, char *err, size_t errlen) {
    char tmp[4096], final[4096];
    size_t cfg_len = s->cfg_text ? strlen(s->cfg_text) : 0;
    if (cfg_len > CKPT_MAX_CFG) {
        snprintf(err, errlen, "checkpoint: config text of %zu bytes is over the %u-byte cap",
                 cfg_len, CKPT_MAX_CFG);
        return -1;
    }
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp.%ld", dir, CKPT_NAME, (long)getpid());
    snprintf(final, sizeof final, "%s/%s", dir, CKPT_NAME);
    size_t nb = s->n_params * sizeof(float);
    uint64_t pf = FNV_INIT;
    pf = fnv(pf, s->cfg_text, cfg_len);
    pf = fnv(pf, s->params, nb);
    pf = fnv(pf, s->m, nb);
    pf = fnv(pf, s->v, nb);
    unsigned char h[HEADER_BYTES];
    memset(h, 0, sizeof h);
    memcpy(h, MAGIC, 8);
    h[8] = CKPT_VERSION;
    put64(h + 16, s->n_params);
    put64(h + 24, s->step);
    put64(h + 32, s->seed);
    put64(h + 40, s->data_step);
    put64(h + 48, cfg_len);
    put64(h + 56, pf);
    put64(h + 64, fnv(FNV_INIT, s->cfg_text, cfg_len));
    put64(h + 72, fnv(FNV_INIT, h, 72));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "checkpoint: cannot create %s: %s", tmp, strerror(errno));
        return -1;
    }
    if (st_write_all(fd, h, sizeof h) || st_write_all(fd, s->cfg_text, cfg_len) ||
        st_write_all(fd, s->params, nb) || st_write_all(fd, s->m, nb) ||
        st_write_all(fd, s->v, nb) || fsync(fd)) {
        snprintf(err, errlen, "checkpoint: cannot write %s: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        return -1;
    }
    close(fd);
    if (rename(tmp, final)) {
        snprintf(err, errlen, "checkpoint: cannot rename %s to %s: %s", tmp, final,
                 strerror(errno));
        unlink(tmp);
        return -1;
    }
    int dfd = open(dir, O_RDONLY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
}

int ckpt_read(const char *path, ckpt_state *s, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    char file[4096];
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(file, sizeof file, "%s/%s", path, CKPT_NAME);
    else
        snprintf(file, sizeof file, "%s", path);
    char why[128];
    FILE *f = input_path_open(file, why, sizeof why);
    if (!f) {
        snprintf(err, errlen, "checkpoint %s: cannot open: %s", file, why);
        return -1;
    }
    /* Version 1 (72-byte header, no config hash) is still read: a checkpoint
     * written by an older bf is never stranded. Its fields sit at the same
     * offsets up to byte 64. */
    unsigned char h[HEADER_BYTES];
    const size_t v1_bytes = 72;
    if (fread(h, 1, v1_bytes, f) != v1_bytes) {
        snprintf(err, errlen, "checkpoint %s: truncated header (not a bf checkpoint?)", file);
        goto fail;
    }
    if (memcmp(h, MAGIC, 8) != 0) {
        snprintf(err, errlen, "checkpoint %s: bad magic: not a bf checkpoint", file);
        goto fail;
    }
    const unsigned version = get32(h + 8);
    if (version != 1 && version != CKPT_VERSION) {
        snprintf(err, errlen, "checkpoint %s: format version %u, this bf reads versions 1 to %d",
                 file, version, CKPT_VERSION);
        goto fail;
    }
    size_t hbytes = version == 1 ? v1_bytes : HEADER_BYTES;
    if (hbytes > v1_bytes && fread(h + v1_bytes, 1, hbytes - v1_bytes, f) != hbytes - v1_bytes) {
        snprintf(err, errlen, "checkpoint %s: truncated header", file);
        goto fail;
    }
    if (!BF_FUZZING && get64(h + hbytes - 8) != fnv(FNV_INIT, h, hbytes - 8)) {
        snprintf(err, errlen, "checkpoint %s: header checksum mismatch (damaged file)", file);
        goto fail;
    }
    s->n_params = get64(h + 16);
    s->step = get64(h + 24);
    s->seed = get64(h + 32);
    s->data_step = get64(h + 40);
    uint64_t cfg_len = get64(h + 48);
    if (cfg_len > CKPT_MAX_CFG || s->n_params > ((uint64_t)1 << 36)) {
        snprintf(err, errlen, "checkpoint %s: implausible sizes (config %llu bytes, %llu params)",
                 file, (unsigned long long)cfg_len, (unsigned long long)s->n_params);
        goto fail;
    }
    uint64_t want = hbytes + cfg_len + 3 * s->n_params * sizeof(float);
    if (fstat(fileno(f), &st) || (uint64_t)st.st_size != want) {
        snprintf(err, errlen, "checkpoint %s: %lld bytes, expected %llu (truncated or padded)",
                 file, (long long)st.st_size, (unsigned long long)want);
        goto fail;
    }
    size_t nb = s->n_params * sizeof(float);
    s->cfg_text = calloc(cfg_len + 1, 1);
    s->params = malloc(nb ? nb : 1);
    s->m = malloc(nb ? nb : 1);
    s->v = malloc(nb ? nb : 1);
    if (!s->cfg_text || !s->params || !s->m || !s->v) {
        snprintf(err, errlen, "checkpoint %s: out of memory", file);
        goto fail;
    }
    if (fread(s->cfg_text, 1, cfg_len, f) != cfg_len || fread(s->params, 1, nb, f) != nb ||
        fread(s->m, 1, nb, f) != nb || fread(s->v, 1, nb, f) != nb) {
        snprintf(err, errlen, "checkpoint %s: short read", file);
        goto fail;
    }
    uint64_t pf = FNV_INIT;
    pf = fnv(pf, s->cfg_text, cfg_len);
    pf = fnv(pf, s->params, nb);
    pf = fnv(pf, s->m, nb);
    pf = fnv(pf, s->v, nb);
    if (!BF_FUZZING && pf != get64(h + 56)) {
        snprintf(err, errlen, "checkpoint %s: payload checksum mismatch (damaged file)", file);
        goto fail;
    }
    s->cfg_hash = version == 1 ? fnv(FNV_INIT, s->cfg_text, cfg_len) : get64(h + 64);
    if (s->cfg_hash != fnv(FNV_INIT, s->cfg_text, cfg_len)) {
        snprintf(err, errlen, "checkpoint %s: config hash does not match its config text", file);
        goto fail;
    }
    fclose(f);
    return 0;
fail:
    fclose(f);
    ckpt_free(s);
    return -1;
}

void ckpt_free(ckpt_state *s) {
    free(s->params);
    free(s->m);
    free(s->v);
    free(s->cfg_text);
    memset(s, 0, sizeof *s);
}

/* Keys whose value does not change what training computes. */
static int key_ignored(const char *k, size_t n) {
    static const char *keys[] = {"device",
                                 "data.dir",
                                 "train.log_every",
                                 "train.eval_every",
                                 "train.checkpoint_every",
                                 "init.from",
                                 "init.map",
                                 NULL};
    for (const char **p = keys; *p; p++)
        if (strlen(*p) == n && memcmp(*p, k, n) == 0) return 1;
    return 0;
}

/* Finds "key: value" for key in text; returns the value's start and length, or NULL. */
static const char *find_key(const char *text, const char *key, size_t klen, size_t *vlen) {
    for (const char *l = text; l && *l;) {
        const char *e = strchr(l, '\n');
        size_t n = e ? (size_t)(e - l) : strlen(l);
        if (n > klen + 1 && memcmp(l, key, klen) == 0 && l[klen] == ':') {
            const char *v = l + klen + 1;
            while (v < l + n && *v == ' ') v++;
            *vlen = (size_t)(l + n - v);
            return v;
        }
        l = e ? e + 1 : NULL;
    }
    return NULL;
}

/* Checks every key of a (that counts) against b; which names a's role in the message. */
static int cfg_lines_match(const char *a, const char *b, int a_is_ckpt, ckpt_key_filter counts,
                           void *ctx, char *err, size_t errlen) {
    for (const char *l = a; l && *l;) {
        const char *e = strchr(l, '\n');
        size_t n = e ? (size_t)(e - l) : strlen(l);
        const char *colon = memchr(l, ':', n);
        if (colon && !key_ignored(l, (size_t)(colon - l)) &&
            (!counts || counts(ctx, l, (size_t)(colon - l)))) {
            size_t klen = (size_t)(colon - l), alen, blen = 0;
            const char *av = colon + 1;
            while (av < l + n && *av == ' ') av++;
            alen = (size_t)(l + n - av);
            const char *bv = find_key(b, l, klen, &blen);
            if (!bv || blen != alen || memcmp(av, bv, alen) != 0) {
                const char *cv = a_is_ckpt ? av : bv, *nv = a_is_ckpt ? bv : av;
                size_t cl = a_is_ckpt ? alen : blen, nl = a_is_ckpt ? blen : alen;
                snprintf(err, errlen,
                         "the checkpoint was written with a different config: %.*s is %.*s in the "
                         "checkpoint but %.*s now (resume with the checkpoint's config, or train "
                         "into a fresh --out)",
                         (int)klen, l, cv ? (int)cl : 9, cv ? cv : "(missing)", nv ? (int)nl : 9,
                         nv ? nv : "(missing)");
                return -1;
            }
        }
        l = e ? e + 1 : NULL;
    }
    return 0;
}

int ckpt_config_check_keys(const char *ckpt_cfg, const char *cur_cfg, ckpt_key_filter counts,
                           void *ctx, char *err, size_t errlen) {
    if (cfg_lines_match(ckpt_cfg, cur_cfg, 1, counts, ctx, err, errlen)) return -1;
    return cfg_lines_match(cur_cfg, ckpt_cfg, 0, counts, ctx, err, errlen);
}

int ckpt_config_check(const char *ckpt_cfg, const char *cur_cfg, char *err, size_t errlen) {
    return ckpt_config_check_keys(ckpt_cfg, cur_cfg, NULL, NULL, err, errlen);
}

/* ================================================= the checkpoint set (v3) */

#define TMP_MODEL "." CKPT_MODEL_FILE ".tmp"
#define TMP_OPTIM "." CKPT_OPTIM_FILE ".tmp"

static void join(char *out, size_t n, const char *dir, const char *name) {
    snprintf(out, n, "%s/%s", dir, name);
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static void fsync_dir(const char *dir) {
    int dfd = open(dir, O_RDONLY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
}

static void hex16(uint64_t v, char out[17]) { snprintf(out, 17, "%016llx", (unsigned long long)v); }

/* Strict: exactly 16 lowercase or uppercase hex digits. */
static int parse_hex16(const char *s, uint64_t *out) {
    if (!s || strlen(s) != 16) return -1;
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return 0;
}

/* Strict decimal u64 ("0" .. "18446744073709551615"). */
static int parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s || strlen(s) > 20) return -1;
    uint64_t v = 0;
    for (const char *c = s; *c; c++) {
        if (*c < '0' || *c > '9') return -1;
        uint64_t d = (uint64_t)(*c - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

static int counter_name_ok(const char *s) {
    size_t n = strnlen(s, CKPT_COUNTER_NAME);
    if (n == 0 || n >= CKPT_COUNTER_NAME) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

/* Tensor indices of P in buffer order. */
static int *buffer_order(const bk_params *P) {
    int *o = malloc((size_t)(P->n ? P->n : 1) * sizeof *o);
    if (!o) return NULL;
    for (int i = 0; i < P->n; i++) o[i] = i;
    for (int i = 1; i < P->n; i++) /* insertion sort: n is small and nearly sorted */
        for (int j = i; j > 0 && P->t[o[j - 1]].offset > P->t[o[j]].offset; j--) {
            int t = o[j];
            o[j] = o[j - 1];
            o[j - 1] = t;
        }
    return o;
}

/* P's tensors tile [0, numel) exactly (what bk_params_alloc makes). */
static int check_params(const bk_params *P, const int *order, char *err, size_t errlen) {
    if (!P || P->n <= 0 || P->numel == 0) {
        snprintf(err, errlen, "checkpoint: the parameter list is empty (bk_params_alloc first)");
        return -1;
    }
    size_t at = 0;
    for (int k = 0; k < P->n; k++) {
        const bk_tensor *t = &P->t[order[k]];
        if (t->offset != at || !t->name[0]) {
            snprintf(err, errlen,
                     "checkpoint: parameter \"%s\" at offset %zu, expected %zu (the "
                     "list must tile its buffer, as bk_params_alloc lays it out)",
                     t->name, t->offset, at);
            return -1;
        }
        at += t->numel;
    }
    if (at != P->numel) {
        snprintf(err, errlen, "checkpoint: parameters cover %zu of %zu floats", at, P->numel);
        return -1;
    }
    return 0;
}

/* The tensors of one safetensors file of the set: for each of the n_bufs
 * buffers (params; or m, v), one entry per parameter in buffer order. */
typedef struct set_file {
    st_entry *e;
    int64_t (*shape)[BK_MAX_DIMS];
    char (*name)[BK_NAME_MAX + 2];
    int n;
} set_file;

/* check_params over P in buffer order, for a reader that needs no order of
 * its own; 0, or -1 with a message (`who` names the caller on out of memory). */
static int params_ok(const bk_params *P, const char *who, char *err, size_t errlen) {
    int *order = buffer_order(P);
    if (!order) {
        snprintf(err, errlen, "%s: out of memory", who);
        return -1;
    }
    int bad = check_params(P, order, err, errlen);
    free(order);
    return bad ? -1 : 0;
}

static void set_file_free(set_file *s) {
    free(s->e);
    free(s->shape);
    free(s->name);
    memset(s, 0, sizeof *s);
}

static int set_file_build(set_file *s, const bk_params *P, const int *order,
                          const char *const *prefix, const float *const *buf, int n_bufs) {
    memset(s, 0, sizeof *s);
    size_t n = (size_t)P->n * (size_t)n_bufs;
    s->e = calloc(n, sizeof *s->e);
    s->shape = calloc(n, sizeof *s->shape);
    s->name = calloc(n, sizeof *s->name);
    if (!s->e || !s->shape || !s->name) {
        set_file_free(s);
        return -1;
    }
    for (int b = 0; b < n_bufs; b++)
        for (int k = 0; k < P->n; k++) {
            const bk_tensor *t = &P->t[order[k]];
            int i = s->n++;
            snprintf(s->name[i], sizeof s->name[i], "%s%s", prefix[b], t->name);
            for (int d = 0; d < t->ndim; d++) s->shape[i][d] = t->shape[d];
            s->e[i] = (st_entry){s->name[i], t->ndim, s->shape[i], buf[b] + t->offset};
        }
    return 0;
}

/* The set being written or read. */
typedef struct set_state {
    char set_id[17];
    uint64_t step, data_step, seed, cfg_hash, n_floats;
    const char *cfg_text;
    char *cfg_owned;
    ckpt_counter counters[CKPT_MAX_COUNTERS];
    int n_counters;
    uint64_t bytes[2], fnv[2]; /* model, optimizer */
} set_state;

static const char *const MEMBER[2] = {CKPT_MODEL_FILE, CKPT_OPTIM_FILE};
static const char *const MEMBER_TMP[2] = {TMP_MODEL, TMP_OPTIM};
static const char *const MEMBER_KIND[2] = {"model", "optimizer"};

/* Writes text to dir/name by tmp + fsync + rename + fsync of dir. */
static int write_text_atomic(const char *dir, const char *name, const char *text, char *err,
                             size_t errlen) {
    char tmp[4200], final[4200];
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
    join(final, sizeof final, dir, name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "checkpoint: cannot create %s: %s", tmp, strerror(errno));
        return -1;
    }
    if (st_write_all(fd, text, strlen(text)) || fsync(fd) || close(fd)) {
        snprintf(err, errlen, "checkpoint: cannot write %s: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, final)) {
        snprintf(err, errlen, "checkpoint: cannot rename %s to %s: %s", tmp, final,
                 strerror(errno));
        unlink(tmp);
        return -1;
    }
    fsync_dir(dir);
    return 0;
}

static char *state_json(const set_state *s) {
    char hash[17], seed[24], mf[17], of[17];
    hex16(s->cfg_hash, hash);
    hex16(s->fnv[0], mf);
    hex16(s->fnv[1], of);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)s->seed);
    json_t *counters = json_object();
    for (int i = 0; counters && i < s->n_counters; i++) {
        char v[24];
        snprintf(v, sizeof v, "%llu", (unsigned long long)s->counters[i].value);
        json_object_set_new(counters, s->counters[i].name, json_string(v));
    }
    json_t *root = json_pack(
        "{s:s, s:i, s:s, s:I, s:I, s:s, s:s, s:s, s:I, s:o, s:{s:{s:I, s:s}, s:{s:I, s:s}}}",
        "format", "bf", "format_version", CKPT_SET_VERSION, "set_id", s->set_id, "step",
        (json_int_t)s->step, "data_step", (json_int_t)s->data_step, "seed", seed, "config_hash",
        hash, "config", s->cfg_text, "n_floats", (json_int_t)s->n_floats, "counters", counters,
        "files", CKPT_MODEL_FILE, "bytes", (json_int_t)s->bytes[0], "data_fnv1a64", mf,
        CKPT_OPTIM_FILE, "bytes", (json_int_t)s->bytes[1], "data_fnv1a64", of);
    if (!root) return NULL;
    char *text = json_dumps(root, JSON_INDENT(2));
    json_decref(root);
    if (!text) return NULL;
    size_t n = strlen(text);
    char *t2 = realloc(text, n + 2);
    if (!t2) {
        free(text);
        return NULL;
    }
    t2[n] = '\n';
    t2[n + 1] = '\0';
    return t2;
}

/* Reads and validates dir/state.json into s (s->cfg_owned allocated). */
static int read_state(const char *dir, set_state *s, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    char path[4200];
    join(path, sizeof path, dir, CKPT_STATE_FILE);
    char why[128];
    FILE *f = input_path_open(path, why, sizeof why);
    if (!f) {
        snprintf(err, errlen, "checkpoint %s: cannot open: %s", path, why);
        return -1;
    }
    struct stat st;
    char *buf = NULL;
    json_t *root = NULL;
    int rc = -1;
    if (fstat(fileno(f), &st) || st.st_size > (off_t)CKPT_MAX_STATE) {
        snprintf(err, errlen, "checkpoint %s: over the cap of %u bytes", path, CKPT_MAX_STATE);
        goto out;
    }
    size_t n = (size_t)st.st_size;
    buf = malloc(n ? n : 1);
    if (!buf || fread(buf, 1, n, f) != n) {
        snprintf(err, errlen, "checkpoint %s: cannot read", path);
        goto out;
    }
    json_error_t je;
    root = json_loadb(buf, n, JSON_REJECT_DUPLICATES, &je);
    if (!root || !json_is_object(root)) {
        snprintf(err, errlen, "checkpoint %s: not a JSON object (line %d: %s)", path, je.line,
                 root ? "not an object" : je.text);
        goto out;
    }
    const char *fmt = NULL, *sid = NULL, *seed = NULL, *hash = NULL, *cfg = NULL, *mf = NULL,
               *of = NULL;
    json_int_t ver = 0, step = -1, dstep = -1, nf = -1, mb = -1, ob = -1;
    json_t *counters = NULL;
    if (json_unpack_ex(root, &je, 0,
                       "{s:s, s:I, s:s, s:I, s:I, s:s, s:s, s:s, s:I, s:o, s:{s:{s:I, s:s}, "
                       "s:{s:I, s:s}}}",
                       "format", &fmt, "format_version", &ver, "set_id", &sid, "step", &step,
                       "data_step", &dstep, "seed", &seed, "config_hash", &hash, "config", &cfg,
                       "n_floats", &nf, "counters", &counters, "files", CKPT_MODEL_FILE, "bytes",
                       &mb, "data_fnv1a64", &mf, CKPT_OPTIM_FILE, "bytes", &ob, "data_fnv1a64",
                       &of)) {
        snprintf(err, errlen, "checkpoint %s: %s", path, je.text);
        goto out;
    }
    if (strcmp(fmt, "bf") != 0 || ver != CKPT_SET_VERSION) {
        snprintf(err, errlen,
                 "checkpoint %s: format \"%.32s\" version %lld; this bf reads format "
                 "\"bf\" version %d",
                 path, fmt, (long long)ver, CKPT_SET_VERSION);
        goto out;
    }
    uint64_t sidv;
    if (parse_hex16(sid, &sidv) || parse_u64(seed, &s->seed) || parse_hex16(hash, &s->cfg_hash) ||
        parse_hex16(mf, &s->fnv[0]) || parse_hex16(of, &s->fnv[1]) || step < 0 || dstep < 0 ||
        nf <= 0 || mb < 0 || ob < 0 || !json_is_object(counters)) {
        snprintf(err, errlen,
                 "checkpoint %s: a field is out of range (set_id, config_hash, data_fnv1a64: 16 "
                 "hex digits; seed: a decimal string; step, data_step, bytes: >= 0; n_floats > 0; "
                 "counters an object)",
                 path);
        goto out;
    }
    snprintf(s->set_id, sizeof s->set_id, "%s", sid);
    s->step = (uint64_t)step;
    s->data_step = (uint64_t)dstep;
    s->n_floats = (uint64_t)nf;
    s->bytes[0] = (uint64_t)mb;
    s->bytes[1] = (uint64_t)ob;
    if (strlen(cfg) > CKPT_MAX_CFG) {
        snprintf(err, errlen, "checkpoint %s: config text over the cap of %u bytes", path,
                 CKPT_MAX_CFG);
        goto out;
    }
    if (fnv(FNV_INIT, cfg, strlen(cfg)) != s->cfg_hash) {
        snprintf(err, errlen, "checkpoint %s: config_hash does not match its config text", path);
        goto out;
    }
    if (json_object_size(counters) > CKPT_MAX_COUNTERS) {
        snprintf(err, errlen, "checkpoint %s: more than %d counters", path, CKPT_MAX_COUNTERS);
        goto out;
    }
    const char *k;
    json_t *v;
    json_object_foreach(counters, k, v) {
        ckpt_counter *c = &s->counters[s->n_counters];
        if (!counter_name_ok(k) || !json_is_string(v) ||
            parse_u64(json_string_value(v), &c->value)) {
            snprintf(err, errlen,
                     "checkpoint %s: counter \"%.48s\" is not a name with a decimal "
                     "string value",
                     path, k);
            goto out;
        }
        snprintf(c->name, sizeof c->name, "%s", k);
        s->n_counters++;
    }
    s->cfg_owned = strdup(cfg);
    if (!s->cfg_owned) {
        snprintf(err, errlen, "checkpoint %s: out of memory", path);
        goto out;
    }
    s->cfg_text = s->cfg_owned;
    rc = 0;
out:
    json_decref(root);
    free(buf);
    fclose(f);
    return rc;
}

/* Checks an open member file against the state; with verify_data also its
 * data checksum (a reader that reads every tensor hashes as it goes). */
static int check_member(const st_file *f, const set_state *s, int which, int verify_data, char *err,
                        size_t errlen) {
    const char *fmt = st_meta(f, "format"), *kind = st_meta(f, "kind"), *sid = st_meta(f, "set_id"),
               *step = st_meta(f, "step"), *hash = st_meta(f, "config_hash"),
               *dfnv = st_meta(f, "data_fnv1a64");
    char want_hash[17];
    hex16(s->cfg_hash, want_hash);
    uint64_t stepv = 0, fnvv = 0;
    if (!fmt || strcmp(fmt, "bf") != 0 || !kind || strcmp(kind, MEMBER_KIND[which]) != 0) {
        snprintf(err, errlen, "checkpoint %s: not a bf %s file (metadata format/kind)", f->path,
                 MEMBER_KIND[which]);
        return -1;
    }
    if (!sid || strcmp(sid, s->set_id) != 0 || !step || parse_u64(step, &stepv) ||
        stepv != s->step) {
        snprintf(err, errlen,
                 "checkpoint set is torn: %s is of set %s (step %s) but state.json names set %s "
                 "(step %llu); the files come from different saves",
                 f->path, sid ? sid : "(none)", step ? step : "?", s->set_id,
                 (unsigned long long)s->step);
        return -1;
    }
    if (!hash || strcmp(hash, want_hash) != 0) {
        snprintf(err, errlen, "checkpoint %s: config_hash %s, state.json has %s", f->path,
                 hash ? hash : "(none)", want_hash);
        return -1;
    }
    uint64_t bytes = f->data_start + f->data_len;
    if (bytes != s->bytes[which]) {
        snprintf(err, errlen,
                 "checkpoint %s: %llu bytes, state.json recorded %llu (truncated or "
                 "replaced)",
                 f->path, (unsigned long long)bytes, (unsigned long long)s->bytes[which]);
        return -1;
    }
    if (!dfnv || parse_hex16(dfnv, &fnvv) || fnvv != s->fnv[which]) {
        snprintf(err, errlen, "checkpoint %s: data_fnv1a64 %s, state.json recorded %016llx",
                 f->path, dfnv ? dfnv : "(none)", (unsigned long long)s->fnv[which]);
        return -1;
    }
    uint64_t h = fnvv;
    if (verify_data && st_data_fnv(f, &h, err, errlen)) return -1;
    if (h != fnvv) {
        snprintf(err, errlen, "checkpoint %s: data checksum mismatch (damaged file)", f->path);
        return -1;
    }
    return 0;
}

/* Opens the member `which` of the set s in dir: its final name when that
 * carries s's set_id, else its .tmp name (a save that crashed after its
 * commit). Checks it (check_member). */
static int open_member(const char *dir, const set_state *s, int which, int verify_data, st_file *f,
                       char *err, size_t errlen) {
    char path[4200], tmp[4200];
    join(path, sizeof path, dir, MEMBER[which]);
    join(tmp, sizeof tmp, dir, MEMBER_TMP[which]);
    char e1[1024];
    if (st_open(f, path, e1, sizeof e1) == 0) {
        const char *sid = st_meta(f, "set_id");
        if (sid && strcmp(sid, s->set_id) == 0) {
            if (check_member(f, s, which, verify_data, err, errlen)) {
                st_close(f);
                return -1;
            }
            return 0;
        }
    }
    st_file g;
    if (exists(tmp) && st_open(&g, tmp, err, errlen) == 0) {
        const char *sid = st_meta(&g, "set_id");
        if (sid && strcmp(sid, s->set_id) == 0) {
            st_close(f);
            *f = g;
            if (check_member(f, s, which, verify_data, err, errlen)) {
                st_close(f);
                return -1;
            }
            return 0;
        }
        st_close(&g);
    }
    if (f->f) { /* the final file opened, of another set: torn */
        int rc = check_member(f, s, which, verify_data, err, errlen);
        st_close(f);
        if (rc == 0) snprintf(err, errlen, "checkpoint %s: set mismatch", path);
        return -1;
    }
    snprintf(err, errlen, "checkpoint %s: %s (state.json names set %s, step %llu)", dir, e1,
             s->set_id, (unsigned long long)s->step);
    return -1;
}

/* Completes a save that crashed between its commit and the final renames. */
static int roll_forward(const char *dir, char *err, size_t errlen) {
    char path[4200];
    join(path, sizeof path, dir, CKPT_STATE_FILE);
    if (!exists(path)) return 0;
    set_state s;
    char e2[1024];
    if (read_state(dir, &s, e2, sizeof e2)) {
        free(s.cfg_owned);
        return 0; /* a damaged state.json is replaced by this save */
    }
    int moved = 0;
    for (int w = 0; w < 2; w++) {
        char fin[4200], tmp[4200];
        join(fin, sizeof fin, dir, MEMBER[w]);
        join(tmp, sizeof tmp, dir, MEMBER_TMP[w]);
        if (!exists(tmp)) continue;
        st_file f;
        if (st_open(&f, tmp, e2, sizeof e2)) continue;
        const char *sid = st_meta(&f, "set_id");
        int ours = sid && strcmp(sid, s.set_id) == 0;
        st_close(&f);
        if (!ours) continue;
        if (rename(tmp, fin)) {
            snprintf(err, errlen, "checkpoint: cannot rename %s to %s: %s", tmp, fin,
                     strerror(errno));
            free(s.cfg_owned);
            return -1;
        }
        moved = 1;
    }
    if (moved) fsync_dir(dir);
    free(s.cfg_owned);
    return 0;
}

static void new_set_id(const ckpt_meta *m, char out[17]) {
    struct timespec a, b;
    clock_gettime(CLOCK_REALTIME, &a);
    clock_gettime(CLOCK_MONOTONIC, &b);
    static unsigned calls;
    uint64_t x[6] = {
        (uint64_t)a.tv_sec, (uint64_t)a.tv_nsec, (uint64_t)b.tv_nsec, (uint64_t)getpid(), m->step,
        (uint64_t)++calls};
    hex16(fnv(FNV_INIT, x, sizeof x), out);
}

ckpt_kind ckpt_probe(const char *dir) {
    char p[4200];
    join(p, sizeof p, dir, CKPT_STATE_FILE);
    if (exists(p)) return CKPT_SET;
    join(p, sizeof p, dir, CKPT_NAME);
    if (exists(p)) return CKPT_OLD;
    return CKPT_NONE;
}

int ckpt_save(const char *dir, const bk_params *P, const float *params, const float *m,
              const float *v, const ckpt_meta *meta, char *err, size_t errlen) {
    if (!dir || !params || !m || !v || !meta) {
        snprintf(err, errlen, "checkpoint: ckpt_save needs a folder, params, m, v and meta");
        return -1;
    }
    const char *cfg = meta->cfg_text ? meta->cfg_text : "";
    size_t cfg_len = strlen(cfg);
    if (cfg_len > CKPT_MAX_CFG) {
        snprintf(err, errlen, "checkpoint: config text of %zu bytes is over the %u-byte cap",
                 cfg_len, CKPT_MAX_CFG);
        return -1;
    }
    if (meta->n_counters < 0 || meta->n_counters > CKPT_MAX_COUNTERS) {
        snprintf(err, errlen, "checkpoint: %d counters (0 to %d)", meta->n_counters,
                 CKPT_MAX_COUNTERS);
        return -1;
    }
    for (int i = 0; i < meta->n_counters; i++) {
        if (!counter_name_ok(meta->counters[i].name)) {
            snprintf(err, errlen,
                     "checkpoint: counter %d has the name \"%.48s\" (1 to %d of "
                     "A-Z a-z 0-9 _ . -)",
                     i, meta->counters[i].name, CKPT_COUNTER_NAME - 1);
            return -1;
        }
        for (int j = 0; j < i; j++)
            if (strcmp(meta->counters[i].name, meta->counters[j].name) == 0) {
                snprintf(err, errlen, "checkpoint: two counters named \"%s\"",
                         meta->counters[i].name);
                return -1;
            }
    }
    int *order = buffer_order(P);
    if (!order) {
        snprintf(err, errlen, "checkpoint: out of memory");
        return -1;
    }
    int rc = -1;
    set_file mf = {0}, of = {0};
    if (check_params(P, order, err, errlen) || roll_forward(dir, err, errlen)) goto out;
    set_state s;
    memset(&s, 0, sizeof s);
    new_set_id(meta, s.set_id);
    s.step = meta->step;
    s.data_step = meta->data_step;
    s.seed = meta->seed;
    s.cfg_text = cfg;
    s.cfg_hash = fnv(FNV_INIT, cfg, cfg_len);
    s.n_floats = P->numel;
    s.n_counters = meta->n_counters;
    memcpy(s.counters, meta->counters, sizeof s.counters);
    size_t nb = P->numel * sizeof(float);
    s.fnv[0] = fnv(FNV_INIT, params, nb);
    s.fnv[1] = fnv(fnv(FNV_INIT, m, nb), v, nb);
    const char *pre_model[1] = {""}, *pre_opt[2] = {"m.", "v."};
    const float *buf_model[1] = {params}, *buf_opt[2] = {m, v};
    if (set_file_build(&mf, P, order, pre_model, buf_model, 1) ||
        set_file_build(&of, P, order, pre_opt, buf_opt, 2)) {
        snprintf(err, errlen, "checkpoint: out of memory");
        goto out;
    }
    char hash[17], step[24], nfl[24];
    hex16(s.cfg_hash, hash);
    snprintf(step, sizeof step, "%llu", (unsigned long long)s.step);
    snprintf(nfl, sizeof nfl, "%llu", (unsigned long long)s.n_floats);
    for (int w = 0; w < 2; w++) {
        char dfnv[17], ver[8], path[4200];
        hex16(s.fnv[w], dfnv);
        snprintf(ver, sizeof ver, "%d", CKPT_SET_VERSION);
        const char *md[] = {
            "format",   "bf",     "format_version", ver,  "kind",        MEMBER_KIND[w],
            "set_id",   s.set_id, "step",           step, "config_hash", hash,
            "n_floats", nfl,      "data_fnv1a64",   dfnv, "config",      cfg};
        join(path, sizeof path, dir, MEMBER_TMP[w]);
        const set_file *sf = w == 0 ? &mf : &of;
        if (st_write(path, sf->e, sf->n, md, 9, err, errlen)) goto out;
        struct stat st;
        if (stat(path, &st)) {
            snprintf(err, errlen, "checkpoint: cannot stat %s: %s", path, strerror(errno));
            goto out;
        }
        s.bytes[w] = (uint64_t)st.st_size;
    }
    char *text = state_json(&s);
    if (!text) {
        snprintf(err, errlen, "checkpoint: out of memory (or a config that is not UTF-8)");
        goto out;
    }
    int wrc = write_text_atomic(dir, CKPT_STATE_FILE, text, err, errlen); /* the commit */
    free(text);
    if (wrc) goto out;
    for (int w = 0; w < 2; w++) {
        char fin[4200], tmp[4200];
        join(fin, sizeof fin, dir, MEMBER[w]);
        join(tmp, sizeof tmp, dir, MEMBER_TMP[w]);
        if (rename(tmp, fin)) {
            snprintf(err, errlen,
                     "checkpoint: committed, but cannot rename %s to %s: %s (the "
                     "next load reads it from its temporary name)",
                     tmp, fin, strerror(errno));
            goto out;
        }
    }
    fsync_dir(dir);
    char old[4200];
    join(old, sizeof old, dir, CKPT_NAME);
    if (exists(old) && unlink(old) == 0) fsync_dir(dir);
    rc = 0;
out:
    set_file_free(&mf);
    set_file_free(&of);
    free(order);
    return rc;
}

void ckpt_meta_free(ckpt_meta *meta) {
    free(meta->cfg_text);
    memset(meta, 0, sizeof *meta);
}

static void shape_str(char *out, size_t n, int ndim, const uint64_t *d64, const int *d32) {
    size_t w = (size_t)snprintf(out, n, "[");
    for (int i = 0; i < ndim && w < n; i++)
        w += (size_t)snprintf(out + w, n - w, "%s%llu", i ? ", " : "",
                              d64 ? (unsigned long long)d64[i] : (unsigned long long)d32[i]);
    if (w < n) snprintf(out + w, n - w, "]");
}

/* A dtype init.from converts: else a message. */
static int check_dtype(const st_file *f, int i, char *err, size_t errlen) {
    const st_tensor *x = &f->t[i];
    if (st_dtype_converts(x->dtype)) return 0;
    snprintf(err, errlen,
             "%s: tensor \"%s\" is %s; init.from loads F32, F16, BF16 and F64 tensors "
             "(save it as one of those)",
             f->path, x->name, x->dtype);
    return -1;
}

static int same_shape(const st_tensor *x, const bk_tensor *t) {
    int same = x->ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = x->shape[d] == (uint64_t)t->shape[d];
    return same;
}

/* Same shape as the model's tensor t and dtype F32 (convert: or one that
 * st_read_as_f32 converts); else a message. */
static int check_shape(const st_file *f, int i, const bk_tensor *t, int convert, char *err,
                       size_t errlen) {
    const st_tensor *x = &f->t[i];
    int same = x->ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = x->shape[d] == (uint64_t)t->shape[d];
    if (!same) {
        char a[128], b[128];
        shape_str(a, sizeof a, x->ndim, x->shape, NULL);
        shape_str(b, sizeof b, t->ndim, NULL, t->shape);
        snprintf(err, errlen, "%s: tensor \"%s\" has shape %s in the file but %s in the model",
                 f->path, x->name, a, b);
        return -1;
    }
    if (convert && !st_dtype_converts(x->dtype)) {
        snprintf(err, errlen,
                 "%s: tensor \"%s\" is %s; init.from loads F32, F16, BF16 and F64 tensors "
                 "(save it as one of those)",
                 f->path, x->name, x->dtype);
        return -1;
    }
    if (!convert && strcmp(x->dtype, "F32") != 0) {
        snprintf(err, errlen,
                 "%s: tensor \"%s\" is %s; bf loads F32 tensors only (save it as "
                 "float32)",
                 f->path, x->name, x->dtype);
        return -1;
    }
    return 0;
}

/* Index of the first tensor of the file that is not prefix[p] + the name of
 * a tensor of P for any p, or -1. */
static int first_extra(const st_file *f, const bk_params *P, const char *const *prefix, int np) {
    for (int i = 0; i < f->n; i++) {
        int found = 0;
        for (int p = 0; p < np && !found; p++) {
            size_t pl = strlen(prefix[p]);
            found = strncmp(f->t[i].name, prefix[p], pl) == 0 &&
                    bk_params_find(P, f->t[i].name + pl) >= 0;
        }
        if (!found) return i;
    }
    return -1;
}

/* Reads a set member holding, for each of np buffers, every tensor of P
 * named prefix[p] + name (and nothing else), into out[p] in P's layout, in
 * file order, hashing as it reads: the hash of the data section must be
 * want_fnv. */
static int read_member(const st_file *f, const bk_params *P, const char *const *prefix,
                       float *const *out, int np, uint64_t want_fnv, char *err, size_t errlen) {
    for (int p = 0; p < np; p++)
        for (int k = 0; k < P->n; k++) {
            char name[BK_NAME_MAX + 8];
            snprintf(name, sizeof name, "%s%s", prefix[p], P->t[k].name);
            int i = st_find(f, name);
            if (i < 0) {
                char extra[300] = "";
                int x = first_extra(f, P, prefix, np);
                if (x >= 0)
                    snprintf(extra, sizeof extra, "; it has \"%.200s\", which this model has not",
                             f->t[x].name);
                snprintf(err, errlen,
                         "checkpoint %s: no tensor \"%s\", which this model has%s (a resume "
                         "needs every tensor; init.from loads a subset)",
                         f->path, name, extra);
                return -1;
            }
            if (check_shape(f, i, &P->t[k], 0, err, errlen)) return -1;
        }
    int x = first_extra(f, P, prefix, np);
    if (x >= 0) {
        snprintf(err, errlen,
                 "checkpoint %s: tensor \"%s\" is not in this model (another model's "
                 "checkpoint? init.from loads by name and lists such tensors)",
                 f->path, f->t[x].name);
        return -1;
    }
    uint64_t h = FNV_INIT;
    for (int i = 0; i < f->n; i++) { /* every tensor maps to one (p, k): checked above */
        for (int p = 0; p < np; p++) {
            size_t pl = strlen(prefix[p]);
            int k = strncmp(f->t[i].name, prefix[p], pl) == 0 ? bk_params_find(P, f->t[i].name + pl)
                                                              : -1;
            if (k < 0) continue;
            float *dst = out[p] + P->t[k].offset;
            if (st_read_f32(f, i, dst, err, errlen)) return -1;
            h = fnv(h, dst, P->t[k].numel * sizeof(float));
            break;
        }
    }
    if (h != want_fnv) {
        snprintf(err, errlen, "checkpoint %s: data checksum mismatch (damaged file)", f->path);
        return -1;
    }
    return 0;
}

static int old_size_error(const char *file, const ckpt_state *s, const bk_params *P, char *err,
                          size_t errlen) {
    snprintf(err, errlen,
             "checkpoint %s is in the older format (checkpoint.bin: flat floats, no tensor names) "
             "and holds %zu floats per buffer; this model has %zu. An old checkpoint maps by "
             "position onto the model it was written for only: resume it with the config stored "
             "in it (`bfworker train CONFIG --resume DIR`), and the next checkpoint is written "
             "as named safetensors, which later models load by name",
             file, s->n_params, P->numel);
    return -1;
}

static int load_old(const char *file, const bk_params *P, float *params, float *m, float *v,
                    ckpt_meta *meta, char *err, size_t errlen) {
    ckpt_state s;
    if (ckpt_read(file, &s, err, errlen)) return -1;
    if (s.n_params != P->numel) {
        old_size_error(file, &s, P, err, errlen);
        ckpt_free(&s);
        return -1;
    }
    size_t nb = P->numel * sizeof(float);
    memcpy(params, s.params, nb);
    if (m) memcpy(m, s.m, nb);
    if (v) memcpy(v, s.v, nb);
    meta->step = s.step;
    meta->seed = s.seed;
    meta->data_step = s.data_step;
    meta->cfg_hash = s.cfg_hash;
    meta->cfg_text = s.cfg_text;
    s.cfg_text = NULL;
    unsigned char ver[12] = {0};
    char why[128];
    FILE *f = input_path_open(file, why, sizeof why);
    if (f) {
        if (fread(ver, 1, sizeof ver, f) != sizeof ver) ver[8] = 0;
        fclose(f);
    }
    meta->format_version = ver[8];
    ckpt_free(&s);
    return 0;
}

int ckpt_load(const char *dir, const bk_params *P, float *params, float *m, float *v,
              ckpt_meta *meta, char *err, size_t errlen) {
    memset(meta, 0, sizeof *meta);
    if (!dir || !P || !params || (!m) != (!v)) {
        snprintf(err, errlen,
                 "checkpoint: ckpt_load needs a folder, P, params, and m and v both "
                 "or neither");
        return -1;
    }
    if (params_ok(P, "checkpoint", err, errlen)) return -1;
    ckpt_kind k = ckpt_probe(dir);
    if (k == CKPT_NONE) {
        snprintf(err, errlen, "checkpoint %s: no %s or %s there", dir, CKPT_STATE_FILE, CKPT_NAME);
        return -1;
    }
    if (k == CKPT_OLD) {
        char file[4200];
        join(file, sizeof file, dir, CKPT_NAME);
        return load_old(file, P, params, m, v, meta, err, errlen);
    }
    set_state s;
    if (read_state(dir, &s, err, errlen)) {
        free(s.cfg_owned);
        return -1;
    }
    int rc = -1;
    st_file f = {0};
    if (s.n_floats != P->numel) {
        snprintf(err, errlen,
                 "checkpoint %s: holds %llu floats per buffer, this model has %zu "
                 "(another model's checkpoint? see its config in state.json)",
                 dir, (unsigned long long)s.n_floats, P->numel);
        goto out;
    }
    const char *pm[1] = {""}, *po[2] = {"m.", "v."};
    float *om[1] = {params}, *oo[2] = {m, v};
    if (open_member(dir, &s, 0, 0, &f, err, errlen) ||
        read_member(&f, P, pm, om, 1, s.fnv[0], err, errlen))
        goto out;
    st_close(&f);
    if (m) {
        if (open_member(dir, &s, 1, 0, &f, err, errlen) ||
            read_member(&f, P, po, oo, 2, s.fnv[1], err, errlen))
            goto out;
        st_close(&f);
    }
    meta->step = s.step;
    meta->seed = s.seed;
    meta->data_step = s.data_step;
    meta->cfg_hash = s.cfg_hash;
    meta->cfg_text = s.cfg_owned;
    s.cfg_owned = NULL;
    memcpy(meta->counters, s.counters, sizeof meta->counters);
    meta->n_counters = s.n_counters;
    meta->format_version = CKPT_SET_VERSION;
    snprintf(meta->set_id, sizeof meta->set_id, "%s", s.set_id);
    rc = 0;
out:
    st_close(&f);
    free(s.cfg_owned);
    return rc;
}

int ckpt_convert(const char *old_path, const bk_params *P, const char *out_dir, char *err,
                 size_t errlen) {
    ckpt_state s;
    if (ckpt_read(old_path, &s, err, errlen)) return -1;
    if (!P || s.n_params != P->numel) {
        if (P) old_size_error(old_path, &s, P, err, errlen);
        ckpt_free(&s);
        return -1;
    }
    ckpt_meta meta = {.step = s.step, .seed = s.seed, .data_step = s.data_step};
    meta.cfg_text = s.cfg_text;
    int rc = ckpt_save(out_dir, P, s.params, s.m, s.v, &meta, err, errlen);
    ckpt_free(&s);
    return rc;
}

/* ---- init.from ---- */

/* Appends ", name" (or the first name) to text, or " ..." once full. */
static void list_add(char *text, size_t n, size_t *w, int *first, const char *name) {
    if (*w >= n) return;
    size_t need = strlen(name) + 2;
    if (*w + need + 5 >= n) {
        *w += (size_t)snprintf(text + *w, n - *w, " ...");
        *w = n;
        return;
    }
    *w += (size_t)snprintf(text + *w, n - *w, "%s%s", *first ? " " : ", ", name);
    *first = 0;
}

static int is_old_file(const char *path) {
    unsigned char b[8];
    char why[128];
    FILE *f = input_path_open(path, why, sizeof why);
    if (!f) return 0;
    int ok = fread(b, 1, 8, f) == 8 && memcmp(b, MAGIC, 8) == 0;
    fclose(f);
    return ok;
}

static int init_from_old(const char *file, const bk_params *P, float *host_params,
                         ckpt_init_report *r, char *text, size_t textlen, char *err,
                         size_t errlen) {
    ckpt_state s;
    if (ckpt_read(file, &s, err, errlen)) return -1;
    if (s.n_params != P->numel) {
        old_size_error(file, &s, P, err, errlen);
        ckpt_free(&s);
        return -1;
    }
    memcpy(host_params, s.params, P->numel * sizeof(float));
    ckpt_free(&s);
    r->loaded = P->n;
    r->floats = P->numel;
    r->by_position = 1;
    snprintf(text, textlen,
             "init.from %s: all %d tensors (%zu floats) by position (an older checkpoint.bin "
             "has no names)",
             file, P->n, P->numel);
    return 0;
}

int ckpt_init_from(const char *path, const bk_params *P, float *host_params, ckpt_init_report *r,
                   char *text, size_t textlen, char *err, size_t errlen) {
    return ckpt_init_from_map(path, NULL, P, host_params, r, text, textlen, err, errlen);
}

/* The file's tensor names after the map (file order) and, for each tensor
 * of P, the file's tensor of that name or -1. */
typedef struct mapped_names {
    char (*name)[BK_NAME_MAX]; /* f->n names; "" = longer than a bf name */
    int *renamed;              /* f->n flags */
    int *of;                   /* P->n indices */
} mapped_names;

static void mapped_free(mapped_names *mn) { free(mn->name), free(mn->renamed), free(mn->of); }

static int mapped_build(mapped_names *mn, const st_file *f, const ckpt_map *map, const bk_params *P,
                        char *err, size_t errlen) {
    mn->name = calloc((size_t)f->n + 1, sizeof *mn->name);
    mn->renamed = calloc((size_t)f->n + 1, sizeof *mn->renamed);
    mn->of = malloc(((size_t)P->n + 1) * sizeof *mn->of);
    if (!mn->name || !mn->renamed || !mn->of) {
        snprintf(err, errlen, "init.from: out of memory");
        return -1;
    }
    for (int k = 0; k < P->n; k++) mn->of[k] = -1;
    for (int i = 0; i < f->n; i++) {
        int rc = ckpt_map_name(map, f->t[i].name, mn->name[i], sizeof mn->name[i]);
        if (rc < 0) { /* too long for any of P's names: can match nothing */
            mn->name[i][0] = '\0';
            continue;
        }
        mn->renamed[i] = rc;
        int k = bk_params_find(P, mn->name[i]);
        if (k < 0) continue;
        if (mn->of[k] >= 0) {
            snprintf(err, errlen,
                     "init.from %s: tensors \"%s\" and \"%s\" both map to \"%s\" (init.map)",
                     f->path, f->t[mn->of[k]].name, f->t[i].name, mn->name[i]);
            return -1;
        }
        mn->of[k] = i;
    }
    return 0;
}

int ckpt_init_from_map(const char *path, const char *map_spec, const bk_params *P,
                       float *host_params, ckpt_init_report *r, char *text, size_t textlen,
                       char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    if (textlen) text[0] = '\0';
    if (!path || !*path || !P || !host_params) {
        snprintf(err, errlen, "init.from: needs a path, a parameter list and a host buffer");
        return -1;
    }
    if (params_ok(P, "init.from", err, errlen)) return -1;
    int is_dir = 0;
    char e2[1024];
    if (input_path_check(NULL, path, INPUT_FILE | INPUT_DIR,
                         "a run folder, a .safetensors file or a checkpoint.bin", &is_dir, e2,
                         sizeof e2)) {
        snprintf(err, errlen, "init.from %s%s", e2,
                 strstr(e2, ": not found") ? " (a run folder, a .safetensors file or a "
                                             "checkpoint.bin)"
                                           : "");
        return -1;
    }
    st_file f = {0};
    if (is_dir) {
        char p[4200];
        ckpt_kind k = ckpt_probe(path);
        join(p, sizeof p, path, CKPT_MODEL_FILE);
        if (k == CKPT_SET) {
            set_state s;
            if (read_state(path, &s, err, errlen)) {
                free(s.cfg_owned);
                return -1;
            }
            int rc = open_member(path, &s, 0, 1, &f, err, errlen);
            free(s.cfg_owned);
            if (rc) return -1;
        } else if (exists(p)) {
            if (st_open(&f, p, e2, sizeof e2)) {
                snprintf(err, errlen, "init.from %s: %s", path, e2);
                return -1;
            }
        } else if (k == CKPT_OLD) {
            join(p, sizeof p, path, CKPT_NAME);
            snprintf(r->source, sizeof r->source, "%.4095s", p);
            return init_from_old(p, P, host_params, r, text, textlen, err, errlen);
        } else {
            snprintf(err, errlen, "init.from %s: the folder has no %s, %s or %s", path,
                     CKPT_STATE_FILE, CKPT_MODEL_FILE, CKPT_NAME);
            return -1;
        }
    } else if (is_old_file(path)) {
        snprintf(r->source, sizeof r->source, "%s", path);
        return init_from_old(path, P, host_params, r, text, textlen, err, errlen);
    } else if (st_open(&f, path, err, errlen)) {
        return -1;
    }
    snprintf(r->source, sizeof r->source, "%s", f.path);
    int rc = -1;
    ckpt_map map = {0};
    mapped_names mn = {0};
    if (ckpt_map_load(&map, map_spec, err, errlen) || mapped_build(&mn, &f, &map, P, err, errlen))
        goto out;
    const char *dfnv = st_meta(&f, "data_fnv1a64");
    uint64_t want, h;
    if (dfnv && parse_hex16(dfnv, &want) == 0) {
        if (st_data_fnv(&f, &h, err, errlen)) goto out;
        if (h != want) {
            snprintf(err, errlen, "init.from %s: data checksum mismatch (damaged file)", f.path);
            goto out;
        }
    }
    /* Validate every match before writing anything. */
    for (int k = 0; k < P->n; k++) {
        int i = mn.of[k];
        if (i < 0) {
            r->missing++;
            continue;
        }
        if (mn.renamed[i] && !same_shape(&f.t[i], &P->t[k])) {
            char why[512];
            if (ckpt_map_reshape(&map, f.t[i].name, f.t[i].ndim, f.t[i].shape, &P->t[k], why,
                                 sizeof why)) {
                snprintf(err, errlen, "init.from %s: tensor \"%s\" (init.map: \"%s\") %s", f.path,
                         f.t[i].name, P->t[k].name, why);
                goto out;
            }
            if (check_dtype(&f, i, err, errlen)) goto out;
        } else if (check_shape(&f, i, &P->t[k], 1, err, errlen)) {
            goto out;
        }
        r->loaded++;
        r->floats += P->t[k].numel;
    }
    r->unmatched = f.n - r->loaded;
    if (r->loaded == 0) {
        snprintf(
            err, errlen,
            "init.from %s: none of its %d tensors has the name of one of this "
            "model's %d (first in the file: \"%s\"%s%s%s; in the model: \"%s\")",
            f.path, f.n, P->n, f.n ? f.t[0].name : "", f.n && mn.renamed[0] ? ", mapped to \"" : "",
            f.n && mn.renamed[0] ? mn.name[0] : "", f.n && mn.renamed[0] ? "\"" : "", P->t[0].name);
        goto out;
    }
    char conv[sizeof r->converted_from] = ""; /* "BF16", "F16/F64": a few names */
    for (int k = 0; k < P->n; k++) {
        int i = mn.of[k];
        if (i < 0) continue;
        float *dst = host_params + P->t[k].offset;
        if (st_read_as_f32(&f, i, dst, err, errlen)) goto out;
        size_t bad = 0, first = 0;
        for (size_t j = P->t[k].numel; j-- > 0;)
            if (!isfinite(dst[j])) bad++, first = j;
        if (bad) {
            snprintf(err, errlen,
                     "init.from %s: tensor \"%s\" holds %zu NaN/Inf value%s of %zu (the first "
                     "at element %zu%s): the checkpoint is damaged or the run that wrote it "
                     "diverged; give another init.from",
                     f.path, P->t[k].name, bad, bad == 1 ? "" : "s", P->t[k].numel, first,
                     strcmp(f.t[i].dtype, "F64") == 0 ? "; F64 values beyond F32's range too" : "");
            goto out;
        }
        if (strcmp(f.t[i].dtype, "F32") != 0) {
            r->converted++;
            if (!strstr(conv, f.t[i].dtype) && strlen(conv) + 8 < sizeof conv)
                snprintf(conv + strlen(conv), sizeof conv - strlen(conv), "%s%s",
                         conv[0] ? "/" : "", f.t[i].dtype);
        }
    }
    if (r->converted) snprintf(r->converted_from, sizeof r->converted_from, "%s", conv);
    size_t w =
        (size_t)snprintf(text, textlen,
                         "init.from %s: %d of %d tensors loaded (%zu floats); %d missing "
                         "(kept as initialised)%s",
                         f.path, r->loaded, P->n, r->floats, r->missing, r->missing ? ":" : "");
    if (w > textlen) w = textlen;
    int first = 1;
    for (int k = 0; k < P->n; k++)
        if (mn.of[k] < 0) list_add(text, textlen, &w, &first, P->t[k].name);
    if (w < textlen)
        w += (size_t)snprintf(text + w, textlen - w, "; %d unmatched (in the file only)%s",
                              r->unmatched, r->unmatched ? ":" : "");
    if (w > textlen) w = textlen;
    first = 1;
    for (int i = 0; i < f.n; i++)
        if (!mn.name[i][0] || bk_params_find(P, mn.name[i]) < 0)
            list_add(text, textlen, &w, &first, mn.name[i][0] ? mn.name[i] : f.t[i].name);
    if (map.timm || map.n) {
        int renamed = 0;
        for (int i = 0; i < f.n; i++) renamed += mn.renamed[i];
        if (w < textlen)
            snprintf(text + w, textlen - w, "; init.map %s renamed %d of the file's %d", map_spec,
                     renamed, f.n);
    }
    rc = 0;
out:
    mapped_free(&mn);
    ckpt_map_free(&map);
    st_close(&f);
    return rc;
}
