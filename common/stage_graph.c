/* stage_graph.c — the keys of a pipeline's stages (stage_graph.h for the
 * rule). It knows no pipeline: the declarations are pipeline_decl.c. It
 * reads the config only through the key table and cfg_format_value. */
#include "common/stage_graph.h"

#include "common/hash.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int rule_matches(const char *match, const char *key) {
    size_t n = strlen(match);
    if (n && match[n - 1] == '.') return strncmp(key, match, n) == 0;
    return strcmp(key, match) == 0;
}

/* 1 when c's value of the key in cond ("KEY=VALUE") is VALUE; 0 for a NULL
 * c or a malformed cond. */
static int cond_holds(const bf_config *c, const char *cond) {
    const char *eq = strchr(cond, '=');
    char key[128], val[4 * CFG_MIXERS_MAX + 8];
    if (!c || !eq || (size_t)(eq - cond) >= sizeof key) return 0;
    memcpy(key, cond, (size_t)(eq - cond));
    key[eq - cond] = '\0';
    cfg_format_value(c, key, val, sizeof val);
    return strcmp(val, eq + 1) == 0;
}

int stage_graph_runs(const stage_graph *g, const bf_config *c, int i) {
    return !(i >= 0 && i < STAGE_MAX && g->skip[i] && cond_holds(c, g->skip[i]));
}

int stage_graph_depends(const stage_graph *g, const bf_config *c, int i, const char *key) {
    int in = 0;
    for (size_t r = 0; r < g->n_rules; r++) {
        if (g->rules[r].stage != i || !rule_matches(g->rules[r].match, key)) continue;
        if (g->rules[r].when && !cond_holds(c, g->rules[r].when)) continue;
        if (g->rules[r].exclude) return 0;
        in = 1;
    }
    return in;
}

int stage_graph_index(const stage_graph *g, const char *name) {
    if (!g || !name) return -1;
    for (int i = 0; i < g->n; i++)
        if (strcmp(name, g->names[i]) == 0) return i;
    return -1;
}

const char *stage_graph_name(const stage_graph *g, int i) {
    return g && i >= 0 && i < g->n ? g->names[i] : NULL;
}

const char *stage_graph_list(const stage_graph *g, char *buf, size_t len) {
    size_t at = 0;
    if (len) buf[0] = '\0';
    for (int i = 0; g && i < g->n && at < len; i++) {
        int w = snprintf(buf + at, len - at, "%s%s", i ? ", " : "", g->names[i]);
        if (w < 0) break;
        at += (size_t)w;
    }
    return buf;
}

typedef struct fnv {
    uint64_t h;
} fnv;

static void fnv_add(fnv *f, const char *s) { f->h = fnv1a64(f->h, s, strlen(s)); }

int stage_graph_plan(const stage_graph *g, const bf_config *c, stage_node out[STAGE_MAX]) {
    const char *parent = "";
    int n = 0;
    for (int i = 0; i < g->n; i++) {
        if (!stage_graph_runs(g, c, i)) continue;
        fnv f = {FNV1A64_BASIS};
        fnv_add(&f, "stage=");
        fnv_add(&f, g->names[i]);
        fnv_add(&f, "\n");
        for (size_t k = 0; k < cfg_field_count(); k++) {
            const cfg_field *fl = cfg_field_at(k);
            if (!stage_graph_depends(g, c, i, fl->key)) continue;
            char val[4 * CFG_MIXERS_MAX + 8]; /* worst case: every byte escaped as \xNN */
            cfg_format_value(c, fl->key, val, sizeof val);
            fnv_add(&f, fl->key);
            fnv_add(&f, "=");
            fnv_add(&f, val);
            fnv_add(&f, "\n");
        }
        fnv_add(&f, "parent=");
        fnv_add(&f, parent);
        fnv_add(&f, "\n");
        stage_node *s = &out[n++];
        s->name = g->names[i];
        s->idx = i;
        snprintf(s->key, sizeof s->key, "%016" PRIx64, f.h);
        snprintf(s->parent, sizeof s->parent, "%s", parent);
        snprintf(s->dir, sizeof s->dir, "%s-%s", s->name, s->key);
        parent = s->key;
    }
    return n;
}
