/* bfctl submit FILE --set KEY=VALUE (real bfd, the store read back): each
 * --set replaces the file's value in the sweep's base (top-level sections,
 * or `base:` when the file has one), makes a section the file lacks, takes
 * YAML values (lists), leaves the swept parameters alone; a bad --set is a
 * usage error (64), an unknown key or a bad value is refused by bfd's sweep
 * check, naming the file "(with --set)". */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "it_bfd.h"

static char g_dir[256], g_home[320];
static pid_t g_bfd = -1;

static void setup(void) {
    it_worker_env();
    it_bfd_home(g_dir, sizeof g_dir, g_home, sizeof g_home, "/tmp/bf-itset-XXXXXX");
    it_copy_glosses(g_dir);
    it_write_text(tmpdir_path(g_home, "bfd.yaml"), "slots: 2\n", 0644);
    g_bfd = it_bfd_start(g_dir, g_home);
}

static void teardown(void) {
    it_stop(&g_bfd, SIGKILL);
    it_kill_workers(g_home);
    if (tmpdir_remove(g_dir)) { /* nothing left to clean is fine */
    }
}

TestSuite(bfctl_set, .init = setup, .fini = teardown, .timeout = 120);

/* The stored config of trial t has line (a "key: value" line of cfg_dump). */
static int config_has(long long t, const char *line) {
    char cfg[65536];
    it_db_text(g_home, "SELECT config FROM trials WHERE id = ?1", t, cfg, sizeof cfg);
    return strstr(cfg, line) != NULL;
}

Test(bfctl_set, set_overrides_the_base_and_leaves_the_sweep_alone) {
    /* a file with top-level sections: 2 seeds, 10000 steps */
    const char *flat = it_write_sweep(g_dir, "flat", 2, 10000, "");
    char args[1400], out[4096];
    snprintf(args, sizeof args,
             "submit %s --set train.steps=7 --set 'budget.range=[0.2, 0.4]' --wait", flat);
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, args), 0, "%s", out);
    for (long long t = 1; t <= 2; t++) {
        cr_assert(config_has(t, "train.steps: 7\n"), "trial %lld: steps from --set", t);
        cr_assert(config_has(t, "budget.range: [0.2, 0.4]\n"), "trial %lld: a list value", t);
        cr_assert(config_has(t, "model.d_model: 32\n"), "trial %lld: the file's other keys", t);
    }
    cr_assert(config_has(1, "train.seed: 1\n") && config_has(2, "train.seed: 2\n"),
              "the swept parameter is the sweep's");
    cr_assert_eq(it_db_int(g_home, "SELECT MAX(step) FROM metrics WHERE trial = ?1", 1), 7);

    /* a file with base: the --set goes there (a top-level train: would be
     * a second train section) */
    char p[512], text[2048];
    snprintf(p, sizeof p, "%s/based.yaml", g_dir);
    snprintf(text, sizeof text,
             "name: based\npipeline: budgetformer\ndevice: cpu\n"
             "data: {train: %s/train.tsv, val: %s/val.tsv}\n"
             "base:\n  model: {layers: 1, d_model: 32, heads: 4, seq_len: 16, vocab: 256}\n"
             "  train: {steps: 10000, batch: 8, log_every: 5, eval_every: 0}\n"
             "sweep:\n  parameters:\n    train.seed: {values: [1]}\n"
             "metric: {name: train/loss, goal: min}\n",
             g_dir, g_dir);
    it_write_text(p, text, 0644);
    /* data sources are one group: a --set of one replaces the file's others
     * (data.train is gone unless given again) */
    snprintf(args, sizeof args, "submit %s --set data.val=%s/train.tsv", p, g_dir);
    cr_assert_neq(it_bfctl(g_dir, out, sizeof out, args), 0, "data.train dropped: %s", out);
    snprintf(args, sizeof args,
             "submit %s --set train.steps=5 --set data.train=%s/train.tsv "
             "--set data.val=%s/train.tsv --wait",
             p, g_dir, g_dir);
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, args), 0, "%s", out);
    cr_assert(config_has(3, "train.steps: 5\n"));
    char want[600];
    snprintf(want, sizeof want, "data.val: \"%s/train.tsv\"\n", g_dir);
    cr_assert(config_has(3, want), "data.val set in the top-level data section");
}

Test(bfctl_set, bad_sets_are_refused) {
    const char *flat = it_write_sweep(g_dir, "flat", 1, 10, "");
    char args[1024];
    const char *usage[] = {"--set train.steps", "--set =3", "--set train..steps=3",
                           "--set 'train.steps=[1'", "--set model.d_model.x=1"};
    for (size_t i = 0; i < sizeof usage / sizeof *usage; i++) {
        snprintf(args, sizeof args, "submit %s %s", flat, usage[i]);
        cr_assert_eq(it_bfctl(g_dir, NULL, 0, args), 64, "bfctl %s", args);
    }
    const char *refused[] = {"--set train.stpes=3", "--set train.lr=-1", "--set nosuch.key=1"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        snprintf(args, sizeof args, "submit %s %s", flat, refused[i]);
        cr_assert_eq(it_bfctl(g_dir, NULL, 0, args), 1, "bfctl %s", args);
    }
    char err[8192];
    FILE *f = fopen(tmpdir_path(g_dir, "bfctl.err"), "r");
    cr_assert(f);
    size_t n = fread(err, 1, sizeof err - 1, f);
    err[n] = '\0';
    fclose(f);
    cr_assert(strstr(err, "(with --set)") && strstr(err, "stpes"), "%s", err);
    cr_assert_eq(it_db_int(g_home, "SELECT COUNT(*) FROM jobs", 0), 0, "nothing was submitted");
}
