/* AdamW on the CPU backend: three steps against numbers worked out by hand
 * in double (decoupled weight decay, bias correction with t, and gradients
 * scaled by global-norm clipping), plus the large threaded path. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "kernels/bk.h"

static void expect_rel(const char *what, float got, double want, double rtol) {
    cr_assert(fabs(got - want) <= rtol * fmax(1e-6, fabs(want)), "%s: got %.9g, want %.9g", what,
              (double)got, want);
}

/* Three parameters, lr 0.1, betas (0.9, 0.999), eps 1e-8, weight decay 0.01,
 * clip 2.5. Gradients per step and the clipping factor min(1, 2.5/||g||):
 *   t=1: g = (3, 4, 0),  ||g|| = 5  -> scale 0.5  -> g' = (1.5, 2, 0)
 *   t=2: g = (-1, 0, 0), ||g|| = 1  -> scale 1    -> g' = (-1, 0, 0)
 *   t=3: g = (6, 8, 0),  ||g|| = 10 -> scale 0.25 -> g' = (1.5, 2, 0)
 * Parameter 2 never has a gradient, so it only decays: p *= (1 - lr wd). */
Test(adamw, three_steps_by_hand) {
    const bk_backend *cpu = bk_cpu();
    bk_adamw h = {.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f};
    float p[3] = {1.0f, -2.0f, 0.5f}, m[3] = {0}, v[3] = {0};
    float g[3][3] = {{3, 4, 0}, {-1, 0, 0}, {6, 8, 0}};
    float clip = 2.5f;

    /* Parameter 0, written out (bc1 = 1 - 0.9^t, bc2 = 1 - 0.999^t):
     * t=1: m = 0.1*1.5 = 0.15; v = 0.001*2.25 = 0.00225; bc1 = 0.1, bc2 = 0.001;
     *      mhat = 1.5, vhat = 2.25, sqrt = 1.5;
     *      p = 1 - 0.1*(1.5/(1.5+1e-8) + 0.01*1) = 0.899000000666...
     * t=2: m = 0.9*0.15 - 0.1 = 0.035; v = 0.999*0.00225 + 0.001 = 0.00324775;
     *      bc1 = 0.19, bc2 = 0.001999
     * t=3: m = 0.9*0.035 + 0.15 = 0.1815; v = 0.999*0.00324775 + 0.00225 = 0.00549450225;
     *      bc1 = 0.271, bc2 = 0.002997001 */
    double p0 = 1.0;
    p0 -= 0.1 * ((0.15 / 0.1) / (sqrt(0.00225 / 0.001) + 1e-8) + 0.01 * p0);
    double p0_1 = p0;
    p0 -= 0.1 * ((0.035 / 0.19) / (sqrt(0.00324775 / 0.001999) + 1e-8) + 0.01 * p0);
    double p0_2 = p0;
    p0 -= 0.1 * ((0.1815 / 0.271) / (sqrt(0.00549450225 / 0.002997001) + 1e-8) + 0.01 * p0);
    /* Parameter 1: g' = 2, 0, 2.
     * t=1: m = 0.2, v = 0.004; t=2: m = 0.18, v = 0.003996;
     * t=3: m = 0.162 + 0.2 = 0.362, v = 0.003992004 + 0.004 = 0.007992004 */
    double p1 = -2.0;
    p1 -= 0.1 * ((0.2 / 0.1) / (sqrt(0.004 / 0.001) + 1e-8) + 0.01 * p1);
    double p1_1 = p1;
    p1 -= 0.1 * ((0.18 / 0.19) / (sqrt(0.003996 / 0.001999) + 1e-8) + 0.01 * p1);
    double p1_2 = p1;
    p1 -= 0.1 * ((0.362 / 0.271) / (sqrt(0.007992004 / 0.002997001) + 1e-8) + 0.01 * p1);
    double want_p[3][3] = {{p0_1, p1_1, 0.5 * 0.999},
                           {p0_2, p1_2, 0.5 * 0.999 * 0.999},
                           {p0, p1, 0.5 * 0.999 * 0.999 * 0.999}};
    double want_m[3][2] = {{0.15, 0.2}, {0.035, 0.18}, {0.1815, 0.362}};
    double want_v[3][2] = {{0.00225, 0.004}, {0.00324775, 0.003996}, {0.00549450225, 0.007992004}};
    /* anchors from an independent calculation, so a slip in the lines above shows */
    cr_assert(fabs(p0_1 - 0.8990000006666666) < 1e-12 && fabs(p0 - 0.8333015986370902) < 1e-12 &&
                  fabs(p1 - -2.2425452125097625) < 1e-12,
              "hand-written expectations are off: %.16g %.16g %.16g", p0_1, p0, p1);

    for (int t = 1; t <= 3; t++) {
        float norm = cpu->global_norm(g[t - 1], 3);
        float scale = fminf(1.0f, clip / norm);
        cpu->adamw_update(p, g[t - 1], m, v, 3, &h, t, scale);
        for (int i = 0; i < 3; i++) expect_rel("p", p[i], want_p[t - 1][i], 2e-6);
        for (int i = 0; i < 2; i++) {
            expect_rel("m", m[i], want_m[t - 1][i], 2e-6);
            /* 0.999f is 0.999 + 1.3e-8, so the float 1 - beta2 is 1.3e-5 off in
             * relative terms; v carries that (the bias correction, taken from
             * the same float beta2, cancels most of it in p). */
            expect_rel("v", v[i], want_v[t - 1][i], 3e-5);
        }
        cr_assert(m[2] == 0 && v[2] == 0, "zero gradient moved the moments");
    }
}

/* Without bias correction the first step would move by lr*sqrt(1-b2)/(1-b1)
 * = 0.316 lr; with it, |step| = lr for any gradient (eps aside). */
Test(adamw, first_step_is_lr_for_any_gradient) {
    const bk_backend *cpu = bk_cpu();
    bk_adamw h = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0};
    float p[4] = {0, 0, 0, 0}, g[4] = {1e-2f, -7, 250, -0.5f}, m[4] = {0}, v[4] = {0};
    cpu->adamw_update(p, g, m, v, 4, &h, 1, 1.0f);
    double want[4] = {-0.01, 0.01, -0.01, 0.01};
    for (int i = 0; i < 4; i++) expect_rel("first step", p[i], want[i], 1e-5);
}

Test(adamw, large_threaded_matches_double) {
    const bk_backend *cpu = bk_cpu();
    bk_adamw h = {.lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f};
    size_t n = 200003;
    float *p = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float));
    float *m = calloc(n, sizeof(float)), *v = calloc(n, sizeof(float));
    cr_assert(p && g && m && v);
    for (size_t i = 0; i < n; i++) {
        p[i] = (float)((double)(i % 1000) / 500.0 - 1.0);
        g[i] = (float)sin((double)i);
    }
    for (int t = 1; t <= 2; t++) cpu->adamw_update(p, g, m, v, n, &h, t, 0.5f);
    for (size_t i = 0; i < n; i += 1009) {
        double pd = (double)(float)((double)(i % 1000) / 500.0 - 1.0), md = 0, vd = 0;
        double gd = 0.5 * (float)sin((double)i);
        for (int t = 1; t <= 2; t++) {
            md = 0.9 * md + 0.1 * gd;
            vd = 0.999 * vd + 0.001 * gd * gd;
            double mh = md / (1 - pow(0.9, t)), vh = vd / (1 - pow(0.999, t));
            pd -= 3e-4 * (mh / (sqrt(vh) + 1e-8) + 0.1 * pd);
        }
        cr_assert(fabs(p[i] - pd) <= 1e-6, "p[%zu] %.9g vs %.9g", i, (double)p[i], pd);
    }
    free(p);
    free(g);
    free(m);
    free(v);
}
