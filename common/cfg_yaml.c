/* cfg_yaml.c — reads YAML text from outside into a libyaml document, with
 * the limits every such text gets: nesting depth counted on the parser's
 * events (before anything is built), one document only, and alias expansion
 * capped in nodes visited and depth. Errors carry FILE:LINE:COL. Both config
 * files and sweeps come through here. It knows no config key and never
 * touches a bf_config. */
#include "common/cfg.h"
#include "common/cfg_priv.h"

#include <stdio.h>
#include <yaml.h>

static int expansion_walk(yaml_document_t *doc, yaml_node_t *n, int depth, long *visits,
                          const char *file, char *err, size_t errlen) {
    if (++*visits > CFG_MAX_NODES) {
        snprintf(err, errlen, "%s:%zu:%zu: " CFG_TOO_MANY_NODES, file, n->start_mark.line + 1,
                 n->start_mark.column + 1, CFG_MAX_NODES, CFG_MAX_NODES);
        return -1;
    }
    if (depth > CFG_MAX_DEPTH) {
        snprintf(err, errlen, "%s:%zu:%zu: " CFG_TOO_DEEP, file, n->start_mark.line + 1,
                 n->start_mark.column + 1, CFG_MAX_DEPTH);
        return -1;
    }
    if (n->type == YAML_SEQUENCE_NODE) {
        for (yaml_node_item_t *i = n->data.sequence.items.start; i < n->data.sequence.items.top;
             i++) {
            yaml_node_t *c = yaml_document_get_node(doc, *i);
            if (c && expansion_walk(doc, c, depth + 1, visits, file, err, errlen) < 0) return -1;
        }
    } else if (n->type == YAML_MAPPING_NODE) {
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top;
             p++) {
            yaml_node_t *k = yaml_document_get_node(doc, p->key);
            yaml_node_t *v = yaml_document_get_node(doc, p->value);
            if (k && expansion_walk(doc, k, depth + 1, visits, file, err, errlen) < 0) return -1;
            if (v && expansion_walk(doc, v, depth + 1, visits, file, err, errlen) < 0) return -1;
        }
    }
    return 0;
}

int cfg_yaml_check_expansion(struct yaml_document_s *doc, const char *file, char *err,
                             size_t errlen) {
    char dummy[8];
    if (!err || !errlen) err = dummy, errlen = sizeof dummy;
    yaml_node_t *root = yaml_document_get_root_node(doc);
    long visits = 0;
    return root ? expansion_walk(doc, root, 0, &visits, file ? file : "config", err, errlen) : 0;
}

/* The first pass of cfg_yaml_parse: libyaml's events, with the nesting depth
 * counted as they come, so a deep document is refused after CFG_MAX_DEPTH
 * levels instead of being built whole (libyaml's scanner spends time in the
 * flow depth on every token, so building 100,000 levels costs seconds). */
static int check_events(const char *text, size_t len, const char *where, int with_pos, char *err,
                        size_t errlen) {
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "%s: yaml_parser_initialize failed (out of memory)", where);
        return -1;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int depth = 0, docs = 0, rc = 0;
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) {
            const char *problem = parser.problem ? parser.problem : "unknown error";
            if (with_pos)
                snprintf(err, errlen, "%s:%zu:%zu: YAML syntax error: %s%s%s", where,
                         parser.problem_mark.line + 1, parser.problem_mark.column + 1, problem,
                         parser.context ? " " : "", parser.context ? parser.context : "");
            else
                snprintf(err, errlen, "%s: YAML syntax error: %s%s%s", where, problem,
                         parser.context ? " " : "", parser.context ? parser.context : "");
            rc = -1;
            break;
        }
        yaml_event_type_t t = ev.type;
        size_t line = ev.start_mark.line + 1, col = ev.start_mark.column + 1;
        yaml_event_delete(&ev);
        if (t == YAML_SEQUENCE_START_EVENT || t == YAML_MAPPING_START_EVENT) {
            if (++depth > CFG_MAX_DEPTH) {
                if (with_pos)
                    snprintf(err, errlen, "%s:%zu:%zu: nesting deeper than %d levels; refused",
                             where, line, col, CFG_MAX_DEPTH);
                else
                    snprintf(err, errlen, "%s: nesting deeper than %d levels; refused", where,
                             CFG_MAX_DEPTH);
                rc = -1;
                break;
            }
        } else if (t == YAML_SEQUENCE_END_EVENT || t == YAML_MAPPING_END_EVENT) {
            depth--;
        } else if (t == YAML_DOCUMENT_START_EVENT && ++docs > 1) {
            if (with_pos)
                snprintf(err, errlen,
                         "%s:%zu:%zu: a second YAML document starts here; a config or sweep "
                         "file holds one document (remove the '---' line and what follows, "
                         "or merge the two)",
                         where, line, col);
            else
                snprintf(err, errlen, "%s: more than one YAML document; give one value", where);
            rc = -1;
            break;
        } else if (t == YAML_STREAM_END_EVENT) {
            break;
        }
    }
    yaml_parser_delete(&parser);
    return rc;
}

int cfg_yaml_parse(struct yaml_document_s *doc, const char *text, size_t len, const char *where,
                   int with_pos, char *err, size_t errlen) {
    char dummy[8];
    if (!err || !errlen) err = dummy, errlen = sizeof dummy;
    if (!where) where = "config";
    if (check_events(text, len, where, with_pos, err, errlen) < 0) return -1;
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "%s: yaml_parser_initialize failed (out of memory)", where);
        return -1;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, doc)) {
        /* the event pass accepted it, so only memory can run out here */
        snprintf(err, errlen, "%s: YAML: %s", where,
                 parser.problem ? parser.problem : "out of memory");
        yaml_parser_delete(&parser);
        return -1;
    }
    yaml_parser_delete(&parser);
    return 0;
}
