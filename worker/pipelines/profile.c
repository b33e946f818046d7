/* profile.c — the attention sparsity profile of a trained ViT (profile.h):
 * computed on a calibration batch, written as JSON and a table, read back. */

#include "worker/pipelines/profile.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/input_path.h"

static int desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* Entropy and top-10% mass of one layer's attention, summed over the
 * active query rows; *rows counts them. */
static void layer_attention(const float *att, const float *mask, int B, int NH, int T, float *row,
                            double *ent, double *top, double *rows) {
    for (int b = 0; b < B; b++) {
        const float *mb = mask + (size_t)b * T;
        int n = 0;
        for (int k = 0; k < T; k++) n += mb[k] > 0;
        if (n < 2) continue;
        int ktop = (n + 9) / 10;
        for (int h = 0; h < NH; h++)
            for (int q = 0; q < T; q++) {
                if (!(mb[q] > 0)) continue;
                const float *p = att + (((size_t)b * NH + h) * T + q) * T;
                double H = 0, Z = 0;
                int j = 0;
                for (int k = 0; k < T; k++)
                    if (mb[k] > 0) {
                        row[j++] = p[k];
                        Z += p[k];
                    }
                for (int k = 0; k < n; k++) {
                    double v = Z > 0 ? row[k] / Z : 0;
                    if (v > 0) H -= v * log(v);
                }
                qsort(row, (size_t)n, sizeof *row, desc);
                double m = 0;
                for (int k = 0; k < ktop; k++) m += row[k];
                *ent += H / log((double)n);
                *top += Z > 0 ? m / Z : 0;
                *rows += 1;
            }
    }
}

static int by_density(const void *a, const void *b, void *ctx) {
    const pipe_profile_t *p = ctx;
    double x = p->l[*(const int *)a].density, y = p->l[*(const int *)b].density;
    if (isnan(x)) return isnan(y) ? 0 : 1;
    if (isnan(y)) return -1;
    return (x > y) - (x < y);
}

/* insertion sort with a context (qsort_r is not C11) */
static void sort_layers(pipe_profile_t *p) {
    for (int i = 0; i < p->layers; i++) p->order[i] = i;
    for (int i = 1; i < p->layers; i++)
        for (int j = i; j > 0 && by_density(&p->order[j - 1], &p->order[j], p) > 0; j--) {
            int t = p->order[j];
            p->order[j] = p->order[j - 1];
            p->order[j - 1] = t;
        }
}

int pipe_profile(model *m, const bf_config *c, const data_sets *d, int samples, pipe_profile_t *out,
                 char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (!d->val || m->sh.patch <= 0) {
        snprintf(err, errlen, "profile: needs a vit model and a validation split");
        return -1;
    }
    int T = m->sh.seq_len, L = m->sh.layers, NH = m->sh.heads, T_in = pipe_input_len(c, d);
    int rows_max = samples < m->B ? samples : m->B;
    data_batcher_opts bo = {.global_batch = rows_max, .seq_len = T_in, .world = 1, .wrap = 0};
    data_batcher_t *bt = NULL;
    data_batch_t b;
    if (data_batcher_new(d->val, &bo, &bt, err, errlen)) return -1;
    if (data_batch_alloc(&b, rows_max, T_in)) {
        data_batcher_destroy(&bt);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = data_batch_next(bt, &b, err, errlen);
    if (rc == DATA_END || (rc == 0 && b.valid_rows == 0)) {
        snprintf(err, errlen, "profile: the validation split is empty");
        rc = -1;
    }
    int drop = m->drop, pad = m->aug_pad, flip = m->aug_flip;
    float *att = NULL, *row = malloc((size_t)T * sizeof(float)), *ones = NULL;
    size_t BT = (size_t)b.valid_rows * T;
    if (!rc) {
        att = malloc(BT * NH * T * sizeof(float));
        ones = malloc(BT * sizeof(float));
        if (!att || !row || !ones) {
            snprintf(err, errlen, "out of memory profiling");
            rc = -1;
        }
    }
    m->drop = 0; /* masked: the attention maps keep the full layout */
    if (!rc) rc = model_forward(m, b.ids, NULL, b.labels, b.valid_rows, 0, err, errlen);
    for (size_t i = 0; !rc && i < BT; i++) ones[i] = 1;
    for (int l = 0; !rc && l < L; l++) {
        const float *mask = m->sh.avit ? m->halt.h_mask[l] : ones;
        pipe_layer_profile *p = &out->l[l];
        double keep = 0;
        for (int s = 0; s < b.valid_rows; s++)
            for (int k = 1; k < T; k++) keep += mask[(size_t)s * T + k] > 0;
        p->keep = keep / ((double)b.valid_rows * (T - 1));
        nn_attn *a = model_attn(m, l);
        p->attention = a != NULL;
        p->entropy = p->top_mass = p->density = NAN;
        if (!a) continue;
        if (!a->att) { /* infer_only, or tiled attention: the maps were not kept */
            if (a->lse)
                snprintf(err, errlen,
                         "profile: attention at %d tokens runs tiled on %s and keeps no maps; "
                         "profile at fewer than %d tokens",
                         T, m->be->name, a->cf.tiled_min_t);
            else
                snprintf(err, errlen,
                         "profile: the model keeps no attention maps (built for "
                         "inference only); build it with infer_only 0");
            rc = -1;
            break;
        }
        m->be->to_host(att, a->att, BT * NH * T * sizeof(float));
        double ent = 0, top = 0, n = 0;
        layer_attention(att, mask, b.valid_rows, NH, T, row, &ent, &top, &n);
        p->entropy = n > 0 ? ent / n : NAN;
        p->top_mass = n > 0 ? top / n : NAN;
        /* no query with two active tokens: the layer mixes nothing */
        p->density = n > 0 ? p->keep * p->entropy : 0.0;
    }
    m->drop = drop, m->aug_pad = pad, m->aug_flip = flip;
    out->layers = L;
    out->halting = m->sh.avit;
    out->samples = b.valid_rows;
    out->tokens = T;
    sort_layers(out);
    free(att), free(row), free(ones);
    data_batch_free(&b);
    data_batcher_destroy(&bt);
    return rc ? -1 : 0;
}

static json_t *num(double v) { return isnan(v) ? json_null() : json_real(v); }

/* What the sparsest-first order ranks by. */
static const char *score_name(const pipe_profile_t *p) {
    return p->halting ? "keep*entropy" : "entropy";
}

void pipe_profile_json(const pipe_profile_t *p, FILE *f) {
    json_t *root = json_object(), *layers = json_array(), *order = json_array();
    for (int l = 0; l < p->layers; l++) {
        const pipe_layer_profile *q = &p->l[l];
        json_array_append_new(layers,
                              json_pack("{s:i, s:s, s:o, s:o, s:o, s:o}", "layer", l, "mixer",
                                        q->attention ? "attention" : "other", "entropy",
                                        num(q->entropy), "top_mass", num(q->top_mass), "keep",
                                        num(q->keep), "density", num(q->density)));
        json_array_append_new(order, json_integer(p->order[l]));
    }
    json_object_set_new(root, "samples", json_integer(p->samples));
    json_object_set_new(root, "tokens", json_integer(p->tokens));
    json_object_set_new(root, "layers", layers);
    json_object_set_new(root, "score", json_string(score_name(p)));
    json_object_set_new(root, "sparsest", order);
    json_dumpf(root, f, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
    fputc('\n', f);
    json_decref(root);
}

void pipe_profile_table(const pipe_profile_t *p, FILE *f) {
    fprintf(f, "attention sparsity on %d validation images, %d tokens (%s model)\n", p->samples,
            p->tokens, p->halting ? "A-ViT" : "dense");
    fprintf(f, "layer  entropy  top10%%_mass   keep  density\n");
    for (int l = 0; l < p->layers; l++) {
        const pipe_layer_profile *q = &p->l[l];
        if (q->attention)
            fprintf(f, "%5d  %7.3f  %11.3f  %5.3f  %7.3f\n", l, q->entropy, q->top_mass, q->keep,
                    q->density);
        else
            fprintf(f, "%5d  %7s  %11s  %5.3f  %7s\n", l, "-", "-", q->keep, "-");
    }
    fprintf(f, "score: %s%s\n", score_name(p),
            p->halting ? " (density: the halting's keep times the attention's entropy)"
                       : " (the attention's own sparsity)");
    fprintf(f, "sparsest first:");
    for (int l = 0; l < p->layers; l++) fprintf(f, " %d", p->order[l]);
    fputc('\n', f);
}

#define PROFILE_MAX_BYTES (1 << 20)

int pipe_profile_read(const char *path, pipe_profile_t *p, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    char why[1100]; /* "not found" may name the working folder */
    FILE *f = input_path_open(path, why, sizeof why);
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s%s", path, why,
                 errno == ENOENT ? " (run the profile stage first)" : "");
        return -1;
    }
    char *buf = malloc(PROFILE_MAX_BYTES + 1);
    size_t n = buf ? fread(buf, 1, PROFILE_MAX_BYTES + 1, f) : 0;
    fclose(f);
    if (!buf || n > PROFILE_MAX_BYTES) {
        free(buf);
        snprintf(err, errlen, "%s: larger than %d bytes", path, PROFILE_MAX_BYTES);
        return -1;
    }
    json_error_t je;
    json_t *root = json_loadb(buf, n, JSON_REJECT_DUPLICATES, &je);
    free(buf);
    json_t *layers = root ? json_object_get(root, "layers") : NULL;
    json_t *order = root ? json_object_get(root, "sparsest") : NULL;
    if (!root || !json_is_array(layers) || !json_is_array(order) ||
        json_array_size(layers) != json_array_size(order) || json_array_size(layers) < 1 ||
        json_array_size(layers) > MODEL_MAX_LAYERS) {
        snprintf(err, errlen, "%s: %s", path,
                 root ? "expected {\"layers\": [...], \"sparsest\": [...]} of equal length 1..64"
                      : je.text);
        json_decref(root);
        return -1;
    }
    p->layers = (int)json_array_size(layers);
    p->samples = (int)json_integer_value(json_object_get(root, "samples"));
    p->tokens = (int)json_integer_value(json_object_get(root, "tokens"));
    const char *score = json_string_value(json_object_get(root, "score"));
    p->halting = !score || strcmp(score, "entropy") != 0; /* older files: keep*entropy */
    int seen[MODEL_MAX_LAYERS] = {0};
    for (int l = 0; l < p->layers; l++) {
        json_t *q = json_array_get(layers, (size_t)l), *o = json_array_get(order, (size_t)l);
        json_t *e = json_object_get(q, "entropy"), *k = json_object_get(q, "keep");
        json_t *tm = json_object_get(q, "top_mass"), *dn = json_object_get(q, "density");
        p->l[l].entropy = json_is_number(e) ? json_number_value(e) : NAN;
        p->l[l].top_mass = json_is_number(tm) ? json_number_value(tm) : NAN;
        p->l[l].keep = json_is_number(k) ? json_number_value(k) : NAN;
        p->l[l].density = json_is_number(dn) ? json_number_value(dn) : NAN;
        p->l[l].attention = json_is_number(e);
        json_int_t v = json_is_integer(o) ? json_integer_value(o) : -1;
        if (v < 0 || v >= p->layers || seen[v]) {
            snprintf(err, errlen, "%s: sparsest[%d] is not a new layer id in 0..%d", path, l,
                     p->layers - 1);
            json_decref(root);
            return -1;
        }
        seen[v] = 1;
        p->order[l] = (int)v;
    }
    json_decref(root);
    return 0;
}
