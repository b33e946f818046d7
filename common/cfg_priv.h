/* cfg_priv — what the files of the config language share among themselves
 * and nobody else: common/ only, never included outside it. The public API
 * is cfg.h. Each declaration names the file that defines it. */
#ifndef CFG_PRIV_H
#define CFG_PRIV_H

#include "common/cfg.h"

#include <stddef.h>

#define CFG_MSG_MAX 1024 /* one error message, before its position */
#define CFG_KEY_MAX 256  /* a dotted key, NUL included */

/* The words of the two caps on a walk over a YAML document (CFG_MAX_NODES,
 * CFG_MAX_DEPTH), so that the expansion check (cfg_yaml.c) and the config
 * walk (cfg_parse.c) refuse alike. TOO_MANY_NODES takes the cap twice. */
#define CFG_TOO_MANY_NODES                                                                         \
    "document has more than %d nodes (keys, values and lists, each alias counted every time it "   \
    "is used); a config or sweep is limited to %d"
#define CFG_TOO_DEEP "nesting deeper than %d levels (recursive alias?); refused"

struct yaml_document_s;
struct yaml_node_s;

/* cfg_parse.c: parses node `value` of doc as the value of dotted key `key`
 * (a key or a section) and stores it into c. Errors are positioned at
 * key_node (or value when key_node is NULL) as "FILE:LINE:COL: message";
 * with file NULL, as "WHERE: message". Returns 0, or -1 with the first
 * error in err[errlen]; c changes only where a value was valid. The
 * document stays the caller's. */
int cfg_load_key(bf_config *c, const char *key, struct yaml_document_s *doc,
                 struct yaml_node_s *key_node, struct yaml_node_s *value, const char *file,
                 const char *where, char *err, size_t errlen);

/* cfg_keys.c: index of s among choices "a|b|c" (0-based), or -1. */
int cfg_choice_index(const char *choices, const char *s);

/* cfg_keys.c: writes "unknown key 'x'; did you mean 'y'?" into out[n], the
 * suggestion only when it is close; with_sections also suggests section
 * names (for a mapping given under an unknown key). */
void cfg_unknown_key_msg(char *out, size_t n, const char *key, int with_sections);

/* cfg_keys.c: before key f is set on `level`, resets its group when dst
 * holds group keys from an earlier level (cfg_key_group); after, records
 * the level that set it. */
void cfg_level_prepare(bf_config *c, const cfg_field *f, cfg_level level);
void cfg_level_mark(bf_config *c, const cfg_field *f, cfg_level level);

/* cfg_format.c: the shortest "%.Ng" text of v that reads back as the same
 * float (0.3f prints as 0.3, not 0.300000012) into buf[n]; returns its
 * length (snprintf-like). */
size_t cfg_format_float(char *buf, size_t n, double v);

#endif
