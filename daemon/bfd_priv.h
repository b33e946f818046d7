/* bfd_priv.h — what the files of bfd share: the daemon's state (struct bfd),
 * the run table's entry (struct run: one live attempt), a round's metric
 * batches, and the functions the files call across each other, grouped by
 * the file that defines them. Nothing outside daemon/ includes it; bfctl and
 * workers reach bfd only through protocol/. Every function runs on the event
 * loop's one thread. */
#ifndef BFD_PRIV_H
#define BFD_PRIV_H

#include <jansson.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/adaptive.h"
#include "daemon/bfd.h"
#include "daemon/exp_tb.h"
#include "daemon/http.h"
#include "daemon/prom.h"
#include "daemon/slurm.h"
#include "daemon/slurmq.h"
#include "daemon/submitq.h"
#include "jobs/dstate.h"
#include "jobs/store.h"
#include "protocol/proto.h"

#define MAX_CLIENT_KEYS 256
#define ROUND_MAX_MSGS 256          /* worker messages handled per poll round */
#define ROUND_MAX_POINTS 200000     /* values per round (one transaction) */
#define ROUND_MAX_BYTES (32u << 20) /* the batches' copied points, per round */
#define CTL_ROUND_S 0.02            /* requests begun per round: until this is spent */

/* One live attempt in the run table (runs.c): its process or Slurm job, its
 * worker's connection, and how far its end has gone. */
typedef struct run {
    int64_t trial, job;
    int attempt, ranks;
    char token[PROTO_TOKEN_LEN + 1];
    pid_t pid; /* process group leader (setsid) */
    int is_child;
    int gpus[BFD_MAX_GPUS], n_gpus;
    double started, last_seen, last_alive_check;
    double last_progress; /* when its last new metric point arrived (or it started) */
    int exit_code;        /* from `done` (-1 none): 64 = a config or data error */
    unsigned char ident[PROTO_MAX_IDENT];
    size_t ident_len;
    int stop_requested;
    int stop_sent;         /* on this connection of the worker */
    char stop_reason[320]; /* an early-stop decision (committed), "" for bfctl stop */
    int ending;            /* outcome recorded; waiting for the process to go */
    double kill_at;        /* when to SIGKILL the group (0: not scheduled) */
    int done_state;        /* from `done`: -1 none, 0 completed, 1 preempted, 2 failed */
    int64_t acked;         /* highest contiguous seq stored; -1 not loaded yet */
    /* launcher: slurm (pid is 0: the worker runs on a compute node) */
    char slurm_job[SLURM_JOB_ID_MAX]; /* "" for a local run */
    int slurm_phase;                  /* last slurm_phase seen (SLURM_QUEUED at submit) */
    double next_poll;                 /* when to ask scontrol again */
    int slurm_wait;   /* launched, waiting to go out in its job array (slurm_flush) */
    int array_cancel; /* its whole job was cancelled: scancel its array, once */
    /* s2s: the shared stage this attempt runs (stage_key "" for a whole trial) */
    char stage[16], stage_key[17], stage_dir[32];
    int stage_last;     /* the trial's last stage (eval): done means the trial is */
    char done_msg[256]; /* the worker's message in `done` (why it failed), "" none */
    /* launcher: remote: the agent (`bfworker serve`) that started it, by
     * name; agent_id 0 while none has claimed it (after a bfd restart) */
    int remote;
    int agent_id;
    char agent[PROTO_MAX_NAME + 1];
    /* the store refused to record its end (disk full): unrecorded, with the
     * exit status (-1 none) and reason to record again at record_at; exited
     * once its process is gone: it then holds no slot, GPU, pid or job, and
     * stays only until the end is stored (runs.c, end_run) */
    int unrecorded, exited, end_code;
    char end_why[600];
    double record_at;
    int hello_seen;      /* its worker said hello: heartbeat_timeout runs, not startup_timeout */
    int completing_0;    /* Slurm says COMPLETING with exit code 0:0: Slurm's final word decides */
    int completing_said; /* bfd logged that it waits on that final word past the timeout */
} run;

/* One `bfworker serve` agent connected to the worker socket (agents.c). */
typedef struct agent {
    int id; /* bfd's number for it, from 1; never reused while bfd runs */
    char name[PROTO_MAX_NAME + 1];
    long long pid;
    int slots;
    unsigned char ident[PROTO_MAX_IDENT];
    size_t ident_len;
    double since, last_seen;
    /* a launch to it could not be sent, or its attempt's worker went silent:
     * no launch goes to it until it is heard from again, or found lost */
    int unreachable;
} agent;

/* One worker's metrics message of this round, validated and waiting for
 * flush_batches (workers.c): its points copied out (the body is freed at
 * once; msg keeps the route of the reply) and owned by the batch. Its run is
 * named by trial and attempt, looked up at the flush: an index or pointer
 * into d->runs would name another run once one is removed (remove_run
 * moves the last run into the freed slot). */
typedef struct batch {
    proto_msg msg;
    int64_t trial;
    int attempt;
    proto_points pts;
    int64_t prev_acked; /* the run's acked before this batch */
    int gap;
    int64_t first_seq; /* the worker's first own line: those before are an earlier attempt's */
} batch;

/* What a round of worker messages has taken so far (loop.c bounds it):
 * metrics batches, their points and values, and the heap their copied
 * points hold. */
typedef struct round_count {
    size_t batches, points, values, bytes;
} round_count;

/* The daemon: its settings, store connections, sockets, run table and
 * exporters. One per bfd_run (loop.c opens and closes it). */
typedef struct bfd {
    const bfd_opts *o;
    const bfd_config *c;
    store *st;
    store_checkpointer *ckpt; /* checkpoints the WAL off the loop */
    dstate *ds;
    void *ctx, *ctl, *wrk, *pub, *zap;
    char ep_ctl[1200], ep_wrk[1200], ep_pub[1200];
    char tcp_ctl[300], tcp_wrk[300], tcp_pub[300];
    int sigpipe[2];
    run *runs;
    size_t n_runs, cap_runs;
    int dirty; /* something changed that may let a trial start */
    double started, last_sched;
    int quit;
    char client_keys[MAX_CLIENT_KEYS][41];
    int n_client_keys;
    batch batches[ROUND_MAX_MSGS];
    size_t n_batches;
    /* replies to clients that have gone: counted, logged as one summary line
     * per UNSENT_LOG_EVERY seconds rather than one line each */
    long long unsent, unsent_logged;
    double unsent_since;
    char unsent_err[256];
    adaptive *ad;   /* early stops and tpe proposals (daemon/adaptive.h) */
    exp_tb *tb;     /* TensorBoard files ($BF_HOME/tensorboard) */
    prom *prom;     /* Prometheus /metrics (NULL: off) */
    http *http;     /* the dashboard (NULL: off) */
    double prom_at; /* last snapshot */
    submitq *sq;    /* submits parsed, expanded and stored off the loop */
    /* launcher: slurm: attempts launched, waiting to go out as one job array
     * of job arr_job (launch.c, slurm_flush) */
    int64_t *arr_trials;
    size_t n_arr, cap_arr;
    store_job arr_job;
    int max_array;       /* tasks per array: MaxArraySize, else 1001 */
    long long n_sbatch;  /* sbatch calls so far */
    slurmq *slq;         /* launcher: slurm: sbatch, scontrol, scancel off the loop */
    slurmq_req *backlog; /* an sbatch or scontrol answer applied in part (finish_slurm goes on) */
    char (*polls)[SLURM_JOB_ID_MAX]; /* arrays (or plain jobs) whose scontrol query is in flight */
    size_t n_polls, cap_polls;
    char cancel_memo[SLURM_JOB_ID_MAX]; /* last array scancelled whole, with how, when */
    int cancel_memo_sig;
    double cancel_memo_at;
    /* launcher: remote: the agents that have said hello (agents.c) */
    agent *agents;
    size_t n_agents, cap_agents;
    int next_agent_id;
    /* jobs marked for removal are left (req_prune.c removes a chunk per
     * round); free pages of the store are left to give back */
    int pruning, shrinking;
    /* pending trials of cancelled jobs are left to move to CANCELLED
     * (req_control.c moves a chunk per round) */
    int cancelling;
    double trace_ms; /* BF_LOOP_TRACE: log rounds longer than this (0: off; loop.c) */
} bfd;

#define UNSENT_LOG_EVERY 10.0

/* Reads a field of a request: on failure (call nonzero) replies
 * PROTO_E_FIELD with the message in ferr and returns from the handler. It
 * names d, s (the socket), m (the request) and ferr of the handler using it. */
#define FIELD(call)                                                                                \
    do {                                                                                           \
        if (call) {                                                                                \
            reply_err(d, s, m, PROTO_E_FIELD, "%s: %s", m->type, ferr);                            \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* ------------------------------------------------------------- clock_log.c */

/* Wall-clock seconds (CLOCK_REALTIME: stored and published times). */
double now_s(void);
/* One line on stderr, "DATE TIME bfd: ...", unless bfd_log_quiet(1). */
void bfd_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* --quiet: bfd_log prints nothing from now on (1) or again (0). */
void bfd_log_quiet(int on);

/* ----------------------------------------------------------------- reply.c */

/* Sends the reply type with body (borrowed; NULL: none) to the client of m
 * on sock; a reply that cannot be sent is counted, never fatal. */
void reply(bfd *d, void *sock, proto_msg *m, const char *type, json_t *body);
/* Sends an error reply with code and a printf-style message (cut at 2 KiB). */
void reply_err(bfd *d, void *sock, proto_msg *m, proto_code code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Logs how many replies went unsent since the last summary: at most one line
 * per UNSENT_LOG_EVERY seconds, or now when force. */
void log_unsent(bfd *d, int force);
/* s with control characters, backslashes and non-ASCII bytes escaped (\n,
 * \t, \\, \xNN) into out, cut with "..." to fit; returns out. For text from
 * outside that goes into a log line. */
const char *log_escape(const char *s, char *out, size_t outlen);
/* Publishes body (borrowed) as type on topic; a failure is logged. */
void publish(bfd *d, const char *topic, const char *type, json_t *body);
/* Publishes a trial's state change on job/JOB (message NULL: ""). */
void publish_event(bfd *d, int64_t job, int64_t trial, const char *state, int attempt,
                   const char *message);

/* ------------------------------------------------------------------ runs.c */

/* The live attempt of trial, or NULL. */
run *find_run(bfd *d, int64_t trial);
/* A new zeroed entry at the end of the table (done_state and acked -1), or
 * NULL when out of memory. Pointers into the table move when it grows. */
run *add_run(bfd *d);
/* Forgets r (its bfd_runs row, its TensorBoard run): the last entry takes
 * its place, so r then points at another run (or past the end). */
void remove_run(bfd *d, run *r);
/* Ranks of every live attempt (the slots in use). */
int slots_used(bfd *d);
/* 1 when a live attempt holds CUDA device g. */
int gpu_used(bfd *d, int g);
/* The attempt failed with why: the store retries it when retries are left
 * (an early-stopped one is STOPPED instead); published. Returns 0, or -1
 * when the store refused it (logged). */
int record_failure(bfd *d, run *r, const char *why);
/* Moves the trial to state to with why, and publishes it; 0, or -1 logged. */
int record_state(bfd *d, run *r, trial_state to, const char *why);
/* Exit 75 on a SIGTERM bfd did not send: back to PENDING, resumed from its
 * checkpoint without using a retry; published. 0, or -1 logged. */
int record_preempted(bfd *d, run *r);
/* The attempt succeeded: the trial completes, or its s2s stage does (checked
 * against the stage's stage.json) and the trial goes PENDING for the next.
 * 0, or -1 when the store refused it (logged). */
int record_completed(bfd *d, run *r, const char *why);
/* r's end (exit status code, -1 none; why when it failed) is known and its
 * process gone: recorded unless r->ending, then r forgotten. When the store
 * refuses the record, r stays in the table holding nothing (exited) and the
 * record is tried again by check_timers until the store takes it. */
void end_run(bfd *d, run *r, int code, const char *why);
/* launcher: remote: the agent says r's process ended with exit status code
 * (-1 none) or by signal sig (0 none): recorded as a child's end, r forgotten. */
void run_exited(bfd *d, run *r, int code, int sig);
/* The outcome the worker of trial's attempt left in its folder: 0 completed,
 * 1 preempted, 2 failed, -1 none (or another attempt's). */
int read_outcome(const bfd *d, int64_t trial, int attempt);
/* Stores the complete lines of trial's metrics.jsonl past the highest
 * stored seq (a worker that could not deliver them: bfd down, the network
 * lossy, the store full) as attempt's points. 0 (also without a file), or
 * -1 after logging. */
int recover_lines(bfd *d, int64_t trial, int attempt);
/* Waits for every child that exited and records how its attempt ended. */
void reap_children(bfd *d);
/* The runs' timers: SIGKILL after the grace, heartbeat timeouts, Slurm
 * polls (a job that left the queue ends its run), reattached processes gone. */
void check_timers(bfd *d);

/* ---------------------------------------------------------------- launch.c */

/* 1 with the Slurm launcher (bfd.yaml launcher: slurm), 0 with the local one. */
int is_slurm(const bfd *d);
/* Starts one attempt of trial t (PENDING) of job j on gpus[0..ng) (stage >= 0:
 * only that stage of its s2s plan) and adds it to the run table. Returns 0,
 * or -1 after logging (the trial failed when it had been marked RUNNING), or
 * -2 when its crash-recovery record (bfd_runs) could not be written: the
 * trial is PENDING (still, or again without counting a failure) and nothing
 * of it runs; the store refuses writes, so the pass stops. */
int launch(bfd *d, const store_trial *t, const store_job *j, const int *gpus, int ng, int stage);
/* launcher: slurm: submits the attempts launch() queued as Slurm job arrays
 * of at most d->max_array tasks, one sbatch each; each run's slurm_job
 * becomes ARRAY_TASK. A failed sbatch fails its trials. No-op when none wait. */
void slurm_flush(bfd *d);
/* The Slurm thread's answers: submitted arrays recorded, job states applied
 * to their runs, failed cancels logged (launch.c). */
void finish_slurm(bfd *d);
/* An sbatch answer applied in part (the backlog) applied to the end: bfd
 * stopping stores every task's Slurm id it has. */
void slurm_backlog_finish(bfd *d);
/* An scontrol answer applied to the runs of its array or job (runs.c); 1
 * when budget_s ran out with ended runs left (call again with the same q:
 * the runs applied already are removed or take the same state again). */
int slurm_answered(bfd *d, const slurmq_req *q, double budget_s);
/* mkdir that accepts a folder already there; -1 with "mkdir PATH: why". */
int make_dir(const char *path, mode_t mode, char *err, size_t errlen);
/* "0,1,3" (a bfd_runs row's gpus) into g[0..*n), at most BFD_MAX_GPUS. */
void parse_gpus(const char *s, int *g, int *n);

/* ----------------------------------------------------------------- sched.c */

/* One scheduling pass (clears d->dirty): asks tpe for proposals, then
 * launches the PENDING trials that fit. Errors are logged. */
void schedule(bfd *d);

/* --------------------------------------------------------------- workers.c */

/* Handles one message from the worker socket (hello, heartbeat, metrics,
 * done), replying itself; metrics are validated and queued into d->batches
 * (taking over m's body) and counted into *rc. */
void handle_worker_msg(bfd *d, proto_msg *m, round_count *rc);
/* Stores the points of this round's batches in one transaction, then acks
 * each, publishes its new points and judges early stopping; empties
 * d->batches. A failed store is answered with an error to every batch. */
void flush_batches(bfd *d);
/* Asks r's worker to stop (checkpoint, exit 75) with reason; SIGTERM to its
 * group when it has not connected or the message cannot be sent. */
void send_stop(bfd *d, run *r, const char *reason);
/* Asks the job's early stopping about r (daemon/adaptive.h); a stop it
 * decides is committed to the store, then sent. */
void judge_run(bfd *d, run *r);

/* ---------------------------------------------------------------- agents.c */

/* 1 with launcher: remote. */
int is_remote(const bfd *d);
/* Handles agent_hello, agent_heartbeat and agent_exit from the worker socket. */
void handle_agent_msg(bfd *d, proto_msg *m);
/* The reachable agent with the most free slots that has at least ranks free,
 * or NULL. */
agent *agent_pick(bfd *d, int ranks);
/* Free slots over every agent (the remote launcher's capacity now). */
int agents_free_slots(bfd *d);
/* Sends agent a the launch of r (its folders, token and stage); -1 with why
 * in err when the message cannot go, and a is then unreachable. */
int agent_launch(bfd *d, agent *a, const run *r, const char *out, const char *logp, const char *cwd,
                 const char *stage_root, char *err, size_t errlen);
/* Marks a unreachable (why: a send failed, its worker went silent): agent_pick passes it over
 * until a message from it arrives. */
void agent_unreachable(bfd *d, agent *a, const char *why);
/* The worker of remote run r went silent: its agent, silent too if its host
 * died or was cut off, takes no launch (the retry's) until it is heard from
 * again (a live agent heartbeats within heartbeat_interval). */
void agent_suspect_of(bfd *d, const run *r, const char *why);
/* Agents silent for heartbeat_timeout are dropped; their attempts fail. */
void agents_check(bfd *d);
/* agents as a JSON array for status (new reference). */
json_t *agents_json(bfd *d);

/* --------------------------------------------------------------- recover.c */

/* After a restart: RUNNING trials whose worker still lives are reattached
 * (they reconnect and resend); the others ended while bfd was down and are
 * recorded so. Returns 0, or -1 with a message when the store cannot be read. */
int reconcile(bfd *d, char *err, size_t errlen);

/* ----------------------------------------------------------------- procs.c */

/* 1 when pid lives and its command line holds token (not a reused pid, not a
 * zombie). */
int process_alive(pid_t pid, const char *token);
/* Signals an attempt: its process group (local), its Slurm job (SIGTERM:
 * scancel --signal=TERM once it runs; else scancel), or through its remote
 * agent. Failures are logged. */
void kill_group(bfd *d, run *r, int sig);
/* Asks agent a to signal the process group of trial's attempt (`kill`); -1
 * after logging when the message cannot go. */
int agent_signal(bfd *d, const agent *a, int64_t trial, int attempt, int sig);
/* scancel of a job, task or (array 1) whole array through the Slurm thread
 * (here and now when there is none, or its queue is full or stopped). */
void slurm_cancel_async(bfd *d, const char *id, int array, int term, long long trial);

#endif
