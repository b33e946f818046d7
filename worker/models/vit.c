/* vit — a DeiT-style vision transformer classifier (docs/design.md#vit): the
 * image (its pixels 0..255 are the model's input ids, row-major [H, W]) is
 * cut into p x p patches, each normalised to [-1, 1] and embedded by a
 * linear map ("patch_emb.weight" [C, p*p], "patch_emb.bias": im2col on the
 * host while staging the batch, then one GEMM on the device); a learned
 * class token ("cls_token" [1, C]) leads the sequence and learned positions
 * ("pos_emb.weight" [N+1, C]) are added; the trunk's pre-LN blocks see every
 * token both ways; the classifier ("head.weight" [n_classes, C],
 * "head.bias") reads the final LayerNorm's class-token row.
 *
 * Training forwards augment on the host: a random crop after zero padding by
 * aug_pad pixels and a random horizontal flip (aug_flip), drawn from
 * (seed, step, global row), so a rank and a resumed run see the same images.
 * No new device op: x[0] is gathered from [class token; patch embeddings] by
 * the embedding op, and its backward scatters back the same way. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/models/model.h"

static int vit_patches(const model *m) {
    int p = m->sh.patch;
    return (m->sh.image_h / p) * (m->sh.image_w / p);
}

static int vit_declare_input(model *m, char *err, size_t errlen) {
    const model_shape *sh = &m->sh;
    int p = sh->patch, C = sh->d_model;
    if (p < 1 || sh->image_h < 1 || sh->image_w < 1 || sh->image_h % p || sh->image_w % p) {
        snprintf(err, errlen, "vit: patch %d does not divide the %d x %d image", p, sh->image_h,
                 sh->image_w);
        return -1;
    }
    if (sh->seq_len != vit_patches(m) + 1) {
        snprintf(err, errlen, "vit: seq_len %d is not patches + 1 = %d", sh->seq_len,
                 vit_patches(m) + 1);
        return -1;
    }
    if (nn_linear_declare(&m->patch_emb, &m->np, "patch_emb", p * p, C, 1, 0.02f) ||
        (m->cls_token = nn_param(&m->np, "", "cls_token", 1, C, 0, nn_normal(0.02f))) < 0 ||
        (m->pos_emb = nn_param(&m->np, "pos_emb", "weight", sh->seq_len, C, 1, nn_normal(0.02f))) <
            0) {
        snprintf(err, errlen, "out of memory declaring the patch embedding");
        return -1;
    }
    return 0;
}

static int vit_declare_head(model *m, char *err, size_t errlen) {
    if (m->sh.n_classes < 2) {
        snprintf(err, errlen, "vit: %d classes; a classifier needs at least 2", m->sh.n_classes);
        return -1;
    }
    if (nn_linear_declare(&m->head, &m->np, "head", m->sh.d_model, m->sh.n_classes, 1, 0.02f)) {
        snprintf(err, errlen, "out of memory declaring the classifier");
        return -1;
    }
    return 0;
}

static void vit_plan(model *m, bk_arena *A) {
    size_t B = (size_t)m->B, C = (size_t)m->sh.d_model, N = (size_t)vit_patches(m);
    size_t pp = (size_t)m->sh.patch * m->sh.patch;
    m->pooled = bk_arena_floats(A, B * C);
    m->dpooled = bk_arena_floats(A, B * C);
    m->patches = bk_arena_floats(A, B * N * pp);
    m->prow = bk_arena_floats(A, (1 + B * N) * C);
    m->dprow = bk_arena_floats(A, (1 + B * N) * C);
    m->gather = bk_arena_ints(A, B * (size_t)m->sh.seq_len);
    m->cls_rows = bk_arena_ints(A, B);
}

static int vit_rows(const model *m, int B) {
    (void)m;
    return B;
}

static int vit_width(const model *m) { return m->sh.n_classes; }

static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* im2col of B images with this forward's augmentation into h_patches
 * [B*N, p*p]. */
static void vit_stage(model *m, const int *in, int B, int training) {
    const model_shape *sh = &m->sh;
    int p = sh->patch, H = sh->image_h, W = sh->image_w, N = vit_patches(m);
    int aug = training || m->aug_infer;
    int pw = W / p, pad = aug ? m->aug_pad : 0, flip = aug && m->aug_flip;
    size_t pp = (size_t)p * p;
    for (int b = 0; b < B; b++) {
        int dy = 0, dx = 0, fl = 0;
        if (aug) {
            uint64_t r = mix64(mix64(mix64(m->kn.seed) ^ m->kn.step) ^ (m->kn.row_offset + b));
            if (pad > 0) {
                dy = (int)(r % (uint64_t)(2 * pad + 1)) - pad;
                dx = (int)((r >> 16) % (uint64_t)(2 * pad + 1)) - pad;
            }
            fl = flip && ((r >> 40) & 1);
        }
        const int *img = in + (size_t)b * H * W;
        for (int n = 0; n < N; n++) {
            float *row = m->h_patches + ((size_t)b * N + n) * pp;
            int y0 = (n / pw) * p, x0 = (n % pw) * p;
            for (int i = 0; i < p; i++)
                for (int j = 0; j < p; j++) {
                    int y = y0 + i + dy, x = x0 + j + dx;
                    if (fl) x = W - 1 - x;
                    int v = y >= 0 && y < H && x >= 0 && x < W ? img[(size_t)y * W + x] : 0;
                    row[i * p + j] = (float)v * (2.0f / 255.0f) - 1.0f;
                }
        }
    }
}

/* The gather ids of x[0] ([class token; patch rows] per sample, [B*T]) and
 * the class-token rows ([B]) do not depend on the batch's size (a smaller
 * batch uses their prefix) nor its images: uploaded once here, after the
 * arena exists, so a step uploads only its patches. Host staging of the
 * patches is allocated here too. Returns 0 or -1 with a message. */
static int vit_setup(model *m, char *err, size_t errlen) {
    int B = m->B, N = vit_patches(m), T = m->sh.seq_len;
    size_t pp = (size_t)m->sh.patch * m->sh.patch;
    m->h_patches = malloc((size_t)B * N * pp * sizeof(float));
    m->h_gather = malloc(((size_t)B * T + B) * sizeof(int));
    if (!m->h_patches || !m->h_gather) {
        snprintf(err, errlen, "out of memory staging the images");
        return -1;
    }
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) m->h_gather[(size_t)b * T + t] = t == 0 ? 0 : 1 + b * N + t - 1;
        m->h_gather[(size_t)B * T + b] = b * T;
    }
    m->be->to_device(m->gather, m->h_gather, (size_t)B * T * sizeof(int));
    m->be->to_device(m->cls_rows, m->h_gather + (size_t)B * T, (size_t)B * sizeof(int));
    return 0;
}

/* x[0][b] = [cls; patch_emb(patches of b)] + pos */
static int vit_embed_forward(model *m, const int *in, int B, int training, char *err,
                             size_t errlen) {
    const bk_backend *be = m->be;
    const model_shape *sh = &m->sh;
    int C = sh->d_model, N = vit_patches(m), T = sh->seq_len;
    size_t px = (size_t)sh->image_h * sh->image_w, pp = (size_t)sh->patch * sh->patch;
    for (size_t i = 0; i < (size_t)B * px; i++)
        if (in[i] < 0 || in[i] > 255) {
            snprintf(err, errlen, "vit: pixel %d of image %zu outside 0..255", in[i], i / px);
            return -1;
        }
    vit_stage(m, in, B, training);
    be->to_device(m->patches, m->h_patches, (size_t)B * N * pp * sizeof(float));
    be->copy(m->prow, nn_w(&m->env, m->cls_token), (size_t)C * sizeof(float));
    nn_linear_forward(&m->patch_emb, &m->env, m->prow + C, m->patches, B * N);
    be->embedding_forward(m->x[0], m->gather, m->prow, B * T, C);
    be->posadd_forward(m->x[0], m->x[0], nn_w(&m->env, m->pos_emb), B, T, C);
    return 0;
}

static void vit_embed_backward(model *m, const float *dx0, int B) {
    const bk_backend *be = m->be;
    int C = m->sh.d_model, N = vit_patches(m), T = m->sh.seq_len;
    float *dpos = nn_g(&m->env, m->pos_emb), *dcls = nn_g(&m->env, m->cls_token);
    if (dpos) be->posadd_backward(NULL, dpos, dx0, B, T, C);
    be->zero(m->dprow, (1 + (size_t)B * N) * C * sizeof(float));
    be->embedding_backward(m->dprow, dx0, m->gather, B * T, C);
    if (dcls) be->add(dcls, dcls, m->dprow, (size_t)C);
    nn_linear_backward(&m->patch_emb, &m->env, NULL, m->dprow + C, m->patches, B * N);
}

/* logits[B, n_classes] = head(lnf[b, 0]) */
static void vit_head_forward(model *m, int B) {
    m->be->embedding_forward(m->pooled, m->cls_rows, m->af.out, B, m->sh.d_model);
    nn_linear_forward(&m->head, &m->env, m->logits, m->pooled, B);
}

static void vit_head_backward(model *m, int B) {
    m->be->zero(m->dpooled, (size_t)B * m->sh.d_model * sizeof(float));
    nn_linear_backward(&m->head, &m->env, m->dpooled, m->dlogits, m->pooled, B);
    m->be->embedding_backward(m->dlnf, m->dpooled, m->cls_rows, B, m->sh.d_model);
}

const model_arch MODEL_VIT = {.name = "vit classifier",
                              .declare_head = vit_declare_head,
                              .plan_head = vit_plan,
                              .loss_rows = vit_rows,
                              .logit_width = vit_width,
                              .head_forward = vit_head_forward,
                              .head_backward = vit_head_backward,
                              .declare_input = vit_declare_input,
                              .setup = vit_setup,
                              .embed_forward = vit_embed_forward,
                              .embed_backward = vit_embed_backward};
