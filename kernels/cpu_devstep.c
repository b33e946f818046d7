/* Optimised CPU backend, the ops that keep a training step on the device:
 * Gumbel stream, gradient norm into a device float, AdamW clipped from it,
 * cross-entropy statistics, and the BudgetFormer head gate. Contracts in
 * kernels/bk.h ("The step on the device").
 *
 * The gate reproduces the host gate worker/model.c had before issue 10
 * (gate_forward, gate_losses, gate_backward, budget_k, rank_heads)
 * operation for operation, in the same types and order, so a model that
 * moves to these ops keeps its numbers bit for bit; tests/test_devstep.c
 * holds a copy of that host code as the oracle. */
#include <math.h>

#include "kernels/bk_rng.h"
#include "kernels/cpu_ops.h"

#define RNG_PAR_MIN ((size_t)1 << 14)

void bk_cpu_rng_gumbel(float *out, size_t n, uint64_t seed, uint64_t stream, uint64_t offset) {
#pragma omp parallel for schedule(static) if (n >= RNG_PAR_MIN)
    for (size_t i = 0; i < n; i++) out[i] = bk_rng_gumbel_at(seed, stream, offset + i);
}

/* ---- gradient norm and AdamW ---- */

static void add_norm_stats(double *stats, float norm) {
    if (!stats) return;
    if (isfinite(norm))
        stats[BK_STAT_GRAD_NORM_SUM] += norm;
    else
        stats[BK_STAT_NONFINITE_STEPS] += 1;
    stats[BK_STAT_NORM_COUNT] += 1;
}

void bk_cpu_grad_norm(float *norm, double *stats, const float *g, size_t n) {
    norm[0] = bk_cpu_norm_value(g, n);
    add_norm_stats(stats, norm[0]);
}

/* The scale as the train loop computed it on the host, then the plain
 * update: the same bits as adamw_update(..., scale). */
void bk_cpu_adamw_clipped(float *p, const float *g, float *m, float *v, size_t n, const bk_adamw *h,
                          int t, const float *norm, float clip) {
    float nr = norm[0];
    if (!isfinite(nr)) return;
    float scale = clip > 0 && nr > clip ? clip / nr : 1.0f;
    bk_cpu_adamw_update(p, g, m, v, n, h, t, scale);
}

/* ---- cross-entropy statistics ---- */

/* Index of the largest non-NaN value of x[V], the lowest among equals
 * (what a scan with strict > keeps); 0 when every value is NaN. Two passes
 * so the first vectorises: the max (NaN never wins x > m, and lanes combine
 * without NaNs), then its first position. */
static int row_argmax(const float *x, int V) {
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int v = 0; v < V; v++) mx = x[v] > mx ? x[v] : mx;
    for (int v = 0; v < V; v++)
        if (x[v] == mx) return v;
    return 0;
}

/* The loss sum runs over rows in order, in double: the order worker/model.c
 * summed them on the host, so the bits match. The argmax (ties to the
 * lowest index: strict >) is threaded over rows; its counts are integers,
 * exact in any order. */
void bk_cpu_crossentropy_stats(double *stats, const float *logits, const float *losses,
                               const int *targets, int N, int V) {
    double sum = 0;
    long long counted = 0, bad = 0, correct = 0;
    for (int r = 0; r < N; r++) {
        int t = targets[r];
        if (t == -1) continue;
        if (t < -1 || t >= V) {
            bad++;
            continue;
        }
        sum += losses[r];
        counted++;
    }
#pragma omp parallel for schedule(static) reduction(+ : correct) if ((long long)N * V >= (1 << 16))
    for (int r = 0; r < N; r++) {
        int t = targets[r];
        if (t < 0 || t >= V) continue;
        correct += row_argmax(logits + (size_t)r * V, V) == t;
    }
    stats[BK_STAT_LOSS_SUM] += sum;
    stats[BK_STAT_COUNTED] += (double)counted;
    stats[BK_STAT_CORRECT] += (double)correct;
    stats[BK_STAT_BAD_TARGETS] += (double)bad;
}

void bk_cpu_crossentropy_dlosses(float *dlosses, const int *targets, float value, int N, int V) {
    for (int r = 0; r < N; r++) dlosses[r] = targets[r] >= 0 && targets[r] < V ? value : 0.0f;
}

/* ---- the BudgetFormer head gate ---- */

static float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

/* Rank (1 = best) of score i among H; ties go to the lower index. */
static int rank_of(const float *zn, int H, int i) {
    int r = 1;
    for (int j = 0; j < H; j++)
        if (zn[j] > zn[i] || (zn[j] == zn[i] && j < i)) r++;
    return r;
}

static int budget_k(float s, int H, int force_k) {
    if (force_k > 0) return force_k < H ? force_k : H;
    int k = (int)floorf(s * (float)H);
    return k < 1 ? 1 : (k > H ? H : k);
}

/* Plane pointers of the save buffer (bk.h, BK_GATE_SAVE_FLOATS). */
typedef struct {
    float *s, *ds, *k, *zn, *p, *m, *rank, *dp;
} gate_planes;

static gate_planes planes_of(float *save, int B, int H) {
    size_t BH = (size_t)B * H;
    gate_planes g;
    g.s = save;
    g.ds = save + B;
    g.k = save + 2 * (size_t)B;
    g.zn = save + 4 * (size_t)B;
    g.p = g.zn + BH;
    g.m = g.p + BH;
    g.rank = g.m + BH;
    g.dp = g.rank + BH;
    return g;
}

void bk_cpu_gate_forward(float *gate, int *kout, float *save, double *stats, const float *f,
                         const float *z, const bk_gate_args *a) {
    int B = a->B, H = a->H;
    gate_planes sv = planes_of(save, B, H);
    uint64_t stream = (a->step << 8) | (uint64_t)a->layer;
    double norm = a->norm;
    float ent_w = a->lambda_entropy * (2.0f * a->progress - 1.0f);
    for (int b = 0; b < B; b++) {
        size_t o = (size_t)b * H;
        float s = sigmoidf_(f[b]);
        const float *zb = z + o;
        float *zn = sv.zn + o, *p = sv.p + o, *g = sv.m + o;
        /* gate_forward */
        float mx = -INFINITY;
        for (int i = 0; i < H; i++) {
            float noise =
                a->sigma > 0
                    ? a->sigma * bk_rng_gumbel_at(a->seed, stream,
                                                  (a->row_offset + (uint64_t)b) * (uint64_t)H +
                                                      (uint64_t)i)
                    : 0;
            zn[i] = zb[i] + noise;
            if (zn[i] / a->tau > mx) mx = zn[i] / a->tau;
        }
        double sum = 0;
        for (int i = 0; i < H; i++) sum += (p[i] = expf(zn[i] / a->tau - mx));
        for (int i = 0; i < H; i++) p[i] = (float)(p[i] / sum);
        for (int i = 0; i < H; i++) {
            int r = rank_of(zn, H, i);
            g[i] = r == 1 ? 1.0f : sigmoidf_((s * H - (float)r) / a->tau_r);
            gate[o + i] = g[i]; /* forward value of m * (1 + p - sg(p)) */
            sv.rank[o + i] = (float)r;
        }
        int k = budget_k(s, H, 0);
        if (kout) kout[b] = k;
        sv.s[b] = s;
        sv.k[b] = (float)k;
        /* gate_losses */
        float lo = fmaxf(0.0f, a->s_min - s), hi = fmaxf(0.0f, s - a->s_max);
        double budget = a->lambda_budget * norm * (lo * lo + hi * hi);
        sv.ds[b] = (float)(a->lambda_budget * norm * (-2.0 * lo + 2.0 * hi));
        double ent = 0;
        for (int i = 0; i < H; i++) ent -= p[i] > 0 ? p[i] * log(p[i]) : 0;
        double entropy = ent_w * norm * ent;
        for (int i = 0; i < H; i++)
            sv.dp[o + i] = (float)(-ent_w * norm * (p[i] > 0 ? log(p[i]) + 1.0 : 0.0));
        if (stats) {
            stats[BK_STAT_BUDGET_LOSS] += budget;
            stats[BK_STAT_ENTROPY_LOSS] += entropy;
            stats[BK_STAT_S_SUM] += s;
            stats[BK_STAT_HEADS_SUM] += (double)k / H;
            stats[BK_STAT_GATE_ROWS] += 1;
            if (a->head_cost) stats[BK_STAT_ATTN_FLOPS] += k * a->head_cost[b];
        }
    }
}

/* dp_i = entropy gradient + (straight-through) dw_i m_i, recomputed in the
 * second pass rather than stored, so H has no fixed limit here. */
static float gate_dp(const gate_planes *sv, const float *dgate, size_t j, int exact) {
    float dp = sv->dp[j];
    if (!exact) dp += dgate[j] * sv->m[j]; /* straight-through: dw/dp = m */
    return dp;
}

void bk_cpu_gate_backward(float *df, float *dz, const float *dgate, const float *save,
                          const bk_gate_args *a) {
    int B = a->B, H = a->H;
    gate_planes sv = planes_of((float *)save, B, H);
    for (int b = 0; b < B; b++) {
        size_t o = (size_t)b * H;
        const float *p = sv.p + o, *g = sv.m + o, *dw = dgate + o, *r = sv.rank + o;
        float ds = sv.ds[b];
        double dot = 0;
        for (int i = 0; i < H; i++) {
            if (r[i] != 1.0f) ds += dw[i] * g[i] * (1.0f - g[i]) * (float)H / a->tau_r;
            /* softmax((z + noise)/tau) backward */
            dot += (double)p[i] * gate_dp(&sv, dgate, o + i, a->exact_gradient);
        }
        for (int i = 0; i < H; i++) {
            float dp = gate_dp(&sv, dgate, o + i, a->exact_gradient);
            dz[o + i] += (float)(p[i] * (dp - dot) / a->tau);
        }
        float s = sv.s[b];
        df[b] += ds * s * (1.0f - s);
    }
}

void bk_cpu_gate_infer(float *s, int *k, int *heads, double *stats, const float *f, const float *z,
                       const double *head_cost, int B, int H, int force_k) {
    for (int b = 0; b < B; b++) {
        float sb = sigmoidf_(f[b]);
        int kb = budget_k(sb, H, force_k);
        s[b] = sb;
        k[b] = kb;
        for (int i = 0; i < H; i++) heads[(size_t)b * H + rank_of(z + (size_t)b * H, H, i) - 1] = i;
        if (stats) {
            stats[BK_STAT_S_SUM] += sb;
            stats[BK_STAT_HEADS_SUM] += (double)kb / H;
            stats[BK_STAT_GATE_ROWS] += 1;
            if (head_cost) stats[BK_STAT_ATTN_FLOPS] += kb * head_cost[b];
        }
    }
}
