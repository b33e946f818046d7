/* train — the training pipelines (budgetformer: encoder classifier; lm:
 * causal decoder) and their evaluation, driven by a resolved bf_config. */
#ifndef TRAIN_H
#define TRAIN_H

#include <signal.h>
#include <stdio.h>
#include <stdint.h>

#include "common/cfg.h"
#include "worker/comm.h"
#include "worker/data/data.h"
#include "worker/models/model.h"

typedef struct train_opts {
    const char *out_dir;         /* metrics.jsonl, config.yaml, checkpoint.bin; NULL = none */
    int resume;                  /* continue from out_dir/checkpoint.bin when it exists */
    int quiet;                   /* no progress lines on stderr */
    volatile sig_atomic_t *stop; /* set by SIGTERM: checkpoint and return TRAIN_PREEMPTED */
    comm_t *comm;                /* ranks of a data-parallel run (borrowed); NULL = one process */
} train_opts;

enum { TRAIN_OK = 0, TRAIN_ERROR = -1, TRAIN_PREEMPTED = 2 };

/* What one evaluation pass measured. */
typedef struct eval_result {
    double loss, acc, ppl, heads_used, attn_flops; /* means over samples (lm: over tokens) */
    double seconds;                                /* wall time of the model forward passes */
    double samples, tokens;
    double corr_s_len, corr_s_loss; /* budget only: Pearson r of mean s with length / loss */
} eval_result;

typedef struct train_result {
    eval_result val, test;
    double train_loss, tokens_per_s, final_s;
    long steps;
} train_result;

/* The data a pipeline trains on, tokenized. */
typedef struct pipe_data {
    tok_t *tok;
    data_tok_t *train, *val, *test; /* lm: train only, with val_start; val/test NULL */
    int n_classes;                  /* 0 for lm */
} pipe_data;

/* Resolves the data of c (a prepared set under data.dir, or the user's files),
 * trains or loads the tokenizer, and opens the tokenized sets (cached).
 * Progress goes to stderr unless quiet. Returns 0 or -1 with a message. */
int pipe_data_open(const bf_config *c, pipe_data *d, int quiet, char *err, size_t errlen);
void pipe_data_close(pipe_data *d);

/* The model shape a config describes over its data. */
model_shape train_model_shape(const bf_config *c, const pipe_data *d);

/* Trains per c; returns TRAIN_OK, TRAIN_PREEMPTED (stopped by *o->stop after
 * writing a checkpoint) or TRAIN_ERROR with a message. r nullable.
 * Data parallel (o->comm with W ranks): every rank calls this with the same
 * config; rank r trains on rows [r*B/W, (r+1)*B/W) of each global batch B,
 * gradients are averaged (weighted by counted targets) before clipping and
 * AdamW, so all ranks hold the same parameters. Only rank 0 writes files and
 * prints progress. All ranks stop at the same step when *o->stop is set on
 * any of them. A TRAIN_ERROR on one rank may leave the others waiting in a
 * collective: the caller must then end the job (comm_abort). */
int train_run(const bf_config *c, const train_opts *o, train_result *r, char *err, size_t errlen);

/* One pass over a split (split 0 = val, 1 = test; lm: the validation tail),
 * inference mode, in this process alone (no collectives). per_sample (nullable) gets one line per
 * sample: "s_mean<TAB>tokens<TAB>loss<TAB>correct". */
int train_evaluate(model *m, const bf_config *c, const pipe_data *d, int split, eval_result *out,
                   FILE *per_sample, char *err, size_t errlen);

#endif
