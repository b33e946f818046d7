/* cfg_format.c — writes a config back as canonical text: one key's value as
 * YAML flow text, the whole config as sorted "key: value" lines (cfg_dump),
 * and the stable hash of that dump that names a run's config. The text reads
 * back to the same config through cfg_parse.c. It never reads YAML and
 * never validates; it only reads the schema table and the bf_config. */
#include "common/cfg.h"
#include "common/cfg_priv.h"
#include "common/hash.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t cfg_format_float(char *buf, size_t n, double v) {
    char tmp[40];
    float f = (float)v;
    int k = 0;
    for (int prec = 6; prec <= 9; prec++) {
        k = snprintf(tmp, sizeof tmp, "%.*g", prec, (double)f);
        if (strtof(tmp, NULL) == f) break;
    }
    if (n) snprintf(buf, n, "%s", tmp);
    return k < 0 ? 0 : (size_t)k;
}

static size_t fmt_quoted(char *buf, size_t n, const char *s) {
    size_t w = 0;
#define PUT(ch)                                                                                    \
    do {                                                                                           \
        if (w + 1 < n) buf[w] = (ch);                                                              \
        w++;                                                                                       \
    } while (0)
    PUT('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            PUT('\\');
            PUT((char)*p);
        } else if (*p < 0x20 || *p == 0x7f) {
            char esc[8];
            snprintf(esc, sizeof esc, "\\x%02x", *p);
            for (char *e = esc; *e; e++) PUT(*e);
        } else {
            PUT((char)*p);
        }
    }
    PUT('"');
#undef PUT
    if (n) buf[w < n ? w : n - 1] = '\0';
    return w;
}

static size_t format_field(const bf_config *c, const cfg_field *f, char *buf, size_t n) {
    const char *base = (const char *)c + f->offset;
    int k = 0;
    char a[40], b[40];
    switch (f->type) {
    case CFG_T_INT:
        k = snprintf(buf, n, "%d", *(const int *)base);
        break;
    case CFG_T_U64:
        k = snprintf(buf, n, "%" PRIu64, *(const uint64_t *)base);
        break;
    case CFG_T_FLOAT:
        return cfg_format_float(buf, n, *(const float *)base);
    case CFG_T_BOOL:
        k = snprintf(buf, n, "%s", *(const int *)base ? "true" : "false");
        break;
    case CFG_T_ENUM:
        k = snprintf(buf, n, "%s", base);
        break;
    case CFG_T_STR:
        return fmt_quoted(buf, n, base);
    case CFG_T_PAIR: {
        const float *p = (const float *)base;
        cfg_format_float(a, sizeof a, p[0]);
        cfg_format_float(b, sizeof b, p[1]);
        k = snprintf(buf, n, "[%s, %s]", a, b);
        break;
    }
    case CFG_T_SCHED: {
        const cfg_schedule *s = (const cfg_schedule *)base;
        cfg_format_float(a, sizeof a, s->start);
        cfg_format_float(b, sizeof b, s->end);
        k = snprintf(buf, n, "{schedule: %s, start: %s, end: %s}", cfg_sched_name(s->kind), a, b);
        break;
    }
    case CFG_T_LAYERS: {
        if (c->distill.replace_auto > 0) {
            k = snprintf(buf, n, "auto:%d", c->distill.replace_auto);
            break;
        }
        char list[CFG_MAX_LAYERS * 5 + 4];
        size_t w = 0;
        list[w++] = '[';
        for (int i = 0; i < c->distill.n_replace && i < CFG_MAX_LAYERS; i++) {
            int m = snprintf(list + w, sizeof list - w, "%s%d", i ? ", " : "",
                             c->distill.replace_layers[i]);
            if (m > 0 && (size_t)m < sizeof list - w) w += (size_t)m;
        }
        list[w++] = ']';
        list[w] = '\0';
        k = snprintf(buf, n, "%s", list);
        break;
    }
    }
    return k < 0 ? 0 : (size_t)k;
}

size_t cfg_format_value(const bf_config *c, const char *key, char *buf, size_t buflen) {
    const cfg_field *f = cfg_field_find(key);
    if (!f) {
        if (buflen) buf[0] = '\0';
        return 0;
    }
    return format_field(c, f, buf, buflen);
}

static int cmp_field_key(const void *a, const void *b) {
    return strcmp((*(const cfg_field *const *)a)->key, (*(const cfg_field *const *)b)->key);
}

size_t cfg_dump(const bf_config *c, char *buf, size_t buflen) {
    size_t nf = cfg_field_count();
    const cfg_field *order[128];
    if (nf > 128) nf = 128;
    for (size_t i = 0; i < nf; i++) order[i] = cfg_field_at(i);
    qsort(order, nf, sizeof order[0], cmp_field_key);
    size_t w = 0;
    if (buflen) buf[0] = '\0';
    for (size_t i = 0; i < nf; i++) {
        char val[1024];
        format_field(c, order[i], val, sizeof val);
        char line[1400];
        int k = snprintf(line, sizeof line, "%s: %s\n", order[i]->key, val);
        if (k < 0) continue;
        if (w + 1 < buflen) { /* copy what fits, always NUL-terminated */
            size_t room = buflen - w - 1, m = (size_t)k < room ? (size_t)k : room;
            memcpy(buf + w, line, m);
            buf[w + m] = '\0';
        }
        w += (size_t)k;
    }
    return w;
}

void cfg_hash_text(const char *dump, size_t n, char out[17]) {
    uint64_t h = fnv1a64(FNV1A64_BASIS, dump, n);
    snprintf(out, 17, "%016" PRIx64, h);
}

void cfg_hash(const bf_config *c, char out[17]) {
    /* one dump when it fits the stack buffer (a dump is most of the cost) */
    char stackbuf[8192];
    size_t need = cfg_dump(c, stackbuf, sizeof stackbuf);
    char *buf = need < sizeof stackbuf ? stackbuf : malloc(need + 1);
    if (buf && buf != stackbuf) cfg_dump(c, buf, need + 1);
    cfg_hash_text(buf ? buf : "", buf ? need : 0, out);
    if (buf && buf != stackbuf) free(buf);
}
