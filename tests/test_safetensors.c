/* safetensors files: what st_write writes reads back bit for bit in the
 * standard layout (8-aligned header, offsets tiling the data), and every kind
 * of malformed file is refused with a message that names the file, the
 * tensor at fault and the check. Files from Python's safetensors package are
 * covered by test_it_safetensors. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "tests/tmpdir.h"
#include "worker/io/safetensors.h"

static char dir[256];
static char path[512];

static void setup(void) {
    tmpdir_make(dir, sizeof dir, "/tmp/bf-st-XXXXXX");
    snprintf(path, sizeof path, "%s/t.safetensors", dir);
}
static void teardown(void) { tmpdir_remove(dir); }
TestSuite(st, .init = setup, .fini = teardown);

/* A file: u64 header length, the header (padded with spaces to pad8 when
 * asked), then data_len bytes of data (0x3f repeated). */
static void raw(const char *header, int pad8, size_t data_len) {
    size_t hn = strlen(header), pad = pad8 ? (8 - hn % 8) % 8 : 0;
    size_t n = 8 + hn + pad + data_len;
    unsigned char *b = malloc(n);
    uint64_t N = hn + pad;
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(N >> (8 * i));
    memcpy(b + 8, header, hn);
    memset(b + 8 + hn, ' ', pad);
    memset(b + 8 + hn + pad, 0x3f, data_len);
    tmpdir_write(path, b, n);
    free(b);
}

/* path is refused, and the message holds the file's path and every one of
 * the given fragments. */
static void refused(const char *what, const char *frag1, const char *frag2) {
    st_file f;
    char err[1024];
    cr_assert_eq(st_open(&f, path, err, sizeof err), -1, "%s was accepted", what);
    cr_expect(strstr(err, path) != NULL, "%s: message lacks the path: %s", what, err);
    cr_expect(strstr(err, frag1) != NULL, "%s: message lacks '%s': %s", what, frag1, err);
    if (frag2) cr_expect(strstr(err, frag2) != NULL, "%s: lacks '%s': %s", what, frag2, err);
    cr_expect_null(f.t, "%s: the failed open left tensors allocated", what);
}

Test(st, round_trip) {
    float w[6] = {1, -2, 3.5f, 1e-30f, -0.0f, 7}, b[3] = {0.25f, 0.5f, 0.75f}, s = 42;
    int64_t sw[2] = {2, 3}, sb[1] = {3}, sz[2] = {0, 5};
    st_entry e[] = {{"blocks.0.w", 2, sw, w},
                    {"blocks.0.b", 1, sb, b},
                    {"scale", 0, NULL, &s},
                    {"empty", 2, sz, NULL}};
    const char *md[] = {"format", "bf", "note", "héllo \"quoted\"\n"};
    char err[512];
    cr_assert_eq(st_write(path, e, 4, md, 2, err, sizeof err), 0, "%s", err);

    st_file f;
    cr_assert_eq(st_open(&f, path, err, sizeof err), 0, "%s", err);
    cr_expect_eq(f.header_len % 8, 0, "header %llu bytes", (unsigned long long)f.header_len);
    cr_expect_eq(f.data_len, (6 + 3 + 1) * 4);
    cr_assert_eq(f.n, 4);
    /* file order = the order written; the empty tensor sits at the end */
    cr_expect_str_eq(f.t[0].name, "blocks.0.w");
    cr_expect_str_eq(f.t[3].name, "empty");
    cr_expect_eq(f.t[3].begin, f.t[3].end);
    int i = st_find(&f, "blocks.0.w");
    cr_assert_geq(i, 0);
    cr_expect_eq(f.t[i].ndim, 2);
    cr_expect_eq(f.t[i].shape[1], 3);
    cr_expect_str_eq(f.t[i].dtype, "F32");
    float got[6];
    cr_assert_eq(st_read_f32(&f, i, got, err, sizeof err), 0, "%s", err);
    cr_expect_eq(memcmp(got, w, sizeof w), 0, "weights differ after the round trip");
    i = st_find(&f, "scale");
    cr_expect_eq(f.t[i].ndim, 0);
    cr_expect_eq(f.t[i].numel, 1);
    cr_assert_eq(st_read_f32(&f, i, got, err, sizeof err), 0, "%s", err);
    cr_expect_float_eq(got[0], 42.0f, 0);
    cr_expect_eq(st_find(&f, "nope"), -1);
    cr_expect_str_eq(st_meta(&f, "format"), "bf");
    cr_expect_str_eq(st_meta(&f, "note"), "héllo \"quoted\"\n");
    cr_expect_null(st_meta(&f, "absent"));
    uint64_t h;
    cr_assert_eq(st_data_fnv(&f, &h, err, sizeof err), 0, "%s", err);
    uint64_t want = fnv1a64(fnv1a64(fnv1a64(FNV1A64_SEED, w, sizeof w), b, sizeof b), &s, 4);
    cr_expect_eq(h, want);
    st_close(&f);

    /* the header is the compact JSON of the reference writer, space padded */
    FILE *fp = fopen(path, "rb");
    char hdr[512] = {0};
    cr_assert_eq(fread(hdr, 1, 8 + 200, fp), 8 + 200);
    fclose(fp);
    cr_expect(strncmp(hdr + 8, "{\"__metadata__\":{\"format\":\"bf\"", 30) == 0, "%s", hdr + 8);
    cr_expect(strstr(hdr + 8, "\"blocks.0.w\":{\"dtype\":\"F32\",\"shape\":[2,3],"
                              "\"data_offsets\":[0,24]}") != NULL,
              "%s", hdr + 8);

    /* nothing left beside it: the temporary file was renamed */
    DIR *d = opendir(dir);
    int files = 0;
    for (struct dirent *de; (de = readdir(d));)
        if (de->d_name[0] != '.' || (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))) files++;
    closedir(d);
    cr_expect_eq(files, 1, "%d files in %s after st_write", files, dir);
}

Test(st, overwrite_is_whole) {
    float a[2] = {1, 2}, b[4] = {5, 6, 7, 8};
    int64_t s2[1] = {2}, s4[1] = {4};
    st_entry e1 = {"x", 1, s2, a}, e2 = {"x", 1, s4, b};
    char err[512];
    cr_assert_eq(st_write(path, &e1, 1, NULL, 0, err, sizeof err), 0, "%s", err);
    cr_assert_eq(st_write(path, &e2, 1, NULL, 0, err, sizeof err), 0, "%s", err);
    st_file f;
    cr_assert_eq(st_open(&f, path, err, sizeof err), 0, "%s", err);
    cr_expect_eq(f.t[0].numel, 4);
    cr_expect_eq(f.n_meta, 0);
    st_close(&f);
}

Test(st, writer_refuses_bad_input) {
    float a[2] = {1, 2};
    int64_t s2[1] = {2}, neg[1] = {-1};
    char err[512];
    st_entry dup[2] = {{"x", 1, s2, a}, {"x", 1, s2, a}};
    cr_expect_eq(st_write(path, dup, 2, NULL, 0, err, sizeof err), -1);
    cr_expect(strstr(err, "two tensors named \"x\""), "%s", err);
    st_entry empty = {"", 1, s2, a};
    cr_expect_eq(st_write(path, &empty, 1, NULL, 0, err, sizeof err), -1);
    cr_expect(strstr(err, "name"), "%s", err);
    st_entry meta = {"__metadata__", 1, s2, a};
    cr_expect_eq(st_write(path, &meta, 1, NULL, 0, err, sizeof err), -1);
    st_entry bad = {"x", 1, neg, a};
    cr_expect_eq(st_write(path, &bad, 1, NULL, 0, err, sizeof err), -1);
    cr_expect(strstr(err, "shape[0] = -1"), "%s", err);
    st_entry nodata = {"x", 1, s2, NULL};
    cr_expect_eq(st_write(path, &nodata, 1, NULL, 0, err, sizeof err), -1);
    cr_expect(strstr(err, "no data"), "%s", err);
    const char *md[] = {"k", "1", "k", "2"};
    st_entry ok = {"x", 1, s2, a};
    cr_expect_eq(st_write(path, &ok, 1, md, 2, err, sizeof err), -1);
    cr_expect(strstr(err, "repeated"), "%s", err);
    cr_expect_eq(access(path, F_OK), -1, "a refused write left a file");
}

#define T32(name, shape, b, e)                                                                     \
    "\"" name "\":{\"dtype\":\"F32\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

Test(st, accepts_the_edge_cases_of_the_format) {
    /* no metadata, an unpadded header, tensors listed out of offset order */
    raw("{" T32("b", "[1]", 8, 12) "," T32("a", "[2]", 0, 8) "}", 0, 12);
    st_file f;
    char err[512];
    cr_assert_eq(st_open(&f, path, err, sizeof err), 0, "%s", err);
    cr_expect_str_eq(f.t[0].name, "a"); /* sorted by offset */
    cr_expect_eq(f.n_meta, 0);
    st_close(&f);
    /* no tensors at all */
    raw("{}", 1, 0);
    cr_assert_eq(st_open(&f, path, err, sizeof err), 0, "%s", err);
    cr_expect_eq(f.n, 0);
    st_close(&f);
}

Test(st, refuses_malformed_files) {
    tmpdir_write(path, "\x10\0\0", 3);
    refused("a 3-byte file", "shorter than the 8-byte header length", NULL);
    raw("{}", 1, 0);
    FILE *fp = fopen(path, "r+b");
    fwrite("\xff\xff\xff\xff\xff\x00\x00\x00", 1, 8, fp);
    fclose(fp);
    refused("a huge header length", "over the cap", NULL);
    fp = fopen(path, "r+b");
    fwrite("\x40\x00\x00\x00\x00\x00\x00\x00", 1, 8, fp);
    fclose(fp);
    refused("a header length past the end", "does not fit a file of 16 bytes", NULL);
    raw("[1, 2]", 1, 0);
    refused("an array header", "does not start with '{'", NULL);
    raw("{\"a\": ", 1, 0);
    refused("broken JSON", "not valid JSON", NULL);
    raw("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, \"\xc3\x28\": 1}",
        1, 4);
    refused("invalid UTF-8", "not valid JSON", NULL);
    raw("{" T32("w", "[1]", 0, 4) "," T32("w", "[1]", 4, 8) "}", 1, 8);
    refused("a duplicate name", "duplicate", "w");
    raw("{\"w\": 5}", 1, 0);
    refused("a non-object entry", "tensor \"w\"", "not an object");
    raw("{\"w\": {\"dtype\": \"F32\", \"shape\": [1]}}", 1, 4);
    refused("a missing field", "tensor \"w\"", "data_offsets");
    raw("{\"w\": {\"dtype\": \"F33\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 1, 4);
    refused("an unknown dtype", "tensor \"w\"", "unknown dtype \"F33\"");
    raw("{" T32("w", "[-1]", 0, 4) "}", 1, 4);
    refused("a negative dimension", "tensor \"w\"", "shape[0]");
    raw("{" T32("w", "[1.5]", 0, 4) "}", 1, 4);
    refused("a fractional dimension", "tensor \"w\"", "shape[0]");
    raw("{" T32("w", "[1,1,1,1,1,1,1,1,1]", 0, 4) "}", 1, 4);
    refused("nine dimensions", "tensor \"w\"", "9 dimensions");
    raw("{" T32("w", "[1099511627776,1099511627776]", 0, 4) "}", 1, 4);
    refused("a shape that overflows", "tensor \"w\"", "overflows");
    raw("{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}", 1, 4);
    refused("one offset", "tensor \"w\"", "[begin, end]");
    raw("{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [-4, 0]}}", 1, 4);
    refused("a negative offset", "tensor \"w\"", "non-negative");
    raw("{" T32("w", "[2]", 0, 4) "}", 1, 4);
    refused("a span that is not numel * size", "tensor \"w\"", "F32 of 2 elements needs 8");
    raw("{" T32("w", "[1]", 8, 4) "}", 1, 8);
    refused("end before begin", "tensor \"w\"", "needs 4");
    raw("{\"w\": {\"dtype\": \"F4\", \"shape\": [3], \"data_offsets\": [0, 1]}}", 1, 1);
    refused("half a byte", "tensor \"w\"", "whole bytes");
    raw("{" T32("a", "[1]", 0, 4) "," T32("b", "[1]", 8, 12) "}", 1, 12);
    refused("a gap", "tensor \"b\"", "gap");
    raw("{" T32("a", "[2]", 0, 8) "," T32("b", "[1]", 4, 8) "}", 1, 8);
    refused("an overlap", "tensor \"b\"", "overlap");
    raw("{" T32("a", "[2]", 0, 8) "," T32("b", "[2]", 8, 16) "}", 1, 12);
    refused("a truncated file", "tensor \"b\"", "truncated");
    raw("{" T32("a", "[2]", 0, 8) "}", 1, 9);
    refused("trailing bytes", "cover 8 bytes of a 9-byte data section", NULL);
    raw("{\"__metadata__\": {\"k\": 1}}", 1, 0);
    refused("a numeric metadata value", "__metadata__ value of \"k\" is not a string", NULL);
    raw("{\"__metadata__\": [\"k\"]}", 1, 0);
    refused("a metadata array", "__metadata__ is not an object", NULL);
    raw("{\"\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 1, 4);
    refused("an empty name", "tensor name of 0 bytes", NULL);
    snprintf(path, sizeof path, "%s/absent.safetensors", dir);
    refused("a missing file", "cannot open", NULL);
    snprintf(path, sizeof path, "%s", dir);
    refused("a folder", "not a regular file", NULL);
}

Test(st, other_dtypes_parse_but_bf_reads_f32) {
    raw("{\"h\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}," T32("w", "[1]", 4,
                                                                                8) "}",
        1, 8);
    st_file f;
    char err[512];
    cr_assert_eq(st_open(&f, path, err, sizeof err), 0, "%s", err);
    float x[2];
    cr_expect_eq(st_read_f32(&f, st_find(&f, "h"), x, err, sizeof err), -1);
    cr_expect(strstr(err, "tensor \"h\" is BF16; bf reads F32 tensors only"), "%s", err);
    cr_expect(strstr(err, path), "%s", err);
    cr_expect_eq(st_read_f32(&f, st_find(&f, "w"), x, err, sizeof err), 0, "%s", err);
    float want;
    memset(&want, 0x3f, 4);
    cr_expect_eq(memcmp(x, &want, 4), 0);
    st_close(&f);
}
