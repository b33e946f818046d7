/* metrics — one JSON object per line in DIR/metrics.jsonl:
 *   {"step": 100, "time": 1764400000.0, "train/loss": 1.23, ...}
 * Points of one line are collected with metrics_add and written by
 * metrics_flush. Non-finite values are written as null. The same points go
 * to a TensorBoard event file in DIR (common/tfevents.h; non-finite values
 * left out) unless metrics_set_tensorboard(0) was called: under bfd, which
 * writes the trial's TensorBoard files itself. */
#ifndef METRICS_H
#define METRICS_H

#include <stdio.h>

#define METRICS_MAX_POINTS 64

struct tfevents;

typedef struct metrics {
    FILE *f;             /* NULL: points are only kept for the caller */
    struct tfevents *tb; /* DIR/events.out.tfevents.* (NULL: none) */
    long step;
    int n;
    const char *name[METRICS_MAX_POINTS];
    double value[METRICS_MAX_POINTS];
    int write_errno; /* first failed write of metrics.jsonl (0: none) */
    long lines;      /* lines written through this handle */
    char path[4096]; /* DIR/metrics.jsonl ("" without a file) */
} metrics;

/* 0 while every metrics.jsonl write worked, else -1 with a message naming
 * the file and the error (a full disk: ENOSPC). */
int metrics_status(const metrics *m, char *err, size_t errlen);

/* Whether metrics_open also writes a TensorBoard event file (default 1). */
void metrics_set_tensorboard(int on);
/* Opens DIR/metrics.jsonl for appending and a new event file (dir NULL: no
 * file); a partial last line (a write cut by a kill or a full disk) is cut
 * off first, so the file holds whole lines only. Returns 0 or -1 with a
 * message. */
int metrics_open(metrics *m, const char *dir, char *err, size_t errlen);
void metrics_begin(metrics *m, long step);
/* name must outlive the flush (string literals). Extra points past the cap are dropped. */
void metrics_add(metrics *m, const char *name, double value);
/* Appends the step's line in one write; a failed write (a full disk) is
 * taken back to the line's start and recorded for metrics_status, and no
 * later line is written. */
void metrics_flush(metrics *m);
void metrics_close(metrics *m);
/* The open metrics.jsonl and event file were renamed into dir (--force's
 * swap, names kept): m->path follows, for metrics_close_failed. */
void metrics_moved(metrics *m, const char *dir);
/* Closes a run that failed: when nothing was written through m, the
 * metrics.jsonl it left empty and the event file it created are removed, so
 * a run that failed before its first point leaves no half-made run behind
 * (a metrics.jsonl that held lines before is kept, as is any file with lines). */
void metrics_close_failed(metrics *m);

#endif
