/* launcher: remote on loopback: bfd with `--tcp 127.0.0.1:PORT` (CURVE) and
 * two real `bfworker serve` agents (names node-a and node-b, one slot each)
 * that reach it over TCP with a client key, as agents on two hosts would.
 *   - a 4-trial sweep runs on both agents; one agent is killed (SIGKILL) in
 *     the middle of a trial: its worker dies with it, bfd finds the agent
 *     lost after the heartbeat timeout and the trial is retried on the other
 *     agent from its checkpoint; every trial completes and every stored point
 *     is a line of its metrics.jsonl, once;
 *   - bfd killed (SIGKILL) while both agents run trials and started again:
 *     the agents' heartbeats reattach the attempts, which finish at their
 *     first attempt with every point stored once;
 *   - an agent killed while idle, not yet found lost: the launch that cannot
 *     reach it puts the trial back to pending without counting a failure,
 *     the agent takes no more launches, and the next agent runs the trial;
 *   - a host that hangs (worker, then agent SIGSTOPped): the retry goes to
 *     the other agent, not to the silent agent's freed slot;
 *   - an agent's exit and another batch of metrics handled in one round of
 *     bfd's loop (a fake agent, tests/test_it_remote_round.py): every point
 *     is stored and acked under its own trial;
 *   - what is refused, and said: a second agent with a name in use, an agent
 *     of a bfd whose launcher is not remote, bad command lines (exit 64).
 * The multi-host form of the same (agents in network namespaces of their own)
 * is in test_it_cluster.c. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "it_bfd.h"

#define IT_BFWORKER BF_BIN_DIR "/bfworker"
#define AGENTS 2

static char g_dir[256], g_home[320], g_ep[80], g_tcp[64];
static pid_t g_bfd = -1, g_agent[AGENTS] = {-1, -1};
static const char *g_names[AGENTS] = {"node-a", "node-b"};

static void setup(void) {
    it_worker_env();
    it_bfd_home(g_dir, sizeof g_dir, g_home, sizeof g_home, "/tmp/bf-itr-XXXXXX");
    it_copy_glosses(g_dir);
    /* --tcp PORT is the control endpoint; the worker endpoint, which agents
     * connect to, is PORT + 1 */
    int port = 20000 + 3 * (int)(getpid() % 6000);
    snprintf(g_tcp, sizeof g_tcp, "127.0.0.1:%d", port);
    snprintf(g_ep, sizeof g_ep, "tcp://127.0.0.1:%d", port + 1);
}

static void teardown(void) {
    for (int i = 0; i < AGENTS; i++) {
        if (g_agent[i] > 0) kill(-g_agent[i], SIGKILL);
        it_stop(&g_agent[i], SIGKILL);
    }
    it_stop(&g_bfd, SIGKILL);
    it_kill_workers(g_home);
    if (getenv("BF_IT_KEEP"))
        fprintf(stderr, "kept %s\n", g_dir);
    else
        tmpdir_remove(g_dir);
}

TestSuite(remote, .init = setup, .fini = teardown, .timeout = 240);

static void keygen(const char *client) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, IT_BFD " keygen --home %s%s%s > /dev/null", g_home,
             client ? " --client " : "", client ? client : "");
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* bfd with bfd.yaml = yaml, on ipc:// and --tcp (CURVE), waited for. */
static void start_bfd(const char *yaml) {
    it_write_text(tmpdir_path(g_home, "bfd.yaml"), yaml, 0644);
    char logp[512];
    snprintf(logp, sizeof logp, "%s/bfd.log", g_dir);
    char *argv[] = {IT_BFD, "--home", g_home, "--tcp", g_tcp, NULL};
    g_bfd = it_spawn(logp, argv, 0);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "BF_HOME=%s " IT_BFCTL " daemon status > /dev/null 2>&1", g_home);
    double t0 = it_now_s();
    while (system(cmd) != 0) {
        cr_assert(it_now_s() - t0 < 15, "bfd did not come up (see %s)", logp);
        cr_assert_eq(waitpid(g_bfd, NULL, WNOHANG), 0, "bfd ended (see %s)", logp);
        it_sleep_s(0.1);
    }
}

/* Agent i (its own process group, log dir/agent-NAME.log) with the client
 * key `key`. */
static pid_t start_agent(int i, const char *name, const char *key) {
    char logp[512], srv[400], k[400];
    snprintf(logp, sizeof logp, "%s/agent-%s.log", g_dir, name);
    snprintf(srv, sizeof srv, "%s/curve/server.pub", g_home);
    snprintf(k, sizeof k, "%s/curve/%s.key", g_home, key);
    setenv("BF_CURVE_SERVER", srv, 1);
    setenv("BF_CURVE_KEY", k, 1);
    char *argv[] = {IT_BFWORKER, "serve",      "--connect", g_ep, "--slots", "1",
                    "--name",    (char *)name, "--grace",   "5",  NULL};
    pid_t pid = it_spawn(logp, argv, 1);
    if (i >= 0) g_agent[i] = pid;
    return pid;
}

static const char *bfd_log(void) { return tmpdir_path(g_dir, "bfd.log"); }

/* Waits until bfd's log has a line with needle (timeout s). */
static void wait_log(const char *path, const char *needle, double timeout) {
    double t0 = it_now_s();
    while (access(path, R_OK) != 0 || it_count_lines_with(path, needle) == 0) {
        cr_assert(it_now_s() - t0 < timeout, "no '%s' in %s after %.0f s", needle, path, timeout);
        it_sleep_s(0.1);
    }
}

/* `bfctl wait JOB`, which must exit 0; else bfd's log, bfctl's errors and the
 * agents' logs are shown before the failure. */
static void wait_job_ok(long long job, const char *what) {
    char args[64];
    snprintf(args, sizeof args, "wait %lld", job);
    int rc = it_bfctl(g_dir, NULL, 0, args);
    if (rc != 0) {
        it_show_tail(bfd_log(), 6000);
        it_show_tail(tmpdir_path(g_dir, "bfctl.err"), 2000);
        for (int i = 0; i < AGENTS; i++) {
            char p[512];
            snprintf(p, sizeof p, "%s/agent-%s.log", g_dir, g_names[i]);
            it_show_tail(p, 2000);
        }
    }
    cr_assert_eq(rc, 0, "%s: bfctl wait %lld exited %d", what, job, rc);
}

static void wait_agents(void) {
    for (int i = 0; i < AGENTS; i++) {
        char want[96];
        snprintf(want, sizeof want, "agent %s (pid ", g_names[i]);
        wait_log(bfd_log(), want, 20);
    }
}

/* The agent bfd started trial's attempt on ("" when none yet). */
static void attempt_agent(long long trial, int attempt, char *out, size_t len) {
    char want[96], line[1024];
    snprintf(want, sizeof want, "trial %lld attempt %d: started on agent ", trial, attempt);
    out[0] = '\0';
    FILE *f = fopen(bfd_log(), "r");
    while (f && fgets(line, sizeof line, f)) {
        char *s = strstr(line, want);
        if (s) snprintf(out, len, "%.*s", (int)strcspn(s + strlen(want), ", \n"), s + strlen(want));
    }
    if (f) fclose(f);
}

/* Every line of trial's metrics.jsonl stored once, nothing more. */
static void check_exactly_once(long long trial, int cut_ok) {
    long long lines, values;
    it_metrics_file(g_home, trial, cut_ok, &lines, &values);
    long long stored = it_db_int(g_home, "SELECT COUNT(*) FROM metrics WHERE trial = ?1", trial);
    cr_assert_eq(stored, values, "trial %lld: %lld values stored, its file holds %lld", trial,
                 stored, values);
    cr_assert_eq(
        it_db_int(g_home, "SELECT COUNT(DISTINCT seq) FROM metrics WHERE trial = ?1", trial), lines,
        "trial %lld: the stored seqs are not its %lld lines", trial, lines);
}

/* dir/NAME.yaml: n_seeds trials of a model wide enough (about 5 ms a step
 * on one core) that a fault lands mid-training; logs every 10 steps,
 * checkpoints every 100. */
static const char *write_sweep(const char *name, int n_seeds, int steps, const char *extra) {
    static char p[512];
    snprintf(p, sizeof p, "%s/%s.yaml", g_dir, name);
    FILE *f = fopen(p, "w");
    cr_assert(f, "cannot write %s", p);
    fprintf(f,
            "name: %s\npipeline: budgetformer\ndevice: cpu\n"
            "data: {train: %s/train.tsv, val: %s/val.tsv}\n"
            "model: {layers: 2, d_model: 64, heads: 4, seq_len: 32, vocab: 256}\n"
            "train: {steps: %d, batch: 16, log_every: 10, eval_every: 100000, "
            "checkpoint_every: 100}\n"
            "sweep:\n  parameters:\n    train.seed: {values: [",
            name, g_dir, g_dir, steps);
    for (int i = 0; i < n_seeds; i++) fprintf(f, "%s%d", i ? ", " : "", i + 1);
    fprintf(f, "]}\nmetric: {name: train/loss, goal: min}\n%s", extra);
    cr_assert_eq(fclose(f), 0);
    return p;
}

static const char *yaml_remote(double heartbeat_timeout) {
    static char y[256];
    snprintf(y, sizeof y,
             "launcher: remote\nheartbeat_timeout: %g\nheartbeat_interval: 0.2\nkill_grace: 3\n",
             heartbeat_timeout);
    return y;
}

Test(remote, killed_agent_s_trial_is_retried_on_the_other_agent) {
    keygen(NULL);
    keygen("agent");
    start_bfd(yaml_remote(3));
    for (int i = 0; i < AGENTS; i++) start_agent(i, g_names[i], "agent");
    wait_agents();
    const char *sweep = write_sweep("four", 4, 2000, "retries: 3\n");
    double t0 = it_now_s();
    long long job = it_submit(g_dir, sweep);
    /* trial 1 mid-training on some agent */
    it_db_wait(g_dir, g_home, "step 200 of trial 1",
               "SELECT COALESCE(MAX(step), 0) FROM metrics WHERE trial = ?1", 1, 200, 60);
    char victim[64], want[128];
    attempt_agent(1, 1, victim, sizeof victim);
    cr_assert(victim[0], "bfd.log names no agent for trial 1");
    int vi = !strcmp(victim, g_names[0]) ? 0 : 1;
    cr_assert_str_eq(victim, g_names[vi]);
    /* the pid of its worker, from the agent's log */
    char alog[512], line[1024];
    snprintf(alog, sizeof alog, "%s/agent-%s.log", g_dir, victim);
    long worker = 0;
    FILE *f = fopen(alog, "r");
    while (f && fgets(line, sizeof line, f)) {
        char *s = strstr(line, "trial 1 attempt 1: started, pid ");
        if (s) worker = atol(s + strlen("trial 1 attempt 1: started, pid "));
    }
    if (f) fclose(f);
    cr_assert(worker > 0, "the agent's log has no pid for trial 1 (see %s)", alog);
    double t_kill = it_now_s();
    kill(g_agent[vi], SIGKILL);
    waitpid(g_agent[vi], NULL, 0);
    g_agent[vi] = -1;
    /* its worker dies with it (PR_SET_PDEATHSIG): no trainer on a lost host */
    double tw = it_now_s();
    while (kill((pid_t)worker, 0) == 0) {
        /* 60 s: a guard against a worker that lives on, not a bound on the time */
        cr_assert(it_now_s() - tw < 60, "worker %ld outlived its agent", worker);
        it_sleep_s(0.05);
    }
    snprintf(want, sizeof want, "agent %s lost", victim);
    wait_log(bfd_log(), want, 30);
    double lost_after = it_now_s() - t_kill;
    wait_job_ok(job, "the sweep must finish");
    double took = it_now_s() - t0;
    cr_assert_eq(it_db_int(g_home,
                           "SELECT COUNT(*) FROM trials WHERE job = ?1 AND state = 'COMPLETED'",
                           job),
                 4);
    long long att = it_db_int(g_home, "SELECT attempts FROM trials WHERE id = ?1", 1);
    cr_assert_geq(att, 2, "trial 1 was not retried");
    char last[64];
    attempt_agent(1, (int)att, last, sizeof last);
    cr_assert_str_eq(last, g_names[1 - vi], "the retry ran on %s, not on the survivor", last);
    const char *logp = tmpdir_path(g_home, "logs/1.log");
    cr_assert(it_count_lines_with(logp, "resume: continuing from step") > 0,
              "the retry did not resume from the checkpoint (see %s)", logp);
    for (long long t = 1; t <= 4; t++) check_exactly_once(t, t == 1);
    cr_assert_eq(it_db_int(g_home, "SELECT MAX(step) FROM metrics WHERE trial = ?1", 1), 2000);
    /* the survivor's status */
    char out[8192];
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, "daemon status --json"), 0);
    json_error_t je;
    json_t *st = json_loads(out, 0, &je);
    cr_assert(st, "status --json: %s", je.text);
    cr_assert_str_eq(json_string_value(json_object_get(st, "launcher")), "remote");
    json_t *ag = json_object_get(st, "agents");
    cr_assert_eq(json_array_size(ag), 1, "%s", out);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(ag, 0), "name")),
                     g_names[1 - vi]);
    cr_assert_eq(json_integer_value(json_object_get(st, "slots")), 1);
    json_decref(st);
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, "daemon status"), 0);
    snprintf(want, sizeof want, "agent %s (pid", g_names[1 - vi]);
    cr_assert(strstr(out, want), "daemon status does not list the agent:\n%s", out);
    fprintf(stderr,
            "remote: agent %s killed at trial 1's step >= 200: found lost %.1f s later, trial 1 "
            "resumed on %s, %lld attempts; 4 trials x 2000 steps in %.1f s\n",
            victim, lost_after, last, att, took);
}

Test(remote, bfd_killed_and_restarted_reattaches_through_the_agents) {
    keygen(NULL);
    keygen("agent");
    start_bfd(yaml_remote(20));
    for (int i = 0; i < AGENTS; i++) start_agent(i, g_names[i], "agent");
    wait_agents();
    const char *sweep = write_sweep("two", 2, 2000, "");
    it_submit(g_dir, sweep);
    for (long long t = 1; t <= 2; t++)
        it_db_wait(g_dir, g_home, "step 100",
                   "SELECT COALESCE(MAX(step), 0) FROM metrics WHERE trial = ?1", t, 100, 60);
    char a1[64], a2[64];
    attempt_agent(1, 1, a1, sizeof a1);
    attempt_agent(2, 1, a2, sizeof a2);
    cr_assert_str_neq(a1, a2, "both trials on %s (one slot each)", a1);
    it_stop(&g_bfd, SIGKILL);
    it_sleep_s(1.0); /* the workers train on; the agents heartbeat into the void */
    start_bfd(yaml_remote(20));
    wait_job_ok(1, "the sweep must finish after the restart");
    for (long long t = 1; t <= 2; t++) {
        cr_assert_eq(it_db_int(g_home, "SELECT attempts FROM trials WHERE id = ?1", t), 1,
                     "trial %lld was retried, not reattached", t);
        cr_assert_eq(it_db_int(g_home,
                               "SELECT COUNT(*) FROM trials WHERE id = ?1 AND state = "
                               "'COMPLETED'",
                               t),
                     1);
        check_exactly_once(t, 0);
    }
    cr_assert_eq(it_count_lines_with(bfd_log(), "; reattaching"), 2);
    cr_assert_eq(it_count_lines_with(bfd_log(), "runs it; reattached"), 2,
                 "each agent claims its attempt after the restart");
}

/* Keys, bfd with launcher remote (heartbeat timeout hb s), agent node-a
 * connected. */
static void bfd_and_agent_a(double hb) {
    keygen(NULL);
    keygen("agent");
    start_bfd(yaml_remote(hb));
    start_agent(0, "node-a", "agent");
    wait_log(bfd_log(), "agent node-a (pid ", 20);
}

/* An agent killed while idle stays registered until its heartbeat timeout;
 * a launch sent to it in that window cannot go (its connection is gone). The
 * trial never started: it waits, pending, without counting a failure (with
 * retries 0 it would otherwise fail for good at once, and a sweep's pending
 * trials would burn every retry in a loop), and runs on the next agent. */
Test(remote, a_dead_agent_not_yet_lost_takes_no_launch_and_burns_no_retry) {
    bfd_and_agent_a(60);
    it_stop(&g_agent[0], SIGKILL);
    it_sleep_s(0.5); /* loopback: bfd's socket sees the connection close */
    const char *sweep = write_sweep("one", 1, 300, "retries: 0\n");
    long long job = it_submit(g_dir, sweep);
    wait_log(bfd_log(), "agent node-a unreachable", 20);
    /* a tight relaunch loop would launch again at each pass of bfd's loop:
     * three status requests answered are three passes after the refusal */
    char out[8192];
    for (int i = 0; i < 3; i++) cr_assert_eq(it_bfctl(g_dir, out, sizeof out, "daemon status"), 0);
    cr_assert_eq(
        it_db_int(g_home, "SELECT COUNT(*) FROM trials WHERE id = ?1 AND state = 'PENDING'", 1), 1,
        "the trial is not pending (see %s)", bfd_log());
    cr_assert_eq(it_db_int(g_home,
                           "SELECT attempts - preemptions - stage_runs FROM trials WHERE id = ?1",
                           1),
                 0);
    cr_assert_eq(it_count_lines_with(bfd_log(), "not launched: agent node-a unreachable"), 1,
                 "launches kept going to the dead agent (see %s)", bfd_log());
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, "daemon status --json"), 0);
    json_error_t je;
    json_t *st = json_loads(out, 0, &je);
    cr_assert(st, "status --json: %s", je.text);
    cr_assert_eq(json_integer_value(json_object_get(st, "slots_free")), 0, "%s", out);
    json_t *a = json_array_get(json_object_get(st, "agents"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(a, "name")), "node-a");
    cr_assert(json_is_false(json_object_get(a, "reachable")), "%s", out);
    json_decref(st);
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, "daemon status"), 0);
    cr_assert(strstr(out, "unreachable"), "daemon status does not say so:\n%s", out);
    /* the next agent runs it, first time */
    start_agent(1, "node-b", "agent");
    wait_job_ok(job, "the trial must complete on node-b");
    char where[64];
    attempt_agent(1, (int)it_db_int(g_home, "SELECT attempts FROM trials WHERE id = ?1", 1), where,
                  sizeof where);
    cr_assert_str_eq(where, "node-b");
    /* two starts: the one that never went out (a preemption), the run */
    cr_assert_eq(it_db_int(g_home, "SELECT attempts FROM trials WHERE id = ?1", 1), 2);
    cr_assert_eq(it_db_int(g_home, "SELECT preemptions FROM trials WHERE id = ?1", 1), 1);
    check_exactly_once(1, 0);
}

/* The pid of trial's attempt 1 worker, from agent name's log. */
static long worker_pid(const char *name, long long trial) {
    char alog[512], line[1024], want[96];
    snprintf(alog, sizeof alog, "%s/agent-%s.log", g_dir, name);
    snprintf(want, sizeof want, "trial %lld attempt 1: started, pid ", trial);
    long pid = 0;
    FILE *f = fopen(alog, "r");
    while (f && fgets(line, sizeof line, f)) {
        char *s = strstr(line, want);
        if (s) pid = atol(s + strlen(want));
    }
    if (f) fclose(f);
    cr_assert(pid > 0, "the agent's log has no pid for trial %lld (see %s)", trial, alog);
    return pid;
}

/* A host that hangs or is cut off: its worker falls silent first, its agent
 * a second later (both SIGSTOPped: their connections stay open, so a launch
 * to the agent would be sent into the void). The worker's heartbeat timeout
 * fails the attempt while the agent still counts as alive; the retry must
 * not go to that agent's freed slot but to the other agent. */
Test(remote, a_silent_worker_s_agent_gets_no_retry_until_heard_from) {
    bfd_and_agent_a(3);
    start_agent(1, "node-b", "agent");
    wait_log(bfd_log(), "agent node-b (pid ", 20);
    const char *sweep = write_sweep("hang", 1, 2000, "retries: 3\n");
    long long job = it_submit(g_dir, sweep);
    it_db_wait(g_dir, g_home, "step 200",
               "SELECT COALESCE(MAX(step), 0) FROM metrics WHERE trial = ?1", 1, 200, 60);
    char first[64];
    attempt_agent(1, 1, first, sizeof first);
    cr_assert_str_eq(first, "node-a", "a tie goes to the first agent");
    pid_t w = (pid_t)worker_pid("node-a", 1);
    kill(w, SIGSTOP);
    it_sleep_s(1.0);
    kill(g_agent[0], SIGSTOP);
    wait_log(bfd_log(), "trial 1 attempt 2: started on agent", 20);
    char second[64];
    attempt_agent(1, 2, second, sizeof second);
    cr_assert_str_eq(second, "node-b", "the retry went to the silent host's agent (see %s)",
                     bfd_log());
    cr_assert(it_count_lines_with(bfd_log(), "agent node-a unreachable (the worker of trial 1") ==
                  1,
              "see %s", bfd_log());
    /* the host comes back: its agent kills the stale attempt */
    kill(g_agent[0], SIGCONT);
    kill(w, SIGCONT);
    wait_job_ok(job, "the trial must complete on node-b");
    cr_assert_eq(it_db_int(g_home, "SELECT attempts FROM trials WHERE id = ?1", 1), 2);
    check_exactly_once(1, 1);
}

/* The agent log at path, once it says needle (timeout s). */
static void agent_says(const char *name, const char *needle, double timeout) {
    char p[512];
    snprintf(p, sizeof p, "%s/agent-%s.log", g_dir, name);
    wait_log(p, needle, timeout);
}

Test(remote, refusals_are_said) {
    bfd_and_agent_a(5);
    /* a second agent of the same name: refused while the first is there */
    g_agent[1] = start_agent(-1, "node-a", "agent");
    char p[512];
    snprintf(p, sizeof p, "%s/agent-node-a.log", g_dir);
    wait_log(p, "is connected already; give each agent its own --name", 20);
    it_stop(&g_agent[1], SIGTERM);
    /* a bfd whose launcher is local refuses agents and says why */
    it_stop(&g_agent[0], SIGTERM);
    it_stop(&g_bfd, SIGTERM);
    start_bfd("launcher: local\n");
    start_agent(0, "node-c", "agent");
    agent_says("node-c", "this bfd has launcher local; agents serve launcher: remote", 20);
    /* bad command lines: exit 64 with what is valid */
    char cmd[1024], out[2048];
    struct {
        const char *args, *says;
    } bad[] = {
        {"serve", "--connect tcp://HOST:PORT or ipc://PATH is required"},
        {"serve --connect http://x", "--connect tcp://HOST:PORT or ipc://PATH is required"},
        {"serve --connect ipc:///tmp/x --slots many",
         "--slots takes an integer in [1, 256], got 'many'"},
        {"serve --connect ipc:///tmp/x --name 'a b'", "--name must be 1-63 printable"},
        {"serve --connect ipc:///tmp/x --bogus", "--bogus"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, IT_BFWORKER " %s 2>&1", bad[i].args);
        FILE *pp = popen(cmd, "r");
        cr_assert(pp);
        size_t n = fread(out, 1, sizeof out - 1, pp);
        out[n] = '\0';
        int st = pclose(pp);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 64, "%s: status %d\n%s", bad[i].args,
                  WEXITSTATUS(st), out);
        cr_assert(strstr(out, bad[i].says), "%s says:\n%s", bad[i].args, out);
    }
}

/* An agent's exit and a batch of metrics handled in the same round of bfd's
 * loop: tests/test_it_remote_round.py, a fake agent speaking ZMTP itself,
 * sends trial A's metrics and A's agent_exit in one write (one read by bfd,
 * one round), C's metrics after. The exit removes A from the run table, whose
 * last run (C) takes its slot: the batch must still be stored, and acked,
 * under A. Every stored point is its own trial's (value 1000 * trial + seq,
 * three of each), and both trials complete. */
Test(remote, an_exit_and_metrics_in_one_round_store_each_point_under_its_trial) {
    keygen(NULL);
    start_bfd(yaml_remote(60));
    long long job = it_submit(g_dir, write_sweep("round", 2, 10, ""));
    char sock[400], script[512], py_log[512];
    snprintf(sock, sizeof sock, "%s/worker.sock", g_home);
    snprintf(script, sizeof script, "%s/tests/test_it_remote_round.py", BF_SOURCE_DIR);
    snprintf(py_log, sizeof py_log, "%s/py.log", g_dir);
    char *argv[] = {"/usr/bin/python3", script, "--worker", sock, NULL};
    pid_t py = it_spawn(py_log, argv, 0);
    int st, r = it_wait_pid(py, 60, &st);
    if (r != 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        it_show_tail(py_log, 4000);
        it_show_tail(bfd_log(), 4000);
    }
    if (r != 0) kill(py, SIGKILL);
    cr_assert_eq(r, 0, "the fake agent did not finish within 60 s");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the fake agent failed (status %d)", st);
    wait_job_ok(job, "two trials ended by a fake agent");
    for (long long t = 1; t <= 2; t++) {
        cr_expect_eq(it_db_int(g_home, "SELECT COUNT(*) FROM metrics WHERE trial = ?1", t), 3,
                     "trial %lld: not 3 points stored", t);
        cr_expect_eq(it_db_int(g_home,
                               "SELECT COUNT(*) FROM metrics WHERE trial = ?1 AND value = 1000 * "
                               "?1 + seq",
                               t),
                     3, "trial %lld: its stored points are not its own", t);
    }
}
