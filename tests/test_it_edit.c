/* test_it_edit — editing a running sweep's grid through a real bfd:
 * `bfctl edit JOB --add KEY=V1,V2` appends the trials only the new values
 * make (the old ones untouched), `--drop-pending KEY=VALUE` cancels the
 * pending trials that match with the reason, each an EDIT event; both kept
 * by the store across a SIGKILLed bfd, and refused with the reason where
 * they do not apply (a key that is not an axis, a value of the wrong type,
 * a value the axis holds, a random sweep). One slot and long trials keep
 * all but the first trial pending while the edits land. */
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
    it_bfd_home(g_dir, sizeof g_dir, g_home, sizeof g_home, "/tmp/bf-edit-XXXXXX");
    it_copy_glosses(g_dir);
    it_write_text(tmpdir_path(g_home, "bfd.yaml"), "slots: 1\nthreads_per_slot: 1\nhttp: off\n",
                  0644);
    g_bfd = it_bfd_start(g_dir, g_home);
}

static void teardown(void) {
    it_stop(&g_bfd, SIGKILL);
    it_kill_workers(g_home);
    if (tmpdir_remove(g_dir)) fprintf(stderr, "could not remove %s\n", g_dir);
}

TestSuite(edit, .init = setup, .fini = teardown, .timeout = 120);

/* dir/NAME.yaml: a CPU BudgetFormer sweep (long trials) with `sweep` as its
 * sweep: block. */
static const char *write_sweep(const char *name, const char *sweep) {
    static char p[512];
    char text[2048];
    snprintf(p, sizeof p, "%s/%s.yaml", g_dir, name);
    snprintf(text, sizeof text,
             "name: %s\npipeline: budgetformer\ndevice: cpu\n"
             "data: {train: %s/train.tsv, val: %s/val.tsv}\n"
             "model: {layers: 1, d_model: 32, heads: 4, seq_len: 16, vocab: 256}\n"
             "train: {steps: 20000, batch: 8, log_every: 5, eval_every: 100000}\n"
             "metric: {name: train/loss, goal: min}\nsweep:\n%s",
             name, g_dir, g_dir, sweep);
    it_write_text(p, text, 0644);
    return p;
}

/* `bfctl edit JOB ARGS`: its exit status, its stdout in out, its stderr in
 * err (both at most 1 KiB). */
static int edit(long long job, const char *args, char *out, char *err) {
    char a[512];
    it_write_text(tmpdir_path(g_dir, "bfctl.err"), "", 0644);
    snprintf(a, sizeof a, "edit %lld %s", job, args);
    int rc = it_bfctl(g_dir, out, 1024, a);
    char *e = it_slurp(tmpdir_path(g_dir, "bfctl.err"), NULL);
    snprintf(err, 1024, "%s", e ? e : "");
    free(e);
    return rc;
}

#define COUNT(sql) it_db_int(g_home, sql, job)

Test(edit, add_values_and_drop_pending_outlive_a_killed_bfd) {
    long long job =
        it_submit(g_dir, write_sweep("grid", "  parameters:\n    train.seed: {values: [1, 2]}\n"
                                             "    train.lr: {values: [0.001]}\n"));
    char out[1024], err[1024], before[4096], after[4096];
    it_db_text(g_home, "SELECT group_concat(params || hash, ';') FROM trials WHERE job = ?1", job,
               before, sizeof before);
    /* train.lr 0.002 crossed with both seeds: two trials after the two */
    cr_assert_eq(edit(job, "--add train.lr=0.002", out, err), 0, "%s", err);
    cr_assert(strstr(out, "2 trials added"), "%s", out);
    cr_assert_eq(COUNT("SELECT n_trials FROM jobs WHERE id = ?1"), 4);
    cr_assert_eq(COUNT("SELECT COUNT(*) FROM trials WHERE job = ?1 AND idx >= 2 AND state ="
                       " 'PENDING' AND json_extract(params, '$.\"train.lr\"') = 0.002"),
                 2);
    cr_assert_eq(COUNT("SELECT COUNT(DISTINCT json_extract(params, '$.\"train.seed\"')) FROM"
                       " trials WHERE job = ?1 AND idx >= 2"),
                 2);
    it_db_text(g_home,
               "SELECT group_concat(params || hash, ';') FROM trials WHERE job = ?1 AND idx < 2",
               job, after, sizeof after);
    cr_assert_str_eq(after, before, "the old trials changed");
    /* then seed 3 crosses both rates: two more */
    cr_assert_eq(edit(job, "--add train.seed=3", out, err), 0, "%s", err);
    cr_assert(strstr(out, "2 trials added"), "%s", out);
    cr_assert_eq(COUNT("SELECT COUNT(*) FROM trials WHERE job = ?1"), 6);
    /* drop the pending trials of seed 3 */
    cr_assert_eq(edit(job, "--drop-pending train.seed=3", out, err), 0, "%s", err);
    cr_assert(strstr(out, "2 pending trials dropped"), "%s", out);
    cr_assert_eq(COUNT("SELECT COUNT(*) FROM trials WHERE job = ?1 AND state = 'CANCELLED' AND"
                       " json_extract(params, '$.\"train.seed\"') = 3"),
                 2);
    cr_assert_eq(COUNT("SELECT COUNT(*) FROM events WHERE job = ?1 AND kind = 'state' AND"
                       " message LIKE '%dropped by edit: train.seed=3%'"),
                 2);
    cr_assert_eq(COUNT("SELECT COUNT(*) FROM events WHERE job = ?1 AND kind = 'EDIT'"), 3);
    /* refusals, each saying why */
    cr_assert_neq(edit(job, "--add train.batch=16", out, err), 0);
    cr_assert(strstr(err, "'train.batch' is not an axis") && strstr(err, "train.seed"), "%s", err);
    cr_assert_neq(edit(job, "--add train.lr=fast", out, err), 0);
    cr_assert(strstr(err, "train.lr"), "%s", err);
    cr_assert_neq(edit(job, "--drop-pending model.heads=4", out, err), 0);
    cr_assert(strstr(err, "not an axis"), "%s", err);
    cr_assert_neq(edit(job, "--add train.seed", out, err), 0);
    cr_assert(strstr(err, "KEY=V1,V2"), "%s", err);
    /* a killed bfd: the restarted one holds the edits (seed 3 and lr 0.002
     * are on their axes, so adding them again is refused) */
    it_stop(&g_bfd, SIGKILL);
    it_kill_workers(g_home);
    g_bfd = it_bfd_start(g_dir, g_home);
    cr_assert_eq(COUNT("SELECT n_trials FROM jobs WHERE id = ?1"), 6);
    cr_assert_neq(edit(job, "--add train.seed=3", out, err), 0);
    cr_assert(strstr(err, "train.seed: value 3 is on the axis already"), "%s", err);
    cr_assert_neq(edit(job, "--add train.lr=0.002", out, err), 0);
    cr_assert(strstr(err, "on the axis already"), "%s", err);
    cr_assert_eq(edit(job, "--add train.seed=4", out, err), 0, "%s", err);
    cr_assert(strstr(out, "2 trials added"), "%s", out);
    cr_assert_eq(COUNT("SELECT COUNT(*) FROM trials WHERE job = ?1 AND state = 'CANCELLED'"), 2);
    char a[64];
    snprintf(a, sizeof a, "cancel %lld", job);
    cr_assert_eq(it_bfctl(g_dir, NULL, 0, a), 0);
}

Test(edit, add_is_refused_for_a_random_sweep) {
    long long job =
        it_submit(g_dir, write_sweep("rnd", "  method: random\n  trials: 2\n  parameters:\n"
                                            "    train.seed: {values: [1, 2, 3]}\n"));
    char out[1024], err[1024];
    cr_assert_neq(edit(job, "--add train.seed=4", out, err), 0);
    cr_assert(strstr(err, "is a random sweep: values are added to grid axes only"), "%s", err);
    cr_assert_eq(COUNT("SELECT COUNT(*) FROM trials WHERE job = ?1"), 2);
    char a[64];
    snprintf(a, sizeof a, "cancel %lld", job);
    cr_assert_eq(it_bfctl(g_dir, NULL, 0, a), 0);
}
