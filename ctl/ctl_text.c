/* ctl_text — the sweep text bfctl reads and sends: a file or standard input
 * ("-"), capped, and `--set KEY=VALUE` applied to the sweep's base by editing
 * its YAML tree (so the text bfd stores, and re-reads for tpe, holds them).
 * It validates nothing itself: the sweep loader (jobs/sweep.c) judges the
 * result, with its messages. */
#include "ctl/bfctl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "common/cfg.h"

int ctl_read_text(const char *path, char **out, size_t *len, char *err, size_t errlen) {
    *out = NULL;
    int is_stdin = !strcmp(path, "-");
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) return bf_fail(err, errlen, "cannot open %s: %s", path, strerror(errno));
    char *text = malloc(CTL_TEXT_MAX + 1);
    size_t n = text ? fread(text, 1, CTL_TEXT_MAX + 1, f) : 0;
    int rerr = text && ferror(f);
    if (!is_stdin) fclose(f);
    const char *name = is_stdin ? "standard input" : path;
    if (!text) return bf_fail(err, errlen, "out of memory reading %s", name);
    if (rerr || n > CTL_TEXT_MAX || memchr(text, '\0', n)) {
        free(text);
        if (rerr) return bf_fail(err, errlen, "reading %s: %s", name, strerror(errno));
        if (n > CTL_TEXT_MAX)
            return bf_fail(err, errlen, "%s is over %u bytes (the most a sweep may be)", name,
                           CTL_TEXT_MAX);
        return bf_fail(err, errlen, "%s holds NUL bytes", name);
    }
    text[n] = '\0';
    *out = text;
    *len = n;
    return 0;
}

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
    if (o->n + size > CTL_TEXT_MAX) return 0;
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

int ctl_apply_sets(const char *text, size_t len, const char *file, const char *const *sets, int n,
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
