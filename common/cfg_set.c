/* cfg_set.c — sets one key at a time: `--set key=value` overrides, a sweep's
 * parameters (a key with a value as YAML flow text, or as a node of the
 * sweep's document), and the defaults, which are the schema's default texts
 * set through the same path as user input. Each reports its first error. The
 * value itself is read by cfg_parse.c; this file only finds the key and the
 * value text. It never reads a file and never validates across keys. */
#include "common/cfg.h"
#include "common/cfg_priv.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

int cfg_set_node(bf_config *c, const char *key, struct yaml_document_s *doc,
                 struct yaml_node_s *node, const char *file, char *err, size_t errlen) {
    return cfg_load_key(c, key, doc, node, node, file ? file : "config", NULL, err, errlen);
}

int cfg_set_value(bf_config *c, const char *key, const char *yaml_value, const char *where,
                  char *err, size_t errlen) {
    char dummy[8];
    if (!err || !errlen) err = dummy, errlen = sizeof dummy;
    if (!where) where = key;
    const char *text = yaml_value ? yaml_value : "";
    const char *t = text;
    while (*t == ' ' || *t == '\t') t++;
    if (*t == '\0') text = "\"\""; /* an empty value is the empty string */
    if (strlen(text) > 65536) {
        snprintf(err, errlen, "%s: value too long", where);
        return -1;
    }
    yaml_document_t doc;
    if (cfg_yaml_parse(&doc, text, strlen(text), where, 0, err, errlen) < 0) return -1;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    int rc = -1;
    if (!root) {
        snprintf(err, errlen, "%s: no value given", where);
    } else {
        rc = cfg_load_key(c, key, &doc, NULL, root, NULL, where, err, errlen);
    }
    yaml_document_delete(&doc);
    return rc;
}

int cfg_set(bf_config *c, const char *assignment, char *err, size_t errlen) {
    char dummy[8];
    if (!err || !errlen) err = dummy, errlen = sizeof dummy;
    const char *eq = assignment ? strchr(assignment, '=') : NULL;
    const char *colon = assignment ? strchr(assignment, ':') : NULL;
    /* `--set KEY: VALUE` (YAML's form) or `KEY:=VALUE`: no key has a ':' in it,
     * so say which form was meant rather than name a key 'KEY:' */
    if (colon && (!eq || colon < eq)) {
        const char *v = colon + 1;
        if (eq == v) v++;
        while (*v == ' ' || *v == '\t') v++;
        snprintf(err, errlen,
                 "--set '%s': a key has no ':' in it; write KEY=VALUE, as in --set %.*s=%s",
                 assignment, (int)(colon - assignment), assignment, v);
        return -1;
    }
    if (!eq) {
        snprintf(err, errlen, "--set %s: expected KEY=VALUE", assignment ? assignment : "");
        return -1;
    }
    char key[CFG_KEY_MAX];
    const char *ks = assignment, *ke = eq;
    while (ks < ke && isspace((unsigned char)*ks)) ks++;
    while (ke > ks && isspace((unsigned char)ke[-1])) ke--;
    if (ke == ks || (size_t)(ke - ks) >= sizeof key) {
        snprintf(err, errlen, "--set %s: expected KEY=VALUE with a key", assignment);
        return -1;
    }
    memcpy(key, ks, (size_t)(ke - ks));
    key[ke - ks] = '\0';
    char where[CFG_KEY_MAX + 8];
    snprintf(where, sizeof where, "--set %s", key);
    unsigned char level = c->level;
    c->level = CFG_LEVEL_SET;
    int rc = cfg_set_value(c, key, eq + 1, where, err, errlen);
    c->level = level;
    return rc;
}

void cfg_defaults(bf_config *c) {
    memset(c, 0, sizeof *c); /* level: CFG_LEVEL_DEFAULT */
    char err[CFG_MSG_MAX];
    for (size_t i = 0; i < cfg_field_count(); i++) {
        const cfg_field *f = cfg_field_at(i);
        /* defaults are compile-time constants checked by test_cfg; a failure
         * here is a bug in the table, and leaves the zero value */
        (void)cfg_set_value(c, f->key, f->def, "default", err, sizeof err);
    }
    const char *env = getenv("BF_DATA");
    if (env && *env && strlen(env) < sizeof c->data.dir)
        snprintf(c->data.dir, sizeof c->data.dir, "%s", env);
    c->level = CFG_LEVEL_FILE;
}
