/* host — the generic loop's host in a process (pipelines/pipe.h's
 * pipe_host): wires a pipeline to this process's ranks (comm), its run
 * folder (checkpoints, metrics.jsonl, config.yaml) and the data. One
 * pipeline per call: a whole run (host_pipeline) or one stage of a larger one
 * (host_stage). It knows no pipeline by name and never picks one; that
 * is host/train.c. */
#ifndef HOST_H
#define HOST_H

#include <signal.h>

#include "common/cfg.h"
#include "worker/link/comm.h"
#include "worker/io/ckpt.h"
#include "worker/pipelines/pipe.h"

typedef struct train_opts {
    const char *out_dir;         /* metrics.jsonl, config.yaml, checkpoint; NULL = none */
    int resume;                  /* continue from out_dir's checkpoint when it exists */
    int force;                   /* start over: the new run writes into out_dir/.force-new
                                  * and is swapped in for the old run when its first
                                  * checkpoint is written (run/force.h); a run that fails
                                  * before leaves the old one as it was (s2s: its stream,
                                  * swapped at the first stage checkpoint or stage done) */
    int quiet;                   /* no progress lines on stderr */
    volatile sig_atomic_t *stop; /* set by SIGTERM: checkpoint and return TRAIN_PREEMPTED */
    comm_t *comm;                /* ranks of a data-parallel run (borrowed); NULL = one process */
} train_opts;

/* TRAIN_INPUT: the data, init.from / init.map (missing, not a checkpoint,
 * tensors that do not fit, inside --out) or the config cannot be used;
 * running again cannot help (bfd does not retry it). TRAIN_ERROR: anything else. */
enum { TRAIN_OK = 0, TRAIN_ERROR = -1, TRAIN_INPUT = -3, TRAIN_PREEMPTED = 2 };

/* Trains pipeline sp per c into o->out_dir; returns TRAIN_OK, TRAIN_PREEMPTED (stopped by *o->stop
 * after writing a checkpoint) or TRAIN_ERROR with a message. r nullable. Every rank calls this with
 * the same config; only rank 0 writes files and prints progress. A TRAIN_ERROR on one rank may
 * leave the others waiting in a collective: the caller must then end the job (comm_abort). */
int host_pipeline(const pipe_spec *sp, const bf_config *c, const train_opts *o, train_result *r,
                  char *err, size_t errlen);

/* One pipeline run inside a larger one (a stage of s2s): its checkpoint,
 * config.yaml and files in dir (always resumed when a checkpoint is there),
 * its metrics into the caller's mt under prefix ("teacher/") with steps
 * shifted by step_offset. d is opened by the caller. */
struct metrics;
typedef struct train_stage {
    const char *dir;
    const char *prefix;
    long step_offset;
    struct metrics *mt;
    /* nullable: called on rank 0 after each checkpoint the stage writes
     * (s2s's --force swaps its stream in at the first); non-zero fails the run */
    int (*saved)(void *ctx, char *err, size_t errlen);
    void *saved_ctx;
    /* nullable: the config keys a resume of the stage's checkpoint compares
     * (ckpt_config_check_keys); NULL compares every key */
    ckpt_key_filter counts;
    void *counts_ctx;
} train_stage;
int host_stage(const pipe_spec *sp, const bf_config *c, const train_opts *o, const train_stage *st,
               const data_sets *d, train_result *r, char *err, size_t errlen);

/* 0 unless init.from names out_dir or a file in it (a run there would write
 * over the weights it loads, and --force remove them first): -1 then, with a
 * message. */
int host_check_init_from(const bf_config *c, const char *out_dir, char *err, size_t errlen);

/* mkdir -p; 0 or -1 with a message. */
int host_make_dirs(const char *path, char *err, size_t errlen);

/* Opens the data on every rank, rank 0 first (it may train the tokenizer
 * and write the token cache), then the others read what it made. */
int host_open_data(const bf_config *c, comm_t *comm, int quiet, data_sets *d, char *err,
                   size_t errlen);

#endif
