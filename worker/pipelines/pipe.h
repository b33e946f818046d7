/* pipe — the one training loop every pipeline configures, and evaluation.
 *
 * A pipeline (pipelines/budgetformer.c, lm.c) is a pipe_spec: which model
 * it builds, its schedules (the knobs set before each step), its loss terms
 * (each a metric name and where its value comes from: a term the model
 * computes, or an extra term on the model's taps that a pipeline adds), its
 * parameter groups (frozen prefixes), and how its evaluation is named. The
 * loop (pipe_loop.c) knows nothing of a particular pipeline, and nothing of
 * MPI, files or the daemon: those reach it through pipe_host, which the
 * worker's top layer (worker/host/train.c) fills with the collectives, the
 * checkpoint files and metrics.jsonl. */
#ifndef PIPE_H
#define PIPE_H

#include <signal.h>
#include <stdio.h>

#include "common/cfg.h"
#include "common/pipeline_decl.h" /* BF_PIPELINES */
#include "worker/data/data_sets.h"
#include "worker/models/model.h"

/* What one evaluation pass measured. */
typedef struct eval_result {
    double loss, acc, ppl, heads_used, attn_flops; /* means over samples (lm: over tokens) */
    double seconds;                                /* wall time of the model forward passes */
    double samples, tokens;
    double corr_s_len, corr_s_loss; /* budget only: Pearson r of mean s with length / loss */
    double retention;               /* A-ViT: mean fraction of patch tokens active per layer */
} eval_result;

typedef struct train_result {
    eval_result val, test;
    double train_loss, tokens_per_s, final_s;
    long steps;
} train_result;

/* A named 64-bit value of the training state besides the tensors and the
 * step (a float or double as its bits): the host stores it in the
 * checkpoint (ckpt_counter) and gives it back on resume. */
#define PIPE_MAX_COUNTERS 48
#define PIPE_COUNTER_NAME 48
typedef struct pipe_counter {
    char name[PIPE_COUNTER_NAME]; /* [A-Za-z0-9_.-] */
    uint64_t value;
} pipe_counter;

/* The state a checkpoint holds: parameters and AdamW moments on the
 * device, the steps done, and the loop's other state as counters (the
 * A-ViT retention controller's prior shift, and the logging window in
 * progress: its steps, tokens and device stats summed over ranks, which
 * the controller reads when the window ends). On save the loop fills
 * counters; on resume the host fills them from the checkpoint (none from
 * a checkpoint older than them: the controller starts from 0 then). */
typedef struct pipe_state {
    model *m;
    float *adam_m, *adam_v; /* device, m->np.P.numel each */
    long step;
    pipe_counter counters[PIPE_MAX_COUNTERS];
    int n_counters;
} pipe_state;

/* The process around the loop. Every hook is called on every rank unless
 * said otherwise; a NULL hook means one process (sums are identities). */
typedef struct pipe_host {
    void *ctx;
    int rank, world;
    int reduce_always; /* all-reduce gradients even on one rank (benchmarks) */
    /* v[n] summed over ranks, in place */
    int (*sum_f64)(void *ctx, double *v, int n, char *err, size_t errlen);
    /* the gradient buffer summed (mean = 0) or averaged (mean = 1) over ranks */
    int (*allreduce)(void *ctx, const bk_backend *be, float *g, size_t n, int mean, char *err,
                     size_t errlen);
    /* *any = whether flag is set on any rank */
    int (*any)(void *ctx, int flag, int *any, char *err, size_t errlen);
    /* collective watchdog off (0) around untimed waits, on (1) after */
    void (*watch)(void *ctx, int on);
    /* picks and sets up the device for this rank */
    int (*device)(void *ctx, const char *name, const bk_backend **be, char *err, size_t errlen);
    /* metrics of one step (rank 0 writes; others ignore) */
    void (*metric_begin)(void *ctx, long step);
    void (*metric)(void *ctx, const char *name, double value);
    int (*metric_flush)(void *ctx, char *err, size_t errlen);
    /* writes the state after s->step steps; every rank learns the outcome */
    int (*save)(void *ctx, const bf_config *c, const pipe_state *s, char *err, size_t errlen);
    /* restores the state when a checkpoint exists (*found = 1; s->step set) */
    int (*resume)(void *ctx, const bf_config *c, pipe_state *s, int *found, char *err,
                  size_t errlen);
    /* starts the weights from another run's (init.from); report says what matched */
    int (*init_from)(void *ctx, const bf_config *c, model *m, char *err, size_t errlen);
    /* the run has set up (data opened, model built, init.from loaded, a
     * checkpoint resumed) and is about to write its first file or metric:
     * the host makes the run folder here (--force: after removing the old
     * run's files), so a run refused for its inputs changes nothing on disk.
     * Called once, on every rank; nullable. */
    int (*begin)(void *ctx, const bf_config *c, char *err, size_t errlen);
    /* a file of the run for writing (rank 0), or NULL when the run has no folder */
    FILE *(*open_file)(void *ctx, const char *name);
    int has_files; /* the run has a folder: checkpoints are written */
} pipe_host;

/* One term of the training loss, as it is logged. */
typedef struct pipe_term {
    const char *metric;                     /* "train/loss_budget" */
    double (*value)(const model_stats *st); /* its value in the model's last forward */
    int budget_only;                        /* logged only when the model has the budget */
} pipe_term;

typedef struct pipe_spec {
    const char *name;       /* "budgetformer" */
    const char *model_kind; /* for the progress line */
    const pipe_term *terms; /* logged loss terms (train/loss is their sum) */
    int n_terms;
    /* sets the model's knobs (schedules) for step of c->train.steps */
    void (*knobs)(model *m, const bf_config *c, long step);
    /* extra train/ metrics of a logging window (st: its means) */
    void (*log_extra)(const model *m, const model_stats *st,
                      void (*metric)(void *ctx, const char *name, double value), void *ctx);
    /* after each logging window of `steps` steps, with its means (the same
     * on every rank), before log_extra: a pipeline's feedback on its knobs;
     * NULL = none */
    void (*window)(model *m, const bf_config *c, const model_stats *st, double steps);
    /* after the last step, checkpoint written and test done: -1 with a
     * message fails the run (e.g. a target it missed); NULL = none */
    int (*check)(const model *m, const bf_config *c, const eval_result *val, char *err,
                 size_t errlen);
    /* name prefixes of the tensors trained frozen (NULL-terminated; NULL = none) */
    const char *const *frozen;
    /* when set: the only prefixes that train (everything else frozen) */
    const char *const *trainable;
    int classify;          /* 1: accuracy metrics (encoder); 0: perplexity (lm) */
    float label_smoothing; /* of the training cross-entropy (S2S's stages; 0 = the plain CE) */
    /* A pipeline's own state and hooks around each training step (all
     * nullable): before_forward runs before the model's training forward
     * on the same batch (e.g. a teacher's forward), extra_backward after it
     * (it sets tap gradients of extra losses, see nn_block_tap_grad), and
     * log_ctx adds metrics to each logging window. */
    void *ctx;
    int (*before_forward)(void *ctx, model *m, const int *in, const int *targets, int rows,
                          char *err, size_t errlen);
    void (*extra_backward)(void *ctx, model *m);
    void (*log_ctx)(void *ctx, void (*metric)(void *mctx, const char *name, double value),
                    void *mctx);
    /* A pipeline's own held-out measures (val/ names), after each
     * validation pass and once before the first step of a run that starts
     * fresh; every rank calls it (h sums shards). Nullable. */
    int (*validate_ctx)(void *ctx, model *m, const bf_config *c, const data_sets *d,
                        const pipe_host *h,
                        void (*metric)(void *mctx, const char *name, double value), void *mctx,
                        char *err, size_t errlen);
} pipe_spec;

/* pipe_<name> for each pipeline of the table (common/pipeline_decl.h) that
 * trains through the loop: pipe_budgetformer, pipe_lm, pipe_vit. */
#define PIPE_DECLARE_loop(name) extern const pipe_spec pipe_##name;
#define PIPE_DECLARE_stages(name)
#define PIPE_DECLARE(name, driver, metric, maximize) PIPE_DECLARE_##driver(name)
BF_PIPELINES(PIPE_DECLARE)

/* pipe_vit's retention check (vit.c): 0 when A-ViT is off or reached
 * avit.retention within avit.tolerance, else -1 with advice in err, whose
 * "train longer" names length_key (train.steps; avit.steps for s2s's A-ViT
 * stage, whose length that is). */
int vit_retention_check(const model *m, const bf_config *c, const eval_result *val,
                        const char *length_key, char *err, size_t errlen);

/* The spec of a pipeline by name, or NULL (s2s: no spec, it runs in stages). */
const pipe_spec *pipe_find(const char *pipeline);
/* The names of the pipelines pipe_find knows, comma-separated, into buf[len]
 * ("budgetformer, lm, vit"): for the messages that list them. */
const char *pipe_names(char *buf, size_t len);

/* Sets the knobs every pipeline shares for step of c->train.steps (progress
 * t/T in [0,1], seed, step) and returns the progress. */
float pipe_step_knobs(model *m, const bf_config *c, long step);

/* The task loss term (cross-entropy), shared by every pipeline. */
double pipe_term_task(const model_stats *st);

/* Sets what the config says of a built model beyond its shape: the
 * augmentation, the budget range, the A-ViT halting knobs. */
void pipe_model_config(model *m, const bf_config *c);

/* Values per item the batcher cuts: model.seq_len tokens, or an image's
 * pixels (vit). */
int pipe_input_len(const bf_config *c, const data_sets *d);

/* An evaluation pass's batcher over split `set` (in order, no wrap; this
 * rank's shard of global batches of m->B per rank) and its batch buffer:
 * 0, or -1 with a message (nothing to free then). */
int pipe_eval_batcher(const model *m, const bf_config *c, const data_sets *d, const data_tok_t *set,
                      const pipe_host *h, data_batcher_t **bt, data_batch_t *b, char *err,
                      size_t errlen);

/* The model shape a config describes over its data. */
model_shape pipe_model_shape(const bf_config *c, const data_sets *d);

/* Trains per c on d (opened by the caller on every rank); returns 0, 2
 * (stopped by *stop after writing a checkpoint) or -1 with a message. Data
 * parallel through h: rank r trains on rows [r*B/W, (r+1)*B/W) of each global
 * batch B; gradients are averaged (weighted by counted targets) before
 * clipping and AdamW, so all ranks hold the same parameters. A -1 on one rank
 * may leave the others waiting in a collective: the caller ends the job. */
int pipe_train(const pipe_spec *sp, const bf_config *c, const data_sets *d, const pipe_host *h,
               volatile sig_atomic_t *stop, int quiet, train_result *r, char *err, size_t errlen);

/* One inference pass over a split (0 = val, 1 = test; lm: the validation
 * tail), this rank's rows of every batch; sums are added through h (NULL:
 * this process alone), so every rank gets the same result. per_sample
 * (nullable) gets "s_mean<TAB>tokens<TAB>loss<TAB>correct" per sample. */
int pipe_evaluate(model *m, const bf_config *c, const data_sets *d, int split, const pipe_host *h,
                  eval_result *out, FILE *per_sample, char *err, size_t errlen);

#endif
