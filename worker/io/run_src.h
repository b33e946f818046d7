/* run_src — the weights and config of a finished (or running) run, for
 * `bfworker eval` and `generate`: a run folder holding a checkpoint set
 * (model.safetensors + state.json, docs/checkpoints.md) or an older
 * checkpoint.bin, or one of those files named directly (a model.safetensors
 * stands for its folder's set; an s2s run root is refused naming its stage
 * folders; a FIFO or a device is refused by kind, never opened). */
#ifndef RUN_SRC_H
#define RUN_SRC_H

#include <stddef.h>

#include "worker/io/ckpt.h"
#include "worker/data/tok.h"
#include "worker/models/model.h"

typedef struct run_src {
    char dir[4096]; /* the set's folder ("" for an older checkpoint.bin) */
    ckpt_state old; /* an older checkpoint.bin, read whole */
    char *cfg_text; /* the run's resolved config (owned) */
} run_src;

/* Opens path (a run folder, its model.safetensors or a checkpoint.bin) and
 * reads its config text. Returns 0, or -1 with a message (nothing to close). */
int run_src_open(run_src *s, const char *path, char *err, size_t errlen);
/* Loads the weights into m (built from the config): by name from a set, by
 * position from an older file. Returns 0 or -1 with a message. */
int run_src_load(run_src *s, model *m, char *err, size_t errlen);
void run_src_close(run_src *s);
/* Loads the tokenizer the run folder keeps (tokenizer.model, written by
 * training since it was added) into *tok. Returns 0, 1 when the run has
 * none (an older run: open its data instead), or -1 with a message. */
int run_src_tokenizer(const run_src *s, tok_t **tok, char *err, size_t errlen);

#endif
