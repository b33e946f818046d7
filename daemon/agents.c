/* agents.c — launcher: remote: the `bfworker serve` agents, on other hosts
 * or this one, that start attempts for bfd where there is no Slurm. An
 * agent connects to the worker socket (over TCP with the same CURVE keys a
 * worker uses), says agent_hello, then agent_heartbeat every heartbeat
 * interval listing the attempts it runs; bfd sends it `launch` and `kill`,
 * and it reports each attempt's end with agent_exit (acknowledged, so an
 * exit said while bfd was down is said again). An agent silent for
 * heartbeat_timeout is lost: the attempts it ran fail and are retried on
 * another agent; one of them still running on a host cut off ends itself at
 * the attempt fence (trials/ID/attempt), and its late messages name a token
 * no run holds. It chooses no trial (sched.c) and records outcomes only
 * through runs.c. */
#include "daemon/bfd_priv.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define AGENT_MAX_SLOTS 4096
#define AGENT_MAX_RUNNING 4096
#define AGENTS_MAX 1024

int is_remote(const bfd *d) { return strcmp(d->c->launcher, "remote") == 0; }

/* Slots of agent a that its runs hold. */
static int agent_used(const bfd *d, const agent *a) {
    int n = 0;
    for (size_t i = 0; i < d->n_runs; i++)
        if (d->runs[i].remote && d->runs[i].agent_id == a->id) n += d->runs[i].ranks;
    return n;
}

agent *agent_pick(bfd *d, int ranks) {
    agent *best = NULL;
    int best_free = 0;
    for (size_t i = 0; i < d->n_agents; i++) {
        if (d->agents[i].unreachable) continue;
        int f = d->agents[i].slots - agent_used(d, &d->agents[i]);
        if (f >= ranks && f > best_free) {
            best = &d->agents[i];
            best_free = f;
        }
    }
    return best;
}

int agents_free_slots(bfd *d) {
    int n = 0;
    for (size_t i = 0; i < d->n_agents; i++) {
        if (d->agents[i].unreachable) continue;
        int f = d->agents[i].slots - agent_used(d, &d->agents[i]);
        if (f > 0) n += f;
    }
    return n;
}

/* Sends type with body (borrowed) to agent a; -1 with why in err. */
static int agent_send(bfd *d, const agent *a, const char *type, json_t *body, char *err,
                      size_t errlen) {
    proto_msg route;
    memset(&route, 0, sizeof route);
    memcpy(route.ident, a->ident, a->ident_len);
    route.ident_len = a->ident_len;
    return proto_send(d->wrk, &route, NULL, type, body, ZMQ_DONTWAIT, err, errlen);
}

int agent_launch(bfd *d, agent *a, const run *r, const char *out, const char *logp, const char *cwd,
                 const char *stage_root, char *err, size_t errlen) {
    json_t *b = json_pack("{s:I, s:i, s:s, s:s, s:s, s:s, s:i, s:i}", "trial", (json_int_t)r->trial,
                          "attempt", r->attempt, "token", r->token, "out", out, "log", logp, "cwd",
                          cwd, "ranks", r->ranks, "threads", d->c->threads_per_slot);
    if (!b) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (r->stage[0]) {
        json_object_set_new(b, "stage_root", json_string(stage_root));
        json_object_set_new(b, "stage", json_string(r->stage));
    }
    int rc = agent_send(d, a, "launch", b, err, errlen);
    json_decref(b);
    if (rc) agent_unreachable(d, a, err);
    return rc;
}

/* The agent of this connection, registered or refreshed from hello or a
 * heartbeat (a restarted bfd learns its agents from their heartbeats; a
 * reconnected agent gets the same entry by name and pid). NULL after
 * replying an error. */
static agent *agent_upsert(bfd *d, proto_msg *m) {
    void *s = d->wrk;
    char ferr[512];
    const char *name;
    long long pid, slots;
    if (proto_get_str(m->body, "name", 1, PROTO_MAX_NAME, &name, ferr, sizeof ferr) ||
        proto_get_int(m->body, "pid", 1, 1, PROTO_MAX_INT, 0, &pid, ferr, sizeof ferr) ||
        proto_get_int(m->body, "slots", 1, 1, AGENT_MAX_SLOTS, 0, &slots, ferr, sizeof ferr)) {
        reply_err(d, s, m, PROTO_E_FIELD, "%s: %s", m->type, ferr);
        return NULL;
    }
    if (!proto_name_ok(name)) {
        reply_err(d, s, m, PROTO_E_FIELD,
                  "%s: 'name' must be 1-%d printable ASCII characters without space, '\"' or '\\'",
                  m->type, PROTO_MAX_NAME);
        return NULL;
    }
    if (!is_remote(d)) {
        reply_err(d, s, m, PROTO_E_FIELD,
                  "%s: this bfd has launcher %s; agents serve launcher: remote (bfd.yaml)", m->type,
                  d->c->launcher);
        return NULL;
    }
    agent *a = NULL;
    for (size_t i = 0; i < d->n_agents && !a; i++)
        if (!strcmp(d->agents[i].name, name) && d->agents[i].pid == pid) a = &d->agents[i];
    if (!a) {
        for (size_t i = 0; i < d->n_agents; i++)
            if (!strcmp(d->agents[i].name, name)) {
                reply_err(d, s, m, PROTO_E_FIELD,
                          "%s: an agent named %s (pid %lld) is connected already; give each "
                          "agent its own --name",
                          m->type, name, d->agents[i].pid);
                return NULL;
            }
        if (d->n_agents >= AGENTS_MAX) {
            reply_err(d, s, m, PROTO_E_INTERNAL, "%s: bfd serves at most %d agents", m->type,
                      AGENTS_MAX);
            return NULL;
        }
        if (d->n_agents == d->cap_agents) {
            size_t cap = d->cap_agents ? 2 * d->cap_agents : 8;
            agent *na = realloc(d->agents, cap * sizeof *na);
            if (!na) {
                reply_err(d, s, m, PROTO_E_INTERNAL, "%s: bfd out of memory", m->type);
                return NULL;
            }
            d->agents = na;
            d->cap_agents = cap;
        }
        a = &d->agents[d->n_agents++];
        memset(a, 0, sizeof *a);
        a->id = ++d->next_agent_id;
        snprintf(a->name, sizeof a->name, "%s", name);
        a->pid = pid;
        a->since = now_s();
        bfd_log("agent %s (pid %lld) connected: %lld slot%s", name, pid, slots,
                slots == 1 ? "" : "s");
        d->dirty = 1;
    }
    if (a->slots != (int)slots) d->dirty = 1;
    a->slots = (int)slots;
    if (a->unreachable) { /* it spoke: its route is back */
        bfd_log("agent %s reachable again", a->name);
        a->unreachable = 0;
        d->dirty = 1;
    }
    memcpy(a->ident, m->ident, m->ident_len);
    a->ident_len = m->ident_len;
    a->last_seen = now_s();
    return a;
}

/* The attempts the agent says it runs: a run no agent holds yet (bfd
 * restarted) is claimed by it; one bfd no longer runs (failed over,
 * cancelled while the agent was cut off) is killed there. */
static void agent_running(bfd *d, agent *a, proto_msg *m) {
    json_t *list = json_object_get(m->body, "running");
    if (!json_is_array(list)) return;
    size_t k;
    json_t *e;
    json_array_foreach(list, k, e) {
        if (k >= AGENT_MAX_RUNNING) break;
        json_t *jt = json_object_get(e, "trial"), *ja = json_object_get(e, "attempt");
        if (!json_is_integer(jt) || !json_is_integer(ja)) continue;
        int64_t trial = json_integer_value(jt);
        int attempt = (int)json_integer_value(ja);
        run *r = find_run(d, trial);
        if (r && r->remote && r->attempt == attempt) {
            if (r->agent_id == 0 && !r->ending && !strcmp(r->agent, a->name)) {
                r->agent_id = a->id;
                bfd_log("trial %lld attempt %d: agent %s runs it; reattached", (long long)trial,
                        attempt, a->name);
            }
            /* also one being stopped: its grace before SIGKILL is bfd's to end */
            if (r->agent_id == a->id) continue;
        }
        if (agent_signal(d, a, trial, attempt, SIGKILL) == 0)
            bfd_log("trial %lld attempt %d on agent %s: not a live attempt of bfd; killed",
                    (long long)trial, attempt, a->name);
    }
}

/* agent_exit: the process of an attempt ended; acknowledged whatever bfd
 * makes of it, so the agent stops saying it. */
static void agent_exit(bfd *d, agent *a, proto_msg *m) {
    void *s = d->wrk;
    char ferr[512];
    long long trial, attempt, code, sig;
    FIELD(proto_get_int(m->body, "trial", 1, 1, PROTO_MAX_INT, 0, &trial, ferr, sizeof ferr));
    FIELD(proto_get_int(m->body, "attempt", 1, 1, PROTO_MAX_INT, 0, &attempt, ferr, sizeof ferr));
    FIELD(proto_get_int(m->body, "code", 1, -1, 255, 0, &code, ferr, sizeof ferr));
    FIELD(proto_get_int(m->body, "signal", 0, 0, 128, 0, &sig, ferr, sizeof ferr));
    json_t *b = json_pack("{s:I, s:I}", "trial", (json_int_t)trial, "attempt", (json_int_t)attempt);
    reply(d, s, m, "agent_ack", b);
    json_decref(b);
    run *r = find_run(d, trial);
    if (!r || !r->remote || r->attempt != attempt) return; /* an attempt bfd let go of */
    if (r->agent_id != a->id) {
        if (r->agent_id != 0 || strcmp(r->agent, a->name)) return;
        r->agent_id = a->id; /* claimed by its exit, after a bfd restart */
    }
    run_exited(d, r, (int)code, (int)sig);
}

void handle_agent_msg(bfd *d, proto_msg *m) {
    int hello = !strcmp(m->type, "agent_hello"), hb = !strcmp(m->type, "agent_heartbeat"),
        ex = !strcmp(m->type, "agent_exit");
    if (!hello && !hb && !ex) {
        reply_err(d, d->wrk, m, PROTO_E_TYPE,
                  "unknown message type '%s' on the worker socket (see docs/protocol.md)", m->type);
        return;
    }
    agent *a = agent_upsert(d, m);
    if (!a) return;
    if (hello) {
        json_t *b = json_pack("{s:i, s:f, s:f}", "agent", a->id, "heartbeat",
                              d->c->heartbeat_interval, "timeout", d->c->heartbeat_timeout);
        reply(d, d->wrk, m, "agent_ok", b);
        json_decref(b);
    }
    if (ex)
        agent_exit(d, a, m);
    else
        agent_running(d, a, m);
}

void agents_check(bfd *d) {
    double t = now_s();
    for (size_t i = 0; i < d->n_agents;) {
        agent *a = &d->agents[i];
        if (t - a->last_seen <= d->c->heartbeat_timeout) {
            i++;
            continue;
        }
        char why[200];
        snprintf(why, sizeof why, "agent %s lost: no message from it for %.0f s", a->name,
                 t - a->last_seen);
        bfd_log("%s", why);
        for (size_t k = 0; k < d->n_runs;) {
            run *r = &d->runs[k];
            if (r->remote && r->agent_id == a->id) {
                end_run(d, r, -1, why);
                continue; /* r was replaced by the last run, or exited (not remote now) */
            }
            k++;
        }
        d->agents[i] = d->agents[--d->n_agents];
        d->dirty = 1;
    }
}

json_t *agents_json(bfd *d) {
    json_t *arr = json_array();
    double t = now_s();
    for (size_t i = 0; arr && i < d->n_agents; i++) {
        const agent *a = &d->agents[i];
        json_array_append_new(arr, json_pack("{s:s, s:I, s:i, s:i, s:f, s:f, s:b}", "name", a->name,
                                             "pid", (json_int_t)a->pid, "slots", a->slots, "used",
                                             agent_used(d, a), "since", a->since, "last_seen_s",
                                             t - a->last_seen, "reachable", !a->unreachable));
    }
    return arr;
}
