/* metrics.c — writes DIR/metrics.jsonl (metrics.h): the points of one step
 * collected, flushed as one JSON line, mirrored to TensorBoard when on. */

#include "worker/link/metrics.h"
#include "common/tfevents.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

static int g_tensorboard = 1;

void metrics_set_tensorboard(int on) { g_tensorboard = on; }

static double now_s(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec + tv.tv_usec * 1e-6;
}

int metrics_open(metrics *m, const char *dir, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    if (!dir) return 0;
    if (g_tensorboard && tfevents_create(dir, now_s(), &m->tb, err, errlen)) return -1;
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    snprintf(m->path, sizeof m->path, "%s", path);
    m->f = fopen(path, "a");
    if (!m->f) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        char e2[8];
        tfevents_close(&m->tb, e2, sizeof e2);
        return -1;
    }
    return 0;
}

void metrics_begin(metrics *m, long step) {
    m->step = step;
    m->n = 0;
}

void metrics_add(metrics *m, const char *name, double value) {
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->name[i], name) == 0) {
            m->value[i] = value;
            return;
        }
    if (m->n == METRICS_MAX_POINTS) return;
    m->name[m->n] = name;
    m->value[m->n++] = value;
}

void metrics_flush(metrics *m) {
    if (!m->f || m->n == 0) return;
    double t = now_s();
    fprintf(m->f, "{\"step\": %ld, \"time\": %.3f", m->step, t);
    for (int i = 0; i < m->n; i++) {
        if (isfinite(m->value[i]))
            fprintf(m->f, ", \"%s\": %.9g", m->name[i], m->value[i]);
        else
            fprintf(m->f, ", \"%s\": null", m->name[i]);
    }
    fputs("}\n", m->f);
    m->lines++;
    errno = 0;
    if ((fflush(m->f) != 0 || ferror(m->f)) && !m->write_errno)
        m->write_errno = errno ? errno : EIO;
    /* TensorBoard: a failed write stops the event file, never the training */
    char err[256];
    for (int i = 0; m->tb && i < m->n; i++)
        if (isfinite(m->value[i]) &&
            tfevents_scalar(m->tb, m->name[i], m->step, t, m->value[i], err, sizeof err))
            tfevents_close(&m->tb, err, sizeof err);
    if (m->tb && tfevents_flush(m->tb, err, sizeof err)) tfevents_close(&m->tb, err, sizeof err);
    m->n = 0;
}

void metrics_close(metrics *m) {
    if (m->f) fclose(m->f);
    m->f = NULL;
    char err[256];
    tfevents_close(&m->tb, err, sizeof err);
}

void metrics_moved(metrics *m, const char *dir) {
    if (m->path[0]) snprintf(m->path, sizeof m->path, "%s/metrics.jsonl", dir);
}

void metrics_close_failed(metrics *m) {
    char tb[8200] = "";
    /* the event file is beside metrics.jsonl, wherever that was moved */
    if (m->lines == 0 && m->tb) {
        const char *p = tfevents_path(m->tb), *base = strrchr(p, '/');
        const char *slash = strrchr(m->path, '/');
        if (base && slash)
            snprintf(tb, sizeof tb, "%.*s%s", (int)(slash - m->path), m->path, base);
        else
            snprintf(tb, sizeof tb, "%s", p);
    }
    metrics_close(m);
    if (m->lines) return;
    struct stat st;
    if (m->path[0] && stat(m->path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0)
        unlink(m->path);
    if (tb[0]) unlink(tb);
}

int metrics_status(const metrics *m, char *err, size_t errlen) {
    if (!m->write_errno) return 0;
    snprintf(err, errlen, "writing metrics.jsonl failed: %s", strerror(m->write_errno));
    return -1;
}
