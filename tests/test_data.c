/* Tests of the data loaders: TSV, corpora, cache, IDX, batcher, and bfprep
 * run as a real process on real WordNet / KJV data. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "worker/data/data.h"

static char tmpdir[256];

static void mk_tmp(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/bf_test_data_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void rm_tmp(void) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
}

static const char *tpath(const char *name) {
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    return p;
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

static void write_str(const char *path, const char *s) { write_bytes(path, s, strlen(s)); }

TestSuite(tsv, .init = mk_tmp, .fini = rm_tmp);

Test(tsv, good_file_labels_sorted) {
    const char *p = tpath("a.tsv");
    write_str(
        p, "sports\tthe match was won\nbusiness\tstocks fell\r\nart\ta painting\nsports\tgoal\n");
    data_tsv_t *d = NULL;
    char err[512];
    cr_assert_eq(data_tsv_load(p, NULL, &d, err, sizeof err), DATA_OK, "%s", err);
    cr_assert_eq(d->n, 4);
    cr_assert_eq(d->is_pair, 0);
    cr_assert_null(d->text_b);
    cr_assert_eq(d->n_classes, 3);
    cr_assert_str_eq(d->class_names[0], "art");
    cr_assert_str_eq(d->class_names[1], "business");
    cr_assert_str_eq(d->class_names[2], "sports");
    cr_assert_eq(d->label[0], 2);
    cr_assert_eq(d->label[1], 1);
    cr_assert_eq(d->label[2], 0);
    cr_assert_eq(d->label[3], 2);
    cr_assert_str_eq(d->text_a[1], "stocks fell"); /* \r dropped */
    cr_assert_str_eq(d->text_a[3], "goal");
    cr_assert_eq(data_tsv_class_id(d, "business"), 1);
    cr_assert_eq(data_tsv_class_id(d, "nope"), -1);
    data_tsv_destroy(&d);
    cr_assert_null(d);
}

Test(tsv, pairs) {
    const char *p = tpath("p.tsv");
    write_str(p, "entail\ta man sleeps\ta person rests\ncontra\tit rains\tit is dry");
    data_tsv_t *d = NULL;
    char err[512];
    cr_assert_eq(data_tsv_load(p, NULL, &d, err, sizeof err), DATA_OK, "%s", err);
    cr_assert_eq(d->n, 2);
    cr_assert_eq(d->is_pair, 1);
    cr_assert_str_eq(d->text_a[0], "a man sleeps");
    cr_assert_str_eq(d->text_b[0], "a person rests");
    cr_assert_str_eq(d->text_b[1], "it is dry"); /* last line without newline */
    cr_assert_eq(d->label[0], 1);
    cr_assert_eq(d->label[1], 0);
    data_tsv_destroy(&d);
}

Test(tsv, label_mapping_stable_and_shared) {
    const char *a = tpath("a.tsv"), *b = tpath("b.tsv"), *v = tpath("v.tsv"),
               *bad = tpath("bad.tsv");
    write_str(a, "z\tone\ny\ttwo\nx\tthree\n");
    write_str(b, "x\tthree\nz\tone\ny\ttwo\n");
    write_str(v, "y\tfour\n");
    write_str(bad, "y\tfour\nw\tfive\n");
    data_tsv_t *da, *db, *dv, *dbad = NULL;
    char err[512];
    cr_assert_eq(data_tsv_load(a, NULL, &da, err, sizeof err), 0, "%s", err);
    cr_assert_eq(data_tsv_load(b, NULL, &db, err, sizeof err), 0, "%s", err);
    for (size_t i = 0; i < 3; i++) cr_assert_str_eq(da->class_names[i], db->class_names[i]);
    cr_assert_eq(data_tsv_class_id(da, "y"), data_tsv_class_id(db, "y"));
    /* val mapped against train, even though it holds one class */
    cr_assert_eq(data_tsv_load(v, da, &dv, err, sizeof err), 0, "%s", err);
    cr_assert_eq(dv->n_classes, 3);
    cr_assert_eq(dv->label[0], data_tsv_class_id(da, "y"));
    cr_assert_eq(data_tsv_load(bad, da, &dbad, err, sizeof err), DATA_EFORMAT);
    cr_assert_null(dbad);
    char want[600];
    snprintf(want, sizeof want, "%s:2:", bad);
    cr_assert(strstr(err, want) && strstr(err, "'w'"), "message: %s", err);
    data_tsv_destroy(&da);
    data_tsv_destroy(&db);
    data_tsv_destroy(&dv);
}

/* Each malformed line sits at line 3 after two good lines. */
static void expect_bad_line3(const char *bad_line, size_t bad_len, const char *what) {
    const char *p = tpath("m.tsv");
    const char *good = "a\tfine text\nb\talso fine\n";
    size_t gl = strlen(good);
    char *buf = malloc(gl + bad_len + 32);
    memcpy(buf, good, gl);
    memcpy(buf + gl, bad_line, bad_len);
    memcpy(buf + gl + bad_len, "\nc\tlast\n", 8);
    write_bytes(p, buf, gl + bad_len + 8);
    free(buf);
    data_tsv_t *d = NULL;
    char err[1024] = "";
    cr_assert_eq(data_tsv_load(p, NULL, &d, err, sizeof err), DATA_EFORMAT, "%s accepted", what);
    cr_assert_null(d);
    char want[600];
    snprintf(want, sizeof want, "%s:3:", p);
    cr_assert(strstr(err, want) != NULL, "%s: message lacks %s: %s", what, want, err);
    cr_assert(strstr(err, what) != NULL, "message lacks '%s': %s", what, err);
}

Test(tsv, malformed_lines_name_file_and_line) {
    expect_bad_line3("no tab here", 11, "no tab");
    expect_bad_line3("", 0, "empty line");
    expect_bad_line3("c\t   ", 5, "empty text");
    expect_bad_line3("c\ta\tb\tc", 7, "too many fields");
    expect_bad_line3("c\ta\tb", 5, "3 fields, but line 1 has 2");
    expect_bad_line3("\tsome text", 10, "empty label");
    expect_bad_line3("c\tbad \xC3\x28 utf8", 13, "invalid UTF-8");
    expect_bad_line3("c\tover\xED\xA0\x80long", 13, "invalid UTF-8"); /* surrogate */
    size_t n = DATA_MAX_LINE + 10;
    char *big = malloc(n);
    memset(big, 'x', n);
    big[1] = '\t';
    expect_bad_line3(big, n, "the limit is 65536 bytes");
    free(big);
}

Test(tsv, line_at_the_cap_is_accepted_and_empty_file_refused) {
    const char *p = tpath("cap.tsv");
    size_t n = DATA_MAX_LINE;
    char *big = malloc(n + 1);
    memset(big, 'y', n);
    big[1] = '\t';
    big[n] = '\n';
    write_bytes(p, big, n + 1);
    free(big);
    data_tsv_t *d = NULL;
    char err[512];
    cr_assert_eq(data_tsv_load(p, NULL, &d, err, sizeof err), DATA_OK, "%s", err);
    cr_assert_eq(strlen(d->text_a[0]), DATA_MAX_LINE - 2);
    data_tsv_destroy(&d);
    write_str(p, "");
    cr_assert_eq(data_tsv_load(p, NULL, &d, err, sizeof err), DATA_EFORMAT);
    cr_assert_eq(data_tsv_load(tpath("missing.tsv"), NULL, &d, err, sizeof err), DATA_EIO);
}

Test(tsv, utf8_validator) {
    cr_assert(data_utf8_valid("plain", 5));
    cr_assert(data_utf8_valid("\xC3\xA9t\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", 14));
    cr_assert(!data_utf8_valid("\xC0\xAF", 2));         /* overlong */
    cr_assert(!data_utf8_valid("\xE2\x82", 2));         /* cut short */
    cr_assert(!data_utf8_valid("\xF4\x90\x80\x80", 4)); /* > U+10FFFF */
    cr_assert(!data_utf8_valid("\xFF", 1));
}

/* ---- text corpora ------------------------------------------------------- */

/* what editors and other tools leave in a TSV: a BOM, spaces around a label,
 * trailing blank lines (accepted, consistently); a NUL byte (refused with
 * FILE:LINE, not a silently cut text) */
Test(tsv, bom_spaces_blank_tail_and_nul) {
    const char *p = tpath("e.tsv");
    write_str(p, "\xEF\xBB\xBFpos\tgood film\npos \tfine\n neg\tdull\n\n\r\n  \n");
    data_tsv_t *d = NULL;
    char err[512];
    cr_assert_eq(data_tsv_load(p, NULL, &d, err, sizeof err), DATA_OK, "%s", err);
    cr_assert_eq(d->n, 3);
    cr_assert_eq(d->n_classes, 2, "classes: %s, %s, ...", d->class_names[0],
                 d->n_classes > 1 ? d->class_names[1] : "");
    cr_assert_str_eq(d->class_names[0], "neg");
    cr_assert_str_eq(d->class_names[1], "pos");
    cr_assert_eq(d->label[0], 1);
    cr_assert_eq(d->label[1], 1);
    data_tsv_destroy(&d);
    write_bytes(p, "a\tone\nb\ttw\0o\n", 13); /* the 13 bytes, no terminator */
    cr_assert_eq(data_tsv_load(p, NULL, &d, err, sizeof err), DATA_EFORMAT);
    cr_assert(strstr(err, "e.tsv:2: NUL byte at column 5"), "%s", err);
    write_str(p, "a\tone\n\nb\ttwo\n");
    cr_assert_eq(data_tsv_load(p, NULL, &d, err, sizeof err), DATA_EFORMAT);
    cr_assert(strstr(err, "e.tsv:2: empty line"), "%s", err);
    write_str(p, "\n\n  \n");
    cr_assert_eq(data_tsv_load(p, NULL, &d, err, sizeof err), DATA_EFORMAT);
    cr_assert(strstr(err, "only blank lines"), "%s", err);
}

TestSuite(text, .init = mk_tmp, .fini = rm_tmp);

Test(text, split_deterministic_disjoint_shortest_tail) {
    const char *p = tpath("c.txt");
    FILE *f = fopen(p, "w");
    size_t total = 0;
    for (int i = 0; i < 200; i++) {
        int len = 5 + (i * 37) % 50;
        for (int k = 0; k < len; k++) fputc('a' + (i + k) % 26, f);
        fputc('\n', f);
        total += (size_t)len + 1;
    }
    fclose(f);
    char err[512];
    data_text_t *a, *b;
    cr_assert_eq(data_text_load(p, 0.1, &a, err, sizeof err), 0, "%s", err);
    cr_assert_eq(data_text_load(p, 0.1, &b, err, sizeof err), 0, "%s", err);
    cr_assert_eq(a->n_lines, 200);
    cr_assert_eq(a->val_start, b->val_start);
    cr_assert(a->val_start > 0 && a->val_start < 200);
    size_t tail = 0;
    for (size_t i = a->val_start; i < a->n_lines; i++) tail += a->line_bytes[i] + 1;
    cr_assert_geq((double)tail, 0.1 * (double)total);
    cr_assert_lt((double)(tail - a->line_bytes[a->val_start] - 1), 0.1 * (double)total);
    cr_assert_eq(data_text_split(a, 0.0), 200);
    cr_assert_geq(data_text_split(a, 0.999), 1); /* keeps a training line */
    data_text_destroy(&a);
    data_text_destroy(&b);
    write_str(p, "good line\nbad \xC3 line\n");
    cr_assert_eq(data_text_load(p, 0.1, &a, err, sizeof err), DATA_EFORMAT);
    char want[600];
    snprintf(want, sizeof want, "%s:2:", p);
    cr_assert(strstr(err, want), "%s", err);
    cr_assert_eq(data_text_load(p, 1.0, &a, err, sizeof err), DATA_EINVAL);
}

/* ---- tokenized sets built by hand, for the cache and the batcher -------- */

/* CLS: n sequences; sequence i has len_of(i) tokens valued 1000*i + t + 5. */
static size_t len_of(size_t i) { return 1 + (i * 7) % 13; }

static data_tok_t *make_cls(size_t n, int n_classes) {
    data_tok_t *d = calloc(1, sizeof *d);
    d->kind = DATA_KIND_CLS;
    d->vocab = 1000000;
    d->n_seq = n;
    d->val_start = n;
    d->offsets = calloc(n + 1, sizeof(uint64_t));
    for (size_t i = 0; i < n; i++) d->offsets[i + 1] = d->offsets[i] + len_of(i);
    d->tokens = malloc(d->offsets[n] * sizeof(int32_t));
    d->labels = malloc(n * sizeof(int32_t));
    for (size_t i = 0; i < n; i++) {
        for (size_t t = 0; t < len_of(i); t++)
            d->tokens[d->offsets[i] + t] = (int32_t)(1000 * i + t + 5);
        d->labels[i] = (int32_t)(i % (size_t)n_classes);
    }
    d->n_classes = (size_t)n_classes;
    d->class_names = calloc((size_t)n_classes, sizeof(char *));
    for (int c = 0; c < n_classes; c++) {
        char b[32];
        snprintf(b, sizeof b, "class%02d", c);
        d->class_names[c] = strdup(b);
    }
    return d;
}

/* LM: n_lines lines of 7 tokens each; token at stream position p is p + 5. */
static data_tok_t *make_lm(size_t n_lines, size_t val_start) {
    data_tok_t *d = calloc(1, sizeof *d);
    d->kind = DATA_KIND_LM;
    d->vocab = 1000000;
    d->n_seq = n_lines;
    d->val_start = val_start;
    d->offsets = calloc(n_lines + 1, sizeof(uint64_t));
    for (size_t i = 0; i < n_lines; i++) d->offsets[i + 1] = d->offsets[i] + 7;
    d->tokens = malloc(d->offsets[n_lines] * sizeof(int32_t));
    for (size_t p = 0; p < d->offsets[n_lines]; p++) d->tokens[p] = (int32_t)(p + 5);
    return d;
}

static void assert_same(const data_tok_t *a, const data_tok_t *b) {
    cr_assert_eq(a->kind, b->kind);
    cr_assert_eq(a->vocab, b->vocab);
    cr_assert_eq(a->n_seq, b->n_seq);
    cr_assert_eq(a->val_start, b->val_start);
    cr_assert_eq(memcmp(a->offsets, b->offsets, (a->n_seq + 1) * 8), 0);
    cr_assert_eq(memcmp(a->tokens, b->tokens, a->offsets[a->n_seq] * 4), 0);
    cr_assert_eq(a->n_classes, b->n_classes);
    if (a->kind == DATA_KIND_CLS) {
        cr_assert_eq(memcmp(a->labels, b->labels, a->n_seq * 4), 0);
        for (size_t i = 0; i < a->n_classes; i++)
            cr_assert_str_eq(a->class_names[i], b->class_names[i]);
    }
}

TestSuite(cache, .init = mk_tmp, .fini = rm_tmp);

Test(cache, round_trip_cls_and_lm) {
    char err[512];
    data_src_id id = {123, 789};
    data_tok_t *c = make_cls(50, 5), *l = make_lm(20, 17), *r = NULL;
    cr_assert_eq(data_cache_write(tpath("c.bfcache"), c, &id, 42, 7, err, sizeof err), 0, "%s",
                 err);
    cr_assert_eq(data_cache_read(tpath("c.bfcache"), &id, 42, 7, &r, err, sizeof err), 0, "%s",
                 err);
    assert_same(c, r);
    data_tok_destroy(&r);
    cr_assert_eq(data_cache_write(tpath("l.bfcache"), l, &id, 42, 0, err, sizeof err), 0, "%s",
                 err);
    cr_assert_eq(data_cache_read(tpath("l.bfcache"), &id, 42, 0, &r, err, sizeof err), 0, "%s",
                 err);
    assert_same(l, r);
    cr_assert_null(r->labels);
    data_tok_destroy(&r);
    /* keyed on tokenizer, extra and source */
    cr_assert_eq(data_cache_read(tpath("c.bfcache"), &id, 43, 7, &r, err, sizeof err), DATA_ESTALE);
    cr_assert_eq(data_cache_read(tpath("c.bfcache"), &id, 42, 8, &r, err, sizeof err), DATA_ESTALE);
    data_src_id id2 = id;
    id2.fnv ^= 1;
    cr_assert_eq(data_cache_read(tpath("c.bfcache"), &id2, 42, 7, &r, err, sizeof err),
                 DATA_ESTALE);
    id2 = id;
    id2.size++;
    cr_assert_eq(data_cache_read(tpath("c.bfcache"), &id2, 42, 7, &r, err, sizeof err),
                 DATA_ESTALE);
    cr_assert_null(r);
    data_tok_destroy(&c);
    data_tok_destroy(&l);
}

Test(cache, source_identity_tracks_contents) {
    char err[512];
    const char *s = tpath("src.txt");
    write_str(s, "abcdef\n");
    data_src_id a, b;
    cr_assert_eq(data_src_identify(s, &a, err, sizeof err), 0, "%s", err);
    cr_assert_eq(a.size, 7);
    write_str(s, "abcdeg\n"); /* same size, maybe same mtime tick: the FNV differs */
    cr_assert_eq(data_src_identify(s, &b, err, sizeof err), 0, "%s", err);
    cr_assert_neq(a.fnv, b.fnv);
    data_tok_t *c = make_cls(10, 2), *r = NULL;
    cr_assert_eq(data_cache_write(tpath("x.bfcache"), c, &a, 1, 0, err, sizeof err), 0, "%s", err);
    cr_assert_eq(data_cache_read(tpath("x.bfcache"), &b, 1, 0, &r, err, sizeof err), DATA_ESTALE);
    data_tok_destroy(&c);
}

static void read_all(const char *p, unsigned char **buf, size_t *n) {
    FILE *f = fopen(p, "rb");
    cr_assert_not_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    *buf = malloc(*n);
    cr_assert_eq(fread(*buf, 1, *n, f), *n);
    fclose(f);
}

Test(cache, corruption_and_truncation_detected) {
    char err[512];
    data_src_id id = {1, 3};
    data_tok_t *c = make_cls(40, 4), *r = NULL;
    const char *p = tpath("c.bfcache"), *q = tpath("q.bfcache");
    cr_assert_eq(data_cache_write(p, c, &id, 9, 0, err, sizeof err), 0, "%s", err);
    unsigned char *buf;
    size_t n;
    read_all(p, &buf, &n);
    /* a flipped byte anywhere: magic, a header count, a token, a label, a name */
    size_t where[] = {0, 40, 120 + 8, n - 30, n - 2};
    for (size_t k = 0; k < sizeof where / sizeof *where; k++) {
        buf[where[k]] ^= 0x40;
        write_bytes(q, buf, n);
        buf[where[k]] ^= 0x40;
        int rc = data_cache_read(q, &id, 9, 0, &r, err, sizeof err);
        cr_assert_eq(rc, DATA_ECORRUPT, "flip at %zu gave rc %d (%s)", where[k], rc, err);
        cr_assert_null(r);
    }
    /* truncated: to nothing, inside the header, inside the payload */
    size_t cut[] = {0, 60, 119, 200, n - 1};
    for (size_t k = 0; k < sizeof cut / sizeof *cut; k++) {
        write_bytes(q, buf, cut[k]);
        cr_assert_eq(data_cache_read(q, &id, 9, 0, &r, err, sizeof err), DATA_ECORRUPT,
                     "cut at %zu", cut[k]);
    }
    cr_assert(strstr(err, "truncated"), "%s", err);
    /* trailing junk */
    unsigned char *big = malloc(n + 3);
    memcpy(big, buf, n);
    memset(big + n, 0, 3);
    write_bytes(q, big, n + 3);
    cr_assert_eq(data_cache_read(q, &id, 9, 0, &r, err, sizeof err), DATA_ECORRUPT);
    /* the intact copy still reads */
    write_bytes(q, buf, n);
    cr_assert_eq(data_cache_read(q, &id, 9, 0, &r, err, sizeof err), DATA_OK, "%s", err);
    data_tok_destroy(&r);
    free(big);
    free(buf);
    data_tok_destroy(&c);
}

/* ---- batcher ------------------------------------------------------------ */

TestSuite(batch);

/* Gathers the global batch of `step` by concatenating ranks 0..W-1. */
static void gather(const data_tok_t *d, data_batcher_opts o, int W, uint64_t step, int32_t *ids,
                   float *mask, int32_t *labels, int32_t *targets, int *valid) {
    char err[256];
    o.world = W;
    int rows = o.global_batch / W, T = o.seq_len;
    *valid = 0;
    for (int r = 0; r < W; r++) {
        o.rank = r;
        data_batcher_t *b;
        cr_assert_eq(data_batcher_new(d, &o, &b, err, sizeof err), 0, "%s", err);
        data_batch_t bt;
        cr_assert_eq(data_batch_alloc(&bt, rows, T), 0);
        cr_assert_eq(data_batch_at(b, step, &bt, err, sizeof err), 0, "%s", err);
        memcpy(ids + (size_t)r * rows * T, bt.ids, (size_t)rows * T * 4);
        memcpy(mask + (size_t)r * rows * T, bt.mask, (size_t)rows * T * 4);
        memcpy(labels + (size_t)r * rows, bt.labels, (size_t)rows * 4);
        memcpy(targets + (size_t)r * rows * T, bt.targets, (size_t)rows * T * 4);
        *valid += bt.valid_rows;
        data_batch_free(&bt);
        data_batcher_destroy(&b);
    }
}

Test(batch, ranks_partition_the_global_batch) {
    data_tok_t *d = make_cls(37, 3);
    data_batcher_opts o = {
        .global_batch = 8, .seq_len = 6, .seed = 11, .shuffle = 1, .wrap = 1, .world = 1};
    const int B = 8, T = 6;
    int32_t ref_ids[8 * 6], ids[8 * 6], ref_lab[8], lab[8], tg[8 * 6], rtg[8 * 6];
    float ref_m[8 * 6], m[8 * 6];
    int v;
    for (uint64_t step = 0; step < 12; step++) {
        gather(d, o, 1, step, ref_ids, ref_m, ref_lab, rtg, &v);
        cr_assert_eq(v, B);
        int worlds[] = {2, 4, 8};
        for (int w = 0; w < 3; w++) {
            gather(d, o, worlds[w], step, ids, m, lab, tg, &v);
            cr_assert_eq(memcmp(ids, ref_ids, sizeof ids), 0, "step %lu world %d",
                         (unsigned long)step, worlds[w]);
            cr_assert_eq(memcmp(m, ref_m, sizeof m), 0);
            cr_assert_eq(memcmp(lab, ref_lab, sizeof lab), 0);
        }
    }
    /* every epoch covers every item exactly once: 37 items, steps of 8 */
    int seen[37] = {0};
    for (uint64_t step = 0; step < 37; step++) { /* 37 steps * 8 rows = 8 epochs exactly */
        gather(d, o, 2, step, ids, m, lab, tg, &v);
        for (int i = 0; i < B; i++) seen[(ids[i * T] - 5) / 1000]++;
    }
    for (int i = 0; i < 37; i++) cr_assert_eq(seen[i], 8, "item %d seen %d times", i, seen[i]);
    data_batcher_opts bad = o;
    bad.global_batch = 6;
    bad.world = 4;
    data_batcher_t *b = NULL;
    char err[256];
    cr_assert_eq(data_batcher_new(d, &bad, &b, err, sizeof err), DATA_EINVAL);
    cr_assert(strstr(err, "divisible"), "%s", err);
    data_tok_destroy(&d);
}

Test(batch, deterministic_by_seed_and_step) {
    data_tok_t *d = make_cls(100, 4);
    data_batcher_opts o = {
        .global_batch = 16, .seq_len = 8, .seed = 5, .shuffle = 1, .wrap = 1, .world = 1};
    int32_t a[16 * 8], b[16 * 8], c[16 * 8], l[16], tg[16 * 8];
    float m[16 * 8];
    int v, differs = 0;
    for (uint64_t s = 0; s < 20; s++) {
        gather(d, o, 1, s, a, m, l, tg, &v);
        gather(d, o, 1, s, b, m, l, tg, &v);
        cr_assert_eq(memcmp(a, b, sizeof a), 0);
        data_batcher_opts o2 = o;
        o2.seed = 6;
        gather(d, o2, 1, s, c, m, l, tg, &v);
        differs += memcmp(a, c, sizeof a) != 0;
    }
    cr_assert_geq(differs, 18, "a different seed should change the order");
    /* next() from a seek equals at() */
    char err[256];
    data_batcher_t *bt;
    cr_assert_eq(data_batcher_new(d, &o, &bt, err, sizeof err), 0);
    data_batch_t x;
    data_batch_alloc(&x, 16, 8);
    data_batcher_seek(bt, 13);
    cr_assert_eq(data_batch_next(bt, &x, err, sizeof err), 0);
    gather(d, o, 1, 13, a, m, l, tg, &v);
    cr_assert_eq(memcmp(a, x.ids, sizeof a), 0);
    cr_assert_eq(x.step, 13);
    cr_assert_eq(x.epoch, 13 * 16 / 100);
    data_batch_free(&x);
    data_batcher_destroy(&bt);
    data_tok_destroy(&d);
}

Test(batch, padding_mask_labels_and_eval_pass) {
    data_tok_t *d = make_cls(11, 3);
    const int T = 6;
    data_batcher_opts o = {
        .global_batch = 4, .seq_len = T, .seed = 1, .shuffle = 0, .wrap = 0, .world = 2};
    int32_t ids[4 * 6], lab[4], tg[4 * 6];
    float m[4 * 6];
    int v, total = 0;
    for (uint64_t s = 0; s < 3; s++) {
        gather(d, o, 2, s, ids, m, lab, tg, &v);
        total += v;
        for (int i = 0; i < 4; i++) {
            size_t item = s * 4 + (size_t)i;
            if (item >= 11) {
                cr_assert_eq(lab[i], -1);
                for (int t = 0; t < T; t++)
                    cr_assert(ids[i * T + t] == TOK_PAD && m[i * T + t] == 0.0f);
                continue;
            }
            cr_assert_eq(lab[i], (int32_t)(item % 3));
            size_t L = len_of(item) < (size_t)T ? len_of(item) : (size_t)T;
            for (int t = 0; t < T; t++) {
                if ((size_t)t < L) {
                    cr_assert_eq(ids[i * T + t], (int32_t)(1000 * item + (size_t)t + 5));
                    cr_assert_eq(m[i * T + t], 1.0f);
                } else {
                    cr_assert_eq(ids[i * T + t], TOK_PAD, "item %zu t %d", item, t);
                    cr_assert_eq(m[i * T + t], 0.0f);
                }
            }
        }
    }
    cr_assert_eq(total, 11);
    char err[256];
    data_batcher_t *b;
    o.rank = 1;
    cr_assert_eq(data_batcher_new(d, &o, &b, err, sizeof err), 0);
    cr_assert_eq(data_batcher_steps_per_epoch(b), 3);
    data_batch_t bt;
    data_batch_alloc(&bt, 2, T);
    int n = 0;
    while (data_batch_next(b, &bt, err, sizeof err) == DATA_OK) n++;
    cr_assert_eq(n, 3);
    cr_assert_eq(data_batch_next(b, &bt, err, sizeof err), DATA_END);
    data_batch_free(&bt);
    data_batcher_destroy(&b);
    data_tok_destroy(&d);
}

Test(batch, lm_windows_targets_and_split) {
    data_tok_t *d = make_lm(100, 90); /* 700 tokens; val from token 630 */
    const int T = 16;
    data_batcher_opts o = {
        .global_batch = 4, .seq_len = T, .seed = 3, .shuffle = 1, .wrap = 1, .world = 2};
    int32_t ids[4 * 16], lab[4], tg[4 * 16];
    float m[4 * 16];
    int v;
    for (uint64_t s = 0; s < 200; s++) {
        gather(d, o, 2, s, ids, m, lab, tg, &v);
        for (int i = 0; i < 4 * T; i++) {
            cr_assert_eq(m[i], 1.0f);
            cr_assert_eq(tg[i], ids[i] + 1, "target is the next token");
            cr_assert_lt(tg[i] - 5, 630, "training window reaches into validation");
        }
        for (int r = 0; r < 4; r++)
            for (int t = 1; t < T; t++) cr_assert_eq(ids[r * T + t], ids[r * T + t - 1] + 1);
    }
    /* validation: one pass over tokens 630..699, every target exactly once */
    data_batcher_opts ov = {
        .global_batch = 4, .seq_len = T, .shuffle = 0, .wrap = 0, .world = 1, .split = 1};
    char err[256];
    data_batcher_t *b;
    cr_assert_eq(data_batcher_new(d, &ov, &b, err, sizeof err), 0, "%s", err);
    data_batch_t bt;
    data_batch_alloc(&bt, 4, T);
    int seen[70] = {0};
    while (data_batch_next(b, &bt, err, sizeof err) == DATA_OK)
        for (int i = 0; i < 4 * T; i++)
            if (bt.mask[i] > 0) {
                cr_assert_eq(bt.targets[i], bt.ids[i] + 1);
                cr_assert_geq(bt.ids[i] - 5, 630);
                seen[bt.targets[i] - 5 - 630]++;
            } else {
                cr_assert_eq(bt.targets[i], -1);
                cr_assert_eq(bt.ids[i], TOK_PAD);
            }
    cr_assert_eq(seen[0], 0); /* the first token is never a target */
    for (int k = 1; k < 70; k++) cr_assert_eq(seen[k], 1, "target %d seen %d times", k, seen[k]);
    data_batch_free(&bt);
    data_batcher_destroy(&b);
    ov.seq_len = 200;
    ov.wrap = 1;
    cr_assert_eq(data_batcher_new(d, &ov, &b, err, sizeof err), DATA_EINVAL);
    data_tok_destroy(&d);
}

/* ---- IDX ---------------------------------------------------------------- */

TestSuite(idx, .init = mk_tmp, .fini = rm_tmp);

static size_t make_idx(unsigned char *buf, uint8_t dtype, int ndim, const uint32_t *dims) {
    size_t k = 0, count = 1, es = dtype == 0x0C ? 4 : 1;
    buf[k++] = 0, buf[k++] = 0, buf[k++] = dtype, buf[k++] = (unsigned char)ndim;
    for (int i = 0; i < ndim; i++) {
        buf[k++] = (unsigned char)(dims[i] >> 24), buf[k++] = (unsigned char)(dims[i] >> 16);
        buf[k++] = (unsigned char)(dims[i] >> 8), buf[k++] = (unsigned char)dims[i];
        count *= dims[i];
    }
    for (size_t i = 0; i < count; i++) {
        uint32_t v = (uint32_t)(i * 37 + 1);
        if (es == 4) {
            buf[k++] = (unsigned char)(v >> 24), buf[k++] = (unsigned char)(v >> 16);
            buf[k++] = (unsigned char)(v >> 8), buf[k++] = (unsigned char)v;
        } else {
            buf[k++] = (unsigned char)v;
        }
    }
    return k;
}

static void write_gz(const char *path, const void *data, size_t n) {
    gzFile g = gzopen(path, "wb");
    cr_assert_not_null(g);
    cr_assert_eq(gzwrite(g, data, (unsigned)n), (int)n);
    cr_assert_eq(gzclose(g), Z_OK);
}

Test(idx, plain_and_gzipped_agree) {
    unsigned char buf[4096];
    uint32_t dims[3] = {5, 4, 3};
    size_t n = make_idx(buf, 0x08, 3, dims);
    write_bytes(tpath("a.idx"), buf, n);
    write_gz(tpath("a.idx.gz"), buf, n);
    char err[512];
    data_idx_t *a, *b;
    cr_assert_eq(data_idx_read(tpath("a.idx"), 0, &a, err, sizeof err), 0, "%s", err);
    cr_assert_eq(data_idx_read(tpath("a.idx.gz"), 0, &b, err, sizeof err), 0, "%s", err);
    cr_assert_eq(a->ndim, 3);
    cr_assert_eq(a->dims[0], 5);
    cr_assert_eq(a->dims[2], 3);
    cr_assert_eq(a->count, 60);
    cr_assert_eq(b->count, 60);
    cr_assert_eq(memcmp(a->data, b->data, 60), 0);
    cr_assert_eq(((uint8_t *)a->data)[7], (uint8_t)(7 * 37 + 1));
    data_idx_destroy(&a);
    data_idx_destroy(&b);
    /* int32, big-endian on disk */
    uint32_t d1[1] = {10};
    n = make_idx(buf, 0x0C, 1, d1);
    write_gz(tpath("i.idx.gz"), buf, n);
    cr_assert_eq(data_idx_read(tpath("i.idx.gz"), 0, &a, err, sizeof err), 0, "%s", err);
    cr_assert_eq(((int32_t *)a->data)[9], 9 * 37 + 1);
    data_idx_destroy(&a);
}

Test(idx, truncated_and_bad_files_refused) {
    unsigned char buf[4096];
    uint32_t dims[3] = {5, 4, 3};
    size_t n = make_idx(buf, 0x08, 3, dims);
    char err[512];
    data_idx_t *a = NULL;
    write_bytes(tpath("t.idx"), buf, n - 1);
    cr_assert_eq(data_idx_read(tpath("t.idx"), 0, &a, err, sizeof err), DATA_EFORMAT);
    cr_assert(strstr(err, "truncated"), "%s", err);
    write_gz(tpath("t.idx.gz"), buf, n - 5);
    cr_assert_eq(data_idx_read(tpath("t.idx.gz"), 0, &a, err, sizeof err), DATA_EFORMAT);
    write_bytes(tpath("h.idx"), buf, 9); /* inside the dims */
    cr_assert_eq(data_idx_read(tpath("h.idx"), 0, &a, err, sizeof err), DATA_EFORMAT);
    /* a gzip stream cut in the middle */
    write_gz(tpath("full.gz"), buf, n);
    unsigned char *gz;
    size_t gn;
    read_all(tpath("full.gz"), &gz, &gn);
    write_bytes(tpath("cut.gz"), gz, gn / 2);
    free(gz);
    cr_assert_neq(data_idx_read(tpath("cut.gz"), 0, &a, err, sizeof err), DATA_OK);
    buf[n] = 7; /* trailing byte */
    write_bytes(tpath("x.idx"), buf, n + 1);
    cr_assert_eq(data_idx_read(tpath("x.idx"), 0, &a, err, sizeof err), DATA_EFORMAT);
    buf[2] = 0x07; /* bad type */
    write_bytes(tpath("m.idx"), buf, n);
    cr_assert_eq(data_idx_read(tpath("m.idx"), 0, &a, err, sizeof err), DATA_EFORMAT);
    buf[2] = 0x08;
    cr_assert_eq(data_idx_read(tpath("x.idx"), 10, &a, err, sizeof err), DATA_ETOOBIG);
    cr_assert_null(a);
}

Test(idx, images_with_labels) {
    unsigned char im[4096], lb[64];
    uint32_t d3[3] = {6, 2, 2}, d1[1] = {6}, d1b[1] = {5};
    write_gz(tpath("im.gz"), im, make_idx(im, 0x08, 3, d3));
    write_gz(tpath("lb.gz"), lb, make_idx(lb, 0x08, 1, d1));
    char err[512];
    data_images_t *s;
    cr_assert_eq(data_images_load(tpath("im.gz"), tpath("lb.gz"), &s, err, sizeof err), 0, "%s",
                 err);
    cr_assert_eq(s->n, 6);
    cr_assert_eq(s->rows, 2);
    cr_assert_eq(s->labels[2], 2 * 37 + 1);
    cr_assert_eq(s->n_classes, 5 * 37 + 2);
    data_images_destroy(&s);
    write_gz(tpath("lb5.gz"), lb, make_idx(lb, 0x08, 1, d1b));
    cr_assert_eq(data_images_load(tpath("im.gz"), tpath("lb5.gz"), &s, err, sizeof err),
                 DATA_EFORMAT);
    cr_assert(strstr(err, "6 images") && strstr(err, "5 labels"), "%s", err);
}

/* ---- bfprep as a process ------------------------------------------------- */

static void mk_tmp_bfprep(void) {
    mk_tmp();
    cr_assert_eq(access(BF_BIN_DIR "/bfprep", X_OK), 0,
                 BF_BIN_DIR "/bfprep is not built (make bfprep, or build everything)");
}

TestSuite(bfprep, .init = mk_tmp_bfprep, .fini = rm_tmp);

static int run(const char *cmd) {
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static size_t count_lines(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = 0;
    int c;
    while ((c = fgetc(f)) != EOF) n += c == '\n';
    fclose(f);
    return n;
}

Test(bfprep, wordnet_end_to_end, .timeout = 60) {
    const char *wn = "/usr/share/wordnet/data.noun";
    if (access(wn, R_OK) != 0) cr_skip_test("wordnet-base is not installed");
    /* the license header (29 lines starting with two spaces) + every 10th
     * synset: ~8k glosses, some classes above the 100-example filter, some below */
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "awk 'NR <= 29 || NR %% 10 == 0' %s > %s", wn, tpath("small.noun"));
    cr_assert_eq(run(cmd), 0);
    /* expected classes: lex numbers with >= 100 synsets in the small file */
    FILE *f = fopen(tpath("small.noun"), "r");
    char line[70000];
    int cnt[100] = {0}, total = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == ' ') continue;
        int lex;
        cr_assert_eq(sscanf(line, "%*s %d", &lex), 1);
        cnt[lex]++;
    }
    fclose(f);
    int want_classes = 0;
    for (int i = 0; i < 100; i++)
        if (cnt[i] >= 100) want_classes++, total += cnt[i];
    cr_assert_geq(want_classes, 3);
    cr_assert_lt(total, 8000, "the filter should drop something in this sample");

    snprintf(cmd, sizeof cmd, "%s/bfprep wordnet --src %s --out %s 2>%s", BF_BIN_DIR,
             tpath("small.noun"), tpath("out"), tpath("log"));
    cr_assert_eq(run(cmd), 0);
    size_t n[3];
    const char *names[3] = {"out/wordnet/train.tsv", "out/wordnet/val.tsv", "out/wordnet/test.tsv"};
    char err[512];
    data_tsv_t *tr = NULL;
    int classes_seen = 0;
    for (int s = 0; s < 3; s++) {
        n[s] = count_lines(tpath(names[s]));
        data_tsv_t *d = NULL;
        cr_assert_eq(data_tsv_load(tpath(names[s]), tr, &d, err, sizeof err), 0, "%s", err);
        for (size_t i = 0; i < d->n; i++)
            cr_assert(d->text_a[i][0] != ' ' && d->text_a[i][strlen(d->text_a[i]) - 1] != ' ');
        if (s == 0) {
            tr = d;
            classes_seen = (int)d->n_classes;
            for (size_t c = 0; c < d->n_classes; c++)
                cr_assert(strncmp(d->class_names[c], "noun.", 5) == 0, "%s", d->class_names[c]);
        } else {
            data_tsv_destroy(&d);
        }
    }
    cr_assert_eq(classes_seen, want_classes);
    cr_assert_eq(n[0] + n[1] + n[2], (size_t)total);
    double ft = (double)n[0] / total;
    cr_assert(ft > 0.75 && ft < 0.85, "train fraction %g", ft);
    cr_assert(n[1] > (size_t)total / 20 && n[2] > (size_t)total / 20);
    data_tsv_destroy(&tr);
    /* deterministic: a second run writes identical files */
    snprintf(cmd, sizeof cmd,
             "%s/bfprep wordnet --src %s --out %s 2>/dev/null && cmp %s/wordnet/train.tsv %s && "
             "cmp %s/wordnet/test.tsv %s",
             BF_BIN_DIR, tpath("small.noun"), tpath("out2"), tpath("out2"), tpath(names[0]),
             tpath("out2"), tpath(names[2]));
    cr_assert_eq(run(cmd), 0);
    /* a bad source is an error naming the line */
    write_str(tpath("bad.noun"), "  header\n00001740 03 n 01 entity 0 000 | a thing\ngarbage\n");
    snprintf(cmd, sizeof cmd, "%s/bfprep wordnet --src %s --out %s 2>%s", BF_BIN_DIR,
             tpath("bad.noun"), tpath("out3"), tpath("log3"));
    cr_assert_eq(run(cmd), 1);
    snprintf(cmd, sizeof cmd, "grep -q 'bad.noun:3:' %s", tpath("log3"));
    cr_assert_eq(run(cmd), 0);
    snprintf(cmd, sizeof cmd,
             "%s/bfprep --help >/dev/null && ! %s/bfprep wordnet --bogus 2>/dev/null", BF_BIN_DIR,
             BF_BIN_DIR);
    cr_assert_eq(run(cmd), 0);
}

/* A bad command line of each bfprep command is refused with status 64 and
 * a message that says which option and what is valid (its opts table);
 * `bfprep CMD --help` lists the command's own options. */
Test(bfprep, bad_lines_say_what_is_valid) {
    static const struct {
        const char *args, *says;
    } bad[] = {
        {"wordnet --min-class 0", "bfprep wordnet: --min-class takes an integer in [1, "
                                  "1000000000], got '0'"},
        {"kjv --outt d", "unknown option '--outt'; did you mean '--out'?"},
        {"fashion-mnist --src", "--src needs a value (DIR2)"},
        {"tokenizer --type wordpiece", "--type takes one of unigram, bpe; got 'wordpiece'"},
        {"tokenizer --vocab 8", "--vocab takes an integer in [16, 1000000], got '8'"},
        {"tokenizer --vocab 100 --input x", "--input, --vocab and --out are required"},
    };
    char cmd[1024];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s/bfprep %s 2>%s", BF_BIN_DIR, bad[i].args, tpath("err"));
        cr_expect_eq(run(cmd), 64, "%s", bad[i].args);
        FILE *f = fopen(tpath("err"), "r");
        cr_assert_not_null(f);
        char err[4096];
        size_t n = fread(err, 1, sizeof err - 1, f);
        err[n] = '\0';
        fclose(f);
        cr_expect(strstr(err, bad[i].says), "%s: wanted \"%s\" in:\n%s", bad[i].args, bad[i].says,
                  err);
    }
    snprintf(cmd, sizeof cmd, "%s/bfprep tokenizer --help | grep -q -- '--byte-fallback'",
             BF_BIN_DIR);
    cr_expect_eq(run(cmd), 0);
}

Test(bfprep, kjv_end_to_end, .timeout = 60) {
    if (run("command -v bible >/dev/null") != 0) cr_skip_test("bible-kjv is not installed");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/bfprep kjv --out %s 2>/dev/null", BF_BIN_DIR, tpath("o"));
    cr_assert_eq(run(cmd), 0);
    cr_assert_eq(count_lines(tpath("o/kjv/kjv.txt")), 31102);
    FILE *f = fopen(tpath("o/kjv/kjv.txt"), "r");
    char line[4096];
    cr_assert_not_null(fgets(line, sizeof line, f));
    cr_assert_str_eq(line, "In the beginning God created the heaven and the earth.\n");
    char last[4096] = "";
    while (fgets(line, sizeof line, f)) snprintf(last, sizeof last, "%s", line);
    fclose(f);
    cr_assert_str_eq(last, "The grace of our Lord Jesus Christ be with you all. Amen.\n");
}

/* Writes an uncompressed IDX pair NAME-images-idx3-ubyte.gz / NAME-labels
 * (plain bytes under bfprep's fixed names: the loader reads both kinds) of
 * n 28 x 28 images in 10 classes whose pixel (i, y, x) is (i + 3y + 5x) & 255. */
static void write_fake_fm(const char *images, const char *labels, int n) {
    FILE *f = fopen(tpath(images), "wb");
    cr_assert(f != NULL);
    unsigned char hi[16] = {0, 0, 8, 3, 0, 0, 0, (unsigned char)n, 0, 0, 0, 28, 0, 0, 0, 28};
    fwrite(hi, 1, sizeof hi, f);
    for (int i = 0; i < n; i++)
        for (int y = 0; y < 28; y++)
            for (int x = 0; x < 28; x++) fputc((i + 3 * y + 5 * x) & 255, f);
    fclose(f);
    f = fopen(tpath(labels), "wb");
    cr_assert(f != NULL);
    unsigned char hl[8] = {0, 0, 8, 1, 0, 0, 0, (unsigned char)n};
    fwrite(hl, 1, sizeof hl, f);
    for (int i = 0; i < n; i++) fputc(i % 10, f);
    fclose(f);
}

Test(bfprep, fashion_mnist_centre_crop, .timeout = 30) {
    cr_assert_eq(mkdir(tpath("fm"), 0755), 0);
    write_fake_fm("fm/train-images-idx3-ubyte.gz", "fm/train-labels-idx1-ubyte.gz", 20);
    write_fake_fm("fm/t10k-images-idx3-ubyte.gz", "fm/t10k-labels-idx1-ubyte.gz", 10);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/bfprep fashion-mnist --src %s --out %s --crop 20 2>%s",
             BF_BIN_DIR, tpath("fm"), tpath("out"), tpath("log"));
    cr_assert_eq(run(cmd), 0);
    data_images_t *im = NULL;
    char err[512];
    cr_assert_eq(data_images_load(tpath("out/fashion_mnist_crop20/train-images-idx3-ubyte"),
                                  tpath("out/fashion_mnist_crop20/train-labels-idx1-ubyte"), &im,
                                  err, sizeof err),
                 0, "%s", err);
    cr_assert_eq(im->n, 20);
    cr_assert_eq(im->rows, 20);
    cr_assert_eq(im->cols, 20);
    for (int i = 0; i < 20; i++) { /* the centre: rows and columns 4..23 of the original */
        cr_assert_eq(im->labels[i], i % 10);
        for (int y = 0; y < 20; y++)
            for (int x = 0; x < 20; x++)
                cr_assert_eq(im->pixels[(i * 20 + y) * 20 + x],
                             (i + 3 * (y + 4) + 5 * (x + 4)) & 255, "image %d (%d, %d)", i, y, x);
    }
    data_images_destroy(&im);
    snprintf(cmd, sizeof cmd, "%s/bfprep fashion-mnist --src %s --out %s --crop 29 2>%s",
             BF_BIN_DIR, tpath("fm"), tpath("out"), tpath("log"));
    cr_assert_eq(run(cmd), 64, "a crop larger than the image is a usage error");
}
