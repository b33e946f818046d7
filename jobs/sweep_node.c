/* sweep_node.c — the error list of a load, and reading YAML nodes into
 * values with messages that say where the node is and what would be valid
 * (sweep_priv.h). It knows no sweep key: what a key means is for the file
 * that reads it. It never stops at the first error; a bad node adds one
 * message and the load goes on. */
#include "jobs/sweep_priv.h"
#include "common/text.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sweep_errors_free(sweep_errors *e) {
    if (!e) return;
    for (int i = 0; i < e->n; i++) free(e->msgs[i]);
    free(e->msgs);
    e->msgs = NULL;
    e->n = e->total = 0;
}

void sweep_errs_add(sweep_errors *e, const char *msg) {
    e->total++;
    if (e->n >= SWEEP_MAX_ERRORS) return;
    char **m = realloc(e->msgs, (size_t)(e->n + 1) * sizeof *m);
    if (!m) return;
    e->msgs = m;
    m[e->n] = strdup(msg);
    if (m[e->n]) e->n++;
}

void sweep_err_at(sweep_ctx *x, const yaml_node_t *n, const char *fmt, ...) {
    char msg[SWEEP_MSG_MAX], line[SWEEP_MSG_MAX + CFG_PATH_MAX + 40];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(line, sizeof line, "%s:%zu:%zu: %s", x->file, n ? n->start_mark.line + 1 : 1,
             n ? n->start_mark.column + 1 : 1, msg);
    /* a value echoed from the file may hold ESC or a newline: never raw */
    char shown[sizeof line];
    sweep_errs_add(x->errs, bf_escape(line, strlen(line), shown, sizeof shown));
}

const char *sweep_kind_name(const yaml_node_t *n) {
    switch (n->type) {
    case YAML_SCALAR_NODE:
        return n->data.scalar.length ? "a scalar" : "nothing";
    case YAML_SEQUENCE_NODE:
        return "a list";
    case YAML_MAPPING_NODE:
        return "a mapping";
    default:
        return "nothing";
    }
}

const char *sweep_near_name(const char *key, const char *const *names) {
    const char *best = NULL;
    size_t bd = 1000, len = strlen(key);
    for (; *names; names++) {
        size_t d = cfg_edit_distance_within(key, *names, bd - 1);
        if (d < bd) bd = d, best = *names;
    }
    return (bd <= 2 || bd * 3 <= len) ? best : NULL;
}

void sweep_unknown_in(sweep_ctx *x, const yaml_node_t *k, const char *where, const char *key,
                      const char *const *valid) {
    const char *near = sweep_near_name(key, valid);
    char list[512] = "";
    for (const char *const *v = valid; *v; v++) {
        size_t l = strlen(list);
        snprintf(list + l, sizeof list - l, "%s%s", v == valid ? "" : ", ", *v);
    }
    if (near)
        sweep_err_at(x, k, "unknown key '%s' in %s; did you mean '%s'?", key, where, near);
    else
        sweep_err_at(x, k, "unknown key '%s' in %s; valid keys: %s", key, where, list);
}

int sweep_check_keys(sweep_ctx *x, yaml_node_t *map) {
    int bad = 0;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = node(x, p->key);
        if (!k || k->type != YAML_SCALAR_NODE || k->data.scalar.length == 0) {
            sweep_err_at(x, k, "expected a key name, got %s", k ? sweep_kind_name(k) : "nothing");
            bad = 1;
            continue;
        }
        for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++) {
            yaml_node_t *k2 = node(x, q->key);
            if (k2 && k2->type == YAML_SCALAR_NODE && strcmp(sval(k2), sval(k)) == 0) {
                sweep_err_at(x, k, "duplicate key '%s' (first at line %zu, column %zu)", sval(k),
                             k2->start_mark.line + 1, k2->start_mark.column + 1);
                bad = 1;
                break;
            }
        }
    }
    return bad ? -1 : 0;
}

int sweep_key_is_dup(sweep_ctx *x, yaml_node_t *map, yaml_node_pair_t *p) {
    yaml_node_t *k = node(x, p->key);
    if (!k || k->type != YAML_SCALAR_NODE || k->data.scalar.length == 0) return 1;
    for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++) {
        yaml_node_t *k2 = node(x, q->key);
        if (k2 && k2->type == YAML_SCALAR_NODE && strcmp(sval(k2), sval(k)) == 0) return 1;
    }
    return 0;
}

/* The value node at dotted `path` in a config mapping (nested sections or
 * dotted keys), or NULL. Looks at most two levels deep (sections are flat). */
yaml_node_t *sweep_find_path(sweep_ctx *x, yaml_node_t *map, const char *path,
                             yaml_node_t **key_out) {
    if (!map || map->type != YAML_MAPPING_NODE) return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = node(x, p->key), *v = node(x, p->value);
        if (!k || !v || k->type != YAML_SCALAR_NODE) continue;
        size_t kl = k->data.scalar.length;
        if (strcmp(sval(k), path) == 0) {
            if (key_out) *key_out = k;
            return v;
        }
        if (strncmp(path, sval(k), kl) == 0 && path[kl] == '.' && v->type == YAML_MAPPING_NODE &&
            !strchr(path + kl + 1, '.')) {
            yaml_node_t *r = sweep_find_path(x, v, path + kl + 1, key_out);
            if (r) return r;
        }
    }
    return NULL;
}

int sweep_get_int(sweep_ctx *x, yaml_node_t *n, const char *what, long long lo, long long hi,
                  long long *out) {
    char *end;
    if (is_plain(n) && n->data.scalar.length &&
        (isdigit((unsigned char)sval(n)[0]) || sval(n)[0] == '-')) {
        errno = 0;
        long long v = strtoll(sval(n), &end, 10);
        if (!errno && *end == '\0') {
            if (v < lo || v > hi) {
                sweep_err_at(x, n, "%s: %lld is out of range; valid range is [%lld, %lld]", what, v,
                             lo, hi);
                return -1;
            }
            *out = v;
            return 0;
        }
    }
    sweep_err_at(x, n, "%s: expected an integer, got %s%s%.60s%s", what,
                 n->type == YAML_SCALAR_NODE && n->data.scalar.length ? "" : sweep_kind_name(n),
                 n->type == YAML_SCALAR_NODE && n->data.scalar.length ? "'" : "",
                 n->type == YAML_SCALAR_NODE ? sval(n) : "",
                 n->type == YAML_SCALAR_NODE && n->data.scalar.length ? "'" : "");
    return -1;
}

int sweep_get_number(sweep_ctx *x, yaml_node_t *n, const char *what, double *out) {
    char why[200];
    if (is_plain(n) && n->data.scalar.length) {
        if (cfg_parse_number(sval(n), out, why, sizeof why) == 0) return 0;
        sweep_err_at(x, n, "%s: %s", what, why);
        return -1;
    }
    if (n->type == YAML_SCALAR_NODE)
        sweep_err_at(x, n, "%s: expected a number, got '%.60s'", what, sval(n));
    else
        sweep_err_at(x, n, "%s: expected a number, got %s", what, sweep_kind_name(n));
    return -1;
}

int sweep_get_name(sweep_ctx *x, yaml_node_t *n, const char *what, char *out, size_t outlen,
                   const char *allowed_extra) {
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.length == 0) {
        sweep_err_at(x, n, "%s: expected a name, got %s", what, sweep_kind_name(n));
        return -1;
    }
    if (n->data.scalar.length >= outlen) {
        sweep_err_at(x, n, "%s: too long (at most %zu characters)", what, outlen - 1);
        return -1;
    }
    /* by the scalar's length: a NUL ("\0" in a quoted scalar) is a bad
     * character, not the end of the name */
    const unsigned char *u = (const unsigned char *)sval(n);
    for (size_t i = 0; i < n->data.scalar.length; i++)
        if (!u[i] || (!isalnum(u[i]) && !strchr(allowed_extra, u[i]))) {
            char shown[SWEEP_MSG_MAX / 2], ch[64];
            unsigned cp;
            int len = bf_utf8_at(u + i, n->data.scalar.length - i, &cp);
            if (len > 1)
                snprintf(ch, sizeof ch, "the character '%.*s' (U+%04X)", len, (const char *)u + i,
                         cp);
            else
                snprintf(ch, sizeof ch, "the byte %s",
                         bf_escape((const char *)u + i, 1, shown, sizeof shown));
            sweep_err_at(x, n, "%s: '%s' has %s; use ASCII letters, digits and %s", what,
                         bf_escape(sval(n), n->data.scalar.length, shown, sizeof shown), ch,
                         allowed_extra);
            return -1;
        }
    snprintf(out, outlen, "%s", sval(n));
    return 0;
}

int sweep_get_choice(sweep_ctx *x, yaml_node_t *n, const char *what, const char *const *choices) {
    if (n->type == YAML_SCALAR_NODE)
        for (int i = 0; choices[i]; i++)
            if (strcmp(sval(n), choices[i]) == 0) return i;
    char list[256] = "";
    for (int i = 0; choices[i]; i++) {
        size_t l = strlen(list);
        snprintf(list + l, sizeof list - l, "%s%s", i ? ", " : "", choices[i]);
    }
    sweep_err_at(x, n, "%s: '%.60s' is not valid; expected one of: %s", what,
                 n->type == YAML_SCALAR_NODE ? sval(n) : sweep_kind_name(n), list);
    return -1;
}
