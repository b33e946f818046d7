/* cfg — the one config language: `bfworker train CONFIG.yaml`, a sweep's
 * `base`, and `--set key=value` overrides all go through the schema table in
 * cfg_schema.c, which is the single source of truth for keys, types, ranges
 * and defaults (the jobs module validates sweeps against the same table).
 *
 * Keys are dotted paths ("model.d_model"). Errors name the place
 * (FILE:LINE:COL, or "--set" for overrides) and, for an unknown key, the
 * nearest valid one.
 *
 * The files, each calling only those below it (cfg_priv.h is what they
 * share):
 *   cfg_set.c       --set, sweep parameters, defaults: one key at a time
 *   cfg_parse.c     YAML file/text/node -> bf_config, with positions
 *   cfg_validate.c  rules across keys        cfg_metrics.c  metric names
 *   cfg_format.c    canonical dump, hash     cfg_yaml.c     bounded YAML reader
 *   cfg_keys.c      lookups, did-you-mean    cfg_sched.c    schedules
 *   cfg_schema.c    the key table */
#ifndef CFG_H
#define CFG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CFG_PATH_MAX 512
#define CFG_NAME_MAX 64
#define CFG_MIXERS_MAX 1024 /* model.mixers: 64 layers of "attention," */
#define CFG_MAX_LAYERS 64
#define CFG_MAX_KEYS 128 /* rows the schema may have (test_cfg checks) */

/* Where a key's value came from, in the order the sources override each
 * other: the defaults, a config file, a sweep's base (and its top-level
 * config keys), a sweep parameter, `--set`. A source that sets any key of a
 * key group (cfg_key_group) replaces the whole group left by earlier
 * sources; keys of a group set on one level must agree (cfg_validate). */
typedef enum {
    CFG_LEVEL_DEFAULT = 0,
    CFG_LEVEL_FILE,
    CFG_LEVEL_BASE,
    CFG_LEVEL_PARAM,
    CFG_LEVEL_SET
} cfg_level;

typedef enum {
    CFG_SCHED_CONSTANT = 0,
    CFG_SCHED_LINEAR,
    CFG_SCHED_EXP,
    CFG_SCHED_COSINE
} cfg_sched_kind;

/* A value that moves from start to end over training progress p in [0,1]. */
typedef struct cfg_schedule {
    cfg_sched_kind kind;
    float start, end;
} cfg_schedule;

/* Value of a schedule at progress p (clamped to [0,1]). exp interpolates
 * geometrically (start*(end/start)^p; falls back to linear if either is <= 0),
 * cosine is end + (start-end)*(1+cos(pi p))/2. */
float cfg_schedule_at(const cfg_schedule *s, float p);
const char *cfg_sched_name(cfg_sched_kind k);

struct cfg_field;

typedef struct bf_config {
    char pipeline[CFG_NAME_MAX]; /* budgetformer | lm | vit | s2s */
    char device[CFG_NAME_MAX];   /* auto | cpu | cuda */
    struct {
        char set[CFG_NAME_MAX]; /* prepared set by name: wordnet | kjv | fashion_mnist, or "" */
        char train[CFG_PATH_MAX], val[CFG_PATH_MAX], test[CFG_PATH_MAX]; /* user TSV splits */
        char path[CFG_PATH_MAX];      /* lm: one UTF-8 text file */
        float val_fraction;           /* held out for validation: lm the corpus tail; vit, s2s and
                                         budgetformer without data.val items of the training file */
        char val_split[CFG_NAME_MAX]; /* stratified | tail: how those items are chosen */
        int split_seed;               /* the stratified sample's seed (not train.seed) */
        char dir[CFG_PATH_MAX];       /* where prepared sets live (default: $BF_DATA or ./data) */
        /* vit: own IDX image/label files (gzipped or not) */
        char train_images[CFG_PATH_MAX], train_labels[CFG_PATH_MAX];
        char test_images[CFG_PATH_MAX], test_labels[CFG_PATH_MAX];
    } data;
    struct {
        int layers, d_model, heads, seq_len, vocab;
        int patch; /* vit: patch side in pixels */
        /* per-layer mixer kinds, "attention,bimamba,..." ("" = all attention) */
        char mixers[CFG_MIXERS_MAX];
    } model;
    struct {
        int crop_pad; /* vit: random-crop padding in pixels (0 = off) */
        int hflip;    /* vit: random horizontal flip */
    } aug;
    struct {
        char out_proj[CFG_NAME_MAX]; /* dense | hadamard */
    } attn;
    struct {
        int enabled;
        float range[2]; /* [s_min, s_max] */
        cfg_schedule temperature, noise;
        float lambda_budget, lambda_entropy;
    } budget;
    struct {
        int enabled;
        float retention, gate_scale, gate_center, ponder_weight, prior_weight;
        float tolerance;           /* of the reached retention */
        int steps;                 /* s2s: the avit stage's steps */
        char prior[CFG_NAME_MAX];  /* paper | nvlabs | spend */
        char output[CFG_NAME_MAX]; /* act | freeze */
    } avit;
    struct {
        char mixer[CFG_NAME_MAX];   /* bimamba | bimamba2 | bilstm | bilstm_wide */
        char teacher[CFG_NAME_MAX]; /* avit | dense: whom the student is distilled from */
        int d_state;                /* bimamba2's SSD state size */
        int replace_auto;           /* K of "auto:K", or 0 when a list is given */
        int replace_layers[CFG_MAX_LAYERS];
        int n_replace;
        int stage1_steps, stage2_steps;
        float lambda_mse, lambda_halt;
        float finetune_lr;                     /* stage 2's peak lr (0 = 0.1 x train.lr) */
        float finetune_ponder, finetune_prior; /* stage 2's A-ViT loss weights */
        int unfreeze;
        int augment;           /* stage 1 sees aug.* (teacher and student the same images) */
        float label_smoothing; /* the training CE's, stages 1 and 2 */
        char halt_align[CFG_NAME_MAX]; /* keep | mean_h */
    } distill;
    struct {
        char root[CFG_PATH_MAX];          /* where stage folders NAME-KEY live ("" = OUT/stages) */
        char stage[CFG_NAME_MAX];         /* run only this stage ("" = every stage not done) */
        char speed_widths[CFG_NAME_MAX];  /* eval's bare module grid: widths "192,768" */
        char speed_batches[CFG_NAME_MAX]; /* and batches "1,8,16,32" */
        int speed_warmup, speed_reps;     /* forwards before timing, and timed */
    } s2s;
    struct {
        char from[CFG_PATH_MAX]; /* run folder, .safetensors or checkpoint.bin; "" = none */
        char map[CFG_PATH_MAX];  /* "": names as they are; "timm"; or a name-map file */
    } init;
    struct {
        int steps, batch;
        float lr;
        int warmup;
        float weight_decay, clip;
        uint64_t seed;
        int eval_every, checkpoint_every, log_every;
        char freeze[CFG_PATH_MAX];    /* comma-separated tensor-name prefixes trained frozen */
        char precision[CFG_NAME_MAX]; /* fp32 | bf16: the matrix products' inputs */
    } train;
    /* bookkeeping, never dumped or hashed: the level each key was last set
     * on (by schema row), and the level setters write now */
    unsigned char key_level[CFG_MAX_KEYS];
    unsigned char level;
    /* a data-source group that a later level replaced while it held two
     * sources of its own (data.set with data.train, ...): that level and the
     * two keys (schema rows), for cfg_validate; level 0 = none */
    unsigned char replaced_conflict_level, replaced_conflict_key[2];
} bf_config;

/* Fills every key with its default; later setters write at CFG_LEVEL_FILE. */
void cfg_defaults(bf_config *c);

/* The level (cfg_level) at which the setters below write into c from now
 * on; cfg_set always writes at CFG_LEVEL_SET. */
void cfg_set_level(bf_config *c, cfg_level level);

/* The key group of `key`: 1 for the data-source keys (data.set, data.train,
 * data.val, data.test, data.path, data.train_images, data.train_labels,
 * data.test_images, data.test_labels), 0 for a key in no group. */
int cfg_key_group(const char *key);

/* Copies key f's value from src into dst as set on `level`: when f is in a
 * group and dst holds keys of that group from an earlier level, they are
 * reset first (the group is replaced as a whole). How sweep parameters are
 * applied to a trial's config. */
void cfg_copy_key(bf_config *dst, const bf_config *src, const struct cfg_field *f, cfg_level level);

/* Reads the text of a plain YAML number as a finite double: 0, or -1 with
 * why[n] saying what it is instead ("'.nan' is NaN, not a number", "'1e400'
 * overflows a double (magnitude above 1.8e308)", "'1e-400' underflows to 0
 * (magnitude below 2.2e-308)", or "expected a number, got 'x'"). */
int cfg_parse_number(const char *text, double *out, char *why, size_t n);

/* Reads a YAML file (a mapping of sections, or dotted keys at top level) into
 * c, on top of what c already holds. Returns 0, or -1 with every error, one per line,
 * "FILE:LINE:COL: message" in err. Files over 1 MiB are refused. */
int cfg_load_file(bf_config *c, const char *path, char *err, size_t errlen);

/* The same for n bytes of YAML text held in memory (a checkpoint's or the
 * daemon's resolved config); `name` stands for the file in error positions. */
int cfg_load_text(bf_config *c, const char *text, size_t n, const char *name, char *err,
                  size_t errlen);

/* Applies one "key=value" override (value in YAML flow syntax: 3, 0.1, true,
 * [0.1, 0.3], {schedule: exp, start: 1, end: 0.1}). Returns 0 or -1 with
 * "--set KEY: message". */
int cfg_set(bf_config *c, const char *assignment, char *err, size_t errlen);

/* Sets one key from a YAML value given as flow text; `where` prefixes errors
 * (e.g. "sweep.yaml:12:7"). Used by the jobs module for sweep parameters. */
int cfg_set_value(bf_config *c, const char *key, const char *yaml_value, const char *where,
                  char *err, size_t errlen);

/* Cross-key checks (heads divide d_model, out_proj width valid, range inside
 * [0,1] and ordered, pipeline known, ...). Returns 0 or -1 with a message;
 * several problems are reported one per line ('\n'-separated). */
int cfg_validate(const bf_config *c, char *err, size_t errlen);

/* 1 when the trial of config c writes the metric `name` (e.g. "val/acc" for
 * budgetformer, "val/ppl" for lm), else 0; names[len] (may be NULL) gets the
 * comma-separated list of the names it writes. */
int cfg_metric_produced(const bf_config *c, const char *name, char *names, size_t len);

/* 1 when the trial of config c writes metric `name` before training ends
 * (what early stopping can judge: train/... every train.log_every steps,
 * val/... every train.eval_every steps unless that is 0 or not below
 * train.steps; never test/... or s2s's eval/...), else 0; names[len] (may be
 * NULL) gets those metrics, comma-separated ("" when none). */
int cfg_metric_during_training(const bf_config *c, const char *name, char *names, size_t len);

/* 1 if key is in the schema (exact dotted path), else 0. */
int cfg_key_known(const char *key);
/* The schema key nearest to key (edit distance), for "did you mean". */
const char *cfg_nearest_key(const char *key);
/* Levenshtein distance between a and b; (size_t)-1 when either is longer
 * than a key can be (256 bytes). */
size_t cfg_edit_distance(const char *a, const char *b);
/* The same when it is <= max; else some value > max, found sooner. */
size_t cfg_edit_distance_within(const char *a, const char *b, size_t max);

/* ---- Schema introspection (additions for jobs/ and docs) ---- */

typedef enum {
    CFG_T_INT,   /* int, range [min, max] */
    CFG_T_U64,   /* uint64_t, any non-negative integer */
    CFG_T_FLOAT, /* float, range [min, max] */
    CFG_T_BOOL,  /* int 0/1, written true | false */
    CFG_T_ENUM,  /* char[size], one of `choices` ("a|b|c") */
    CFG_T_STR,   /* char[size], a name or path */
    CFG_T_PAIR,  /* float[2], each in [min, max] */
    CFG_T_SCHED, /* cfg_schedule, start and end in [min, max] */
    CFG_T_LAYERS /* distill.replace_layers: [i, ...] (each in [min, max]) or auto:K */
} cfg_type;

/* One row of the schema table (common/cfg_schema.c). `def` is the default as
 * YAML flow text, applied through the same setter as user input. */
typedef struct cfg_field {
    const char *key;
    cfg_type type;
    size_t offset, size;
    double min, max; /* inclusive; min == max == 0 means unbounded */
    const char *def;
    const char *choices;
    const char *help;
    unsigned flags; /* CFG_F_* */
} cfg_field;

/* The key may differ between a checkpoint's config and the config that
 * resumes it: its value does not change what training computes (where data
 * lives, how often to log or save, where the first weights came from). The
 * resume check (ckpt_config_check, worker/io/ckpt_diff.c) skips these keys. */
#define CFG_F_RESUME_FREE 1u

size_t cfg_field_count(void);
const cfg_field *cfg_field_at(size_t i);                     /* NULL past the end */
const cfg_field *cfg_field_find(const char *key);            /* NULL if unknown */
const cfg_field *cfg_field_findn(const char *key, size_t n); /* key[0..n) */
const char *cfg_type_name(cfg_type t);                       /* "integer", "number", ... */
/* 1 if prefix is a section ("model", "budget", ...), else 0. */
int cfg_is_section(const char *prefix);

/* Error sink: called once per error with a complete "WHERE: message" line. */
typedef void (*cfg_error_fn)(void *ud, const char *msg);

struct yaml_document_s;
struct yaml_node_s;

/* Loads a YAML mapping node (sections or dotted keys, like a config file)
 * into c, reporting every error (not only the first) to fn with FILE:LINE:COL
 * positions. Returns the number of errors. `file` names the document in
 * messages. The document stays owned by the caller. Alias expansion is
 * capped (CFG_MAX_NODES visited nodes, depth CFG_MAX_DEPTH). */
#define CFG_MAX_NODES 100000
#define CFG_MAX_DEPTH 64
int cfg_load_node(bf_config *c, struct yaml_document_s *doc, struct yaml_node_s *map,
                  const char *file, cfg_error_fn fn, void *ud);
/* Visits every node reachable from the document root with aliases expanded,
 * and refuses the document (-1, "FILE:LINE:COL: message") past CFG_MAX_NODES
 * visits or CFG_MAX_DEPTH levels: an alias bomb or a self-containing alias is
 * refused before anything walks it. Returns 0 when the document is small. */
int cfg_yaml_check_expansion(struct yaml_document_s *doc, const char *file, char *err,
                             size_t errlen);
/* Parses len bytes of YAML into doc, which holds exactly one document after
 * 0 (an empty text yields a document with no root; yaml_document_delete it).
 * Refused with -1 and a message ("WHERE:LINE:COL: ..." when with_pos):
 * a syntax error, nesting deeper than CFG_MAX_DEPTH (found while parsing,
 * before the document is built, so the cost stays linear in len), or a
 * second document after '---'. Every YAML text from outside goes through it. */
int cfg_yaml_parse(struct yaml_document_s *doc, const char *text, size_t len, const char *where,
                   int with_pos, char *err, size_t errlen);
/* Sets one key from a YAML node; errors are "FILE:LINE:COL: message" at the
 * node's position. Returns 0 or -1. */
int cfg_set_node(bf_config *c, const char *key, struct yaml_document_s *doc,
                 struct yaml_node_s *node, const char *file, char *err, size_t errlen);
/* Formats one key's current value as canonical YAML flow text (as cfg_dump
 * writes it); returns bytes needed excluding NUL, or 0 for an unknown key. */
size_t cfg_format_value(const bf_config *c, const char *key, char *buf, size_t buflen);

/* Writes the resolved config as canonical YAML (every key, sorted, one per
 * line as "key: value"); returns bytes needed excluding NUL (snprintf-like). */
size_t cfg_dump(const bf_config *c, char *buf, size_t buflen);
/* Stable 64-bit hash of the canonical dump (FNV-1a), as 16 hex digits in out[17]. */
void cfg_hash(const bf_config *c, char out[17]);
/* The same hash of a dump already made (cfg_dump's n bytes): cfg_hash(c)
 * equals cfg_hash_text(dump of c). */
void cfg_hash_text(const char *dump, size_t n, char out[17]);

#ifdef __cplusplus
}
#endif
#define CFG_SPEED_MAX 8 /* entries of s2s.speed_widths and s2s.speed_batches */
/* A list of integers "a,b,c" (s2s.speed_widths, s2s.speed_batches): at most
 * max of them, each in [lo, hi], into out. Returns how many, or -1 with why
 * (what is wrong and what would do) written. */
int cfg_int_list(const char *text, int *out, int max, int lo, int hi, char *why, size_t n);

#endif
