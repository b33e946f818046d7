/* fuzz_sweep — the sweep loader (YAML -> validated sweep_spec, every trial's
 * config checked) and the expander, on text as bfd receives it in a submit. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/sweep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct count {
    long long n;
    size_t bytes;
} count;

static int on_trial(void *ud, const sweep_trial *t) {
    count *c = ud;
    c->n++;
    c->bytes += strlen(t->config_text) + strlen(t->params) + strlen(t->params_json);
    return c->n >= 2000; /* the loader already walked every trial */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1u << 20)) return 0; /* bfd refuses more before parsing */
    sweep_spec *s = NULL;
    sweep_errors e = {0};
    if (sweep_load_string((const char *)data, size, "fuzz.yaml", &s, &e) == 0) {
        count c = {0, 0};
        char err[256];
        (void)sweep_expand(s, on_trial, &c, err, sizeof err);
        sweep_spec_destroy(&s);
    }
    sweep_errors_free(&e);
    return 0;
}
