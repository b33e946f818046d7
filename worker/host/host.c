/* host.c — see host.h. It never picks a pipeline: host/train.c does. */
#include "worker/host/host.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include "worker/io/ckpt.h"
#include "worker/link/metrics.h"
#include "worker/host/force.h"

/* mkdir -p */
static int make_dirs(const char *path, char *err, size_t errlen) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) && errno != EEXIST) goto fail;
        *p = '/';
    }
    if (mkdir(buf, 0755) && errno != EEXIST) goto fail;
    return 0;
fail:
    snprintf(err, errlen, "cannot create folder %s: %s", buf, strerror(errno));
    return -1;
}

/* Rank 0 writes the checkpoint of `step` steps done into dir, then (when
 * given) calls then(ctx) (--force's swap); then every rank learns whether
 * that worked (an untimed agreement: the others wait while rank 0 writes).
 * Returns 0 or -1 with a message on every rank. */
static int save_checkpoint(comm_t *comm, const char *dir, const pipe_state *ps, const bf_config *c,
                           int (*then)(void *ctx, char *err, size_t errlen), void *ctx, char *err,
                           size_t errlen) {
    int failed = 0;
    const model *m = ps->m;
    const float *dm = ps->adam_m, *dv = ps->adam_v;
    long step = ps->step;
    if (comm_rank(comm) == 0) {
        size_t n = m->np.P.numel;
        char *cfg_text = malloc(CKPT_MAX_CFG);
        float *hp = malloc(n * sizeof(float)), *hm = malloc(n * sizeof(float)),
              *hv = malloc(n * sizeof(float));
        if (!cfg_text || !hp || !hm || !hv) {
            snprintf(err, errlen, "out of memory writing a checkpoint");
            failed = 1;
        } else {
            cfg_dump(c, cfg_text, CKPT_MAX_CFG);
            m->be->to_host(hp, m->np.P.data, n * sizeof(float));
            m->be->to_host(hm, dm, n * sizeof(float));
            m->be->to_host(hv, dv, n * sizeof(float));
            ckpt_meta meta;
            memset(&meta, 0, sizeof meta);
            meta.step = (uint64_t)step;
            meta.seed = c->train.seed;
            meta.data_step = (uint64_t)step;
            meta.cfg_text = cfg_text;
            if (ps->n_counters > CKPT_MAX_COUNTERS) {
                snprintf(err, errlen, "checkpoint: %d counters of state (at most %d)",
                         ps->n_counters, CKPT_MAX_COUNTERS);
                failed = 1;
            }
            for (int i = 0; !failed && i < ps->n_counters; i++) {
                snprintf(meta.counters[i].name, sizeof meta.counters[i].name, "%s",
                         ps->counters[i].name);
                meta.counters[i].value = ps->counters[i].value;
            }
            meta.n_counters = failed ? 0 : ps->n_counters;
            if (!failed) failed = ckpt_save(dir, &m->np.P, hp, hm, hv, &meta, err, errlen) != 0;
            if (!failed && then) failed = then(ctx, err, errlen) != 0;
        }
        free(cfg_text);
        free(hp);
        free(hm);
        free(hv);
    }
    if (comm_world(comm) == 1) return failed ? -1 : 0;
    char e2[256];
    int any = 0;
    comm_watch(comm, 0);
    int rc = comm_any(comm, failed, &any, e2, sizeof e2);
    comm_watch(comm, 1);
    if (rc) {
        if (!failed) snprintf(err, errlen, "%s", e2);
        return -1;
    }
    if (any && !failed)
        snprintf(err, errlen, "rank 0 could not write the checkpoint of step %ld (see its message)",
                 step);
    return any ? -1 : 0;
}

/* Rank 0 loads out_dir's checkpoint (a named set, or an older
 * checkpoint.bin by position) when there is one and checks its config
 * against c; every rank gets the parameters and moments into the device
 * buffers. ps->step = steps already done and *found = 1 (0 without a
 * checkpoint). Returns 0 or -1 with a message on every rank. */
static int resume_from(comm_t *comm, const char *out_dir, pipe_state *ps, const bf_config *c,
                       ckpt_key_filter counts, void *counts_ctx, int *found, int quiet, char *err,
                       size_t errlen) {
    model *m = ps->m;
    const bk_backend *be = m->be;
    size_t n = m->np.P.numel;
    int rank = comm_rank(comm), failed = 0;
    uint64_t hdr[2] = {0, 0}; /* have, step */
    *found = 0;
    float *hp = malloc(n * sizeof(float)), *hm = malloc(n * sizeof(float)),
          *hv = malloc(n * sizeof(float));
    ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    if (!hp || !hm || !hv) {
        snprintf(err, errlen, "out of memory resuming %zu parameters", n);
        failed = 1;
    } else if (rank == 0 && ckpt_probe(out_dir) != CKPT_NONE) {
        char *cur = malloc(CKPT_MAX_CFG);
        if (!cur) {
            snprintf(err, errlen, "out of memory");
            failed = 1;
        } else if (ckpt_load(out_dir, &m->np.P, hp, hm, hv, &meta, err, errlen)) {
            failed = 1;
        } else {
            cfg_dump(c, cur, CKPT_MAX_CFG);
            char e2[1536];
            if (meta.cfg_text &&
                ckpt_config_check_keys(meta.cfg_text, cur, counts, counts_ctx, e2, sizeof e2)) {
                snprintf(err, errlen, "checkpoint in %s: %s", out_dir, e2);
                failed = 1;
            }
        }
        free(cur);
        if (!failed && meta.n_counters > PIPE_MAX_COUNTERS) {
            snprintf(err, errlen, "checkpoint in %s: %d counters of state (this bf keeps %d)",
                     out_dir, meta.n_counters, PIPE_MAX_COUNTERS);
            failed = 1;
        }
        for (int i = 0; !failed && i < meta.n_counters; i++) {
            snprintf(ps->counters[i].name, sizeof ps->counters[i].name, "%s",
                     meta.counters[i].name);
            ps->counters[i].value = meta.counters[i].value;
        }
        ps->n_counters = failed ? 0 : meta.n_counters;
        hdr[0] = !failed;
        hdr[1] = meta.step;
    }
    ckpt_meta_free(&meta);
    int any = failed;
    char e2[256];
    comm_watch(comm, 0);
    int rc = comm_any(comm, failed, &any, e2, sizeof e2);
    comm_watch(comm, 1);
    if (rc || any) {
        if (rc && !failed)
            snprintf(err, errlen, "%s", e2);
        else if (!failed)
            snprintf(err, errlen, "rank 0 could not resume from %s (see its message)", out_dir);
        goto fail;
    }
    if (comm_bcast(comm, hdr, sizeof hdr, 0, err, errlen)) goto fail;
    if (hdr[0]) {
        rc = comm_bcast(comm, hp, n * sizeof(float), 0, err, errlen) ||
             comm_bcast(comm, hm, n * sizeof(float), 0, err, errlen) ||
             comm_bcast(comm, hv, n * sizeof(float), 0, err, errlen) ||
             comm_bcast(comm, &ps->n_counters, sizeof ps->n_counters, 0, err, errlen) ||
             comm_bcast(comm, ps->counters, sizeof ps->counters, 0, err, errlen);
        if (rc) goto fail;
        be->to_device(m->np.P.data, hp, n * sizeof(float));
        be->to_device(ps->adam_m, hm, n * sizeof(float));
        be->to_device(ps->adam_v, hv, n * sizeof(float));
        ps->step = (long)hdr[1];
        *found = 1;
        if (!quiet) fprintf(stderr, "resume: continuing from step %ld of %s\n", ps->step, out_dir);
    }
    free(hp), free(hm), free(hv);
    return 0;
fail:
    free(hp), free(hm), free(hv);
    return -1;
}

/* init.from: every rank reads the file itself (it is read-only and the same
 * for all) and fills the tensors it names; rank 0 reports what matched.
 * *bad_input = 1 when the file (or the map) cannot be used: missing, not a
 * checkpoint, tensors that do not fit; another attempt would read the same. */
static int init_from(const char *path, const char *map, model *m, int quiet, int *bad_input,
                     char *err, size_t errlen) {
    size_t n = m->np.P.numel;
    float *hp = malloc(n * sizeof(float));
    char *text = malloc(8192);
    int rc = -1;
    if (!hp || !text) {
        snprintf(err, errlen, "out of memory reading init.from");
        goto done;
    }
    m->be->to_host(hp, m->np.P.data, n * sizeof(float));
    ckpt_init_report r;
    if (ckpt_init_from_map(path, map, &m->np.P, hp, &r, text, 8192, err, errlen)) {
        *bad_input = 1;
        goto done;
    }
    m->be->to_device(m->np.P.data, hp, n * sizeof(float));
    for (int i = 0; i < r.n_counters; i++)
        model_take_counter(m, r.counters[i].name, r.counters[i].value);
    if (!quiet) fprintf(stderr, "%s\n", text); /* "init.from PATH: ..." */
    if (r.converted && !quiet)
        fprintf(stderr,
                "init.from: note: %d tensor%s converted from %s to F32 (bf trains in F32)\n",
                r.converted, r.converted == 1 ? "" : "s", r.converted_from);
    rc = 0;
done:
    free(hp);
    free(text);
    return rc;
}

/* ---- the loop's host: this process's ranks, run folder and metrics ---- */

typedef struct host_ctx {
    comm_t *comm;
    const char *out_dir; /* rank 0's folder, NULL elsewhere or without one */
    const char *resume_dir;
    int quiet;
    metrics own, *mt;   /* mt: own, or the caller's (a stage of s2s) */
    const char *prefix; /* metric names under this ("teacher/"), or NULL */
    long step_offset;   /* added to every metric step */
    /* --force: the new run writes into staging (out_dir/.force-new) and
     * replaces the old run with it once its first checkpoint is written
     * (swap_in); until then the old run is untouched */
    const char *final_dir; /* rank 0: where the run belongs; NULL: no swap pending */
    char staging[4200];
    int swap_begun; /* force_swap started: staging is no longer discarded */
    /* a stage: called on rank 0 after each checkpoint (train_stage's saved) */
    int (*saved)(void *ctx, char *err, size_t errlen);
    void *saved_ctx;
    ckpt_key_filter counts; /* a stage: the keys its resume compares (NULL: all) */
    void *counts_ctx;
    const data_sets *d; /* begin: its tokenizer is saved, metrics opened (a whole run);
                         * NULL: a stage (its caller owns the metrics) */
    int bad_input;      /* set when init.from (or init.map) could not be used */
} host_ctx;

/* "prefix" + name, kept for the process's life (metric names must outlive
 * their flush); a bounded table: a name past it is logged unprefixed. */
static const char *prefixed(const char *prefix, const char *name) {
    static char *names[1024];
    static int n;
    char buf[256];
    snprintf(buf, sizeof buf, "%s%s", prefix, name);
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], buf) == 0) return names[i];
    if (n == (int)(sizeof names / sizeof *names)) return name;
    char *copy = malloc(strlen(buf) + 1);
    if (!copy) return name;
    strcpy(copy, buf);
    return names[n++] = copy;
}

static int h_sum(void *ctx, double *v, int n, char *err, size_t errlen) {
    return comm_sum_f64(((host_ctx *)ctx)->comm, v, n, err, errlen);
}

static int h_allreduce(void *ctx, const bk_backend *be, float *g, size_t n, int mean, char *err,
                       size_t errlen) {
    comm_t *comm = ((host_ctx *)ctx)->comm;
    return mean ? comm_allreduce_mean(comm, be, g, n, 1, err, errlen)
                : comm_allreduce_sum(comm, be, g, n, 1, err, errlen);
}

static int h_any(void *ctx, int flag, int *any, char *err, size_t errlen) {
    return comm_any(((host_ctx *)ctx)->comm, flag, any, err, errlen);
}

static void h_watch(void *ctx, int on) { comm_watch(((host_ctx *)ctx)->comm, on); }

static int h_device(void *ctx, const char *name, const bk_backend **be, char *err, size_t errlen) {
    comm_t *comm = ((host_ctx *)ctx)->comm;
    if (comm_select_gpu(comm, err, errlen)) return -1;
    if (bk_select(name, be, err, errlen)) return -1;
    return comm_gpu_setup(comm, *be, err, errlen);
}

static void h_metric_begin(void *ctx, long step) {
    host_ctx *h = ctx;
    metrics_begin(h->mt, step + h->step_offset);
}

static void h_metric(void *ctx, const char *name, double v) {
    host_ctx *h = ctx;
    metrics_add(h->mt, h->prefix ? prefixed(h->prefix, name) : name, v);
}

static int h_metric_flush(void *ctx, char *err, size_t errlen) {
    host_ctx *h = ctx;
    metrics_flush(h->mt);
    return metrics_status(h->mt, err, errlen);
}

/* --force, after the new run's first checkpoint is in staging: the new run
 * is swapped in for the old one (run/force.h: crash-safe, by renames) beside
 * whatever else the folder holds (stage folders), and the run goes on in
 * final_dir. The open metrics.jsonl and event file move with their names.
 * Rank 0 only. */
static int swap_in(void *ctx, char *err, size_t errlen) {
    host_ctx *h = ctx;
    if (!h->final_dir) return 0;
    if (force_swap(h->final_dir, &h->swap_begun, err, errlen)) return -1;
    metrics_moved(h->mt, h->final_dir);
    h->out_dir = h->resume_dir = h->final_dir;
    h->final_dir = NULL;
    return 0;
}

static int h_save(void *ctx, const bf_config *c, const pipe_state *s, char *err, size_t errlen) {
    host_ctx *h = ctx;
    /* only rank 0 writes, and swaps (the others' folder names go unused) */
    if (h->final_dir) return save_checkpoint(h->comm, h->resume_dir, s, c, swap_in, h, err, errlen);
    return save_checkpoint(h->comm, h->resume_dir, s, c, h->saved, h->saved_ctx, err, errlen);
}

static int h_resume(void *ctx, const bf_config *c, pipe_state *s, int *found, char *err,
                    size_t errlen) {
    host_ctx *h = ctx;
    *found = 0;
    if (!h->resume_dir) return 0;
    return resume_from(h->comm, h->resume_dir, s, c, h->counts, h->counts_ctx, found, h->quiet, err,
                       errlen);
}

static int h_init_from(void *ctx, const bf_config *c, model *m, char *err, size_t errlen) {
    host_ctx *h = ctx;
    if (!c->init.from[0] && c->init.map[0]) {
        h->bad_input = 1;
        snprintf(err, errlen, "init.map %s: set without init.from (the map renames its tensors)",
                 c->init.map);
        return -1;
    }
    if (!c->init.from[0]) return 0;
    return init_from(c->init.from, c->init.map, m, h->quiet, &h->bad_input, err, errlen);
}

/* Writes the resolved config beside the run's other files. */
static int write_config(const char *dir, const bf_config *c, char *err, size_t errlen) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.yaml", dir);
    char *txt = malloc(CKPT_MAX_CFG);
    FILE *f = fopen(path, "w");
    int rc = -1;
    if (!txt || !f) {
        snprintf(err, errlen, "cannot write %s: %s", path, txt ? strerror(errno) : "out of memory");
    } else {
        cfg_dump(c, txt, CKPT_MAX_CFG);
        fputs(txt, f);
        rc = 0;
    }
    if (f && fclose(f) && rc == 0) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        rc = -1;
    }
    free(txt);
    return rc;
}

/* The run has set up: rank 0 makes its folder and writes its first files
 * (under --force into the staging folder, beside the old run); every rank
 * learns whether that worked. */
static int h_begin(void *ctx, const bf_config *c, char *err, size_t errlen) {
    host_ctx *h = ctx;
    int failed = 0;
    if (h->out_dir)
        failed = make_dirs(h->out_dir, err, errlen) || write_config(h->out_dir, c, err, errlen) ||
                 (h->d && (data_sets_save_tokenizer(h->d, h->out_dir, err, errlen) ||
                           metrics_open(h->mt, h->out_dir, err, errlen)));
    if (comm_world(h->comm) == 1) return failed ? -1 : 0;
    char e2[256];
    int any = 0;
    comm_watch(h->comm, 0);
    int rc = comm_any(h->comm, failed, &any, e2, sizeof e2);
    comm_watch(h->comm, 1);
    if (rc) {
        if (!failed) snprintf(err, errlen, "%s", e2);
        return -1;
    }
    if (any && !failed)
        snprintf(err, errlen, "rank 0 could not write the run's first files (see its message)");
    return any ? -1 : 0;
}

static FILE *h_open_file(void *ctx, const char *name) {
    host_ctx *h = ctx;
    if (!h->out_dir) return NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", h->out_dir, name);
    return fopen(path, "w");
}

int host_open_data(const bf_config *c, comm_t *comm, int quiet, data_sets *d, char *err,
                   size_t errlen) {
    const int rank = comm_rank(comm);
    memset(d, 0, sizeof *d);
    int failed = 0, any = 0;
    if (rank == 0) failed = data_sets_open(c, d, quiet, err, errlen) != 0;
    char e2[256];
    comm_watch(comm, 0);
    int rc = comm_any(comm, failed, &any, e2, sizeof e2);
    comm_watch(comm, 1);
    if (rc || any) {
        if (!failed)
            snprintf(err, errlen, "%s",
                     rc ? e2 : "rank 0 could not open the data (see its message)");
        if (!failed && rank == 0) data_sets_close(d);
        return -1;
    }
    if (rank != 0 && data_sets_open(c, d, 1, err, errlen)) return -1;
    return 0;
}

/* The loop's host for c on this process's ranks: checkpoints in
 * ckpt_dir, files in rank 0's file_dir. */
static pipe_host make_host(host_ctx *hc, const train_opts *o, int has_files) {
    const char *always = getenv("BF_ALLREDUCE_ALWAYS");
    return (pipe_host){.ctx = hc,
                       .rank = comm_rank(o->comm),
                       .world = comm_world(o->comm),
                       /* BF_ALLREDUCE_ALWAYS=1: run the all-reduce even on one rank (the
                        * scaling benchmark measures NCCL's cost on a single GPU this way) */
                       .reduce_always = always && strcmp(always, "1") == 0,
                       .sum_f64 = h_sum,
                       .allreduce = h_allreduce,
                       .any = h_any,
                       .watch = h_watch,
                       .device = h_device,
                       .metric_begin = h_metric_begin,
                       .metric = h_metric,
                       .metric_flush = h_metric_flush,
                       .save = h_save,
                       .resume = o->resume ? h_resume : NULL,
                       .init_from = h_init_from,
                       .begin = h_begin,
                       .open_file = h_open_file,
                       .has_files = has_files};
}

int host_stage(const pipe_spec *sp, const bf_config *c, const train_opts *o, const train_stage *st,
               const data_sets *d, train_result *r, char *err, size_t errlen) {
    const int rank = comm_rank(o->comm);
    host_ctx hc = {.comm = o->comm,
                   .out_dir = rank == 0 ? st->dir : NULL,
                   .resume_dir = st->dir,
                   .quiet = o->quiet || rank != 0,
                   .mt = st->mt,
                   .prefix = st->prefix,
                   .step_offset = st->step_offset,
                   .saved = st->saved,
                   .saved_ctx = st->saved_ctx,
                   .counts = st->counts,
                   .counts_ctx = st->counts_ctx};
    train_opts so = *o;
    so.resume = 1; /* a stage folder is its own: continue what a killed run left */
    pipe_host h = make_host(&hc, &so, 1);
    int prc = pipe_train(sp, c, d, &h, o->stop, hc.quiet, r, err, errlen);
    return prc == 2       ? TRAIN_PREEMPTED
           : prc == 0     ? TRAIN_OK
           : hc.bad_input ? TRAIN_INPUT
                          : TRAIN_ERROR;
}

int host_make_dirs(const char *path, char *err, size_t errlen) {
    return make_dirs(path, err, errlen);
}

/* The folder path names (itself when a folder, else its parent), resolved
 * (links, "..") into out[PATH_MAX]; 0, or -1 when it does not exist. */
static int folder_of(const char *path, char *out) {
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    if (S_ISDIR(st.st_mode)) return realpath(path, out) ? 0 : -1;
    char parent[4200];
    snprintf(parent, sizeof parent, "%s", path);
    char *slash = strrchr(parent, '/');
    if (!slash)
        snprintf(parent, sizeof parent, ".");
    else if (slash == parent)
        parent[1] = 0;
    else
        *slash = 0;
    return realpath(parent, out) ? 0 : -1;
}

int host_check_init_from(const bf_config *c, const char *out_dir, char *err, size_t errlen) {
    char a[PATH_MAX], b[PATH_MAX];
    if (!c->init.from[0] || !out_dir || folder_of(c->init.from, a) || !realpath(out_dir, b))
        return 0;
    if (strcmp(a, b) != 0) return 0;
    snprintf(err, errlen,
             "init.from %s is in the --out folder %s: the new run writes its checkpoint there "
             "(and --force removes the old one before), so it would replace the weights it "
             "loads; copy them elsewhere first, or give another --out",
             c->init.from, out_dir);
    return -1;
}

int host_pipeline(const pipe_spec *sp, const bf_config *c, const train_opts *o, train_result *r,
                  char *err, size_t errlen) {
    comm_t *comm = o->comm;
    const int rank = comm_rank(comm);
    const int quiet = o->quiet || rank != 0;
    host_ctx hc = {.comm = comm,
                   .out_dir = rank == 0 ? o->out_dir : NULL,
                   .resume_dir = o->out_dir,
                   .quiet = quiet};
    hc.mt = &hc.own;
    metrics_open(hc.mt, NULL, err, errlen); /* no file until the run has set up (h_begin) */
    if (host_check_init_from(c, o->out_dir, err, errlen)) return TRAIN_INPUT;
    if (o->force && o->out_dir) {
        snprintf(hc.staging, sizeof hc.staging, "%s/" FORCE_NEW, o->out_dir);
        hc.resume_dir = hc.staging;
        if (rank == 0) {
            hc.out_dir = hc.staging;
            hc.final_dir = o->out_dir;
            /* what an earlier --force killed before its swap left (bfworker
             * train resolved it already: force_recover) */
            if (force_discard(o->out_dir, err, errlen)) return TRAIN_ERROR;
        }
    }
    data_sets d;
    if (host_open_data(c, comm, quiet, &d, err, errlen)) return TRAIN_INPUT;
    hc.d = &d;
    pipe_host h = make_host(&hc, o, o->out_dir != NULL);
    int prc = pipe_train(sp, c, &d, &h, o->stop, quiet, r, err, errlen);
    int rc = prc == 2       ? TRAIN_PREEMPTED
             : prc == 0     ? TRAIN_OK
             : hc.bad_input ? TRAIN_INPUT
                            : TRAIN_ERROR;
    if (rc == TRAIN_ERROR || rc == TRAIN_INPUT)
        metrics_close_failed(hc.mt);
    else
        metrics_close(hc.mt);
    data_sets_close(&d);
    /* --force that failed before its first checkpoint: the old run stays as
     * it was, and the new one's files go (a swap begun and failed is left for
     * force_recover to finish) */
    char e2[512];
    if (hc.final_dir && !hc.swap_begun && force_discard(hc.final_dir, e2, sizeof e2) && !quiet)
        fprintf(stderr, "bfworker: %s\n", e2);
    return rc;
}
