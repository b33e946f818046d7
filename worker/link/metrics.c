/* metrics.c — writes DIR/metrics.jsonl (metrics.h): the points of one step
 * collected, flushed as one JSON line, mirrored to TensorBoard when on. */

#include "worker/link/metrics.h"
#include "common/tfevents.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
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

/* Cuts a partial last line off the file fd (a write cut short by a full
 * disk or a kill): the file then ends after its last newline, so what is
 * appended starts a line of its own and every line parses. 0, or -1. */
static int cut_partial_line(int fd) {
    off_t end = lseek(fd, 0, SEEK_END), pos = end;
    if (end <= 0) return end < 0 ? -1 : 0;
    char buf[8192];
    while (pos > 0) {
        size_t n = pos < (off_t)sizeof buf ? (size_t)pos : sizeof buf;
        if (pread(fd, buf, n, pos - (off_t)n) != (ssize_t)n) return -1;
        for (size_t i = n; i-- > 0;)
            if (buf[i] == '\n') {
                off_t keep = pos - (off_t)n + (off_t)i + 1;
                return keep == end ? 0 : ftruncate(fd, keep);
            }
        pos -= (off_t)n;
    }
    return ftruncate(fd, 0); /* no newline at all: one partial line */
}

int metrics_open(metrics *m, const char *dir, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    if (!dir) return 0;
    if (g_tensorboard && tfevents_create(dir, now_s(), &m->tb, err, errlen)) return -1;
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    snprintf(m->path, sizeof m->path, "%s", path);
    m->f = fopen(path, "a+"); /* read too: the partial line is looked for */
    /* unbuffered: each line goes out in one write, and a failed one is
     * taken back (metrics_flush); nothing is left in a buffer to land later */
    if (m->f && (setvbuf(m->f, NULL, _IONBF, 0) != 0 || cut_partial_line(fileno(m->f)))) {
        fclose(m->f);
        m->f = NULL;
        errno = errno ? errno : EIO;
    }
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

/* Appends printf-style text to the malloc'd line *buf (*len used, *cap
 * allocated), growing it; 0, or -1 when out of memory. */
static int line_add(char **buf, size_t *len, size_t *cap, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(*buf + *len, *cap - *len, fmt, ap);
        va_end(ap);
        if (n < 0) return -1;
        if ((size_t)n < *cap - *len) {
            *len += (size_t)n;
            return 0;
        }
        size_t nc = 2 * *cap + (size_t)n;
        char *nb = realloc(*buf, nc);
        if (!nb) return -1;
        *buf = nb;
        *cap = nc;
    }
}

/* Writes the whole line text[0..len) at the end of the file, or nothing:
 * a write cut short (a full disk) is truncated back to where the line
 * began, so the file holds whole lines only. 0, or an errno. */
static int write_line(FILE *f, const char *text, size_t len) {
    int fd = fileno(f);
    struct stat st;
    if (fstat(fd, &st) != 0) return errno ? errno : EIO;
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, text + done, len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = w < 0 ? errno : EIO;
            if (ftruncate(fd, st.st_size) != 0) { /* the line stays cut: the next open cuts it */
            }
            return e;
        }
        done += (size_t)w;
    }
    return 0;
}

void metrics_flush(metrics *m) {
    /* after a failed write nothing more is written: the run ends on it */
    if (!m->f || m->n == 0 || m->write_errno) {
        m->n = 0;
        return;
    }
    double t = now_s();
    size_t len = 0, cap = 1024;
    char *buf = malloc(cap);
    int bad = !buf || line_add(&buf, &len, &cap, "{\"step\": %ld, \"time\": %.3f", m->step, t);
    for (int i = 0; i < m->n && !bad; i++) {
        if (isfinite(m->value[i]))
            bad = line_add(&buf, &len, &cap, ", \"%s\": %.9g", m->name[i], m->value[i]);
        else
            bad = line_add(&buf, &len, &cap, ", \"%s\": null", m->name[i]);
    }
    if (!bad) bad = line_add(&buf, &len, &cap, "}\n");
    m->write_errno = bad ? ENOMEM : write_line(m->f, buf, len);
    free(buf);
    if (!m->write_errno) m->lines++;
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
