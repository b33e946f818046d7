/* metrics — one JSON object per line in DIR/metrics.jsonl:
 *   {"step": 100, "time": 1764400000.0, "train/loss": 1.23, ...}
 * Points of one line are collected with metrics_add and written by
 * metrics_flush. Non-finite values are written as null. Later the worker's
 * link to bfd receives the same points. */
#ifndef METRICS_H
#define METRICS_H

#include <stdio.h>

#define METRICS_MAX_POINTS 64

typedef struct metrics {
    FILE *f; /* NULL: points are only kept for the caller */
    long step;
    int n;
    const char *name[METRICS_MAX_POINTS];
    double value[METRICS_MAX_POINTS];
} metrics;

/* Opens DIR/metrics.jsonl for appending (dir NULL: no file). Returns 0 or -1 with a message. */
int metrics_open(metrics *m, const char *dir, char *err, size_t errlen);
void metrics_begin(metrics *m, long step);
/* name must outlive the flush (string literals). Extra points past the cap are dropped. */
void metrics_add(metrics *m, const char *name, double value);
/* Value of a point added since metrics_begin, or def. */
double metrics_get(const metrics *m, const char *name, double def);
void metrics_flush(metrics *m);
void metrics_close(metrics *m);

#endif
