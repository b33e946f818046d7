/* exp_tb.c — the TensorBoard exporter (see exp_tb.h): a writer per
 * running trial that appends what the store holds past its last seq, with a
 * progress file that makes a restart neither lose nor repeat a point. It
 * only reads the store; it never writes it and never sees a socket. */
#include "daemon/exp_tb.h"
#include "common/errbuf.h"
#include "common/tfevents.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TB_MAX_OPEN 128    /* event files held open; the least recently used is closed */
#define TB_SYNC_SEQS 2000  /* points written per call */
#define TB_RETRY_S 30      /* after a write error */
#define TB_SAVE_EVERY_S 1. /* progress file */
#define PROGRESS ".bf-progress"
#define TB_TICK_S 0.01      /* a tick's work on writers, and on experiments; the rest next round */
#define TB_PARAMS_PAGE 1000 /* trials read per step of an experiment */

typedef struct tbw {
    int64_t trial;
    tfevents *ev;     /* NULL: not open (or failed; see retry_at) */
    char dir[4096];   /* the trial's run folder */
    int64_t seq;      /* last seq written */
    int64_t saved;    /* seq in the progress file */
    int behind;       /* the store has more than the last call wrote */
    double retry_at;  /* after an error: not before */
    double last_used; /* for closing the least recently used */
    double saved_at;  /* when the progress file was last written */
    int ended;        /* the session end is written */
} tbw;

/* A job's HParams experiment being gathered, a page of its trials per
 * step (exp_tb_tick), and written once its last trial is read: reading a
 * 100,000-trial job's params at once held bfd's loop for seconds. */
typedef struct tbx {
    store_job job;
    char dir[4096];  /* the job's folder */
    long long after; /* the last trial index read */
    tfevents_hparams *h;
} tbx;

struct exp_tb {
    int enabled;
    char base[2048];
    tbw *w;
    size_t n, cap;
    size_t next; /* the writer the next tick starts at */
    tbx *x;      /* experiments being gathered */
    size_t nx, capx;
    int64_t *done; /* jobs whose experiment is written (seen this run) */
    size_t ndone, capdone;
};

int exp_tb_open(const char *base, int enabled, exp_tb **out, char *err, size_t errlen) {
    *out = NULL;
    exp_tb *t = calloc(1, sizeof *t);
    if (!t) return bf_fail(err, errlen, "out of memory");
    if (strlen(base) >= sizeof t->base) {
        free(t);
        return bf_fail(err, errlen, "tensorboard folder name too long: %s", base);
    }
    snprintf(t->base, sizeof t->base, "%s", base);
    t->enabled = enabled;
    *out = t;
    return 0;
}

/* Writes dir/.bf-progress = "FILE SIZE SEQ ENDED" through a rename, so it
 * is either the old line or the new one. */
static int save_progress(tbw *w, char *err, size_t errlen) {
    if (!w->ev) return 0;
    if (tfevents_flush(w->ev, err, errlen)) return -1;
    char tmp[4200], path[4200];
    snprintf(tmp, sizeof tmp, "%s/" PROGRESS ".tmp", w->dir);
    snprintf(path, sizeof path, "%s/" PROGRESS, w->dir);
    FILE *f = fopen(tmp, "w");
    if (!f) return bf_fail(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    const char *name = strrchr(tfevents_path(w->ev), '/') + 1;
    fprintf(f, "%s %lld %lld %d\n", name, tfevents_size(w->ev), (long long)w->seq, w->ended);
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        return bf_fail(err, errlen, "cannot write %s: %s", path, strerror(errno));
    w->saved = w->seq;
    return 0;
}

static void close_writer(tbw *w) {
    char err[512];
    if (!w->ev) return;
    save_progress(w, err, sizeof err);
    tfevents_close(&w->ev, err, sizeof err);
}

static int has_event_file(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d))) found = strncmp(e->d_name, "events.out.tfevents.", 20) == 0;
    closedir(d);
    return found;
}

/* Event files of a run folder that no progress file vouches for (a crash
 * before the first save): removed, their points are rewritten. */
static void remove_event_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "events.out.tfevents.", 20) != 0) continue;
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
}

/* Monotonic seconds: a tick's budget. */
static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Appends v to the growing array *a (n used, cap allocated); -1 when out of
 * memory. */
static int push_job(int64_t **a, size_t *n, size_t *cap, int64_t v) {
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 16;
        int64_t *na = realloc(*a, c * sizeof *na);
        if (!na) return -1;
        *a = na;
        *cap = c;
    }
    (*a)[(*n)++] = v;
    return 0;
}

/* 1 when job's experiment is written or being gathered. */
static int experiment_known(const exp_tb *t, int64_t job) {
    for (size_t i = 0; i < t->ndone; i++)
        if (t->done[i] == job) return 1;
    for (size_t i = 0; i < t->nx; i++)
        if (t->x[i].job.id == job) return 1;
    return 0;
}

/* The job's folder gets its experiment (written once, when the folder has
 * no event file yet): gathered from the store by later ticks. */
static int experiment_start(exp_tb *t, const store_job *j, const char *jobdir, char *err,
                            size_t errlen) {
    if (experiment_known(t, j->id)) return 0;
    if (has_event_file(jobdir))
        return push_job(&t->done, &t->ndone, &t->capdone, j->id)
                   ? bf_fail(err, errlen, "out of memory")
                   : 0;
    if (t->nx == t->capx) {
        size_t c = t->capx ? 2 * t->capx : 4;
        tbx *nx = realloc(t->x, c * sizeof *nx);
        if (!nx) return bf_fail(err, errlen, "out of memory");
        t->x = nx;
        t->capx = c;
    }
    tbx *x = &t->x[t->nx];
    memset(x, 0, sizeof *x);
    x->job = *j;
    x->after = -1;
    snprintf(x->dir, sizeof x->dir, "%s", jobdir);
    if (!(x->h = tfevents_hparams_new())) return bf_fail(err, errlen, "out of memory");
    t->nx++;
    return 0;
}

/* Forgets experiment i (the last takes its place). */
static void experiment_drop(exp_tb *t, size_t i) {
    tfevents_hparams_free(&t->x[i].h);
    t->x[i] = t->x[--t->nx];
}

/* One step of experiment i: a page of its job's trials gathered, and when
 * that was the last, the experiment written (the swept parameters of all
 * its trials and its metric) and i forgotten. On an error i is forgotten
 * too: the next writer of the job starts it again. */
static int experiment_step(exp_tb *t, store *st, size_t i, double now, char *err, size_t errlen) {
    tbx *x = &t->x[i];
    char **params = NULL;
    size_t n = 0;
    if (store_job_params_page(st, x->job.id, x->after, TB_PARAMS_PAGE, &params, &n, &x->after, err,
                              errlen)) {
        experiment_drop(t, i);
        return -1;
    }
    for (size_t k = 0; k < n; k++) {
        json_error_t je;
        json_t *p = json_loads(params[k], 0, &je);
        if (p) tfevents_hparams_add(x->h, p);
        json_decref(p);
        free(params[k]);
    }
    free(params);
    if (n == TB_PARAMS_PAGE) return 0;
    const store_job *j = &x->job;
    store_job now_j;
    if (store_job_get(st, j->id, &now_j, err, errlen) != 0) { /* removed meanwhile: no folder */
        experiment_drop(t, i);
        return 0;
    }
    const char *metrics[2] = {j->metric, "train/loss"};
    size_t nm = strcmp(j->metric, "train/loss") == 0 ? 1 : 2;
    tfevents *ev;
    int rc = tfevents_create(x->dir, j->submitted > 0 ? j->submitted : now, &ev, err, errlen);
    if (!rc) {
        rc = tfevents_experiment_write(ev, j->name, x->h, metrics, nm, j->submitted, err, errlen);
        char e2[256];
        if (tfevents_close(&ev, e2, sizeof e2) && !rc) rc = bf_fail(err, errlen, "%s", e2);
    }
    if (!rc && push_job(&t->done, &t->ndone, &t->capdone, j->id))
        rc = bf_fail(err, errlen, "out of memory");
    experiment_drop(t, i);
    return rc;
}

/* Opens w's event file: continued from its progress file, or new (with the
 * session start) when there is none that matches. */
static int open_writer(exp_tb *t, tbw *w, store *st, double now, char *err, size_t errlen) {
    store_trial tr;
    if (store_get_trial(st, w->trial, &tr, err, errlen)) return -1;
    store_job j;
    int rc = store_job_get(st, tr.job_id, &j, err, errlen);
    if (rc) {
        store_trial_free(&tr);
        return rc < 0 ? -1 : bf_fail(err, errlen, "trial %lld: no job", (long long)w->trial);
    }
    char jobdir[4096];
    if (tfevents_job_dir(jobdir, sizeof jobdir, t->base, j.name, j.id) ||
        snprintf(w->dir, sizeof w->dir, "%s/t%lld", jobdir, (long long)w->trial) >=
            (int)sizeof w->dir) {
        store_trial_free(&tr);
        return bf_fail(err, errlen, "tensorboard path too long under %s", t->base);
    }
    if (experiment_start(t, &j, jobdir, err, errlen)) {
        store_trial_free(&tr);
        return -1;
    }
    /* continue from the progress file when it matches a file that is there */
    char pp[4200], name[1024];
    long long size, seq;
    int ended = 0;
    snprintf(pp, sizeof pp, "%s/" PROGRESS, w->dir);
    FILE *f = fopen(pp, "r");
    int have = f && fscanf(f, "%1023s %lld %lld %d", name, &size, &seq, &ended) == 4 && size > 0 &&
               seq >= 0 && !strchr(name, '/');
    if (f) fclose(f);
    if (have) {
        char ep[5200];
        snprintf(ep, sizeof ep, "%s/%s", w->dir, name);
        char e2[512];
        if (tfevents_reopen(ep, size, &w->ev, e2, sizeof e2) == 0) {
            w->seq = w->saved = seq;
            w->ended = ended != 0;
            store_trial_free(&tr);
            return 0;
        }
    }
    remove_event_files(w->dir);
    w->seq = w->saved = 0;
    w->ended = 0;
    json_error_t je;
    json_t *params = tr.params_json ? json_loads(tr.params_json, 0, &je) : NULL;
    rc = tfevents_create(w->dir, now, &w->ev, err, errlen);
    if (!rc) rc = tfevents_session_start(w->ev, params, "", now, err, errlen);
    if (!rc) rc = save_progress(w, err, errlen);
    if (rc && w->ev) {
        char e2[256];
        tfevents_close(&w->ev, e2, sizeof e2);
    }
    json_decref(params);
    store_trial_free(&tr);
    return rc;
}

static tbw *find_writer(exp_tb *t, int64_t trial) {
    for (size_t i = 0; i < t->n; i++)
        if (t->w[i].trial == trial) return &t->w[i];
    return NULL;
}

/* The writer of trial, opened; NULL on failure (err) or while it waits to
 * be retried (*skip = 1). */
static tbw *writer_for(exp_tb *t, store *st, int64_t trial, double now, int *skip, char *err,
                       size_t errlen) {
    *skip = 0;
    tbw *w = find_writer(t, trial);
    if (!w) {
        if (t->n == t->cap) {
            size_t cap = t->cap ? 2 * t->cap : 16;
            tbw *nw = realloc(t->w, cap * sizeof *nw);
            if (!nw) {
                bf_fail(err, errlen, "out of memory");
                return NULL;
            }
            t->w = nw;
            t->cap = cap;
        }
        w = &t->w[t->n++];
        memset(w, 0, sizeof *w);
        w->trial = trial;
    }
    w->last_used = now;
    if (w->ev) return w;
    if (now < w->retry_at) {
        *skip = 1;
        return NULL;
    }
    /* at most TB_MAX_OPEN files: close the least recently used */
    size_t open = 0, lru = t->n;
    for (size_t i = 0; i < t->n; i++)
        if (t->w[i].ev) {
            open++;
            if (lru == t->n || t->w[i].last_used < t->w[lru].last_used) lru = i;
        }
    if (open >= TB_MAX_OPEN && lru < t->n) close_writer(&t->w[lru]);
    if (open_writer(t, w, st, now, err, errlen)) {
        w->retry_at = now + TB_RETRY_S;
        return NULL;
    }
    return w;
}

/* Writes up to TB_SYNC_SEQS points past w->seq. */
static int sync_writer(tbw *w, store *st, char *err, size_t errlen) {
    store_point *p = NULL;
    size_t n = 0;
    if (store_metric_history(st, w->trial, w->seq, TB_SYNC_SEQS, &p, &n, err, errlen)) return -1;
    size_t seqs = 0;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        if (i == 0 || p[i].seq != p[i - 1].seq) seqs++;
        /* the current curve only: a retry's re-logged steps replace the old
         * ones (those written before the retry came are purged by
         * TensorBoard when the step goes back) */
        if (!p[i].superseded)
            rc = tfevents_scalar(w->ev, p[i].name, p[i].step, p[i].time, p[i].value, err, errlen);
    }
    if (!rc && n) w->seq = p[n - 1].seq;
    w->behind = !rc && seqs == TB_SYNC_SEQS;
    free(p);
    if (!rc) rc = tfevents_flush(w->ev, err, errlen);
    return rc;
}

/* After an error: the file is closed (progress not saved past the last good
 * pair) and the trial retried later. */
static int writer_failed(tbw *w, double now) {
    char e2[256];
    if (w->ev) tfevents_close(&w->ev, e2, sizeof e2);
    w->retry_at = now + TB_RETRY_S;
    w->behind = 0;
    return -1;
}

int exp_tb_trial(exp_tb *t, store *st, int64_t trial, double now, char *err, size_t errlen) {
    if (!t || !t->enabled) return 0;
    int skip;
    tbw *w = writer_for(t, st, trial, now, &skip, err, errlen);
    if (!w) return skip ? 0 : -1;
    if (sync_writer(w, st, err, errlen)) return writer_failed(w, now);
    return 0;
}

int exp_tb_trial_end(exp_tb *t, store *st, int64_t trial, double now, char *err, size_t errlen) {
    if (!t || !t->enabled) return 0;
    int skip;
    tbw *w = writer_for(t, st, trial, now, &skip, err, errlen);
    if (!w) return skip ? 0 : -1;
    do {
        if (sync_writer(w, st, err, errlen)) return writer_failed(w, now);
    } while (w->behind);
    store_trial tr;
    if (store_get_trial(st, trial, &tr, err, errlen)) return writer_failed(w, now);
    trial_state s = tr.state;
    store_trial_free(&tr);
    tfevents_status status = s == TRIAL_COMPLETED || s == TRIAL_STOPPED  ? TFEVENTS_STATUS_SUCCESS
                             : s == TRIAL_FAILED || s == TRIAL_CANCELLED ? TFEVENTS_STATUS_FAILURE
                                                                         : TFEVENTS_STATUS_UNKNOWN;
    if (status != TFEVENTS_STATUS_UNKNOWN && !w->ended) {
        if (tfevents_session_end(w->ev, status, now, err, errlen)) return writer_failed(w, now);
        w->ended = 1;
    }
    int rc = save_progress(w, err, errlen);
    char e2[256];
    if (tfevents_close(&w->ev, e2, sizeof e2) && !rc) rc = bf_fail(err, errlen, "%s", e2);
    /* forget it: a later attempt reopens from the progress file */
    *w = t->w[--t->n];
    return rc;
}

int exp_tb_tick(exp_tb *t, store *st, double now, char *err, size_t errlen) {
    if (!t || !t->enabled) return 0;
    int rc = 0;
    char e[512];
    /* experiments: a page each step, TB_TICK_S of them */
    double t0 = mono_s();
    while (t->nx && mono_s() - t0 < TB_TICK_S)
        if (experiment_step(t, st, 0, now, e, sizeof e) && !rc) rc = bf_fail(err, errlen, "%s", e);
    /* writers: from where the last tick stopped, TB_TICK_S of them (100
     * progress files saved in one round took 200-300 ms of the loop) */
    t0 = mono_s();
    for (size_t k = 0; k < t->n && (k == 0 || mono_s() - t0 < TB_TICK_S); k++) {
        size_t i = (t->next + k) % t->n;
        t->next = (i + 1) % t->n;
        tbw *w = &t->w[i];
        if (!w->ev) continue;
        if (w->behind && sync_writer(w, st, e, sizeof e)) {
            if (!rc) rc = bf_fail(err, errlen, "%s", e);
            writer_failed(w, now);
            continue;
        }
        if (w->seq == w->saved || now - w->saved_at < TB_SAVE_EVERY_S) continue;
        w->saved_at = now;
        if (save_progress(w, e, sizeof e)) {
            if (!rc) rc = bf_fail(err, errlen, "%s", e);
            writer_failed(w, now);
        }
    }
    return rc;
}

void exp_tb_close(exp_tb **tp, store *st) {
    exp_tb *t = *tp;
    if (!t) return;
    *tp = NULL;
    for (size_t i = 0; i < t->n; i++) close_writer(&t->w[i]);
    /* experiments being gathered are finished: no writer may open them
     * again after a restart */
    char err[512];
    while (t->nx) experiment_step(t, st, 0, (double)time(NULL), err, sizeof err);
    free(t->x);
    free(t->done);
    free(t->w);
    free(t);
}

int exp_tb_recover(exp_tb *t, store *st, double now, char *err, size_t errlen) {
    if (!t || !t->enabled) return 0;
    DIR *base = opendir(t->base);
    if (!base) return 0; /* nothing written yet */
    int rc = 0;
    struct dirent *je;
    while ((je = readdir(base))) {
        if (je->d_name[0] == '.') continue;
        char jobdir[4200];
        snprintf(jobdir, sizeof jobdir, "%s/%s", t->base, je->d_name);
        DIR *jd = opendir(jobdir);
        if (!jd) continue;
        /* NAME-JOB: a job whose experiment a stop cut off gets it */
        const char *dash = strrchr(je->d_name, '-');
        char *jend;
        long long job = dash ? strtoll(dash + 1, &jend, 10) : 0;
        store_job j;
        if (job > 0 && !*jend && !has_event_file(jobdir) &&
            store_job_get(st, job, &j, err, errlen) == 0) {
            char e[512];
            if (experiment_start(t, &j, jobdir, e, sizeof e) && !rc)
                rc = bf_fail(err, errlen, "job %lld: %s", job, e);
        }
        struct dirent *te;
        while ((te = readdir(jd))) {
            char *end;
            long long trial = te->d_name[0] == 't' ? strtoll(te->d_name + 1, &end, 10) : 0;
            if (trial < 1 || *end) continue;
            char pp[4600], name[1024];
            snprintf(pp, sizeof pp, "%s/%s/" PROGRESS, jobdir, te->d_name);
            long long size, seq;
            int ended = 0;
            FILE *f = fopen(pp, "r");
            int have = f && fscanf(f, "%1023s %lld %lld %d", name, &size, &seq, &ended) == 4;
            if (f) fclose(f);
            if (have && ended) continue;
            store_trial tr;
            if (store_get_trial(st, trial, &tr, err, errlen)) continue; /* not this store's */
            trial_state s = tr.state;
            store_trial_free(&tr);
            if (s == TRIAL_PENDING || s == TRIAL_RUNNING) continue; /* written when it runs */
            char e[512];
            if (exp_tb_trial_end(t, st, trial, now, e, sizeof e) && !rc)
                rc = bf_fail(err, errlen, "trial %lld: %s", trial, e);
        }
        closedir(jd);
    }
    closedir(base);
    return rc;
}
