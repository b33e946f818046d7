/* ckpt — checkpoints that hold everything needed to continue a run as if it
 * had never stopped: the resolved config, parameters, AdamW moments, step,
 * RNG seed and data position.
 *
 * File layout (little-endian), version 2:
 *   header, 80 bytes: magic "BFCKPT\0\0" | u32 version | u32 reserved |
 *     u64 n_params | u64 step | u64 seed | u64 data_step | u64 cfg_len |
 *     u64 payload_fnv | u64 cfg_hash (FNV-1a of the cfg text, = cfg_hash()
 *     of the config) | u64 header_fnv (FNV-1a of the 72 bytes before it)
 *   payload: cfg text (cfg_len bytes) | params | m | v (n_params floats each)
 * Nothing in it depends on the number of ranks that wrote it: the state after
 * step s is the same whatever the world size, so a run may resume on another.
 * Written to a temporary file in the same folder, fsynced, renamed over
 * DIR/checkpoint.bin, and the folder fsynced: a crash leaves the old or the
 * new checkpoint, never a torn one. A truncated, foreign or damaged file is
 * refused with a message that says which check failed. */
#ifndef CKPT_H
#define CKPT_H

#include <stddef.h>
#include <stdint.h>

#define CKPT_VERSION 2
#define CKPT_NAME "checkpoint.bin"
#define CKPT_MAX_CFG (1u << 20)

typedef struct ckpt_state {
    uint64_t step;      /* optimiser steps done */
    uint64_t seed;      /* train.seed: every random stream derives from (seed, step) */
    uint64_t data_step; /* next global batch the data batcher produces */
    size_t n_params;
    float *params, *m, *v; /* host arrays of n_params (owned by whoever allocated) */
    char *cfg_text;        /* resolved config, NUL-terminated */
    uint64_t cfg_hash;     /* ckpt_read: FNV-1a of cfg_text as stored in the header */
} ckpt_state;

/* Writes s into dir/checkpoint.bin atomically (s->cfg_hash is computed, not
 * read). Returns 0 or -1 with a message. */
int ckpt_write(const char *dir, const ckpt_state *s, char *err, size_t errlen);

/* Reads a checkpoint file (a path to the file, or a folder holding
 * checkpoint.bin). Allocates s->params, m, v and cfg_text (free with
 * ckpt_free). Returns 0 or -1 with a message naming the file and the check
 * that failed. */
int ckpt_read(const char *path, ckpt_state *s, char *err, size_t errlen);
void ckpt_free(ckpt_state *s);

/* Compares a checkpoint's config text with the current one, line by line
 * ("key: value"), ignoring keys that do not change the trajectory (device,
 * data.dir, train.log_every, train.eval_every, train.checkpoint_every).
 * Returns 0 when they agree, or -1 with a message naming the first key that
 * differs and both values. */
int ckpt_config_check(const char *ckpt_cfg, const char *cur_cfg, char *err, size_t errlen);

#endif
