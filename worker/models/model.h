/* model — a transformer built from nn/ modules: an embedding (token +
 * learned positions), blocks[] (pre-LN, a mixer slot each), a final
 * LayerNorm and an architecture's head. One file per architecture says what
 * its head is and what its logits mean:
 *   models/encoder.c   encoder classifier (BudgetFormer and its baseline):
 *                      masked mean pool + linear classifier over B rows
 *   models/decoder.c   causal decoder LM: tied output embedding over B*T rows
 *   models/vit.c       DeiT-style ViT: its own input embedding (patches,
 *                      class token, positions), classifier on the class token
 * This file is the trunk they share: build, plan, forward, backward, the loss
 * and its statistics. Every op goes through the bk_backend table, so the same
 * model runs on CPU and CUDA; parameters live in one buffer (nn_params),
 * activations in one arena sized for a batch capacity.
 *
 * Tensor names (docs/checkpoints.md lists them per model):
 *   tok_emb.weight, pos_emb.weight, blocks.L.{ln1,ln2}.{weight,bias},
 *   blocks.L.attn.qkv.{weight,bias}, blocks.L.attn.out.{weight,bias} (dense)
 *   or blocks.L.attn.out.{alpha,beta} (hadamard), blocks.L.mlp.{fc,proj}.*,
 *   blocks.L.attn.{budget.fc,budget.out,scorer}.* (budget), ln_f.*, and
 *   head.{weight,bias} (encoder; the decoder's head is tok_emb); the vit has
 *   patch_emb.{weight,bias}, cls_token and pos_emb.weight in place of tok_emb. */
#ifndef MODEL_H
#define MODEL_H

#include <stdint.h>

#include "worker/nn/nn_block.h"
#include "worker/nn/nn_embed.h"
#include "worker/nn/nn_halt.h"

/* The mixer of a layer (model_shape.mixer): attention unless replaced. */
typedef enum {
    MODEL_MIXER_ATTENTION = 0,
    MODEL_MIXER_BIMAMBA,
    MODEL_MIXER_BILSTM,
    MODEL_MIXER_BILSTM_WIDE,
    MODEL_MIXER_BIMAMBA2,
    MODEL_MIXER_LAST = MODEL_MIXER_BIMAMBA2
} model_mixer;
#define MODEL_MAX_LAYERS 64

typedef struct model_shape {
    int layers, d_model, heads, seq_len, vocab;
    int n_classes;        /* encoder: classifier width; 0 = causal LM with tied embedding */
    int hadamard;         /* 1: Hadamard output projection, 0: dense W_O */
    int budget;           /* 1: BudgetFormer head budget in every attention layer */
    int patch;            /* vit: patch side (> 0 picks the ViT; seq_len = patches + 1) */
    int image_h, image_w; /* vit: input image size; the input ids are its pixels 0..255 */
    int avit;             /* vit: A-ViT token halting after every block (nn_halt.h) */
    /* per layer: model_mixer (0 = attention). A bimamba layer's own tensors
     * are blocks.L.mamba.*, a bilstm's blocks.L.lstm.*, a bilstm_wide's
     * blocks.L.lstm_wide.*, a bimamba2's blocks.L.mamba2.*
     * (model_mixer_prefix); all keep the
     * output projection's names blocks.L.attn.out.* (encoders only). */
    unsigned char mixer[MODEL_MAX_LAYERS];
    int d_state; /* bimamba2 layers: SSD state size (distill.d_state; 0 = 128) */
    /* 1: the model only runs inference (evaluation, speed probes, generation,
     * a distillation teacher): each attention layer's maps [B, heads, T, T]
     * live in the shared scratch instead of the layer's activations, so the
     * model holds one layer's maps, not every layer's (at 1025 tokens, batch
     * 64, d 64, 6 layers: 400 MB less). A training forward is refused. Not a
     * shape of the weights: checkpoints and stage keys ignore it. */
    int infer_only;
} model_shape;

/* "attention", "bimamba", "bilstm", "bilstm_wide", "bimamba2" ("?" out of
 * range) */
const char *model_mixer_name(int kind);
/* The model_mixer named name, or -1. */
int model_mixer_kind(const char *name);
/* The tensor prefix of a replaced layer's own weights under blocks.L.:
 * "mamba", "lstm", "lstm_wide", "mamba2" ("attn" for attention). */
const char *model_mixer_prefix(int kind);
/* Sets sh->mixer from a comma list of one kind per layer ("attention,
 * bimamba,bilstm"; "" leaves every layer attention). Returns 0 or -1 with a
 * message naming the entry and the valid kinds. */
int model_shape_mixers(model_shape *sh, const char *list, char *err, size_t errlen);

typedef nn_knobs model_knobs;
typedef nn_stats model_stats;

typedef struct model model;

/* What an architecture adds to the trunk (models/encoder.c, decoder.c). */
typedef struct model_arch {
    const char *name;
    /* declares the head's own tensors (after ln_f) */
    int (*declare_head)(model *m, char *err, size_t errlen);
    /* activations of the head for the model's capacity */
    void (*plan_head)(model *m, bk_arena *A);
    /* rows the loss is over for B samples, and the logits' width */
    int (*loss_rows)(const model *m, int B);
    int (*logit_width)(const model *m);
    /* logits[rows, V] from the final LayerNorm's output */
    void (*head_forward)(model *m, int B);
    /* dlnf += from dlogits (parameter gradients +=) */
    void (*head_backward)(model *m, int B);
    /* Optional: an input embedding of the architecture's own in place of the
     * trunk's nn_embed (token ids + positions). declare_input declares its
     * tensors (before the blocks); embed_forward writes x[0] from the host
     * input of B rows (returns 0 or -1 with a message on bad input);
     * embed_backward takes d x[0] (parameter gradients +=). */
    int (*declare_input)(model *m, char *err, size_t errlen);
    int (*embed_forward)(model *m, const int *in, int B, int training, char *err, size_t errlen);
    void (*embed_backward)(model *m, const float *dx0, int B);
    /* Optional: run once by model_create after the arena exists: host
     * staging and the architecture's constant device tensors (uploaded
     * here, never per step). Returns 0 or -1 with a message. */
    int (*setup)(model *m, char *err, size_t errlen);
} model_arch;

extern const model_arch MODEL_ENCODER, MODEL_DECODER, MODEL_VIT;

struct model {
    model_shape sh;
    const bk_backend *be;
    const model_arch *arch;
    nn_params np;
    nn_env env;
    nn_embed emb;
    nn_block *blocks;
    nn_layernorm lnf;
    nn_linear head; /* encoder classifier */
    /* vit (models/vit.c): patch embedding, class token, positions; device
     * patches [B*N, p*p], rows [1 + B*N, C] (class token then patch
     * embeddings) and their gradient, gather ids [B*T] into x[0], class-token
     * row ids [B]; host patches */
    nn_linear patch_emb;
    int cls_token, pos_emb;
    float *patches, *prow, *dprow, *h_patches;
    int *gather, *cls_rows, *h_gather;
    int aug_pad, aug_flip; /* vit training augmentation: crop padding, horizontal flip */
    int aug_infer;         /* augment inference forwards too, as drawn by kn (a
                              distillation teacher sees its student's images) */

    int B; /* batch capacity the arena was sized for */
    bk_arena A;
    nn_scratch S;
    nn_block_ws ws;
    float **x; /* [L+1] residual stream: x[0] embedding, x[l+1] block l's output */
    nn_ln_acts af;
    float *pooled, *logits, *probs, *losses;
    float *dres, *dlnf, *dpooled, *dlogits, *dlosses;
    int *ids, *targets;
    float *mask;
    float *h_mask;   /* [B,T] host copy of the last mask */
    int *h_targets;  /* [B] or [B,T] host copy of the last targets */
    float *h_logits; /* [rows,V'] host copy of the last logits */
    float *h_losses; /* [rows] host copy of the last per-row task losses */

    /* A-ViT (sh.avit): the halting state; its cf is set by the pipeline.
     * drop (default 1): inference computes only the active tokens of each
     * layer (gathered per sample, computed, scattered back); 0 runs the
     * masked computation training uses (for tests and the benchmark). */
    nn_halt halt;
    int drop;
    /* training forwards under these per-layer masks (device [B,T] each, e.g.
     * a teacher's) instead of the model's own halting; NULL = own. With
     * ext_infer inference does too (masked, not dropped; no retention). */
    float *const *ext_mask;
    const int *ext_ones; /* [layers] nullable: ext_mask[l] known all ones (nn_halt's ones) */
    int ext_infer;
    int ext_used;   /* the last forward ran under ext_mask */
    int trunk_only; /* 1: a forward stops after the blocks and halting (no final LayerNorm, head,
                       loss, statistics nor host copy): a frozen teacher whose halting masks, h
                       and attention outputs are read on the device (distill) */
    float label_smoothing;            /* training cross-entropy's label smoothing (0 = none) */
    float *xc, *yc, *cmask, *h_cmask; /* dropped layer: gathered rows, their mask */
    int *cidx, *h_cidx;
    double *dstats; /* device stats buffer, BK_STAT_SLOTS doubles (training adds into it) */

    model_knobs kn;
    model_stats st;
    int batch; /* rows in the current forward (<= B) */
    int time_attention;
    int stats_per_forward; /* 1 (default): a training forward resets the device stats and
                              reads them into st (one copy); 0: they accumulate until the
                              caller reads them (model_stats_fetch), st.counted only */
};

/* Device stats slots of the A-ViT terms (after the ones bk ops write). */
enum {
    MODEL_STAT_PONDER = BK_STAT_FIRST_FREE,
    MODEL_STAT_PRIOR,
    MODEL_STAT_KEEP,
    MODEL_STAT_FREE /* first slot a pipeline may use */
};

/* What a model needs, in bytes, before anything of its size is allocated. */
typedef struct model_mem {
    size_t params;          /* parameter count */
    size_t param_bytes;     /* values + gradients */
    size_t optimizer_bytes; /* AdamW moments (0 unless the caller sets them) */
    size_t act_bytes;       /* the activation arena for the batch capacity */
    size_t scratch_bytes;   /* transient memory shared by the modules */
    size_t host_bytes;      /* host copies (mask, targets, logits, losses) */
    int patch;              /* the shape's patch size (a ViT: > 0), for the advice */
} model_mem;

/* Declares m's tensors (names and shapes: model_count works) and sizes its
 * memory for shape sh and a batch capacity, allocating no buffer of the
 * model's size. Free m with model_destroy. Returns 0 or -1 with a message. */
int model_plan(model *m, const model_shape *sh, int batch_capacity, model_mem *mm, char *err,
               size_t errlen);
/* 0 when mm fits in what be can still allocate (or be cannot tell); else -1
 * with a message giving the bytes needed, part by part, and available. */
int model_mem_check(const model_mem *mm, const bk_backend *be, char *err, size_t errlen);
/* model_plan + model_mem_check; training adds the AdamW moments and the
 * host copies a checkpoint is staged in (parameters and both moments). */
int model_fits(const model_shape *sh, const bk_backend *be, int batch_capacity, int training,
               char *err, size_t errlen);

/* Builds the parameter layout for shape sh on backend be (call
 * model_init_weights next). The architecture follows from sh.n_classes.
 * Checks first that the model fits (model_mem_check): one that does not is
 * refused before anything of its size is allocated.
 * Returns 0, or -1 with a message (bad shape, invalid Hadamard width, out of
 * memory). */
int model_create(model *m, const model_shape *sh, const bk_backend *be, int batch_capacity,
                 char *err, size_t errlen);
void model_destroy(model *m);

/* GPT-2 style initialisation from seed: N(0, 0.02) weights, residual
 * projections scaled by 1/sqrt(2L), LayerNorm w = 1, b = 0, Hadamard alpha = 1,
 * beta = 0, budget output bias so that s starts mid-range (of kn.s_min,
 * kn.s_max at model_create). Returns 0 or -1 with a message. */
int model_init_weights(model *m, uint64_t seed, char *err, size_t errlen);

/* Forward over a batch of `batch` rows (<= capacity). ids [batch,T] token ids
 * (host), mask [batch,T] (host, 1 = token, NULL = all), targets (host):
 * encoder: [batch] class ids; lm: [batch,T] next-token ids, -1 = ignore.
 * training = 1 uses the noisy soft gate and saves what backward needs, and
 * copies nothing to the host (losses, accuracy and gate statistics add into
 * the device stats; see stats_per_forward); training = 0 uses the hard top-k
 * rule, computes only the selected heads and fills m->st on the host. Returns 0 or -1 with a
 * message (ids or targets out of range). */
int model_forward(model *m, const int *ids, const float *mask, const int *targets, int batch,
                  int training, char *err, size_t errlen);

/* The device stats buffer: zeroed; copied to the host (one copy) into
 * raw[BK_STAT_SLOTS]; and turned into means over `steps` training forwards
 * (losses and budget terms per step, loss_task per counted row). */
void model_stats_reset(model *m);
void model_stats_fetch(const model *m, double *raw);
void model_stats_means(const model *m, const double *raw, double steps, model_stats *st);

/* Backward of the last training forward: zeroes and fills the gradient buffer
 * with d(total loss)/d(parameters) (frozen tensors stay 0). */
void model_backward(model *m);

/* The attention module of block l (NULL when its mixer is another kind). */
nn_attn *model_attn(const model *m, int l);
/* The heads the last inference forward ran for sample b at layer l: writes
 * their ids, best first, into heads[H] and returns k. */
int model_selected_heads(const model *m, int l, int b, int *heads);
/* Predicted budget fraction s of sample b at layer l (last forward). */
float model_budget_s(const model *m, int l, int b);

/* Of row r of the last forward: the predicted class (argmax of its logits,
 * lowest on ties) and its task loss. Inference only (they read host copies). */
int model_prediction(const model *m, int r);
double model_row_loss(const model *m, int r);

/* Parameter count of the tensors whose names start with prefix. */
size_t model_count(const model *m, const char *prefix);

/* The name of the A-ViT gate actuator's state (nn_halt_cfg.gate) among a
 * checkpoint's counters: it goes with the weights, because the halting
 * they learned keeps its retention only at that gate centre. */
#define MODEL_COUNTER_GATE "halt.gate"

/* A counter of the run m's weights were loaded from (init.from, a stage's
 * parent, a run opened by a command): the gate actuator's state goes onto
 * m (an avit model; a float's bits); any other counter is that run's own
 * and is ignored. */
void model_take_counter(model *m, const char *name, uint64_t value);

#endif
