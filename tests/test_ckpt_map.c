/* test_ckpt_map — init.map (worker/io/ckpt_map.h): every timm ViT name maps
 * to bf's, the timm layouts convert (conv patch weight, [1, N+1, D]
 * positions, [1, 1, D] class token) and the ones that cannot are refused
 * with why, a map file's bad line is refused at FILE:LINE, a name mapped
 * twice is refused, and init.from with init.map loads a timm-named BF16
 * file into a ViT-shaped parameter list with the report in bf's names. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "kernels/bk.h"
#include "tests/tmpdir.h"
#include "worker/io/ckpt.h"
#include "worker/io/ckpt_map.h"

static char dir[256];
static void setup(void) { tmpdir_make(dir, sizeof dir, "/tmp/bf-map-XXXXXX"); }
static void teardown(void) { tmpdir_remove(dir); }
TestSuite(map, .init = setup, .fini = teardown, .timeout = 30);

static const char *const PAIRS[][2] = {
    {"cls_token", "cls_token"},
    {"pos_embed", "pos_emb.weight"},
    {"patch_embed.proj.weight", "patch_emb.weight"},
    {"patch_embed.proj.bias", "patch_emb.bias"},
    {"blocks.0.norm1.weight", "blocks.0.ln1.weight"},
    {"blocks.0.norm1.bias", "blocks.0.ln1.bias"},
    {"blocks.11.attn.qkv.weight", "blocks.11.attn.qkv.weight"},
    {"blocks.1.attn.qkv.bias", "blocks.1.attn.qkv.bias"},
    {"blocks.1.attn.proj.weight", "blocks.1.attn.out.weight"},
    {"blocks.1.attn.proj.bias", "blocks.1.attn.out.bias"},
    {"blocks.2.norm2.weight", "blocks.2.ln2.weight"},
    {"blocks.2.norm2.bias", "blocks.2.ln2.bias"},
    {"blocks.3.mlp.fc1.weight", "blocks.3.mlp.fc.weight"},
    {"blocks.3.mlp.fc1.bias", "blocks.3.mlp.fc.bias"},
    {"blocks.3.mlp.fc2.weight", "blocks.3.mlp.proj.weight"},
    {"blocks.3.mlp.fc2.bias", "blocks.3.mlp.proj.bias"},
    {"norm.weight", "ln_f.weight"},
    {"norm.bias", "ln_f.bias"},
    {"head.weight", "head.weight"},
    {"head.bias", "head.bias"},
};

Test(map, timm_names) {
    ckpt_map m;
    char err[512], out[BK_NAME_MAX];
    cr_assert_eq(ckpt_map_load(&m, "timm", err, sizeof err), 0, "%s", err);
    for (size_t i = 0; i < sizeof PAIRS / sizeof PAIRS[0]; i++) {
        cr_expect_eq(ckpt_map_name(&m, PAIRS[i][0], out, sizeof out), 1, "%s", PAIRS[i][0]);
        cr_expect_str_eq(out, PAIRS[i][1]);
    }
    /* not timm ViT names: kept as they are */
    const char *keep[] = {"fc_norm.weight",
                          "blocks.0.attn.q_norm.weight",
                          "blocks.x.norm1.weight",
                          "blocks.01.norm1.weight",
                          "reg_token",
                          "head.extra"};
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
        cr_expect_eq(ckpt_map_name(&m, keep[i], out, sizeof out), 0, "%s", keep[i]);
        cr_expect_str_eq(out, keep[i]);
    }
    ckpt_map_free(&m);
}

static bk_tensor tensor(int ndim, int a, int b) {
    bk_tensor t;
    memset(&t, 0, sizeof t);
    t.ndim = ndim, t.shape[0] = a, t.shape[1] = b;
    return t;
}

Test(map, timm_shapes) {
    ckpt_map m;
    char err[512];
    cr_assert_eq(ckpt_map_load(&m, "timm", err, sizeof err), 0, "%s", err);
    bk_tensor pw = tensor(2, 32, 16), pos = tensor(2, 10, 32), cls = tensor(2, 1, 32);
    uint64_t conv[] = {32, 1, 4, 4}, conv3[] = {32, 3, 4, 4}, p10[] = {1, 10, 32},
             p9[] = {1, 9, 32}, p17[] = {1, 17, 32}, c[] = {1, 1, 32};
    cr_expect_eq(ckpt_map_reshape(&m, "patch_embed.proj.weight", 4, conv, &pw, err, sizeof err), 0,
                 "%s", err);
    cr_expect_eq(ckpt_map_reshape(&m, "pos_embed", 3, p10, &pos, err, sizeof err), 0, "%s", err);
    cr_expect_eq(ckpt_map_reshape(&m, "cls_token", 3, c, &cls, err, sizeof err), 0, "%s", err);
    bk_tensor pw3 = tensor(2, 32, 16);
    cr_expect_eq(ckpt_map_reshape(&m, "patch_embed.proj.weight", 4, conv3, &pw3, err, sizeof err),
                 -1);
    cr_expect(strstr(err, "3-channel") && strstr(err, "one-channel"), "%s", err);
    cr_expect_eq(ckpt_map_reshape(&m, "pos_embed", 3, p9, &pos, err, sizeof err), -1);
    cr_expect(strstr(err, "class token"), "%s", err);
    cr_expect_eq(ckpt_map_reshape(&m, "pos_embed", 3, p17, &pos, err, sizeof err), -1);
    cr_expect(strstr(err, "interpolate"), "%s", err);
    uint64_t wrong[] = {32, 17};
    cr_expect_eq(ckpt_map_reshape(&m, "head.weight", 2, wrong, &pw, err, sizeof err), -1);
    cr_expect(strstr(err, "[32, 17]") && strstr(err, "[32, 16]"), "%s", err);
    ckpt_map_free(&m);
}

static const char *write_map(const char *name, const char *text) {
    return tmpdir_write_file(dir, name, text, strlen(text));
}

Test(map, file) {
    ckpt_map m;
    char err[512], out[BK_NAME_MAX], path[64];
    const char *p = write_map("ok.map", "# a comment\n\n  enc.w : blocks.0.ln1.weight  # trailing\n"
                                        "enc.b:blocks.0.ln1.bias\n");
    cr_assert_eq(ckpt_map_load(&m, p, err, sizeof err), 0, "%s", err);
    cr_expect_eq(m.n, 2);
    cr_expect_eq(ckpt_map_name(&m, "enc.w", out, sizeof out), 1);
    cr_expect_str_eq(out, "blocks.0.ln1.weight");
    cr_expect_eq(ckpt_map_name(&m, "other", out, sizeof out), 0);
    ckpt_map_free(&m);
    const char *bad[][2] = {{"a: b\nno colon here\n", ":2:"},
                            {"a: b\n\n# x\nc: d e\n", ":4:"},
                            {"a: b\na: c\n", "mapped twice"},
                            {"a: b\nc: b\n", "mapped twice"},
                            {": b\n", ":1:"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(path, sizeof path, "bad%zu.map", i);
        p = write_map(path, bad[i][0]);
        cr_expect_eq(ckpt_map_load(&m, p, err, sizeof err), -1, "%s", bad[i][0]);
        cr_expect(strstr(err, p) && strstr(err, bad[i][1]), "%s", err);
    }
    cr_expect_eq(ckpt_map_load(&m, tmpdir_path(dir, "none.map"), err, sizeof err), -1);
    cr_expect(strstr(err, "not found"), "%s", err);
}

/* bf16 of f (f exactly representable) */
static uint16_t bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

Test(map, init_from_timm) {
    /* a 1-layer ViT-shaped list: cls [1, 4], pos [3, 4], patch [4, 4] */
    bk_params P;
    bk_params_init(&P);
    int s_cls[] = {1, 4}, s_pos[] = {3, 4}, s_pw[] = {4, 4}, s_ln[] = {4};
    cr_assert_geq(bk_params_add(&P, "cls_token", 2, s_cls, 0), 0);
    cr_assert_geq(bk_params_add(&P, "pos_emb.weight", 2, s_pos, 0), 0);
    cr_assert_geq(bk_params_add(&P, "patch_emb.weight", 2, s_pw, 1), 0);
    cr_assert_geq(bk_params_add(&P, "ln_f.weight", 1, s_ln, 0), 0);
    char aerr[256];
    cr_assert_eq(bk_params_alloc(&P, bk_cpu(), aerr, sizeof aerr), 0, "%s", aerr);
    float host[4 + 12 + 16 + 4];
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) host[i] = -7.0f;
    uint16_t cls[4], pos[12], pw[16];
    for (int i = 0; i < 4; i++) cls[i] = bf16((float)i);
    for (int i = 0; i < 12; i++) pos[i] = bf16(0.5f * (float)i);
    for (int i = 0; i < 16; i++) pw[i] = bf16(-0.25f * (float)i);
    /* a BF16 safetensors file as PyTorch writes it: header length, JSON, data */
    const char *hdr =
        "{\"cls_token\":{\"dtype\":\"BF16\",\"shape\":[1,1,4],\"data_offsets\":[0,8]},"
        "\"pos_embed\":{\"dtype\":\"BF16\",\"shape\":[1,3,4],\"data_offsets\":[8,32]},"
        "\"patch_embed.proj.weight\":{\"dtype\":\"BF16\",\"shape\":[4,1,2,2],"
        "\"data_offsets\":[32,64]},"
        "\"fc_norm.weight\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[64,72]}}";
    char err[1024], text[2048];
    const char *f = tmpdir_path(dir, "timm.safetensors");
    FILE *o = fopen(f, "wb");
    cr_assert(o);
    uint64_t hl = strlen(hdr);
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(hl >> (8 * i));
    fwrite(le, 1, 8, o);
    fwrite(hdr, 1, hl, o);
    fwrite(cls, 2, 4, o); /* little-endian host */
    fwrite(pos, 2, 12, o);
    fwrite(pw, 2, 16, o);
    fwrite(cls, 2, 4, o);
    fclose(o);
    ckpt_init_report r;
    cr_assert_eq(ckpt_init_from_map(f, "timm", &P, host, &r, text, sizeof text, err, sizeof err), 0,
                 "%s", err);
    cr_expect_eq(r.loaded, 3);
    cr_expect_eq(r.missing, 1);
    cr_expect_eq(r.unmatched, 1);
    cr_expect(strstr(text, "ln_f.weight") && strstr(text, "fc_norm.weight") &&
                  strstr(text, "init.map timm renamed 3 of the file's 4"),
              "%s", text);
    int k = bk_params_find(&P, "patch_emb.weight");
    for (int i = 0; i < 16; i++) cr_expect_float_eq(host[P.t[k].offset + i], -0.25f * (float)i, 0);
    k = bk_params_find(&P, "pos_emb.weight");
    for (int i = 0; i < 12; i++) cr_expect_float_eq(host[P.t[k].offset + i], 0.5f * (float)i, 0);
    /* without the map: nothing in common */
    cr_expect_eq(ckpt_init_from(f, &P, host, &r, text, sizeof text, err, sizeof err), -1);
    bk_params_free(&P);
}
