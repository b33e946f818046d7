/* bf across hosts: scripts/cluster_local.sh makes a cluster in a box (three
 * network namespaces with hostnames of their own on 198.18.0.0/24, a bridge,
 * slurmctld on node 1 and slurmd on nodes 2 and 3, one munge key), bfd runs
 * on node 1 with `--tcp 198.18.0.1:PORT` (CURVE) and `launcher: slurm`, and
 * Slurm places real bfworker processes on nodes 2 and 3, which reach bfd
 * over TCP between the namespaces.
 *   - a 4-trial sweep: every trial COMPLETED at its first attempt, every
 *     metrics.jsonl line stored once, each worker's hello named the node
 *     Slurm ran its job on, and both compute nodes ran trials;
 *   - a worker whose CURVE key is not in curve/clients/ is refused: it says
 *     so and exits 64, the trial FAILED at once (not retried, long before
 *     the worker's 60 s hello timeout) with that reason in `bfctl show`.
 * The box's names carry this run's pid (BF_CLUSTER_PREFIX), so two runs on
 * one machine do not meet; a watchdog process tears the box down when the
 * test process ends by any means (a failed assertion, Criterion's timeout).
 * Skipped (exit 77, before any test) where `cluster_local.sh probe` says the
 * box cannot be made: network namespaces refused, not root, or Slurm, munge
 * or nftables not installed. */
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "it_bfd.h"

#define CLUSTER BF_SOURCE_DIR "/scripts/cluster_local.sh"
#define BFD_ADDR "198.18.0.1"
#define BFD_PORT 7100 /* bfnode1's own network namespace: nothing else binds there */

static char g_dir[256], g_home[320], g_box[320], g_prefix[32];
static pid_t g_bfd = -1, g_watchdog = -1;
static int g_up;

/* A process of its own that runs `cluster_local.sh down` and removes the
 * test's folder once the test process is gone, however it ended. */
static void start_watchdog(void) {
    pid_t parent = getpid();
    g_watchdog = fork();
    cr_assert(g_watchdog >= 0);
    if (g_watchdog == 0) {
        setsid();
        for (int k = 3; k < 1024; k++) close(k);
        while (kill(parent, 0) == 0 || errno != ESRCH) sleep(1);
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "BF_CLUSTER_PREFIX=%s sh " CLUSTER " down %s >/dev/null 2>&1",
                 g_prefix, g_box);
        if (system(cmd) != 0) _exit(1);
        tmpdir_remove(g_dir);
        _exit(0);
    }
}

static void setup(void) {
    it_worker_env();
    it_bfd_home(g_dir, sizeof g_dir, g_home, sizeof g_home, "/tmp/bf-itc-XXXXXX");
    chmod(g_dir, 0755);
    snprintf(g_box, sizeof g_box, "%s/box", g_dir);
    snprintf(g_prefix, sizeof g_prefix, "bfc%dn", (int)(getpid() % 100000));
    setenv("BF_CLUSTER_PREFIX", g_prefix, 1);
    it_copy_glosses(g_dir);
    it_write_text(tmpdir_path(g_home, "bfd.yaml"),
                  "launcher: slurm\nslots: 4\nslurm_poll: 0.5\nheartbeat_timeout: 20\n"
                  "heartbeat_interval: 0.2\nkill_grace: 3\n",
                  0644);
}

static void teardown(void) {
    it_stop(&g_bfd, SIGKILL);
    if (g_up) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "sh " CLUSTER " down %s", g_box);
        if (system(cmd) != 0) fprintf(stderr, "cluster_local.sh down failed\n");
        g_up = 0;
    }
    if (tmpdir_remove(g_dir) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    if (g_watchdog > 0) {
        kill(g_watchdog, SIGKILL);
        waitpid(g_watchdog, NULL, 0);
        g_watchdog = -1;
    }
}

static void node(char *buf, size_t len, int k) { snprintf(buf, len, "%s%d", g_prefix, k); }

/* Brings the box up (3 nodes); skips the test where it cannot be made. */
static void box_up(void) {
    char cmd[1200], conf[400];
    start_watchdog();
    snprintf(cmd, sizeof cmd, "sh " CLUSTER " up 3 %s > %s/cluster.out 2>&1", g_box, g_dir);
    int st = system(cmd);
    cr_assert(WIFEXITED(st), "cluster_local.sh up was killed");
    g_up = 1;
    cr_assert_eq(WEXITSTATUS(st), 0, "cluster_local.sh up failed: see %s/cluster.out and %s/*.log",
                 g_dir, g_box);
    snprintf(conf, sizeof conf, "%s/slurm.conf", g_box);
    setenv("SLURM_CONF", conf, 1);
}

/* bfd on node 1, --tcp on the box's network; BF_CURVE_* in its environment
 * go with each sbatch (--export=ALL) to the workers. */
static void start_bfd(const char *client_key) {
    char logp[512], tcp[64], n1[40], srv[400], key[400];
    snprintf(logp, sizeof logp, "%s/bfd.log", g_dir);
    snprintf(tcp, sizeof tcp, BFD_ADDR ":%d", BFD_PORT);
    snprintf(srv, sizeof srv, "%s/curve/server.pub", g_home);
    snprintf(key, sizeof key, "%s/curve/%s.key", g_home, client_key);
    setenv("BF_CURVE_SERVER", srv, 1);
    setenv("BF_CURVE_KEY", key, 1);
    node(n1, sizeof n1, 1);
    char *argv[] = {"sh", CLUSTER, "exec", n1, IT_BFD, "--home", g_home, "--tcp", tcp, NULL};
    g_bfd = it_spawn(logp, argv, 0);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "BF_HOME=%s " IT_BFCTL " daemon status > /dev/null 2>&1", g_home);
    double t0 = it_now_s();
    while (system(cmd) != 0) {
        cr_assert(it_now_s() - t0 < 15, "bfd did not come up on %s (see %s)", n1, logp);
        cr_assert_eq(waitpid(g_bfd, NULL, WNOHANG), 0, "bfd ended (see %s)", logp);
        it_sleep_s(0.1);
    }
    cr_assert(it_count_lines_with(logp, "TCP with CURVE: control tcp://" BFD_ADDR) > 0,
              "bfd does not listen on the box's network (see %s)", logp);
}

static void keygen(const char *client) {
    char cmd[1024];
    if (client)
        snprintf(cmd, sizeof cmd, IT_BFD " keygen --home %s --client %s > /dev/null", g_home,
                 client);
    else
        snprintf(cmd, sizeof cmd, IT_BFD " keygen --home %s > /dev/null", g_home);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* `bfctl ARGS` (at most 300 s) in the test's folder; its exit status and
 * stdout in out. */
static int ctl(char *out, size_t outlen, const char *args) {
    char a[700];
    snprintf(a, sizeof a, "%s", args);
    return it_bfctl(g_dir, out, outlen, a);
}

static long long db_int(const char *sql, long long arg) { return it_db_int(g_home, sql, arg); }

static void check_exactly_once(long long trial, long long want_lines) {
    long long lines, values;
    it_metrics_file(g_home, trial, 0, &lines, &values);
    cr_assert_eq(lines, want_lines, "trial %lld: %lld lines in metrics.jsonl", trial, lines);
    cr_assert_eq(db_int("SELECT COUNT(*) FROM metrics WHERE trial = ?1", trial), values);
    cr_assert_eq(db_int("SELECT COUNT(DISTINCT seq) FROM metrics WHERE trial = ?1", trial), lines);
    cr_assert_eq(db_int("SELECT MAX(seq) FROM metrics WHERE trial = ?1", trial), lines);
}

/* The host the worker of trial's attempt 1 named in its hello (bfd.log). */
static void hello_host(long long trial, char *host, size_t len) {
    char p[512], line[1024], want[96];
    snprintf(p, sizeof p, "%s/bfd.log", g_dir);
    snprintf(want, sizeof want, "trial %lld attempt 1: worker pid ", trial);
    FILE *f = fopen(p, "r");
    cr_assert(f);
    host[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        char *s = strstr(line, want), *on = s ? strstr(s, " on ") : NULL;
        if (on && strstr(on, " connected"))
            snprintf(host, len, "%.*s", (int)(strstr(on, " connected") - on - 4), on + 4);
    }
    fclose(f);
    cr_assert(host[0], "bfd.log has no hello of trial %lld", trial);
}

/* The node Slurm ran trial's job on (BatchHost), asked on node 1. */
static void slurm_host(long long trial, char *host, size_t len) {
    char id[32] = "", cmd[1200], n1[40];
    /* the job id from bfd's log */
    char p[512], ln[1024], want[96];
    snprintf(p, sizeof p, "%s/bfd.log", g_dir);
    snprintf(want, sizeof want, "trial %lld attempt 1: submitted to Slurm as job ", trial);
    FILE *f = fopen(p, "r");
    cr_assert(f);
    while (fgets(ln, sizeof ln, f)) {
        char *s = strstr(ln, want);
        if (s)
            snprintf(id, sizeof id, "%.*s", (int)strspn(s + strlen(want), "0123456789"),
                     s + strlen(want));
    }
    fclose(f);
    cr_assert(id[0], "no Slurm job of trial %lld", trial);
    node(n1, sizeof n1, 1);
    snprintf(cmd, sizeof cmd,
             "sh " CLUSTER " exec %s scontrol show job -o %s | grep -o 'BatchHost=[^ ]*'", n1, id);
    FILE *pp = popen(cmd, "r");
    cr_assert(pp);
    char line[256] = "";
    if (!fgets(line, sizeof line, pp)) line[0] = '\0';
    pclose(pp);
    line[strcspn(line, "\n")] = '\0';
    cr_assert(!strncmp(line, "BatchHost=", 10), "scontrol: no BatchHost for job %s", id);
    snprintf(host, len, "%s", line + 10);
}

TestSuite(cluster, .init = setup, .fini = teardown, .timeout = 300);

Test(cluster, sweep_placed_on_two_nodes_over_tcp_and_curve) {
    box_up();
    keygen(NULL);
    keygen("worker");
    start_bfd("worker");
    const char *sweep =
        it_write_sweep(g_dir, "four", 4, 30, "resources: {ranks: 1, time_limit: 10m}\n");
    double t0 = it_now_s();
    long long job = it_submit(g_dir, sweep);
    cr_assert_eq(ctl(NULL, 0, "wait 1"), 0, "wait: a trial did not complete (see %s/bfd.log)",
                 g_dir);
    double took = it_now_s() - t0;
    cr_assert_eq(db_int("SELECT COUNT(*) FROM trials WHERE job = ?1 AND state = 'COMPLETED'"
                        " AND attempts = 1",
                        job),
                 4);
    char n2[40], n3[40];
    node(n2, sizeof n2, 2);
    node(n3, sizeof n3, 3);
    int on2 = 0, on3 = 0;
    for (long long t = 1; t <= 4; t++) {
        check_exactly_once(t, 30 / 5);
        char h[256], s[256];
        hello_host(t, h, sizeof h);
        slurm_host(t, s, sizeof s);
        cr_assert_str_eq(h, s, "trial %lld: the worker said host %s, Slurm ran it on %s", t, h, s);
        on2 += !strcmp(h, n2);
        on3 += !strcmp(h, n3);
    }
    cr_assert_eq(on2 + on3, 4, "every trial runs on a compute node (%s, %s)", n2, n3);
    cr_assert(on2 > 0 && on3 > 0, "Slurm placed all 4 trials on one node (%d on %s, %d on %s)", on2,
              n2, on3, n3);
    fprintf(stderr, "cluster sweep: 4 trials x 30 steps on %s (%d) and %s (%d) in %.1f s\n", n2,
            on2, n3, on3, took);
}

Test(cluster, worker_with_an_unknown_curve_key_is_refused) {
    box_up();
    keygen(NULL);
    keygen("rogue");
    /* rogue.key exists, but bfd does not allow its public key */
    cr_assert_eq(unlink(tmpdir_path(g_home, "curve/clients/rogue.pub")), 0);
    start_bfd("rogue");
    const char *sweep =
        it_write_sweep(g_dir, "rogue", 1, 30, "resources: {ranks: 1, time_limit: 10m}\n");
    double t0 = it_now_s();
    it_submit(g_dir, sweep);
    cr_assert_eq(ctl(NULL, 0, "wait 1"), 1, "wait must fail: the worker's key is refused");
    double took = it_now_s() - t0;
    cr_assert_eq(db_int("SELECT COUNT(*) FROM trials WHERE id = 1 AND state = 'FAILED'"
                        " AND attempts = 1",
                        0),
                 1, "the trial FAILED at its first attempt (a key error is not retried)");
    cr_assert(took < 40, "the refusal took %.1f s: a timeout, not the refusal", took);
    char logp[512];
    snprintf(logp, sizeof logp, "%s/bfd.log", g_dir);
    cr_assert(it_count_lines_with(logp, "CURVE client key") > 0, "bfd did not log the refusal");
    char out[16384];
    cr_assert_eq(ctl(out, sizeof out, "show t1"), 0);
    cr_assert(strstr(out, "refused this worker's CURVE key"), "show t1 lacks the reason: %s", out);
    cr_assert(strstr(out, "not retried"), "show t1: a key error is not retried: %s", out);
    fprintf(stderr, "unknown CURVE key: trial FAILED %.1f s after submit: %s\n", took,
            strstr(out, "failed:") ? strstr(out, "failed:") : out);
}

/* The values of name in trial's stored points, by step (steps[i], vals[i]). */
static int points_of(long long trial, const char *name, long long *steps, double *vals, int cap) {
    sqlite3 *db = it_db_open(g_home);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT m.step, m.value FROM metrics m JOIN metric_names n"
                                    " ON n.id = m.name WHERE m.trial = ?1 AND n.name = ?2"
                                    " ORDER BY m.step",
                                    -1, &st, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    sqlite3_bind_int64(st, 1, trial);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
    int n = 0;
    while (sqlite3_step(st) == SQLITE_ROW && n < cap) {
        steps[n] = sqlite3_column_int64(st, 0);
        vals[n++] = sqlite3_column_double(st, 1);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

/* Slurm's NodeList of trial's attempt-1 job, asked on node 1. */
static void slurm_nodelist(long long trial, char *out, size_t len) {
    char id[32] = "", cmd[1200], n1[40], p[512], ln[1024], want[96];
    snprintf(p, sizeof p, "%s/bfd.log", g_dir);
    snprintf(want, sizeof want, "trial %lld attempt 1: submitted to Slurm as job ", trial);
    FILE *f = fopen(p, "r");
    cr_assert(f);
    while (fgets(ln, sizeof ln, f)) {
        char *s = strstr(ln, want);
        if (s)
            snprintf(id, sizeof id, "%.*s", (int)strspn(s + strlen(want), "0123456789"),
                     s + strlen(want));
    }
    fclose(f);
    cr_assert(id[0], "no Slurm job of trial %lld", trial);
    node(n1, sizeof n1, 1);
    snprintf(cmd, sizeof cmd,
             "sh " CLUSTER " exec %s scontrol show job -o %s | grep -o ' NodeList=[^ ]*'", n1, id);
    FILE *pp = popen(cmd, "r");
    cr_assert(pp);
    char line[256] = "";
    if (!fgets(line, sizeof line, pp)) line[0] = '\0';
    pclose(pp);
    line[strcspn(line, "\n")] = '\0';
    cr_assert(!strncmp(line, " NodeList=", 10), "scontrol: no NodeList for job %s", id);
    snprintf(out, len, "%s", line + 10);
}

Test(cluster, two_rank_trial_across_two_nodes_equals_one_node) {
    box_up();
    keygen(NULL);
    keygen("worker");
    it_write_text(tmpdir_path(g_home, "bfd.yaml"),
                  "launcher: slurm\nslots: 4\nslurm_poll: 0.5\nslurm_mpi: pmix\n"
                  "heartbeat_timeout: 30\nheartbeat_interval: 0.2\nkill_grace: 3\n",
                  0644);
    start_bfd("worker");
    const char *two = it_write_sweep(g_dir, "two-nodes", 1, 40,
                                     "resources: {ranks: 2, nodes: 2, time_limit: 10m}\n");
    cr_assert_eq(it_submit(g_dir, two), 1);
    const char *one = it_write_sweep(g_dir, "one-node", 1, 40,
                                     "resources: {ranks: 2, nodes: 1, time_limit: 10m}\n");
    cr_assert_eq(it_submit(g_dir, one), 2);
    double t0 = it_now_s();
    cr_assert_eq(ctl(NULL, 0, "wait 1"), 0, "the 2-node trial failed (see %s/logs/1.log)", g_home);
    cr_assert_eq(ctl(NULL, 0, "wait 2"), 0, "the 1-node trial failed (see %s/logs/2.log)", g_home);
    double took = it_now_s() - t0;
    char nl1[256], nl2[256], n2[40], n3[40], both[128];
    slurm_nodelist(1, nl1, sizeof nl1);
    slurm_nodelist(2, nl2, sizeof nl2);
    node(n2, sizeof n2, 2);
    node(n3, sizeof n3, 3);
    snprintf(both, sizeof both, "%s[2-3]", g_prefix);
    cr_assert_str_eq(nl1, both, "the nodes: 2 trial ran on %s", nl1);
    cr_assert(!strcmp(nl2, n2) || !strcmp(nl2, n3), "the nodes: 1 trial ran on %s", nl2);
    /* the batch script chose MPI's network from bfd's address */
    char *script = it_slurp(tmpdir_path(g_home, "trials/1/slurm.sh"), NULL);
    cr_assert(script && strstr(script, "#SBATCH --nodes=2"), "%s", script ? script : "");
    cr_assert(strstr(script, "OMPI_MCA_btl_tcp_if_include:=198.18.0.0/24"), "%s", script);
    free(script);
    long long s1[64], s2[64];
    double v1[64], v2[64];
    int k1 = points_of(1, "train/loss", s1, v1, 64), k2 = points_of(2, "train/loss", s2, v2, 64);
    cr_assert_eq(k1, 40 / 5);
    cr_assert_eq(k2, k1);
    double worst = 0;
    for (int i = 0; i < k1; i++) {
        cr_assert_eq(s1[i], s2[i]);
        double rel = fabs(v1[i] - v2[i]) / fmax(fabs(v2[i]), 1e-30);
        if (rel > worst) worst = rel;
        cr_assert(rel <= 1e-6, "step %lld: loss %.9g on 2 nodes, %.9g on 1 node (rel %.2g)", s1[i],
                  v1[i], v2[i], rel);
    }
    check_exactly_once(1, 40 / 5);
    fprintf(stderr,
            "2 ranks on 2 nodes (%s) vs 1 node (%s): %d train/loss points, worst relative "
            "difference %.3g; both trials %.1f s\n",
            nl1, nl2, k1, worst, took);
}

/* Criterion's main, after the probe: 77 (skipped) where no box can be made. */
int main(int argc, char *argv[]) {
    int st = system("sh " CLUSTER " probe");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        printf("test_it_cluster: SKIPPED: cluster_local.sh probe said no (above)\n");
        return 77;
    }
    struct criterion_test_set *tests = criterion_initialize();
    int result = 0;
    if (criterion_handle_args(argc, argv, true)) result = !criterion_run_all_tests(tests);
    criterion_finalize(tests);
    return result;
}
