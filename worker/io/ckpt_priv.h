/* ckpt_priv — what the checkpoint files of worker/io share and nothing
 * else may use: the set's state.json record and member checks (ckpt.c), for
 * init.from (ckpt_init.c), and the older checkpoint.bin's loader
 * (ckpt_bin.c), for ckpt_load and init.from. The public interface is ckpt.h. */
#ifndef CKPT_PRIV_H
#define CKPT_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/bk.h"
#include "worker/io/ckpt.h"
#include "worker/io/safetensors.h"

/* The set being written or read. */
typedef struct ckpt_set_state {
    char set_id[17];
    uint64_t step, data_step, seed, cfg_hash, n_floats;
    const char *cfg_text;
    char *cfg_owned;
    ckpt_counter counters[CKPT_MAX_COUNTERS];
    int n_counters;
    uint64_t bytes[2], fnv[2]; /* model, optimizer */
} ckpt_set_state;

/* ---- ckpt.c: the checkpoint set ---- */

/* out = dir + "/" + name (truncated to n). */
void ckpt_join(char *out, size_t n, const char *dir, const char *name);
/* 1 if path exists (stat succeeds), else 0. */
int ckpt_exists(const char *path);
/* Strict: exactly 16 lowercase or uppercase hex digits; 0 or -1. */
int ckpt_parse_hex16(const char *s, uint64_t *out);
/* P's tensors tile its buffer (as bk_params_alloc lays it out); 0, or -1 with
 * a message (`who` names the caller on out of memory). */
int ckpt_params_ok(const bk_params *P, const char *who, char *err, size_t errlen);
/* Reads and checks dir/state.json into s (s->cfg_owned is allocated: free
 * it, on failure too). 0, or -1 with a message. */
int ckpt_read_state(const char *dir, ckpt_set_state *s, char *err, size_t errlen);
/* Opens member `which` (0 model, 1 optimizer) of the set s in dir and checks
 * it against s (with verify_data also its data checksum). 0, or -1. */
int ckpt_open_member(const char *dir, const ckpt_set_state *s, int which, int verify_data,
                     st_file *f, char *err, size_t errlen);
/* 1 if the file's tensor x has the shape of the model's tensor t. */
int ckpt_same_shape(const st_tensor *x, const bk_tensor *t);
/* Tensor i of f has t's shape and dtype F32 (convert: or one that
 * st_read_as_f32 converts); 0, or -1 with a message. */
int ckpt_check_shape(const st_file *f, int i, const bk_tensor *t, int convert, char *err,
                     size_t errlen);

/* ---- ckpt_bin.c: the older checkpoint.bin ---- */

/* 1 if the file at path starts with checkpoint.bin's magic, else 0. */
int ckpt_bin_is(const char *path);
/* The message for a checkpoint.bin whose size does not fit P; returns -1. */
int ckpt_bin_size_error(const char *file, const ckpt_state *s, const bk_params *P, char *err,
                        size_t errlen);
/* ckpt_load of a checkpoint.bin file (params by position; m, v optional). */
int ckpt_bin_load(const char *file, const bk_params *P, float *params, float *m, float *v,
                  ckpt_meta *meta, char *err, size_t errlen);

#endif
