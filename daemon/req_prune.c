/* req_prune.c — removing jobs: the rm request (one finished or pending job,
 * refused while a trial of it runs), the gc request (the finished jobs
 * older than a given age in given states; a dry run lists them only), and
 * the removal itself, done a chunk per loop round by prune_tick (the store
 * rows of a chunk of trials in one short transaction, then their folders,
 * logs and, at the job's end, its TensorBoard folder and the stage folders
 * nobody plans any more), so neither a big job nor many stall the loop.
 * A removal under way survives a restart: the store keeps the mark. */
#define _XOPEN_SOURCE 700 /* nftw */
#include "daemon/req.h"

#include "common/errbuf.h"
#include "common/tfevents.h"

#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PRUNE_TRIALS_PER_ROUND 100  /* store rows and folders per loop round */
#define SHRINK_PAGES_PER_ROUND 2048 /* free pages given back per loop round (8 MiB) */
#define GC_MAX_JOBS 10000           /* jobs one gc request removes or lists */

/* nftw's callback: removes one entry, contents first (FTW_DEPTH). */
static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)ftw;
    int rc = flag == FTW_DP ? rmdir(path) : unlink(path);
    if (rc != 0 && errno != ENOENT) bfd_log("rm %s: %s", path, strerror(errno));
    return 0;
}

/* Removes path and everything below it, not following links; a missing
 * path is fine. */
static void remove_tree(const char *path) {
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
        bfd_log("rm %s: %s", path, strerror(errno));
}

void prune_tick(bfd *d) {
    char err[1024];
    if (d->shrinking) {
        long long left = 0;
        if (store_shrink(d->st, SHRINK_PAGES_PER_ROUND, &left, err, sizeof err)) {
            bfd_log("shrinking the store: %s", err);
            left = 0;
        }
        d->shrinking = left > 0;
    }
    if (!d->pruning) return;
    store_pruned p;
    if (store_prune_step(d->st, PRUNE_TRIALS_PER_ROUND, &p, err, sizeof err)) {
        bfd_log("removing jobs: %s", err);
        return; /* tried again next round */
    }
    char path[4300];
    for (size_t i = 0; i < p.n_trials; i++) {
        snprintf(path, sizeof path, "%s/logs/%lld.log", d->o->home, (long long)p.trials[i]);
        if (unlink(path) != 0 && errno != ENOENT) bfd_log("rm %s: %s", path, strerror(errno));
        if (p.keep_files) continue;
        snprintf(path, sizeof path, "%s/trials/%lld", d->o->home, (long long)p.trials[i]);
        remove_tree(path);
    }
    for (size_t i = 0; !p.keep_files && i < p.n_stage_dirs; i++) {
        snprintf(path, sizeof path, "%s/stages/%s", d->o->home, p.stage_dirs[i]);
        remove_tree(path);
    }
    if (p.job_done) {
        char base[1300];
        snprintf(base, sizeof base, "%s/tensorboard", d->o->home);
        if (tfevents_job_dir(path, sizeof path, base, p.name, p.job) == 0) remove_tree(path);
        bfd_log("job %lld '%s' removed", (long long)p.job, p.name);
        d->shrinking = 1;
    }
    if (!p.job) d->pruning = 0;
    store_pruned_free(&p);
}

int prune_start(bfd *d, char *err, size_t errlen) {
    int n = 0, any = 0;
    if (store_prune_abandoned(d->st, &n, err, errlen) ||
        store_prune_pending(d->st, &any, err, errlen))
        return -1;
    if (n)
        bfd_log("%d submit%s cut short by a crash: removing what was stored", n, n == 1 ? "" : "s");
    d->pruning = any;
    return 0;
}

/* The request's optional boolean `key` into *out (default 0): 0, or -1
 * after replying a field error. */
static int get_bool(bfd *d, void *s, proto_msg *m, const char *key, int *out) {
    json_t *v = json_object_get(m->body, key);
    *out = 0;
    if (!v) return 0;
    if (!json_is_boolean(v)) {
        reply_err(d, s, m, PROTO_E_FIELD, "%s: field '%s' must be true or false", m->type, key);
        return -1;
    }
    *out = json_is_true(v);
    return 0;
}

void req_rm(bfd *d, void *s, proto_msg *m) {
    char err[1024];
    long long id;
    store_job j;
    int keep;
    if (get_job_field(d, s, m, &id, &j) || get_bool(d, s, m, "keep_files", &keep)) return;
    if (j.counts[TRIAL_RUNNING] > 0) {
        reply_err(d, s, m, PROTO_E_STATE,
                  "rm: job %lld has %lld running trial%s; cancel it first (bfctl rm --cancel)", id,
                  j.counts[TRIAL_RUNNING], j.counts[TRIAL_RUNNING] == 1 ? "" : "s");
        return;
    }
    if (store_prune_mark(d->st, id, keep, err, sizeof err)) {
        reply_err(d, s, m, PROTO_E_INTERNAL, "rm: %s", err);
        return;
    }
    d->pruning = 1;
    bfd_log("job %lld '%s': removing %lld trials%s", id, j.name, j.n_proposed,
            keep ? " (keeping their folders)" : "");
    json_t *b = json_pack("{s:I, s:s, s:I}", "job", (json_int_t)id, "name", j.name, "trials",
                          (json_int_t)j.n_proposed);
    reply(d, s, m, "rm", b);
    json_decref(b);
}

/* The mask of STORE_GC_* the request's `states` names (all when absent):
 * 0, or -1 after replying a field error. */
static int gc_states(bfd *d, void *s, proto_msg *m, unsigned *mask) {
    static const char *const names[] = {"completed", "failed", "cancelled"};
    json_t *v = json_object_get(m->body, "states");
    *mask = STORE_GC_COMPLETED | STORE_GC_FAILED | STORE_GC_CANCELLED;
    if (!v) return 0;
    size_t i;
    json_t *e;
    *mask = 0;
    if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > 3) goto bad;
    json_array_foreach(v, i, e) {
        unsigned bit = 0;
        for (int k = 0; k < 3; k++)
            if (json_is_string(e) && !strcmp(json_string_value(e), names[k])) bit = 1u << k;
        if (!bit) goto bad;
        *mask |= bit;
    }
    return 0;
bad:
    reply_err(d, s, m, PROTO_E_FIELD,
              "gc: field 'states' must be a list of completed, failed, cancelled");
    return -1;
}

void req_gc(bfd *d, void *s, proto_msg *m) {
    char err[1024];
    double older;
    int dry, keep;
    unsigned mask;
    err[0] = '\0';
    if (proto_get_num(m->body, "older_than", 1, 0, &older, err, sizeof err) || !(older >= 0)) {
        reply_err(d, s, m, PROTO_E_FIELD, "gc: %s",
                  err[0] ? err : "field 'older_than' must be seconds >= 0");
        return;
    }
    if (get_bool(d, s, m, "dry_run", &dry) || get_bool(d, s, m, "keep_files", &keep) ||
        gc_states(d, s, m, &mask))
        return;
    store_gc_job *g = NULL;
    size_t n = 0;
    if (store_gc_candidates(d->st, now_s() - older, mask, &g, &n, err, sizeof err)) {
        reply_err(d, s, m, PROTO_E_INTERNAL, "gc: %s", err);
        return;
    }
    if (n > GC_MAX_JOBS) n = GC_MAX_JOBS; /* the rest on the next call */
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        if (!dry && store_prune_mark(d->st, g[i].job, keep, err, sizeof err)) {
            bfd_log("gc: job %lld: %s", (long long)g[i].job, err);
            continue;
        }
        json_array_append_new(
            arr, json_pack("{s:I, s:s, s:s, s:f, s:I, s:I}", "id", (json_int_t)g[i].job, "name",
                           g[i].name, "state", g[i].state, "last", g[i].last, "trials",
                           (json_int_t)g[i].trials, "points", (json_int_t)g[i].points));
    }
    free(g);
    if (!dry && n) {
        d->pruning = 1;
        bfd_log("gc: removing %zu job%s", json_array_size(arr),
                json_array_size(arr) == 1 ? "" : "s");
    }
    json_t *b = json_pack("{s:o, s:b}", "jobs", arr, "dry_run", dry);
    reply(d, s, m, "gc", b);
    json_decref(b);
}
