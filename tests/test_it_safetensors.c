/* test_it_safetensors — bf's safetensors as another implementation sees
 * them: tests/test_it_safetensors.py, with Python's safetensors package (the
 * reference implementation, pip-installed into BUILD/pydeps by
 * scripts/setup.sh) and numpy, writes a file that bf reads and loads with
 * init.from, and checks a checkpoint set that bf saved against the layout
 * in docs/checkpoints.md (names, shapes, values, metadata, checksums); and
 * bfworker export's F32 and BF16 files read back. */
#include <criterion/criterion.h>
#include <math.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bk.h"
#include "kernels/bk_bf16.h"
#include "tests/tmpdir.h"
#include "worker/io/ckpt.h"
#include "worker/io/safetensors.h"

#define PYTHON "/usr/bin/python3"
#define SCRIPT BF_SOURCE_DIR "/tests/test_it_safetensors.py"

static char dir[256];
static void setup(void) { tmpdir_make(dir, sizeof dir, "/tmp/bf-itst-XXXXXX"); }
static void teardown(void) { tmpdir_remove(dir); }
TestSuite(pyst, .init = setup, .fini = teardown, .timeout = 120);

/* Runs the script with args; returns its exit status, output in dir/py.log. */
static int python(const char *args) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "PYTHONPATH='%s/pydeps' %s -c 'import numpy, safetensors.numpy' 2>/dev/null",
             BF_BIN_DIR, PYTHON);
    cr_assert_eq(system(cmd), 0,
                 "%s cannot import numpy and safetensors from %s/pydeps: run sh scripts/setup.sh "
                 "(python3-numpy from Debian, safetensors from PyPI)",
                 PYTHON, BF_BIN_DIR);
    snprintf(cmd, sizeof cmd, "PYTHONPATH='%s/pydeps' %s '%s' %s >'%s/py.log' 2>&1", BF_BIN_DIR,
             PYTHON, SCRIPT, args, dir);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char *py_log(void) {
    static char buf[4096];
    FILE *f = fopen(tmpdir_path(dir, "py.log"), "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = '\0';
    if (f) fclose(f);
    return buf;
}

Test(pyst, python_writes_bf_reads) {
    char args[600], err[1024];
    const char *path = tmpdir_path(dir, "py.safetensors");
    snprintf(args, sizeof args, "write '%s'", path);
    cr_assert_eq(python(args), 0, "%s", py_log());
    st_file f;
    cr_assert_eq(st_open(&f, path, err, sizeof err), 0, "%s", err);
    cr_expect_eq(f.n, 5);
    cr_expect_str_eq(st_meta(&f, "writer"), "python");
    int i = st_find(&f, "blocks.0.w");
    cr_assert_geq(i, 0);
    cr_expect_eq(f.t[i].ndim, 2);
    cr_expect_eq(f.t[i].shape[0], 2);
    cr_expect_eq(f.t[i].shape[1], 3);
    float w[6];
    cr_assert_eq(st_read_f32(&f, i, w, err, sizeof err), 0, "%s", err);
    for (int k = 0; k < 6; k++) cr_expect_float_eq(w[k], (float)k * 0.25f - 1.0f, 0);
    i = st_find(&f, "scale");
    cr_expect_eq(f.t[i].ndim, 0);
    cr_assert_eq(st_read_f32(&f, i, w, err, sizeof err), 0, "%s", err);
    cr_expect_float_eq(w[0], 3.5f, 0);
    i = st_find(&f, "half");
    cr_expect_str_eq(f.t[i].dtype, "F16");
    cr_expect_eq(st_read_f32(&f, i, w, err, sizeof err), -1);
    cr_expect(strstr(err, "\"half\" is F16"), "%s", err);
    cr_expect_str_eq(f.t[st_find(&f, "index")].dtype, "I64");
    st_close(&f);

    /* init.from a foreign file: by name, the F16 and I64 tensors unmatched */
    bk_params P;
    bk_params_init(&P);
    int sw[2] = {2, 3}, sb[1] = {3}, sx[1] = {4};
    bk_params_add(&P, "blocks.0.w", 2, sw, 1);
    bk_params_add(&P, "extra", 1, sx, 1);
    bk_params_add(&P, "blocks.0.b", 1, sb, 0);
    cr_assert_eq(bk_params_alloc(&P, bk_cpu(), err, sizeof err), 0, "%s", err);
    float host[13];
    for (int k = 0; k < 13; k++) host[k] = 9;
    ckpt_init_report r;
    char text[512];
    cr_assert_eq(ckpt_init_from(path, &P, host, &r, text, sizeof text, err, sizeof err), 0, "%s",
                 err);
    cr_expect_eq(r.loaded, 2);
    cr_expect_eq(r.missing, 1);
    cr_expect_eq(r.unmatched, 3);
    cr_expect(strstr(text, "missing (kept as initialised): extra"), "%s", text);
    int b = bk_params_find(&P, "blocks.0.b"), x = bk_params_find(&P, "extra");
    cr_expect_float_eq(host[P.t[b].offset + 2], 3.25f, 0);
    cr_expect_float_eq(host[P.t[x].offset], 9.0f, 0);
    bk_params_free(&P);
}

Test(pyst, bf_set_read_by_python) {
    bk_params P;
    bk_params_init(&P);
    int emb[2] = {7, 4}, ln[1] = {4}, qkv[3] = {4, 3, 4}, sc[1] = {1};
    bk_params_add(&P, "embed.weight", 2, emb, 1);
    bk_params_add(&P, "blocks.0.ln1.weight", 1, ln, 0);
    bk_params_add(&P, "blocks.0.attn.qkv.weight", 3, qkv, 1);
    bk_params_add(&P, "blocks.0.attn.scale", 1, sc, 0);
    char err[1024];
    cr_assert_eq(bk_params_alloc(&P, bk_cpu(), err, sizeof err), 0, "%s", err);
    size_t n = P.numel;
    float *p = malloc(n * 4), *m = malloc(n * 4), *v = malloc(n * 4);
    const float base = 3;
    for (size_t i = 0; i < n; i++) {
        p[i] = base + 0.25f * (float)i;
        m[i] = base + 100 + 0.25f * (float)i;
        v[i] = base + 200 + 0.25f * (float)i;
    }
    ckpt_meta meta = {.step = 12,
                      .seed = 5,
                      .data_step = 12,
                      .cfg_text = "model.layers: 1\ndata.path: \"a \\\"b\\\"\"\n",
                      .n_counters = 1};
    snprintf(meta.counters[0].name, CKPT_COUNTER_NAME, "base");
    meta.counters[0].value = 3;
    cr_assert_eq(ckpt_save(dir, &P, p, m, v, &meta, err, sizeof err), 0, "%s", err);
    char args[600];
    snprintf(args, sizeof args, "check-set '%s'", dir);
    cr_expect_eq(python(args), 0, "%s", py_log());
    cr_expect(strstr(py_log(), "ok: 4 tensors, step 12"), "%s", py_log());
    free(p), free(m), free(v);
    bk_params_free(&P);
}

/* bfworker export FILE --out OUT --dtype DT; returns the exit status,
 * output in dir/export.log. */
static int export_cmd(const char *src, const char *out, const char *dtype) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/bfworker export '%s' --out '%s' %s%s >'%s/export.log' 2>&1",
             BF_BIN_DIR, src, out, dtype ? "--dtype " : "", dtype ? dtype : "", dir);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* export --dtype bf16 writes every tensor as BF16, each value the F32
 * master rounded to nearest even (ties, a value past bf16's range, a NaN
 * among them), two bytes each, the metadata carried; --dtype f32 (the
 * default) the same bits as the source; a run folder reads its
 * model.safetensors; no --out is a usage error. */
Test(pyst, export_writes_bf16_read_back) {
    float a[6] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.5f, 3.4e38f, NAN, 1e-40f};
    float b[12];
    for (int i = 0; i < 12; i++) b[i] = 0.1f * (float)(i - 6);
    int64_t sa[1] = {6}, sb[2] = {3, 4};
    st_entry e[2] = {{"w.a", 1, sa, a}, {"blocks.0.w", 2, sb, b}};
    const char *meta[2] = {"config", "model.layers: 1\n"};
    char err[1024], src[512], out[512], o32[512];
    char *run = strdup(tmpdir_path(dir, "run"));
    cr_assert_eq(mkdir(run, 0755), 0);
    snprintf(src, sizeof src, "%s/model.safetensors", run);
    cr_assert_eq(st_write(src, e, 2, meta, 1, err, sizeof err), 0, "%s", err);
    snprintf(out, sizeof out, "%s", tmpdir_path(dir, "w.bf16.safetensors"));
    snprintf(o32, sizeof o32, "%s", tmpdir_path(dir, "w.f32.safetensors"));
    cr_assert_eq(export_cmd(run, out, "bf16"), 0, "%s", tmpdir_path(dir, "export.log"));
    cr_assert_eq(export_cmd(src, o32, NULL), 0);
    st_file f;
    cr_assert_eq(st_open(&f, out, err, sizeof err), 0, "%s", err);
    cr_expect_str_eq(st_meta(&f, "config"), "model.layers: 1\n");
    cr_expect_not_null(st_meta(&f, "bf_export"));
    cr_assert_eq(f.n, 2);
    for (int k = 0; k < 2; k++) {
        const float *want = k ? b : a;
        int n = k ? 12 : 6, i = st_find(&f, k ? "blocks.0.w" : "w.a");
        cr_assert_geq(i, 0);
        cr_expect_str_eq(f.t[i].dtype, "BF16");
        cr_expect_eq(f.t[i].end - f.t[i].begin, (uint64_t)n * 2, "two bytes a value");
        float got[12];
        cr_assert_eq(st_read_as_f32(&f, i, got, err, sizeof err), 0, "%s", err);
        for (int j = 0; j < n; j++) {
            float w = bk_bf16_round(want[j]);
            if (isnan(w))
                cr_expect(isnan(got[j]), "%s[%d] is not a NaN", f.t[i].name, j);
            else
                cr_expect_eq(memcmp(&got[j], &w, 4), 0, "%s[%d] = %.9g, want %.9g", f.t[i].name, j,
                             (double)got[j], (double)w);
        }
    }
    cr_expect_eq(bk_bf16_round(a[0]), 1.0f, "the tie went to the even 1");
    cr_expect(isinf(bk_bf16_round(a[3])), "3.4e38 is past bf16's largest");
    st_close(&f);
    cr_assert_eq(st_open(&f, o32, err, sizeof err), 0, "%s", err);
    float got[12];
    int i = st_find(&f, "blocks.0.w");
    cr_assert_eq(st_read_f32(&f, i, got, err, sizeof err), 0, "%s", err);
    cr_expect_eq(memcmp(got, b, sizeof b), 0, "--dtype f32 changed the bits");
    st_close(&f);
    cr_expect_eq(export_cmd(src, "", NULL) != 0 && export_cmd(src, out, "f16") == 64, 1,
                 "a bad --dtype is a usage error (64)");
    free(run);
}
