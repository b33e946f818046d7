/* common/tfevents: CRC-32C against published vectors, the Event encoding
 * against bytes protobuf itself produced, TFRecord framing read back and
 * checked record by record, and reopening at a recorded size. (TensorBoard's
 * own reader reads bf's files in test_it_tensorboard.) */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/tfevents.h"
#include "tests/tmpdir.h"

Test(tfevents, crc32c_known_vectors) {
    /* "123456789" is the check value of every CRC catalogue; the 32-byte
     * vectors are RFC 3720's (iSCSI), appendix B.4 */
    cr_assert_eq(tfevents_crc32c(0, "123456789", 9), 0xE3069283u);
    unsigned char z[32], ff[32], inc[32], dec[32];
    for (int i = 0; i < 32; i++) {
        z[i] = 0;
        ff[i] = 0xff;
        inc[i] = (unsigned char)i;
        dec[i] = (unsigned char)(31 - i);
    }
    cr_assert_eq(tfevents_crc32c(0, z, 32), 0x8A9136AAu);
    cr_assert_eq(tfevents_crc32c(0, ff, 32), 0x62A8AB43u);
    cr_assert_eq(tfevents_crc32c(0, inc, 32), 0x46DD794Eu);
    cr_assert_eq(tfevents_crc32c(0, dec, 32), 0x113FDB5Cu);
    cr_assert_eq(tfevents_crc32c(0, "", 0), 0u);
    /* running value: two pieces give the CRC of the whole, at every split
     * (the 8-byte loop and the byte loop meet at every offset) */
    const char *s = "The quick brown fox jumps over the lazy dog, twice over.";
    uint32_t whole = tfevents_crc32c(0, s, strlen(s));
    for (size_t k = 0; k <= strlen(s); k++)
        cr_assert_eq(tfevents_crc32c(tfevents_crc32c(0, s, k), s + k, strlen(s) - k), whole);
    /* masked: ((c >> 15) | (c << 17)) + 0xa282ead8 */
    cr_assert_eq(tfevents_masked_crc("123456789", 9), 0xC78AB0E5u);
}

static size_t unhex(const char *h, unsigned char *out) {
    size_t n = 0;
    for (; h[0] && h[1]; h += 2) {
        unsigned v;
        sscanf(h, "%2x", &v);
        out[n++] = (unsigned char)v;
    }
    return n;
}

Test(tfevents, scalar_event_bytes_match_protobuf) {
    /* from tensorboard.compat.proto.event_pb2: Event(wall_time, step,
     * summary.value[tag, simple_value]).SerializeToString() */
    struct {
        const char *tag;
        long long step;
        double wall, value;
        const char *hex;
    } cases[] = {
        {"train/loss", 100, 1764400000.25, 1.5,
         "09000010e0a64ada4110642a130a110a0a747261696e2f6c6f7373150000c03f"},
        {"a", -3, 1.0, -0.1, "09000000000000f03f10fdffffffffffffffff012a0a0a080a016115cdccccbd"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned char want[128], got[128];
        size_t nw = unhex(cases[i].hex, want);
        size_t ng = tfevents_encode_scalar(got, sizeof got, cases[i].tag, cases[i].step,
                                           cases[i].wall, cases[i].value);
        cr_assert_eq(ng, nw, "case %zu: %zu bytes, protobuf wrote %zu", i, ng, nw);
        cr_assert_eq(memcmp(got, want, nw), 0, "case %zu: bytes differ", i);
    }
    unsigned char tiny[8];
    cr_assert_eq(tfevents_encode_scalar(tiny, sizeof tiny, "train/loss", 1, 1, 1), 0u);
}

/* Reads the TFRecords of path, checking both CRCs of each; returns the count
 * and leaves the last record's bytes in last (cap bytes). */
static int read_records(const char *path, unsigned char *last, size_t cap, size_t *last_n) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    int n = 0;
    for (;;) {
        unsigned char head[12];
        size_t got = fread(head, 1, 12, f);
        if (got == 0) break;
        cr_assert_eq(got, 12u, "record %d: short header", n);
        uint64_t len = 0;
        for (int i = 0; i < 8; i++) len |= (uint64_t)head[i] << (8 * i);
        uint32_t hc = 0;
        for (int i = 0; i < 4; i++) hc |= (uint32_t)head[8 + i] << (8 * i);
        cr_assert_eq(hc, tfevents_masked_crc(head, 8), "record %d: length CRC", n);
        cr_assert(len <= cap, "record %d: %llu bytes", n, (unsigned long long)len);
        cr_assert_eq(fread(last, 1, len, f), len);
        unsigned char foot[4];
        cr_assert_eq(fread(foot, 1, 4, f), 4u);
        uint32_t dc = (uint32_t)foot[0] | (uint32_t)foot[1] << 8 | (uint32_t)foot[2] << 16 |
                      (uint32_t)foot[3] << 24;
        cr_assert_eq(dc, tfevents_masked_crc(last, len), "record %d: data CRC", n);
        *last_n = len;
        n++;
    }
    fclose(f);
    return n;
}

Test(tfevents, file_records_and_reopen) {
    char dir[256], err[512];
    tmpdir_make(dir, sizeof dir, "/tmp/bf-tfe-XXXXXX");
    char sub[300];
    snprintf(sub, sizeof sub, "%s/a/b", dir);
    tfevents *w;
    cr_assert_eq(tfevents_create(sub, 1764400000.5, &w, err, sizeof err), 0, "%s", err);
    cr_assert(strstr(tfevents_path(w), "/a/b/events.out.tfevents.1764400000."), "%s",
              tfevents_path(w));
    for (int i = 0; i < 10; i++)
        cr_assert_eq(
            tfevents_scalar(w, "train/loss", i, 1764400001.0 + i, 2.0 / (i + 1), err, sizeof err),
            0, "%s", err);
    json_t *params = json_pack("{s:f, s:s, s:b, s:[f,f]}", "train.lr", 0.001, "attn.out_proj",
                               "hadamard", "budget.enabled", 1, "budget.range", 0.1, 0.3);
    cr_assert_eq(tfevents_session_start(w, params, "", 1764400000.5, err, sizeof err), 0);
    cr_assert_eq(tfevents_flush(w, err, sizeof err), 0, "%s", err);
    long long mid = tfevents_size(w);
    char path[4096];
    snprintf(path, sizeof path, "%s", tfevents_path(w));
    cr_assert_eq(tfevents_scalar(w, "train/loss", 10, 1764400011.0, 0.5, err, sizeof err), 0);
    cr_assert_eq(tfevents_close(&w, err, sizeof err), 0, "%s", err);
    cr_assert_null(w);
    unsigned char rec[4096];
    size_t n;
    /* file_version, 10 scalars, session start, 1 scalar */
    cr_assert_eq(read_records(path, rec, sizeof rec, &n), 13);
    unsigned char want[128];
    size_t nw = tfevents_encode_scalar(want, sizeof want, "train/loss", 10, 1764400011.0, 0.5);
    cr_assert(n == nw && memcmp(rec, want, n) == 0, "the last record is the last scalar");

    /* reopened at the recorded size: the record after it is gone */
    cr_assert_eq(tfevents_reopen(path, mid, &w, err, sizeof err), 0, "%s", err);
    cr_assert_eq(tfevents_size(w), mid);
    cr_assert_eq(tfevents_scalar(w, "val/acc", 10, 1764400011.0, 0.75, err, sizeof err), 0);
    cr_assert_eq(tfevents_close(&w, err, sizeof err), 0, "%s", err);
    cr_assert_eq(read_records(path, rec, sizeof rec, &n), 13);
    nw = tfevents_encode_scalar(want, sizeof want, "val/acc", 10, 1764400011.0, 0.75);
    cr_assert(n == nw && memcmp(rec, want, n) == 0);
    /* a size past the end is refused, with the sizes named */
    cr_assert_eq(tfevents_reopen(path, mid * 10, &w, err, sizeof err), -1);
    cr_assert(strstr(err, "shorter"), "%s", err);

    /* a second file of the same second gets its own name */
    tfevents *w2, *w3;
    cr_assert_eq(tfevents_create(sub, 1764400000.5, &w2, err, sizeof err), 0, "%s", err);
    cr_assert_eq(tfevents_create(sub, 1764400000.5, &w3, err, sizeof err), 0, "%s", err);
    cr_assert_str_neq(tfevents_path(w2), tfevents_path(w3));
    cr_assert_eq(tfevents_close(&w2, err, sizeof err), 0);
    cr_assert_eq(tfevents_close(&w3, err, sizeof err), 0);
    /* a file in the way of the folder: a clear error */
    char blocked[400];
    snprintf(blocked, sizeof blocked, "%s/a/b/%s/x", dir, strrchr(path, '/') + 1);
    cr_assert_eq(tfevents_create(blocked, 1, &w, err, sizeof err), -1);
    cr_assert(strstr(err, "mkdir") || strstr(err, "not a folder"), "%s", err);
    json_decref(params);
    cr_assert_eq(tmpdir_remove(dir), 0);
}

Test(tfevents, job_dir_names) {
    char b[256];
    cr_assert_eq(tfevents_job_dir(b, sizeof b, "/h/tb", "budget-ranges", 4), 0);
    cr_assert_str_eq(b, "/h/tb/budget-ranges-4");
    cr_assert_eq(tfevents_job_dir(b, sizeof b, "/h/tb", "a b/../c", 12), 0);
    cr_assert_str_eq(b, "/h/tb/a_b_.._c-12");
    cr_assert_eq(tfevents_job_dir(b, sizeof b, "/h/tb", "..", 3), 0);
    cr_assert_str_eq(b, "/h/tb/job-3");
    cr_assert_eq(tfevents_job_dir(b, 8, "/h/tb", "long name", 3), -1);
}

/* The experiment record of a file holding one experiment of trials (a JSON
 * array text), into rec; its size. */
static size_t experiment_record(const char *dir, const char *trials, int gathered,
                                unsigned char *rec, size_t cap) {
    char err[512];
    tfevents *w;
    cr_assert_eq(tfevents_create(dir, 1764400000.5, &w, err, sizeof err), 0, "%s", err);
    json_error_t je;
    json_t *all = json_loads(trials, 0, &je);
    cr_assert(all, "%s", je.text);
    const char *metrics[] = {"val/acc"};
    if (gathered) { /* a trial at a time, as bfd gathers a big job's */
        tfevents_hparams *h = tfevents_hparams_new();
        size_t i;
        json_t *p;
        json_array_foreach(all, i, p) tfevents_hparams_add(h, p);
        cr_assert_eq(
            tfevents_experiment_write(w, "e", h, metrics, 1, 1764400000.5, err, sizeof err), 0,
            "%s", err);
        tfevents_hparams_free(&h);
        cr_assert_null(h);
    } else {
        cr_assert_eq(tfevents_experiment(w, "e", all, metrics, 1, 1764400000.5, err, sizeof err), 0,
                     "%s", err);
    }
    json_decref(all);
    char path[4096];
    snprintf(path, sizeof path, "%s", tfevents_path(w));
    cr_assert_eq(tfevents_close(&w, err, sizeof err), 0, "%s", err);
    size_t n;
    cr_assert_eq(read_records(path, rec, cap, &n), 2); /* file_version, the experiment */
    cr_assert_eq(unlink(path), 0);
    return n;
}

/* An hparam's domain holds each distinct value once: 1 and 1.0 are one
 * number, equal strings and lists one value each; gathered a trial at a
 * time or from the whole array, the record is the same bytes. */
Test(tfevents, experiment_domains_hold_each_value_once) {
    char dir[256];
    tmpdir_make(dir, sizeof dir, "/tmp/bf-tfe-XXXXXX");
    static unsigned char a[8192], b[8192], c[8192];
    const char *dups = "[{\"lr\": 1, \"m\": \"x\", \"r\": [1, 2]}, {\"lr\": 1.0, \"m\": \"x\","
                       " \"r\": [1, 2]}, {\"lr\": 2, \"m\": \"y\", \"r\": [1, 2]}]";
    const char *once = "[{\"lr\": 1, \"m\": \"x\", \"r\": [1, 2]}, {\"lr\": 2, \"m\": \"y\"}]";
    size_t na = experiment_record(dir, dups, 0, a, sizeof a);
    size_t nb = experiment_record(dir, once, 0, b, sizeof b);
    size_t nc = experiment_record(dir, dups, 1, c, sizeof c);
    cr_assert(na == nb && memcmp(a, b, na) == 0, "repeated values listed again");
    cr_assert(na == nc && memcmp(a, c, na) == 0, "gathered a trial at a time, another record");
    cr_assert_eq(tmpdir_remove(dir), 0);
}
