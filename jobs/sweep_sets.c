/* sweep_sets.c — a sweep's text changed before it is submitted, shared by
 * bfctl and bfd's dashboard: `--set KEY=VALUE` applied to the sweep's base
 * by editing its YAML tree (so the text bfd stores, and re-reads for tpe,
 * holds them), and the one-trial sweep of a clone (`bfctl clone`, the
 * trial page's clone). It validates nothing itself: the sweep loader
 * (jobs/sweep.c) judges the result, with its messages. */
#include "jobs/sweep.h"
#include "common/cfg.h"
#include "common/errbuf.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

/* Copies node id of src (a tree of scalars, sequences and mappings) into
 * dst; returns the new node's id, or 0 (out of memory, or too deep). */
static int copy_node(yaml_document_t *dst, yaml_document_t *src, int id, int depth) {
    yaml_node_t *n = yaml_document_get_node(src, id);
    if (!n || depth > 64) return 0;
    if (n->type == YAML_SCALAR_NODE)
        return yaml_document_add_scalar(dst, NULL, n->data.scalar.value, (int)n->data.scalar.length,
                                        n->data.scalar.style);
    if (n->type == YAML_SEQUENCE_NODE) {
        int s = yaml_document_add_sequence(dst, NULL, YAML_FLOW_SEQUENCE_STYLE);
        for (yaml_node_item_t *it = n->data.sequence.items.start;
             s && it < n->data.sequence.items.top; it++) {
            int c = copy_node(dst, src, *it, depth + 1);
            if (!c || !yaml_document_append_sequence_item(dst, s, c)) return 0;
        }
        return s;
    }
    int m = yaml_document_add_mapping(dst, NULL, YAML_FLOW_MAPPING_STYLE);
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; m && p < n->data.mapping.pairs.top;
         p++) {
        int k = copy_node(dst, src, p->key, depth + 1),
            v = copy_node(dst, src, p->value, depth + 1);
        if (!k || !v || !yaml_document_append_mapping_pair(dst, m, k, v)) return 0;
    }
    return m;
}

/* The value of key (a plain name) in mapping node map of doc: its pair, or
 * NULL. */
static yaml_node_pair_t *find_pair(yaml_document_t *doc, yaml_node_t *map, const char *key,
                                   size_t klen) {
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        if (k && k->type == YAML_SCALAR_NODE && k->data.scalar.length == klen &&
            !memcmp(k->data.scalar.value, key, klen))
            return p;
    }
    return NULL;
}

/* Removes from mapping map the pairs whose keys (prefix + key) are in the
 * key group `group` (cfg_key_group), but `keep`: a --set of one data
 * source replaces the file's whole data-source group (docs/sweeps.md). */
static void drop_group(yaml_document_t *doc, yaml_node_t *map, const char *prefix, size_t plen,
                       int group, const char *keep) {
    yaml_node_pair_t *w = map->data.mapping.pairs.start;
    for (yaml_node_pair_t *p = w; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        char name[256];
        int drop = 0;
        if (k && k->type == YAML_SCALAR_NODE && plen + k->data.scalar.length + 1 < sizeof name) {
            memcpy(name, prefix, plen);
            memcpy(name + plen, k->data.scalar.value, k->data.scalar.length);
            name[plen + k->data.scalar.length] = '\0';
            drop = strcmp(name, keep) != 0 && cfg_key_group(name) == group;
        }
        if (!drop) *w++ = *p;
    }
    map->data.mapping.pairs.top = w;
}

/* Sets KEY=VALUE (one --set) in doc's root mapping: KEY's dotted parts are
 * nested mappings (made when missing; a part that holds a scalar or a list
 * is refused), VALUE is read as YAML (a number, a word, [a, b], {k: v}). The
 * file's own value of KEY, if any, is replaced; the first --set of a key
 * group (the data sources) drops the file's other keys of that group
 * (*dropped: the groups done). */
static int set_one(yaml_document_t *doc, const char *set, unsigned *dropped, char *err,
                   size_t errlen) {
    const char *eq = strchr(set, '=');
    if (!eq || eq == set)
        return bf_fail(err, errlen, "--set '%s': expected KEY=VALUE (e.g. train.lr=0.001)", set);
    yaml_parser_t p;
    yaml_document_t vdoc;
    if (!yaml_parser_initialize(&p)) return bf_fail(err, errlen, "--set: out of memory");
    const char *val = eq + 1;
    yaml_parser_set_input_string(&p, (const unsigned char *)val, strlen(val));
    int ok = yaml_parser_load(&p, &vdoc);
    yaml_parser_delete(&p);
    if (!ok) return bf_fail(err, errlen, "--set '%s': the value is not YAML", set);
    yaml_node_t *vroot = yaml_document_get_root_node(&vdoc);
    int rc = 0, vid = 0;
    if (!vroot)
        vid = yaml_document_add_scalar(doc, NULL, (yaml_char_t *)"", 0, YAML_PLAIN_SCALAR_STYLE);
    else
        vid = copy_node(doc, &vdoc, 1, 0);
    yaml_document_delete(&vdoc);
    if (!vid) return bf_fail(err, errlen, "--set '%s': out of memory (or nested too deep)", set);
    /* the sweep's base: where the file has KEY's section (`data:` at the top
     * level, say), else its `base:` mapping when it has one, else the top level */
    int map = 1;
    yaml_node_t *root = yaml_document_get_node(doc, 1);
    yaml_node_pair_t *bp = find_pair(doc, root, "base", 4);
    yaml_node_t *bn = bp ? yaml_document_get_node(doc, bp->value) : NULL;
    size_t first = strcspn(set, ".=");
    if (bn && bn->type == YAML_MAPPING_NODE && !find_pair(doc, root, set, first)) map = bp->value;
    const char *part = set;
    while (!rc) {
        const char *dot = memchr(part, '.', (size_t)(eq - part));
        size_t klen = (size_t)((dot ? dot : eq) - part);
        if (!klen) {
            rc = bf_fail(err, errlen, "--set '%s': the key has an empty part", set);
            break;
        }
        yaml_node_t *m = yaml_document_get_node(doc, map);
        if (!dot) {
            char full[256];
            snprintf(full, sizeof full, "%.*s", (int)(eq - set), set);
            int group = cfg_key_group(full);
            if (group > 0 && group < 32 && !(*dropped & 1u << group)) {
                drop_group(doc, m, set, (size_t)(part - set), group, full);
                *dropped |= 1u << group; /* the later --sets of the group add to it */
            }
        }
        yaml_node_pair_t *pr = find_pair(doc, m, part, klen);
        if (!dot) {
            if (pr) {
                pr->value = vid;
            } else {
                int k = yaml_document_add_scalar(doc, NULL, (yaml_char_t *)part, (int)klen,
                                                 YAML_PLAIN_SCALAR_STYLE);
                if (!k || !yaml_document_append_mapping_pair(doc, map, k, vid))
                    rc = bf_fail(err, errlen, "--set: out of memory");
            }
            break;
        }
        if (pr) {
            yaml_node_t *v = yaml_document_get_node(doc, pr->value);
            if (!v || v->type != YAML_MAPPING_NODE) {
                rc = bf_fail(err, errlen, "--set '%s': '%.*s' in the file is not a mapping", set,
                             (int)(dot - set), set);
                break;
            }
            map = pr->value;
        } else {
            int k = yaml_document_add_scalar(doc, NULL, (yaml_char_t *)part, (int)klen,
                                             YAML_PLAIN_SCALAR_STYLE);
            int nm = yaml_document_add_mapping(doc, NULL, YAML_BLOCK_MAPPING_STYLE);
            if (!k || !nm || !yaml_document_append_mapping_pair(doc, map, k, nm)) {
                rc = bf_fail(err, errlen, "--set: out of memory");
                break;
            }
            map = nm;
        }
        part = dot + 1;
    }
    return rc;
}

typedef struct outbuf {
    char *p;
    size_t n, cap;
} outbuf;

static int write_out(void *data, unsigned char *buf, size_t size) {
    outbuf *o = data;
    if (o->n + size > SWEEP_TEXT_MAX) return 0;
    if (o->n + size + 1 > o->cap) {
        size_t cap = (o->n + size + 1) * 2;
        char *np = realloc(o->p, cap);
        if (!np) return 0;
        o->p = np;
        o->cap = cap;
    }
    memcpy(o->p + o->n, buf, size);
    o->n += size;
    o->p[o->n] = '\0';
    return 1;
}

int sweep_apply_sets(const char *text, size_t len, const char *file, const char *const *sets, int n,
                     char **out, char *err, size_t errlen) {
    *out = NULL;
    yaml_parser_t p;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&p)) return bf_fail(err, errlen, "out of memory");
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    if (!yaml_parser_load(&p, &doc)) {
        int rc = bf_fail(err, errlen, "%s:%zu:%zu: %s", file, p.problem_mark.line + 1,
                         p.problem_mark.column + 1, p.problem ? p.problem : "YAML error");
        yaml_parser_delete(&p);
        return rc;
    }
    yaml_parser_delete(&p);
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root || root->type != YAML_MAPPING_NODE) {
        yaml_document_delete(&doc);
        return bf_fail(err, errlen, "%s: --set needs a sweep that is a mapping", file);
    }
    unsigned dropped = 0;
    for (int i = 0; i < n; i++)
        if (set_one(&doc, sets[i], &dropped, err, errlen)) {
            yaml_document_delete(&doc);
            return -1;
        }
    yaml_emitter_t e;
    outbuf o = {0};
    if (!yaml_emitter_initialize(&e)) {
        yaml_document_delete(&doc);
        return bf_fail(err, errlen, "out of memory");
    }
    yaml_emitter_set_output(&e, write_out, &o);
    yaml_emitter_set_unicode(&e, 1);
    int ok = yaml_emitter_open(&e) && yaml_emitter_dump(&e, &doc) && yaml_emitter_close(&e) &&
             yaml_emitter_flush(&e);
    /* yaml_emitter_dump deletes the document, also when it fails */
    if (!ok) {
        int rc = bf_fail(err, errlen, "%s with --set: %s", file,
                         e.problem ? e.problem : "over the size limit, or out of memory");
        yaml_emitter_delete(&e);
        free(o.p);
        return rc;
    }
    yaml_emitter_delete(&e);
    *out = o.p;
    return 0;
}

static const char *jstr(json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static long long jint(json_t *o, const char *k) {
    return (long long)json_integer_value(json_object_get(o, k));
}

/* 1 when a config line "KEY: value" sets a key one of sets[n] ("KEY=VALUE")
 * changes: the line is left out and the set puts the new value in. */
static int line_is_set(const char *line, size_t len, const char *const *sets, int n) {
    size_t k = strcspn(line, ":");
    if (k >= len) return 0;
    for (int i = 0; i < n; i++)
        if (strncmp(sets[i], line, k) == 0 && sets[i][k] == '=') return 1;
    return 0;
}

/* The clone's sweep text (malloc'd) before its sets, without the config
 * lines of the keys in sets[n]; NULL when out of memory. */
static char *clone_text(json_t *tr, json_t *job, long long trial, const char *const *sets,
                        int n_sets, const char *by) {
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) return NULL;
    fprintf(m, "# cloned from trial %lld of job %lld by %s\n", trial, jint(tr, "job"), by);
    fprintf(m, "name: %.100s-t%lld\nsource_trial: %lld\nmetric:\n", jstr(job, "name"), trial,
            trial);
    size_t i;
    json_t *o;
    json_array_foreach(json_object_get(job, "objectives"), i, o)
        fprintf(m, "  - {name: %s, goal: %s}\n", jstr(o, "name"), jstr(o, "goal"));
    if (json_array_size(json_object_get(job, "objectives")) == 0)
        fprintf(m, "  - {name: %s, goal: %s}\n", jstr(job, "metric"), jstr(job, "goal"));
    fprintf(m, "resources: {ranks: %lld, gpus_per_rank: %lld}\nretries: %lld\npriority: %lld\n",
            jint(job, "ranks"), jint(job, "gpus_per_rank"), jint(job, "retries"),
            jint(job, "priority"));
    /* the resolved config, one canonical "key: value" line each */
    fprintf(m, "base:\n");
    const char *cfg = jstr(tr, "config");
    while (*cfg) {
        size_t n = strcspn(cfg, "\n");
        if (!line_is_set(cfg, n, sets, n_sets)) fprintf(m, "  %.*s\n", (int)n, cfg);
        cfg += n + (cfg[n] == '\n');
    }
    if (fclose(m) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

char *sweep_clone_text(json_t *trial, json_t *job, long long id, const char *const *sets, int n,
                       const char *by, char *err, size_t errlen) {
    char *text = clone_text(trial, job, id, sets, n, by);
    if (!text) {
        bf_fail(err, errlen, "out of memory");
        return NULL;
    }
    if (n == 0) return text;
    char from[64], *edited = NULL;
    snprintf(from, sizeof from, "t%lld (clone)", id);
    int rc = sweep_apply_sets(text, strlen(text), from, sets, n, &edited, err, errlen);
    free(text);
    return rc ? NULL : edited;
}
