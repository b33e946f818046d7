/* test_it_data_edges — bfworker on the user's own data, as a user meets it
 * (real processes, real files):
 *   - a folder given as a data file is named as a folder, not "not found";
 *   - TSV data that trains but not as meant is warned about (classes with
 *     very few examples, a batch larger than the data), and sentencepiece's
 *     own log lines never reach stderr;
 *   - caches go to BF_CACHE, never beside the data;
 *   - `generate` needs only the run folder (its tokenizer and checkpoint),
 *     not the corpus it was trained on. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "tests/tmpdir.h"

#define GOLDEN BF_SOURCE_DIR "/tests/data/golden"

static char dir[256];
static void setup(void) { tmpdir_make(dir, sizeof dir, "/tmp/bf_data_edges_XXXXXX"); }
static void teardown(void) { tmpdir_remove(dir); }
TestSuite(data_edges, .init = setup, .fini = teardown, .timeout = 120);

/* Runs cmd in dir with BF_CACHE=dir/cache; output (stdout + stderr) in out.
 * Returns the exit status. */
static int run(const char *cmd, char *out, size_t outlen) {
    char full[4096];
    snprintf(full, sizeof full, "cd %s && BF_CACHE=%s/cache %s 2>&1", dir, dir, cmd);
    FILE *p = popen(full, "r");
    cr_assert_not_null(p, "%s", full);
    size_t n = fread(out, 1, outlen - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void write_file(const char *name, const char *text) {
    tmpdir_write(tmpdir_path(dir, name), text, strlen(text));
}

/* Entries of folder sub of dir (not . and ..). */
static int entries(const char *sub) {
    DIR *d = opendir(tmpdir_path(dir, sub));
    cr_assert_not_null(d, "%s", sub);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static char out[1 << 16];

Test(data_edges, a_folder_given_as_a_data_file_is_named_a_folder) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/folder && cp %s/tests/data/glosses_val.tsv %s/", dir,
             BF_SOURCE_DIR, dir);
    cr_assert_eq(system(cmd), 0);
    const char *cases[][2] = {
        {"--set data.train=folder --set data.val=glosses_val.tsv", "data.train"},
        {"--set data.train=glosses_val.tsv --set data.val=folder", "data.val"},
        {"--set data.train=glosses_val.tsv --set data.val=glosses_val.tsv --set data.test=folder",
         "data.test"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        snprintf(cmd, sizeof cmd, "%s/bfworker train %s/budget_off.yaml %s --quiet --out r%zu",
                 BF_BIN_DIR, GOLDEN, cases[k][0], k);
        int rc = run(cmd, out, sizeof out);
        cr_expect_eq(rc, 1, "%s: status %d\n%s", cases[k][1], rc, out);
        char want[512];
        snprintf(want, sizeof want, "%s: %s/folder is a folder; expected a TSV file", cases[k][1],
                 dir);
        cr_expect(strstr(out, want), "want '%s', got:\n%s", want, out);
    }
    /* lm: data.path */
    snprintf(cmd, sizeof cmd, "%s/bfworker train %s/lm_dense.yaml --set data.path=folder --out rl",
             BF_BIN_DIR, GOLDEN);
    int rc = run(cmd, out, sizeof out);
    cr_expect_eq(rc, 1, "status %d\n%s", rc, out);
    cr_expect(strstr(out, "data.path: ") && strstr(out, "is a folder; expected a UTF-8 text file"),
              "%s", out);
    /* and a missing file still says not found, naming its key */
    snprintf(cmd, sizeof cmd,
             "%s/bfworker train %s/budget_off.yaml --set data.train=nope.tsv "
             "--set data.val=glosses_val.tsv --out rn",
             BF_BIN_DIR, GOLDEN);
    cr_expect_eq(run(cmd, out, sizeof out), 1, "%s", out);
    cr_expect(strstr(out, "data.train: ") && strstr(out, "nope.tsv not found"), "%s", out);
}

/* 3 classes: 'big' has 40 examples, 'small' 2 and 'one' 1; batch 64 > 43. */
static void write_skewed_tsv(const char *name) {
    static const char *words[] = {"river", "stone", "cloud", "field", "light", "glass", "bread"};
    char *buf = malloc(1 << 16);
    size_t w = 0;
    for (int i = 0; i < 43; i++) {
        const char *label = i < 40 ? "big" : i < 42 ? "small" : "one";
        w += (size_t)snprintf(buf + w, (1 << 16) - w, "%s\tthe %s and the %s of %s %d\n", label,
                              words[i % 7], words[(i / 7) % 7], words[(i * 3) % 7], i);
    }
    tmpdir_write(tmpdir_path(dir, name), buf, w);
    free(buf);
}

Test(data_edges, skewed_tsv_is_warned_about_and_sentencepiece_stays_quiet) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/data", dir);
    cr_assert_eq(system(cmd), 0);
    write_skewed_tsv("data/train.tsv");
    write_skewed_tsv("data/val.tsv");
    /* sentencepiece logs its training (and that this vocabulary is more than
     * the data fills): none of it may reach the user */
    snprintf(cmd, sizeof cmd,
             "%s/bfworker train %s/budget_off.yaml --set data.train=data/train.tsv "
             "--set data.val=data/val.tsv --set train.batch=64 --set train.steps=2 "
             "--set model.vocab=2000 --out run",
             BF_BIN_DIR, GOLDEN);
    int rc = run(cmd, out, sizeof out);
    cr_assert_eq(rc, 0, "status %d\n%s", rc, out);
    cr_expect(strstr(out, "tokenizer: training"), "the tokenizer was not trained here:\n%s", out);
    cr_expect(strstr(out, "data: warning: ") &&
                  strstr(out, "2 of 3 classes have fewer than 5 training examples: 'one' (1), "
                              "'small' (2)"),
              "no rare-class warning:\n%s", out);
    cr_expect(strstr(out, "train.batch 64 is larger than the 43 training examples"),
              "no batch warning:\n%s", out);
    /* sentencepiece's own lines look like "trainer_interface.cc(409) LOG(INFO) ..." */
    cr_expect(!strstr(out, ".cc(") && !strstr(out, "LOG("), "sentencepiece leaked:\n%s", out);
    /* caches went to BF_CACHE: the data folder holds only the two files */
    cr_expect_eq(entries("data"), 2, "bf wrote beside the data");
    cr_expect_gt(entries("cache"), 0);
    /* a balanced set with a small batch: no warning */
    snprintf(cmd, sizeof cmd, "cp %s/tests/data/glosses_*.tsv %s/", BF_SOURCE_DIR, dir);
    cr_assert_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd,
             "%s/bfworker train %s/budget_off.yaml --set data.train=glosses_train.tsv "
             "--set data.val=glosses_val.tsv --set train.batch=8 --set train.steps=1 --out ok",
             BF_BIN_DIR, GOLDEN);
    cr_assert_eq(run(cmd, out, sizeof out), 0, "%s", out);
    cr_expect(!strstr(out, "train.batch"), "%s", out);
}

Test(data_edges, generate_needs_only_the_run_folder) {
    char cmd[2048];
    FILE *f = fopen(tmpdir_path(dir, "corpus.txt"), "w");
    cr_assert_not_null(f);
    const char *who[] = {"the king", "a shepherd", "the people", "my brother", "the servant"};
    const char *what[] = {"the city", "the mountain", "his house", "the river", "the temple"};
    for (int i = 0; i < 300; i++) fprintf(f, "and %s went up to %s.\n", who[i % 5], what[i / 60]);
    fclose(f);
    write_file("tiny.yaml", "pipeline: lm\ndevice: cpu\ndata: {path: corpus.txt, val_fraction: "
                            "0.1}\nmodel: {layers: 1, d_model: 32, heads: 2, seq_len: 16, vocab: "
                            "64}\ntrain: {steps: 30, batch: 8, lr: 3.0e-3, eval_every: 30}\n");
    snprintf(cmd, sizeof cmd, "%s/bfworker train tiny.yaml --quiet --out run", BF_BIN_DIR);
    cr_assert_eq(run(cmd, out, sizeof out), 0, "%s", out);
    snprintf(cmd, sizeof cmd,
             "%s/bfworker generate run --prompt 'and the king' --tokens 8 --temperature 0",
             BF_BIN_DIR);
    static char before[4096];
    cr_assert_eq(run(cmd, before, sizeof before), 0, "%s", before);
    /* no corpus and no cache any more: the run folder is enough, and the
     * text is the same */
    snprintf(cmd, sizeof cmd, "rm -rf %s/corpus.txt %s/cache", dir, dir);
    cr_assert_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd,
             "cd / && %s/bfworker generate %s/run --prompt 'and the king' --tokens 8 "
             "--temperature 0",
             BF_BIN_DIR, dir);
    int rc = run(cmd, out, sizeof out);
    cr_expect_eq(rc, 0, "generate without the corpus: status %d\n%s", rc, out);
    cr_expect_str_eq(out, before);
    /* a run from before tokenizer.model was kept still needs its corpus,
     * and says which */
    snprintf(cmd, sizeof cmd, "rm %s/run/tokenizer.model", dir);
    cr_assert_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s/bfworker generate run --prompt 'and' --tokens 2", BF_BIN_DIR);
    rc = run(cmd, out, sizeof out);
    cr_expect_eq(rc, 1, "status %d\n%s", rc, out);
    cr_expect(strstr(out, "corpus.txt not found"), "%s", out);
}

/* `bfctl validate` looks at the data as bfworker will: a training file that
 * is missing (a relative path: the message names the folder it was looked
 * up in), a FIFO, a folder, empty or of one class fails validation, naming
 * the key and the path; good files pass. It used to say "ok" for each. */
Test(data_edges, validate_checks_the_data_files) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && mkdir -p folder && mkfifo fifo && : > empty.tsv && "
             "printf 'a\\tx y\\na\\ty z\\n' > one.tsv && cp %s/tests/data/glosses_val.tsv .",
             dir, BF_SOURCE_DIR);
    cr_assert_eq(system(cmd), 0);
    const char *cases[][2] = {
        {"nope.tsv", "data.train: nope.tsv: not found (a relative path, looked up in "},
        {"fifo", "data.train: fifo: is a FIFO, not a regular file"},
        {"folder", "data.train: folder: is a folder, not a regular file"},
        {"empty.tsv", "data.train: empty.tsv is empty"},
        {"one.tsv", "data.train: one.tsv has one distinct label ('a'); training needs at least 2"},
        {"glosses_val.tsv", NULL},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char sweep[1024];
        snprintf(sweep, sizeof sweep,
                 "name: pre\npipeline: budgetformer\ndevice: cpu\n"
                 "data: {train: %s, val: glosses_val.tsv}\n"
                 "model: {layers: 1, d_model: 32, heads: 4, seq_len: 16, vocab: 256}\n"
                 "train: {steps: 10, batch: 8}\n",
                 cases[k][0]);
        write_file("pre.yaml", sweep);
        snprintf(cmd, sizeof cmd, "%s/bfctl validate pre.yaml", BF_BIN_DIR);
        int rc = run(cmd, out, sizeof out);
        if (!cases[k][1]) {
            cr_expect_eq(rc, 0, "%s: %s", cases[k][0], out);
            continue;
        }
        cr_expect_eq(rc, 1, "%s validated: %s", cases[k][0], out);
        cr_expect(strstr(out, cases[k][1]), "want '%s', got:\n%s", cases[k][1], out);
        if (k == 0) cr_expect(strstr(out, dir), "the folder is not named: %s", out);
    }
}

/* Texts longer than model.seq_len are cut when batched: training says how
 * many and what share of their tokens is lost (it used to say nothing),
 * and says nothing when every text fits. */
Test(data_edges, texts_cut_at_seq_len_are_warned_about) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cp %s/tests/data/glosses_train.tsv %s/tests/data/glosses_val.tsv %s/", BF_SOURCE_DIR,
             BF_SOURCE_DIR, dir);
    cr_assert_eq(system(cmd), 0);
    const char *base = "%s/bfworker train %s/budget_off.yaml --set data.train=glosses_train.tsv "
                       "--set data.val=glosses_val.tsv --set train.steps=1 --set "
                       "model.seq_len=%d --out r%d";
    snprintf(cmd, sizeof cmd, base, BF_BIN_DIR, GOLDEN, 16, 16);
    cr_assert_eq(run(cmd, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "texts (") && strstr(out, "are longer than model.seq_len 16 tokens and "
                                                    "are cut to it, losing "),
              "no word of the cut texts:\n%s", out);
    snprintf(cmd, sizeof cmd, base, BF_BIN_DIR, GOLDEN, 256, 256);
    cr_assert_eq(run(cmd, out, sizeof out), 0, "%s", out);
    cr_assert_null(strstr(out, "are longer than model.seq_len"), "%s", out);
}
