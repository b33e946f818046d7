/* test_bfctl — the bfctl program as a user runs it: validate and expand
 * without a daemon, exit codes, and every error on stderr as FILE:LINE:COL. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmpdir[256];

static void setup(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/bf_test_bfctl_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(bfctl, .init = setup, .fini = teardown);

/* Runs `bfctl ARGS` (stdout and stderr into *out); returns the exit status. */
static int run(const char *args, char *out, size_t n) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s/bfctl' %s 2>&1", BF_SOURCE_DIR, BF_BIN_DIR, args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t got = fread(out, 1, n - 1, p);
    out[got] = '\0';
    int st = pclose(p);
    cr_assert(WIFEXITED(st), "bfctl did not exit normally: %s", out);
    return WEXITSTATUS(st);
}

static const char *write_file(const char *name, const char *text) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *fp = fopen(path, "w");
    cr_assert_not_null(fp);
    fputs(text, fp);
    fclose(fp);
    return path;
}

Test(bfctl, examples_validate_and_expand) {
    static char out[1 << 16];
    cr_assert_eq(
        run("validate examples/budgetformer_sweep.yaml examples/lm_sweep.yaml", out, sizeof out), 0,
        "%s", out);
    cr_assert(strstr(out, "examples/budgetformer_sweep.yaml: ok: job 'budget-ranges', pipeline "
                          "budgetformer, grid, 6 trials"),
              "%s", out);
    cr_assert(
        strstr(out, "examples/lm_sweep.yaml: ok: job 'lm-hadamard', pipeline lm, grid, 4 trials"),
        "%s", out);
    cr_assert_eq(run("expand examples/budgetformer_sweep.yaml", out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "trial 5  "), "%s", out);
    cr_assert(
        strstr(
            out,
            "budget.range: [0.6, 1], budget.temperature: {schedule: linear, start: 2, end: 0.2}"),
        "%s", out);
    cr_assert_eq(run("expand examples/lm_sweep.yaml --json", out, sizeof out), 0, "%s", out);
    cr_assert(strncmp(out, "{\"name\":\"lm-hadamard\"", 21) == 0, "%s", out);
    cr_assert(strstr(out, "\"params\":{\"attn.out_proj\":\"hadamard\",\"train.seed\":2}"), "%s",
              out);
}

Test(bfctl, invalid_sweeps_exit_nonzero_with_every_error) {
    static char out[1 << 16];
    const char *bad = write_file("bad.yaml", "retries: -1\nsweep:\n  parameters:\n"
                                             "    model.layrs: {values: [1]}\n"
                                             "    attn.out_proj: {values: [dense, sparse]}\n");
    char args[600];
    snprintf(args, sizeof args, "validate '%s'", bad);
    cr_assert_eq(run(args, out, sizeof out), 1, "%s", out);
    char want[700];
    snprintf(want, sizeof want, "%s:1:10: retries: -1 is out of range; valid range is [0, 100]\n",
             bad);
    cr_assert(strstr(out, want), "%s", out);
    snprintf(want, sizeof want, "%s:4:5: unknown key 'model.layrs'; did you mean 'model.layers'?\n",
             bad);
    cr_assert(strstr(out, want), "%s", out);
    snprintf(want, sizeof want,
             "%s:5:37: attn.out_proj: 'sparse' is not valid; expected one of: dense, hadamard\n",
             bad);
    cr_assert(strstr(out, want), "%s", out);
    /* an s2s sweep is checked like any other: a replaced layer the model does not
     * have; with no metric given it is judged by the one s2s writes
     * (eval/student/test/acc), so no metric error */
    const char *s2s = write_file(
        "s2s.yaml", "pipeline: s2s\nsweep:\n  parameters:\n"
                    "    avit.retention: {values: [0.5, 0.7]}\n"
                    "    distill.replace_layers: {values: [[9, 10, 11], [0, 1, 2], auto:3]}\n"
                    "    distill.mixer: {values: [bimamba, bilstm]}\n");
    snprintf(args, sizeof args, "validate '%s'", s2s);
    cr_assert_eq(run(args, out, sizeof out), 1, "%s", out);
    cr_assert(strstr(out, "s2s.yaml:5:5: distill.replace_layers: layer 9 does not exist; valid: "
                          "0 .. 3 (model.layers is 4)"),
              "%s", out);
    cr_assert(!strstr(out, "never written"), "%s", out);
    /* empty and non-text files; a missing one */
    snprintf(args, sizeof args, "validate '%s' '%s' /nonexistent.yaml", write_file("e.yaml", ""),
             tmpdir);
    cr_assert_eq(run(args, out, sizeof out), 1, "%s", out);
    cr_assert(strstr(out, "e.yaml:1:1: empty sweep file"), "%s", out);
    cr_assert(strstr(out, ":1:1: not a regular file"), "%s", out);
    cr_assert(strstr(out, "/nonexistent.yaml:1:1: cannot open"), "%s", out);
    /* a standalone config is a one-trial job */
    snprintf(args, sizeof args, "validate '%s'",
             write_file("c.yaml", "pipeline: lm\nmodel: {layers: 2}\n"));
    cr_assert_eq(run(args, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "single run, 1 trial\n"), "%s", out);
    cr_assert_eq(run("expand", out, sizeof out), 64);
}

Test(bfctl, help_and_unknown_commands) {
    static char out[1 << 14];
    cr_assert_eq(run("--help", out, sizeof out), 0);
    cr_assert(strstr(out, "validate SWEEP.yaml") && strstr(out, "expand SWEEP.yaml"), "%s", out);
    cr_assert_eq(run("validate --help", out, sizeof out), 0);
    cr_assert(strstr(out, "usage: bfctl validate"), "%s", out);
    cr_assert_eq(run("frobnicate", out, sizeof out), 64);
    cr_assert(strstr(out, "unknown command 'frobnicate'"), "%s", out);
    cr_assert_eq(run("keys --markdown", out, sizeof out), 0);
    cr_assert(strstr(out, "| `model.layers` | integer | `4` | [1, 64] |"), "%s", out);
}

Test(bfctl, validate_json_and_usage_exit_64) {
    static char out[1 << 16];
    const char *bad = write_file("bad.yaml", "pipeline: lm\nmetric: {name: val/acc, goal: max}\n");
    char args[1024];
    snprintf(args, sizeof args, "validate --json examples/lm.yaml %s", bad);
    cr_assert_eq(run(args, out, sizeof out), 1, "%s", out);
    cr_assert(strstr(out, "\"file\": \"examples/lm.yaml\"") && strstr(out, "\"ok\": true") &&
                  strstr(out, "\"ok\": false") && strstr(out, "never written by pipeline lm"),
              "%s", out);
    cr_assert_null(strstr(out, "cannot open"), "--json read as a file: %s", out);
    cr_assert_eq(run("validate --jsn examples/lm.yaml", out, sizeof out), 64, "%s", out);
    cr_assert(strstr(out, "unknown option '--jsn'"), "%s", out);
    cr_assert_eq(run("validate", out, sizeof out), 64);
}
