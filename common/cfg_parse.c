/* cfg_parse.c — reads a config: a YAML file or text (cfg_load_file,
 * cfg_load_text) or a mapping node of a document read elsewhere
 * (cfg_load_node), walked key by key into a bf_config through the schema
 * table, each value checked against its field's type and range, every error
 * reported with FILE:LINE:COL. The walk is bounded (nodes visited, depth),
 * so aliases cannot blow it up. It never checks rules across keys
 * (cfg_validate.c) and never writes a config back (cfg_format.c). */
#include "common/cfg.h"
#include "common/cfg_priv.h"
#include "common/text.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

#define CFG_FILE_MAX (1u << 20)

/* ----------------------------------------------------------- the YAML walk */

typedef struct walk {
    yaml_document_t *doc;
    const char *file; /* NULL: use `where` as the whole position */
    const char *where;
    cfg_error_fn fn;
    void *ud;
    int nerr;
    long visits;
    int aborted;
    /* first place each schema key was set in this load, for duplicate errors */
    int set_line[128], set_col[128];
    unsigned char set_seen[128];
} walk;

/* msg without its leading "KEY: " when where ("--set KEY") already ends in
 * that key, so the message names it once ("--set train.lr: expected ..."). */
static const char *unnamed(const char *where, const char *msg) {
    if (!where) return msg;
    const char *sp = strrchr(where, ' ');
    const char *key = sp ? sp + 1 : where;
    size_t n = strlen(key);
    if (n && strncmp(msg, key, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ') return msg + n + 2;
    return msg;
}

static void walk_error(walk *w, const yaml_node_t *node, const char *fmt, ...) {
    char msg[CFG_MSG_MAX], line[CFG_MSG_MAX + CFG_PATH_MAX + 64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (w->file && node)
        snprintf(line, sizeof line, "%s:%zu:%zu: %s", w->file, node->start_mark.line + 1,
                 node->start_mark.column + 1, msg);
    else
        snprintf(line, sizeof line, "%s: %s", w->where ? w->where : "config",
                 unnamed(w->where, msg));
    w->nerr++;
    /* a value echoed from the file may hold ESC or a newline: never raw */
    char shown[sizeof line];
    if (w->fn) w->fn(w->ud, bf_escape(line, strlen(line), shown, sizeof shown));
}

/* Counts one node visit; refuses the walk past the caps. */
static int walk_visit(walk *w, const yaml_node_t *node, int depth) {
    if (w->aborted) return -1;
    if (++w->visits > CFG_MAX_NODES) {
        walk_error(w, node, CFG_TOO_MANY_NODES, CFG_MAX_NODES, CFG_MAX_NODES);
        w->aborted = 1;
        return -1;
    }
    if (depth > CFG_MAX_DEPTH) {
        walk_error(w, node, CFG_TOO_DEEP, CFG_MAX_DEPTH);
        w->aborted = 1;
        return -1;
    }
    return 0;
}

static const char *node_kind_name(const yaml_node_t *n) {
    switch (n->type) {
    case YAML_SCALAR_NODE:
        return "a scalar";
    case YAML_SEQUENCE_NODE:
        return "a list";
    case YAML_MAPPING_NODE:
        return "a mapping";
    default:
        return "nothing";
    }
}

static const char *scalar(const yaml_node_t *n) { return (const char *)n->data.scalar.value; }

static int scalar_is_plain(const yaml_node_t *n) {
    return n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

/* Describes a node for "got ..." in a type error. */
static void describe(const yaml_node_t *n, char *out, size_t len) {
    if (n->type == YAML_SCALAR_NODE) {
        if (n->data.scalar.length == 0)
            snprintf(out, len, "nothing");
        else
            snprintf(out, len, "'%.60s'", scalar(n));
    } else {
        snprintf(out, len, "%s", node_kind_name(n));
    }
}

/* Reports "KEY: expected WHAT, got ..." at n; returns -1. */
static int type_error(walk *w, const yaml_node_t *n, const cfg_field *f, const char *what) {
    char got[96];
    describe(n, got, sizeof got);
    walk_error(w, n, "%s: expected %s, got %s", f->key, what, got);
    return -1;
}

static int parse_ll(const yaml_node_t *n, long long *out) {
    if (!scalar_is_plain(n) || n->data.scalar.length == 0) return -1;
    const char *s = scalar(n);
    if (!(isdigit((unsigned char)s[0]) ||
          ((s[0] == '-' || s[0] == '+') && isdigit((unsigned char)s[1]))))
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

static int parse_u64(const yaml_node_t *n, uint64_t *out) {
    if (!scalar_is_plain(n) || n->data.scalar.length == 0) return -1;
    const char *s = scalar(n);
    if (!isdigit((unsigned char)s[0])) return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return -1;
    *out = (uint64_t)v;
    return 0;
}

static int parse_num(const yaml_node_t *n, double *out) {
    if (!scalar_is_plain(n) || n->data.scalar.length == 0) return -1;
    return cfg_parse_number(scalar(n), out, NULL, 0);
}

int cfg_parse_number(const char *s, double *out, char *why, size_t n) {
    char dummy[8];
    if (!why || !n) why = dummy, n = sizeof dummy;
    why[0] = '\0';
    const char *p = s + (s[0] == '-' || s[0] == '+');
    if (strcmp(p, ".nan") == 0 || strcmp(p, ".NaN") == 0 || strcmp(p, ".NAN") == 0 ||
        strcmp(p, "nan") == 0 || strcmp(p, "NaN") == 0) {
        snprintf(why, n, "'%.40s' is NaN (not a number); give a finite number", s);
        return -1;
    }
    if (strcmp(p, ".inf") == 0 || strcmp(p, ".Inf") == 0 || strcmp(p, ".INF") == 0 ||
        strcmp(p, "inf") == 0 || strcmp(p, "infinity") == 0) {
        snprintf(why, n, "'%.40s' is infinite; give a finite number", s);
        return -1;
    }
    if (!(isdigit((unsigned char)*p) || (*p == '.' && isdigit((unsigned char)p[1])))) {
        snprintf(why, n, "expected a number, got '%.60s'", s);
        return -1;
    }
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end) {
        snprintf(why, n, "expected a number, got '%.60s'", s);
        return -1;
    }
    if (!isfinite(v) || (errno == ERANGE && fabs(v) > 1.0)) {
        snprintf(why, n,
                 "'%.40s' overflows a double (magnitude above 1.8e308); give a finite "
                 "number",
                 s);
        return -1;
    }
    if (errno == ERANGE && v == 0.0) {
        /* strtod says 0 for a tiny nonzero: do not pass it on as 0 */
        for (const char *q = p; *q && *q != 'e' && *q != 'E'; q++)
            if (*q >= '1' && *q <= '9') {
                snprintf(why, n,
                         "'%.40s' underflows to 0 (magnitude below 2.2e-308, the smallest "
                         "double)",
                         s);
                return -1;
            }
    }
    *out = v;
    return 0;
}

/* The reason a scalar is not a number (NaN, overflow, underflow), or a
 * plain "expected a number, got X" for anything else, into out[n]. */
static void number_error(const yaml_node_t *n, const char *what, char *out, size_t len) {
    double v;
    char why[160], got[96];
    if (scalar_is_plain(n) && n->data.scalar.length &&
        cfg_parse_number(scalar(n), &v, why, sizeof why) < 0 && strncmp(why, "expected", 8) != 0) {
        snprintf(out, len, "%s", why);
        return;
    }
    describe(n, got, sizeof got);
    snprintf(out, len, "expected %s, got %s", what, got);
}

static int has_range(const cfg_field *f) { return !(f->min == 0.0 && f->max == 0.0); }

static int check_range(walk *w, const yaml_node_t *n, const cfg_field *f, double v) {
    if (has_range(f) && (v < f->min || v > f->max)) {
        char a[40], b[40];
        cfg_format_float(a, sizeof a, f->min);
        cfg_format_float(b, sizeof b, f->max);
        walk_error(w, n, "%s: %.9g is out of range; valid range is [%s, %s]", f->key, v, a, b);
        return -1;
    }
    return 0;
}

static int get_number(walk *w, const yaml_node_t *n, const cfg_field *f, const char *what,
                      double *v) {
    if (parse_num(n, v) < 0) {
        char msg[256], wh[64];
        snprintf(wh, sizeof wh, "a number for %s", what);
        number_error(n, wh, msg, sizeof msg);
        walk_error(w, n, "%s: %s", f->key, msg);
        return -1;
    }
    return check_range(w, n, f, *v);
}

static yaml_node_t *item(walk *w, yaml_node_item_t id) {
    return yaml_document_get_node(w->doc, id);
}

static void choices_list(const char *choices, char *out, size_t n) {
    size_t w = 0;
    for (const char *p = choices; *p && w + 3 < n; p++) {
        if (*p == '|') {
            out[w++] = ',';
            out[w++] = ' ';
        } else {
            out[w++] = *p;
        }
    }
    out[w] = '\0';
}

/* One setter per type (set_field picks it): each reads node n as field f's
 * value and stores it only when it is valid; else it reports at n and
 * returns -1. */
static int set_int(walk *w, const cfg_field *f, yaml_node_t *n, int *out) {
    long long v;
    if (parse_ll(n, &v) < 0) return type_error(w, n, f, "an integer");
    if (v < f->min || v > f->max) {
        walk_error(w, n, "%s: %lld is out of range; valid range is [%.0f, %.0f]", f->key, v, f->min,
                   f->max);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int set_u64(walk *w, const cfg_field *f, yaml_node_t *n, uint64_t *out) {
    uint64_t v;
    if (parse_u64(n, &v) < 0) return type_error(w, n, f, "a non-negative integer (0 .. 2^64-1)");
    *out = v;
    return 0;
}

static int set_float(walk *w, const cfg_field *f, yaml_node_t *n, float *out) {
    double v;
    if (parse_num(n, &v) < 0) {
        char msg[256];
        number_error(n, "a number", msg, sizeof msg);
        walk_error(w, n, "%s: %s", f->key, msg);
        return -1;
    }
    if (check_range(w, n, f, v) < 0) return -1;
    *out = (float)v;
    return 0;
}

static int set_bool(walk *w, const cfg_field *f, yaml_node_t *n, int *out) {
    if (scalar_is_plain(n) && strcmp(scalar(n), "true") == 0) {
        *out = 1;
        return 0;
    }
    if (scalar_is_plain(n) && strcmp(scalar(n), "false") == 0) {
        *out = 0;
        return 0;
    }
    return type_error(w, n, f, "true or false");
}

static int set_enum(walk *w, const cfg_field *f, yaml_node_t *n, char *out) {
    char got[96];
    char list[256];
    choices_list(f->choices, list, sizeof list);
    if (n->type != YAML_SCALAR_NODE || cfg_choice_index(f->choices, scalar(n)) < 0) {
        describe(n, got, sizeof got);
        walk_error(w, n, "%s: %s is not valid; expected one of: %s", f->key, got, list);
        return -1;
    }
    snprintf(out, f->size, "%s", scalar(n));
    return 0;
}

static int set_str(walk *w, const cfg_field *f, yaml_node_t *n, char *out) {
    if (n->type != YAML_SCALAR_NODE) {
        walk_error(w, n, "%s: expected a string, got %s", f->key, node_kind_name(n));
        return -1;
    }
    if (n->data.scalar.length >= f->size) {
        walk_error(w, n, "%s: too long (%zu bytes; at most %zu)", f->key, n->data.scalar.length,
                   f->size - 1);
        return -1;
    }
    if (strlen(scalar(n)) != n->data.scalar.length) {
        walk_error(w, n, "%s: contains a NUL character", f->key);
        return -1;
    }
    /* A plain `~` or `null` means "not set". */
    const char *s = scalar(n);
    if (scalar_is_plain(n) && (strcmp(s, "~") == 0 || strcmp(s, "null") == 0)) s = "";
    memcpy(out, s, strlen(s) + 1);
    return 0;
}

/* [a, b], each a number in the field's range. */
static int set_pair(walk *w, const cfg_field *f, yaml_node_t *n, int depth, float out[2]) {
    if (n->type != YAML_SEQUENCE_NODE ||
        n->data.sequence.items.top - n->data.sequence.items.start != 2) {
        return type_error(w, n, f, "a pair of numbers [a, b]");
    }
    double v[2];
    for (int i = 0; i < 2; i++) {
        yaml_node_t *e = item(w, n->data.sequence.items.start[i]);
        if (walk_visit(w, e, depth + 1) < 0) return -1;
        if (get_number(w, e, f, i ? "the second element" : "the first element", &v[i]) < 0)
            return -1;
    }
    out[0] = (float)v[0];
    out[1] = (float)v[1];
    return 0;
}

/* {schedule, start, end}; a key left out keeps its value. */
static int set_sched(walk *w, const cfg_field *f, yaml_node_t *n, int depth, cfg_schedule *out) {
    char got[96];
    if (n->type != YAML_MAPPING_NODE)
        return type_error(
            w, n, f,
            "a schedule {schedule: constant|linear|exp|cosine, start: NUMBER, end: NUMBER}");
    cfg_schedule s = *out;
    int seen[3] = {0, 0, 0}, bad = 0;
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = item(w, p->key), *v = item(w, p->value);
        if (walk_visit(w, k, depth + 1) < 0 || walk_visit(w, v, depth + 1) < 0) return -1;
        const char *ks = k->type == YAML_SCALAR_NODE ? scalar(k) : "";
        int which = strcmp(ks, "schedule") == 0 ? 0
                    : strcmp(ks, "start") == 0  ? 1
                    : strcmp(ks, "end") == 0    ? 2
                                                : -1;
        if (which < 0) {
            walk_error(w, k, "%s: unknown schedule field '%s'; expected schedule, start, end",
                       f->key, ks);
            bad = 1;
            continue;
        }
        if (seen[which]) {
            walk_error(w, k, "%s: duplicate key '%s'", f->key, ks);
            bad = 1;
            continue;
        }
        seen[which] = 1;
        if (which == 0) {
            int idx = v->type == YAML_SCALAR_NODE
                          ? cfg_choice_index("constant|linear|exp|cosine", scalar(v))
                          : -1;
            if (idx < 0) {
                describe(v, got, sizeof got);
                walk_error(w, v,
                           "%s.schedule: %s is not valid; expected one of: constant, "
                           "linear, exp, cosine",
                           f->key, got);
                bad = 1;
            } else {
                s.kind = (cfg_sched_kind)idx;
            }
        } else {
            double d;
            if (get_number(w, v, f, which == 1 ? "start" : "end", &d) < 0)
                bad = 1;
            else if (which == 1)
                s.start = (float)d;
            else
                s.end = (float)d;
        }
    }
    if (bad) return -1;
    *out = s;
    return 0;
}

/* distill.replace_layers: auto:K, or a list of distinct layer indices, kept
 * sorted so that equal sets dump and hash alike. */
static int set_layers(walk *w, const cfg_field *f, yaml_node_t *n, int depth, bf_config *c) {
    if (n->type == YAML_SCALAR_NODE) {
        const char *s = scalar(n);
        if (strncmp(s, "auto:", 5) == 0) {
            char *end;
            errno = 0;
            long k = strtol(s + 5, &end, 10);
            if (!errno && *end == '\0' && isdigit((unsigned char)s[5]) && k >= 1 &&
                k <= CFG_MAX_LAYERS) {
                c->distill.replace_auto = (int)k;
                c->distill.n_replace = 0;
                return 0;
            }
            walk_error(w, n, "%s: '%s': K in auto:K must be an integer in [1, %d]", f->key, s,
                       CFG_MAX_LAYERS);
            return -1;
        }
    }
    if (n->type != YAML_SEQUENCE_NODE)
        return type_error(w, n, f, "a list of layer indices like [9, 10, 11] or auto:K");
    int cnt = (int)(n->data.sequence.items.top - n->data.sequence.items.start);
    if (cnt < 1 || cnt > CFG_MAX_LAYERS) {
        walk_error(w, n, "%s: expected 1 to %d layer indices, got %d", f->key, CFG_MAX_LAYERS, cnt);
        return -1;
    }
    int layers[CFG_MAX_LAYERS];
    for (int i = 0; i < cnt; i++) {
        yaml_node_t *e = item(w, n->data.sequence.items.start[i]);
        if (walk_visit(w, e, depth + 1) < 0) return -1;
        long long v;
        if (parse_ll(e, &v) < 0) return type_error(w, e, f, "a layer index (integer)");
        if (v < f->min || v > f->max) {
            walk_error(w, e, "%s: layer %lld is out of range; valid range is [%.0f, %.0f]", f->key,
                       v, f->min, f->max);
            return -1;
        }
        /* keep sorted (insertion) so equal sets dump and hash alike */
        int j = i;
        while (j > 0 && layers[j - 1] > v) {
            layers[j] = layers[j - 1];
            j--;
        }
        if (j > 0 && layers[j - 1] == v) {
            walk_error(w, e, "%s: layer %lld is listed twice", f->key, v);
            return -1;
        }
        layers[j] = (int)v;
    }
    memcpy(c->distill.replace_layers, layers, (size_t)cnt * sizeof(int));
    c->distill.n_replace = cnt;
    c->distill.replace_auto = 0;
    return 0;
}

/* Parses node as the value of field f and stores it into c (only on success). */
static int set_field(walk *w, bf_config *c, const cfg_field *f, yaml_node_t *n, int depth) {
    char *base = (char *)c + f->offset;
    if (walk_visit(w, n, depth) < 0) return -1;
    switch (f->type) {
    case CFG_T_INT:
        return set_int(w, f, n, (int *)base);
    case CFG_T_U64:
        return set_u64(w, f, n, (uint64_t *)base);
    case CFG_T_FLOAT:
        return set_float(w, f, n, (float *)base);
    case CFG_T_BOOL:
        return set_bool(w, f, n, (int *)base);
    case CFG_T_ENUM:
        return set_enum(w, f, n, base);
    case CFG_T_STR:
        return set_str(w, f, n, base);
    case CFG_T_PAIR:
        return set_pair(w, f, n, depth, (float *)base);
    case CFG_T_SCHED:
        return set_sched(w, f, n, depth, (cfg_schedule *)base);
    case CFG_T_LAYERS:
        return set_layers(w, f, n, depth, c);
    }
    return -1;
}

static int load_mapping(walk *w, bf_config *c, yaml_node_t *map, const char *prefix, int depth);

/* Applies value node v to dotted key `key` (from key node k, for positions). */
static void apply_key(walk *w, bf_config *c, const char *key, yaml_node_t *k, yaml_node_t *v,
                      int depth) {
    const cfg_field *f = cfg_field_find(key);
    if (f) {
        size_t idx = (size_t)(f - cfg_field_at(0));
        if (idx < 128 && w->set_seen[idx]) {
            walk_error(w, k, "duplicate key '%s' (first set at line %d, column %d)", key,
                       w->set_line[idx], w->set_col[idx]);
            return;
        }
        if (idx < 128) {
            w->set_seen[idx] = 1;
            w->set_line[idx] = k ? (int)k->start_mark.line + 1 : 0;
            w->set_col[idx] = k ? (int)k->start_mark.column + 1 : 0;
        }
        cfg_level_prepare(c, f, (cfg_level)c->level);
        if (set_field(w, c, f, v, depth) == 0) cfg_level_mark(c, f, (cfg_level)c->level);
        return;
    }
    if (v->type == YAML_MAPPING_NODE && cfg_is_section(key)) {
        load_mapping(w, c, v, key, depth);
        return;
    }
    char msg[CFG_MSG_MAX];
    cfg_unknown_key_msg(msg, sizeof msg, key, v->type == YAML_MAPPING_NODE);
    walk_error(w, k ? k : v, "%s", msg);
}

static int load_mapping(walk *w, bf_config *c, yaml_node_t *map, const char *prefix, int depth) {
    if (walk_visit(w, map, depth) < 0) return -1;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        if (w->aborted) return -1;
        yaml_node_t *k = item(w, p->key), *v = item(w, p->value);
        if (!k || !v) continue;
        if (walk_visit(w, k, depth + 1) < 0) return -1;
        if (k->type != YAML_SCALAR_NODE || k->data.scalar.length == 0) {
            walk_error(w, k, "expected a key name, got %s", node_kind_name(k));
            continue;
        }
        /* the same key twice in this mapping */
        int dup = 0;
        for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++) {
            yaml_node_t *k2 = item(w, q->key);
            if (k2 && k2->type == YAML_SCALAR_NODE && strcmp(scalar(k2), scalar(k)) == 0) {
                walk_error(w, k, "duplicate key '%s' (first at line %zu, column %zu)", scalar(k),
                           k2->start_mark.line + 1, k2->start_mark.column + 1);
                dup = 1;
                break;
            }
        }
        if (dup) continue;
        char key[CFG_KEY_MAX];
        int kl = snprintf(key, sizeof key, "%s%s%s", prefix, *prefix ? "." : "", scalar(k));
        if (kl < 0 || (size_t)kl >= sizeof key) {
            walk_error(w, k, "key too long");
            continue;
        }
        apply_key(w, c, key, k, v, depth + 1);
    }
    return 0;
}

int cfg_load_node(bf_config *c, struct yaml_document_s *doc, struct yaml_node_s *map,
                  const char *file, cfg_error_fn fn, void *ud) {
    walk w;
    memset(&w, 0, sizeof w);
    w.doc = doc;
    w.file = file ? file : "config";
    w.fn = fn;
    w.ud = ud;
    if (!map || map->type != YAML_MAPPING_NODE) {
        walk_error(&w, map, "expected a mapping of config keys, got %s",
                   map ? node_kind_name(map) : "nothing");
        return w.nerr;
    }
    load_mapping(&w, c, map, "", 0);
    return w.nerr;
}

/* Error sink that keeps the first message and counts the rest. */
typedef struct first_err {
    char *buf;
    size_t len;
    int count;
    int kept; /* messages in buf (keep_all) */
} first_err;

static void keep_first(void *ud, const char *msg) {
    first_err *fe = ud;
    if (fe->count++ == 0 && fe->len) snprintf(fe->buf, fe->len, "%s", msg);
}

int cfg_load_key(bf_config *c, const char *key, yaml_document_t *doc, yaml_node_t *key_node,
                 yaml_node_t *value, const char *file, const char *where, char *err,
                 size_t errlen) {
    walk w;
    memset(&w, 0, sizeof w);
    first_err fe = {err, errlen, 0, 0};
    w.doc = doc;
    w.file = file;
    w.where = where;
    w.fn = keep_first;
    w.ud = &fe;
    apply_key(&w, c, key, key_node, value, 0);
    return w.nerr ? -1 : 0;
}

/* Error sink that keeps every message, one per line, as long as they fit
 * (leaving room to say how many did not). */
static void keep_all(void *ud, const char *msg) {
    first_err *fe = ud;
    fe->count++;
    if (!fe->len) return;
    size_t l = fe->kept ? strlen(fe->buf) : 0, ml = strlen(msg);
    if (fe->kept && l + 1 + ml + 40 >= fe->len) return;
    snprintf(fe->buf + l, fe->len - l, "%s%s", fe->kept ? "\n" : "", msg);
    fe->kept++;
}

int cfg_load_text(bf_config *c, const char *text, size_t n, const char *name, char *err,
                  size_t errlen) {
    char dummy[8];
    if (!err || !errlen) err = dummy, errlen = sizeof dummy;
    if (n > CFG_FILE_MAX) {
        snprintf(err, errlen, "%s:1:1: config text is over 1 MiB; configs are limited to 1 MiB",
                 name);
        return -1;
    }
    if (memchr(text, '\0', n)) {
        size_t off = (size_t)((const char *)memchr(text, '\0', n) - text);
        snprintf(err, errlen, "%s:1:1: not a text file (NUL byte at offset %zu)", name, off);
        return -1;
    }
    int rc = -1;
    yaml_document_t doc;
    if (cfg_yaml_parse(&doc, text, n, name, 1, err, errlen) != 0) return -1;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root || (root->type == YAML_SCALAR_NODE && root->data.scalar.length == 0 &&
                  scalar_is_plain(root))) {
        snprintf(err, errlen, "%s:1:1: empty config: expected a mapping of keys", name);
    } else if (cfg_yaml_check_expansion(&doc, name, err, errlen) == 0) {
        bf_config tmp = *c;
        first_err fe = {err, errlen, 0, 0};
        if (cfg_load_node(&tmp, &doc, root, name, keep_all, &fe) == 0) {
            *c = tmp;
            rc = 0;
        } else if (fe.count > fe.kept) {
            size_t l = strlen(err);
            snprintf(err + l, errlen > l ? errlen - l : 0, "\n(and %d more errors)",
                     fe.count - fe.kept);
        }
    }
    yaml_document_delete(&doc);
    return rc;
}

int cfg_load_file(bf_config *c, const char *path, char *err, size_t errlen) {
    char dummy[8];
    if (!err || !errlen) err = dummy, errlen = sizeof dummy;
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "%s:1:1: cannot open: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s:1:1: not a regular file", path);
        return -1;
    }
    if (st.st_size > (off_t)CFG_FILE_MAX) {
        snprintf(err, errlen, "%s:1:1: file is %lld bytes; config files are limited to 1 MiB", path,
                 (long long)st.st_size);
        return -1;
    }
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        snprintf(err, errlen, "%s:1:1: cannot open: %s", path, strerror(errno));
        return -1;
    }
    char *buf = malloc(CFG_FILE_MAX + 1);
    if (!buf) {
        fclose(fp);
        snprintf(err, errlen, "%s:1:1: out of memory", path);
        return -1;
    }
    size_t n = fread(buf, 1, CFG_FILE_MAX + 1, fp);
    int rerr = ferror(fp);
    fclose(fp);
    int rc = -1;
    if (rerr) {
        snprintf(err, errlen, "%s:1:1: read error", path);
    } else if (n > CFG_FILE_MAX) {
        snprintf(err, errlen, "%s:1:1: file is over 1 MiB; config files are limited to 1 MiB",
                 path);
    } else {
        rc = cfg_load_text(c, buf, n, path, err, errlen);
    }
    free(buf);
    return rc;
}
