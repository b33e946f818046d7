/* ckpt.c — the checkpoint set (format 3, described in ckpt.h): saving it
 * crash-consistently (ckpt_save), loading it for a resume (ckpt_load),
 * telling which format a run folder holds (ckpt_probe) and rewriting an
 * older checkpoint.bin as a set (ckpt_convert). The older checkpoint.bin
 * itself is in ckpt_bin.c, the config comparison of a resume in
 * ckpt_diff.c, and init.from in ckpt_init.c. */
#include "worker/io/ckpt.h"
#include "worker/io/ckpt_priv.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/hash.h"
#include "common/input_path.h"
#include "worker/io/safetensors.h"

#define TMP_MODEL "." CKPT_MODEL_FILE ".tmp"
#define TMP_OPTIM "." CKPT_OPTIM_FILE ".tmp"

void ckpt_join(char *out, size_t n, const char *dir, const char *name) {
    snprintf(out, n, "%s/%s", dir, name);
}

int ckpt_exists(const char *path) {
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
int ckpt_parse_hex16(const char *s, uint64_t *out) {
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
int ckpt_params_ok(const bk_params *P, const char *who, char *err, size_t errlen) {
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

static const char *const MEMBER[2] = {CKPT_MODEL_FILE, CKPT_OPTIM_FILE};
static const char *const MEMBER_TMP[2] = {TMP_MODEL, TMP_OPTIM};
static const char *const MEMBER_KIND[2] = {"model", "optimizer"};

/* Writes text to dir/name by tmp + fsync + rename + fsync of dir. */
static int write_text_atomic(const char *dir, const char *name, const char *text, char *err,
                             size_t errlen) {
    char tmp[4200], final[4200];
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
    ckpt_join(final, sizeof final, dir, name);
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

static char *state_json(const ckpt_set_state *s) {
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
int ckpt_read_state(const char *dir, ckpt_set_state *s, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    char path[4200];
    ckpt_join(path, sizeof path, dir, CKPT_STATE_FILE);
    char why[1100]; /* "not found" may name the working folder */
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
    if (ckpt_parse_hex16(sid, &sidv) || parse_u64(seed, &s->seed) ||
        ckpt_parse_hex16(hash, &s->cfg_hash) || ckpt_parse_hex16(mf, &s->fnv[0]) ||
        ckpt_parse_hex16(of, &s->fnv[1]) || step < 0 || dstep < 0 || nf <= 0 || mb < 0 || ob < 0 ||
        !json_is_object(counters)) {
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
    if (fnv1a64(FNV1A64_SEED, cfg, strlen(cfg)) != s->cfg_hash) {
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
static int check_member(const st_file *f, const ckpt_set_state *s, int which, int verify_data,
                        char *err, size_t errlen) {
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
    if (!dfnv || ckpt_parse_hex16(dfnv, &fnvv) || fnvv != s->fnv[which]) {
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
int ckpt_open_member(const char *dir, const ckpt_set_state *s, int which, int verify_data,
                     st_file *f, char *err, size_t errlen) {
    char path[4200], tmp[4200];
    ckpt_join(path, sizeof path, dir, MEMBER[which]);
    ckpt_join(tmp, sizeof tmp, dir, MEMBER_TMP[which]);
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
    if (ckpt_exists(tmp) && st_open(&g, tmp, err, errlen) == 0) {
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
    ckpt_join(path, sizeof path, dir, CKPT_STATE_FILE);
    if (!ckpt_exists(path)) return 0;
    ckpt_set_state s;
    char e2[1024];
    if (ckpt_read_state(dir, &s, e2, sizeof e2)) {
        free(s.cfg_owned);
        return 0; /* a damaged state.json is replaced by this save */
    }
    int moved = 0;
    for (int w = 0; w < 2; w++) {
        char fin[4200], tmp[4200];
        ckpt_join(fin, sizeof fin, dir, MEMBER[w]);
        ckpt_join(tmp, sizeof tmp, dir, MEMBER_TMP[w]);
        if (!ckpt_exists(tmp)) continue;
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
    hex16(fnv1a64(FNV1A64_SEED, x, sizeof x), out);
}

ckpt_kind ckpt_probe(const char *dir) {
    char p[4200];
    ckpt_join(p, sizeof p, dir, CKPT_STATE_FILE);
    if (ckpt_exists(p)) return CKPT_SET;
    ckpt_join(p, sizeof p, dir, CKPT_NAME);
    if (ckpt_exists(p)) return CKPT_OLD;
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
    int rc = -1, writing = 0, committed = 0;
    set_file mf = {0}, of = {0};
    if (check_params(P, order, err, errlen) || roll_forward(dir, err, errlen)) goto out;
    ckpt_set_state s;
    memset(&s, 0, sizeof s);
    new_set_id(meta, s.set_id);
    s.step = meta->step;
    s.data_step = meta->data_step;
    s.seed = meta->seed;
    s.cfg_text = cfg;
    s.cfg_hash = fnv1a64(FNV1A64_SEED, cfg, cfg_len);
    s.n_floats = P->numel;
    s.n_counters = meta->n_counters;
    memcpy(s.counters, meta->counters, sizeof s.counters);
    size_t nb = P->numel * sizeof(float);
    s.fnv[0] = fnv1a64(FNV1A64_SEED, params, nb);
    s.fnv[1] = fnv1a64(fnv1a64(FNV1A64_SEED, m, nb), v, nb);
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
    writing = 1; /* from here the .tmp members are this save's (roll_forward renamed older ones) */
    for (int w = 0; w < 2; w++) {
        char dfnv[17], ver[8], path[4200];
        hex16(s.fnv[w], dfnv);
        snprintf(ver, sizeof ver, "%d", CKPT_SET_VERSION);
        const char *md[] = {
            "format",   "bf",     "format_version", ver,  "kind",        MEMBER_KIND[w],
            "set_id",   s.set_id, "step",           step, "config_hash", hash,
            "n_floats", nfl,      "data_fnv1a64",   dfnv, "config",      cfg};
        ckpt_join(path, sizeof path, dir, MEMBER_TMP[w]);
        const set_file *sf = w == 0 ? &mf : &of;
        if (st_write(path, sf->e, sf->n, md, 9, err, errlen)) {
            char why[1024];
            snprintf(why, sizeof why, "%s", err);
            snprintf(err, errlen,
                     "checkpoint %s: cannot write %s (the last complete checkpoint is kept): %s",
                     dir, MEMBER[w], why);
            goto out;
        }
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
    committed = 1;
    for (int w = 0; w < 2; w++) {
        char fin[4200], tmp[4200];
        ckpt_join(fin, sizeof fin, dir, MEMBER[w]);
        ckpt_join(tmp, sizeof tmp, dir, MEMBER_TMP[w]);
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
    ckpt_join(old, sizeof old, dir, CKPT_NAME);
    if (ckpt_exists(old) && unlink(old) == 0) fsync_dir(dir);
    rc = 0;
out:
    /* members of a set never committed: nothing refers to them (a full disk
     * left a 13 MB one behind) */
    for (int w = 0; rc && writing && !committed && w < 2; w++) {
        char tmp[4200];
        ckpt_join(tmp, sizeof tmp, dir, MEMBER_TMP[w]);
        unlink(tmp);
    }
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

int ckpt_same_shape(const st_tensor *x, const bk_tensor *t) {
    int same = x->ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = x->shape[d] == (uint64_t)t->shape[d];
    return same;
}

/* Same shape as the model's tensor t and dtype F32 (convert: or one that
 * st_read_as_f32 converts); else a message. */
int ckpt_check_shape(const st_file *f, int i, const bk_tensor *t, int convert, char *err,
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
            if (ckpt_check_shape(f, i, &P->t[k], 0, err, errlen)) return -1;
        }
    int x = first_extra(f, P, prefix, np);
    if (x >= 0) {
        snprintf(err, errlen,
                 "checkpoint %s: tensor \"%s\" is not in this model (another model's "
                 "checkpoint? init.from loads by name and lists such tensors)",
                 f->path, f->t[x].name);
        return -1;
    }
    uint64_t h = FNV1A64_SEED;
    for (int i = 0; i < f->n; i++) { /* every tensor maps to one (p, k): checked above */
        for (int p = 0; p < np; p++) {
            size_t pl = strlen(prefix[p]);
            int k = strncmp(f->t[i].name, prefix[p], pl) == 0 ? bk_params_find(P, f->t[i].name + pl)
                                                              : -1;
            if (k < 0) continue;
            float *dst = out[p] + P->t[k].offset;
            if (st_read_f32(f, i, dst, err, errlen)) return -1;
            h = fnv1a64(h, dst, P->t[k].numel * sizeof(float));
            break;
        }
    }
    if (h != want_fnv) {
        snprintf(err, errlen, "checkpoint %s: data checksum mismatch (damaged file)", f->path);
        return -1;
    }
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
    if (ckpt_params_ok(P, "checkpoint", err, errlen)) return -1;
    ckpt_kind k = ckpt_probe(dir);
    if (k == CKPT_NONE) {
        snprintf(err, errlen, "checkpoint %s: no %s or %s there", dir, CKPT_STATE_FILE, CKPT_NAME);
        return -1;
    }
    if (k == CKPT_OLD) {
        char file[4200];
        ckpt_join(file, sizeof file, dir, CKPT_NAME);
        return ckpt_bin_load(file, P, params, m, v, meta, err, errlen);
    }
    ckpt_set_state s;
    if (ckpt_read_state(dir, &s, err, errlen)) {
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
    if (ckpt_open_member(dir, &s, 0, 0, &f, err, errlen) ||
        read_member(&f, P, pm, om, 1, s.fnv[0], err, errlen))
        goto out;
    st_close(&f);
    if (m) {
        if (ckpt_open_member(dir, &s, 1, 0, &f, err, errlen) ||
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
        if (P) ckpt_bin_size_error(old_path, &s, P, err, errlen);
        ckpt_free(&s);
        return -1;
    }
    ckpt_meta meta = {.step = s.step, .seed = s.seed, .data_step = s.data_step};
    meta.cfg_text = s.cfg_text;
    int rc = ckpt_save(out_dir, P, s.params, s.m, s.v, &meta, err, errlen);
    ckpt_free(&s);
    return rc;
}
