/* workers.c — the worker socket's messages: hello (the trial's config and
 * the last stored seq), heartbeat, metrics (validated at once, stored with
 * the round's other batches in one transaction by flush_batches, then acked,
 * published, exported and judged for early stopping) and done (how the
 * worker says it ended); and what bfd sends a worker: stop. The agents'
 * messages (agent_*) go to agents.c. Every message
 * must carry the token of its trial's live attempt. It receives nothing
 * itself (the loop hands it each message and sets the round's budget) and
 * records no outcome (runs.c). */
#include "daemon/bfd_priv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

void send_stop(bfd *d, run *r, const char *reason) {
    if (r->ident_len) {
        proto_msg route;
        memset(&route, 0, sizeof route);
        memcpy(route.ident, r->ident, r->ident_len);
        route.ident_len = r->ident_len;
        json_t *b = json_pack("{s:I, s:s}", "trial", (json_int_t)r->trial, "reason", reason);
        char err[256];
        int rc = proto_send(d->wrk, &route, NULL, "stop", b, ZMQ_DONTWAIT, err, sizeof err);
        json_decref(b);
        r->stop_sent = 1;
        if (rc == 0) return;
        bfd_log("stop to trial %lld: %s; sending SIGTERM", (long long)r->trial, err);
    }
    kill_group(d, r, SIGTERM);
}

/* Asks the job's early stopping about r (daemon/adaptive.h); a stop it
 * decides is already committed when this sends it. */
void judge_run(bfd *d, run *r) {
    char err[1024], reason[sizeof r->stop_reason];
    if (r->ending || r->stop_requested) return;
    int rc = adaptive_judge(d->ad, d->st, r->job, r->trial, reason, sizeof reason, err, sizeof err);
    if (rc < 0) bfd_log("trial %lld: early stop: %s", (long long)r->trial, err);
    if (rc != 1) return;
    /* failpoint for tests: die between the committed decision and the stop */
    const char *fp = getenv("BF_FAILPOINT");
    if (fp && !strcmp(fp, "after_stop_decision")) _exit(99);
    snprintf(r->stop_reason, sizeof r->stop_reason, "%s", reason);
    r->stop_requested = 1;
    bfd_log("trial %lld: early stop: %s", (long long)r->trial, reason);
    publish_event(d, r->job, r->trial, "RUNNING", r->attempt, reason);
    send_stop(d, r, reason);
}

/* r->acked from the store when not known yet; 0, or -1 with the store's
 * message in err (also logged). */
static int load_acked(bfd *d, run *r, char *err, size_t errlen) {
    if (r->acked >= 0) return 0;
    int64_t a;
    if (store_max_seq(d->st, r->trial, &a, err, errlen)) {
        bfd_log("%s", err);
        return -1;
    }
    r->acked = a;
    return 0;
}

/* The live run of bt's attempt, or NULL when that attempt is no longer in
 * the run table. */
static run *batch_run(bfd *d, const batch *bt) {
    run *r = find_run(d, bt->trial);
    return r && r->attempt == bt->attempt ? r : NULL;
}

/* Stores the points of this round's batches in one transaction, then acks
 * each batch and publishes its new points. Each batch's run is looked up by
 * its trial and attempt here, not when it came: the table may have changed
 * in between. A batch whose attempt is gone is refused (bad_token) and its
 * points are not stored: without its run, bfd cannot tell whether they
 * follow the stored ones without a gap. No removal inside a round leaves
 * one (an agent_exit flushes the round's batches before it is handled),
 * and a refused batch's points stay in the worker's metrics.jsonl. */
void flush_batches(bfd *d) {
    if (!d->n_batches) return;
    size_t total = 0;
    for (size_t b = 0; b < d->n_batches; b++) total += d->batches[b].pts.n_val;
    int64_t *tids = total ? malloc(total * sizeof *tids) : NULL;
    store_metric *sm = total ? malloc(total * sizeof *sm) : NULL;
    int failed = total && (!tids || !sm);
    char err[1024] = "out of memory";
    size_t k = 0;
    for (size_t b = 0; b < d->n_batches && !failed; b++) {
        batch *bt = &d->batches[b];
        run *r = batch_run(d, bt);
        if (!r) continue;
        bt->prev_acked = r->acked;
        const proto_points *ps = &bt->pts;
        if (ps->pt[0].seq > r->acked + 1) {
            bt->gap = 1;
            continue;
        }
        /* every point, also those at or below the acked seq: a (trial, seq,
         * name) already stored is skipped by the store (INSERT OR IGNORE),
         * one not stored yet is stored, as docs/protocol.md says */
        for (size_t i = 0; i < ps->n; i++) {
            const proto_pt *p = &ps->pt[i];
            for (uint32_t v = p->first; v < p->first + p->nv; v++) {
                tids[k] = bt->trial;
                sm[k] = (store_metric){.seq = p->seq,
                                       .step = p->step,
                                       .name = ps->names + ps->val[v].name,
                                       .value = ps->val[v].value,
                                       .time = p->time,
                                       /* lines an earlier attempt wrote and
                                        * could not deliver: the one before */
                                       .attempt =
                                           p->seq < bt->first_seq ? bt->attempt - 1 : bt->attempt};
                k++;
            }
        }
        if (ps->pt[ps->n - 1].seq > r->acked) {
            r->acked = ps->pt[ps->n - 1].seq;
            r->last_progress = now_s();
        }
    }
    if (!failed && k && store_metrics_insert_many(d->st, tids, sm, k, err, sizeof err)) failed = 1;
    free(tids);
    free(sm);
    if (failed) {
        bfd_log("storing metrics: %s", err);
        for (size_t b = d->n_batches; b-- > 0;) {
            batch *bt = &d->batches[b];
            run *r = batch_run(d, bt);
            if (r && !bt->gap) r->acked = bt->prev_acked;
        }
    }
    for (size_t b = 0; b < d->n_batches; b++) {
        batch *bt = &d->batches[b];
        run *r = batch_run(d, bt);
        if (!r) {
            bfd_log("trial %lld attempt %d: ended before its batch of %zu points was stored; "
                    "refused",
                    (long long)bt->trial, bt->attempt, bt->pts.n);
            reply_err(d, d->wrk, &bt->msg, PROTO_E_TOKEN,
                      "metrics: trial %lld attempt %d ended before this batch was stored",
                      (long long)bt->trial, bt->attempt);
        } else if (failed) {
            reply_err(d, d->wrk, &bt->msg, PROTO_E_INTERNAL, "metrics: %s", err);
        } else {
            int64_t acked = bt->gap ? bt->prev_acked : bt->pts.pt[bt->pts.n - 1].seq;
            if (acked < bt->prev_acked) acked = bt->prev_acked;
            json_t *a =
                json_pack("{s:I, s:I}", "trial", (json_int_t)bt->trial, "seq", (json_int_t)acked);
            reply(d, d->wrk, &bt->msg, "ack", a);
            json_decref(a);
            if (!bt->gap && exp_tb_trial(d->tb, d->st, bt->trial, now_s(), err, sizeof err))
                bfd_log("tensorboard, trial %lld: %s", (long long)bt->trial, err);
            if (!bt->gap) prom_trial_points(d->prom, bt->trial, &bt->pts);
            json_t *arr = json_array();
            for (size_t i = 0; !bt->gap && i < bt->pts.n; i++)
                if (bt->pts.pt[i].seq > bt->prev_acked)
                    json_array_append_new(arr, proto_points_json(&bt->pts, i));
            if (json_array_size(arr)) {
                char topic[64];
                snprintf(topic, sizeof topic, "trial/%lld", (long long)bt->trial);
                json_t *pb = json_pack("{s:I, s:I, s:O}", "trial", (json_int_t)bt->trial, "job",
                                       (json_int_t)r->job, "points", arr);
                publish(d, topic, "metrics", pb);
                json_decref(pb);
            }
            json_decref(arr);
        }
        /* early stopping: judged on what is now stored, when its metric came */
        const char *metric =
            !r || failed || bt->gap ? NULL : adaptive_stop_metric(d->ad, d->st, r->job);
        int judge = 0;
        for (size_t i = 0; metric && !judge && i < bt->pts.n; i++) {
            const proto_pt *p = &bt->pts.pt[i];
            for (uint32_t v = p->first; v < p->first + p->nv && !judge; v++)
                judge =
                    p->seq > bt->prev_acked && !strcmp(bt->pts.names + bt->pts.val[v].name, metric);
        }
        if (judge) judge_run(d, r);
        proto_points_free(&bt->pts);
        proto_msg_clear(&bt->msg);
    }
    d->n_batches = 0;
}

/* hello: the attempt must be the one bfd launched; the reply carries the
 * trial's config, the last stored seq and the heartbeat interval. */
static void worker_hello(bfd *d, void *s, proto_msg *m, run *r, long long trial) {
    char ferr[512], err[1024];
    long long attempt, pid;
    const char *host;
    FIELD(proto_get_int(m->body, "attempt", 1, 1, PROTO_MAX_INT, 0, &attempt, ferr, sizeof ferr));
    FIELD(proto_get_int(m->body, "pid", 1, 1, PROTO_MAX_INT, 0, &pid, ferr, sizeof ferr));
    FIELD(proto_get_str(m->body, "host", 1, PROTO_MAX_PATH, &host, ferr, sizeof ferr));
    if (attempt != r->attempt) {
        reply_err(d, s, m, PROTO_E_FIELD,
                  "hello: 'attempt' is %lld, but bfd launched attempt %d of trial %lld "
                  "(pass the --attempt bfd gave the worker)",
                  attempt, r->attempt, trial);
        return;
    }
    store_trial t;
    if (store_get_trial(d->st, trial, &t, err, sizeof err)) {
        reply_err(d, s, m, PROTO_E_INTERNAL, "hello: %s", err);
        return;
    }
    if (load_acked(d, r, err, sizeof err)) {
        store_trial_free(&t);
        reply_err(d, s, m, PROTO_E_INTERNAL, "hello: %s", err);
        return;
    }
    json_t *b = json_pack("{s:I, s:i, s:s, s:I, s:f}", "trial", (json_int_t)trial, "attempt",
                          r->attempt, "config", t.config ? t.config : "", "acked",
                          (json_int_t)r->acked, "heartbeat", d->c->heartbeat_interval);
    store_trial_free(&t);
    char hb[PROTO_MAX_PATH * 4 + 8];
    bfd_log("trial %lld attempt %d: worker pid %lld on %s connected", trial, r->attempt, pid,
            log_escape(host, hb, sizeof hb));
    r->hello_seen = 1;
    reply(d, s, m, "config", b);
    json_decref(b);
    if (r->stop_requested) send_stop(d, r, r->stop_reason[0] ? r->stop_reason : "stop requested");
}

/* done: how the worker says it ended (its process going is what ends the
 * run; runs.c reads done_state then). */
static void worker_done(bfd *d, void *s, proto_msg *m, run *r) {
    char ferr[512];
    const char *state, *msg;
    long long code;
    FIELD(proto_get_str(m->body, "state", 1, 32, &state, ferr, sizeof ferr));
    FIELD(proto_get_int(m->body, "exit_code", 1, 0, 255, 0, &code, ferr, sizeof ferr));
    FIELD(proto_get_str(m->body, "message", 0, PROTO_MAX_STR, &msg, ferr, sizeof ferr));
    int st = !strcmp(state, "completed")   ? 0
             : !strcmp(state, "preempted") ? 1
             : !strcmp(state, "failed")    ? 2
                                           : -1;
    if (st < 0) {
        reply_err(d, s, m, PROTO_E_FIELD, "done: 'state' must be completed, preempted or failed");
        return;
    }
    r->done_state = st;
    r->exit_code = (int)code;
    snprintf(r->done_msg, sizeof r->done_msg, "%s", msg ? msg : "");
    if (r->slurm_job[0]) r->next_poll = now_s() + 0.3; /* the job ends right after */
    reply(d, s, m, "ok", NULL);
}

/* metrics: validated now, its points copied out of the body (freed with
 * m), stored with the round's other batches. */
static void worker_metrics(bfd *d, void *s, proto_msg *m, run *r, round_count *rc) {
    char ferr[512];
    proto_points ps;
    long long first_seq;
    FIELD(
        proto_get_int(m->body, "first_seq", 0, 1, PROTO_MAX_INT, 1, &first_seq, ferr, sizeof ferr));
    FIELD(proto_points_parse(m->body, PROTO_MAX_POINTS, &ps, ferr, sizeof ferr));
    char aerr[512];
    if (load_acked(d, r, aerr, sizeof aerr)) {
        proto_points_free(&ps);
        reply_err(d, s, m, PROTO_E_INTERNAL, "metrics: cannot read the stored seq");
        return;
    }
    batch *bt = &d->batches[d->n_batches++];
    bt->msg = *m;
    bt->msg.body = NULL; /* the reply needs the route and req only */
    bt->trial = r->trial;
    bt->attempt = r->attempt;
    bt->pts = ps;
    bt->gap = 0;
    bt->first_seq = first_seq;
    rc->batches++;
    rc->points += ps.n;
    rc->values += ps.n_val;
    rc->bytes += ps.bytes;
}

void handle_worker_msg(bfd *d, proto_msg *m, round_count *rc) {
    void *s = d->wrk;
    char ferr[512];
    int is_hello = !strcmp(m->type, "hello"), is_hb = !strcmp(m->type, "heartbeat"),
        is_metrics = !strcmp(m->type, "metrics"), is_done = !strcmp(m->type, "done");
    if (!strncmp(m->type, "agent_", 6)) { /* launcher: remote (agents.c) */
        /* an exit removes its run: the points that came before it in this
         * round are stored (and judged) first, while the run they belong
         * to is in the table, and its outcome may depend on them */
        if (!strcmp(m->type, "agent_exit")) flush_batches(d);
        handle_agent_msg(d, m);
        return;
    }
    if (!is_hello && !is_hb && !is_metrics && !is_done) {
        reply_err(d, s, m, PROTO_E_TYPE,
                  "unknown message type '%s' on the worker socket (see docs/protocol.md)", m->type);
        return;
    }
    long long trial;
    char token[PROTO_TOKEN_LEN + 1];
    FIELD(proto_get_int(m->body, "trial", 1, 1, PROTO_MAX_INT, 0, &trial, ferr, sizeof ferr));
    FIELD(proto_get_token(m->body, "token", token, ferr, sizeof ferr));
    run *r = find_run(d, trial);
    if (!r || r->ending || strcmp(r->token, token) != 0) {
        reply_err(d, s, m, PROTO_E_TOKEN,
                  "%s: trial %lld is not running with this token (cancelled, finished, or a "
                  "newer attempt)",
                  m->type, trial);
        return;
    }
    r->last_seen = now_s();
    if (r->ident_len != m->ident_len || memcmp(r->ident, m->ident, m->ident_len))
        r->stop_sent = 0; /* a new connection (the worker or bfd restarted) */
    memcpy(r->ident, m->ident, m->ident_len);
    r->ident_len = m->ident_len;
    if (r->stop_requested && !r->stop_sent && !is_hello)
        send_stop(d, r, r->stop_reason[0] ? r->stop_reason : "stop requested");
    if (is_hb) return;
    if (is_hello)
        worker_hello(d, s, m, r, trial);
    else if (is_done)
        worker_done(d, s, m, r);
    else
        worker_metrics(d, s, m, r, rc);
}
