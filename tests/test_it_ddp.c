/* Data-parallel training end to end: real bfworker processes under real
 * mpirun (2 ranks, CPU), real signals. Tiny models on a shipped fixture of
 * WordNet glosses (tests/data/glosses_*.tsv), so each case runs in seconds.
 *   - 2 ranks with global batch B follow 1 rank's loss trajectory (budget
 *     off, budget on without noise, lm);
 *   - SIGTERM at a random step, then --resume, ends bit-identical to an
 *     uninterrupted run (1 rank; and 2 ranks with the signal sent to one);
 *   - damaged, truncated, foreign checkpoints and a changed config are refused;
 *   - a SIGKILLed rank ends the job; a stopped rank trips the others'
 *     collective timeout (exit 69). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "it_proc.h"
#include "worker/io/safetensors.h"

#define BFWORKER BF_BIN_DIR "/bfworker"
#define TIMEOUT_RC (-1000)

static char g_dir[256];

/* Process groups started by this test; teardown kills whatever is left of
 * them, so a failed assertion never leaves ranks training in the background. */
static pid_t g_spawned[64];
static int g_nspawned;

static void setup(void) {
    it_worker_env();
    tmpdir_make(g_dir, sizeof g_dir, "/tmp/bf-ddp-XXXXXX");
    it_copy_glosses(g_dir);
    char p[512];
    /* an lm corpus: the gloss texts, one per line */
    char src[512];
    snprintf(src, sizeof src, "%s/train.tsv", g_dir);
    snprintf(p, sizeof p, "%s/corpus.txt", g_dir);
    FILE *a = fopen(src, "r"), *b = fopen(p, "w");
    cr_assert(a && b);
    char line[4096];
    while (fgets(line, sizeof line, a)) {
        char *tab = strchr(line, '\t');
        if (tab) fputs(tab + 1, b);
    }
    fclose(a);
    fclose(b);
    /* budgetformer (classifier) and lm configs */
    snprintf(p, sizeof p, "%s/cls.yaml", g_dir);
    b = fopen(p, "w");
    fprintf(b,
            "pipeline: budgetformer\ndevice: cpu\n"
            "data: {train: %s/train.tsv, val: %s/val.tsv}\n"
            "model: {layers: 2, d_model: 32, heads: 4, seq_len: 16, vocab: 300}\n"
            "budget: {enabled: false}\n"
            "train: {steps: 20, batch: 8, lr: 2.0e-3, warmup: 2, seed: 3, eval_every: 10,\n"
            "        checkpoint_every: 0, log_every: 1}\n",
            g_dir, g_dir);
    fclose(b);
    snprintf(p, sizeof p, "%s/lm.yaml", g_dir);
    b = fopen(p, "w");
    fprintf(b,
            "pipeline: lm\ndevice: cpu\n"
            "data: {path: %s/corpus.txt, val_fraction: 0.1}\n"
            "model: {layers: 1, d_model: 32, heads: 4, seq_len: 16, vocab: 300}\n"
            "train: {steps: 20, batch: 8, lr: 2.0e-3, warmup: 2, seed: 3, eval_every: 10,\n"
            "        checkpoint_every: 0, log_every: 1}\n",
            g_dir);
    fclose(b);
}

static void teardown(void) {
    for (int i = 0; i < g_nspawned; i++) {
        kill(-g_spawned[i], SIGCONT);
        kill(-g_spawned[i], SIGKILL);
    }
    g_nspawned = 0;
    if (tmpdir_remove(g_dir)) fprintf(stderr, "could not remove %s\n", g_dir);
}

/* Starts argv with stdout and stderr appended to log, in a process group of
 * its own (so teardown can end it and all it started); returns the pid. */
static pid_t spawn(const char *log, char *const argv[]) {
    pid_t pid = it_spawn(log, argv, 1);
    if (g_nspawned < (int)(sizeof g_spawned / sizeof g_spawned[0])) g_spawned[g_nspawned++] = pid;
    return pid;
}

/* Exit status of pid, -signal when killed, TIMEOUT_RC (after SIGKILL) when
 * it ran longer than timeout seconds. */
static int wait_for(pid_t pid, double timeout) {
    int st;
    int r = it_wait_pid(pid, timeout, &st);
    if (r < 0) return -9999;
    if (r > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        return TIMEOUT_RC;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}

static int run(const char *log, double timeout, char *const argv[]) {
    return wait_for(spawn(log, argv), timeout);
}

/* Builds "bfworker train CFG --out DIR --quiet [extra...]", under
 * "mpirun --oversubscribe -np 2" when ranks is 2. */
static int train_argv(char **argv, int ranks, const char *cfg, const char *out, char **extra) {
    static char cfg_path[512], out_path[512];
    snprintf(cfg_path, sizeof cfg_path, "%s/%s", g_dir, cfg);
    snprintf(out_path, sizeof out_path, "%s/%s", g_dir, out);
    int n = 0;
    if (ranks > 1) {
        argv[n++] = "mpirun";
        argv[n++] = "--oversubscribe";
        argv[n++] = "-np";
        argv[n++] = ranks == 2 ? "2" : "1";
    }
    argv[n++] = BFWORKER;
    argv[n++] = "train";
    argv[n++] = cfg_path;
    argv[n++] = "--out";
    argv[n++] = out_path;
    argv[n++] = "--quiet";
    for (char **e = extra; e && *e; e++) argv[n++] = *e;
    argv[n] = NULL;
    return n;
}

static void log_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s.log", g_dir, name);
}

/* train/loss of every metrics line that has one, in order. */
static int read_losses(const char *out, double *loss, int cap) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s/metrics.jsonl", g_dir, out);
    char *s = it_slurp(p, NULL);
    cr_assert(s, "no %s", p);
    int n = 0;
    for (char *l = s; l && *l && n < cap;) {
        char *q = strstr(l, "\"train/loss\": ");
        char *e = strchr(l, '\n');
        if (q && (!e || q < e)) loss[n++] = strtod(q + 14, NULL);
        l = e ? e + 1 : NULL;
    }
    free(s);
    return n;
}

/* Runs cfg on 1 and on 2 ranks and compares train/loss step by step. */
static void check_equal_trajectory(const char *cfg, char **extra, const char *tag) {
    char *argv[40], log[512], o1[64], o2[64];
    snprintf(o1, sizeof o1, "%s-r1", tag);
    snprintf(o2, sizeof o2, "%s-r2", tag);
    log_path(log, sizeof log, tag);
    train_argv(argv, 1, cfg, o1, extra);
    cr_assert_eq(run(log, 60, argv), 0, "1-rank run failed (see %s)", log);
    train_argv(argv, 2, cfg, o2, extra);
    cr_assert_eq(run(log, 60, argv), 0, "2-rank run failed (see %s)", log);
    double a[64], b[64];
    int na = read_losses(o1, a, 64), nb = read_losses(o2, b, 64);
    cr_assert_eq(na, 20, "%s: %d loss points from 1 rank, expected 20", tag, na);
    cr_assert_eq(nb, 20, "%s: %d loss points from 2 ranks, expected 20", tag, nb);
    double worst = 0;
    for (int i = 0; i < 20; i++) {
        double rel = fabs(a[i] - b[i]) / fmax(fabs(a[i]), 1e-12);
        cr_assert(rel <= 1e-5, "%s step %d: loss %.9g (1 rank) vs %.9g (2 ranks), rel %.3g", tag,
                  i + 1, a[i], b[i], rel);
        if (rel > worst) worst = rel;
    }
    /* the trajectory must move, or equality says nothing */
    cr_assert(fabs(a[0] - a[19]) > 1e-3, "%s: loss did not change over 20 steps", tag);
    cr_log_info("%s: 20 steps, worst relative difference %.3g", tag, worst);
}

TestSuite(ddp, .init = setup, .fini = teardown, .timeout = 120);

Test(ddp, two_ranks_match_one_rank_budget_off) { check_equal_trajectory("cls.yaml", NULL, "off"); }

/* Budget on with Gumbel noise: the noise is indexed by the global row
 * (model_knobs.row_offset), so 2 ranks draw exactly the noise 1 rank draws. */
Test(ddp, two_ranks_match_one_rank_budget_on_with_noise) {
    char *extra[] = {"--set", "budget.enabled=true", "--set",
                     "budget.noise={schedule: constant, start: 1.0, end: 1.0}", NULL};
    check_equal_trajectory("cls.yaml", extra, "budget");
}

/* lm: gradients are weighted by each rank's counted target tokens. */
Test(ddp, two_ranks_match_one_rank_lm) { check_equal_trajectory("lm.yaml", NULL, "lm"); }

/* Every tensor of a run's checkpoint set (parameters, then the AdamW
 * moments), as bytes: two sets are the same state when these agree. (The
 * files' metadata differ by design: each save has its own set id.) */
static unsigned char *read_ckpt(const char *out, size_t *len) {
    static const char *const files[] = {"model.safetensors", "optimizer.safetensors"};
    unsigned char *all = NULL;
    *len = 0;
    for (int k = 0; k < 2; k++) {
        char p[512], err[1024];
        snprintf(p, sizeof p, "%s/%s/%s", g_dir, out, files[k]);
        st_file f;
        cr_assert_eq(st_open(&f, p, err, sizeof err), 0, "no checkpoint: %s", err);
        for (int i = 0; i < f.n; i++) {
            size_t n = f.t[i].numel;
            all = realloc(all, *len + n * sizeof(float));
            cr_assert_not_null(all);
            cr_assert_eq(st_read_f32(&f, i, (float *)(all + *len), err, sizeof err), 0, "%s", err);
            *len += n * sizeof(float);
        }
        st_close(&f);
    }
    return all;
}

/* Pid of a bfworker rank under mpirun pid, or 0. */
static pid_t rank_pid(pid_t mpirun) {
    pid_t found = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d)) && !found) {
        char p[300];
        snprintf(p, sizeof p, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(p, "r");
        if (!f) continue;
        int cpid = 0, ppid = 0;
        char comm[64], state;
        if (fscanf(f, "%d %63s %c %d", &cpid, comm, &state, &ppid) == 4 && ppid == mpirun &&
            strstr(comm, "bfworker"))
            found = cpid;
        fclose(f);
    }
    if (d) closedir(d);
    return found;
}

/* Interrupts a run with SIGTERM once `after` steps are logged (to one rank
 * when ranks = 2), expects exit 75, resumes, and compares the final
 * checkpoint with an uninterrupted run's. */
static void check_resume_identical(int ranks, int after, const char *tag) {
    char *extra[] = {"--set", "train.steps=400", "--set", "train.eval_every=0", NULL};
    char *argv[40], log[512], full[64], cut[64], metrics[512];
    snprintf(full, sizeof full, "%s-full", tag);
    snprintf(cut, sizeof cut, "%s-cut", tag);
    log_path(log, sizeof log, tag);
    train_argv(argv, ranks, "cls.yaml", full, extra);
    cr_assert_eq(run(log, 60, argv), 0, "uninterrupted run failed (see %s)", log);

    train_argv(argv, ranks, "cls.yaml", cut, extra);
    pid_t pid = spawn(log, argv);
    snprintf(metrics, sizeof metrics, "%s/%s/metrics.jsonl", g_dir, cut);
    double end = it_now_s() + 60;
    while (it_count_lines(metrics) < after && it_now_s() < end) it_sleep_s(0.001);
    pid_t target = pid;
    if (ranks > 1) {
        /* one rank only: a child of mpirun */
        target = rank_pid(pid);
        cr_assert(target > 0, "no rank process under mpirun %d", (int)pid);
    }
    kill(target, SIGTERM);
    int rc = wait_for(pid, 60);
    cr_assert_eq(rc, 75, "%s: SIGTERM after %d steps: exit %d, expected 75 (preempted; see %s)",
                 tag, after, rc, log);
    int logged = it_count_lines(metrics);
    cr_assert(logged < 400, "%s: the run finished before the signal (%d steps)", tag, logged);

    char *rextra[] = {"--set", "train.steps=400", "--set", "train.eval_every=0", "--resume", NULL};
    train_argv(argv, ranks, "cls.yaml", cut, rextra);
    cr_assert_eq(run(log, 60, argv), 0, "resumed run failed (see %s)", log);
    size_t la = 0, lb = 0;
    unsigned char *a = read_ckpt(full, &la), *b = read_ckpt(cut, &lb);
    cr_assert_eq(la, lb, "checkpoint sizes differ: %zu vs %zu", la, lb);
    /* params, m, v: compare all of it */
    size_t first = la;
    for (size_t i = 0; i < la; i++)
        if (a[i] != b[i]) {
            first = i;
            break;
        }
    cr_assert_eq(first, la,
                 "%s: resumed checkpoint differs from the uninterrupted one at byte %zu of %zu",
                 tag, first, la);
    cr_log_info("%s: stopped after step ~%d, resumed, final checkpoints identical (%zu bytes)", tag,
                logged, la);
    free(a);
    free(b);
}

Test(ddp, sigterm_then_resume_is_bit_identical_one_rank) {
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    check_resume_identical(1, 5 + rand() % 150, "term1");
}

Test(ddp, sigterm_to_one_of_two_ranks_then_resume_is_bit_identical) {
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    check_resume_identical(2, 5 + rand() % 100, "term2");
}

/* Expects --resume to fail with a message containing want. */
static void expect_refused(const char *tag, const char *want, char **extra) {
    char *argv[40], log[512];
    log_path(log, sizeof log, tag);
    train_argv(argv, 1, "cls.yaml", "ck", extra);
    int rc = run(log, 60, argv);
    char *text = it_slurp(log, NULL);
    cr_assert_eq(rc, 1, "%s: exit %d, expected 1; log: %s", tag, rc, text ? text : "");
    cr_assert(text && strstr(text, want), "%s: message lacks '%s'; log: %s", tag, want,
              text ? text : "");
    free(text);
}

/* Overwrites path with len bytes of data. */
static void put_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    fwrite(data, 1, len, f);
    fclose(f);
}

Test(ddp, damaged_checkpoints_are_refused) {
    char *argv[40], log[512], path[512], bak[512], state[512], sbak[512];
    log_path(log, sizeof log, "ck");
    train_argv(argv, 1, "cls.yaml", "ck", NULL);
    cr_assert_eq(run(log, 60, argv), 0);
    snprintf(path, sizeof path, "%s/ck/model.safetensors", g_dir);
    snprintf(bak, sizeof bak, "%s/ck.bak", g_dir);
    snprintf(state, sizeof state, "%s/ck/state.json", g_dir);
    snprintf(sbak, sizeof sbak, "%s/state.bak", g_dir);
    it_copy_file(path, bak);
    it_copy_file(state, sbak);
    size_t len = 0, slen = 0;
    unsigned char *good = (unsigned char *)it_slurp(path, &len);
    char *sgood = it_slurp(state, &slen);
    char *resume[] = {"--resume", NULL};

    /* one flipped bit in the parameters */
    unsigned char *bad = malloc(len);
    memcpy(bad, good, len);
    bad[len - 64] ^= 0x01;
    put_file(path, bad, len);
    expect_refused("flip-payload", "data checksum mismatch", resume);

    /* truncated */
    put_file(path, good, len - 1000);
    expect_refused("truncated", "model.safetensors", resume);
    put_file(path, good, 4);
    expect_refused("truncated-header", "truncated", resume);

    /* foreign file */
    FILE *f = fopen(path, "wb");
    for (int i = 0; i < 4096; i++) fputc("not a checkpoint\n"[i % 17], f);
    fclose(f);
    expect_refused("foreign", "model.safetensors", resume);

    /* a state.json that is not JSON, and one of another save (torn set) */
    it_copy_file(bak, path);
    put_file(state, "{\"format\": ", 12);
    expect_refused("state-json", "state.json", resume);
    char *torn = strdup(sgood), *id = strstr(torn, "\"set_id\"");
    cr_assert_not_null(id, "state.json has no set_id: %s", sgood);
    char *q = strchr(id + 9, '"');
    cr_assert_not_null(q);
    q[1] = q[1] == '0' ? '1' : '0'; /* another set's id */
    put_file(state, torn, slen);
    expect_refused("torn", "set", resume);
    free(torn);

    /* intact set, other config */
    it_copy_file(sbak, state);
    char *other[] = {"--resume", "--set", "model.d_model=64", NULL};
    expect_refused("config-shape", "another model", other);
    char *lr[] = {"--resume", "--set", "train.lr=0.5", NULL};
    expect_refused("config", "train.lr is 0.002 in the checkpoint but 0.5 now", lr);
    /* a key that does not change the trajectory may differ */
    char *logs[] = {"--resume", "--set", "train.log_every=5", NULL};
    train_argv(argv, 1, "cls.yaml", "ck", logs);
    cr_assert_eq(run(log, 60, argv), 0, "resume with another log_every was refused (see %s)", log);
    free(good);
    free(bad);
    free(sgood);
}

/* Starts a long 2-rank run and waits until it trains. */
static pid_t start_long_run(const char *tag, char *timeout) {
    char *extra[] = {
        "--set", "train.steps=1000000", "--set", "train.eval_every=0", "--comm-timeout", timeout,
        NULL};
    char *argv[40], log[512], out[64], metrics[512];
    snprintf(out, sizeof out, "%s", tag);
    log_path(log, sizeof log, tag);
    train_argv(argv, 2, "cls.yaml", out, extra);
    pid_t pid = spawn(log, argv);
    snprintf(metrics, sizeof metrics, "%s/%s/metrics.jsonl", g_dir, out);
    double end = it_now_s() + 60;
    while (it_count_lines(metrics) < 5 && it_now_s() < end) it_sleep_s(0.01);
    cr_assert(it_count_lines(metrics) >= 5, "the 2-rank run did not start training");
    return pid;
}

Test(ddp, killed_rank_ends_the_job) {
    pid_t pid = start_long_run("kill", "600");
    pid_t victim = rank_pid(pid);
    cr_assert(victim > 0);
    double t0 = it_now_s();
    kill(victim, SIGKILL);
    int rc = wait_for(pid, 30);
    double took = it_now_s() - t0;
    cr_assert_neq(rc, TIMEOUT_RC, "the job hung for 30 s after a rank was killed");
    cr_assert_neq(rc, 0, "the job exited 0 after a rank was killed");
    cr_log_info("SIGKILL of one rank: mpirun exited %d after %.2f s", rc, took);
}

/* A rank that stops answering (SIGSTOP: alive, so mpirun sees nothing) trips
 * the other rank's collective timeout: it exits 69 and mpirun ends the job. */
Test(ddp, hung_rank_trips_the_collective_timeout) {
    pid_t pid = start_long_run("hang", "2");
    pid_t victim = rank_pid(pid);
    cr_assert(victim > 0);
    double t0 = it_now_s();
    kill(victim, SIGSTOP);
    int rc = wait_for(pid, 30);
    double took = it_now_s() - t0;
    kill(victim, SIGKILL); /* in case mpirun left it */
    char log[512];
    log_path(log, sizeof log, "hang");
    char *text = it_slurp(log, NULL);
    cr_assert_neq(rc, TIMEOUT_RC, "the job hung for 30 s with a stopped rank");
    cr_assert_neq(rc, 0);
    cr_assert(text && strstr(text, "has not completed after 2 s"), "no timeout message; log: %s",
              text ? text : "");
    free(text);
    cr_log_info("stopped rank: mpirun exited %d after %.2f s", rc, took);
}
