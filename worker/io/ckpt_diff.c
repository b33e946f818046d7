/* ckpt_diff.c — whether a resumed run's config is the checkpoint's: a
 * line-by-line comparison of the two config texts ("key: value" lines, as
 * cfg_dump writes them) that names the first key that differs. Keys the
 * schema marks CFG_F_RESUME_FREE (common/cfg_schema.c) may differ. */
#include "worker/io/ckpt.h"

#include <stdio.h>
#include <string.h>

#include "common/cfg.h"

/* Keys the schema marks as free to differ on resume (CFG_F_RESUME_FREE). */
static int key_ignored(const char *k, size_t n) {
    const cfg_field *f = cfg_field_findn(k, n);
    return f && (f->flags & CFG_F_RESUME_FREE);
}

/* Finds "key: value" for key in text; returns the value's start and length, or NULL. */
static const char *find_key(const char *text, const char *key, size_t klen, size_t *vlen) {
    for (const char *l = text; l && *l;) {
        const char *e = strchr(l, '\n');
        size_t n = e ? (size_t)(e - l) : strlen(l);
        if (n > klen + 1 && memcmp(l, key, klen) == 0 && l[klen] == ':') {
            const char *v = l + klen + 1;
            while (v < l + n && *v == ' ') v++;
            *vlen = (size_t)(l + n - v);
            return v;
        }
        l = e ? e + 1 : NULL;
    }
    return NULL;
}

/* Checks every key of a (that counts) against b; which names a's role in the message. */
static int cfg_lines_match(const char *a, const char *b, int a_is_ckpt, ckpt_key_filter counts,
                           void *ctx, char *err, size_t errlen) {
    for (const char *l = a; l && *l;) {
        const char *e = strchr(l, '\n');
        size_t n = e ? (size_t)(e - l) : strlen(l);
        const char *colon = memchr(l, ':', n);
        if (colon && !key_ignored(l, (size_t)(colon - l)) &&
            (!counts || counts(ctx, l, (size_t)(colon - l)))) {
            size_t klen = (size_t)(colon - l), alen, blen = 0;
            const char *av = colon + 1;
            while (av < l + n && *av == ' ') av++;
            alen = (size_t)(l + n - av);
            const char *bv = find_key(b, l, klen, &blen);
            if (!bv || blen != alen || memcmp(av, bv, alen) != 0) {
                const char *cv = a_is_ckpt ? av : bv, *nv = a_is_ckpt ? bv : av;
                size_t cl = a_is_ckpt ? alen : blen, nl = a_is_ckpt ? blen : alen;
                snprintf(err, errlen,
                         "the checkpoint was written with a different config: %.*s is %.*s in the "
                         "checkpoint but %.*s now (resume with the checkpoint's config, or train "
                         "into a fresh --out)",
                         (int)klen, l, cv ? (int)cl : 9, cv ? cv : "(missing)", nv ? (int)nl : 9,
                         nv ? nv : "(missing)");
                return -1;
            }
        }
        l = e ? e + 1 : NULL;
    }
    return 0;
}

int ckpt_config_check_keys(const char *ckpt_cfg, const char *cur_cfg, ckpt_key_filter counts,
                           void *ctx, char *err, size_t errlen) {
    if (cfg_lines_match(ckpt_cfg, cur_cfg, 1, counts, ctx, err, errlen)) return -1;
    return cfg_lines_match(cur_cfg, ckpt_cfg, 0, counts, ctx, err, errlen);
}

int ckpt_config_check(const char *ckpt_cfg, const char *cur_cfg, char *err, size_t errlen) {
    return ckpt_config_check_keys(ckpt_cfg, cur_cfg, NULL, NULL, err, errlen);
}
