/* ckpt_map.c — init.map (ckpt_map.h): loads a rename map from a file or the
 * built-in "timm" map, renames a checkpoint's tensors and reshapes those
 * whose layout differs. */

#include "worker/io/ckpt_map.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/input_path.h"

void ckpt_map_free(ckpt_map *m) {
    for (int i = 0; i < m->n; i++) free(m->from[i]), free(m->to[i]);
    free(m->from);
    free(m->to);
    memset(m, 0, sizeof *m);
}

static int name_ok(const char *s, size_t n) {
    if (n == 0 || n >= BK_NAME_MAX * 4) return 0;
    for (size_t i = 0; i < n; i++)
        if (isspace((unsigned char)s[i]) || s[i] == ':' || (unsigned char)s[i] < 0x20) return 0;
    return 1;
}

static char *dupn(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n), d[n] = '\0';
    return d;
}

/* Parses the text of FILE (len bytes) into m. */
static int parse(ckpt_map *m, const char *file, const char *text, size_t len, char *err,
                 size_t errlen) {
    int cap = 0, line = 0;
    for (size_t pos = 0; pos < len; line++) {
        size_t end = pos;
        while (end < len && text[end] != '\n') end++;
        const char *s = text + pos, *e = text + end;
        pos = end + 1;
        if (memchr(s, '\0', (size_t)(e - s))) {
            snprintf(err, errlen, "init.map %s:%d: a NUL byte (not a text file?)", file, line + 1);
            return -1;
        }
        const char *hash = memchr(s, '#', (size_t)(e - s));
        if (hash) e = hash;
        while (s < e && isspace((unsigned char)*s)) s++;
        while (e > s && isspace((unsigned char)e[-1])) e--;
        if (s == e) continue;
        const char *colon = memchr(s, ':', (size_t)(e - s));
        const char *a = s, *ae = colon ? colon : e, *b = colon ? colon + 1 : e, *be = e;
        while (ae > a && isspace((unsigned char)ae[-1])) ae--;
        while (b < be && isspace((unsigned char)*b)) b++;
        if (!colon || !name_ok(a, (size_t)(ae - a)) || !name_ok(b, (size_t)(be - b))) {
            snprintf(err, errlen,
                     "init.map %s:%d: \"%.*s\" is not \"their_name: our_name\" (two tensor "
                     "names without spaces or colons, up to %d characters, one colon between)",
                     file, line + 1, (int)(e - s > 120 ? 120 : e - s), s, BK_NAME_MAX * 4 - 1);
            return -1;
        }
        if ((size_t)(be - b) >= BK_NAME_MAX) {
            snprintf(err, errlen,
                     "init.map %s:%d: \"%.*s\" is longer than a bf tensor name (%d characters)",
                     file, line + 1, (int)(be - b > 120 ? 120 : be - b), b, BK_NAME_MAX - 1);
            return -1;
        }
        for (int i = 0; i < m->n; i++) {
            int same_from = strlen(m->from[i]) == (size_t)(ae - a) &&
                            memcmp(m->from[i], a, (size_t)(ae - a)) == 0;
            int same_to =
                strlen(m->to[i]) == (size_t)(be - b) && memcmp(m->to[i], b, (size_t)(be - b)) == 0;
            if (same_from || same_to) {
                snprintf(err, errlen, "init.map %s:%d: \"%.*s\" is mapped twice (%s: %s before)",
                         file, line + 1, same_from ? (int)(ae - a) : (int)(be - b),
                         same_from ? a : b, m->from[i], m->to[i]);
                return -1;
            }
        }
        if (m->n == cap) {
            cap = cap ? 2 * cap : 64;
            char **f = realloc(m->from, (size_t)cap * sizeof *f);
            if (f) m->from = f;
            char **t = f ? realloc(m->to, (size_t)cap * sizeof *t) : NULL;
            if (t) m->to = t;
            if (!f || !t) goto oom;
        }
        m->from[m->n] = dupn(a, (size_t)(ae - a));
        m->to[m->n] = dupn(b, (size_t)(be - b));
        m->n++;
        if (!m->from[m->n - 1] || !m->to[m->n - 1]) goto oom;
    }
    return 0;
oom:
    snprintf(err, errlen, "init.map %s: out of memory", file);
    return -1;
}

int ckpt_map_load(ckpt_map *m, const char *spec, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    if (!spec || !*spec) return 0;
    if (strcmp(spec, "timm") == 0) {
        m->timm = 1;
        return 0;
    }
    char why[256];
    FILE *f = input_path_open(spec, why, sizeof why);
    if (!f) {
        snprintf(err, errlen, "init.map %s: %s (a file of \"their_name: our_name\" lines, or timm)",
                 spec, why);
        return -1;
    }
    char *text = malloc(CKPT_MAP_MAX_BYTES + 1);
    size_t n = text ? fread(text, 1, CKPT_MAP_MAX_BYTES + 1, f) : 0;
    int rerr = ferror(f);
    fclose(f);
    int rc = -1;
    if (!text)
        snprintf(err, errlen, "init.map %s: out of memory", spec);
    else if (rerr)
        snprintf(err, errlen, "init.map %s: read error", spec);
    else if (n > CKPT_MAP_MAX_BYTES)
        snprintf(err, errlen, "init.map %s: larger than %u bytes (a name map is small)", spec,
                 CKPT_MAP_MAX_BYTES);
    else
        rc = parse(m, spec, text, n, err, errlen);
    free(text);
    if (rc) ckpt_map_free(m);
    return rc;
}

/* timm name -> bf name: a prefix swap; suffix is what follows it. */
static const struct {
    const char *timm, *bf;
} TIMM_BLOCK[] = {
    {"norm1.", "ln1."}, {"attn.qkv.", "attn.qkv."}, {"attn.proj.", "attn.out."},
    {"norm2.", "ln2."}, {"mlp.fc1.", "mlp.fc."},    {"mlp.fc2.", "mlp.proj."},
};

static int wb(const char *s) { return strcmp(s, "weight") == 0 || strcmp(s, "bias") == 0; }

static int timm_name(const char *name, char *out, size_t n) {
    int w = -2;
    if (strcmp(name, "cls_token") == 0)
        w = snprintf(out, n, "cls_token");
    else if (strcmp(name, "pos_embed") == 0)
        w = snprintf(out, n, "pos_emb.weight");
    else if (strncmp(name, "patch_embed.proj.", 17) == 0 && wb(name + 17))
        w = snprintf(out, n, "patch_emb.%s", name + 17);
    else if (strncmp(name, "norm.", 5) == 0 && wb(name + 5))
        w = snprintf(out, n, "ln_f.%s", name + 5);
    else if (strncmp(name, "head.", 5) == 0 && wb(name + 5))
        w = snprintf(out, n, "head.%s", name + 5);
    else if (strncmp(name, "blocks.", 7) == 0 && isdigit((unsigned char)name[7])) {
        char *e;
        long l = strtol(name + 7, &e, 10);
        if (*e == '.' && l >= 0 && l < 100000 && !(name[7] == '0' && e - (name + 7) > 1))
            for (size_t i = 0; i < sizeof TIMM_BLOCK / sizeof TIMM_BLOCK[0]; i++) {
                size_t pl = strlen(TIMM_BLOCK[i].timm);
                if (strncmp(e + 1, TIMM_BLOCK[i].timm, pl) == 0 && wb(e + 1 + pl)) {
                    w = snprintf(out, n, "blocks.%ld.%s%s", l, TIMM_BLOCK[i].bf, e + 1 + pl);
                    break;
                }
            }
    }
    if (w == -2) return 0;
    return w < 0 || (size_t)w >= n ? -1 : 1;
}

int ckpt_map_name(const ckpt_map *m, const char *name, char *out, size_t n) {
    int rc = 0;
    if (m && m->timm) rc = timm_name(name, out, n);
    for (int i = 0; m && rc == 0 && i < m->n; i++)
        if (strcmp(m->from[i], name) == 0) {
            size_t l = strlen(m->to[i]);
            if (l >= n) return -1;
            memcpy(out, m->to[i], l + 1);
            return 1;
        }
    if (rc) return rc;
    size_t l = strlen(name);
    if (l >= n) return -1;
    memcpy(out, name, l + 1);
    return 0;
}

static void shape_text(char *out, size_t n, int ndim, const uint64_t *d64, const int *d32) {
    size_t w = (size_t)snprintf(out, n, "[");
    for (int i = 0; i < ndim && w < n; i++)
        w += (size_t)snprintf(out + w, n - w, "%s%llu", i ? ", " : "",
                              d64 ? (unsigned long long)d64[i] : (unsigned long long)d32[i]);
    if (w < n) snprintf(out + w, n - w, "]");
}

int ckpt_map_reshape(const ckpt_map *m, const char *their, int ndim, const uint64_t *shape,
                     const bk_tensor *t, char *why, size_t whylen) {
    char a[128], b[128];
    shape_text(a, sizeof a, ndim, shape, NULL);
    shape_text(b, sizeof b, t->ndim, NULL, t->shape);
    char tmp[BK_NAME_MAX];
    if (!m || !m->timm || timm_name(their, tmp, sizeof tmp) != 1) {
        snprintf(why, whylen, "has shape %s in the file but %s in the model", a, b);
        return -1;
    }
    /* drop the file's leading 1s: cls_token [1, 1, D], pos_embed [1, T, D] */
    int s0 = 0;
    while (ndim - s0 > t->ndim && shape[s0] == 1) s0++;
    int same = ndim - s0 == t->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = shape[s0 + d] == (uint64_t)t->shape[d];
    if (same) return 0;
    if (strcmp(their, "patch_embed.proj.weight") == 0 && ndim == 4 && t->ndim == 2 &&
        shape[0] == (uint64_t)t->shape[0] && shape[2] * shape[3] == (uint64_t)t->shape[1] &&
        shape[1] == 1)
        return 0; /* conv [D, 1, p, p] = linear [D, p*p], row-major (i*p + j) */
    if (strcmp(their, "patch_embed.proj.weight") == 0 && ndim == 4 && t->ndim == 2 &&
        shape[0] == (uint64_t)t->shape[0] && shape[1] > 1 &&
        shape[1] * shape[2] * shape[3] == (uint64_t)shape[1] * t->shape[1]) {
        snprintf(why, whylen,
                 "has shape %s in the file but %s in the model: a patch embedding of %llu-channel "
                 "images, and bf's ViT reads one-channel images (p*p pixels a patch); bf does not "
                 "fold channels",
                 a, b, (unsigned long long)shape[1]);
        return -1;
    }
    if (strcmp(their, "pos_embed") == 0 && ndim == 3 && t->ndim == 2 && shape[0] == 1 &&
        shape[2] == (uint64_t)t->shape[1] && shape[1] + 1 == (uint64_t)t->shape[0]) {
        snprintf(why, whylen,
                 "has shape %s in the file but %s in the model: %llu positions, none for the "
                 "class token (timm's no_embed_class or class_token=False); bf's ViT adds a "
                 "position to the class token too",
                 a, b, (unsigned long long)shape[1]);
        return -1;
    }
    if (strcmp(their, "pos_embed") == 0 && ndim == 3 && t->ndim == 2 &&
        shape[2] == (uint64_t)t->shape[1]) {
        snprintf(why, whylen,
                 "has shape %s in the file but %s in the model: positions for another image size "
                 "or patch (bf does not interpolate position embeddings: the images and "
                 "model.patch must give the checkpoint's number of patches)",
                 a, b);
        return -1;
    }
    snprintf(why, whylen, "has shape %s in the file but %s in the model (no conversion from it)", a,
             b);
    return -1;
}
