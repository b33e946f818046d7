#include "worker/metrics.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/time.h>

int metrics_open(metrics *m, const char *dir, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    if (!dir) return 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    m->f = fopen(path, "a");
    if (!m->f) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
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

double metrics_get(const metrics *m, const char *name, double def) {
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->name[i], name) == 0) return m->value[i];
    return def;
}

void metrics_flush(metrics *m) {
    if (!m->f || m->n == 0) return;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    fprintf(m->f, "{\"step\": %ld, \"time\": %.3f", m->step, tv.tv_sec + tv.tv_usec * 1e-6);
    for (int i = 0; i < m->n; i++) {
        if (isfinite(m->value[i]))
            fprintf(m->f, ", \"%s\": %.9g", m->name[i], m->value[i]);
        else
            fprintf(m->f, ", \"%s\": null", m->name[i]);
    }
    fputs("}\n", m->f);
    fflush(m->f);
    m->n = 0;
}

void metrics_close(metrics *m) {
    if (m->f) fclose(m->f);
    m->f = NULL;
}
