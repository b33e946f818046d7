/* Tests of the sentencepiece shim, on real WordNet glosses, and of the
 * cached loaders that use it. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "worker/data/data.h"
#include "worker/data/tok.h"

#define WN "/usr/share/wordnet/data.noun"

static char tmpdir[256];
static char *glosses[2000];
static int n_train, n_held;

/* Every 40th synset's gloss: the first 600 for training, the next 100 held out. */
static void load_glosses(void) {
    FILE *f = fopen(WN, "r");
    if (!f) return;
    char line[70000];
    int k = 0, n = 0;
    while (fgets(line, sizeof line, f) && n < 700) {
        if (line[0] == ' ' || k++ % 40) continue;
        char *g = strstr(line, " | ");
        if (!g) continue;
        g += 3;
        size_t l = strlen(g);
        while (l && (g[l - 1] == '\n' || g[l - 1] == ' ')) g[--l] = 0;
        glosses[n++] = strdup(g);
    }
    fclose(f);
    n_train = n < 600 ? n : 600;
    n_held = n - n_train;
}

static void setup(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/bf_test_tok_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    /* a cache folder of this test's own: "rebuilt" means what it says */
    char cache[300];
    snprintf(cache, sizeof cache, "%s/cache", tmpdir);
    setenv("BF_CACHE", cache, 1);
    load_glosses();
    if (n_train < 600) cr_skip_test("wordnet-base is not installed");
}

static void teardown(void) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    for (int i = 0; i < n_train + n_held; i++) free(glosses[i]);
}

static const char *tpath(const char *name) {
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    return p;
}

static tok_t *train(tok_kind kind, int vocab, int byte_fallback, const char *name) {
    tok_train_opts o;
    tok_train_opts_init(&o);
    o.kind = kind;
    o.vocab = vocab;
    o.byte_fallback = byte_fallback;
    o.hard_vocab_limit = 0;
    o.prefix = tpath(name);
    char err[1024];
    int rc =
        tok_train_sentences((const char *const *)glosses, (size_t)n_train, &o, err, sizeof err);
    cr_assert_eq(rc, TOK_OK, "%s", err);
    char model[600];
    snprintf(model, sizeof model, "%s.model", o.prefix);
    tok_t *t = NULL;
    cr_assert_eq(tok_load(&t, model, err, sizeof err), TOK_OK, "%s", err);
    return t;
}

TestSuite(tok, .init = setup, .fini = teardown, .timeout = 60);

static void check_special_and_round_trip(tok_t *t, int vocab, int held_out) {
    cr_assert_gt(tok_vocab_size(t), 100);
    cr_assert_leq(tok_vocab_size(t), vocab);
    cr_assert_str_eq(tok_piece(t, TOK_PAD), "<pad>");
    cr_assert_str_eq(tok_piece(t, TOK_UNK), "<unk>");
    cr_assert_str_eq(tok_piece(t, TOK_BOS), "<s>");
    cr_assert_str_eq(tok_piece(t, TOK_EOS), "</s>");
    cr_assert_str_eq(tok_piece(t, TOK_SEP), TOK_SEP_PIECE);
    cr_assert_str_eq(tok_piece(t, tok_vocab_size(t)), "");
    char err[512];
    size_t total = 0;
    int from = held_out ? n_train : 0, to = held_out ? n_train + n_held : n_train;
    for (int i = from; i < to; i++) {
        int32_t *ids;
        size_t n;
        cr_assert_eq(tok_encode(t, glosses[i], strlen(glosses[i]), &ids, &n, err, sizeof err), 0,
                     "%s", err);
        cr_assert_gt(n, 0);
        for (size_t k = 0; k < n; k++) {
            cr_assert(ids[k] > TOK_SEP && ids[k] < tok_vocab_size(t), "id %d", ids[k]);
        }
        char *back;
        cr_assert_eq(tok_decode(t, ids, n, &back, err, sizeof err), 0, "%s", err);
        cr_assert_str_eq(back, glosses[i]);
        total += n;
        free(ids);
        free(back);
    }
    /* subwords: fewer tokens than bytes, more than words */
    size_t bytes = 0;
    for (int i = from; i < to; i++) bytes += strlen(glosses[i]);
    cr_assert_lt(total, bytes / 2);
}

Test(tok, unigram_special_ids_and_round_trip) {
    tok_t *t = train(TOK_UNIGRAM, 800, 0, "uni");
    check_special_and_round_trip(t, 800, 0);
    tok_destroy(&t);
    cr_assert_null(t);
}

Test(tok, bpe_round_trip_held_out_with_byte_fallback) {
    tok_t *t = train(TOK_BPE, 800, 1, "bpe");
    check_special_and_round_trip(t, 800, 0);
    check_special_and_round_trip(t, 800, 1);
    /* a character never seen in training still round-trips through bytes */
    const char *s = "\xE2\x98\x83 snowman";
    int32_t *ids;
    size_t n;
    char err[256], *back;
    cr_assert_eq(tok_encode(t, s, strlen(s), &ids, &n, err, sizeof err), 0);
    for (size_t k = 0; k < n; k++) cr_assert_neq(ids[k], TOK_UNK);
    cr_assert_eq(tok_decode(t, ids, n, &back, err, sizeof err), 0);
    cr_assert_str_eq(back, s);
    free(ids);
    free(back);
    tok_destroy(&t);
}

Test(tok, separator_reserved_and_errors) {
    tok_t *t = train(TOK_UNIGRAM, 600, 0, "u2");
    char err[512];
    int32_t ids[3] = {7, TOK_SEP, 9}, bad[2] = {7, 1 << 20};
    char *s = NULL;
    cr_assert_eq(tok_decode(t, bad, 2, &s, err, sizeof err), TOK_EINVAL);
    cr_assert(strstr(err, "position 1"), "%s", err);
    cr_assert_null(s);
    cr_assert_eq(tok_decode(t, ids, 3, &s, err, sizeof err), 0, "%s", err);
    free(s);
    /* an unseen character without byte fallback is unk */
    int32_t *e;
    size_t n;
    cr_assert_eq(tok_encode(t, "\xE2\x98\x83", 3, &e, &n, err, sizeof err), 0);
    int unk = 0;
    for (size_t k = 0; k < n; k++) unk += e[k] == TOK_UNK;
    cr_assert_eq(unk, 1);
    free(e);
    tok_destroy(&t);
    /* not a model; missing file; bad options */
    FILE *f = fopen(tpath("junk.model"), "w");
    fputs("not a model", f);
    fclose(f);
    cr_assert_neq(tok_load(&t, tpath("junk.model"), err, sizeof err), TOK_OK);
    cr_assert_null(t);
    cr_assert_eq(tok_load(&t, tpath("none.model"), err, sizeof err), TOK_EIO);
    tok_train_opts o;
    tok_train_opts_init(&o);
    o.prefix = tpath("x");
    o.vocab = 3;
    cr_assert_eq(tok_train_sentences((const char *const *)glosses, 10, &o, err, sizeof err),
                 TOK_EINVAL);
    cr_assert(strstr(err, "16"), "%s", err);
}

Test(tok, train_from_file_and_hash) {
    FILE *f = fopen(tpath("corpus.txt"), "w");
    for (int i = 0; i < n_train; i++) fprintf(f, "%s\n", glosses[i]);
    fclose(f);
    tok_train_opts o;
    tok_train_opts_init(&o);
    o.vocab = 700;
    o.hard_vocab_limit = 0;
    o.prefix = tpath("file");
    char err[512];
    cr_assert_eq(tok_train_file(tpath("corpus.txt"), &o, err, sizeof err), 0, "%s", err);
    tok_t *a, *b;
    cr_assert_eq(tok_load(&a, tpath("file.model"), err, sizeof err), 0, "%s", err);
    cr_assert_eq(tok_load(&b, tpath("file.model"), err, sizeof err), 0, "%s", err);
    cr_assert_eq(tok_hash(a), tok_hash(b));
    tok_t *c = train(TOK_UNIGRAM, 500, 0, "other");
    cr_assert_neq(tok_hash(a), tok_hash(c));
    tok_destroy(&a);
    tok_destroy(&b);
    tok_destroy(&c);
    cr_assert_eq(tok_train_file(tpath("nope.txt"), &o, err, sizeof err), TOK_EIO);
}

/* The loaders: a valid cache is used; a changed source, another tokenizer,
 * or a damaged cache makes them rebuild. */
Test(tok, open_tsv_uses_and_rebuilds_cache) {
    tok_t *t = train(TOK_UNIGRAM, 800, 0, "c");
    const char *tr = tpath("train.tsv"), *va = tpath("val.tsv");
    FILE *f = fopen(tr, "w");
    for (int i = 0; i < n_train; i++) fprintf(f, "c%d\t%s\n", i % 3, glosses[i]);
    fclose(f);
    f = fopen(va, "w");
    for (int i = n_train; i < n_train + n_held; i++)
        fprintf(f, "c%d\t%s\t%s\n", i % 3, glosses[i], glosses[i - 1]);
    fclose(f);
    char err[512];
    data_tok_t *d = NULL, *v = NULL;
    int rebuilt = -1;
    cr_assert_eq(data_open_tsv(tr, t, NULL, NULL, &d, &rebuilt, err, sizeof err), 0, "%s", err);
    cr_assert_eq(rebuilt, 1);
    cr_assert_eq(d->n_seq, (size_t)n_train);
    cr_assert_eq(d->n_classes, 3);
    /* BOS text EOS, and the ids are what tok_encode gives */
    int32_t *ids;
    size_t n;
    cr_assert_eq(tok_encode(t, glosses[5], strlen(glosses[5]), &ids, &n, err, sizeof err), 0);
    cr_assert_eq(d->offsets[6] - d->offsets[5], n + 2);
    cr_assert_eq(d->tokens[d->offsets[5]], TOK_BOS);
    cr_assert_eq(memcmp(d->tokens + d->offsets[5] + 1, ids, n * 4), 0);
    cr_assert_eq(d->tokens[d->offsets[6] - 1], TOK_EOS);
    cr_assert_eq(d->labels[5], 2);
    free(ids);
    data_tok_destroy(&d);
    cr_assert_eq(data_open_tsv(tr, t, NULL, NULL, &d, &rebuilt, err, sizeof err), 0, "%s", err);
    cr_assert_eq(rebuilt, 0, "a valid cache should be used");
    /* pairs: BOS a SEP b EOS, labels mapped against train */
    cr_assert_eq(data_open_tsv(va, t, d, NULL, &v, &rebuilt, err, sizeof err), 0, "%s", err);
    cr_assert_eq(rebuilt, 1);
    int seps = 0;
    for (uint64_t k = v->offsets[0]; k < v->offsets[1]; k++) seps += v->tokens[k] == TOK_SEP;
    cr_assert_eq(seps, 1);
    cr_assert_eq(v->labels[0], n_train % 3);
    data_tok_destroy(&v);
    /* change the source: rebuilt, and the new data seen */
    f = fopen(tr, "a");
    fprintf(f, "c9\textra line\n");
    fclose(f);
    data_tok_destroy(&d);
    cr_assert_eq(data_open_tsv(tr, t, NULL, NULL, &d, &rebuilt, err, sizeof err), 0, "%s", err);
    cr_assert_eq(rebuilt, 1);
    cr_assert_eq(d->n_seq, (size_t)n_train + 1);
    cr_assert_eq(d->n_classes, 4);
    data_tok_destroy(&d);
    /* damage the cache: rebuilt, not trusted */
    char cp[4400];
    {
        char dir[4096];
        data_src_id sid;
        cr_assert_eq(data_cache_dir(dir, sizeof dir, err, sizeof err), 0, "%s", err);
        cr_assert_eq(data_src_identify(tr, &sid, err, sizeof err), 0);
        data_cache_path(cp, sizeof cp, dir, data_cache_key(&sid, tok_hash(t), 0, DATA_KIND_CLS));
    }
    struct stat st;
    cr_assert_eq(stat(cp, &st), 0);
    cr_assert_eq(truncate(cp, st.st_size - 4), 0);
    cr_assert_eq(data_open_tsv(tr, t, NULL, NULL, &d, &rebuilt, err, sizeof err), 0, "%s", err);
    cr_assert_eq(rebuilt, 1);
    cr_assert_eq(d->n_seq, (size_t)n_train + 1);
    data_tok_destroy(&d);
    /* another tokenizer: another cache file, built fresh */
    tok_t *t2 = train(TOK_BPE, 500, 0, "c2");
    cr_assert_eq(data_open_tsv(tr, t2, NULL, NULL, &d, &rebuilt, err, sizeof err), 0, "%s", err);
    cr_assert_eq(rebuilt, 1);
    cr_assert_eq(d->vocab, tok_vocab_size(t2));
    data_tok_destroy(&d);
    /* a malformed source is an error, whatever the cache */
    f = fopen(tr, "a");
    fprintf(f, "no tab\n");
    fclose(f);
    cr_assert_eq(data_open_tsv(tr, t, NULL, NULL, &d, &rebuilt, err, sizeof err), DATA_EFORMAT);
    cr_assert(strstr(err, ":602:"), "%s", err);
    tok_destroy(&t);
    tok_destroy(&t2);
}

/* Names in folder dir that contain part (-1: the folder cannot be read). */
static int count_names(const char *dir, const char *part) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' && strstr(e->d_name, part)) n++;
    closedir(d);
    return n;
}

static void write_tsv(const char *path, int n) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < n; i++) fprintf(f, "c%d\t%s\n", i % 3, glosses[i]);
    cr_assert_eq(fclose(f), 0);
}

/* BF_CACHE: caches go to the cache folder, never beside the data, and are
 * keyed by the data's contents: a copy at another path or a touched file
 * finds the same cache; changed contents do not. */
Test(tok, cache_folder_keyed_by_contents) {
    tok_t *t = train(TOK_UNIGRAM, 800, 0, "k");
    char data[300], other[300], err[512];
    snprintf(data, sizeof data, "%s/data", tmpdir);
    snprintf(other, sizeof other, "%s/elsewhere", tmpdir);
    cr_assert_eq(mkdir(data, 0755), 0);
    cr_assert_eq(mkdir(other, 0755), 0);
    char a[400], b[400];
    snprintf(a, sizeof a, "%s/train.tsv", data);
    snprintf(b, sizeof b, "%s/copy.tsv", other);
    write_tsv(a, 200);
    write_tsv(b, 200);
    data_tok_t *d = NULL, *e = NULL;
    int rebuilt = -1;
    cr_assert_eq(data_open_tsv(a, t, NULL, NULL, &d, &rebuilt, err, sizeof err), 0, "%s", err);
    cr_assert_eq(rebuilt, 1);
    cr_assert_eq(count_names(data, ""), 1, "bf wrote beside the data");
    cr_assert_eq(count_names(tpath("cache"), ".bfcache"), 1);
    /* the same bytes at another path: the same cache */
    cr_assert_eq(data_open_tsv(b, t, NULL, NULL, &e, &rebuilt, err, sizeof err), 0, "%s", err);
    cr_assert_eq(rebuilt, 0, "a copy of the file at another path should find its cache");
    cr_assert_eq(e->offsets[e->n_seq], d->offsets[d->n_seq]);
    data_tok_destroy(&e);
    /* a new mtime, same bytes: still the same cache */
    struct timeval tv[2] = {{1000000000, 0}, {1000000000, 0}};
    cr_assert_eq(utimes(a, tv), 0);
    cr_assert_eq(data_open_tsv(a, t, NULL, NULL, &e, &rebuilt, err, sizeof err), 0, "%s", err);
    cr_assert_eq(rebuilt, 0, "an mtime change alone should not rebuild");
    data_tok_destroy(&e);
    /* other bytes: another cache, and the old one stays for the old data */
    write_tsv(a, 150);
    cr_assert_eq(data_open_tsv(a, t, NULL, NULL, &e, &rebuilt, err, sizeof err), 0, "%s", err);
    cr_assert_eq(rebuilt, 1);
    cr_assert_eq(e->n_seq, 150);
    cr_assert_eq(count_names(tpath("cache"), ".bfcache"), 2);
    cr_assert_eq(count_names(tpath("cache"), ".tmp-"), 0);
    data_tok_destroy(&e);
    data_tok_destroy(&d);
    /* a cache folder that cannot be made is an error naming BF_CACHE */
    char bad[450];
    snprintf(bad, sizeof bad, "%s/cache", a); /* under a file */
    setenv("BF_CACHE", bad, 1);
    cr_assert_neq(data_open_tsv(a, t, NULL, NULL, &e, &rebuilt, err, sizeof err), 0);
    cr_assert(strstr(err, "BF_CACHE") && strstr(err, bad), "%s", err);
    tok_destroy(&t);
}

/* Six processes tokenizing the same file into an empty cache folder at
 * once all succeed, with the same data, and leave one whole cache and no
 * temporary files. */
Test(tok, concurrent_writers_of_one_cache) {
    tok_t *t = train(TOK_UNIGRAM, 800, 0, "w");
    const char *src = tpath("shared.tsv");
    write_tsv(src, 600);
    for (int round = 0; round < 3; round++) {
        char cache[300];
        snprintf(cache, sizeof cache, "%s/cache%d", tmpdir, round);
        setenv("BF_CACHE", cache, 1);
        pid_t kids[6];
        for (int k = 0; k < 6; k++) {
            kids[k] = fork();
            cr_assert_neq(kids[k], -1);
            if (kids[k] == 0) {
                char err[512];
                data_tok_t *d = NULL;
                int rebuilt;
                int rc = data_open_tsv(src, t, NULL, NULL, &d, &rebuilt, err, sizeof err);
                if (rc) fprintf(stderr, "writer %d: %s\n", k, err);
                _exit(rc || d->n_seq != 600 ? 1 : 0);
            }
        }
        for (int k = 0; k < 6; k++) {
            int st;
            cr_assert_eq(waitpid(kids[k], &st, 0), kids[k]);
            cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "round %d: writer %d failed", round,
                      k);
        }
        cr_assert_eq(count_names(cache, ".bfcache"), 1);
        cr_assert_eq(count_names(cache, ".tmp-"), 0, "a temporary file was left behind");
        char err[512];
        data_tok_t *d = NULL;
        int rebuilt = -1;
        cr_assert_eq(data_open_tsv(src, t, NULL, NULL, &d, &rebuilt, err, sizeof err), 0, "%s",
                     err);
        cr_assert_eq(rebuilt, 0, "the cache the writers left is not whole");
        cr_assert_eq(d->n_seq, 600);
        data_tok_destroy(&d);
    }
    tok_destroy(&t);
}

Test(tok, open_text_stream_and_split) {
    tok_t *t = train(TOK_UNIGRAM, 800, 0, "lm");
    const char *p = tpath("corpus.txt");
    FILE *f = fopen(p, "w");
    for (int i = 0; i < n_train + n_held; i++) fprintf(f, "%s\n", glosses[i]);
    fclose(f);
    char err[512];
    data_tok_t *d;
    int rebuilt;
    cr_assert_eq(data_open_text(p, 0.1, t, NULL, &d, &rebuilt, err, sizeof err), 0, "%s", err);
    cr_assert_eq(rebuilt, 1);
    cr_assert_eq(d->kind, DATA_KIND_LM);
    cr_assert_eq(d->n_seq, (size_t)(n_train + n_held));
    cr_assert(d->val_start > d->n_seq * 8 / 10 && d->val_start < d->n_seq, "val_start %zu",
              d->val_start);
    for (size_t i = 0; i < d->n_seq; i++) cr_assert_eq(d->tokens[d->offsets[i + 1] - 1], TOK_EOS);
    size_t vs = d->val_start;
    data_tok_destroy(&d);
    cr_assert_eq(data_open_text(p, 0.1, t, NULL, &d, &rebuilt, err, sizeof err), 0, "%s", err);
    cr_assert_eq(rebuilt, 0);
    cr_assert_eq(d->val_start, vs);
    data_tok_destroy(&d);
    /* another val_fraction is another split: not served from the cache */
    cr_assert_eq(data_open_text(p, 0.2, t, NULL, &d, &rebuilt, err, sizeof err), 0, "%s", err);
    cr_assert_eq(rebuilt, 1);
    cr_assert_lt(d->val_start, vs);
    data_tok_destroy(&d);
    tok_destroy(&t);
}
