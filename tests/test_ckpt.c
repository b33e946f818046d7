/* Checkpoint files: round trip, the version-1 layout still read, and each
 * kind of damage refused with a message that names the failed check. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/ckpt.h"

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
