/* s2s_chain.c — see s2s_chain.h: S2S's stages in order, each into its folder,
 * reused when done. The stages' names and keys are the declaration's
 * (common/pipeline_decl.c); the math of each stage is worker/pipelines/. */
#include "worker/host/s2s_chain.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/pipeline_decl.h"
#include "worker/io/ckpt.h"
#include "worker/link/metrics.h"
#include "worker/pipelines/profile.h"
#include "worker/pipelines/s2s.h"
#include "worker/host/force.h"

/* What the stages share. */
typedef struct s2s_ctx {
    const bf_config *c;
    const stage_graph *g; /* the declared stages (common/pipeline_decl.c) */
    const train_opts *o;
    stage_node st[STAGE_MAX]; /* by the graph's index; a stage the config skips has runs 0 */
    int runs[STAGE_MAX];
    int tstage; /* the teacher's stage: ST_AVIT, or ST_TEACHER (distill.teacher dense) */
    char prefix[STAGE_MAX][40]; /* metric names of stage i: "NAME/" */
    char root[3000];
    char dir[STAGE_MAX][3100];
    data_sets d;
    metrics mt;
    long offset; /* training steps of the stages before */
    int rank, quiet;
    int layers[MODEL_MAX_LAYERS], n_layers; /* the replaced layers (after profile) */
    double acc_student;                     /* eval: the student's test accuracy */
    int layers_told;                        /* auto:K's choice printed */
    /* --force: the new stream (metrics.jsonl, event file) is written into
     * OUT/.force-new and swapped in for the old run (run/force.h) at the
     * first stage checkpoint or stage done, or when the run ends well */
    int swap_pending, swap_begun;
} s2s_ctx;

/* --force's swap of the stream, once (rank 0; a no-op elsewhere or after). */
static int stream_swap(void *ctx, char *err, size_t errlen) {
    s2s_ctx *x = ctx;
    if (!x->swap_pending) return 0;
    if (force_swap(x->o->out_dir, &x->swap_begun, err, errlen)) return -1;
    metrics_moved(&x->mt, x->o->out_dir);
    x->swap_pending = 0;
    return 0;
}

/* The stages this driver runs, in the declaration's order (checked by
 * s2s_chain_train against pipeline_stages("s2s")); distill.teacher dense
 * skips ST_AVIT. */
enum { ST_TEACHER, ST_AVIT, ST_PROFILE, ST_DISTILL, ST_FINETUNE, ST_EVAL, S2S_STAGES };
static const char *const STAGE_NAMES[S2S_STAGES] = {"teacher", "avit",     "profile",
                                                    "distill", "finetune", "eval"};

static int is_done(const s2s_ctx *x, int i) {
    char p[3200];
    snprintf(p, sizeof p, "%s/stage.json", x->dir[i]);
    return access(p, R_OK) == 0;
}

/* stage.json, written last and renamed into place: the stage is done. */
static int mark_done(const s2s_ctx *x, int i, char *err, size_t errlen) {
    if (x->rank != 0) return 0;
    if (host_make_dirs(x->dir[i], err, errlen)) return -1;
    char p[3200], t[3300];
    snprintf(p, sizeof p, "%s/stage.json", x->dir[i]);
    snprintf(t, sizeof t, "%s.tmp%ld", p, (long)getpid());
    FILE *f = fopen(t, "w");
    int ok = f && fprintf(f, "{\"stage\": \"%s\", \"key\": \"%s\", \"parent\": \"%s\"",
                          x->st[i].name, x->st[i].key, x->st[i].parent) > 0;
    if (ok && i >= ST_DISTILL) { /* the student's replaced layers (auto:K resolved) */
        ok = fprintf(f, ", \"teacher\": \"%s\", \"mixer\": \"%s\", \"replaced_layers\": [",
                     x->c->distill.teacher, x->c->distill.mixer) > 0;
        for (int k = 0; ok && k < x->n_layers; k++)
            ok = fprintf(f, "%s%d", k ? ", " : "", x->layers[k]) > 0;
        ok = ok && fputs("]", f) >= 0;
    }
    ok = ok && fputs("}\n", f) >= 0;
    ok = f && fclose(f) == 0 && ok;
    if (!ok || rename(t, p) != 0) {
        snprintf(err, errlen, "cannot write %s: %s", p, strerror(errno));
        return -1;
    }
    return 0;
}

/* The config of a model stage: pipeline vit over c's data, model, train. */
static bf_config stage_config(const s2s_ctx *x, int i) {
    bf_config s = *x->c;
    snprintf(s.pipeline, sizeof s.pipeline, "vit");
    s.s2s.root[0] = s.s2s.stage[0] = 0;
    s.avit.enabled = i != ST_TEACHER && x->tstage == ST_AVIT; /* a dense teacher: none halts */
    if (i >= ST_DISTILL) {
        size_t w = 0;
        int kind = model_mixer_kind(x->c->distill.mixer);
        for (int l = 0; l < x->c->model.layers; l++) {
            int rep = 0;
            for (int k = 0; k < x->n_layers; k++) rep |= x->layers[k] == l;
            w += (size_t)snprintf(s.model.mixers + w, sizeof s.model.mixers - w, "%s%s",
                                  l ? "," : "", model_mixer_name(rep ? kind : 0));
        }
    }
    int parent = i == ST_DISTILL ? x->tstage : i - 1;
    while (parent > 0 && !x->runs[parent]) parent--; /* the stage before a skipped one */
    if (i != ST_TEACHER) {                           /* s2s_chain_train checked the folders fit */
        snprintf(s.init.from, sizeof s.init.from, "%.*s", (int)sizeof s.init.from - 1,
                 x->dir[parent]);
        s.init.map[0] = '\0'; /* the parent's names are bf's */
    }
    if (i == ST_AVIT) s.train.steps = x->c->avit.steps;
    if (i == ST_DISTILL) {
        s.train.steps = x->c->distill.stage1_steps > 0 ? x->c->distill.stage1_steps : 1;
        if (!x->c->distill.augment) { /* the former recipe: the images as they are */
            s.aug.crop_pad = 0;
            s.aug.hflip = 0;
        }
    }
    if (i == ST_FINETUNE) {
        s.train.steps = x->c->distill.stage2_steps > 0 ? x->c->distill.stage2_steps : 1;
        /* FAR fine-tunes at a tenth of its stage-1 lr (docs/s2s.md, "Stage 2") */
        s.train.lr =
            x->c->distill.finetune_lr > 0 ? x->c->distill.finetune_lr : 0.1f * x->c->train.lr;
        s.avit.ponder_weight = x->c->distill.finetune_ponder; /* FAR's stage 2: 0.1 x its */
        s.avit.prior_weight = x->c->distill.finetune_prior;   /* A-ViT terms */
    }
    if (i != ST_TEACHER && s.train.warmup > s.train.steps / 10) s.train.warmup = s.train.steps / 10;
    return s;
}

/* Which keys a resume of stage i's checkpoint compares: those stages 0..i
 * depend on, the ones its folder's key is made of. The other trials that
 * share the stage differ in the rest (a later stage's knobs), and a trial
 * that takes over a stopped or killed trial's stage continues it. */
typedef struct stage_keys {
    const stage_graph *g;
    const bf_config *c;
    int stage;
} stage_keys;

static int stage_key_counts(void *ctx, const char *key, size_t n) {
    const stage_keys *k = ctx;
    char name[128];
    if (n >= sizeof name) return 1; /* no such key in the schema: compared */
    memcpy(name, key, n);
    name[n] = '\0';
    for (int j = 0; j <= k->stage; j++)
        if (k->g->n > j && stage_graph_runs(k->g, k->c, j) &&
            stage_graph_depends(k->g, k->c, j, name))
            return 1;
    return 0;
}

static int run_train_stage(s2s_ctx *x, int i, const pipe_spec *sp, const bf_config *sc, char *err,
                           size_t errlen) {
    stage_keys keys = {x->g, x->c, i};
    train_stage ts = {x->dir[i], x->prefix[i],     x->offset, &x->mt, stream_swap,
                      x,         stage_key_counts, &keys};
    train_result r;
    int rc = host_stage(sp, sc, x->o, &ts, &x->d, &r, err, errlen);
    if (rc == TRAIN_ERROR || rc == TRAIN_INPUT) {
        char e2[1024];
        snprintf(e2, sizeof e2, "%s", err);
        snprintf(err, errlen, "stage %s: %s", x->st[i].name, e2);
    }
    return rc;
}

/* A model of stage i's shape, weights from the stage folder `from`;
 * infer_only as model_shape's (0 for the profile, which reads every layer's
 * attention maps). */
static int load_model(s2s_ctx *x, int i, const char *from, int batch, int infer_only, model *m,
                      char *err, size_t errlen) {
    bf_config sc = stage_config(x, i);
    const bk_backend *be;
    if (bk_select(sc.device, &be, err, errlen)) return -1;
    model_shape sh = pipe_model_shape(&sc, &x->d);
    sh.infer_only = infer_only;
    if (model_create(m, &sh, be, batch, err, errlen)) return -1;
    pipe_model_config(m, &sc);
    size_t n = m->np.P.numel;
    float *hp = malloc(n * sizeof(float));
    char text[1024];
    ckpt_init_report rep;
    int rc = -1;
    if (!hp) {
        snprintf(err, errlen, "out of memory");
    } else {
        m->be->to_host(hp, m->np.P.data, n * sizeof(float));
        if (ckpt_init_from(from, &m->np.P, hp, &rep, text, sizeof text, err, errlen) == 0) {
            m->be->to_device(m->np.P.data, hp, n * sizeof(float));
            for (int k = 0; k < rep.n_counters; k++) /* the A-ViT gate goes with the weights */
                model_take_counter(m, rep.counters[k].name, rep.counters[k].value);
            rc = 0;
        }
    }
    free(hp);
    if (rc) model_destroy(m);
    return rc;
}

/* The replaced layers: the list, or the K sparsest by the profile. */
static int choose_layers(s2s_ctx *x, char *err, size_t errlen) {
    const bf_config *c = x->c;
    if (c->distill.replace_auto <= 0) {
        x->n_layers = c->distill.n_replace;
        memcpy(x->layers, c->distill.replace_layers, (size_t)x->n_layers * sizeof(int));
        return 0;
    }
    char p[3200];
    snprintf(p, sizeof p, "%s/profile.json", x->dir[ST_PROFILE]);
    pipe_profile_t pr;
    if (pipe_profile_read(p, &pr, err, errlen)) return -1;
    if (pr.layers != c->model.layers) {
        snprintf(err, errlen, "%s: %d layers, the model has %d", p, pr.layers, c->model.layers);
        return -1;
    }
    x->n_layers = c->distill.replace_auto;
    memcpy(x->layers, pr.order, (size_t)x->n_layers * sizeof(int));
    if (!x->quiet && !x->layers_told) {
        fprintf(stderr, "stage distill: auto:%d replaces layer%s", x->n_layers,
                x->n_layers > 1 ? "s" : "");
        for (int k = 0; k < x->n_layers; k++) fprintf(stderr, "%s%d", k ? ", " : " ", x->layers[k]);
        fprintf(stderr, " (the sparsest by %s)\n", p);
        x->layers_told = 1;
    }
    return 0;
}

static int run_profile(s2s_ctx *x, char *err, size_t errlen) {
    model m;
    pipe_profile_t p;
    if (load_model(x, x->tstage, x->dir[x->tstage], 64, 0, &m, err, errlen)) return -1;
    int rc = pipe_profile(&m, x->c, &x->d, 64, &p, err, errlen);
    model_destroy(&m);
    if (rc || x->rank != 0) return rc;
    if (host_make_dirs(x->dir[ST_PROFILE], err, errlen)) return -1;
    char path[3200];
    snprintf(path, sizeof path, "%s/profile.json", x->dir[ST_PROFILE]);
    FILE *f = fopen(path, "w");
    if (f) pipe_profile_json(&p, f);
    if (!f || (ferror(f) | fclose(f))) {
        snprintf(err, errlen, "cannot write %s", path);
        return -1;
    }
    if (!x->quiet) pipe_profile_table(&p, stderr);
    return 0;
}

static int run_distill(s2s_ctx *x, char *err, size_t errlen) {
    bf_config sc = stage_config(x, ST_DISTILL);
    s2s_distill d;
    memset(&d, 0, sizeof d);
    d.mean_h = strcmp(sc.distill.halt_align, "mean_h") == 0;
    int batch = sc.train.batch / (x->o->comm ? comm_world(x->o->comm) : 1);
    if (load_model(x, x->tstage, x->dir[x->tstage], batch, 1, &d.teacher, err, errlen)) return -1;
    pipe_spec sp;
    int kind = model_mixer_kind(sc.distill.mixer);
    /* a dense teacher halts no token: nothing to align */
    float lambda_halt = x->tstage == ST_AVIT ? sc.distill.lambda_halt : 0.0f;
    int rc = s2s_distill_spec(&d, &sp, x->layers, x->n_layers, sc.distill.lambda_mse, lambda_halt,
                              sc.distill.label_smoothing, sc.distill.unfreeze, kind, err, errlen);
    if (!rc) rc = run_train_stage(x, ST_DISTILL, &sp, &sc, err, errlen);
    s2s_distill_free(&d);
    return rc;
}

/* ---- eval ---- */

/* The speed measurements at other lengths: batch 4, the fastest of 9
 * forwards per model; teacher and student, and the mixer pair, timed in
 * turns (s2s_speeds). The trained models on the test images: the first
 * EVAL_TRAINED_IMAGES of them at the training batch, the fastest of
 * EVAL_TRAINED_REPS per batch (s2s_split_speeds). */
#define EVAL_BATCH 4
#define EVAL_REPS 9
#define EVAL_TRAINED_IMAGES 1024
#define EVAL_TRAINED_REPS 5

static const char *name_of(const char *a, const char *b, const char *c2, int T) {
    static char *names[1024];
    static int n;
    char buf[400];
    if (T > 0)
        snprintf(buf, sizeof buf, "%s%s%s@%d", a, b, c2, T);
    else
        snprintf(buf, sizeof buf, "%s%s%s", a, b, c2);
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], buf) == 0) return names[i];
    if (n == 1024 || !(names[n] = strdup(buf))) return "eval/overflow";
    return names[n++];
}

/* Bare module timings already taken for one (width, batch): the same
 * module at the same N is timed once. */
typedef struct module_cache {
    int kind[256], N[256], n;
    double ms[256];
} module_cache;

static int module_ms(module_cache *mc, const model_shape *sh, const bk_backend *be, int kind, int N,
                     int C, int B, const bf_config *c, double *ms, char *err, size_t errlen) {
    for (int i = 0; i < mc->n; i++)
        if (mc->kind[i] == kind && mc->N[i] == N) return *ms = mc->ms[i], 0;
    if (s2s_module_ms(sh, be, kind, N, C, B, c->s2s.speed_warmup, c->s2s.speed_reps, ms, err,
                      errlen))
        return -1;
    if (mc->n < 256) mc->kind[mc->n] = kind, mc->N[mc->n] = N, mc->ms[mc->n++] = *ms;
    return 0;
}

/* Speed as the S2S paper states it (docs/s2s.md): (a) each bare module,
 * attention and every mixer of the table, at N = round(T x retention)
 * (the student's, on the test images) for each width and batch of the
 * grid; (b) the whole-model speed-up of the student over the dense ViT at
 * 577 tokens composed from them: L attention modules at 577 against the
 * student's layers, each at its own retained N (1 + round(576 keep_l),
 * keep_l the student's per layer), a replaced layer as the mixer, the rest
 * as attention; for each mixer, as if the student's replaced layers held
 * it. */
static int eval_modules(s2s_ctx *x, const model_shape *student, double retention,
                        const pipe_profile_t *prof, const bk_backend *be, char *err,
                        size_t errlen) {
    static const int lengths[] = {197, 577, 1025};
    const bf_config *c = x->c;
    int W[CFG_SPEED_MAX], Bs[CFG_SPEED_MAX], L = student->layers;
    char why[256], nm[160];
    int nw = cfg_int_list(c->s2s.speed_widths, W, CFG_SPEED_MAX, 8, 16384, why, sizeof why);
    if (nw < 0) return snprintf(err, errlen, "s2s.speed_widths: %s", why), -1;
    int nb = cfg_int_list(c->s2s.speed_batches, Bs, CFG_SPEED_MAX, 1, 4096, why, sizeof why);
    if (nb < 0) return snprintf(err, errlen, "s2s.speed_batches: %s", why), -1;
    int replaced[MODEL_MAX_LAYERS] = {0}, NL[MODEL_MAX_LAYERS];
    for (int k = 0; k < x->n_layers; k++) replaced[x->layers[k]] = 1;
    for (int l = 0; l < L; l++) {
        NL[l] = 1 + (int)lround(576 * prof->l[l].keep);
        if (NL[l] < 2) NL[l] = 2;
    }
    for (size_t t = 0; t < sizeof lengths / sizeof *lengths; t++) {
        int N = (int)lround(lengths[t] * retention);
        metrics_add(&x->mt, name_of("eval/module/tokens", "", "", lengths[t]), N < 2 ? 2 : N);
    }
    for (int wi = 0; wi < nw; wi++)
        for (int bi = 0; bi < nb; bi++) {
            metrics_flush(&x->mt); /* a line per grid cell: a line holds METRICS_MAX_POINTS */
            metrics_begin(&x->mt, x->offset);
            module_cache mc = {.n = 0};
            int C = W[wi], B = Bs[bi];
            for (size_t t = 0; t < sizeof lengths / sizeof *lengths; t++) {
                int T = lengths[t], N = (int)lround(T * retention);
                if (N < 2) N = 2;
                double att, ms;
                if (module_ms(&mc, student, be, MODEL_MIXER_ATTENTION, N, C, B, c, &att, err,
                              errlen))
                    return -1;
                snprintf(nm, sizeof nm, "eval/module/d%d/b%d/attention_ms", C, B);
                metrics_add(&x->mt, name_of(nm, "", "", T), att);
                if (!x->quiet)
                    fprintf(stderr,
                            "eval  module d %d batch %d, %d tokens (N %d) | attention %.3f ms", C,
                            B, T, N, att);
                for (int k = MODEL_MIXER_ATTENTION + 1; k <= MODEL_MIXER_LAST; k++) {
                    if (module_ms(&mc, student, be, k, N, C, B, c, &ms, err, errlen)) return -1;
                    snprintf(nm, sizeof nm, "eval/module/d%d/b%d/%s_ms", C, B, model_mixer_name(k));
                    metrics_add(&x->mt, name_of(nm, "", "", T), ms);
                    snprintf(nm, sizeof nm, "eval/module/d%d/b%d/%s_speedup", C, B,
                             model_mixer_name(k));
                    metrics_add(&x->mt, name_of(nm, "", "", T), att / ms);
                    if (!x->quiet)
                        fprintf(stderr, " | %s %.3f ms (%.2fx)", model_mixer_name(k), ms, att / ms);
                }
                if (!x->quiet) fputc('\n', stderr);
            }
            double dense, mix[MODEL_MIXER_LAST + 1] = {0};
            if (module_ms(&mc, student, be, MODEL_MIXER_ATTENTION, 577, C, B, c, &dense, err,
                          errlen))
                return -1;
            for (int l = 0; l < L; l++)
                for (int k = MODEL_MIXER_ATTENTION + 1; k <= MODEL_MIXER_LAST; k++) {
                    double ms;
                    if (module_ms(&mc, student, be, replaced[l] ? k : MODEL_MIXER_ATTENTION, NL[l],
                                  C, B, c, &ms, err, errlen))
                        return -1;
                    mix[k] += ms;
                }
            if (!x->quiet)
                fprintf(stderr, "eval  estimate d %d batch %d, 577 tokens | student over dense:", C,
                        B);
            for (int k = MODEL_MIXER_ATTENTION + 1; k <= MODEL_MIXER_LAST; k++) {
                snprintf(nm, sizeof nm, "eval/estimate/d%d/b%d/%s/speedup_vs_dense", C, B,
                         model_mixer_name(k));
                metrics_add(&x->mt, name_of(nm, "", "", 577), L * dense / mix[k]);
                if (!x->quiet)
                    fprintf(stderr, " %s %.2fx", model_mixer_name(k), L * dense / mix[k]);
            }
            if (!x->quiet) fputc('\n', stderr);
        }
    return 0;
}

static int run_eval(s2s_ctx *x, char *err, size_t errlen) {
    static const char *const who[] = {"dense", "teacher", "student"};
    const int stage[] = {ST_TEACHER, x->tstage, ST_FINETUNE}; /* dense: the teacher is it */
    static const int lengths[] = {197, 577, 1025};
    model_shape shape[3];
    double ret[3];
    model m[3];
    int open = 0, rc = 0, split = x->d.test ? 1 : 0;
    metrics_begin(&x->mt, x->offset);
    for (int k = 0; k < 3 && !rc; k++) {
        eval_result e;
        if (load_model(x, stage[k], x->dir[stage[k]], x->c->train.batch, 1, &m[k], err, errlen)) {
            rc = -1;
            break;
        }
        open = k + 1;
        shape[k] = m[k].sh;
        if (pipe_evaluate(&m[k], x->c, &x->d, split, NULL, &e, NULL, err, errlen)) {
            rc = -1;
            break;
        }
        ret[k] = shape[k].avit ? e.retention : 1.0;
        if (k == 2) x->acc_student = e.acc;
        metrics_add(&x->mt, name_of("eval/", who[k], "/test/acc", 0), e.acc);
        metrics_add(&x->mt, name_of("eval/", who[k], "/test/retention", 0), ret[k]);
        metrics_add(&x->mt, name_of("eval/", who[k], "/images_per_s", 0),
                    e.seconds > 0 ? e.samples / e.seconds : 0);
        if (!x->quiet)
            fprintf(stderr, "eval  %-7s | test/acc %.4f | retention %.3f | %.0f images/s\n", who[k],
                    e.acc, ret[k], e.seconds > 0 ? e.samples / e.seconds : 0);
    }
    /* the trained models on the test images, their own halting, in turns */
    double tips[3], tret[3], images = 0;
    model *const mp[3] = {&m[0], &m[1], &m[2]};
    if (!rc)
        rc = s2s_split_speeds(mp, 3, x->c, &x->d, split, EVAL_TRAINED_IMAGES, EVAL_TRAINED_REPS,
                              tips, tret, &images, err, errlen);
    for (int k = 0; k < open; k++) model_destroy(&m[k]);
    if (rc) return -1;
    /* the student's keep per layer (its profile: a model that keeps its
     * attention maps), for the module estimate */
    pipe_profile_t prof;
    if (load_model(x, ST_FINETUNE, x->dir[ST_FINETUNE], x->c->train.batch, 0, &m[2], err, errlen))
        return -1;
    rc = pipe_profile(&m[2], x->c, &x->d, x->c->train.batch, &prof, err, errlen);
    model_destroy(&m[2]);
    if (rc) return -1;
    for (int k = 0; k < 3; k++) {
        metrics_add(&x->mt, name_of("eval/trained/", who[k], "/images_per_s", 0), tips[k]);
        metrics_add(&x->mt, name_of("eval/trained/", who[k], "/retention", 0), tret[k]);
    }
    metrics_add(&x->mt, "eval/trained/images", images);
    metrics_add(&x->mt, "eval/trained/teacher/speedup_vs_dense", tips[1] / tips[0]);
    metrics_add(&x->mt, "eval/trained/student/speedup_vs_teacher", tips[2] / tips[1]);
    metrics_add(&x->mt, "eval/trained/student/speedup_vs_dense", tips[2] / tips[0]);
    if (!x->quiet)
        fprintf(stderr,
                "eval  trained, %.0f %s images at %d tokens | images/s dense %.1f teacher %.1f "
                "(retention %.3f) student %.1f (retention %.3f; %.2fx the teacher)\n",
                images, split ? "test" : "validation", shape[0].seq_len, tips[0], tips[1], tret[1],
                tips[2], tret[2], tips[2] / tips[1]);

    const bk_backend *be;
    if (bk_select(x->c->device, &be, err, errlen)) return -1;
    int kind = model_mixer_kind(x->c->distill.mixer);
    char mixer_ms[32];
    snprintf(mixer_ms, sizeof mixer_ms, "%s_ms", model_mixer_name(kind));
    for (size_t t = 0; t < sizeof lengths / sizeof *lengths; t++) {
        int T = lengths[t];
        /* the dense model alone, then teacher and student in turns (their
         * ratio is the one reported; two models alive at a time, not three) */
        double ips[3], got[3], ma, mm;
        if (s2s_speeds(shape, ret, 1, be, T, EVAL_BATCH, EVAL_REPS, ips, got, err, errlen) ||
            s2s_speeds(shape + 1, ret + 1, 2, be, T, EVAL_BATCH, EVAL_REPS, ips + 1, got + 1, err,
                       errlen) ||
            s2s_mixer_ms(&shape[2], be, kind, T, EVAL_BATCH, EVAL_REPS, &ma, &mm, err, errlen))
            return -1;
        for (int k = 0; k < 3; k++)
            metrics_add(&x->mt, name_of("eval/", who[k], "/images_per_s", T), ips[k]);
        metrics_add(&x->mt, name_of("eval/", "student", "/speedup_vs_teacher", T), ips[2] / ips[1]);
        metrics_add(&x->mt, name_of("eval/", "student", "/speedup_vs_dense", T), ips[2] / ips[0]);
        metrics_add(&x->mt, name_of("eval/", "mixer", "/attention_ms", T), ma);
        metrics_add(&x->mt, name_of("eval/", "mixer/", mixer_ms, T), mm);
        metrics_add(&x->mt, name_of("eval/", "mixer", "/speedup", T), ma / mm);
        if (!x->quiet)
            fprintf(stderr,
                    "eval  %4d tokens | images/s dense %.1f teacher %.1f student %.1f (%.2fx the "
                    "teacher) | mixer alone: attention %.2f ms, %s %.2f ms (%.2fx)\n",
                    T, ips[0], ips[1], ips[2], ips[2] / ips[1], ma, model_mixer_name(kind), mm,
                    ma / mm);
    }
    if (eval_modules(x, &shape[2], tret[2], &prof, be, err, errlen)) return -1;
    metrics_flush(&x->mt);
    return metrics_status(&x->mt, err, errlen);
}

static int vit_retention_warn(const model *m, const bf_config *c, const eval_result *val, char *err,
                              size_t errlen) {
    char msg[1024];
    if (pipe_vit.check && pipe_vit.check(m, c, val, msg, sizeof msg))
        fprintf(stderr, "stage finetune: warning: %s\n", msg);
    (void)err, (void)errlen;
    return 0;
}

/* The A-ViT stage's check: vit's, naming the stage's length, avit.steps
 * (train.steps is the teacher's). */
static int avit_stage_check(const model *m, const bf_config *c, const eval_result *val, char *err,
                            size_t errlen) {
    return vit_retention_check(m, c, val, "avit.steps, this stage's length", err, errlen);
}

static int run_one(s2s_ctx *x, int i, char *err, size_t errlen) {
    if ((i == ST_DISTILL || i == ST_FINETUNE || i == ST_EVAL) && choose_layers(x, err, errlen))
        return -1;
    if (i == ST_PROFILE) return run_profile(x, err, errlen);
    if (i == ST_DISTILL) return run_distill(x, err, errlen);
    if (i == ST_EVAL) return run_eval(x, err, errlen);
    bf_config sc = stage_config(x, i);
    pipe_spec sp = pipe_vit;
    if (i == ST_FINETUNE) { /* the student's retention is reported (eval), not a target */
        sp.check = vit_retention_warn;
        sp.label_smoothing = sc.distill.label_smoothing; /* as stage 1's, FAR's recipe */
    }
    if (i == ST_AVIT) sp.check = avit_stage_check;
    return run_train_stage(x, i, &sp, &sc, err, errlen);
}

static long stage_steps(const bf_config *c, int i) {
    switch (i) {
    case ST_TEACHER:
        return c->train.steps;
    case ST_AVIT:
        return c->avit.steps;
    case ST_DISTILL:
        return c->distill.stage1_steps;
    case ST_FINETUNE:
        return c->distill.stage2_steps;
    default:
        return 0;
    }
}

int s2s_chain_train(const bf_config *c, const train_opts *o, train_result *r, char *err,
                    size_t errlen) {
    if (!o->out_dir) {
        snprintf(err, errlen, "pipeline s2s writes its stages into folders: give --out DIR");
        return TRAIN_ERROR;
    }
    s2s_ctx *x = calloc(1, sizeof *x);
    if (!x) {
        snprintf(err, errlen, "out of memory");
        return TRAIN_ERROR;
    }
    x->c = c;
    x->o = o;
    x->rank = o->comm ? comm_rank(o->comm) : 0;
    x->quiet = o->quiet || x->rank != 0;
    if (c->s2s.root[0])
        snprintf(x->root, sizeof x->root, "%s", c->s2s.root);
    else
        snprintf(x->root, sizeof x->root, "%s/stages", o->out_dir);
    const stage_graph *g = pipeline_stages("s2s");
    x->g = g;
    int same = g && g->n == S2S_STAGES;
    for (int i = 0; same && i < S2S_STAGES; i++) same = strcmp(g->names[i], STAGE_NAMES[i]) == 0;
    if (!same) {
        snprintf(err, errlen,
                 "pipeline s2s: the declared stages (common/pipeline_decl.c) are not the ones "
                 "this driver runs (%s, ..., %s)",
                 STAGE_NAMES[0], STAGE_NAMES[S2S_STAGES - 1]);
        free(x);
        return TRAIN_ERROR;
    }
    stage_node plan[STAGE_MAX];
    int planned = stage_graph_plan(g, c, plan);
    for (int i = 0; i < S2S_STAGES; i++) x->st[i].name = STAGE_NAMES[i];
    for (int k = 0; k < planned; k++) {
        x->st[plan[k].idx] = plan[k];
        x->runs[plan[k].idx] = 1;
    }
    x->tstage = x->runs[ST_AVIT] ? ST_AVIT : ST_TEACHER;
    for (int i = 0; i < S2S_STAGES; i++) {
        snprintf(x->prefix[i], sizeof x->prefix[i], "%s/", x->st[i].name);
        snprintf(x->dir[i], sizeof x->dir[i], "%s/%s", x->root, x->st[i].dir);
        if (strlen(x->dir[i]) >= sizeof c->init.from) {
            snprintf(err, errlen,
                     "the stage folder %.200s... is longer than %zu bytes: use a "
                     "shorter --out or s2s.root",
                     x->dir[i], sizeof c->init.from - 1);
            free(x);
            return TRAIN_ERROR;
        }
    }
    int only = c->s2s.stage[0] ? stage_graph_index(g, c->s2s.stage) : -1, rc = TRAIN_ERROR;
    if (c->s2s.stage[0] && only < 0) {
        char names[256];
        snprintf(err, errlen, "s2s.stage '%s' is not a stage (valid: %s)", c->s2s.stage,
                 stage_graph_list(g, names, sizeof names));
        free(x);
        return TRAIN_ERROR;
    }
    if (only >= 0 && !x->runs[only]) {
        snprintf(err, errlen, "s2s.stage '%s': distill.teacher %s runs no %s stage", c->s2s.stage,
                 c->distill.teacher, c->s2s.stage);
        free(x);
        return TRAIN_ERROR;
    }
    bf_config dc = stage_config(x, ST_TEACHER);
    if (host_check_init_from(c, o->out_dir, err, errlen)) {
        free(x);
        return TRAIN_INPUT;
    }
    if (x->rank == 0 &&
        (host_make_dirs(o->out_dir, err, errlen) || host_make_dirs(x->root, err, errlen))) {
        free(x);
        return TRAIN_ERROR;
    }
    if (host_open_data(&dc, o->comm, x->quiet, &x->d, err, errlen)) {
        free(x);
        return TRAIN_INPUT; /* as host_pipeline's: the data cannot be used */
    }
    /* the stages a --stage run needs are done, the data opened: only now is
     * a new stream begun (--force: beside the old run's, swapped in later) */
    for (int i = 0; only > 0 && i < only; i++)
        if (x->runs[i] && !is_done(x, i)) {
            snprintf(err, errlen,
                     "stage %s needs stage %s (%s) done first: %s/stage.json is missing",
                     x->st[only].name, x->st[i].name, x->st[i].key, x->dir[i]);
            goto out;
        }
    char staging[3100];
    snprintf(staging, sizeof staging, "%s/" FORCE_NEW, o->out_dir);
    const char *stream = x->rank != 0 ? NULL : o->force ? staging : o->out_dir;
    if (x->rank == 0 && o->force &&
        (force_discard(o->out_dir, err, errlen) || host_make_dirs(staging, err, errlen)))
        goto out;
    x->swap_pending = x->rank == 0 && o->force;
    if (metrics_open(&x->mt, stream, err, errlen)) goto out;
    for (int i = 0; i < S2S_STAGES; i++) {
        int last = only >= 0 ? only : S2S_STAGES - 1;
        if (i > last) break;
        if (!x->runs[i]) continue; /* the A-ViT stage of a dense teacher */
        if (is_done(x, i)) {
            if (!x->quiet && (only < 0 || i == only))
                fprintf(stderr, "stage %-8s %s: done, reusing %s\n", x->st[i].name, x->st[i].key,
                        x->dir[i]);
            x->offset += stage_steps(c, i);
            continue;
        }
        if (only >= 0 && i < only) {
            snprintf(err, errlen,
                     "stage %s needs stage %s (%s) done first: %s/stage.json is missing",
                     x->st[only].name, x->st[i].name, x->st[i].key, x->dir[i]);
            goto out;
        }
        if (!x->quiet)
            fprintf(stderr, "stage %-8s %s: running into %s\n", x->st[i].name, x->st[i].key,
                    x->dir[i]);
        int src = run_one(x, i, err, errlen);
        if (src != TRAIN_OK) {
            rc = src == TRAIN_PREEMPTED || src == TRAIN_INPUT ? src : TRAIN_ERROR;
            goto out;
        }
        if (mark_done(x, i, err, errlen) || (x->rank == 0 && stream_swap(x, err, errlen))) goto out;
        x->offset += stage_steps(c, i);
    }
    if (x->rank == 0 && stream_swap(x, err, errlen)) goto out; /* every stage was reused */
    rc = TRAIN_OK;
    if (r) {
        memset(r, 0, sizeof *r);
        r->steps = x->offset;
        r->test.acc = x->acc_student;
    }
out:
    if (rc == TRAIN_ERROR || rc == TRAIN_INPUT)
        metrics_close_failed(&x->mt); /* a run that failed before its first point leaves none */
    else
        metrics_close(&x->mt);
    /* --force that ended before its swap: the old run stays as it was, the
     * new stream goes (a swap begun and failed is left for force_recover) */
    char e2[512];
    if (x->swap_pending && !x->swap_begun && force_discard(o->out_dir, e2, sizeof e2) && !x->quiet)
        fprintf(stderr, "bfworker: %s\n", e2);
    data_sets_close(&x->d);
    free(x);
    return rc;
}
