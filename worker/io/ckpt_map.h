/* ckpt_map — init.map: renames a checkpoint's tensors before init.from
 * matches them to the model's (docs/checkpoints.md, "init.map"). A map is
 * a FILE of "their_name: our_name" lines, or "timm": the built-in map from
 * timm's VisionTransformer names to bf's ViT, whose tensors may also differ
 * in layout (a conv patch weight [D, 1, p, p] for bf's linear [D, p*p], a
 * [1, N+1, D] position embedding for bf's [N+1, D]); those hold the same
 * floats in the same order and are loaded as reshapes. */
#ifndef BF_CKPT_MAP_H
#define BF_CKPT_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/bk_tensor.h"

#define CKPT_MAP_MAX_BYTES (1u << 20) /* a map file's size cap */

typedef struct ckpt_map {
    int timm; /* 1: the built-in timm ViT map */
    int n;    /* file entries */
    char **from, **to;
} ckpt_map;

/* spec: "" (no map), "timm", or a file's path. Returns 0, or -1 with a
 * message ("init.map FILE:LINE: ..." for a bad line or a name mapped twice;
 * a FIFO, a missing or oversized file refused). */
int ckpt_map_load(ckpt_map *m, const char *spec, char *err, size_t errlen);
void ckpt_map_free(ckpt_map *m);

/* Writes name's new name into out (the name itself when the map does not
 * rename it). Returns 1 when the map renamed it, 0 when not, -1 when the new
 * name does not fit in n. */
int ckpt_map_name(const ckpt_map *m, const char *name, char *out, size_t n);

/* For a tensor the map renamed from their name to t->name whose shape in the
 * file (ndim, shape) differs from t's: 0 when the timm map loads it as a
 * reshape (the same floats in the same order), else -1 with why (a sentence
 * without the file's path). */
int ckpt_map_reshape(const ckpt_map *m, const char *their, int ndim, const uint64_t *shape,
                     const bk_tensor *t, char *why, size_t whylen);

#endif
