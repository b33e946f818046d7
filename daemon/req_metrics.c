/* req_metrics.c — the requests that read metric points: metrics (one
 * trial's points after a seq, a page at a time, never cutting a point) and
 * export (a job with every trial's params, config and points, as one reply
 * when it fits in a message). The points come from the store, never from
 * the round's batches still being stored. */
#include "daemon/req.h"

#include <stdlib.h>
#include <string.h>

#define HISTORY_MAX_ROWS 50000 /* metric rows read per `metrics` reply */

/* Groups store rows (seq, name order) into points; returns the array. */
static json_t *rows_to_points(const store_point *p, size_t n, size_t *n_points) {
    json_t *arr = json_array();
    json_t *cur = NULL, *vals = NULL;
    int64_t cur_seq = -1;
    *n_points = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i].seq != cur_seq) {
            vals = json_object();
            cur = json_pack("{s:I, s:I, s:f, s:o}", "seq", (json_int_t)p[i].seq, "step",
                            (json_int_t)p[i].step, "time", p[i].time, "values", vals);
            json_array_append_new(arr, cur);
            cur_seq = p[i].seq;
            (*n_points)++;
        }
        json_object_set_new(vals, p[i].name, json_real(p[i].value));
    }
    return arr;
}

void req_metrics(bfd *d, void *s, proto_msg *m) {
    char ferr[512], err[1024];
    long long id, after, limit;
    FIELD(proto_get_int(m->body, "trial", 1, 1, PROTO_MAX_INT, 0, &id, ferr, sizeof ferr));
    FIELD(proto_get_int(m->body, "after", 0, 0, PROTO_MAX_INT, 0, &after, ferr, sizeof ferr));
    FIELD(proto_get_int(m->body, "limit", 0, 1, 10000, 1000, &limit, ferr, sizeof ferr));
    int64_t job;
    if (get_trial_job(d, s, m, id, &job)) return;
    long long rows = limit * PROTO_MAX_VALUES;
    if (rows > HISTORY_MAX_ROWS) rows = HISTORY_MAX_ROWS;
    store_point *pts = NULL;
    size_t n = 0;
    if (store_metric_history(d->st, id, after, (int)rows, &pts, &n, err, sizeof err)) {
        reply_err(d, s, m, PROTO_E_INTERNAL, "metrics: %s", err);
        return;
    }
    int more = 0;
    size_t use = n;
    if ((long long)n == rows) {
        /* the last seq may be cut: leave it for the next page */
        more = 1;
        size_t k = n;
        while (k > 0 && pts[k - 1].seq == pts[n - 1].seq) k--;
        if (k > 0) use = k;
    }
    /* at most `limit` points */
    size_t groups = 0, cut = use;
    for (size_t i = 0; i < use; i++)
        if (i == 0 || pts[i].seq != pts[i - 1].seq) {
            if ((long long)groups == limit) {
                cut = i;
                more = 1;
                break;
            }
            groups++;
        }
    use = cut;
    size_t np;
    json_t *arr = rows_to_points(pts, use, &np);
    long long last = use ? pts[use - 1].seq : after;
    free(pts);
    json_t *b = json_pack("{s:I, s:I, s:o, s:I, s:b}", "trial", (json_int_t)id, "job",
                          (json_int_t)job, "points", arr, "last", (json_int_t)last, "more", more);
    reply(d, s, m, "metrics", b);
    json_decref(b);
}

void req_export(bfd *d, void *s, proto_msg *m) {
    char ferr[512], err[1024];
    long long id;
    FIELD(proto_get_int(m->body, "job", 1, 1, PROTO_MAX_INT, 0, &id, ferr, sizeof ferr));
    store_job j;
    json_t *jo;
    store_trial *ts;
    size_t n;
    if (get_job_with_trials(d, s, m, id, -1, 0, &j, &jo, &ts, &n)) return;
    json_t *trials = json_array();
    size_t total_rows = 0;
    int fail_code = 0;
    for (size_t i = 0; i < n && !fail_code; i++) {
        store_trial t;
        if (store_get_trial(d->st, ts[i].id, &t, err, sizeof err)) {
            fail_code = PROTO_E_INTERNAL;
            break;
        }
        json_error_t je;
        json_t *params = t.params_json ? json_loads(t.params_json, 0, &je) : NULL;
        json_t *metrics = json_array();
        int64_t after = 0;
        for (;;) {
            store_point *p = NULL;
            size_t k = 0;
            if (store_metric_history(d->st, t.id, after, HISTORY_MAX_ROWS, &p, &k, err,
                                     sizeof err)) {
                fail_code = PROTO_E_INTERNAL;
                break;
            }
            for (size_t r = 0; r < k; r++)
                json_array_append_new(metrics, json_pack("{s:s, s:I, s:I, s:f, s:f}", "name",
                                                         p[r].name, "step", (json_int_t)p[r].step,
                                                         "seq", (json_int_t)p[r].seq, "value",
                                                         p[r].value, "time", p[r].time));
            total_rows += k;
            /* rows of one seq may straddle pages: continue from the last full seq */
            int64_t last = k ? p[k - 1].seq : after;
            if (k == HISTORY_MAX_ROWS) {
                /* drop the rows of the last seq and read it again in full */
                size_t keep = k;
                while (keep > 0 && p[keep - 1].seq == last) keep--;
                while (json_array_size(metrics) > 0 && k > keep) {
                    json_array_remove(metrics, json_array_size(metrics) - 1);
                    k--;
                }
                last = keep ? p[keep - 1].seq : last;
            }
            free(p);
            if (k < HISTORY_MAX_ROWS) break;
            after = last;
            if (total_rows * 80 > PROTO_MAX_BODY) break;
        }
        json_array_append_new(
            trials, json_pack("{s:I, s:I, s:s, s:i, s:o, s:s, s:o}", "id", (json_int_t)t.id,
                              "index", (json_int_t)t.index, "state", store_state_name(t.state),
                              "attempts", t.attempts, "params", params ? params : json_object(),
                              "config", t.config ? t.config : "", "metrics", metrics));
        store_trial_free(&t);
        if (total_rows * 80 > PROTO_MAX_BODY) fail_code = PROTO_E_TOO_LARGE;
    }
    store_trials_free(ts, n);
    json_t *b = json_pack("{s:o, s:o}", "job", jo, "trials", trials);
    char *txt = fail_code ? NULL : json_dumps(b, JSON_COMPACT);
    if (!fail_code && (!txt || strlen(txt) > PROTO_MAX_BODY)) fail_code = PROTO_E_TOO_LARGE;
    free(txt);
    if (fail_code == PROTO_E_TOO_LARGE)
        reply_err(d, s, m, PROTO_E_TOO_LARGE,
                  "export: job %lld is over %u bytes as one reply; read it with trial and metrics",
                  id, PROTO_MAX_BODY);
    else if (fail_code)
        reply_err(d, s, m, PROTO_E_INTERNAL, "export: %s", err);
    else
        reply(d, s, m, "export", b);
    json_decref(b);
}
