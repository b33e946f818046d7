/* req_status.c — the requests about the daemon itself: status (version,
 * endpoints, slots and GPUs free, the live attempts, the remote agents,
 * the store's counts)
 * and sync (a marker published on the PUB socket, so a subscriber knows it
 * has seen everything published before it). Nothing here changes state. */
#include "daemon/req.h"

#include <string.h>
#include <unistd.h>

static json_t *int_array(const int *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(v[i]));
    return a;
}

void req_status(bfd *d, void *s, proto_msg *m) {
    char err[1024], ferr[512];
    long long jobs = 0, pending = 0, running = 0, max_runs;
    /* under Slurm bfd may hold thousands of attempts: the client says how
     * many it lists (the reply's size, and its time, grow with it) */
    FIELD(proto_get_int(m->body, "running_max", 0, 0, PROTO_MAX_INT, PROTO_MAX_INT, &max_runs, ferr,
                        sizeof ferr));
    if (store_counts(d->st, &jobs, &pending, &running, err, sizeof err)) {
        reply_err(d, s, m, PROTO_E_INTERNAL, "status: %s", err);
        return;
    }
    json_t *runs = json_array();
    for (size_t i = 0; i < d->n_runs && (long long)i < max_runs; i++) {
        run *r = &d->runs[i];
        json_array_append_new(
            runs, json_pack("{s:I, s:I, s:i, s:i, s:i, s:o, s:f, s:b, s:b}", "trial",
                            (json_int_t)r->trial, "job", (json_int_t)r->job, "attempt", r->attempt,
                            "pid", (int)r->pid, "slots", r->ranks, "gpus",
                            int_array(r->gpus, r->n_gpus), "since", r->started, "reattached",
                            !r->is_child && !r->slurm_job[0] && !r->remote, "ending", r->ending));
        json_t *last = json_array_get(runs, json_array_size(runs) - 1);
        if (r->slurm_job[0]) json_object_set_new(last, "slurm_job", json_string(r->slurm_job));
        if (r->remote) json_object_set_new(last, "agent", json_string(r->agent));
        if (r->unrecorded) /* its end is known; the store has not taken it yet */
            json_object_set_new(last, "unrecorded", json_string(r->end_why));
        if (r->exited) json_object_set_new(last, "exited", json_true());
    }
    int free_g[BFD_MAX_GPUS], nf = 0;
    for (int g = 0; g < d->c->n_gpus; g++)
        if (!gpu_used(d, d->c->gpus[g])) free_g[nf++] = d->c->gpus[g];
    json_t *eps =
        json_pack("{s:s, s:s, s:s}", "ctl", d->ep_ctl, "worker", d->ep_wrk, "pub", d->ep_pub);
    if (d->http) json_object_set_new(eps, "http", json_string(http_url(d->http)));
    if (d->tcp_ctl[0]) {
        json_object_set_new(eps, "ctl_tcp", json_string(d->tcp_ctl));
        json_object_set_new(eps, "worker_tcp", json_string(d->tcp_wrk));
        json_object_set_new(eps, "pub_tcp", json_string(d->tcp_pub));
    }
    json_t *b = json_pack(
        "{s:i, s:i, s:s, s:f, s:s, s:i, s:i, s:o, s:o, s:f, s:o, s:o, s:I, "
        "s:{s:I, s:I, s:I}}",
        "version", PROTO_VERSION, "pid", (int)getpid(), "home", d->o->home, "started", d->started,
        "launcher", d->c->launcher, "slots", d->c->slots, "slots_free", d->c->slots - slots_used(d),
        "gpus", int_array(d->c->gpus, d->c->n_gpus), "gpus_free", int_array(free_g, nf),
        "heartbeat_timeout", d->c->heartbeat_timeout, "endpoints", eps, "running", runs,
        "running_total", (json_int_t)d->n_runs, "counts", "jobs", (json_int_t)jobs,
        "trials_pending", (json_int_t)pending, "trials_running", (json_int_t)running);
    if (is_remote(d)) {
        /* the agents' slots are the capacity: slots and slots_free say them */
        int total = 0;
        for (size_t i = 0; i < d->n_agents; i++) total += d->agents[i].slots;
        json_object_set_new(b, "slots", json_integer(total));
        json_object_set_new(b, "slots_free", json_integer(agents_free_slots(d)));
        json_object_set_new(b, "agents", agents_json(d));
    }
    reply(d, s, m, "status", b);
    json_decref(b);
}

void req_sync(bfd *d, void *s, proto_msg *m) {
    char ferr[512];
    const char *topic;
    FIELD(proto_get_str(m->body, "topic", 1, PROTO_MAX_TOPIC, &topic, ferr, sizeof ferr));
    if (strncmp(topic, "sync/", 5) != 0) {
        reply_err(d, s, m, PROTO_E_FIELD, "sync: 'topic' must start with sync/");
        return;
    }
    json_t *b = json_pack("{s:s}", "topic", topic);
    publish(d, topic, "sync", b);
    reply(d, s, m, "synced", b);
    json_decref(b);
}
