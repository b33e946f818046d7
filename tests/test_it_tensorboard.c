/* test_it_tensorboard — bf's TensorBoard files as TensorBoard reads them.
 * A real bfd runs a real 4-trial sweep (two swept keys, one of them a list)
 * and is killed with SIGKILL while the trials stream points, then started
 * again; once the job is done, tests/test_it_tensorboard.py reads
 * $BF_HOME/tensorboard with the `tensorboard` package's event reader and
 * checks every scalar against the store (no point lost, none twice) and
 * the HParams experiment and sessions; a real TensorBoard server then shows
 * every trial as an HParams session. The same check runs on the files of
 * `bfctl export JOB --tensorboard DIR`, and on a standalone
 * `bfworker train` run folder against its metrics.jsonl.
 *
 * The Python packages come from build/pydeps (scripts/setup.sh pip-installs
 * them there); without them the test fails, naming the fix. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "it_bfd.h"

#define PYTHON "/usr/bin/python3"
#define PYDEPS BF_BIN_DIR "/pydeps"
#define SCRIPT BF_SOURCE_DIR "/tests/test_it_tensorboard.py"

static char g_dir[256], g_home[320];
static pid_t g_bfd = -1;

static void setup(void) {
    it_worker_env();
    it_bfd_home(g_dir, sizeof g_dir, g_home, sizeof g_home, "/tmp/bf-tb-XXXXXX");
    it_copy_glosses(g_dir);
    it_write_text(tmpdir_path(g_home, "bfd.yaml"),
                  "slots: 2\nthreads_per_slot: 1\nheartbeat_timeout: 30\n", 0644);
    setenv("PYTHONPATH", PYDEPS, 1);
}

static void teardown(void) {
    it_stop(&g_bfd, SIGKILL);
    if (getenv("BF_TEST_KEEP"))
        fprintf(stderr, "kept %s\n", g_dir);
    else if (tmpdir_remove(g_dir))
        fprintf(stderr, "could not remove %s\n", g_dir);
}

TestSuite(tensorboard, .init = setup, .fini = teardown, .timeout = 400);

/* Runs the checker with args; its output goes to dir/py.log (shown). */
static void check(const char *what, const char *args) {
    char cmd[2048], logp[512];
    snprintf(logp, sizeof logp, "%s/py.log", g_dir);
    snprintf(cmd, sizeof cmd, "%s %s %s > %s 2>&1", PYTHON, SCRIPT, args, logp);
    int st = system(cmd);
    it_show_tail(logp, 3000);
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!ok) it_show_tail(tmpdir_path(g_dir, "bfd.log"), 6000);
    cr_assert(ok, "%s: the TensorBoard reader disagrees", what);
}

static void require_tensorboard(void) {
    int st = system(PYTHON " -c 'import tensorboard, prometheus_client' 2>/dev/null");
    cr_assert_eq(st, 0,
                 "%s cannot import tensorboard from %s: run sh scripts/setup.sh (it pip-installs "
                 "tensorboard and prometheus_client there)",
                 PYTHON, PYDEPS);
}

Test(tensorboard, sweep_files_equal_the_store_across_a_bfd_kill) {
    require_tensorboard();
    g_bfd = it_bfd_start(g_dir, g_home);
    char sweep[512];
    snprintf(sweep, sizeof sweep, "%s/tb.yaml", g_dir);
    FILE *f = fopen(sweep, "w");
    cr_assert(f);
    fprintf(f,
            "name: tb-sweep\npipeline: budgetformer\ndevice: cpu\n"
            "data: {train: %s/train.tsv, val: %s/val.tsv}\n"
            "model: {layers: 1, d_model: 32, heads: 4, seq_len: 16, vocab: 256}\n"
            "train: {steps: 300, batch: 8, log_every: 5, eval_every: 100, checkpoint_every: 50}\n"
            "sweep:\n  parameters:\n"
            "    budget.range: {values: [[0.1, 0.5], [0.5, 1.0]]}\n"
            "    train.seed: {values: [1, 2]}\n"
            "metric: {name: val/acc, goal: max}\nretries: 2\n",
            g_dir, g_dir);
    cr_assert_eq(fclose(f), 0);
    long long job = it_submit(g_dir, sweep);
    cr_assert(job >= 1);
    /* kill bfd while points stream in, then start it again */
    it_db_wait(g_dir, g_home, "the first points", "SELECT count(*) FROM metrics WHERE ?1 > 0", 1,
               12, 120);
    it_stop(&g_bfd, SIGKILL);
    it_sleep_s(0.5);
    g_bfd = it_bfd_start(g_dir, g_home);
    char args[1000];
    snprintf(args, sizeof args, "wait %lld", job);
    int wrc = it_bfctl(g_dir, NULL, 0, args);
    if (wrc) it_show_tail(tmpdir_path(g_dir, "bfd.log"), 6000);
    cr_assert_eq(wrc, 0, "job %lld did not complete", job);

    char db[360], tb[360];
    snprintf(db, sizeof db, "%s/bf.db", g_home);
    snprintf(tb, sizeof tb, "%s/tensorboard", g_home);
    snprintf(args, sizeof args, "store %s %s %lld", db, tb, job);
    check("bfd's files", args);
    snprintf(args, sizeof args, "server %s %lld", tb, job);
    check("TensorBoard's HParams view", args);

    /* the same from the store, for an old job */
    snprintf(args, sizeof args, "export %lld --tensorboard %s/export", job, g_dir);
    char out[2048];
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, args), 0, "bfctl %s failed", args);
    snprintf(args, sizeof args, "store %s %s/export %lld", db, g_dir, job);
    check("bfctl export --tensorboard", args);
    /* exporting again into the same folder is refused, not mixed in */
    snprintf(args, sizeof args, "export %lld --tensorboard %s/export", job, g_dir);
    cr_assert_neq(it_bfctl(g_dir, NULL, 0, args), 0, "a second export over the first");
}

Test(tensorboard, bfworker_train_writes_its_run_folder) {
    require_tensorboard();
    char cfg[512], run[512];
    snprintf(cfg, sizeof cfg, "%s/one.yaml", g_dir);
    snprintf(run, sizeof run, "%s/run", g_dir);
    FILE *f = fopen(cfg, "w");
    cr_assert(f);
    fprintf(f,
            "pipeline: budgetformer\ndevice: cpu\n"
            "data: {train: %s/train.tsv, val: %s/val.tsv}\n"
            "model: {layers: 1, d_model: 32, heads: 4, seq_len: 16, vocab: 256}\n"
            "train: {steps: 40, batch: 8, log_every: 5, eval_every: 20}\n",
            g_dir, g_dir);
    cr_assert_eq(fclose(f), 0);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/bfworker train %s --out %s --quiet > %s/train.log 2>&1",
             BF_BIN_DIR, cfg, run, g_dir);
    int st = system(cmd);
    if (st) it_show_tail(tmpdir_path(g_dir, "train.log"), 3000);
    cr_assert_eq(st, 0, "bfworker train failed");
    char args[700];
    snprintf(args, sizeof args, "jsonl %s", run);
    check("bfworker train's run folder", args);
}

/* The README's TensorBoard command runs as written after scripts/setup.sh
 * (it used to be `tensorboard --logdir`, and setup.sh puts no tensorboard
 * on PATH): its words up to --logdir, with build/ as this build folder,
 * must run `--help`. */
Test(tensorboard, the_readme_command_runs) {
    require_tensorboard();
    FILE *f = fopen(BF_SOURCE_DIR "/README.md", "r");
    cr_assert_not_null(f);
    char line[1024], cmd[2048] = "";
    while (!cmd[0] && fgets(line, sizeof line, f)) {
        char *at = strstr(line, " --logdir ");
        if (!at) continue;
        *at = '\0';
        const char *start = line + strspn(line, " ");
        char *b = strstr(start, "build/pydeps");
        if (b)
            snprintf(cmd, sizeof cmd, "env -u PYTHONPATH %.*s%s%s --help >/dev/null 2>&1",
                     (int)(b - start), start, PYDEPS, b + strlen("build/pydeps"));
        else
            snprintf(cmd, sizeof cmd, "env -u PYTHONPATH %s --help >/dev/null 2>&1", start);
    }
    fclose(f);
    cr_assert(cmd[0], "README.md has no command with --logdir");
    int st = system(cmd);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the README's command fails: %s", cmd);
}
