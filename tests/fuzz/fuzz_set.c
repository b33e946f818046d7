/* fuzz_set — the config language: `--set key=value` overrides (one per
 * input line, applied in order as bfworker and bfctl apply them), then the
 * cross-key validation, the canonical dump and its reload; and the whole
 * input as a config file (cfg_load_text). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/cfg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* cfg_defaults parses every schema default: done once, then copied */
static const bf_config *defaults(void) {
    static bf_config d;
    static int ready;
    if (!ready) cfg_defaults(&d), ready = 1;
    return &d;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 65536) return 0;
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    bf_config c = *defaults();
    char err[4096];
    int applied = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        if (cfg_set(&c, line, err, sizeof err) == 0) applied++;
    }
    if (applied) {
        (void)cfg_validate(&c, err, sizeof err);
        static char dump[1 << 16];
        size_t n = cfg_dump(&c, dump, sizeof dump);
        char h[17], h2[17];
        cfg_hash(&c, h);
        cfg_hash_text(dump, n < sizeof dump ? n : 0, h2);
        if (n < sizeof dump && strcmp(h, h2) != 0) abort(); /* the hash is not of the dump */
        /* the dump is what a checkpoint stores and bfd sends: it must load back */
        bf_config back = *defaults();
        if (n < sizeof dump && cfg_load_text(&back, dump, n, "dump", err, sizeof err) != 0) abort();
        cfg_hash(&back, h2);
        if (strcmp(h, h2) != 0) abort(); /* the dump does not round-trip */
    }
    memcpy(text, data, size);
    c = *defaults();
    (void)cfg_load_text(&c, text, size, "fuzz.yaml", err, sizeof err);
    free(text);
    return 0;
}
