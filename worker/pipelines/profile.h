/* profile — the attention sparsity profile of a trained ViT (docs/design.md#sparsity-profile, S2S
 * stage "profile"): on a calibration batch (the first rows of the
 * validation split, no augmentation), per layer,
 *   entropy   the attention entropy of each active query row over the active
 *             keys, divided by log(keys): 1 = uniform, 0 = one key; the mean
 *             over samples, heads and active queries
 *   top_mass  the attention mass of the top 10% of the active keys (rounded
 *             up), same mean
 *   keep      the A-ViT keep fraction: patch tokens active in the layer (1
 *             without halting)
 *   density   keep * entropy: the fraction of the sequence a layer still mixes;
 *             0 where no sample has two active tokens (every patch token
 *             halted before the layer: it mixes nothing, entropy and top mass
 *             are NaN), so such layers come first
 * and the layers in order of density, sparsest first (what distill's
 * replace_layers auto:K takes). score names that order: "keep*entropy" for
 * a model that halts (A-ViT: the halting's sparsity and the attention's
 * together), "entropy" for a dense one (keep 1: the attention's own
 * sparsity alone). Layers whose mixer is not attention report
 * NaN entropy, top mass and density and come last. Written as
 * profile.json. */
#ifndef PIPE_PROFILE_H
#define PIPE_PROFILE_H

#include <stdio.h>

#include "worker/pipelines/pipe.h"

typedef struct pipe_layer_profile {
    double entropy, top_mass, keep, density;
    int attention; /* 1 when the layer's mixer is attention */
} pipe_layer_profile;

typedef struct pipe_profile_t {
    int layers, samples, tokens;
    int halting; /* the model halts (A-ViT): score keep*entropy, else entropy */
    pipe_layer_profile l[MODEL_MAX_LAYERS];
    int order[MODEL_MAX_LAYERS]; /* layer ids, sparsest (lowest density) first */
} pipe_profile_t;

/* Profiles m (weights loaded) on up to `samples` validation images of d.
 * Returns 0 or -1 with a message. */
int pipe_profile(model *m, const bf_config *c, const data_sets *d, int samples, pipe_profile_t *out,
                 char *err, size_t errlen);
/* Writes p as JSON ({"layers": [{"layer": 0, "entropy": ..}, ..],
 * "sparsest": [..], "samples": N}) or as a table. */
void pipe_profile_json(const pipe_profile_t *p, FILE *f);
void pipe_profile_table(const pipe_profile_t *p, FILE *f);
/* Reads a profile.json (bounded size); returns 0 or -1 with a message naming
 * the file and what is wrong. */
int pipe_profile_read(const char *path, pipe_profile_t *p, char *err, size_t errlen);

#endif
