/* Checkpoint files. The older checkpoint.bin: round trip, the version-1
 * layout still read, each kind of damage refused with a message that names
 * the failed check. The named set (model.safetensors, optimizer.safetensors,
 * state.json): round trip in the bk_params layout, a torn set refused, the
 * crash windows of a save recovered, an old checkpoint.bin loaded by position
 * and converted, and init.from's matched / unmatched / missing names and
 * shape errors. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cfg.h"
#include "kernels/bk.h"
#include "tests/tmpdir.h"
#include "worker/io/ckpt.h"
#include "worker/io/safetensors.h"

static char dir[] = "/tmp/bf-ckpt-XXXXXX";
static char path[256];

static void setup(void) {
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/%s", dir, CKPT_NAME);
}
static void teardown(void) {
    unlink(path);
    rmdir(dir);
}
TestSuite(ckpt, .init = setup, .fini = teardown);

static uint64_t fnv(uint64_t h, const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void write_sample(void) {
    float p[5] = {1, 2, 3, 4, 5}, m[5] = {.1f, .2f, .3f, .4f, .5f}, v[5] = {9, 8, 7, 6, 5};
    char cfg[] = "model.layers: 2\ntrain.seed: 7\n";
    ckpt_state s = {.step = 42,
                    .seed = 7,
                    .data_step = 42,
                    .n_params = 5,
                    .params = p,
                    .m = m,
                    .v = v,
                    .cfg_text = cfg};
    char err[256];
    cr_assert_eq(ckpt_write(dir, &s, err, sizeof err), 0, "%s", err);
}

static unsigned char *slurp(size_t *n) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    unsigned char *b = malloc(*n);
    cr_assert_eq(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static void spit(const unsigned char *b, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert_eq(fwrite(b, 1, n, f), n);
    fclose(f);
}

static void expect_refused(const char *what) {
    ckpt_state s;
    char err[512];
    cr_assert_eq(ckpt_read(dir, &s, err, sizeof err), -1, "a %s file was accepted", what);
    cr_expect(strstr(err, what) != NULL, "message for %s: %s", what, err);
}

Test(ckpt, round_trip) {
    write_sample();
    ckpt_state s;
    char err[256];
    cr_assert_eq(ckpt_read(dir, &s, err, sizeof err), 0, "%s", err);
    cr_expect_eq(s.step, 42);
    cr_expect_eq(s.n_params, 5);
    cr_expect_float_eq(s.params[4], 5.0f, 0);
    cr_expect_float_eq(s.m[1], 0.2f, 0);
    cr_expect_float_eq(s.v[0], 9.0f, 0);
    cr_expect_str_eq(s.cfg_text, "model.layers: 2\ntrain.seed: 7\n");
    ckpt_free(&s);
}

/* A version-1 file (72-byte header, no config hash) written by an older bf. */
Test(ckpt, reads_version_1) {
    write_sample();
    size_t n;
    unsigned char *b = slurp(&n);
    unsigned char v1[4096];
    memcpy(v1, b, 64); /* magic .. payload checksum */
    v1[8] = 1;         /* version */
    uint64_t hf = fnv(1469598103934665603ull, v1, 64);
    for (int i = 0; i < 8; i++) v1[64 + i] = (unsigned char)(hf >> (8 * i));
    memcpy(v1 + 72, b + 80, n - 80);
    spit(v1, n - 8);
    free(b);
    ckpt_state s;
    char err[256];
    cr_assert_eq(ckpt_read(dir, &s, err, sizeof err), 0, "%s", err);
    cr_expect_eq(s.step, 42);
    cr_expect_float_eq(s.params[2], 3.0f, 0);
    ckpt_free(&s);
}

Test(ckpt, refuses_damage) {
    write_sample();
    size_t n;
    unsigned char *b = slurp(&n);
    b[n - 3] ^= 1;
    spit(b, n);
    expect_refused("payload checksum");
    b[n - 3] ^= 1;
    b[30] ^= 1;
    spit(b, n);
    expect_refused("header checksum");
    b[30] ^= 1;
    spit(b, n - 5);
    expect_refused("truncated or padded");
    spit(b, 40);
    expect_refused("truncated header");
    b[8] = 9;
    spit(b, n);
    expect_refused("format version 9");
    memcpy(b, "NOTACKPT", 8);
    spit(b, n);
    expect_refused("not a bf checkpoint");
    free(b);
}

/* ---------------------------------------------------- the checkpoint set */

static char sdir[256];
static void set_setup(void) { tmpdir_make(sdir, sizeof sdir, "/tmp/bf-ckset-XXXXXX"); }
static void set_teardown(void) { tmpdir_remove(sdir); }
TestSuite(ckset, .init = set_setup, .fini = set_teardown);

/* A small model whose buffer order differs from its declaration order:
 * decayed tensors first. */
static void make_params(bk_params *P, int wide) {
    bk_params_init(P);
    int emb[2] = {5, 3}, ln[1] = {3}, w0[2] = {3, wide ? 4 : 3}, head[2] = {3, 2};
    cr_assert_geq(bk_params_add(P, "embed.weight", 2, emb, 1), 0);
    cr_assert_geq(bk_params_add(P, "blocks.0.ln1.bias", 1, ln, 0), 0);
    cr_assert_geq(bk_params_add(P, "blocks.0.attn.qkv.weight", 2, w0, 1), 0);
    cr_assert_geq(bk_params_add(P, "head.weight", 2, head, 1), 0);
    char err[256];
    cr_assert_eq(bk_params_alloc(P, bk_cpu(), err, sizeof err), 0, "%s", err);
}

static float *pattern(size_t n, float base) {
    float *a = malloc(n * sizeof *a);
    for (size_t i = 0; i < n; i++) a[i] = base + (float)i * 0.125f - (float)(i % 7) * 1e-3f;
    return a;
}

static const char CFG[] = "model.layers: 1\ntrain.seed: 9\n";

static void save_set(const char *d, const bk_params *P, uint64_t step, float base) {
    float *p = pattern(P->numel, base), *m = pattern(P->numel, base + 100),
          *v = pattern(P->numel, base + 200);
    ckpt_meta meta = {.step = step, .seed = 9, .data_step = step + 1, .cfg_text = (char *)CFG};
    meta.n_counters = 2;
    snprintf(meta.counters[0].name, CKPT_COUNTER_NAME, "dropout");
    meta.counters[0].value = UINT64_MAX;
    snprintf(meta.counters[1].name, CKPT_COUNTER_NAME, "data.epoch");
    meta.counters[1].value = 3;
    char err[1024];
    cr_assert_eq(ckpt_save(d, P, p, m, v, &meta, err, sizeof err), 0, "%s", err);
    free(p);
    free(m);
    free(v);
}

/* Loads d and checks every float against the pattern of base. */
static void expect_set(const char *d, const bk_params *P, uint64_t step, float base) {
    size_t n = P->numel;
    float *p = calloc(n, 4), *m = calloc(n, 4), *v = calloc(n, 4);
    float *wp = pattern(n, base), *wm = pattern(n, base + 100), *wv = pattern(n, base + 200);
    ckpt_meta meta;
    char err[1024];
    cr_assert_eq(ckpt_load(d, P, p, m, v, &meta, err, sizeof err), 0, "%s", err);
    cr_expect_eq(meta.step, step);
    cr_expect_eq(memcmp(p, wp, n * 4), 0, "params differ");
    cr_expect_eq(memcmp(m, wm, n * 4), 0, "m differs");
    cr_expect_eq(memcmp(v, wv, n * 4), 0, "v differs");
    ckpt_meta_free(&meta);
    free(p), free(m), free(v), free(wp), free(wm), free(wv);
}

static void copy(const char *from, const char *to) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", from, to);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

static void load_refused(const char *d, const bk_params *P, const char *frag1, const char *frag2) {
    size_t n = P->numel;
    float *p = calloc(n, 4), *m = calloc(n, 4), *v = calloc(n, 4);
    ckpt_meta meta;
    char err[1024];
    cr_expect_eq(ckpt_load(d, P, p, m, v, &meta, err, sizeof err), -1, "accepted (%s)", frag1);
    cr_expect(strstr(err, frag1) != NULL, "message lacks '%s': %s", frag1, err);
    if (frag2) cr_expect(strstr(err, frag2) != NULL, "message lacks '%s': %s", frag2, err);
    cr_expect_null(meta.cfg_text);
    free(p), free(m), free(v);
}

Test(ckset, round_trip_by_name) {
    bk_params P;
    make_params(&P, 0);
    cr_expect_eq(ckpt_probe(sdir), CKPT_NONE);
    save_set(sdir, &P, 7, 1.0f);
    cr_expect_eq(ckpt_probe(sdir), CKPT_SET);
    size_t n = P.numel;
    float *p = calloc(n, 4), *m = calloc(n, 4), *v = calloc(n, 4);
    ckpt_meta meta;
    char err[1024];
    cr_assert_eq(ckpt_load(sdir, &P, p, m, v, &meta, err, sizeof err), 0, "%s", err);
    cr_expect_eq(meta.step, 7);
    cr_expect_eq(meta.data_step, 8);
    cr_expect_eq(meta.seed, 9);
    cr_expect_eq(meta.format_version, 3);
    cr_expect_str_eq(meta.cfg_text, CFG);
    cr_expect_eq(strlen(meta.set_id), 16);
    cr_assert_eq(meta.n_counters, 2);
    cr_expect_str_eq(meta.counters[0].name, "dropout");
    cr_expect_eq(meta.counters[0].value, UINT64_MAX);
    cr_expect_eq(meta.counters[1].value, 3);
    char first_id[17];
    snprintf(first_id, sizeof first_id, "%s", meta.set_id);
    ckpt_meta_free(&meta);
    float *wp = pattern(n, 1.0f);
    cr_expect_eq(memcmp(p, wp, n * 4), 0);

    /* the model file holds each parameter by name, where bk_params puts it */
    st_file f;
    cr_assert_eq(st_open(&f, tmpdir_path(sdir, CKPT_MODEL_FILE), err, sizeof err), 0, "%s", err);
    cr_expect_eq(f.n, 4);
    cr_expect_str_eq(st_meta(&f, "format"), "bf");
    cr_expect_str_eq(st_meta(&f, "step"), "7");
    char hash[17];
    snprintf(
        hash, sizeof hash, "%016llx",
        (unsigned long long)fnv(1469598103934665603ull, (const unsigned char *)CFG, strlen(CFG)));
    cr_expect_str_eq(st_meta(&f, "config_hash"), hash);
    int i = st_find(&f, "blocks.0.ln1.bias"), k = bk_params_find(&P, "blocks.0.ln1.bias");
    cr_assert_geq(i, 0);
    float ln[3];
    cr_assert_eq(st_read_f32(&f, i, ln, err, sizeof err), 0, "%s", err);
    cr_expect_eq(memcmp(ln, wp + P.t[k].offset, sizeof ln), 0);
    cr_expect_eq(P.t[k].offset, n - 3, "the non-decayed bias is last in the buffer");
    st_close(&f);
    cr_assert_eq(st_open(&f, tmpdir_path(sdir, CKPT_OPTIM_FILE), err, sizeof err), 0, "%s", err);
    cr_expect_eq(f.n, 8);
    cr_expect_geq(st_find(&f, "m.head.weight"), 0);
    cr_expect_geq(st_find(&f, "v.embed.weight"), 0);
    st_close(&f);
    cr_expect_eq(access(tmpdir_path(sdir, ".model.safetensors.tmp"), F_OK), -1);
    cr_expect_eq(access(tmpdir_path(sdir, ".state.json.tmp"), F_OK), -1);

    /* weights only: m and v NULL */
    memset(p, 0, n * 4);
    cr_assert_eq(ckpt_load(sdir, &P, p, NULL, NULL, &meta, err, sizeof err), 0, "%s", err);
    cr_expect_eq(memcmp(p, wp, n * 4), 0);
    ckpt_meta_free(&meta);

    /* a second save replaces the set and has a new id */
    save_set(sdir, &P, 8, 2.0f);
    expect_set(sdir, &P, 8, 2.0f);
    cr_assert_eq(ckpt_load(sdir, &P, p, m, v, &meta, err, sizeof err), 0, "%s", err);
    cr_expect_str_neq(meta.set_id, first_id);
    ckpt_meta_free(&meta);
    free(p), free(m), free(v), free(wp);
    bk_params_free(&P);
}

Test(ckset, save_refuses_bad_input) {
    bk_params P;
    make_params(&P, 0);
    float *a = pattern(P.numel, 0);
    ckpt_meta meta = {.step = 1, .cfg_text = (char *)CFG, .n_counters = 1};
    snprintf(meta.counters[0].name, CKPT_COUNTER_NAME, "bad name");
    char err[512];
    cr_expect_eq(ckpt_save(sdir, &P, a, a, a, &meta, err, sizeof err), -1);
    cr_expect(strstr(err, "counter 0"), "%s", err);
    meta.n_counters = 0;
    cr_expect_eq(ckpt_save(sdir, &P, a, NULL, a, &meta, err, sizeof err), -1);
    cr_expect_eq(ckpt_save("/nonexistent/dir", &P, a, a, a, &meta, err, sizeof err), -1);
    cr_expect(strstr(err, "/nonexistent/dir"), "%s", err);
    cr_expect_eq(ckpt_probe(sdir), CKPT_NONE);
    free(a);
    bk_params_free(&P);
}

Test(ckset, torn_set_is_refused) {
    bk_params P;
    make_params(&P, 0);
    char other[256];
    tmpdir_make(other, sizeof other, "/tmp/bf-ckset2-XXXXXX");
    save_set(sdir, &P, 10, 1.0f);
    save_set(other, &P, 20, 5.0f);
    /* model from another save */
    copy(tmpdir_path(other, CKPT_MODEL_FILE), tmpdir_path(sdir, CKPT_MODEL_FILE));
    load_refused(sdir, &P, "torn", "model.safetensors");
    save_set(sdir, &P, 10, 1.0f);
    /* optimizer from another save */
    copy(tmpdir_path(other, CKPT_OPTIM_FILE), tmpdir_path(sdir, CKPT_OPTIM_FILE));
    load_refused(sdir, &P, "torn", "optimizer.safetensors");
    /* state.json from another save: both files disagree with it */
    save_set(sdir, &P, 10, 1.0f);
    copy(tmpdir_path(other, CKPT_STATE_FILE), tmpdir_path(sdir, CKPT_STATE_FILE));
    load_refused(sdir, &P, "torn", "step 20");
    tmpdir_remove(other);
    bk_params_free(&P);
}

Test(ckset, damage_is_refused) {
    bk_params P;
    make_params(&P, 0);
    save_set(sdir, &P, 3, 1.0f);
    const char *mp = tmpdir_path(sdir, CKPT_MODEL_FILE);
    FILE *f = fopen(mp, "r+b");
    fseek(f, -5, SEEK_END);
    int c = fgetc(f);
    fseek(f, -5, SEEK_END);
    fputc(c ^ 1, f);
    fclose(f);
    load_refused(sdir, &P, "data checksum mismatch", "model.safetensors");
    save_set(sdir, &P, 3, 1.0f);
    cr_assert_eq(truncate(tmpdir_path(sdir, CKPT_OPTIM_FILE), 100), 0);
    load_refused(sdir, &P, "optimizer.safetensors", NULL);
    save_set(sdir, &P, 3, 1.0f);
    tmpdir_write(tmpdir_path(sdir, CKPT_STATE_FILE), "{\"format\": \"bf\"", 15);
    load_refused(sdir, &P, "state.json", "not a JSON object");
    tmpdir_write(tmpdir_path(sdir, CKPT_STATE_FILE), "{\"format\": \"bf\"}", 16);
    load_refused(sdir, &P, "state.json", "format_version");
    bk_params_free(&P);
}

/* A crash after the commit (state.json renamed) but before the data files
 * were renamed: the set is read from the .tmp names, and the next save puts
 * them in place first. A crash before the commit leaves the old set. */
Test(ckset, crash_windows) {
    bk_params P;
    make_params(&P, 0);
    char other[256];
    tmpdir_make(other, sizeof other, "/tmp/bf-ckset2-XXXXXX");
    save_set(sdir, &P, 10, 1.0f);
    save_set(other, &P, 20, 5.0f);
    /* before the commit: new data under .tmp names, state.json still old */
    copy(tmpdir_path(other, CKPT_MODEL_FILE), tmpdir_path(sdir, ".model.safetensors.tmp"));
    copy(tmpdir_path(other, CKPT_OPTIM_FILE), tmpdir_path(sdir, ".optimizer.safetensors.tmp"));
    expect_set(sdir, &P, 10, 1.0f);
    /* after the commit: state.json new, final names still old */
    copy(tmpdir_path(other, CKPT_STATE_FILE), tmpdir_path(sdir, CKPT_STATE_FILE));
    expect_set(sdir, &P, 20, 5.0f);
    /* half the renames done */
    copy(tmpdir_path(other, CKPT_MODEL_FILE), tmpdir_path(sdir, CKPT_MODEL_FILE));
    unlink(tmpdir_path(sdir, ".model.safetensors.tmp"));
    expect_set(sdir, &P, 20, 5.0f);
    /* the next save finishes the old one first, then writes its own */
    save_set(sdir, &P, 30, 9.0f);
    expect_set(sdir, &P, 30, 9.0f);
    cr_expect_eq(access(tmpdir_path(sdir, ".optimizer.safetensors.tmp"), F_OK), -1);
    /* a committed set whose data is gone from both names */
    copy(tmpdir_path(other, CKPT_STATE_FILE), tmpdir_path(sdir, CKPT_STATE_FILE));
    load_refused(sdir, &P, "torn", NULL);
    tmpdir_remove(other);
    bk_params_free(&P);
}

Test(ckset, resume_needs_the_same_tensors) {
    bk_params P, Q;
    make_params(&P, 0);
    make_params(&Q, 1); /* blocks.0.attn.qkv.weight is [3, 4] */
    save_set(sdir, &P, 3, 1.0f);
    load_refused(sdir, &Q, "floats per buffer", NULL);
    bk_params_free(&Q);
    /* same size, another shape */
    bk_params_init(&Q);
    int emb[2] = {5, 3}, ln[1] = {3}, w0[2] = {9, 1}, head[2] = {3, 2};
    bk_params_add(&Q, "embed.weight", 2, emb, 1);
    bk_params_add(&Q, "blocks.0.ln1.bias", 1, ln, 0);
    bk_params_add(&Q, "blocks.0.attn.qkv.weight", 2, w0, 1);
    bk_params_add(&Q, "head.weight", 2, head, 1);
    char err[256];
    cr_assert_eq(bk_params_alloc(&Q, bk_cpu(), err, sizeof err), 0);
    load_refused(sdir, &Q, "\"blocks.0.attn.qkv.weight\" has shape [3, 3] in the file but [9, 1]",
                 NULL);
    bk_params_free(&Q);
    /* same size, a renamed tensor */
    bk_params_init(&Q);
    bk_params_add(&Q, "embed.weight", 2, emb, 1);
    bk_params_add(&Q, "blocks.0.ln1.bias", 1, ln, 0);
    bk_params_add(&Q, "blocks.0.attn.proj.weight", 2, (int[]){3, 3}, 1);
    bk_params_add(&Q, "head.weight", 2, head, 1);
    cr_assert_eq(bk_params_alloc(&Q, bk_cpu(), err, sizeof err), 0);
    load_refused(sdir, &Q,
                 "no tensor \"blocks.0.attn.proj.weight\", which this model has; it has "
                 "\"blocks.0.attn.qkv.weight\", which this model has not",
                 NULL);
    bk_params_free(&Q);
    bk_params_free(&P);
}

/* checkpoint.bin of format 2 (ckpt_write is that format's writer) maps by
 * position onto a model of the same size, is refused for another, and
 * converts into a named set. */
Test(ckset, old_checkpoint_loads_by_position) {
    bk_params P, Q;
    make_params(&P, 0);
    size_t n = P.numel;
    float *p = pattern(n, 1.0f), *m = pattern(n, 101.0f), *v = pattern(n, 201.0f);
    ckpt_state s = {.step = 5,
                    .seed = 9,
                    .data_step = 6,
                    .n_params = n,
                    .params = p,
                    .m = m,
                    .v = v,
                    .cfg_text = (char *)CFG};
    char err[1024];
    cr_assert_eq(ckpt_write(sdir, &s, err, sizeof err), 0, "%s", err);
    cr_expect_eq(ckpt_probe(sdir), CKPT_OLD);
    float *a = calloc(n, 4), *b = calloc(n, 4), *c = calloc(n, 4);
    ckpt_meta meta;
    cr_assert_eq(ckpt_load(sdir, &P, a, b, c, &meta, err, sizeof err), 0, "%s", err);
    cr_expect_eq(meta.format_version, 2);
    cr_expect_eq(meta.step, 5);
    cr_expect_eq(meta.data_step, 6);
    cr_expect_str_eq(meta.cfg_text, CFG);
    cr_expect_eq(memcmp(a, p, n * 4), 0);
    cr_expect_eq(memcmp(c, v, n * 4), 0);
    ckpt_meta_free(&meta);

    make_params(&Q, 1);
    load_refused(sdir, &Q, "older format", "--resume");
    ckpt_init_report r;
    char text[512];
    cr_expect_eq(ckpt_init_from(sdir, &Q, a, &r, text, sizeof text, err, sizeof err), -1);
    cr_expect(strstr(err, "older format"), "%s", err);
    bk_params_free(&Q);

    /* init.from an old file: by position */
    memset(a, 0, n * 4);
    cr_assert_eq(
        ckpt_init_from(tmpdir_path(sdir, CKPT_NAME), &P, a, &r, text, sizeof text, err, sizeof err),
        0, "%s", err);
    cr_expect_eq(r.by_position, 1);
    cr_expect_eq(r.loaded, 4);
    cr_expect(strstr(text, "by position"), "%s", text);
    cr_expect_eq(memcmp(a, p, n * 4), 0);

    /* convert in place: the set replaces checkpoint.bin */
    cr_assert_eq(ckpt_convert(sdir, &P, sdir, err, sizeof err), 0, "%s", err);
    cr_expect_eq(ckpt_probe(sdir), CKPT_SET);
    cr_expect_eq(access(tmpdir_path(sdir, CKPT_NAME), F_OK), -1, "checkpoint.bin left behind");
    memset(a, 0, n * 4);
    cr_assert_eq(ckpt_load(sdir, &P, a, b, c, &meta, err, sizeof err), 0, "%s", err);
    cr_expect_eq(meta.format_version, 3);
    cr_expect_eq(meta.step, 5);
    cr_expect_eq(memcmp(a, p, n * 4), 0);
    cr_expect_eq(memcmp(b, m, n * 4), 0);
    ckpt_meta_free(&meta);
    free(p), free(m), free(v), free(a), free(b), free(c);
    bk_params_free(&P);
}

/* A student that shares some tensors with its teacher's run. */
Test(ckset, init_from_by_name) {
    bk_params T, S;
    make_params(&T, 0);
    save_set(sdir, &T, 4, 1.0f);
    float *tp = pattern(T.numel, 1.0f);
    bk_params_init(&S);
    int emb[2] = {5, 3}, head[2] = {3, 2}, mix[1] = {6};
    bk_params_add(&S, "blocks.0.mixer.weight", 1, mix, 1); /* missing in the file */
    bk_params_add(&S, "head.weight", 2, head, 1);
    bk_params_add(&S, "embed.weight", 2, emb, 0);
    char err[1024], text[1024];
    cr_assert_eq(bk_params_alloc(&S, bk_cpu(), err, sizeof err), 0);
    float *sp = malloc(S.numel * 4);
    for (size_t i = 0; i < S.numel; i++) sp[i] = -1;
    ckpt_init_report r;
    cr_assert_eq(ckpt_init_from(sdir, &S, sp, &r, text, sizeof text, err, sizeof err), 0, "%s",
                 err);
    cr_expect_eq(r.loaded, 2);
    cr_expect_eq(r.missing, 1);
    cr_expect_eq(r.unmatched, 2);
    cr_expect_eq(r.floats, 15 + 6);
    cr_expect_eq(r.by_position, 0);
    cr_expect(strstr(r.source, "model.safetensors"), "%s", r.source);
    cr_expect(strstr(text, "2 of 3 tensors loaded (21 floats); 1 missing (kept as initialised): "
                           "blocks.0.mixer.weight; 2 unmatched (in the file only): "),
              "%s", text);
    cr_expect(strstr(text, "blocks.0.ln1.bias") && strstr(text, "blocks.0.attn.qkv.weight"), "%s",
              text);
    int ks = bk_params_find(&S, "embed.weight"), kt = bk_params_find(&T, "embed.weight");
    cr_expect_eq(memcmp(sp + S.t[ks].offset, tp + T.t[kt].offset, 15 * 4), 0, "embed differs");
    ks = bk_params_find(&S, "head.weight"), kt = bk_params_find(&T, "head.weight");
    cr_expect_eq(memcmp(sp + S.t[ks].offset, tp + T.t[kt].offset, 6 * 4), 0, "head differs");
    ks = bk_params_find(&S, "blocks.0.mixer.weight");
    for (int i = 0; i < 6; i++) cr_expect_float_eq(sp[S.t[ks].offset + (size_t)i], -1.0f, 0);

    /* the file itself works the same */
    cr_assert_eq(ckpt_init_from(tmpdir_path(sdir, CKPT_MODEL_FILE), &S, sp, &r, text, sizeof text,
                                err, sizeof err),
                 0, "%s", err);
    cr_expect_eq(r.loaded, 2);

    /* a short report buffer cuts the lists, never overruns */
    char small[80];
    cr_assert_eq(ckpt_init_from(sdir, &S, sp, &r, small, sizeof small, err, sizeof err), 0);
    cr_expect_lt(strlen(small), sizeof small);
    bk_params_free(&S);

    /* a shape mismatch is an error naming the tensor and both shapes; nothing is written */
    bk_params_init(&S);
    int head2[2] = {2, 3};
    bk_params_add(&S, "embed.weight", 2, emb, 1);
    bk_params_add(&S, "head.weight", 2, head2, 1);
    cr_assert_eq(bk_params_alloc(&S, bk_cpu(), err, sizeof err), 0);
    for (size_t i = 0; i < S.numel; i++) sp[i] = -1;
    cr_expect_eq(ckpt_init_from(sdir, &S, sp, &r, text, sizeof text, err, sizeof err), -1);
    cr_expect(strstr(err, "tensor \"head.weight\" has shape [3, 2] in the file but [2, 3] in the "
                          "model"),
              "%s", err);
    cr_expect_float_eq(sp[0], -1.0f, 0, "a refused init.from wrote into the parameters");
    bk_params_free(&S);

    /* nothing in common */
    bk_params_init(&S);
    bk_params_add(&S, "other.weight", 1, mix, 1);
    cr_assert_eq(bk_params_alloc(&S, bk_cpu(), err, sizeof err), 0);
    cr_expect_eq(ckpt_init_from(sdir, &S, sp, &r, text, sizeof text, err, sizeof err), -1);
    cr_expect(strstr(err, "none of its 4 tensors"), "%s", err);
    cr_expect_eq(ckpt_init_from("/nonexistent", &S, sp, &r, text, sizeof text, err, sizeof err),
                 -1);
    cr_expect(strstr(err, "init.from /nonexistent"), "%s", err);
    cr_expect_eq(ckpt_init_from(tmpdir_path(sdir, CKPT_STATE_FILE), &S, sp, &r, text, sizeof text,
                                err, sizeof err),
                 -1);
    bk_params_free(&S);
    free(sp), free(tp);
    bk_params_free(&T);
}

Test(ckset, config_check_ignores_init_from) {
    char err[512];
    cr_expect_eq(ckpt_config_check("model.layers: 2\ninit.from: \"\"\n",
                                   "model.layers: 2\ninit.from: runs/teacher\n", err, sizeof err),
                 0, "%s", err);
    cr_expect_eq(
        ckpt_config_check("model.layers: 2\n", "model.layers: 2\ninit.from: x\n", err, sizeof err),
        0, "an old checkpoint without the key: %s", err);
    cr_expect_eq(ckpt_config_check("model.layers: 2\n", "model.layers: 3\n", err, sizeof err), -1);
}

/* The keys the schema marks CFG_F_RESUME_FREE, and only those, may differ. */
Test(ckset, config_check_ignores_the_resume_free_keys) {
    static const char *const free_keys[] = {
        "device",    "data.dir", "train.log_every", "train.eval_every", "train.checkpoint_every",
        "init.from", "init.map"};
    char a[256], b[256], err[512];
    size_t n_free = 0;
    for (size_t i = 0; i < cfg_field_count(); i++)
        n_free += (cfg_field_at(i)->flags & CFG_F_RESUME_FREE) != 0;
    cr_expect_eq(n_free, sizeof free_keys / sizeof free_keys[0]);
    for (size_t i = 0; i < sizeof free_keys / sizeof free_keys[0]; i++) {
        snprintf(a, sizeof a, "model.layers: 2\n%s: one\n", free_keys[i]);
        snprintf(b, sizeof b, "model.layers: 2\n%s: two\n", free_keys[i]);
        cr_expect_eq(ckpt_config_check(a, b, err, sizeof err), 0, "%s: %s", free_keys[i], err);
    }
    cr_expect_eq(ckpt_config_check("train.steps: 1\n", "train.steps: 2\n", err, sizeof err), -1);
}

/* Only the keys the filter counts are compared (a shared stage's own keys). */
static int model_keys_only(void *ctx, const char *key, size_t n) {
    (void)ctx;
    return n > 6 && memcmp(key, "model.", 6) == 0;
}

Test(ckset, config_check_over_the_keys_that_count) {
    char err[512];
    const char *a = "model.layers: 2\ndistill.mixer: bimamba\n",
               *b = "model.layers: 2\ndistill.mixer: bilstm\n",
               *c = "model.layers: 3\ndistill.mixer: bimamba\n";
    cr_expect_eq(ckpt_config_check(a, b, err, sizeof err), -1, "every key: the mixer differs");
    cr_expect(strstr(err, "distill.mixer is bimamba in the checkpoint but bilstm now"), "%s", err);
    cr_expect_eq(ckpt_config_check_keys(a, b, model_keys_only, NULL, err, sizeof err), 0, "%s",
                 err);
    cr_expect_eq(ckpt_config_check_keys(a, c, model_keys_only, NULL, err, sizeof err), -1);
    cr_expect(strstr(err, "model.layers is 2 in the checkpoint but 3 now"), "%s", err);
}

/* A save that fails before its commit (here the optimizer member, past a
 * file-size limit, as on a full disk) keeps the last set, says which
 * member it could not write, and leaves no temporary behind (a failed
 * save used to leave .model.safetensors.tmp, 13 MB on a real model, and
 * name its own temporary "..model.safetensors.tmp.tmp.PID"). */
Test(ckset, failed_save_keeps_the_last_set_and_leaves_no_temporary) {
    bk_params P;
    make_params(&P, 0);
    save_set(sdir, &P, 5, 1.0f);
    char mp[400], op[400];
    snprintf(mp, sizeof mp, "%s/%s", sdir, CKPT_MODEL_FILE);
    snprintf(op, sizeof op, "%s/%s", sdir, CKPT_OPTIM_FILE);
    struct stat ms, os;
    cr_assert_eq(stat(mp, &ms), 0);
    cr_assert_eq(stat(op, &os), 0);
    cr_assert_lt(ms.st_size, os.st_size, "the optimizer member holds two tensors per tensor");
    struct rlimit old, lim;
    cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = (rlim_t)(ms.st_size + (os.st_size - ms.st_size) / 2);
    signal(SIGXFSZ, SIG_IGN);
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    float *p = pattern(P.numel, 7), *m = pattern(P.numel, 8), *v = pattern(P.numel, 9);
    ckpt_meta meta = {.step = 9, .seed = 9, .data_step = 10, .cfg_text = (char *)CFG};
    char err[2048];
    int rc = ckpt_save(sdir, &P, p, m, v, &meta, err, sizeof err);
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
    free(p), free(m), free(v);
    cr_assert_eq(rc, -1, "the save past the limit succeeded");
    cr_assert(
        strstr(err, "cannot write " CKPT_OPTIM_FILE " (the last complete checkpoint is kept)"),
        "%s", err);
    cr_assert_null(strstr(err, ".tmp.tmp"), "%s", err);
    DIR *d = opendir(sdir);
    cr_assert_not_null(d);
    struct dirent *e;
    while ((e = readdir(d)))
        cr_assert_null(strstr(e->d_name, ".tmp"), "%s/%s left behind", sdir, e->d_name);
    closedir(d);
    expect_set(sdir, &P, 5, 1.0f);
    bk_params_free(&P);
}

/* init.from of a run folder reports the set's counters, so that what goes
 * with the weights (the A-ViT gate, model_take_counter) reaches the run
 * that loads them; a .safetensors file alone has none. */
Test(ckset, init_from_reports_the_sets_counters) {
    bk_params P;
    make_params(&P, 0);
    save_set(sdir, &P, 7, 1.0f);
    float *a = calloc(P.numel, 4);
    ckpt_init_report r;
    char text[1024], err[1024];
    cr_assert_eq(ckpt_init_from(sdir, &P, a, &r, text, sizeof text, err, sizeof err), 0, "%s", err);
    cr_assert_eq(r.n_counters, 2);
    cr_expect_str_eq(r.counters[0].name, "dropout");
    cr_expect_eq(r.counters[0].value, UINT64_MAX);
    cr_expect_str_eq(r.counters[1].name, "data.epoch");
    cr_expect_eq(r.counters[1].value, 3);
    cr_assert_eq(ckpt_init_from(tmpdir_path(sdir, CKPT_MODEL_FILE), &P, a, &r, text, sizeof text,
                                err, sizeof err),
                 0, "%s", err);
    cr_expect_eq(r.n_counters, 0);
    free(a);
}
