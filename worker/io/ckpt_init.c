/* ckpt_init.c — init.from: starting a run from another run's weights by
 * tensor name (a run folder, a .safetensors file, or an older
 * checkpoint.bin by position), renamed first by init.map (ckpt_map.c) where
 * given. It loads a subset, converts F16/BF16/F64, and reports what it
 * loaded, missed and left over. */
#include "worker/io/ckpt.h"
#include "worker/io/ckpt_map.h"
#include "worker/io/ckpt_priv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/input_path.h"
#include "worker/io/safetensors.h"

/* A dtype init.from converts: else a message. */
static int check_dtype(const st_file *f, int i, char *err, size_t errlen) {
    const st_tensor *x = &f->t[i];
    if (st_dtype_converts(x->dtype)) return 0;
    snprintf(err, errlen,
             "%s: tensor \"%s\" is %s; init.from loads F32, F16, BF16 and F64 tensors "
             "(save it as one of those)",
             f->path, x->name, x->dtype);
    return -1;
}

/* Appends ", name" (or the first name) to text, or " ..." once full. */
static void list_add(char *text, size_t n, size_t *w, int *first, const char *name) {
    if (*w >= n) return;
    size_t need = strlen(name) + 2;
    if (*w + need + 5 >= n) {
        *w += (size_t)snprintf(text + *w, n - *w, " ...");
        *w = n;
        return;
    }
    *w += (size_t)snprintf(text + *w, n - *w, "%s%s", *first ? " " : ", ", name);
    *first = 0;
}

static int init_from_old(const char *file, const bk_params *P, float *host_params,
                         ckpt_init_report *r, char *text, size_t textlen, char *err,
                         size_t errlen) {
    ckpt_state s;
    if (ckpt_read(file, &s, err, errlen)) return -1;
    if (s.n_params != P->numel) {
        ckpt_bin_size_error(file, &s, P, err, errlen);
        ckpt_free(&s);
        return -1;
    }
    memcpy(host_params, s.params, P->numel * sizeof(float));
    ckpt_free(&s);
    r->loaded = P->n;
    r->floats = P->numel;
    r->by_position = 1;
    snprintf(text, textlen,
             "init.from %s: all %d tensors (%zu floats) by position (an older checkpoint.bin "
             "has no names)",
             file, P->n, P->numel);
    return 0;
}

int ckpt_init_from(const char *path, const bk_params *P, float *host_params, ckpt_init_report *r,
                   char *text, size_t textlen, char *err, size_t errlen) {
    return ckpt_init_from_map(path, NULL, P, host_params, r, text, textlen, err, errlen);
}

/* The file's tensor names after the map (file order) and, for each tensor
 * of P, the file's tensor of that name or -1. */
typedef struct mapped_names {
    char (*name)[BK_NAME_MAX]; /* f->n names; "" = longer than a bf name */
    int *renamed;              /* f->n flags */
    int *of;                   /* P->n indices */
} mapped_names;

static void mapped_free(mapped_names *mn) { free(mn->name), free(mn->renamed), free(mn->of); }

static int mapped_build(mapped_names *mn, const st_file *f, const ckpt_map *map, const bk_params *P,
                        char *err, size_t errlen) {
    mn->name = calloc((size_t)f->n + 1, sizeof *mn->name);
    mn->renamed = calloc((size_t)f->n + 1, sizeof *mn->renamed);
    mn->of = malloc(((size_t)P->n + 1) * sizeof *mn->of);
    if (!mn->name || !mn->renamed || !mn->of) {
        snprintf(err, errlen, "init.from: out of memory");
        return -1;
    }
    for (int k = 0; k < P->n; k++) mn->of[k] = -1;
    for (int i = 0; i < f->n; i++) {
        int rc = ckpt_map_name(map, f->t[i].name, mn->name[i], sizeof mn->name[i]);
        if (rc < 0) { /* too long for any of P's names: can match nothing */
            mn->name[i][0] = '\0';
            continue;
        }
        mn->renamed[i] = rc;
        int k = bk_params_find(P, mn->name[i]);
        if (k < 0) continue;
        if (mn->of[k] >= 0) {
            snprintf(err, errlen,
                     "init.from %s: tensors \"%s\" and \"%s\" both map to \"%s\" (init.map)",
                     f->path, f->t[mn->of[k]].name, f->t[i].name, mn->name[i]);
            return -1;
        }
        mn->of[k] = i;
    }
    return 0;
}

int ckpt_init_from_map(const char *path, const char *map_spec, const bk_params *P,
                       float *host_params, ckpt_init_report *r, char *text, size_t textlen,
                       char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    if (textlen) text[0] = '\0';
    if (!path || !*path || !P || !host_params) {
        snprintf(err, errlen, "init.from: needs a path, a parameter list and a host buffer");
        return -1;
    }
    if (ckpt_params_ok(P, "init.from", err, errlen)) return -1;
    int is_dir = 0;
    char e2[1024];
    if (input_path_check(NULL, path, INPUT_FILE | INPUT_DIR,
                         "a run folder, a .safetensors file or a checkpoint.bin", &is_dir, e2,
                         sizeof e2)) {
        snprintf(err, errlen, "init.from %s%s", e2,
                 strstr(e2, ": not found") ? " (a run folder, a .safetensors file or a "
                                             "checkpoint.bin)"
                                           : "");
        return -1;
    }
    st_file f = {0};
    if (is_dir) {
        char p[4200];
        ckpt_kind k = ckpt_probe(path);
        ckpt_join(p, sizeof p, path, CKPT_MODEL_FILE);
        if (k == CKPT_SET) {
            ckpt_set_state s;
            if (ckpt_read_state(path, &s, err, errlen)) {
                free(s.cfg_owned);
                return -1;
            }
            int rc = ckpt_open_member(path, &s, 0, 1, &f, err, errlen);
            free(s.cfg_owned);
            memcpy(r->counters, s.counters, sizeof r->counters);
            r->n_counters = s.n_counters;
            if (rc) return -1;
        } else if (ckpt_exists(p)) {
            if (st_open(&f, p, e2, sizeof e2)) {
                snprintf(err, errlen, "init.from %s: %s", path, e2);
                return -1;
            }
        } else if (k == CKPT_OLD) {
            ckpt_join(p, sizeof p, path, CKPT_NAME);
            snprintf(r->source, sizeof r->source, "%.4095s", p);
            return init_from_old(p, P, host_params, r, text, textlen, err, errlen);
        } else {
            snprintf(err, errlen, "init.from %s: the folder has no %s, %s or %s", path,
                     CKPT_STATE_FILE, CKPT_MODEL_FILE, CKPT_NAME);
            return -1;
        }
    } else if (ckpt_bin_is(path)) {
        snprintf(r->source, sizeof r->source, "%s", path);
        return init_from_old(path, P, host_params, r, text, textlen, err, errlen);
    } else if (st_open(&f, path, err, errlen)) {
        return -1;
    }
    snprintf(r->source, sizeof r->source, "%s", f.path);
    int rc = -1;
    ckpt_map map = {0};
    mapped_names mn = {0};
    if (ckpt_map_load(&map, map_spec, err, errlen) || mapped_build(&mn, &f, &map, P, err, errlen))
        goto out;
    const char *dfnv = st_meta(&f, "data_fnv1a64");
    uint64_t want, h;
    if (dfnv && ckpt_parse_hex16(dfnv, &want) == 0) {
        if (st_data_fnv(&f, &h, err, errlen)) goto out;
        if (h != want) {
            snprintf(err, errlen, "init.from %s: data checksum mismatch (damaged file)", f.path);
            goto out;
        }
    }
    /* Validate every match before writing anything. */
    for (int k = 0; k < P->n; k++) {
        int i = mn.of[k];
        if (i < 0) {
            r->missing++;
            continue;
        }
        if (mn.renamed[i] && !ckpt_same_shape(&f.t[i], &P->t[k])) {
            char why[512];
            if (ckpt_map_reshape(&map, f.t[i].name, f.t[i].ndim, f.t[i].shape, &P->t[k], why,
                                 sizeof why)) {
                snprintf(err, errlen, "init.from %s: tensor \"%s\" (init.map: \"%s\") %s", f.path,
                         f.t[i].name, P->t[k].name, why);
                goto out;
            }
            if (check_dtype(&f, i, err, errlen)) goto out;
        } else if (ckpt_check_shape(&f, i, &P->t[k], 1, err, errlen)) {
            goto out;
        }
        r->loaded++;
        r->floats += P->t[k].numel;
    }
    r->unmatched = f.n - r->loaded;
    if (r->loaded == 0) {
        snprintf(
            err, errlen,
            "init.from %s: none of its %d tensors has the name of one of this "
            "model's %d (first in the file: \"%s\"%s%s%s; in the model: \"%s\")",
            f.path, f.n, P->n, f.n ? f.t[0].name : "", f.n && mn.renamed[0] ? ", mapped to \"" : "",
            f.n && mn.renamed[0] ? mn.name[0] : "", f.n && mn.renamed[0] ? "\"" : "", P->t[0].name);
        goto out;
    }
    char conv[sizeof r->converted_from] = ""; /* "BF16", "F16/F64": a few names */
    for (int k = 0; k < P->n; k++) {
        int i = mn.of[k];
        if (i < 0) continue;
        float *dst = host_params + P->t[k].offset;
        if (st_read_as_f32(&f, i, dst, err, errlen)) goto out;
        size_t bad = 0, first = 0;
        for (size_t j = P->t[k].numel; j-- > 0;)
            if (!isfinite(dst[j])) bad++, first = j;
        if (bad) {
            snprintf(err, errlen,
                     "init.from %s: tensor \"%s\" holds %zu NaN/Inf value%s of %zu (the first "
                     "at element %zu%s): the checkpoint is damaged or the run that wrote it "
                     "diverged; give another init.from",
                     f.path, P->t[k].name, bad, bad == 1 ? "" : "s", P->t[k].numel, first,
                     strcmp(f.t[i].dtype, "F64") == 0 ? "; F64 values beyond F32's range too" : "");
            goto out;
        }
        if (strcmp(f.t[i].dtype, "F32") != 0) {
            r->converted++;
            if (!strstr(conv, f.t[i].dtype) && strlen(conv) + 8 < sizeof conv)
                snprintf(conv + strlen(conv), sizeof conv - strlen(conv), "%s%s",
                         conv[0] ? "/" : "", f.t[i].dtype);
        }
    }
    if (r->converted) snprintf(r->converted_from, sizeof r->converted_from, "%s", conv);
    size_t w =
        (size_t)snprintf(text, textlen,
                         "init.from %s: %d of %d tensors loaded (%zu floats); %d missing "
                         "(kept as initialised)%s",
                         f.path, r->loaded, P->n, r->floats, r->missing, r->missing ? ":" : "");
    if (w > textlen) w = textlen;
    int first = 1;
    for (int k = 0; k < P->n; k++)
        if (mn.of[k] < 0) list_add(text, textlen, &w, &first, P->t[k].name);
    if (w < textlen)
        w += (size_t)snprintf(text + w, textlen - w, "; %d unmatched (in the file only)%s",
                              r->unmatched, r->unmatched ? ":" : "");
    if (w > textlen) w = textlen;
    first = 1;
    for (int i = 0; i < f.n; i++)
        if (!mn.name[i][0] || bk_params_find(P, mn.name[i]) < 0)
            list_add(text, textlen, &w, &first, mn.name[i][0] ? mn.name[i] : f.t[i].name);
    if (map.timm || map.n) {
        int renamed = 0;
        for (int i = 0; i < f.n; i++) renamed += mn.renamed[i];
        if (w < textlen)
            snprintf(text + w, textlen - w, "; init.map %s renamed %d of the file's %d", map_spec,
                     renamed, f.n);
    }
    rc = 0;
out:
    mapped_free(&mn);
    ckpt_map_free(&map);
    st_close(&f);
    return rc;
}
