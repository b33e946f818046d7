/* bfd with `launcher: slurm` against a real Slurm: scripts/slurm_local.sh
 * brings up munged, slurmctld and slurmd on this machine (one node, its own
 * key, config and ports, all under a temp folder), bfd submits each trial
 * with sbatch and polls scontrol, and real bfworker processes run under srun
 * on tiny BudgetFormer configs.
 *   - a 2-trial sweep completes through Slurm: both trials COMPLETED, every
 *     metrics.jsonl line stored once, each trial ran as Slurm job bf-ID which
 *     Slurm reports COMPLETED with exit code 0;
 *   - cancel of a running Slurm trial: CANCELLED in the store, the Slurm job
 *     leaves RUNNING, bfd keeps serving with its slots free;
 *   - a Slurm job whose id bfd cannot record is cancelled, its trial
 *     PENDING again with no failure counted;
 *   - a job COMPLETING with exit code 0:0 past the heartbeat timeout (an
 *     Epilog holds it) is judged by Slurm's final state, COMPLETED.
 * Skipped (with the reason) where slurm-wlm or munge is not installed. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "daemon/slurm.h"
#include "it_bfd.h"

#define SLURM_LOCAL BF_SOURCE_DIR "/scripts/slurm_local.sh"

static char g_dir[256], g_home[320], g_slurm[320];
static pid_t g_bfd = -1;
static int g_slurm_up;

static int have_program(const char *name) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "PATH=$PATH:/usr/sbin command -v %s > /dev/null 2>&1", name);
    return system(cmd) == 0;
}

static void setup(void) {
    it_worker_env();
    it_bfd_home(g_dir, sizeof g_dir, g_home, sizeof g_home, "/tmp/bf-its-XXXXXX");
    snprintf(g_slurm, sizeof g_slurm, "%s/slurm", g_dir);
    it_copy_glosses(g_dir);
    it_write_text(tmpdir_path(g_home, "bfd.yaml"),
                  "launcher: slurm\nslots: 2\nslurm_poll: 0.5\nheartbeat_timeout: 20\n"
                  "heartbeat_interval: 0.2\nkill_grace: 3\n",
                  0644);
}

static void teardown(void) {
    it_stop(&g_bfd, SIGKILL);
    char cmd[1200];
    if (g_slurm_up) {
        /* slurmd ends the job steps still running (a worker a failed test left) */
        snprintf(cmd, sizeof cmd, "sh " SLURM_LOCAL " stop %s", g_slurm);
        if (system(cmd) != 0) fprintf(stderr, "slurm_local.sh stop failed\n");
        g_slurm_up = 0;
    }
    if (tmpdir_remove(g_dir) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
}

/* Brings up the local cluster, or skips the test when Slurm is not here. */
static void slurm_up(void) {
    const char *need[] = {"munged", "slurmctld", "slurmd",  "sbatch",
                          "srun",   "scontrol",  "scancel", "sinfo"};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (!have_program(need[i]))
            cr_skip_test("%s is not installed (apt-get install slurm-wlm munge)", need[i]);
    /* a port of its own, so two runs of this test on one machine do not meet */
    char port[16];
    snprintf(port, sizeof port, "%d", 20000 + (int)(getpid() % 20000) * 2 % 20000);
    setenv("SLURM_LOCAL_PORT", port, 1);
    char cmd[1200], conf[400];
    snprintf(cmd, sizeof cmd, "sh " SLURM_LOCAL " start %s > %s/slurm_local.out 2>&1", g_slurm,
             g_dir);
    int st = system(cmd);
    g_slurm_up = 1;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 2) cr_skip_test("slurm_local.sh: a program is missing");
    cr_assert_eq(st, 0, "slurm_local.sh start failed: see %s/slurm_local.out and %s/*.log", g_dir,
                 g_slurm);
    snprintf(conf, sizeof conf, "%s/slurm.conf", g_slurm);
    setenv("SLURM_CONF", conf, 1);
    setenv("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", 0);
}

static void start_bfd(void) { g_bfd = it_bfd_start(g_dir, g_home); }

static const char *write_sweep(const char *name, int n_seeds, int steps) {
    return it_write_sweep(g_dir, name, n_seeds, steps, "resources: {ranks: 1, time_limit: 10m}\n");
}

static int ctl(char *out, size_t outlen, const char *args) {
    return it_bfctl(g_dir, out, outlen, args);
}

static long long submit(const char *sweep) { return it_submit(g_dir, sweep); }
static long long db_int(const char *sql, long long arg) { return it_db_int(g_home, sql, arg); }

static void db_text(const char *sql, long long arg, char *buf, size_t len) {
    it_db_text(g_home, sql, arg, buf, len);
}

static void wait_for(const char *what, const char *sql, long long arg, long long at_least,
                     double timeout) {
    it_db_wait(g_dir, g_home, what, sql, arg, at_least, timeout);
}

/* Every line of the trial's metrics.jsonl is stored once, seqs 1..N. */
static void check_exactly_once(long long trial, long long want_lines) {
    long long lines, values;
    it_metrics_file(g_home, trial, 0, &lines, &values);
    cr_assert_eq(lines, want_lines, "trial %lld: %lld lines in metrics.jsonl", trial, lines);
    cr_assert_eq(db_int("SELECT COUNT(*) FROM metrics WHERE trial = ?1", trial), values);
    cr_assert_eq(db_int("SELECT MIN(seq) FROM metrics WHERE trial = ?1", trial), 1);
    cr_assert_eq(db_int("SELECT MAX(seq) FROM metrics WHERE trial = ?1", trial), lines);
    cr_assert_eq(db_int("SELECT COUNT(DISTINCT seq) FROM metrics WHERE trial = ?1", trial), lines);
}

/* The Slurm job id bfd logged for the trial's first attempt. */
static void slurm_job_of(long long trial, char *id, size_t len) {
    char p[512], line[1024], want[96];
    snprintf(p, sizeof p, "%s/bfd.log", g_dir);
    snprintf(want, sizeof want, "trial %lld attempt 1: submitted to Slurm as job ", trial);
    FILE *f = fopen(p, "r");
    cr_assert(f);
    id[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        char *s = strstr(line, want);
        if (s)
            snprintf(id, len, "%.*s", (int)strspn(s + strlen(want), "0123456789_"),
                     s + strlen(want));
    }
    fclose(f);
    cr_assert(id[0], "bfd.log has no Slurm job for trial %lld", trial);
}

static void slurm_state(const char *id, slurm_status *st) {
    char err[1024];
    cr_assert_eq(slurm_query("scontrol", id, st, err, sizeof err), 0, "%s", err);
}

TestSuite(slurm, .init = setup, .fini = teardown, .timeout = 150);

Test(slurm, sweep_completes_through_sbatch_and_srun) {
    slurm_up();
    start_bfd();
    double t0 = it_now_s();
    long long job = submit(write_sweep("two", 2, 30));
    cr_assert_eq(job, 1);
    cr_assert_eq(ctl(NULL, 0, "wait 1"), 0, "wait: a trial did not complete (see %s/bfd.log)",
                 g_dir);
    double took = it_now_s() - t0;
    cr_assert_eq(db_int("SELECT COUNT(*) FROM trials WHERE job = ?1 AND state = 'COMPLETED'"
                        " AND attempts = 1",
                        job),
                 2);
    for (long long t = 1; t <= 2; t++) {
        check_exactly_once(t, 30 / 5);
        char id[32], script[512], logp[512];
        slurm_job_of(t, id, sizeof id);
        slurm_status st;
        slurm_state(id, &st);
        cr_assert_str_eq(st.state, "COMPLETED", "Slurm job %s of trial %lld", id, t);
        cr_assert_eq(st.exit_code, 0);
        char cmd[256], name[128] = "";
        snprintf(cmd, sizeof cmd, "scontrol show job -o %s | grep -o 'JobName=[^ ]*'", id);
        FILE *pp = popen(cmd, "r");
        cr_assert(pp);
        if (!fgets(name, sizeof name, pp)) name[0] = '\0';
        pclose(pp);
        char want_name[64];
        snprintf(want_name, sizeof want_name, "JobName=bf-j%lld\n", job);
        cr_assert_str_eq(name, want_name, "Slurm job %s", id);
        /* the batch script bfd wrote, and the log Slurm appended to */
        snprintf(script, sizeof script, "%s/slurm/j%lld-t1-a1.tasks", g_home, job);
        struct stat sb;
        cr_assert_eq(stat(script, &sb), 0, "no %s", script);
        cr_assert_eq(sb.st_mode & 0777, 0600, "the manifest holds the tokens: mode 0600");
        snprintf(logp, sizeof logp, "%s/logs/%lld.log", g_home, t);
        char want[64];
        snprintf(want, sizeof want, "Slurm job %s on ", id);
        int header = it_count_lines_with(logp, want) > 0;
        cr_assert(header, "%s lacks the batch script's header for job %s", logp, id);
    }
    fprintf(stderr, "slurm sweep: 2 trials x 30 steps through sbatch/srun in %.1f s\n", took);
}

Test(slurm, cancel_of_a_running_slurm_trial) {
    slurm_up();
    start_bfd();
    long long job = submit(write_sweep("long", 1, 1000000));
    wait_for("points of the running trial", "SELECT COUNT(*) FROM metrics WHERE trial = ?1", 1, 3,
             60);
    char id[32];
    db_text("SELECT slurm_job FROM bfd_runs WHERE trial = ?1", 1, id, sizeof id);
    cr_assert(id[0], "bfd_runs has no Slurm job for the running trial");
    slurm_status st;
    slurm_state(id, &st);
    cr_assert_str_eq(st.state, "RUNNING");
    char out[8192];
    cr_assert_eq(ctl(out, sizeof out, "daemon status --json"), 0);
    cr_assert(strstr(out, id), "status does not show Slurm job %s: %s", id, out);
    cr_assert_eq(ctl(NULL, 0, "cancel t1"), 0);
    cr_assert_eq(ctl(NULL, 0, "wait 1"), 1, "wait must fail for a cancelled trial");
    char state[32];
    db_text("SELECT state FROM trials WHERE id = ?1", 1, state, sizeof state);
    cr_assert_str_eq(state, "CANCELLED");
    double t0 = it_now_s();
    for (;;) {
        slurm_state(id, &st);
        if (st.phase == SLURM_ENDED) break;
        cr_assert(it_now_s() - t0 < 20, "Slurm job %s still %s after cancel", id, st.state);
        it_sleep_s(0.2);
    }
    /* bfd forgets the run once Slurm says the job ended */
    t0 = it_now_s();
    while (db_int("SELECT COUNT(*) FROM bfd_runs WHERE trial = ?1", 1) != 0) {
        cr_assert(it_now_s() - t0 < 10, "bfd still holds the run of the cancelled trial");
        it_sleep_s(0.2);
    }
    cr_assert_eq(ctl(out, sizeof out, "daemon status"), 0, "bfd stopped serving");
    cr_assert(strstr(out, "slots 2 free of 2"), "%s", out);
    /* the worker checkpointed on the TERM before the kill */
    const char *logp = tmpdir_path(g_home, "logs/1.log");
    int checkpointed = it_count_lines_with(logp, "preempted: checkpoint written at step") > 0;
    cr_assert(checkpointed, "scancel --signal=TERM did not reach the worker (see %s)", logp);
    (void)job;
}

/* The Slurm job sbatch gave an attempt whose id bfd cannot record for crash
 * recovery (a trigger refuses every bfd_runs row that names a Slurm job)
 * must not run on unrecorded: a restarted bfd would take the attempt for
 * gone and start another beside it. bfd cancels the job at once and puts
 * the trial back to PENDING, no failure counted; once the row can be
 * written the trial completes. */
Test(slurm, a_job_whose_id_bfd_cannot_record_is_cancelled_and_pending_again) {
    slurm_up();
    start_bfd();
    it_db_exec(g_home,
               "CREATE TRIGGER refuse BEFORE INSERT ON bfd_runs WHEN NEW.slurm_job <> '' BEGIN"
               " SELECT RAISE(ABORT, 'bfd_runs refused by the test'); END");
    long long job = submit(write_sweep("unrecorded", 1, 30));
    wait_for("attempt 1 put back to PENDING",
             "SELECT COUNT(*) FROM attempts WHERE trial = ?1 AND n = 1 AND outcome = 'PREEMPTED'",
             1, 1, 60);
    char msg[2048], id[32];
    db_text("SELECT message FROM attempts WHERE trial = ?1 AND n = 1", 1, msg, sizeof msg);
    cr_assert(strstr(msg, "bfd_runs refused by the test"), "attempt 1: %s", msg);
    const char *s = strstr(msg, "Slurm job ");
    cr_assert(s, "attempt 1 names no Slurm job: %s", msg);
    s += strlen("Slurm job ");
    /* the array's own record: a task cancelled while pending is listed
     * under it alone (ArrayTaskId=4294967294), not as ID_0 */
    snprintf(id, sizeof id, "%.*s", (int)strspn(s, "0123456789"), s);
    slurm_status st;
    double t0 = it_now_s();
    for (;;) {
        slurm_state(id, &st);
        if (st.phase == SLURM_ENDED) break;
        cr_assert(it_now_s() - t0 < 30, "Slurm job %s still %s: not cancelled", id, st.state);
        it_sleep_s(0.2);
    }
    cr_assert_str_eq(st.state, "CANCELLED", "Slurm job %s", id);
    it_db_exec(g_home, "DROP TRIGGER refuse");
    char args[64];
    snprintf(args, sizeof args, "wait %lld", job);
    cr_assert_eq(ctl(NULL, 0, args), 0, "the trial did not complete (see %s/bfd.log)", g_dir);
    cr_assert_eq(db_int("SELECT COUNT(*) FROM attempts WHERE trial = ?1 AND outcome = 'FAILED'", 1),
                 0, "an unrecorded job counted as a failure");
}

/* A Slurm job whose batch script ended 0 while its completion is still on
 * its way (COMPLETING, exit code 0:0: here an Epilog that holds the job
 * until the test releases it) is not failed for the worker's silence: bfd
 * says it waits, and judges the attempt by Slurm's final state. The worker
 * is a stand-in that exits 0 at once and says nothing (its hello, points
 * and done all lost), so only Slurm's word can tell the attempt's end. */
Test(slurm, a_job_completing_with_exit_0_is_judged_by_its_final_state) {
    char epilog[400], release[400], worker[400], y[1024];
    snprintf(release, sizeof release, "%s/release", g_dir);
    snprintf(epilog, sizeof epilog, "%s/epilog", g_dir);
    /* bounded, so a failed test leaves no epilog behind */
    snprintf(y, sizeof y,
             "#!/bin/sh\ni=0\nwhile [ ! -e '%s' ] && [ $i -lt 1200 ]; do sleep 0.1; "
             "i=$((i + 1)); done\nexit 0\n",
             release);
    it_write_text(epilog, y, 0755);
    snprintf(worker, sizeof worker, "%s/silent-worker", g_dir);
    it_write_text(worker, "#!/bin/sh\nexit 0\n", 0755);
    setenv("SLURM_LOCAL_EPILOG", epilog, 1);
    slurm_up();
    unsetenv("SLURM_LOCAL_EPILOG");
    snprintf(y, sizeof y,
             "launcher: slurm\nslots: 2\nslurm_poll: 0.2\nheartbeat_timeout: 2\n"
             "heartbeat_interval: 0.2\nstartup_timeout: 2\nkill_grace: 3\nbfworker: %s\n",
             worker);
    it_write_text(tmpdir_path(g_home, "bfd.yaml"), y, 0644);
    start_bfd();
    long long job = submit(it_write_sweep(g_dir, "completing", 1, 30,
                                          "resources: {ranks: 1, time_limit: 10m}\nretries: 0\n"));
    const char *logp = tmpdir_path(g_dir, "bfd.log");
    double t0 = it_now_s();
    while (it_count_lines_with(logp, "is COMPLETING with exit code 0:0; waiting for its final "
                                     "state") == 0) {
        cr_assert(it_now_s() - t0 < 60, "bfd did not wait on the COMPLETING job (see %s)", logp);
        cr_assert_eq(
            db_int("SELECT COUNT(*) FROM attempts WHERE trial = ?1 AND ended IS NOT NULL", 1), 0,
            "the silent attempt was judged before Slurm's final word (see %s)", logp);
        it_sleep_s(0.1);
    }
    it_write_text(release, "", 0644);
    char args[64];
    snprintf(args, sizeof args, "wait %lld", job);
    cr_assert_eq(ctl(NULL, 0, args), 0, "the trial did not complete (see %s)", logp);
    cr_assert_eq(db_int("SELECT attempts FROM trials WHERE id = ?1", 1), 1);
    char id[32];
    slurm_job_of(1, id, sizeof id);
    slurm_status st;
    slurm_state(id, &st);
    cr_assert_str_eq(st.state, "COMPLETED", "Slurm job %s", id);
}

/* bfd.yaml with slots n (the Slurm launcher caps submitted ranks by it). */
static void set_slots(int n) {
    char y[256];
    snprintf(y, sizeof y,
             "launcher: slurm\nslots: %d\nslurm_poll: 0.5\nheartbeat_timeout: 60\n"
             "heartbeat_interval: 0.2\nkill_grace: 3\n",
             n);
    it_write_text(tmpdir_path(g_home, "bfd.yaml"), y, 0644);
}

/* The number of sbatch calls bfd made for job arrays, from its log. */
static int array_submits(void) {
    char p[512];
    snprintf(p, sizeof p, "%s/bfd.log", g_dir);
    return it_count_lines_with(p, "submitted as Slurm job array");
}

/* Slurm jobs (array tasks expanded) not ended: squeue -r. */
static long long slurm_live_tasks(void) {
    FILE *pp = popen("squeue -h -r -o %i 2>/dev/null | wc -l", "r");
    cr_assert(pp);
    long long n = -1;
    if (fscanf(pp, "%lld", &n) != 1) n = -1;
    pclose(pp);
    return n;
}

Test(slurm, sweep_goes_out_as_job_arrays_chunked_to_max_array_size) {
    setenv("SLURM_LOCAL_MAX_ARRAY", "16", 1);
    slurm_up();
    unsetenv("SLURM_LOCAL_MAX_ARRAY");
    set_slots(40);
    start_bfd();
    long long job = submit(write_sweep("forty", 40, 10));
    cr_assert_eq(ctl(NULL, 0, "wait 1"), 0, "wait: a trial did not complete (see %s/bfd.log)",
                 g_dir);
    cr_assert_eq(db_int("SELECT COUNT(*) FROM trials WHERE job = ?1 AND state = 'COMPLETED'"
                        " AND attempts = 1",
                        job),
                 40);
    /* 40 trials ready at once, MaxArraySize 16: arrays of 16, 16 and 8 */
    cr_assert_eq(array_submits(), 3, "sbatch calls for 40 trials, MaxArraySize 16 (see %s/bfd.log)",
                 g_dir);
    for (long long t = 1; t <= 40; t++) check_exactly_once(t, 10 / 5);
    char id[32];
    slurm_job_of(40, id, sizeof id);
    cr_assert(strchr(id, '_'), "trial 40 ran as %s, not as an array task", id);
    slurm_status st;
    slurm_state(id, &st);
    cr_assert_str_eq(st.state, "COMPLETED", "Slurm job %s of trial 40", id);
}

Test(slurm, cancel_of_a_job_cancels_its_arrays) {
    setenv("SLURM_LOCAL_MAX_ARRAY", "4", 1);
    slurm_up();
    unsetenv("SLURM_LOCAL_MAX_ARRAY");
    set_slots(8);
    start_bfd();
    submit(write_sweep("longs", 8, 1000000));
    wait_for("points of the running trial", "SELECT COUNT(*) FROM metrics WHERE trial = ?1", 1, 3,
             60);
    cr_assert_eq(array_submits(), 2);
    cr_assert_eq(slurm_live_tasks(), 8, "8 array tasks queued or running");
    cr_assert_eq(ctl(NULL, 0, "cancel 1"), 0);
    double t0 = it_now_s();
    while (slurm_live_tasks() != 0) {
        cr_assert(it_now_s() - t0 < 30, "%lld array tasks still live after cancel",
                  slurm_live_tasks());
        it_sleep_s(0.2);
    }
    cr_assert_eq(db_int("SELECT COUNT(*) FROM trials WHERE job = ?1 AND state = 'CANCELLED'", 1),
                 8);
    t0 = it_now_s();
    while (db_int("SELECT COUNT(*) FROM bfd_runs WHERE trial > ?1", 0) != 0) {
        cr_assert(it_now_s() - t0 < 20, "bfd still holds runs of the cancelled job");
        it_sleep_s(0.2);
    }
    char out[8192];
    cr_assert_eq(ctl(out, sizeof out, "daemon status"), 0, "bfd stopped serving");
    cr_assert(strstr(out, "slots 8 free of 8"), "%s", out);
    const char *logp = tmpdir_path(g_home, "logs/1.log");
    int checkpointed = it_count_lines_with(logp, "preempted: checkpoint written at step") > 0;
    cr_assert(checkpointed, "scancel --signal=TERM of the array did not reach trial 1 (%s)", logp);
}

/* One `status` request over a DEALER on bfd's control socket, as a client
 * library would send it: the round trip in seconds (bfd's part alone, no
 * bfctl process start). */
static double status_rtt(void *s) {
    const char *f[] = {"bf", "1", "status", "{\"running_max\": 100}"};
    double t0 = it_now_s();
    for (int i = 0; i < 4; i++)
        cr_assert_geq(zmq_send(s, f[i], strlen(f[i]), i < 3 ? ZMQ_SNDMORE : 0), 0);
    char type[64] = "";
    int more = 1;
    for (int k = 0; more; k++) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        cr_assert_geq(zmq_msg_recv(&m, s, 0), 0, "no status reply within 10 s");
        if (k == 2)
            snprintf(type, sizeof type, "%.*s", (int)zmq_msg_size(&m), (char *)zmq_msg_data(&m));
        more = zmq_msg_more(&m);
        zmq_msg_close(&m);
    }
    cr_assert_str_eq(type, "status");
    return it_now_s() - t0;
}

typedef struct lat {
    int n;
    double sum, worst;
} lat;

static void lat_add(lat *l, double s) {
    l->n++;
    l->sum += s;
    if (s > l->worst) l->worst = s;
}

/* A 2,000-trial sweep: the time from `bfctl submit` to every task queued in
 * Slurm, and how long a status request takes meanwhile, on the socket and
 * as a whole `bfctl daemon status` (printed against the idle daemon's, not
 * asserted: timing is for benchmarks). */
Test(slurm, two_thousand_trials_queue_as_two_arrays, .timeout = 400) {
    slurm_up();
    set_slots(2000);
    start_bfd();
    void *zctx = zmq_ctx_new();
    void *s = zmq_socket(zctx, ZMQ_DEALER);
    int to = 10000, zero = 0;
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &to, sizeof to);
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    char ep[1200];
    snprintf(ep, sizeof ep, "ipc://%s/ctl.sock", g_home);
    cr_assert_eq(zmq_connect(s, ep), 0);
    lat idle = {0}, idle_ctl = {0}, busy = {0}, busy_ctl = {0};
    for (int i = 0; i < 40; i++) lat_add(&idle, status_rtt(s));
    for (int i = 0; i < 10; i++) {
        double s0 = it_now_s();
        cr_assert_eq(ctl(NULL, 0, "daemon status --json"), 0);
        lat_add(&idle_ctl, it_now_s() - s0);
    }
    const char *sweep = write_sweep("big", 2000, 1000000);
    double t0 = it_now_s();
    submit(sweep);
    double submitted = it_now_s() - t0;
    int k = 0;
    while (db_int("SELECT COUNT(*) FROM bfd_runs WHERE slurm_job != '' AND trial > ?1", 0) < 2000) {
        cr_assert(it_now_s() - t0 < 240, "not all 2000 trials queued after 240 s (see %s/bfd.log)",
                  g_dir);
        lat_add(&busy, status_rtt(s));
        if (k++ % 4 == 0) {
            double s0 = it_now_s();
            cr_assert_eq(ctl(NULL, 0, "daemon status --json"), 0);
            lat_add(&busy_ctl, it_now_s() - s0);
        }
    }
    double queued = it_now_s() - t0;
    /* and while 2,000 queued attempts are polled */
    for (int i = 0; i < 40; i++) {
        lat_add(&busy, status_rtt(s));
        it_sleep_s(0.05);
    }
    zmq_close(s);
    zmq_ctx_term(zctx);
    long long live = slurm_live_tasks();
    cr_assert_eq(live, 2000, "Slurm holds %lld tasks", live);
    cr_assert_eq(array_submits(), 2, "2000 trials, MaxArraySize 1001: two sbatch calls");
    fprintf(stderr,
            "slurm arrays: 2000 trials: submit acknowledged %.2f s, all queued %.2f s after "
            "bfctl submit, 2 sbatch calls\n"
            "status on the socket: idle %d calls mean %.1f ms max %.1f ms; while submitting and "
            "polling %d calls mean %.1f ms max %.1f ms\n"
            "bfctl daemon status (whole process): idle %d calls mean %.1f ms max %.1f ms; while "
            "submitting %d calls mean %.1f ms max %.1f ms\n",
            submitted, queued, idle.n, idle.sum / idle.n * 1e3, idle.worst * 1e3, busy.n,
            busy.sum / busy.n * 1e3, busy.worst * 1e3, idle_ctl.n, idle_ctl.sum / idle_ctl.n * 1e3,
            idle_ctl.worst * 1e3, busy_ctl.n, busy_ctl.n ? busy_ctl.sum / busy_ctl.n * 1e3 : 0,
            busy_ctl.worst * 1e3);
    cr_assert_eq(ctl(NULL, 0, "cancel 1"), 0);
    double c0 = it_now_s();
    while (slurm_live_tasks() != 0) {
        cr_assert(it_now_s() - c0 < 60, "array tasks still live after cancel");
        it_sleep_s(0.5);
    }
}
