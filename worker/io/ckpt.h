/* ckpt — checkpoints that hold everything needed to continue a run as if it
 * had never stopped (the resolved config, parameters, AdamW moments, step,
 * seed, data position and RNG counters), and starting a run from another
 * run's weights (init.from).
 *
 * Code: ckpt.c the set, ckpt_bin.c the older checkpoint.bin, ckpt_diff.c
 * the config check of a resume, ckpt_init.c init.from (ckpt_map.c its
 * init.map); ckpt_priv.h is what those files share with each other only.
 *
 * ---- The checkpoint set (format 3, written by ckpt_save) ----
 * Three files in the run folder DIR (docs/checkpoints.md):
 *   model.safetensors      the parameters by name (bk_params names), F32,
 *                          in bk_params buffer order; __metadata__: format
 *                          "bf", format_version "3", kind "model", set_id,
 *                          step, config_hash, config (the resolved config
 *                          text), n_floats, data_fnv1a64 (FNV-1a 64 of the
 *                          data section, 16 hex digits).
 *   optimizer.safetensors  AdamW moments "m.NAME" and "v.NAME" for every
 *                          parameter (all m first, then all v, each in buffer
 *                          order); the same metadata with kind "optimizer".
 *   state.json             {format, format_version, set_id, step, data_step,
 *                          seed (decimal string), config_hash, config,
 *                          n_floats, counters {name: decimal string},
 *                          files {name: {bytes, data_fnv1a64}}}.
 * set_id is 16 hex digits, new for every save; the three files of one save
 * carry the same one.
 *
 * Crash consistency. state.json is the commit record. ckpt_save:
 *   1. finishes a save that crashed after its commit (see 4),
 *   2. writes .model.safetensors.tmp and .optimizer.safetensors.tmp (each
 *      itself tmp + fsync + rename, so a tmp name holds a whole file or none),
 *   3. writes state.json by tmp + fsync + rename + fsync of DIR: the commit,
 *   4. renames the two .tmp files over their final names, fsyncs DIR,
 *   5. removes a checkpoint.bin of the older format (superseded).
 * A crash before 3 leaves the previous set whole (the .tmp files are not
 * named by its state.json); a crash between 3 and 4 leaves a committed set
 * whose data still sits under the .tmp names: ckpt_load takes a file from
 * its .tmp name when the final one carries another set_id, and the next
 * ckpt_save renames it into place first. A set whose files disagree in any
 * other way (set_id, step, config hash, size, data checksum: e.g. one file
 * copied from another run) is refused as torn, naming the files and what
 * differs. One writer per DIR (rank 0 of one run).
 *
 * ---- The older format (checkpoint.bin, versions 1 and 2) ----
 * One file, little-endian:
 *   header, 80 bytes: magic "BFCKPT\0\0" | u32 version | u32 reserved |
 *     u64 n_params | u64 step | u64 seed | u64 data_step | u64 cfg_len |
 *     u64 payload_fnv | u64 cfg_hash (FNV-1a of the cfg text from
 *     FNV1A64_SEED: not cfg_hash(), which starts from the published basis) |
 *     u64 header_fnv (FNV-1a of the 72 bytes before it)
 *   payload: cfg text (cfg_len bytes) | params | m | v (n_params floats each)
 * (version 1: a 72-byte header without cfg_hash). Its params, m and v are
 * flat, in bk_params buffer order (decayed tensors first, each group in
 * declaration order): ckpt_load and ckpt_init_from map it by position onto a
 * model whose bk_params has the same number of floats, and refuse it
 * otherwise; ckpt_convert rewrites one as a named set. ckpt_write/ckpt_read
 * remain for that file alone.
 *
 * Nothing in either format depends on the number of ranks that wrote it: the
 * state after step s is the same whatever the world size. Floats are stored
 * as the host's (little-endian) bytes. */
#ifndef CKPT_H
#define CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/bk_tensor.h"

#define CKPT_VERSION 2
#define CKPT_NAME "checkpoint.bin"
#define CKPT_MAX_CFG (1u << 20)
#define CKPT_SET_VERSION 3
#define CKPT_MODEL_FILE "model.safetensors"
#define CKPT_OPTIM_FILE "optimizer.safetensors"
#define CKPT_STATE_FILE "state.json"
#define CKPT_MAX_STATE (8u << 20) /* bytes of state.json read */
#define CKPT_MAX_COUNTERS 64
#define CKPT_COUNTER_NAME 48

typedef struct ckpt_state {
    uint64_t step;      /* optimiser steps done */
    uint64_t seed;      /* train.seed: every random stream derives from (seed, step) */
    uint64_t data_step; /* next global batch the data batcher produces */
    size_t n_params;
    float *params, *m, *v; /* host arrays of n_params (owned by whoever allocated) */
    char *cfg_text;        /* resolved config, NUL-terminated */
    uint64_t cfg_hash;     /* ckpt_read: FNV-1a of cfg_text as stored in the header */
} ckpt_state;

/* ---- the older format: checkpoint.bin ---- */

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
 * ("key: value"), ignoring the keys the schema marks CFG_F_RESUME_FREE
 * (common/cfg_schema.c): those that do not change the trajectory, such as
 * device, train.log_every or init.from (a resume takes its weights from the
 * checkpoint, whatever it says). Returns 0 when they agree, or -1 with a
 * message naming the first key that differs and both values. */
int ckpt_config_check(const char *ckpt_cfg, const char *cur_cfg, char *err, size_t errlen);

/* The same, over only the keys for which counts(ctx, key, length of key)
 * is non-zero (NULL: every key): a stage of a shared chain is the same run
 * for every trial whose config agrees on the keys the stage depends on,
 * whatever the rest of the trial's config says. */
typedef int (*ckpt_key_filter)(void *ctx, const char *key, size_t n);
int ckpt_config_check_keys(const char *ckpt_cfg, const char *cur_cfg, ckpt_key_filter counts,
                           void *ctx, char *err, size_t errlen);

/* ---- the checkpoint set (format 3) ---- */

/* A named 64-bit counter carried across a resume (an RNG stream position, a
 * data epoch, a pipeline stage): whatever the pipeline needs besides step. */
typedef struct ckpt_counter {
    char name[CKPT_COUNTER_NAME]; /* [A-Za-z0-9_.-], 1 to 47 bytes */
    uint64_t value;
} ckpt_counter;

/* What a checkpoint holds besides the tensors. */
typedef struct ckpt_meta {
    uint64_t step;      /* optimiser steps done */
    uint64_t seed;      /* train.seed */
    uint64_t data_step; /* next global batch the data batcher produces */
    char *cfg_text;     /* resolved config (cfg_dump), NUL-terminated, at most CKPT_MAX_CFG:
                           the caller's on save; allocated by ckpt_load (ckpt_meta_free) */
    uint64_t cfg_hash;  /* load: FNV-1a 64 of cfg_text (not cfg_hash()); save: computed */
    ckpt_counter counters[CKPT_MAX_COUNTERS];
    int n_counters;
    int format_version; /* load: 3 for a set, 1 or 2 for a checkpoint.bin */
    char set_id[17];    /* load: the set's id (empty for checkpoint.bin) */
} ckpt_meta;

typedef enum { CKPT_NONE = 0, CKPT_SET = 1, CKPT_OLD = 2 } ckpt_kind;

/* What dir holds: CKPT_SET (a state.json), else CKPT_OLD (a checkpoint.bin),
 * else CKPT_NONE (a fresh start; leftover .tmp files of a save that never
 * committed do not count). */
ckpt_kind ckpt_probe(const char *dir);

/* Saves a set into dir (which must exist) as the comment at the top says.
 * P gives names, shapes and offsets (after bk_params_alloc; only the
 * descriptors are read, never P->data). params, m and v are host arrays of
 * P->numel floats in P's buffer layout (tensor i at P->t[i].offset), owned
 * by the caller and only read. meta: step, seed, data_step, cfg_text,
 * counters (cfg_hash, format_version, set_id are ignored). Returns 0, or -1
 * with a message naming the file: a failure before the commit (bad input,
 * disk full, ...) leaves the previous set whole; one after it (a failed final
 * rename, said so in the message) leaves the new set committed and loadable
 * from its .tmp names. Not for two writers on one dir at once. */
int ckpt_save(const char *dir, const bk_params *P, const float *params, const float *m,
              const float *v, const ckpt_meta *meta, char *err, size_t errlen);

/* Loads dir's checkpoint for a resume: the set when there is one, else a
 * checkpoint.bin by position. Every tensor of P must be in the set with its
 * shape (and nothing else may be): a resume restores all or nothing; use
 * ckpt_init_from to load a subset. params, m, v: the caller's host arrays of
 * P->numel floats, filled in P's buffer layout; m and v may both be NULL
 * (weights only: the optimizer file is then not read). meta is filled;
 * meta->cfg_text is allocated (ckpt_meta_free), for ckpt_config_check;
 * an old checkpoint.bin has no counters (n_counters 0). dir is only read.
 * Returns 0, or -1 with a message naming the file and what failed (torn set,
 * checksum, missing, unexpected or misshapen tensor, an old checkpoint whose
 * size differs); the arrays may then be partly written. */
int ckpt_load(const char *dir, const bk_params *P, float *params, float *m, float *v,
              ckpt_meta *meta, char *err, size_t errlen);
void ckpt_meta_free(ckpt_meta *meta);

/* Rewrites an old checkpoint.bin (path: the file or its folder) as a set in
 * out_dir, naming its floats by position with P (which must have the same
 * number of floats: the model the old file was written for). The old file
 * is left alone unless out_dir is its own folder (then ckpt_save removes
 * it). Returns 0 or -1 with a message. */
int ckpt_convert(const char *old_path, const bk_params *P, const char *out_dir, char *err,
                 size_t errlen);

/* What ckpt_init_from did. */
typedef struct ckpt_init_report {
    int loaded;      /* tensors of the model filled from the file */
    int unmatched;   /* tensors in the file that the model does not have */
    int missing;     /* tensors of the model that the file does not have (left as they were) */
    size_t floats;   /* floats loaded */
    int by_position; /* 1: an old checkpoint.bin, mapped by position */
    int converted;   /* tensors converted to F32 (from F16, BF16 or F64) */
    char converted_from[64];                  /* their dtypes, "BF16" or "F16/F64" */
    char source[4096];                        /* the file read */
    ckpt_counter counters[CKPT_MAX_COUNTERS]; /* a run folder's set: its state's counters
                                                 (what travels with the weights, such as
                                                 the A-ViT gate, is the caller's to take) */
    int n_counters;
} ckpt_init_report;

/* init.from: fills host_params (P->numel floats in P's buffer layout, the
 * caller's, already initialised) from path: a run folder (its set's
 * model.safetensors, or its checkpoint.bin), a .safetensors file (any writer;
 * F32 tensors, or F16, BF16 and F64 ones converted: r->converted), or a
 * checkpoint.bin file. Tensors are matched by name; the
 * others keep their values. text gets a report for the log: counts, then the
 * unmatched and missing names (lists cut at textlen). A tensor with the same
 * name and another shape, a dtype other than those four, a file with no tensor in
 * common with the model, a damaged file and an old checkpoint of another
 * size are errors: -1 with a message naming the file (and the tensor with
 * both shapes), and host_params untouched (all of these are found before
 * anything is read; only a failing read midway leaves it partly written), and
 * a tensor holding NaN or Inf (named; host_params then partly written).
 * Returns 0 with r and text filled. The file is only read, never repaired. */
int ckpt_init_from(const char *path, const bk_params *P, float *host_params, ckpt_init_report *r,
                   char *text, size_t textlen, char *err, size_t errlen);

/* ckpt_init_from with init.map: map_spec "" or NULL (none), "timm" or a
 * file of "their_name: our_name" lines (worker/io/ckpt_map.h) renames the
 * file's tensors before matching; the report (text) names them as renamed.
 * A map does not apply to an older checkpoint.bin (no names). Two of the
 * file's tensors mapped to one name, a bad map file, and a shape the map
 * cannot convert (named, with why) are errors, found before anything is
 * read. */
int ckpt_init_from_map(const char *path, const char *map_spec, const bk_params *P,
                       float *host_params, ckpt_init_report *r, char *text, size_t textlen,
                       char *err, size_t errlen);

#endif
