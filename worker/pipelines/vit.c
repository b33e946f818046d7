/* vit — the ViT image classifier pipeline (docs/design.md#vit; models/vit.c):
 * Fashion-MNIST or any IDX image set, cross-entropy on the class token, the
 * augmentation keys aug.crop_pad and aug.hflip (set on the model by the
 * loop). With avit.enabled the model halts tokens (docs/design.md#a-vit-halting;
 * nn/nn_halt.h): the loss adds the ponder cost and the depth-prior KL whose
 * centre follows avit.retention under a PI controller, and the run fails at the end (after its
 * checkpoint is written) when the validation retention misses the target
 * by more than avit.tolerance. Metrics: train/loss, train/loss_task, train/acc, and
 * with A-ViT train/loss_ponder, train/loss_prior, train/retention and the
 * retention control's trace (train/prior_shift, train/ctl_error,
 * train/ctl_integral, train/ctl_gate); val/acc,
 * test/acc, test/images_per_s, and with A-ViT val/retention,
 * test/retention. */
#include <math.h>
#include <stdio.h>

#include "worker/pipelines/pipe.h"

static void vit_knobs(model *m, const bf_config *c, long step) { pipe_step_knobs(m, c, step); }

static const pipe_term VIT_TERMS[] = {{"train/loss_task", pipe_term_task, 0}};

static void vit_log(const model *m, const model_stats *st,
                    void (*metric)(void *ctx, const char *name, double value), void *ctx) {
    if (!m->sh.avit || m->ext_used) return; /* under given masks (distill) it halts not itself */
    metric(ctx, "train/loss_ponder", st->loss_ponder);
    metric(ctx, "train/loss_prior", st->loss_prior);
    metric(ctx, "train/retention", st->retention);
    metric(ctx, "train/prior_shift", m->halt.cf.shift);
    metric(ctx, "train/ctl_error", m->halt.cf.error);
    metric(ctx, "train/ctl_integral", m->halt.cf.integral);
    metric(ctx, "train/ctl_gate", m->halt.cf.gate);
}

/* Retention control (docs/design.md#a-vit-halting): the halting losses pull
 * each token's ACT weights towards the prior, but the depth at which tokens
 * halt also depends on how the scores are spread and lags the prior by tens
 * of steps, so after each logging window a PI controller moves the prior's
 * centre from the window's retention error e = target - reached:
 *   I     += KI * L * e * steps / VIT_CTL_STEPS     (held while the shift is at its clamp)
 *   shift  = clamp(KP * L * e + I, -L, L)           layers
 * L turns a retention error into layers (a token kept one more layer of L
 * raises the retention by 1/L). The gains were chosen on Fashion-MNIST
 * fine-tunes (docs/design.md#a-vit-halting has the choice): KI 0.4 made the
 * retention swing by 0.1 around its target, KP alone leaves an offset.
 * Where the scores saturate the clamped prior passes no gradient and the
 * retention stops following it; then the gate actuator moves the gate
 * centre g itself, which acts on the next forward whatever the gradients:
 * while the window's error is beyond avit.tolerance, of the sign of the
 * last window's, smaller than it by less than half the tolerance and larger
 * by less than the tolerance (the retention is not moving: a window's is
 * noisy by about 0.01; one that moves, even away, follows the prior),
 *   gate  += KG * L * e * steps / VIT_CTL_STEPS * 2^(k-1)   logits added to g
 * k the stalled windows since the retention was last within the tolerance
 * or crossed the target (at most VIT_GATE_STREAK: the search for the
 * saturation's edge doubles its step, as training moves the scores while
 * the gate moves), the gate clamped to +-VIT_GATE_MAX.
 * The shift, the integral, the gate, its streak, the last error and the window in
 * progress they are computed from are in the checkpoint (pipe_state's
 * counters): a resumed run controls as the run never stopped would; the
 * gate also goes with the weights to a run that starts from them. */
#define VIT_CTL_KP 0.5f
#define VIT_CTL_KI 0.2f
#define VIT_CTL_KG 2.0f
#define VIT_GATE_MAX 100.0f
#define VIT_GATE_STREAK 6.0f
#define VIT_CTL_STEPS 25.0

static void vit_window(model *m, const bf_config *c, const model_stats *st, double steps) {
    if (!m->sh.avit || st->retention <= 0) return;
    nn_halt_cfg *h = &m->halt.cf;
    float L = (float)m->sh.layers, e = (float)(c->avit.retention - st->retention);
    float i = h->integral + (float)(VIT_CTL_KI * L * e * steps / VIT_CTL_STEPS);
    float s = VIT_CTL_KP * L * e + i;
    if (s > L || s < -L) i = h->integral; /* anti-windup: no integrating past the clamp */
    s = VIT_CTL_KP * L * e + i;
    int away = e * h->error > 0 && fabsf(e) > c->avit.tolerance; /* short, on one side */
    float moved = fabsf(e) - fabsf(h->error);
    int stalled = away && moved > -0.5f * c->avit.tolerance && moved < c->avit.tolerance;
    h->streak = !away ? 0 : stalled ? fminf(h->streak + 1, VIT_GATE_STREAK) : h->streak;
    if (stalled) {
        float g =
            h->gate + (float)(VIT_CTL_KG * L * e * steps / VIT_CTL_STEPS) * exp2f(h->streak - 1);
        h->gate = g < -VIT_GATE_MAX ? -VIT_GATE_MAX : g > VIT_GATE_MAX ? VIT_GATE_MAX : g;
    }
    h->integral = i;
    h->error = e;
    h->shift = s < -L ? -L : s > L ? L : s;
}

int vit_retention_check(const model *m, const bf_config *c, const eval_result *val,
                        const char *length_key, char *err, size_t errlen) {
    if (!m->sh.avit || isnan(val->retention)) return 0;
    double r = c->avit.retention, got = val->retention;
    if (fabs(got - r) <= c->avit.tolerance) return 0;
    snprintf(err, errlen,
             "A-ViT reached retention %.3f on the validation set, not the %.2f asked (avit."
             "retention; avit.tolerance %.2f); its retention control ended at a prior shift of "
             "%.2f layers (integral %.2f; gate centre moved by %+.2f; last training window's error "
             "%+.3f, metrics "
             "train/ctl_*). The checkpoint is written. To move it: raise "
             "avit.prior_weight (now %g) to pull the halting depth to the target harder, %s "
             "avit.gate_center (now %g; lower halts sooner), or train longer (%s)",
             got, r, (double)c->avit.tolerance, (double)m->halt.cf.shift,
             (double)m->halt.cf.integral, (double)m->halt.cf.gate, (double)m->halt.cf.error,
             (double)c->avit.prior_weight, got > r ? "lower" : "raise", (double)c->avit.gate_center,
             length_key);
    return -1;
}

/* pipe_vit's check: a ViT run's length is train.steps. */
static int vit_check(const model *m, const bf_config *c, const eval_result *val, char *err,
                     size_t errlen) {
    return vit_retention_check(m, c, val, "train.steps", err, errlen);
}

const pipe_spec pipe_vit = {.name = "vit",
                            .model_kind = "vit classifier",
                            .terms = VIT_TERMS,
                            .n_terms = 1,
                            .knobs = vit_knobs,
                            .log_extra = vit_log,
                            .window = vit_window,
                            .check = vit_check,
                            .frozen = NULL,
                            .classify = 1};
