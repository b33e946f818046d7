/* test_it_bfctl_results — `bfctl results` and `bfctl export` against a real
 * bfd. The trials' workers are played by this test over the real worker
 * protocol: bfd.yaml points `bfworker` at a script that records the command
 * line bfd built (trial id and per-attempt token) and exits with the status
 * the test writes to exit.TRIAL, so every metric value is one the test chose
 * and the numbers printed can be checked exactly.
 *
 * Checks: the results table (accuracy from test/acc, else the latest
 * val/acc; heads used likewise; the best trial by the job's metric marked),
 * its --json; export --json (the documented shape, metrics in (seq, name)
 * order, exact values) and --csv; a job too large for one `export` reply
 * (150,000 values) exported page by page, complete and in order; usage
 * errors; the message when no bfd is running. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "it_bfd.h"
#include "protocol/proto.h"

static char g_dir[256], g_home[320];
static pid_t g_bfd = -1;

static void setup(void) {
    it_bfd_home(g_dir, sizeof g_dir, g_home, sizeof g_home, "/tmp/bf-results-XXXXXX");
    char p[512], text[2048];
    snprintf(p, sizeof p, "%s/fake_worker", g_dir);
    snprintf(text, sizeof text,
             "#!/bin/sh\n"
             "# stands in for `bfworker run`: records its command line, then exits\n"
             "# with the status the test writes to exit.TRIAL\n"
             "trial=''; prev=''\n"
             "for a in \"$@\"; do [ \"$prev\" = --trial ] && trial=$a; prev=$a; done\n"
             "f='%s/launch.'$trial\n"
             "printf '%%s\\n' \"$@\" > \"$f.tmp\" && mv \"$f.tmp\" \"$f\"\n"
             "while [ ! -e '%s/exit.'$trial ]; do sleep 0.05; done\n"
             "exit \"$(cat '%s/exit.'$trial)\"\n",
             g_dir, g_dir, g_dir);
    it_write_text(p, text, 0700);
    snprintf(text, sizeof text, "slots: 4\nheartbeat_timeout: 120\nbfworker: %s/fake_worker\n",
             g_dir);
    snprintf(p, sizeof p, "%s/bfd.yaml", g_home);
    it_write_text(p, text, 0600);
    unsetenv("BF_ENDPOINT");

    char log[512];
    snprintf(log, sizeof log, "%s/bfd.log", g_dir);
    char *argv[] = {IT_BFD, NULL};
    g_bfd = it_spawn(log, argv, 0);
    if (it_wait_file(tmpdir_path(g_home, "ctl.sock"), g_bfd, 10) != 0) {
        it_show_tail(log, 4000);
        cr_assert_fail("bfd did not start");
    }
}

static void teardown(void) {
    if (g_bfd > 0) {
        /* the fake workers end when told to; then bfd */
        for (int t = 1; t <= 16; t++) {
            char p[400];
            snprintf(p, sizeof p, "%s/exit.%d", g_dir, t);
            FILE *f = fopen(p, "wx");
            if (f) fputs("1\n", f), fclose(f);
        }
        kill(g_bfd, SIGTERM);
        int st;
        for (int i = 0; i < 200 && waitpid(g_bfd, &st, WNOHANG) == 0; i++) it_sleep_s(0.05);
        kill(g_bfd, SIGKILL);
        waitpid(g_bfd, NULL, 0);
        g_bfd = -1;
    }
    if (tmpdir_remove(g_dir)) fprintf(stderr, "could not remove %s\n", g_dir);
}

TestSuite(bfctl_results, .init = setup, .fini = teardown, .timeout = 120);

/* Runs `bfctl ARGS` with stdout into *out (malloc'd; stderr to the test's
 * stderr, or into *out too when merge). Returns the exit status. */
static int bfctl(char **out, int merge, const char *fmt, ...) {
    char args[1024], cmd[1600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "'%s' %s%s", IT_BFCTL, args, merge ? " 2>&1" : "");
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char *buf = it_read_stream(p, NULL);
    int st = pclose(p);
    cr_assert(WIFEXITED(st), "bfctl %s: did not exit normally", args);
    *out = buf;
    return WEXITSTATUS(st);
}

/* Submits a sweep of n trials (train.seed 1..n); returns the job id. */
static long long submit(const char *name, int n) {
    char path[400], text[1024];
    int w = snprintf(text, sizeof text,
                     "name: %s\npipeline: budgetformer\ndata: {set: wordnet}\n"
                     "sweep:\n  parameters:\n    train.seed: {values: [",
                     name);
    for (int i = 1; i <= n; i++)
        w += snprintf(text + w, sizeof text - (size_t)w, "%s%d", i > 1 ? ", " : "", i);
    snprintf(text + w, sizeof text - (size_t)w, "]}\nmetric: {name: val/acc, goal: max}\n");
    snprintf(path, sizeof path, "%s/%s.yaml", g_dir, name);
    it_write_text(path, text, 0644);
    char *out;
    cr_assert_eq(bfctl(&out, 0, "submit '%s'", path), 0, "submit failed: %s", out);
    long long job = atoll(out);
    free(out);
    cr_assert(job >= 1);
    return job;
}

/* Waits until bfd launched trial `trial`; returns its token. */
static void token_of(long long trial, char tok[PROTO_TOKEN_LEN + 1]) {
    char p[400], line[1100], prev[1100] = "";
    snprintf(p, sizeof p, "%s/launch.%lld", g_dir, trial);
    FILE *f = NULL;
    for (int i = 0; i < 300 && !(f = fopen(p, "r")); i++) it_sleep_s(0.05);
    cr_assert_not_null(f, "bfd did not launch trial %lld within 15 s", trial);
    tok[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (!strcmp(prev, "--token")) snprintf(tok, PROTO_TOKEN_LEN + 1, "%.32s", line);
        snprintf(prev, sizeof prev, "%s", line);
    }
    fclose(f);
    cr_assert_eq(strlen(tok), PROTO_TOKEN_LEN, "no token on trial %lld's command line", trial);
}

/* Sends one `metrics` batch (points: a JSON array text) as trial's worker
 * and checks the ack. */
static void send_points(void *sock, long long trial, const char *tok, const char *points,
                        long long last_seq) {
    size_t len = strlen(points) + 200;
    char *body = malloc(len);
    cr_assert_not_null(body);
    snprintf(body, len, "{\"trial\": %lld, \"token\": \"%s\", \"points\": %s}", trial, tok, points);
    cr_assert(zmq_send(sock, "bf", 2, ZMQ_SNDMORE) == 2 &&
                  zmq_send(sock, "1", 1, ZMQ_SNDMORE) == 1 &&
                  zmq_send(sock, "metrics", 7, ZMQ_SNDMORE) == 7 &&
                  zmq_send(sock, body, strlen(body), 0) == (int)strlen(body),
              "zmq_send: %s", zmq_strerror(zmq_errno()));
    free(body);
    proto_msg m = {0};
    proto_code code;
    char err[512];
    cr_assert_eq(proto_recv(sock, 0, 0, &m, &code, err, sizeof err), 0, "no ack: %s", err);
    cr_assert_eq(code, PROTO_OK, "%s", err);
    char *txt = json_dumps(m.body, JSON_COMPACT);
    cr_assert_str_eq(m.type, "ack", "reply %s %s", m.type, txt);
    cr_assert_eq(json_integer_value(json_object_get(m.body, "seq")), last_seq, "ack %s", txt);
    free(txt);
    proto_msg_clear(&m);
}

static void finish(long long trial, int status) {
    char p[400], s[16];
    snprintf(p, sizeof p, "%s/exit.%lld", g_dir, trial);
    snprintf(s, sizeof s, "%d\n", status);
    it_write_text(p, s, 0644);
}

static void *worker_socket(void *ctx) {
    char ep[512];
    snprintf(ep, sizeof ep, "ipc://%s/worker.sock", g_home);
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    cr_assert_not_null(s);
    int to = 10000, linger = 0;
    cr_assert_eq(zmq_setsockopt(s, ZMQ_RCVTIMEO, &to, sizeof to), 0);
    cr_assert_eq(zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger), 0);
    cr_assert_eq(zmq_connect(s, ep), 0, "zmq_connect: %s", zmq_strerror(zmq_errno()));
    return s;
}

static const char *line_with(const char *text, const char *needle, char *buf, size_t len) {
    const char *p = strstr(text, needle);
    if (!p) return NULL;
    while (p > text && p[-1] != '\n') p--;
    size_t n = strcspn(p, "\n");
    snprintf(buf, len, "%.*s", (int)(n < len ? n : len - 1), p);
    return buf;
}

/* The screen columns of line up to the end of needle in it (UTF-8: a
 * continuation byte takes none); -1 when needle is not in it. */
static int columns_to(const char *line, const char *needle) {
    const char *p = strstr(line, needle);
    if (!p) return -1;
    int c = 0;
    for (const char *q = line; q < p + strlen(needle); q++) c += ((unsigned char)*q & 0xc0) != 0x80;
    return c;
}

/* The ids of the job's first n trials, in index order (from `show --json`). */
static void job_trial_ids(long long job, long long *ids, size_t n) {
    char *out;
    cr_assert_eq(bfctl(&out, 0, "show %lld --json", job), 0);
    json_error_t jerr;
    json_t *js = json_loads(out, 0, &jerr);
    cr_assert_not_null(js, "show --json: %s", jerr.text);
    free(out);
    for (size_t i = 0; i < n; i++)
        ids[i] = json_integer_value(
            json_object_get(json_array_get(json_object_get(js, "trials"), i), "id"));
    json_decref(js);
}

Test(bfctl_results, table_json_and_export) {
    long long job = submit("small", 2);
    long long ids[2];
    job_trial_ids(job, ids, 2);
    long long ta = ids[0], tb = ids[1];
    cr_assert(ta >= 1 && tb >= 1);
    char toka[PROTO_TOKEN_LEN + 1], tokb[PROTO_TOKEN_LEN + 1];
    token_of(ta, toka);
    token_of(tb, tokb);

    void *ctx = zmq_ctx_new();
    cr_assert_not_null(ctx);
    void *ws = worker_socket(ctx);
    /* a: val/acc 0.5 then 0.6, then a test split: accuracy 0.55 (test), heads 0.35
     * b: val/acc 0.7 then 0.65, no test split: accuracy 0.65 (latest val), heads 0.9;
     * best by val/acc (max): b (0.7 > 0.6) */
    send_points(
        ws, ta, toka,
        "[{\"seq\": 1, \"step\": 10, \"time\": 1764400000.25, \"values\": {\"train/loss\": 2.0, "
        "\"val/acc\": 0.5, \"val/heads_used\": 0.4}},"
        " {\"seq\": 2, \"step\": 20, \"time\": 1764400001.5, \"values\": {\"val/acc\": 0.6, "
        "\"val/heads_used\": 0.3}}]",
        2);
    send_points(
        ws, ta, toka,
        "[{\"seq\": 3, \"step\": 20, \"time\": 1764400002.75, \"values\": {\"test/acc\": 0.55, "
        "\"test/heads_used\": 0.35}}]",
        3);
    send_points(
        ws, tb, tokb,
        "[{\"seq\": 1, \"step\": 10, \"time\": 1764400000.5, \"values\": {\"val/acc\": 0.7, "
        "\"val/heads_used\": 0.8}},"
        " {\"seq\": 2, \"step\": 20, \"time\": 1764400001.0, \"values\": {\"val/acc\": 0.65, "
        "\"val/heads_used\": 0.9, \"bad\": null}}]",
        2);
    zmq_close(ws);
    zmq_ctx_term(ctx);
    finish(ta, 0);
    finish(tb, 0);
    char *out;
    cr_assert_eq(bfctl(&out, 0, "wait %lld", job), 0, "wait: %s", out);
    free(out);

    /* the table */
    cr_assert_eq(bfctl(&out, 0, "results %lld", job), 0);
    char l[512], id[32];
    fprintf(stderr, "%s", out);
    cr_assert(strstr(out, "best by val/acc (max)"), "%s", out);
    snprintf(id, sizeof id, " t%lld ", ta);
    cr_assert_not_null(line_with(out, id, l, sizeof l), "%s", out);
    cr_assert(l[0] == ' ' && strstr(l, "COMPLETED") && strstr(l, "0.5500 (test)") &&
                  strstr(l, "0.350") && strstr(l, "0.6000") && strstr(l, "train.seed=1"),
              "trial a's row: '%s'", l);
    snprintf(id, sizeof id, " t%lld ", tb);
    cr_assert_not_null(line_with(out, id, l, sizeof l), "%s", out);
    cr_assert(l[0] == '*' && strstr(l, "0.6500 (val)") && strstr(l, "0.900") &&
                  strstr(l, "0.7000") && strstr(l, "train.seed=2"),
              "trial b's row (best): '%s'", l);
    free(out);

    cr_assert_eq(bfctl(&out, 0, "results %lld --json", job), 0);
    json_error_t jerr;
    json_t *js = json_loads(out, 0, &jerr);
    cr_assert_not_null(js, "results --json: %s: %s", jerr.text, out);
    free(out);
    cr_assert_eq(json_integer_value(json_object_get(js, "best_trial")), tb);
    json_t *r0 = json_array_get(json_object_get(js, "trials"), 0);
    cr_assert_float_eq(json_real_value(json_object_get(r0, "accuracy")), 0.55, 1e-12);
    cr_assert_str_eq(json_string_value(json_object_get(r0, "accuracy_from")), "test/acc");
    cr_assert_float_eq(json_real_value(json_object_get(r0, "heads_used")), 0.35, 1e-12);
    cr_assert(json_is_false(json_object_get(r0, "best")));
    json_t *r1 = json_array_get(json_object_get(js, "trials"), 1);
    cr_assert_str_eq(json_string_value(json_object_get(r1, "accuracy_from")), "val/acc");
    cr_assert_float_eq(json_real_value(json_object_get(r1, "accuracy")), 0.65, 1e-12);
    cr_assert(json_is_true(json_object_get(r1, "best")));
    json_decref(js);

    /* export --json: the documented shape, (seq, name) order, exact values */
    cr_assert_eq(bfctl(&out, 0, "export %lld --json", job), 0);
    js = json_loads(out, 0, &jerr);
    cr_assert_not_null(js, "export --json: %s (line %d): %.300s", jerr.text, jerr.line, out);
    free(out);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(js, "job"), "id")), job);
    json_t *trials = json_object_get(js, "trials");
    cr_assert_eq(json_array_size(trials), 2);
    json_t *ea = json_array_get(trials, 0), *eb = json_array_get(trials, 1);
    cr_assert_eq(json_integer_value(json_object_get(ea, "id")), ta);
    cr_assert_str_eq(json_string_value(json_object_get(ea, "state")), "COMPLETED");
    cr_assert_eq(json_integer_value(json_object_get(ea, "attempts")), 1);
    cr_assert(json_is_string(json_object_get(ea, "config")) &&
              strstr(json_string_value(json_object_get(ea, "config")), "train.seed: 1"));
    static const struct {
        const char *name;
        long long step, seq;
        double value, time;
    } want_a[] = {
        {"train/loss", 10, 1, 2.0, 1764400000.25},      {"val/acc", 10, 1, 0.5, 1764400000.25},
        {"val/heads_used", 10, 1, 0.4, 1764400000.25},  {"val/acc", 20, 2, 0.6, 1764400001.5},
        {"val/heads_used", 20, 2, 0.3, 1764400001.5},   {"test/acc", 20, 3, 0.55, 1764400002.75},
        {"test/heads_used", 20, 3, 0.35, 1764400002.75}};
    json_t *ma = json_object_get(ea, "metrics");
    cr_assert_eq(json_array_size(ma), 7);
    for (size_t i = 0; i < 7; i++) {
        json_t *m = json_array_get(ma, i);
        cr_assert_str_eq(json_string_value(json_object_get(m, "name")), want_a[i].name,
                         "metric %zu", i);
        cr_assert_eq(json_integer_value(json_object_get(m, "step")), want_a[i].step);
        cr_assert_eq(json_integer_value(json_object_get(m, "seq")), want_a[i].seq);
        cr_assert_eq(json_number_value(json_object_get(m, "value")), want_a[i].value, "metric %zu",
                     i);
        cr_assert_eq(json_number_value(json_object_get(m, "time")), want_a[i].time, "metric %zu",
                     i);
    }
    /* the null value was accepted and not stored */
    cr_assert_eq(json_array_size(json_object_get(eb, "metrics")), 4);
    json_decref(js);

    /* export --csv: header with the swept key, one row per value */
    cr_assert_eq(bfctl(&out, 0, "export %lld --csv", job), 0);
    long rows = it_count_newlines(out);
    cr_assert_eq(rows, 1 + 7 + 4, "%s", out);
    cr_assert(!strncmp(out,
                       "job,trial,index,state,attempts,train.seed,seq,step,time,name,value,attempt,"
                       "current\n",
                       83),
              "header: %.80s", out);
    char row[256];
    snprintf(row, sizeof row, "\n%lld,%lld,0,COMPLETED,1,1,1,10,1764400000.25,train/loss,2,1,1\n",
             job, ta);
    cr_assert(strstr(out, row), "no row '%s' in:\n%s", row + 1, out);
    snprintf(row, sizeof row,
             "\n%lld,%lld,1,COMPLETED,1,2,2,20,1764400001,val/heads_used,0.9,1,1\n", job, tb);
    cr_assert(strstr(out, row), "no row '%s' in:\n%s", row + 1, out);
    free(out);

    /* usage errors and an unknown job */
    cr_assert_eq(bfctl(&out, 1, "export %lld", job), 64, "%s", out);
    free(out);
    cr_assert_eq(bfctl(&out, 1, "export %lld --csv --json", job), 64, "%s", out);
    free(out);
    cr_assert_eq(bfctl(&out, 1, "results"), 64, "%s", out);
    free(out);
    cr_assert_eq(bfctl(&out, 1, "results 999"), 1, "%s", out);
    cr_assert(strstr(out, "not_found"), "%s", out);
    free(out);
}

/* Submits sweep text (a file NAME.yaml); returns the job id. */
static long long submit_text(const char *name, const char *text) {
    char path[400];
    snprintf(path, sizeof path, "%s/%s.yaml", g_dir, name);
    it_write_text(path, text, 0644);
    char *out;
    cr_assert_eq(bfctl(&out, 0, "submit '%s'", path), 0, "submit failed: %s", out);
    long long job = atoll(out);
    free(out);
    cr_assert(job >= 1);
    return job;
}

/* Plays the workers of a job's n trials: trial i reports val/acc acc[i]
 * and val/heads_used heads[i] at step 10 and exits 0; waits for the job. */
static void run_trials(long long job, size_t n, const double *acc, const double *heads,
                       long long *ids) {
    job_trial_ids(job, ids, n);
    void *ctx = zmq_ctx_new();
    cr_assert_not_null(ctx);
    void *ws = worker_socket(ctx);
    for (size_t i = 0; i < n; i++) {
        char tok[PROTO_TOKEN_LEN + 1], pts[256];
        token_of(ids[i], tok);
        snprintf(pts, sizeof pts,
                 "[{\"seq\": 1, \"step\": 10, \"time\": 1764400000.5, \"values\": {\"val/acc\": "
                 "%.17g, \"val/heads_used\": %.17g}}]",
                 acc[i], heads[i]);
        send_points(ws, ids[i], tok, pts, 1);
    }
    zmq_close(ws);
    zmq_ctx_term(ctx);
    for (size_t i = 0; i < n; i++) finish(ids[i], 0);
    char *out;
    cr_assert_eq(bfctl(&out, 0, "wait %lld", job), 0, "wait: %s", out);
    free(out);
}

/* The row of `results --json` (trials or groups) whose field k is id. */
static json_t *row_of(json_t *rows, const char *k, long long id) {
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r) {
        json_t *v = json_object_get(r, k);
        if (json_is_array(v)) v = json_array_get(v, 0);
        if (json_integer_value(v) == id) return r;
    }
    cr_assert_fail("no row with %s %lld", k, id);
    return NULL;
}

static json_t *results_json(const char *args) {
    char *out;
    cr_assert_eq(bfctl(&out, 0, "results %s --json", args), 0, "%s", out);
    json_error_t jerr;
    json_t *js = json_loads(out, 0, &jerr);
    cr_assert_not_null(js, "results --json: %s: %s", jerr.text, out);
    free(out);
    return js;
}

Test(bfctl_results, pareto_front_seed_groups_and_jobs_side_by_side) {
    static const char mo[] = "pipeline: budgetformer\ndata: {set: wordnet}\n"
                             "sweep:\n  parameters:\n"
                             "    budget.range: {values: [[0.1, 0.3], [0.3, 0.6]]}\n"
                             "    train.seed: {values: [1, 2]}\n"
                             "metric:\n  - {name: val/acc, goal: max}\n"
                             "  - {name: val/heads_used, goal: min}\n";
    long long job = submit_text("mo", mo);
    /* t0 (0.6, 0.2), t1 (0.7, 0.4), t2 (0.8, 0.5) make the front; t3 (0.4,
     * 0.6) is dominated by each of them. Crowding of t1, inside the front:
     * (0.8 - 0.6) / 0.2 + (0.5 - 0.2) / 0.3 = 2 */
    const double acc[] = {0.6, 0.7, 0.8, 0.4}, heads[] = {0.2, 0.4, 0.5, 0.6};
    long long t[4];
    run_trials(job, 4, acc, heads, t);

    char *out, l[512], id[32];
    cr_assert_eq(bfctl(&out, 0, "results %lld", job), 0);
    fprintf(stderr, "%s", out);
    cr_assert(strstr(out, "Pareto front marked * over val/acc (max), val/heads_used (min)"), "%s",
              out);
    for (int i = 0; i < 4; i++) {
        snprintf(id, sizeof id, " t%lld ", t[i]);
        cr_assert_not_null(line_with(out, id, l, sizeof l), "%s", out);
        cr_assert_eq(l[0], i < 3 ? '*' : ' ', "row of trial %d: '%s'", i, l);
    }
    /* sorted by rank, then crowding: t3 (rank 2) comes last */
    snprintf(id, sizeof id, " t%lld ", t[3]);
    const char *p3 = strstr(out, id);
    snprintf(id, sizeof id, " t%lld ", t[1]);
    cr_assert(p3 > strstr(out, id), "the dominated trial is listed after the front:\n%s", out);
    free(out);

    char jarg[32];
    snprintf(jarg, sizeof jarg, "%lld", job);
    json_t *js = results_json(jarg);
    json_t *rows = json_object_get(js, "trials");
    cr_assert_eq(json_array_size(rows), 4);
    for (int i = 0; i < 4; i++) {
        json_t *r = row_of(rows, "id", t[i]);
        cr_assert_eq(json_integer_value(json_object_get(r, "rank")), i < 3 ? 1 : 2, "trial %d", i);
        cr_assert_eq(json_is_true(json_object_get(r, "pareto")), i < 3);
        cr_assert_float_eq(
            json_number_value(json_object_get(json_object_get(r, "objectives"), "val/acc")), acc[i],
            1e-12);
    }
    cr_assert_str_eq(json_string_value(json_object_get(row_of(rows, "id", t[0]), "crowding")),
                     "inf", "an end of the front");
    cr_assert_float_eq(json_number_value(json_object_get(row_of(rows, "id", t[1]), "crowding")),
                       2.0, 1e-9);
    cr_assert_eq(json_integer_value(json_object_get(json_array_get(rows, 3), "id")), t[3]);
    json_decref(js);

    /* best: the front alone */
    cr_assert_eq(bfctl(&out, 0, "best %lld", job), 0);
    for (int i = 0; i < 4; i++) {
        snprintf(id, sizeof id, " t%lld ", t[i]);
        cr_assert_eq(strstr(out, id) != NULL, i < 3, "best lists the front only:\n%s", out);
    }
    free(out);

    /* seeds folded: range [0.1, 0.3] has acc 0.65 +- 0.0707, heads 0.3 +-
     * 0.1414 and dominates range [0.3, 0.6] (acc 0.6, heads 0.55) */
    snprintf(jarg, sizeof jarg, "%lld --group-by-seed", job);
    js = results_json(jarg);
    rows = json_object_get(js, "groups");
    cr_assert_eq(json_array_size(rows), 2);
    json_t *ga = row_of(rows, "trials", t[0]), *gb = row_of(rows, "trials", t[2]);
    cr_assert_eq(json_integer_value(json_object_get(ga, "n")), 2);
    cr_assert_null(json_object_get(json_object_get(ga, "params"), "train.seed"));
    json_t *aa = json_object_get(json_object_get(ga, "objectives"), "val/acc");
    cr_assert_float_eq(json_number_value(json_object_get(aa, "mean")), 0.65, 1e-12);
    cr_assert_float_eq(json_number_value(json_object_get(aa, "std")), sqrt(0.005), 1e-12);
    cr_assert_eq(json_integer_value(json_object_get(ga, "rank")), 1);
    cr_assert_eq(json_integer_value(json_object_get(gb, "rank")), 2);
    json_decref(js);
    cr_assert_eq(bfctl(&out, 0, "results %lld --group-by-seed", job), 0);
    fprintf(stderr, "%s", out);
    cr_assert(strstr(out, "0.6500\xc2\xb1"
                          "0.0707"),
              "%s", out);
    /* the column of mean +- std ends where its header does (the sign is two
     * bytes and one column) */
    char head[512], row[512];
    cr_assert(line_with(out, "TRIALS", head, sizeof head) &&
                  line_with(out, "0.6500\xc2\xb1", row, sizeof row),
              "%s", out);
    cr_assert_eq(columns_to(head, "val/acc"),
                 columns_to(row, "0.6500\xc2\xb1"
                                 "0.0707"),
                 "the +- column is not aligned with its header:\n%s\n%s", head, row);
    free(out);

    /* a baseline job beside it, its seeds folded too: (0.55, 1.0) is
     * dominated by both groups, so it ranks third */
    long long base = submit_text("base", "pipeline: budgetformer\ndata: {set: wordnet}\n"
                                         "sweep:\n  parameters:\n"
                                         "    train.seed: {values: [1, 2]}\n"
                                         "metric:\n  - {name: val/acc, goal: max}\n"
                                         "  - {name: val/heads_used, goal: min}\n");
    const double bacc[] = {0.5, 0.6}, bheads[] = {1.0, 1.0};
    long long bt[2];
    run_trials(base, 2, bacc, bheads, bt);
    char args[64];
    snprintf(args, sizeof args, "%lld %lld --group-by-seed", job, base);
    js = results_json(args);
    rows = json_object_get(js, "groups");
    cr_assert_eq(json_array_size(rows), 3);
    json_t *gbase = row_of(rows, "trials", bt[0]);
    snprintf(args, sizeof args, "%lld %lld --group-by-seed", job, base);
    cr_assert_eq(bfctl(&out, 0, "results %s", args), 0);
    fprintf(stderr, "%s", out);
    free(out);
    cr_assert_eq(json_integer_value(json_object_get(gbase, "job")), base);
    cr_assert_eq(json_integer_value(json_object_get(gbase, "rank")), 3);
    json_decref(js);

    /* jobs judged by different objectives are not compared */
    long long one = submit("one", 1);
    cr_assert_eq(bfctl(&out, 1, "results %lld %lld", job, one), 1, "%s", out);
    cr_assert(strstr(out, "objectives differ"), "%s", out);
    free(out);
}

static json_t *show_json(const char *what) {
    char *out;
    cr_assert_eq(bfctl(&out, 0, "show %s --json", what), 0, "%s", out);
    json_error_t jerr;
    json_t *js = json_loads(out, 0, &jerr);
    cr_assert_not_null(js, "show --json: %s: %s", jerr.text, out);
    free(out);
    return js;
}

Test(bfctl_results, clone_keeps_lineage_and_show_points_at_checkpoints) {
    long long job = submit_text("src", "pipeline: budgetformer\ndata: {set: wordnet}\n"
                                       "train: {lr: 0.001}\n"
                                       "metric:\n  - {name: val/acc, goal: max}\n"
                                       "  - {name: val/heads_used, goal: min}\n");
    /* val/acc 0.5 at step 10, 0.7 at step 20 (the best), 0.6 at step 30 */
    long long t;
    job_trial_ids(job, &t, 1);
    char tok[PROTO_TOKEN_LEN + 1];
    token_of(t, tok);
    void *ctx = zmq_ctx_new();
    void *ws = worker_socket(ctx);
    send_points(
        ws, t, tok,
        "[{\"seq\": 1, \"step\": 10, \"time\": 1764400000.5, \"values\": {\"val/acc\": 0.5}},"
        " {\"seq\": 2, \"step\": 20, \"time\": 1764400001.5, \"values\": {\"val/acc\": 0.7}},"
        " {\"seq\": 3, \"step\": 30, \"time\": 1764400002.5, \"values\": {\"val/acc\": 0.6}}]",
        3);
    zmq_close(ws);
    zmq_ctx_term(ctx);
    /* the run folder's checkpoint set, as the worker leaves it: step 20 */
    char p[700];
    snprintf(p, sizeof p, "mkdir -p '%s/trials/%lld'", g_home, t);
    cr_assert_eq(system(p), 0);
    snprintf(p, sizeof p, "%s/trials/%lld/state.json", g_home, t);
    it_write_text(p, "{\"step\": 20, \"seed\": 1}\n", 0644);
    finish(t, 0);
    char *out;
    cr_assert_eq(bfctl(&out, 0, "wait %lld", job), 0, "wait: %s", out);
    free(out);

    char what[32];
    snprintf(what, sizeof what, "t%lld", t);
    json_t *js = show_json(what);
    json_t *ck = json_object_get(js, "checkpoints");
    snprintf(p, sizeof p, "%s/trials/%lld", g_home, t);
    json_t *last = json_object_get(ck, "last"), *best = json_object_get(ck, "best");
    cr_assert_str_eq(json_string_value(json_object_get(last, "dir")), p);
    cr_assert_eq(json_integer_value(json_object_get(last, "step")), 20);
    cr_assert_str_eq(json_string_value(json_object_get(best, "metric")), "val/acc");
    cr_assert_eq(json_integer_value(json_object_get(best, "step")), 20);
    cr_assert_float_eq(json_number_value(json_object_get(best, "value")), 0.7, 1e-12);
    cr_assert_str_eq(json_string_value(json_object_get(best, "checkpoint")), p,
                     "the one set was written at the best step");
    cr_assert_null(json_object_get(js, "source"), "not a clone");
    json_decref(js);

    /* the clone: the trial's config with a change, its job's objectives */
    cr_assert_eq(bfctl(&out, 0, "clone t%lld --set train.lr=0.01", t), 0, "%s", out);
    long long cj = atoll(out);
    free(out);
    cr_assert_gt(cj, job);
    long long ct;
    job_trial_ids(cj, &ct, 1);
    snprintf(what, sizeof what, "t%lld", ct);
    js = show_json(what);
    cr_assert_eq(json_integer_value(json_object_get(js, "source")), t,
                 "the clone names its source");
    const char *cfg = json_string_value(json_object_get(js, "config"));
    cr_assert(cfg && strstr(cfg, "train.lr: 0.01\n"), "%s", cfg);
    json_decref(js);
    snprintf(what, sizeof what, "%lld", cj);
    js = show_json(what);
    cr_assert_eq(json_array_size(json_object_get(js, "objectives")), 2);
    json_decref(js);
    /* bfd validates the clone as any sweep */
    cr_assert_eq(bfctl(&out, 1, "clone t%lld --set train.nope=1", t), 1, "%s", out);
    cr_assert(strstr(out, "unknown key 'train.nope'"), "%s", out);
    free(out);
    cr_assert_eq(bfctl(&out, 1, "clone 17"), 64, "%s", out);
    cr_assert(strstr(out, "usage: bfctl clone tTRIAL"), "%s", out);
    free(out);
}

Test(bfctl_results, mo_asha_decides_on_every_objective) {
    long long job = submit_text("moasha", "pipeline: budgetformer\ndata: {set: wordnet}\n"
                                          "train: {steps: 100, eval_every: 10}\n"
                                          "sweep:\n  parameters:\n"
                                          "    train.seed: {values: [1, 2, 3]}\n"
                                          "metric:\n  - {name: val/acc, goal: max}\n"
                                          "  - {name: val/heads_used, goal: min}\n"
                                          "early_stop: {method: asha, min_steps: 10}\n");
    /* the wiring of MO-ASHA through bfd (its rule: test_sched): at the
     * first rung (step 10), one after another, t0 (0.9, 0.1) alone
     * continues; t1 (0.95, 0.9) makes a front of two with it, 1 of 2
     * continues and the epsilon-net takes the best val/acc first: t1
     * continues; t2 (0.5, 0.95), dominated by both, is stopped. Each
     * decision keeps the trial's point of both objectives. */
    long long t[3];
    job_trial_ids(job, t, 3);
    const double acc[] = {0.9, 0.95, 0.5}, heads[] = {0.1, 0.9, 0.95};
    void *ctx = zmq_ctx_new();
    void *ws = worker_socket(ctx);
    for (int i = 0; i < 3; i++) {
        char tok[PROTO_TOKEN_LEN + 1], pts[256];
        token_of(t[i], tok);
        snprintf(pts, sizeof pts,
                 "[{\"seq\": 1, \"step\": 10, \"time\": 1764400000.5, \"values\": {\"val/acc\": "
                 "%.17g, \"val/heads_used\": %.17g}}]",
                 acc[i], heads[i]);
        send_points(ws, t[i], tok, pts, 1);
        /* each is judged before the next comes: wait for its decision */
        char what[32];
        snprintf(what, sizeof what, "%lld --rungs", job);
        size_t nd = 0;
        for (int k = 0; k < 200 && nd < (size_t)i + 1; k++) {
            json_t *r = show_json(what);
            nd = json_array_size(json_object_get(r, "decisions"));
            json_decref(r);
            if (nd < (size_t)i + 1) it_sleep_s(0.05);
        }
        cr_assert_eq(nd, (size_t)i + 1, "no decision for trial %d", i);
    }
    zmq_close(ws);
    zmq_ctx_term(ctx);
    char what[32];
    snprintf(what, sizeof what, "%lld --rungs", job);
    json_t *r = show_json(what);
    cr_assert_eq(json_array_size(json_object_get(r, "objectives")), 2);
    json_t *ds = json_object_get(r, "decisions");
    const int stop[] = {0, 0, 1};
    for (int i = 0; i < 3; i++) {
        json_t *d = json_array_get(ds, (size_t)i);
        cr_assert_eq(json_integer_value(json_object_get(d, "trial")), t[i]);
        cr_assert_eq(json_is_true(json_object_get(d, "stop")), stop[i], "trial %d: %s", i,
                     json_string_value(json_object_get(d, "reason")));
        cr_assert(strstr(json_string_value(json_object_get(d, "reason")), "mo-asha: "));
        json_t *pt = json_object_get(d, "point");
        cr_assert_eq(json_array_size(pt), 2);
        cr_assert_float_eq(json_number_value(json_array_get(pt, 1)), heads[i], 1e-12);
    }
    json_decref(r);
    for (int i = 0; i < 3; i++) finish(t[i], 0);
}

/* 30,000 points of 5 values: over 8 MiB as one `export` reply, so bfctl
 * reads it trial by trial, page by page; every value once, in order. */
Test(bfctl_results, export_of_a_large_job_is_paged) {
    long long job = submit("large", 1);
    long long t;
    job_trial_ids(job, &t, 1);
    char tok[PROTO_TOKEN_LEN + 1];
    token_of(t, tok);
    void *ctx = zmq_ctx_new();
    cr_assert_not_null(ctx);
    void *ws = worker_socket(ctx);
    const int n_points = 30000, batch = 3000;
    size_t cap = (size_t)batch * 200 + 16;
    char *pts = malloc(cap);
    cr_assert_not_null(pts);
    for (int first = 1; first <= n_points; first += batch) {
        size_t w = 0;
        pts[w++] = '[';
        for (int s = first; s < first + batch; s++)
            w += (size_t)snprintf(pts + w, cap - w,
                                  "%s{\"seq\":%d,\"step\":%d,\"time\":1764400000.5,\"values\":"
                                  "{\"a\":%d,\"b\":0.25,\"c\":-1,\"d\":1e-3,\"e\":%d.5}}",
                                  s > first ? "," : "", s, s, s, s);
        snprintf(pts + w, cap - w, "]");
        send_points(ws, t, tok, pts, first + batch - 1);
    }
    free(pts);
    zmq_close(ws);
    zmq_ctx_term(ctx);
    finish(t, 0);
    char *out;
    cr_assert_eq(bfctl(&out, 0, "wait %lld", job), 0);
    free(out);

    cr_assert_eq(bfctl(&out, 0, "export %lld --json", job), 0);
    cr_assert_gt(strlen(out), (size_t)(8u << 20), "the export is too small to need paging");
    json_error_t jerr;
    json_t *js = json_loads(out, 0, &jerr);
    cr_assert_not_null(js, "export --json: %s (line %d)", jerr.text, jerr.line);
    free(out);
    json_t *m = json_object_get(json_array_get(json_object_get(js, "trials"), 0), "metrics");
    cr_assert_eq(json_array_size(m), (size_t)n_points * 5);
    static const char *names[] = {"a", "b", "c", "d", "e"};
    for (size_t i = 0; i < json_array_size(m); i++) {
        json_t *v = json_array_get(m, i);
        long long seq = (long long)(i / 5 + 1);
        cr_assert_eq(json_integer_value(json_object_get(v, "seq")), seq, "metric %zu", i);
        cr_assert_str_eq(json_string_value(json_object_get(v, "name")), names[i % 5], "metric %zu",
                         i);
        if (i % 5 == 0)
            cr_assert_eq(json_number_value(json_object_get(v, "value")), (double)seq, "metric %zu",
                         i);
    }
    json_decref(js);

    cr_assert_eq(bfctl(&out, 0, "export %lld --csv", job), 0);
    long rows = it_count_newlines(out);
    cr_assert_eq(rows, 1 + (long)n_points * 5);
    free(out);
}

Test(bfctl_results, says_when_no_daemon_runs) {
    char empty[400], *out;
    snprintf(empty, sizeof empty, "%s/nobody", g_dir);
    cr_assert_eq(mkdir(empty, 0700), 0);
    setenv("BF_HOME", empty, 1);
    int rc = bfctl(&out, 1, "results 1");
    setenv("BF_HOME", g_home, 1);
    cr_assert_eq(rc, 1, "%s", out);
    cr_assert(strstr(out, "bfd is not running"), "%s", out);
    free(out);
}
