/* The ops that keep a training step on the device (kernels/cpu_devstep.c,
 * bk.h "The step on the device") on the CPU backend:
 *  - the host<->device copy counters and fill32, and a small real step (linear layer,
 *    cross-entropy, its statistics, gradient norm, clipped AdamW) that copies
 *    nothing until the logging read of the stats buffer;
 *  - grad_norm / adamw_clipped against the host-side norm and clip of the
 *    train loop (bit for bit), and the skipped step on a non-finite norm;
 *  - crossentropy_stats by hand (ties, ignored and out-of-range targets) and
 *    against the host loop worker/model.c ran, the range-checked
 *    crossentropy ops, and crossentropy_dlosses;
 *  - the Gumbel stream: bk_log_exact correctly rounded on every input the
 *    stream draws, rng_gumbel = bk_rng_gumbel_at;
 *  - the oracle's ranks and budgets on cases worked out by hand;
 *  - the head gate against the host gate worker/model.c had before it moved
 *    to the device, its ranks and budget k derived anew from docs/design.md
 *    (bit for bit: gate, ranks, k, saved state, losses, gradients), its
 *    backward against finite differences
 *    (exact_gradient = 1) and the straight-through term, and the inference
 *    gate against model_selected_heads. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bk.h"
#include "kernels/bk_rng.h"
#include "tests/ref/gradcheck.h"

static const bk_backend *cpu;
static void init_cpu(void) { cpu = bk_cpu(); }

static void expect_bits(const char *what, const float *got, const float *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        cr_assert(memcmp(&got[i], &want[i], sizeof(float)) == 0,
                  "%s[%zu]: got %.9g, want %.9g (not the same bits)", what, i, (double)got[i],
                  (double)want[i]);
}

/* ---- the copy counter ---- */

Test(devstep, h2d_counter_counts_to_device_only, .init = init_cpu) {
    float dev[10] = {0}, host[10] = {0};
    uint64_t calls = 99, bytes = 99;
    cpu->h2d_reset();
    cpu->h2d_count(&calls, &bytes);
    cr_assert(calls == 0 && bytes == 0, "after reset: %llu calls", (unsigned long long)calls);
    cpu->to_device(dev, host, sizeof dev);
    cpu->to_device(dev, host, 0);
    cpu->to_host(host, dev, sizeof dev);
    cpu->copy(dev, dev + 5, 5 * sizeof(float));
    cpu->fill32(dev, 0x3f800000u, 10);
    cpu->h2d_count(&calls, &bytes);
    cr_assert(calls == 2 && bytes == sizeof dev, "two to_device: %llu calls %llu bytes",
              (unsigned long long)calls, (unsigned long long)bytes);
    cpu->h2d_reset();
    cpu->h2d_count(&calls, &bytes);
    cr_assert(calls == 0 && bytes == 0, "reset");
}

Test(devstep, fill32_writes_a_float_or_an_int_word, .init = init_cpu) {
    float f[7];
    int k[5];
    memset(f, 0, sizeof f);
    cpu->fill32(f, 0x3f800000u, 6);
    for (int i = 0; i < 6; i++) cr_expect_eq(f[i], 1.0f, "f[%d] = %g", i, (double)f[i]);
    cr_expect_eq(f[6], 0.0f, "past n untouched");
    cpu->fill32(k, 0xffffffffu, 5);
    for (int i = 0; i < 5; i++) cr_expect_eq(k[i], -1, "k[%d] = %d", i, k[i]);
}

Test(devstep, d2h_counter_counts_to_host_and_old_norm_only, .init = init_cpu) {
    float dev[10] = {0}, host[10];
    uint64_t calls = 99, bytes = 99;
    cpu->d2h_reset();
    cpu->d2h_count(&calls, &bytes);
    cr_assert(calls == 0 && bytes == 0, "after reset: %llu calls %llu bytes",
              (unsigned long long)calls, (unsigned long long)bytes);
    cpu->to_host(host, dev, sizeof dev);
    cpu->to_host(host, dev, 3 * sizeof(float));
    cpu->d2h_count(&calls, &bytes);
    cr_assert(calls == 2 && bytes == 13 * sizeof(float), "two to_host: %llu calls %llu bytes",
              (unsigned long long)calls, (unsigned long long)bytes);
    (void)cpu->global_norm(dev, 10); /* returns a device value to the host */
    cpu->d2h_count(&calls, NULL);
    cr_assert(calls == 3, "global_norm is a copy: %llu calls", (unsigned long long)calls);
    cpu->to_device(dev, host, sizeof dev);
    cpu->copy(dev, dev + 5, 5 * sizeof(float));
    cpu->zero(dev, sizeof dev);
    float norm;
    cpu->grad_norm(&norm, NULL, dev, 10);
    cpu->d2h_count(&calls, &bytes);
    cr_assert(calls == 3 && bytes == 14 * sizeof(float), "device-side ops copied: %llu calls",
              (unsigned long long)calls);
    cpu->d2h_reset();
    cpu->d2h_count(&calls, &bytes);
    cr_assert(calls == 0 && bytes == 0, "reset");
}

/* A real step of a linear classifier through the backend table: forward,
 * loss, statistics, backward, norm, update, five times, then the logging
 * read. Only the read copies. */
Test(devstep, small_training_step_copies_nothing_until_the_log, .init = init_cpu) {
    const bk_backend *be = cpu;
    enum { N = 6, IC = 5, V = 4, STEPS = 5 };
    float *x = be->alloc(N * IC * sizeof(float)), *w = be->alloc(V * IC * sizeof(float));
    float *logits = be->alloc(N * V * sizeof(float)), *probs = be->alloc(N * V * sizeof(float));
    float *losses = be->alloc(N * sizeof(float)), *dlosses = be->alloc(N * sizeof(float));
    float *dlogits = be->alloc(N * V * sizeof(float)), *dw = be->alloc(V * IC * sizeof(float));
    float *m = be->alloc(V * IC * sizeof(float)), *v = be->alloc(V * IC * sizeof(float));
    float *norm = be->alloc(sizeof(float));
    double *stats = be->alloc(BK_STAT_SLOTS * sizeof(double));
    int *tg = be->alloc(N * sizeof(int));
    cr_assert(x && w && logits && probs && losses && dlosses && dlogits && dw && m && v && norm &&
              stats && tg);
    float hx[N * IC], hw[V * IC];
    int htg[N] = {0, 3, -1, 2, 1, 3};
    gc_fill(hx, N * IC, -1, 1, 1);
    gc_fill(hw, V * IC, -0.5f, 0.5f, 2);
    be->to_device(x, hx, sizeof hx);
    be->to_device(w, hw, sizeof hw);
    be->to_device(tg, htg, sizeof htg);
    be->zero(stats, BK_STAT_SLOTS * sizeof(double));
    bk_adamw h = {1e-2f, 0.9f, 0.999f, 1e-8f, 0.0f};
    be->d2h_reset();
    for (int t = 1; t <= STEPS; t++) {
        be->linear_forward(logits, x, w, NULL, N, IC, V);
        be->crossentropy_forward(losses, probs, logits, tg, N, V);
        be->crossentropy_stats(stats, logits, losses, tg, N, V);
        be->crossentropy_dlosses(dlosses, tg, 1.0f / 5, N, V); /* 5 counted rows */
        be->zero(dlogits, N * V * sizeof(float));
        be->zero(dw, V * IC * sizeof(float));
        be->crossentropy_backward(dlogits, probs, tg, dlosses, N, V);
        be->linear_backward(NULL, dw, NULL, dlogits, x, w, N, IC, V);
        be->grad_norm(norm, stats, dw, V * IC);
        be->adamw_clipped(w, dw, m, v, V * IC, &h, t, norm, 0.1f);
    }
    uint64_t calls, bytes;
    be->d2h_count(&calls, &bytes);
    cr_assert(calls == 0 && bytes == 0, "%d steps made %llu copies (%llu bytes)", STEPS,
              (unsigned long long)calls, (unsigned long long)bytes);
    double hs[BK_STAT_SLOTS];
    be->to_host(hs, stats, sizeof hs);
    be->d2h_count(&calls, &bytes);
    cr_assert(calls == 1 && bytes == sizeof hs, "the logging read is one copy");
    cr_assert(hs[BK_STAT_COUNTED] == 5.0 * STEPS, "counted %g", hs[BK_STAT_COUNTED]);
    cr_assert(hs[BK_STAT_NORM_COUNT] == STEPS && hs[BK_STAT_NONFINITE_STEPS] == 0);
    cr_assert(hs[BK_STAT_LOSS_SUM] > 0 && hs[BK_STAT_GRAD_NORM_SUM] > 0);
    void *all[] = {x, w, logits, probs, losses, dlosses, dlogits, dw, m, v, norm, stats, tg};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) be->release(all[i]);
}

/* ---- gradient norm and clipped AdamW ---- */

Test(devstep, grad_norm_matches_global_norm_and_fills_stats, .init = init_cpu) {
    size_t sizes[] = {0, 2, 1000, (size_t)1 << 16};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k];
        float *g = malloc((n ? n : 1) * sizeof(float));
        gc_fill(g, n, -1, 1, 10 + k);
        float norm = -1;
        double st[BK_STAT_SLOTS] = {0};
        cpu->grad_norm(&norm, st, g, n);
        float old = cpu->global_norm(g, n);
        cr_assert(memcmp(&norm, &old, sizeof norm) == 0, "n %zu: grad_norm %.9g global_norm %.9g",
                  n, (double)norm, (double)old);
        double want = 0;
        for (size_t i = 0; i < n; i++) want += (double)g[i] * g[i];
        want = sqrt(want);
        cr_assert(fabs(norm - want) <= 1e-6 * fmax(1, want), "n %zu: %.9g vs %.9g", n, (double)norm,
                  want);
        cr_assert(st[BK_STAT_GRAD_NORM_SUM] == norm && st[BK_STAT_NORM_COUNT] == 1 &&
                      st[BK_STAT_NONFINITE_STEPS] == 0,
                  "stats after a finite norm");
        g[n ? n / 2 : 0] = NAN;
        if (n) {
            cpu->grad_norm(&norm, st, g, n);
            cr_assert(isnan(norm), "NaN gradient -> NaN norm");
            g[n / 2] = INFINITY;
            cpu->grad_norm(&norm, st, g, n);
            cr_assert(isinf(norm), "inf gradient -> inf norm");
            cr_assert(st[BK_STAT_NORM_COUNT] == 3 && st[BK_STAT_NONFINITE_STEPS] == 2 &&
                          st[BK_STAT_GRAD_NORM_SUM] == old,
                      "non-finite norms are counted, not summed: count %g nonfinite %g sum %g",
                      st[BK_STAT_NORM_COUNT], st[BK_STAT_NONFINITE_STEPS],
                      st[BK_STAT_GRAD_NORM_SUM]);
        }
        free(g);
    }
}

/* adamw_clipped reads the norm from the device and clips as the train loop
 * did on the host: the same bits as adamw_update with the host's scale. */
Test(devstep, adamw_clipped_is_the_host_clip_bit_for_bit, .init = init_cpu) {
    size_t n = 40000; /* above the threaded path's threshold */
    float *g = malloc(n * sizeof(float)), *p[2], *m[2], *v[2];
    for (int j = 0; j < 2; j++) {
        p[j] = malloc(n * sizeof(float));
        m[j] = calloc(n, sizeof(float));
        v[j] = calloc(n, sizeof(float));
        gc_fill(p[j], n, -1, 1, 3);
    }
    gc_fill(g, n, -0.05f, 0.05f, 4);
    bk_adamw h = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
    float clips[] = {0.0f, 1.0f, 1e6f, 0.37f};
    for (int t = 1; t <= 4; t++) {
        float clip = clips[t - 1], norm;
        cpu->grad_norm(&norm, NULL, g, n);
        float host_norm = cpu->global_norm(g, n);
        float scale = clip > 0 && host_norm > clip ? clip / host_norm : 1.0f;
        cpu->adamw_update(p[0], g, m[0], v[0], n, &h, t, scale);
        cpu->adamw_clipped(p[1], g, m[1], v[1], n, &h, t, &norm, clip);
        expect_bits("p", p[1], p[0], n);
        expect_bits("m", m[1], m[0], n);
        expect_bits("v", v[1], v[0], n);
        for (size_t i = 0; i < n; i++) g[i] *= 1.7f; /* the clip engages at t = 2 and 4 */
    }
    /* a non-finite norm skips the step: nothing changes */
    float *keep = malloc(3 * n * sizeof(float));
    memcpy(keep, p[1], n * sizeof(float));
    memcpy(keep + n, m[1], n * sizeof(float));
    memcpy(keep + 2 * n, v[1], n * sizeof(float));
    float bad[3] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 3; k++) {
        cpu->adamw_clipped(p[1], g, m[1], v[1], n, &h, 5, &bad[k], 1.0f);
        cpu->adamw_clipped(p[1], g, m[1], v[1], n, &h, 5, &bad[k], 0.0f);
    }
    expect_bits("p after a skipped step", p[1], keep, n);
    expect_bits("m after a skipped step", m[1], keep + n, n);
    expect_bits("v after a skipped step", v[1], keep + 2 * n, n);
    free(keep);
    free(g);
    for (int j = 0; j < 2; j++) free(p[j]), free(m[j]), free(v[j]);
}

/* ---- cross-entropy statistics ---- */

/* The host loop of worker/model.c's model_forward (before issue 10). */
static void oracle_ce_stats(double *sum_out, double *counted_out, double *correct_out,
                            const float *hl, const float *h_logits, const int *h_targets, int rows,
                            int V) {
    double sum = 0, counted = 0, correct = 0;
    for (int r = 0; r < rows; r++) {
        int t = h_targets[r];
        if (t < 0) continue;
        sum += hl[r];
        counted += 1;
        const float *lg = h_logits + (size_t)r * V;
        int best = 0;
        for (int v = 1; v < V; v++)
            if (lg[v] > lg[best]) best = v;
        correct += best == t;
    }
    *sum_out = sum;
    *counted_out = counted;
    *correct_out = correct;
}

Test(devstep, crossentropy_stats_by_hand, .init = init_cpu) {
    /* rows: argmax 2 (target 2, correct); tie of 0 and 3 -> 0 (target 3,
     * wrong; target 0 row below is correct); ignored; target V (bad); -5
     * (bad); NaN first, max at 1 (target 1, correct); bad target huge as the
     * last row, allocated exactly, so a read through it would be caught */
    enum { N = 7, V = 4 };
    float *lg = malloc(N * V * sizeof(float));
    float rows[N][V] = {{0, 1, 5, 2}, {3, 1, 2, 3},   {3, 1, 2, 3}, {9, 9, 9, 9},
                        {1, 2, 3, 4}, {NAN, 7, 1, 2}, {1, 1, 1, 1}};
    memcpy(lg, rows, sizeof rows);
    int tg[N] = {2, 3, 0, -1, V, 1, 1 << 30};
    int tg2[N] = {2, 3, 0, -1, -5, 1, -1};
    float losses[N] = {0.5f, 1.5f, 2.5f, 100, 100, 0.25f, 100};
    double st[BK_STAT_SLOTS] = {0};
    cpu->crossentropy_stats(st, lg, losses, tg, N, V);
    cr_assert(st[BK_STAT_COUNTED] == 4, "counted %g", st[BK_STAT_COUNTED]);
    cr_assert(st[BK_STAT_CORRECT] == 3, "correct %g", st[BK_STAT_CORRECT]);
    cr_assert(st[BK_STAT_LOSS_SUM] == 0.5 + 1.5 + 2.5 + 0.25, "loss sum %g", st[BK_STAT_LOSS_SUM]);
    cr_assert(st[BK_STAT_BAD_TARGETS] == 2, "bad %g", st[BK_STAT_BAD_TARGETS]);
    cpu->crossentropy_stats(st, lg, losses, tg2, N, V); /* adds */
    cr_assert(st[BK_STAT_COUNTED] == 8 && st[BK_STAT_CORRECT] == 6 && st[BK_STAT_BAD_TARGETS] == 3,
              "second call adds: counted %g correct %g bad %g", st[BK_STAT_COUNTED],
              st[BK_STAT_CORRECT], st[BK_STAT_BAD_TARGETS]);
    for (int s = 0; s < BK_STAT_SLOTS; s++)
        if (s > BK_STAT_BAD_TARGETS) cr_assert(st[s] == 0, "slot %d written", s);
    /* all NaN -> index 0; NaN then -inf -> the first -inf; -0 and +0 tie */
    float odd[3][3] = {{NAN, NAN, NAN}, {NAN, -INFINITY, -INFINITY}, {-0.0f, 0.0f, -1}};
    int odd_t[3] = {0, 1, 0};
    float odd_l[3] = {1, 1, 1};
    double st2[BK_STAT_SLOTS] = {0};
    cpu->crossentropy_stats(st2, &odd[0][0], odd_l, odd_t, 3, 3);
    cr_assert(st2[BK_STAT_CORRECT] == 3, "argmax edge cases: %g of 3", st2[BK_STAT_CORRECT]);

    /* the forward and backward treat an out-of-range target as ignored */
    float probs[N * V], out[N], d[N * V], dl[N];
    for (int i = 0; i < N; i++) dl[i] = 1;
    for (int i = 0; i < N * V; i++) d[i] = 0.5f;
    cpu->crossentropy_forward(out, probs, lg, tg, N, V);
    cr_assert(out[4] == 0 && out[6] == 0 && out[3] == 0, "bad targets: loss %g %g", (double)out[4],
              (double)out[6]);
    cr_assert(fabsf(out[0] - (logf(expf(0) + expf(1) + expf(5) + expf(2)) - 5)) < 1e-5f);
    cpu->crossentropy_backward(d, probs, tg, dl, N, V);
    for (int j = 0; j < V; j++)
        cr_assert(d[4 * V + j] == 0.5f && d[6 * V + j] == 0.5f, "bad target row got a gradient");

    /* the backward's seed: value on counted rows, 0 elsewhere */
    float seed[N];
    for (int i = 0; i < N; i++) seed[i] = -9;
    cpu->crossentropy_dlosses(seed, tg, 0.25f, N, V);
    float want_seed[N] = {0.25f, 0.25f, 0.25f, 0, 0, 0.25f, 0};
    expect_bits("crossentropy_dlosses", seed, want_seed, N);
    free(lg);
}

Test(devstep, crossentropy_stats_matches_the_host_loop, .init = init_cpu) {
    int N = 3000, V = 37; /* N V above the threaded path's threshold */
    float *lg = malloc((size_t)N * V * sizeof(float)), *losses = malloc(N * sizeof(float));
    int *tg = malloc(N * sizeof(int));
    gc_fill(lg, (size_t)N * V, -2, 2, 5);
    gc_fill(losses, N, 0, 5, 6);
    for (int r = 0; r < N; r++) {
        tg[r] = r % 11 == 0 ? -1 : (r * 7) % V;
        /* coarse values make ties common */
        for (int v = 0; v < V; v++) lg[(size_t)r * V + v] = roundf(lg[(size_t)r * V + v] * 2);
        if (r % 3 == 0) lg[(size_t)r * V + tg[r] + (tg[r] >= 0 ? 0 : 1)] = 10; /* some correct */
    }
    double st[BK_STAT_SLOTS] = {0}, sum, counted, correct;
    cpu->crossentropy_stats(st, lg, losses, tg, N, V);
    oracle_ce_stats(&sum, &counted, &correct, losses, lg, tg, N, V);
    cr_assert(st[BK_STAT_LOSS_SUM] == sum && st[BK_STAT_COUNTED] == counted &&
                  st[BK_STAT_CORRECT] == correct && st[BK_STAT_BAD_TARGETS] == 0,
              "stats %.17g %g %g vs host %.17g %g %g", st[BK_STAT_LOSS_SUM], st[BK_STAT_COUNTED],
              st[BK_STAT_CORRECT], sum, counted, correct);
    cr_assert(correct > 50 && correct < counted, "the data must test both outcomes (%g of %g)",
              correct, counted);
    free(lg), free(losses), free(tg);
}

/* ---- the Gumbel stream ---- */

/* Every uniform the stream can draw is u = (k + 0.5) / 2^23: bk_log_exact
 * rounded to float is the correctly rounded log of each u and of each
 * t = -log(u) (the two logs of the Gumbel transform), checked against long
 * double; and it stays within an ulp of libm's logf (the values before). */
Test(devstep, log_exact_is_correctly_rounded_on_the_gumbel_domain) {
    long misrounded = 0, far_from_libm = 0;
    for (uint32_t k = 0; k < (1u << 23); k++) {
        float u = ((float)k + 0.5f) * (1.0f / 8388608.0f);
        float lu = (float)bk_log_exact(u);
        if (lu != (float)logl((long double)u)) misrounded++;
        if (fabsf(lu - logf(u)) > 1.2e-7f * fmaxf(1.0f, fabsf(lu))) far_from_libm++;
        float t = -lu;
        float lt = (float)bk_log_exact(t);
        if (lt != (float)logl((long double)t)) misrounded++;
        if (fabsf(lt - logf(t)) > 1.2e-7f * fmaxf(1.0f, fabsf(lt))) far_from_libm++;
    }
    cr_assert(misrounded == 0, "%ld of %u logs not correctly rounded", misrounded, 2u << 23);
    cr_assert(far_from_libm == 0, "%ld logs more than an ulp from libm", far_from_libm);
    /* beyond the domain: other magnitudes */
    double xs[] = {1.0, 2.0, 0.5, 1e-30, 3e38, 1.4142135, 0.70710678, 123.456};
    for (size_t i = 0; i < sizeof xs / sizeof *xs; i++)
        cr_assert(fabs(bk_log_exact(xs[i]) - log(xs[i])) <= 1e-15 * fmax(1, fabs(log(xs[i]))),
                  "log %g: %.17g vs %.17g", xs[i], bk_log_exact(xs[i]), log(xs[i]));
}

Test(devstep, rng_gumbel_is_the_stream, .init = init_cpu) {
    size_t n = 70001;
    float *g = malloc(n * sizeof(float));
    cpu->rng_gumbel(g, n, 42, (7ull << 8) | 3, 1000);
    double mean = 0;
    for (size_t i = 0; i < n; i++) {
        float want = bk_rng_gumbel_at(42, (7ull << 8) | 3, 1000 + i);
        cr_assert(memcmp(&g[i], &want, sizeof want) == 0, "value %zu", i);
        float u = bk_rng_uniform_at(42, (7ull << 8) | 3, 1000 + i);
        cr_assert(fabsf(g[i] - -logf(-logf(u))) <= 1e-6f * fmaxf(1, fabsf(g[i])),
                  "value %zu: %.9g, libm %.9g", i, (double)g[i], (double)-logf(-logf(u)));
        mean += g[i];
    }
    mean /= (double)n;
    cr_assert(fabs(mean - 0.5772156649) < 0.02, "Gumbel mean %g (Euler's gamma)", mean);
    free(g);
}

/* ---- the head gate ---- */

/* A verbatim copy of the host gate of worker/model.c before issue 10 (the
 * oracle): the same types, expressions and order, over one layer l of a
 * model with L layers and batch capacity Bcap. Only the struct around the
 * arrays is new. */
typedef struct {
    float tau, sigma, tau_r, s_min, s_max, lambda_budget, lambda_entropy, progress;
    uint64_t seed, step, row_offset;
    int force_k, exact_gradient;
} oracle_knobs;

typedef struct {
    int H, L, Bcap;
    oracle_knobs kn;
    float *h_s, *h_f, *h_ds, *h_df, *h_z, *h_zn, *h_p, *h_m, *h_gate, *h_dz, *h_dgate;
    int *h_k, *h_rank;
    double loss_budget, loss_entropy, mean_s, heads_used;
} oracle;

static float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

/* The oracle's ranks and budget are derived from docs/design.md, not
 * copied from the code they check: rank r_i = position of head i once the
 * heads are sorted by score, best first, ties to the lower index (here an
 * insertion sort, where the op counts the heads that beat i); k = the
 * number of ranks r in 1..H that the hard rule runs, r <= s*H, but at least
 * one head (here a count, where the op clamps a floor). s*H is the float
 * product the doc's s·H is on the device. */
static void rank_heads(const float *zn, int H, int *rank) {
    int order[256];
    for (int i = 0; i < H; i++) {
        int at = i;
        /* strictly better moves ahead; an equal score stays behind (lower index first) */
        while (at > 0 && zn[order[at - 1]] < zn[i]) {
            order[at] = order[at - 1];
            at--;
        }
        order[at] = i;
    }
    for (int pos = 0; pos < H; pos++) rank[order[pos]] = pos + 1;
}

static int budget_k(float s, int H, int force_k) {
    float limit = force_k > 0 ? (float)force_k : s * (float)H;
    int k = 0;
    for (int r = 1; r <= H; r++) k += (float)r <= limit;
    return k > 0 ? k : 1;
}

static void oracle_budget_s(oracle *m, int l, int B) {
    float *f = m->h_f + (size_t)l * m->Bcap, *s = m->h_s + (size_t)l * m->Bcap;
    for (int b = 0; b < B; b++) s[b] = sigmoidf_(f[b]);
    for (int b = 0; b < B; b++) m->mean_s += m->h_s[(size_t)l * m->Bcap + b];
}

static void oracle_gate_forward(oracle *m, int l, int B) {
    int H = m->H;
    const oracle_knobs *kn = &m->kn;
    for (int b = 0; b < B; b++) {
        size_t o = ((size_t)l * m->Bcap + b) * H;
        float s = m->h_s[(size_t)l * m->Bcap + b];
        float *z = m->h_z + o, *zn = m->h_zn + o, *p = m->h_p + o, *g = m->h_m + o;
        int *r = m->h_rank + o;
        uint64_t stream = (kn->step << 8) | (uint64_t)l;
        float mx = -INFINITY;
        for (int i = 0; i < H; i++) {
            float noise = kn->sigma > 0
                              ? kn->sigma * bk_rng_gumbel_at(kn->seed, stream,
                                                             (kn->row_offset + (uint64_t)b) * H + i)
                              : 0;
            zn[i] = z[i] + noise;
            if (zn[i] / kn->tau > mx) mx = zn[i] / kn->tau;
        }
        double sum = 0;
        for (int i = 0; i < H; i++) sum += (p[i] = expf(zn[i] / kn->tau - mx));
        for (int i = 0; i < H; i++) p[i] = (float)(p[i] / sum);
        rank_heads(zn, H, r);
        for (int i = 0; i < H; i++) {
            g[i] = r[i] == 1 ? 1.0f : sigmoidf_((s * H - (float)r[i]) / kn->tau_r);
            m->h_gate[o + i] = g[i];
        }
        m->h_k[(size_t)l * m->Bcap + b] = budget_k(s, H, 0);
    }
}

static void oracle_gate_losses(oracle *m, int l, int B) {
    int H = m->H, L = m->L;
    const oracle_knobs *kn = &m->kn;
    double norm = 1.0 / ((double)B * L);
    float ent_w = kn->lambda_entropy * (2.0f * kn->progress - 1.0f);
    for (int b = 0; b < B; b++) {
        size_t bi = (size_t)l * m->Bcap + b, o = bi * H;
        float s = m->h_s[bi];
        float lo = fmaxf(0.0f, kn->s_min - s), hi = fmaxf(0.0f, s - kn->s_max);
        m->loss_budget += kn->lambda_budget * norm * (lo * lo + hi * hi);
        m->h_ds[bi] = (float)(kn->lambda_budget * norm * (-2.0 * lo + 2.0 * hi));
        double ent = 0;
        const float *p = m->h_p + o;
        for (int i = 0; i < H; i++) ent -= p[i] > 0 ? p[i] * log(p[i]) : 0;
        m->loss_entropy += ent_w * norm * ent;
        for (int i = 0; i < H; i++)
            m->h_dz[o + i] = (float)(-ent_w * norm * (p[i] > 0 ? log(p[i]) + 1.0 : 0.0));
    }
}

static void oracle_gate_backward(oracle *m, int l, int B) {
    int H = m->H;
    const oracle_knobs *kn = &m->kn;
    for (int b = 0; b < B; b++) {
        size_t bi = (size_t)l * m->Bcap + b, o = bi * H;
        const float *p = m->h_p + o, *g = m->h_m + o, *dw = m->h_dgate + o;
        const int *r = m->h_rank + o;
        float *dp = m->h_dz + o;
        float ds = m->h_ds[bi];
        for (int i = 0; i < H; i++) {
            if (!kn->exact_gradient) dp[i] += dw[i] * g[i];
            if (r[i] != 1) ds += dw[i] * g[i] * (1.0f - g[i]) * (float)H / kn->tau_r;
        }
        double dot = 0;
        for (int i = 0; i < H; i++) dot += (double)p[i] * dp[i];
        for (int i = 0; i < H; i++) dp[i] = (float)(p[i] * (dp[i] - dot) / kn->tau);
        float s = m->h_s[bi];
        m->h_df[bi] = ds * s * (1.0f - s);
    }
}

static int oracle_selected_heads(const oracle *m, int l, int b, int *heads) {
    int H = m->H;
    const float *z = m->h_z + ((size_t)l * m->Bcap + b) * H;
    int rank[256];
    rank_heads(z, H, rank);
    int k = m->h_k[(size_t)l * m->Bcap + b], n = 0;
    for (int r = 1; r <= k; r++)
        for (int i = 0; i < H; i++)
            if (rank[i] == r) heads[n++] = i;
    return k;
}

static void oracle_init(oracle *m, int H, int L, int Bcap) {
    memset(m, 0, sizeof *m);
    m->H = H, m->L = L, m->Bcap = Bcap;
    size_t BL = (size_t)Bcap * L, BH = BL * H;
    float **fl[] = {&m->h_s, &m->h_f, &m->h_ds, &m->h_df};
    for (size_t i = 0; i < 4; i++) *fl[i] = calloc(BL, sizeof(float));
    float **fh[] = {&m->h_z, &m->h_zn, &m->h_p, &m->h_m, &m->h_gate, &m->h_dz, &m->h_dgate};
    for (size_t i = 0; i < 7; i++) *fh[i] = calloc(BH, sizeof(float));
    m->h_k = calloc(BL, sizeof(int));
    m->h_rank = calloc(BH, sizeof(int));
}

static void oracle_free(oracle *m) {
    free(m->h_s), free(m->h_f), free(m->h_ds), free(m->h_df), free(m->h_z), free(m->h_zn);
    free(m->h_p), free(m->h_m), free(m->h_gate), free(m->h_dz), free(m->h_dgate);
    free(m->h_k), free(m->h_rank);
}

/* One gate configuration: sizes, knobs, and how the scores are drawn. */
typedef struct {
    int B, H, L, layer;
    oracle_knobs kn;
    float f_lo, f_hi; /* budget logits drawn in [f_lo, f_hi) */
    int coarse_z;     /* round the scores to 0.5 so that ties occur */
} gate_case;

static bk_gate_args args_of(const gate_case *c) {
    bk_gate_args a = {.B = c->B,
                      .H = c->H,
                      .tau = c->kn.tau,
                      .sigma = c->kn.sigma,
                      .tau_r = c->kn.tau_r,
                      .s_min = c->kn.s_min,
                      .s_max = c->kn.s_max,
                      .lambda_budget = c->kn.lambda_budget,
                      .lambda_entropy = c->kn.lambda_entropy,
                      .progress = c->kn.progress,
                      .norm = 1.0 / ((double)c->B * c->L),
                      .seed = c->kn.seed,
                      .step = c->kn.step,
                      .row_offset = c->kn.row_offset,
                      .layer = c->layer,
                      .exact_gradient = c->kn.exact_gradient};
    return a;
}

static const gate_case gate_cases[] = {
    /* noise, budget inside and outside the range, entropy weight negative */
    {5, 12, 4, 3, {1.0f, 0.5f, 0.5f, 0.3f, 0.6f, 1.0f, 0.01f, 0.2f, 17, 7, 40, 0, 0}, -3, 3, 0},
    /* no noise, ties, entropy weight positive, exact gradient */
    {7, 16, 2, 0, {0.7f, 0.0f, 0.25f, 0.0f, 1.0f, 2.0f, 0.05f, 0.9f, 3, 0, 0, 0, 1}, -1, 1, 1},
    /* one head; noise with ties; heavy budget pressure */
    {3, 1, 1, 0, {1.0f, 1.0f, 0.5f, 0.4f, 0.5f, 1.0f, 0.01f, 0.5f, 9, 123, 2, 0, 0}, -6, 6, 0},
    /* many heads and samples */
    {33, 64, 12, 11, {2.0f, 0.3f, 1.0f, 0.1f, 0.9f, 0.5f, 0.02f, 0.7f, 5, 99, 7, 0, 0}, -4, 4, 1},
};

/* Runs case c on the CPU op and on the oracle and compares everything bit
 * for bit. */
static void check_gate_case(const gate_case *c, int ci) {
    int B = c->B, H = c->H, L = c->L, l = c->layer;
    size_t BH = (size_t)B * H;
    oracle o;
    oracle_init(&o, H, L, B);
    o.kn = c->kn;
    float *f = o.h_f + (size_t)l * B, *z = o.h_z + (size_t)l * BH;
    gc_fill(f, (size_t)B, c->f_lo, c->f_hi, 100 + ci);
    gc_fill(z, BH, -2, 2, 200 + ci);
    if (c->coarse_z)
        for (size_t i = 0; i < BH; i++) z[i] = roundf(z[i] * 2) / 2;
    float *dgate = o.h_dgate + (size_t)l * BH;
    gc_fill(dgate, BH, -1, 1, 300 + ci);

    /* the op: outputs and gradients start from a prefill (+=) */
    bk_gate_args a = args_of(c);
    float *gate = calloc(BH, sizeof(float)), *save = calloc(BK_GATE_SAVE_FLOATS(B, H), 4);
    float *df = malloc(B * sizeof(float)), *dz = malloc(BH * sizeof(float));
    int *k = calloc((size_t)B, sizeof(int));
    double *cost = malloc(B * sizeof(double));
    for (int b = 0; b < B; b++) cost[b] = 1000.0 + b;
    a.head_cost = cost;
    for (int b = 0; b < B; b++) df[b] = 0.25f;
    for (size_t i = 0; i < BH; i++) dz[i] = -0.5f;
    double st[BK_STAT_SLOTS] = {0};
    cpu->gate_forward(gate, k, save, st, f, z, &a);
    cpu->gate_backward(df, dz, dgate, save, &a);

    /* the oracle, as model_forward / model_backward called it */
    oracle_budget_s(&o, l, B);
    oracle_gate_forward(&o, l, B);
    oracle_gate_losses(&o, l, B);
    double heads = 0;
    for (int b = 0; b < B; b++) heads += (double)o.h_k[(size_t)l * B + b] / H;
    oracle_gate_backward(&o, l, B);

    char what[64];
#define SAME(name, got, want, n)                                                                   \
    snprintf(what, sizeof what, "case %d %s", ci, name);                                           \
    expect_bits(what, got, want, n)
    SAME("gate", gate, o.h_gate + (size_t)l * BH, BH);
    SAME("s", save, o.h_s + (size_t)l * B, (size_t)B);
    SAME("ds", save + B, o.h_ds + (size_t)l * B, (size_t)B);
    SAME("zn", save + 4 * B, o.h_zn + (size_t)l * BH, BH);
    SAME("p", save + 4 * B + BH, o.h_p + (size_t)l * BH, BH);
    SAME("m", save + 4 * B + 2 * BH, o.h_m + (size_t)l * BH, BH);
    for (int b = 0; b < B; b++) {
        cr_assert(k[b] == o.h_k[(size_t)l * B + b], "case %d k[%d] %d vs %d", ci, b, k[b],
                  o.h_k[(size_t)l * B + b]);
        cr_assert(save[2 * B + b] == (float)k[b], "case %d saved k", ci);
    }
    for (size_t i = 0; i < BH; i++)
        cr_assert(save[4 * B + 3 * BH + i] == (float)o.h_rank[(size_t)l * BH + i],
                  "case %d rank %zu", ci, i);
    cr_assert(st[BK_STAT_BUDGET_LOSS] == o.loss_budget, "case %d budget loss %.17g vs %.17g", ci,
              st[BK_STAT_BUDGET_LOSS], o.loss_budget);
    cr_assert(st[BK_STAT_ENTROPY_LOSS] == o.loss_entropy, "case %d entropy %.17g vs %.17g", ci,
              st[BK_STAT_ENTROPY_LOSS], o.loss_entropy);
    cr_assert(st[BK_STAT_S_SUM] == o.mean_s, "case %d s sum", ci);
    cr_assert(st[BK_STAT_HEADS_SUM] == heads, "case %d heads %.17g vs %.17g", ci,
              st[BK_STAT_HEADS_SUM], heads);
    cr_assert(st[BK_STAT_GATE_ROWS] == B, "case %d rows", ci);
    double flops = 0;
    for (int b = 0; b < B; b++) flops += k[b] * cost[b];
    cr_assert(st[BK_STAT_ATTN_FLOPS] == flops, "case %d flops", ci);
    /* backward: op = prefill + oracle */
    float *want_df = malloc(B * sizeof(float)), *want_dz = malloc(BH * sizeof(float));
    for (int b = 0; b < B; b++) want_df[b] = 0.25f + o.h_df[(size_t)l * B + b];
    for (size_t i = 0; i < BH; i++) want_dz[i] = -0.5f + o.h_dz[(size_t)l * BH + i];
    SAME("df", df, want_df, (size_t)B);
    SAME("dz", dz, want_dz, BH);
#undef SAME
    /* the cases must exercise what they claim */
    if (c->kn.s_min > 0) cr_assert(o.loss_budget > 0, "case %d: budget loss inactive", ci);
    free(want_df), free(want_dz), free(gate), free(save), free(df), free(dz), free(k), free(cost);
    oracle_free(&o);
}

/* The oracle's own ranks and budgets, worked out by hand. */
Test(devstep, oracle_ranks_and_budget_by_hand) {
    const float z[5] = {0.5f, 2.0f, 2.0f, -1.0f, 0.5f};
    int r[5];
    rank_heads(z, 5, r);
    /* 2.0 (head 1) before 2.0 (head 2), then 0.5 (0) before 0.5 (4), then -1 */
    const int want[5] = {3, 1, 2, 5, 4};
    for (int i = 0; i < 5; i++) cr_assert_eq(r[i], want[i], "rank of head %d", i);
    /* k = clamp(floor(s*H), 1, H) */
    cr_assert_eq(budget_k(0.5f, 4, 0), 2);
    cr_assert_eq(budget_k(0.74f, 4, 0), 2);   /* 2.96 */
    cr_assert_eq(budget_k(0.75f, 4, 0), 3);   /* 3 exactly */
    cr_assert_eq(budget_k(0.1f, 4, 0), 1);    /* 0.4: at least one head */
    cr_assert_eq(budget_k(0.0f, 12, 0), 1);   /* 0 */
    cr_assert_eq(budget_k(0.999f, 4, 0), 3);  /* 3.996 */
    cr_assert_eq(budget_k(1.0f, 4, 0), 4);    /* all */
    cr_assert_eq(budget_k(0.26f, 12, 0), 3);  /* 3.12 */
    cr_assert_eq(budget_k(0.3f, 12, 3), 3);   /* forced */
    cr_assert_eq(budget_k(0.3f, 12, 99), 12); /* forced past H: all */
}

Test(devstep, gate_is_the_host_gate_bit_for_bit, .init = init_cpu) {
    for (size_t ci = 0; ci < sizeof gate_cases / sizeof *gate_cases; ci++)
        check_gate_case(&gate_cases[ci], (int)ci);
}

/* The loss the gate backward differentiates: L(f, z) = <R, gate> + budget
 * loss + entropy loss, in double, from one forward. */
typedef struct {
    bk_gate_args a;
    const float *f, *z, *R;
    float *gate, *save;
} gate_fd;

static double gate_loss(gate_fd *g) {
    double st[BK_STAT_SLOTS] = {0};
    cpu->gate_forward(g->gate, NULL, g->save, st, g->f, g->z, &g->a);
    return gc_dot(g->R, g->gate, (size_t)g->a.B * g->a.H) + st[BK_STAT_BUDGET_LOSS] +
           st[BK_STAT_ENTROPY_LOSS];
}

/* exact_gradient = 1: df and dz are the gradient of the forward (ranks kept
 * fixed: scores drawn far enough apart that no step of the differences
 * reorders them); exact_gradient = 0 adds the straight-through term
 * softmax'(p)^T (dgate * m) / tau to dz and leaves df alone. */
Test(devstep, gate_backward_finite_differences_and_straight_through, .init = init_cpu) {
    enum { B = 4, H = 6 };
    float f[B], z[B * H], R[B * H], gate[B * H], save[BK_GATE_SAVE_FLOATS(B, H)];
    gc_fill(f, B, -2.5f, 2.5f, 41);
    gc_fill(R, B * H, -1, 1, 42);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < H; i++) z[b * H + i] = 0.4f * (float)((i * 5 + b) % H) - 1.0f;
    bk_gate_args a = {.B = B,
                      .H = H,
                      .tau = 0.8f,
                      .sigma = 0.1f,
                      .tau_r = 0.5f,
                      .s_min = 0.4f,
                      .s_max = 0.6f,
                      .lambda_budget = 3.0f,
                      .lambda_entropy = 0.3f,
                      .progress = 0.9f,
                      .norm = 1.0 / (B * 2.0),
                      .seed = 11,
                      .step = 5,
                      .layer = 1,
                      .exact_gradient = 1};
    gate_fd g = {a, f, z, R, gate, save};
    (void)gate_loss(&g);
    for (int b = 0; b < B; b++) { /* noise must not bring two scores within 0.05 */
        const float *zn = save + 4 * B + b * H;
        for (int i = 0; i < H; i++)
            for (int j = 0; j < i; j++)
                cr_assert(fabsf(zn[i] - zn[j]) > 0.05f, "test setup: scores %d,%d too close", i, j);
    }
    float df[B] = {0}, dz[B * H] = {0};
    cpu->gate_backward(df, dz, R, save, &a);
    double num_f[B], num_z[B * H];
    float *xs[2] = {f, z};
    double *nums[2] = {num_f, num_z};
    size_t ns[2] = {B, B * H};
    for (int v = 0; v < 2; v++)
        for (size_t i = 0; i < ns[v]; i++) {
            float x0 = xs[v][i], h = 1e-2f;
            xs[v][i] = x0 + h;
            double lp = gate_loss(&g);
            xs[v][i] = x0 - h;
            double lm = gate_loss(&g);
            xs[v][i] = x0;
            nums[v][i] = (lp - lm) / (2.0 * h);
        }
    cr_assert(gc_compare("gate df", df, num_f, B) <= 1, "df vs finite differences");
    cr_assert(gc_compare("gate dz", dz, num_z, B * H) <= 1, "dz vs finite differences");
    double gmax = 0;
    for (int i = 0; i < B; i++) gmax = fmax(gmax, fabs(num_f[i]));
    cr_assert(gmax > 1e-2, "df too small to test (%g)", gmax);

    /* straight-through: same df; dz differs by the softmax backward of dgate * m */
    (void)gate_loss(&g);
    g.a.exact_gradient = 0;
    float df2[B] = {0}, dz2[B * H] = {0};
    cpu->gate_backward(df2, dz2, R, save, &g.a);
    expect_bits("straight-through df", df2, df, B);
    const float *p = save + 4 * B + B * H, *m = save + 4 * B + 2 * B * H;
    for (int b = 0; b < B; b++) {
        double dot = 0;
        for (int i = 0; i < H; i++) dot += (double)p[b * H + i] * R[b * H + i] * m[b * H + i];
        for (int i = 0; i < H; i++) {
            int j = b * H + i;
            double want = (double)dz[j] + p[j] * (R[j] * m[j] - dot) / a.tau;
            cr_assert(fabs(dz2[j] - want) <= 1e-6, "straight-through dz[%d]: %.9g vs %.9g", j,
                      (double)dz2[j], want);
        }
    }
}

Test(devstep, gate_infer_is_the_host_selection, .init = init_cpu) {
    int Bs[] = {9, 2}, Hs[] = {12, 5}, forces[] = {0, 3, 99};
    for (int c = 0; c < 2; c++)
        for (int fk = 0; fk < 3; fk++) {
            int B = Bs[c], H = Hs[c], force = forces[fk];
            oracle o;
            oracle_init(&o, H, 1, B);
            gc_fill(o.h_f, (size_t)B, -4, 4, 50 + c);
            /* the ends: s = 1 in float (every head), s near 0 (one) */
            o.h_f[0] = 30.0f, o.h_f[1] = -30.0f;
            gc_fill(o.h_z, (size_t)B * H, -1, 1, 60 + c);
            for (int i = 0; i < B * H; i++) o.h_z[i] = roundf(o.h_z[i] * 3); /* ties */
            float *s = malloc(B * sizeof(float));
            int *k = malloc(B * sizeof(int)), *heads = malloc((size_t)B * H * sizeof(int));
            double cost[16], st[BK_STAT_SLOTS] = {0};
            for (int b = 0; b < B; b++) cost[b] = 10.0 * (b + 1);
            cpu->gate_infer(s, k, heads, st, o.h_f, o.h_z, cost, B, H, force);
            oracle_budget_s(&o, 0, B);
            double heads_sum = 0, flops = 0;
            for (int b = 0; b < B; b++) {
                o.h_k[b] = budget_k(o.h_s[b], H, force);
                heads_sum += (double)o.h_k[b] / H;
                flops += o.h_k[b] * cost[b];
            }
            expect_bits("infer s", s, o.h_s, (size_t)B);
            int want[256];
            for (int b = 0; b < B; b++) {
                cr_assert(k[b] == o.h_k[b], "k[%d] %d vs %d", b, k[b], o.h_k[b]);
                int kk = oracle_selected_heads(&o, 0, b, want);
                for (int r = 0; r < kk; r++)
                    cr_assert(heads[b * H + r] == want[r], "sample %d rank %d: head %d vs %d", b,
                              r + 1, heads[b * H + r], want[r]);
                int seen[256] = {0};
                for (int r = 0; r < H; r++) seen[heads[b * H + r]]++;
                for (int i = 0; i < H; i++) cr_assert(seen[i] == 1, "heads not a permutation");
            }
            cr_assert(st[BK_STAT_S_SUM] == o.mean_s && st[BK_STAT_HEADS_SUM] == heads_sum &&
                          st[BK_STAT_GATE_ROWS] == B && st[BK_STAT_ATTN_FLOPS] == flops,
                      "infer stats");
            cr_assert(st[BK_STAT_BUDGET_LOSS] == 0 && st[BK_STAT_ENTROPY_LOSS] == 0,
                      "inference adds no loss");
            free(s), free(k), free(heads);
            oracle_free(&o);
        }
}
