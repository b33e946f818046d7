/* cfg_keys.c — questions asked of the schema table by key name: is a key
 * known, is a prefix a section, what a type is called, which of a field's
 * choices a name is, and, for an unknown key, the nearest known one (edit
 * distance) for "did you mean". It reads only the table (cfg_schema.c); it
 * never parses YAML, never formats a value and never changes a bf_config. */
#include "common/cfg.h"
#include "common/cfg_priv.h"

#include <stdio.h>
#include <string.h>

const cfg_field *cfg_field_find(const char *key) {
    if (!key) return NULL;
    for (size_t i = 0; i < cfg_field_count(); i++)
        if (strcmp(cfg_field_at(i)->key, key) == 0) return cfg_field_at(i);
    return NULL;
}

const cfg_field *cfg_field_findn(const char *key, size_t n) {
    if (!key) return NULL;
    for (size_t i = 0; i < cfg_field_count(); i++) {
        const char *k = cfg_field_at(i)->key;
        if (strncmp(k, key, n) == 0 && k[n] == '\0') return cfg_field_at(i);
    }
    return NULL;
}

int cfg_key_known(const char *key) { return cfg_field_find(key) != NULL; }

int cfg_is_section(const char *prefix) {
    size_t n = strlen(prefix);
    if (n == 0) return 0;
    for (size_t i = 0; i < cfg_field_count(); i++) {
        const char *k = cfg_field_at(i)->key;
        if (strncmp(k, prefix, n) == 0 && k[n] == '.') return 1;
    }
    return 0;
}

const char *cfg_type_name(cfg_type t) {
    switch (t) {
    case CFG_T_INT:
        return "integer";
    case CFG_T_U64:
        return "non-negative integer";
    case CFG_T_FLOAT:
        return "number";
    case CFG_T_BOOL:
        return "boolean (true or false)";
    case CFG_T_ENUM:
        return "name";
    case CFG_T_STR:
        return "string";
    case CFG_T_PAIR:
        return "pair of numbers [a, b]";
    case CFG_T_SCHED:
        return "schedule {schedule, start, end}";
    case CFG_T_LAYERS:
        return "list of layer indices or auto:K";
    }
    return "?";
}

size_t cfg_edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > CFG_KEY_MAX || lb > CFG_KEY_MAX) return (size_t)-1;
    size_t prev[CFG_KEY_MAX + 1], cur[CFG_KEY_MAX + 1];
    for (size_t j = 0; j <= lb; j++) prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, (lb + 1) * sizeof(size_t));
    }
    return prev[lb];
}

size_t cfg_edit_distance_within(const char *a, const char *b, size_t max) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > CFG_KEY_MAX || lb > CFG_KEY_MAX) return max + 1;
    /* the distance is at least the difference in length */
    if ((la > lb ? la - lb : lb - la) > max) return max + 1;
    size_t prev[CFG_KEY_MAX + 1], cur[CFG_KEY_MAX + 1];
    for (size_t j = 0; j <= lb; j++) prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        size_t row_min = cur[0];
        for (size_t j = 1; j <= lb; j++) {
            size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
            if (cur[j] < row_min) row_min = cur[j];
        }
        if (row_min > max) return max + 1; /* rows never decrease below their minimum */
        memcpy(prev, cur, (lb + 1) * sizeof(size_t));
    }
    return prev[lb] <= max ? prev[lb] : max + 1;
}

static const char *const section_names[] = {"data", "model",   "attn",  "budget",
                                            "avit", "distill", "train", "s2s"};

/* Nearest schema key (and, when with_sections, section name) to key, and its
 * distance. */
static const char *nearest(const char *key, int with_sections, size_t *dist) {
    const char *best = NULL;
    size_t bd = (size_t)-1;
    /* a candidate only counts when strictly nearer than the best so far:
     * cfg_edit_distance_within stops as soon as it cannot be (the fuzzer
     * spent half its time here on long unknown keys) */
    for (size_t i = 0; i < cfg_field_count(); i++) {
        size_t d = cfg_edit_distance_within(key, cfg_field_at(i)->key, bd - 1);
        if (d < bd) bd = d, best = cfg_field_at(i)->key;
    }
    for (size_t i = 0; with_sections && i < sizeof(section_names) / sizeof(*section_names); i++) {
        size_t d = cfg_edit_distance_within(key, section_names[i], bd - 1);
        if (d < bd) bd = d, best = section_names[i];
    }
    if (dist) *dist = bd;
    return best;
}

const char *cfg_nearest_key(const char *key) { return key ? nearest(key, 0, NULL) : NULL; }

void cfg_unknown_key_msg(char *out, size_t n, const char *key, int with_sections) {
    size_t d;
    const char *best = nearest(key, with_sections, &d);
    size_t len = strlen(key);
    if (best && (d <= 2 || d * 3 <= len))
        snprintf(out, n, "unknown key '%s'; did you mean '%s'?", key, best);
    else
        snprintf(out, n, "unknown key '%s' (see docs/sweeps.md or `bfctl keys` for valid keys)",
                 key);
}

int cfg_choice_index(const char *choices, const char *s) {
    size_t n = strlen(s);
    int idx = 0;
    for (const char *p = choices; *p; idx++) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, s, n) == 0) return idx;
        if (!bar) break;
        p = bar + 1;
    }
    return -1;
}

/* ------------------------------------------------------ levels and groups */

static const char *const data_source_keys[] = {
    "data.set",          "data.train",        "data.val",         "data.test",       "data.path",
    "data.train_images", "data.train_labels", "data.test_images", "data.test_labels"};

int cfg_key_group(const char *key) {
    for (size_t i = 0; key && i < sizeof data_source_keys / sizeof *data_source_keys; i++)
        if (strcmp(key, data_source_keys[i]) == 0) return 1;
    return 0;
}

void cfg_set_level(bf_config *c, cfg_level level) { c->level = (unsigned char)level; }

static size_t field_index(const cfg_field *f) { return (size_t)(f - cfg_field_at(0)); }

/* Which data source a group key names: data.set, the TSV splits, data.path
 * or the IDX files (the index ranges of data_source_keys). */
static int source_kind(const char *key) {
    for (int i = 0; i < (int)(sizeof data_source_keys / sizeof *data_source_keys); i++)
        if (strcmp(key, data_source_keys[i]) == 0) return i == 0 ? 0 : i <= 3 ? 1 : i == 4 ? 2 : 3;
    return -1;
}

/* Before the earlier level's group is dropped: when it named two sources
 * (its own conflict, which the later level hides but does not mend), the
 * first such pair is kept for cfg_validate. */
static void note_replaced_conflict(bf_config *c, int g) {
    int first = -1;
    for (size_t i = 0; i < cfg_field_count() && i < CFG_MAX_KEYS; i++) {
        const cfg_field *h = cfg_field_at(i);
        if (cfg_key_group(h->key) != g || !((const char *)c + h->offset)[0]) continue;
        if (first < 0) {
            first = (int)i;
        } else if (source_kind(h->key) != source_kind(cfg_field_at((size_t)first)->key)) {
            if (!c->replaced_conflict_level) {
                c->replaced_conflict_level = c->key_level[first];
                c->replaced_conflict_key[0] = (unsigned char)first;
                c->replaced_conflict_key[1] = (unsigned char)i;
            }
            return;
        }
    }
}

void cfg_level_prepare(bf_config *c, const cfg_field *f, cfg_level level) {
    int g = cfg_key_group(f->key);
    if (!g) return;
    int earlier = 0;
    for (size_t i = 0; i < cfg_field_count() && i < CFG_MAX_KEYS; i++)
        if (cfg_key_group(cfg_field_at(i)->key) == g && c->key_level[i] && c->key_level[i] < level)
            earlier = 1;
    if (!earlier) return;
    note_replaced_conflict(c, g);
    /* every data-source key defaults to "" (test_cfg checks), so the group's
     * defaults are its fields zeroed */
    for (size_t i = 0; i < cfg_field_count() && i < CFG_MAX_KEYS; i++) {
        const cfg_field *h = cfg_field_at(i);
        if (cfg_key_group(h->key) != g) continue;
        memset((char *)c + h->offset, 0, h->size);
        c->key_level[i] = CFG_LEVEL_DEFAULT;
    }
}

void cfg_level_mark(bf_config *c, const cfg_field *f, cfg_level level) {
    size_t i = field_index(f);
    if (i < CFG_MAX_KEYS) c->key_level[i] = (unsigned char)level;
}

void cfg_copy_key(bf_config *dst, const bf_config *src, const cfg_field *f, cfg_level level) {
    cfg_level_prepare(dst, f, level);
    if (f->type == CFG_T_LAYERS) {
        dst->distill.replace_auto = src->distill.replace_auto;
        dst->distill.n_replace = src->distill.n_replace;
        memcpy(dst->distill.replace_layers, src->distill.replace_layers,
               sizeof dst->distill.replace_layers);
    } else {
        memcpy((char *)dst + f->offset, (const char *)src + f->offset, f->size);
    }
    cfg_level_mark(dst, f, level);
}
