/* cfg_schema.c — the config schema: every key users can type, with its
 * type, place in bf_config, range, default, help and flags (CFG_F_*: which
 * keys may differ on resume). This table is the single source of truth for
 * the cfg_*.c files (load, --set, validate, dump, hash), for sweep validation
 * in jobs/, for the resume check in worker/io, and for the key table in
 * docs/sweeps.md (`bfctl keys --markdown`). A new key is one row here. It
 * holds data only: lookups by name live in cfg_keys.c, and it never parses
 * or formats. */
#include "common/cfg.h"
#include "common/pipeline_decl.h" /* PIPELINE_CHOICES */

#include <stddef.h>

#define OFF(f) offsetof(bf_config, f), sizeof(((bf_config *)0)->f)
#define NOLIM 0.0, 0.0

static const cfg_field cfg_schema[] = {
    {"pipeline", CFG_T_ENUM, OFF(pipeline), NOLIM, "budgetformer", PIPELINE_CHOICES,
     "what a run trains: BudgetFormer classifier, decoder LM, ViT image classifier, or the S2S "
     "distillation",
     0},
    {"device", CFG_T_ENUM, OFF(device), NOLIM, "auto", "auto|cpu|cuda",
     "compute backend; auto picks CUDA when a GPU is present", CFG_F_RESUME_FREE},

    {"data.set", CFG_T_STR, OFF(data.set), NOLIM, "\"\"", NULL,
     "prepared set by name (wordnet, kjv, fashion_mnist), or empty for own files", 0},
    {"data.train", CFG_T_STR, OFF(data.train), NOLIM, "\"\"", NULL, "own training split (TSV)", 0},
    {"data.val", CFG_T_STR, OFF(data.val), NOLIM, "\"\"", NULL, "own validation split (TSV)", 0},
    {"data.test", CFG_T_STR, OFF(data.test), NOLIM, "\"\"", NULL, "own test split (TSV)", 0},
    {"data.path", CFG_T_STR, OFF(data.path), NOLIM, "\"\"", NULL,
     "lm: one UTF-8 text file, split by data.val_fraction", 0},
    {"data.val_fraction", CFG_T_FLOAT, OFF(data.val_fraction), 0.0, 0.5, "0.05", NULL,
     "fraction held out for validation: lm the corpus tail; vit, s2s: of the training images; "
     "budgetformer without data.val: of data.train",
     0},
    {"data.val_split", CFG_T_ENUM, OFF(data.val_split), NOLIM, "stratified", "stratified|tail",
     "how the validation items are taken from a labelled training file: a seeded sample of each "
     "class in proportion (stratified), or the file's last items (tail)",
     0},
    {"data.split_seed", CFG_T_INT, OFF(data.split_seed), 0, 2147483647, "1", NULL,
     "seed of the stratified validation sample (not train.seed: trials over train.seed share "
     "one split)",
     0},
    {"data.dir", CFG_T_STR, OFF(data.dir), NOLIM, "data", NULL,
     "where prepared sets live (default $BF_DATA, else ./data)", CFG_F_RESUME_FREE},
    {"data.train_images", CFG_T_STR, OFF(data.train_images), NOLIM, "\"\"", NULL,
     "vit: own training images (IDX u8 [n, rows, cols], gzipped or not)", 0},
    {"data.train_labels", CFG_T_STR, OFF(data.train_labels), NOLIM, "\"\"", NULL,
     "vit: own training labels (IDX u8 [n])", 0},
    {"data.test_images", CFG_T_STR, OFF(data.test_images), NOLIM, "\"\"", NULL,
     "vit: own test images (IDX u8 [n, rows, cols])", 0},
    {"data.test_labels", CFG_T_STR, OFF(data.test_labels), NOLIM, "\"\"", NULL,
     "vit: own test labels (IDX u8 [n])", 0},

    {"model.layers", CFG_T_INT, OFF(model.layers), 1, CFG_MAX_LAYERS, "4", NULL,
     "number of transformer blocks", 0},
    {"model.d_model", CFG_T_INT, OFF(model.d_model), 8, 16384, "128", NULL, "model width d", 0},
    {"model.heads", CFG_T_INT, OFF(model.heads), 1, 256, "8", NULL, "attention heads H", 0},
    {"model.seq_len", CFG_T_INT, OFF(model.seq_len), 1, 65536, "64", NULL,
     "tokens per example (context length)", 0},
    {"model.vocab", CFG_T_INT, OFF(model.vocab), 16, 1000000, "8192", NULL,
     "vocabulary size (the tokenizer's pieces; sentencepiece takes 16..1000000)", 0},
    {"model.patch", CFG_T_INT, OFF(model.patch), 1, 64, "4", NULL,
     "vit: patch side in pixels (must divide the image's rows and cols)", 0},
    {"model.mixers", CFG_T_STR, OFF(model.mixers), NOLIM, "\"\"", NULL,
     "per-layer mixer, comma list: attention | bimamba | bimamba2 | bilstm | bilstm_wide (\"\" "
     "or missing tail = attention; not for lm)",
     0},
    {"aug.crop_pad", CFG_T_INT, OFF(aug.crop_pad), 0, 16, "2", NULL,
     "vit: random crop after zero padding by this many pixels (0 = off)", 0},
    {"aug.hflip", CFG_T_BOOL, OFF(aug.hflip), NOLIM, "true", NULL,
     "vit: random horizontal flip of training images", 0},

    {"attn.out_proj", CFG_T_ENUM, OFF(attn.out_proj), NOLIM, "dense", "dense|hadamard",
     "attention output projection: dense W_O or fixed Walsh-Hadamard + scale/bias", 0},

    {"budget.enabled", CFG_T_BOOL, OFF(budget.enabled), NOLIM, "true", NULL,
     "adaptive head budgeting on (false: standard multi-head baseline)", 0},
    {"budget.range", CFG_T_PAIR, OFF(budget.range), 0.0, 1.0, "[0.3, 0.6]", NULL,
     "[s_min, s_max]: target band for the fraction of heads used", 0},
    {"budget.temperature", CFG_T_SCHED, OFF(budget.temperature), 1e-6, 1e6,
     "{schedule: exp, start: 1.0, end: 0.1}", NULL, "softmax temperature tau_t over training", 0},
    {"budget.noise", CFG_T_SCHED, OFF(budget.noise), 0.0, 1e6,
     "{schedule: linear, start: 1.0, end: 0.0}", NULL, "Gumbel noise scale sigma_t over training",
     0},
    {"budget.lambda_budget", CFG_T_FLOAT, OFF(budget.lambda_budget), 0.0, 1e6, "1.0", NULL,
     "weight of the budget-band loss", 0},
    {"budget.lambda_entropy", CFG_T_FLOAT, OFF(budget.lambda_entropy), 0.0, 1e6, "0.01", NULL,
     "weight of the annealed head-entropy term", 0},

    {"avit.enabled", CFG_T_BOOL, OFF(avit.enabled), NOLIM, "false", NULL,
     "A-ViT token halting after every block (vit; in s2s the avit stage turns it on)", 0},
    {"avit.gate_center", CFG_T_FLOAT, OFF(avit.gate_center), -1e4, 1e4, "3", NULL,
     "halting gate centre g: h = sigmoid(gate_scale * t0 - g)", 0},
    {"avit.steps", CFG_T_INT, OFF(avit.steps), 1, 100000000, "1000", NULL,
     "s2s: steps of the avit stage (fine-tuning the teacher with halting)", 0},
    {"avit.tolerance", CFG_T_FLOAT, OFF(avit.tolerance), 0.0, 1.0, "0.05", NULL,
     "how far the reached validation retention may be from avit.retention before the run "
     "fails",
     0},
    {"avit.retention", CFG_T_FLOAT, OFF(avit.retention), 0.01, 1.0, "0.7", NULL,
     "target token-retention ratio r (mean fraction of tokens active per layer)", 0},
    {"avit.gate_scale", CFG_T_FLOAT, OFF(avit.gate_scale), 1e-3, 1e4, "10", NULL,
     "halting gate scale gamma", 0},
    {"avit.ponder_weight", CFG_T_FLOAT, OFF(avit.ponder_weight), 0.0, 1e3, "5e-4", NULL,
     "ponder loss weight alpha_p", 0},
    {"avit.prior_weight", CFG_T_FLOAT, OFF(avit.prior_weight), 0.0, 1e3, "0.1", NULL,
     "depth-prior KL weight alpha_d", 0},
    {"avit.prior", CFG_T_ENUM, OFF(avit.prior), NOLIM, "paper", "paper|nvlabs|spend",
     "depth prior's q_l: paper = batch-mean halting score per layer, normalised, clamped to "
     "[0.01, 0.99] (A-ViT eq. 10), a halted token's score read on its frozen row; nvlabs = "
     "the same with a halted token scoring sigmoid(-gate_center), as NVlabs' zeroed rows; "
     "spend = h while running, the remainder where a token halts",
     0},
    {"avit.output", CFG_T_ENUM, OFF(avit.output), NOLIM, "act", "act|freeze",
     "trunk output: act = ACT weighted sum of each token's layer outputs "
     "(docs/design.md#a-vit-halting); freeze = "
     "the last layer's rows (a halted row frozen where it halted)",
     0},

    {"distill.teacher", CFG_T_ENUM, OFF(distill.teacher), NOLIM, "avit", "avit|dense",
     "whom the student is distilled from: avit = the A-ViT fine-tune, under its halting masks "
     "(S2S); dense = the dense ViT, no halting, no masks, no halting losses, and no A-ViT stage "
     "(FAR's replacement)",
     0},
    {"distill.mixer", CFG_T_ENUM, OFF(distill.mixer), NOLIM, "bimamba",
     "bimamba|bimamba2|bilstm|bilstm_wide",
     "sequential mixer that replaces attention layers (bimamba2, bilstm_wide: the S2S authors' "
     "layouts)",
     0},
    {"distill.d_state", CFG_T_INT, OFF(distill.d_state), 1, 1024, "128", NULL,
     "bimamba2: the Mamba-2 SSD state size N per direction (the authors' 128)", 0},
    {"distill.replace_layers", CFG_T_LAYERS, OFF(distill.replace_layers), 0, CFG_MAX_LAYERS - 1,
     "auto:3", NULL, "layers to replace: a list [9, 10, 11], or auto:K = the K sparsest", 0},
    {"distill.stage1_steps", CFG_T_INT, OFF(distill.stage1_steps), 0, 100000000, "1000", NULL,
     "steps of layer-aligned distillation (stage 1)", 0},
    {"distill.stage2_steps", CFG_T_INT, OFF(distill.stage2_steps), 0, 100000000, "1000", NULL,
     "steps of fine-tuning with the student's own halting (stage 2)", 0},
    {"distill.finetune_lr", CFG_T_FLOAT, OFF(distill.finetune_lr), 0.0, 10.0, "0", NULL,
     "stage 2's peak learning rate (0 = 0.1 x train.lr, as FAR's recipe; the former recipe: "
     "train.lr's value)",
     0},
    {"distill.lambda_mse", CFG_T_FLOAT, OFF(distill.lambda_mse), 0.0, 1e6, "1.0", NULL,
     "weight of the per-layer masked MSE", 0},
    {"distill.lambda_halt", CFG_T_FLOAT, OFF(distill.lambda_halt), 0.0, 1e6, "0.1", NULL,
     "weight of the halting-score MSE", 0},
    {"distill.halt_align", CFG_T_ENUM, OFF(distill.halt_align), NOLIM, "keep", "keep|mean_h",
     "halting alignment's second term: keep = 5 (keep_student - keep_teacher)^2 per layer "
     "(docs/design.md#distillation-loss); mean_h = 5 (mean h_student - mean h_teacher)^2",
     0},
    {"distill.unfreeze", CFG_T_BOOL, OFF(distill.unfreeze), NOLIM, "false", NULL,
     "train the non-replaced layers too in stage 1", 0},
    {"distill.finetune_ponder", CFG_T_FLOAT, OFF(distill.finetune_ponder), 0.0, 1e3, "5e-5", NULL,
     "stage 2's ponder loss weight (FAR: 0.1 x 5e-4; the former recipe: avit.ponder_weight's "
     "value)",
     0},
    {"distill.finetune_prior", CFG_T_FLOAT, OFF(distill.finetune_prior), 0.0, 1e3, "1e-4", NULL,
     "stage 2's depth-prior KL weight (FAR: 0.1 x 0.001; the former recipe: avit.prior_weight's "
     "value)",
     0},
    {"distill.augment", CFG_T_BOOL, OFF(distill.augment), NOLIM, "true", NULL,
     "augment stage 1's images as aug.* says, the teacher seeing the student's augmented image "
     "(false = the former recipe: stage 1 on the images as they are)",
     0},
    {"distill.label_smoothing", CFG_T_FLOAT, OFF(distill.label_smoothing), 0.0, 1.0, "0.1", NULL,
     "label smoothing of the training cross-entropy in stages 1 and 2 (FAR: 0.1; 0 = the plain "
     "CE)",
     0},

    {"s2s.root", CFG_T_STR, OFF(s2s.root), NOLIM, "\"\"", NULL,
     "s2s: folder of the stage outputs NAME-KEY/ (empty = OUT/stages; bfd: its data dir's "
     "stages/)",
     0},
    {"s2s.stage", CFG_T_STR, OFF(s2s.stage), NOLIM, "\"\"", NULL,
     "s2s: run only this stage (teacher, avit, profile, distill, finetune, eval; empty = all)", 0},
    {"s2s.speed_widths", CFG_T_STR, OFF(s2s.speed_widths), NOLIM, "192,768", NULL,
     "s2s eval: widths d of the bare module timings, a list (heads d/64, at least 1; the "
     "paper's DeiT-Tiny and -Base)",
     0},
    {"s2s.speed_batches", CFG_T_STR, OFF(s2s.speed_batches), NOLIM, "1,8,16,32", NULL,
     "s2s eval: batches of the bare module timings, a list", 0},
    {"s2s.speed_warmup", CFG_T_INT, OFF(s2s.speed_warmup), 0, 100000, "50", NULL,
     "s2s eval: forwards of each bare module before it is timed", 0},
    {"s2s.speed_reps", CFG_T_INT, OFF(s2s.speed_reps), 1, 1000000, "300", NULL,
     "s2s eval: timed forwards of each bare module (their mean is reported)", 0},

    {"init.from", CFG_T_STR, OFF(init.from), NOLIM, "\"\"", NULL,
     "start from another run's weights by tensor name: a run folder, a .safetensors file or a "
     "checkpoint.bin (empty = fresh init)",
     CFG_F_RESUME_FREE},
    {"init.map", CFG_T_STR, OFF(init.map), NOLIM, "\"\"", NULL,
     "rename init.from's tensors before matching: a file of 'their_name: our_name' lines, or "
     "timm (timm's ViT names; empty = none)",
     CFG_F_RESUME_FREE},

    {"train.steps", CFG_T_INT, OFF(train.steps), 1, 100000000, "3000", NULL, "optimizer steps", 0},
    {"train.batch", CFG_T_INT, OFF(train.batch), 1, 1048576, "64", NULL,
     "global batch size (examples per step)", 0},
    {"train.lr", CFG_T_FLOAT, OFF(train.lr), 1e-9, 10.0, "3e-4", NULL, "peak learning rate", 0},
    {"train.warmup", CFG_T_INT, OFF(train.warmup), 0, 100000000, "100", NULL, "linear warmup steps",
     0},
    {"train.weight_decay", CFG_T_FLOAT, OFF(train.weight_decay), 0.0, 10.0, "0.01", NULL,
     "AdamW weight decay", 0},
    {"train.clip", CFG_T_FLOAT, OFF(train.clip), 0.0, 1e6, "1.0", NULL,
     "gradient-norm clip (0 = off)", 0},
    {"train.seed", CFG_T_U64, OFF(train.seed), 0, 0, "1", NULL, "random seed (0 .. 2^64-1)", 0},
    {"train.eval_every", CFG_T_INT, OFF(train.eval_every), 0, 100000000, "500", NULL,
     "steps between evaluations (0 = only at the end)", CFG_F_RESUME_FREE},
    {"train.checkpoint_every", CFG_T_INT, OFF(train.checkpoint_every), 0, 100000000, "1000", NULL,
     "steps between checkpoints (0 = only at the end)", CFG_F_RESUME_FREE},
    {"train.log_every", CFG_T_INT, OFF(train.log_every), 1, 100000000, "50", NULL,
     "steps between train/* metric points", CFG_F_RESUME_FREE},
    {"train.freeze", CFG_T_STR, OFF(train.freeze), NOLIM, "\"\"", NULL,
     "tensors kept frozen: comma-separated name prefixes (e.g. \"tok_emb,blocks.0.\")", 0},
    {"train.precision", CFG_T_ENUM, OFF(train.precision), NOLIM, "fp32", "fp32|bf16",
     "matrix products: fp32, or bf16 inputs with fp32 sums and fp32 master weights (where the "
     "device has no bf16 products the run says why and trains in fp32)",
     0},
};

size_t cfg_field_count(void) { return sizeof(cfg_schema) / sizeof(cfg_schema[0]); }

const cfg_field *cfg_field_at(size_t i) { return i < cfg_field_count() ? &cfg_schema[i] : NULL; }
