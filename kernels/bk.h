/* bk — the compute core: one op set, two backends (the optimised CPU backend,
 * CUDA). The plain double-precision references both are tested against are
 * in tests/ref/.
 *
 * Conventions, for every op below:
 *  - fp32, row-major, contiguous unless a leading dimension is given.
 *  - Pointers live on the backend's device (host memory for CPU, device memory
 *    for CUDA). Index arrays (int) and masks (float, 1 = active) too.
 *  - Backward functions ACCUMULATE (+=) into every gradient they write, so
 *    residual branches and shared weights need no extra adds. A gradient
 *    pointer documented as nullable may be NULL: that gradient is not wanted
 *    (frozen weights, inputs that are data).
 *  - Forward functions overwrite their outputs.
 *  - Ops never allocate; scratch buffers are passed in, sized as documented.
 *  - Shapes are written in the comment above each op, llm.c style.
 *
 * Dimension names: B batch, T tokens, C channels (d_model), NH heads,
 * HS = C/NH head size, N rows (any flattening of leading dims), V classes or
 * vocabulary, d transform width.
 */
#ifndef BK_H
#define BK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { BK_CPU = 0, BK_CUDA = 1 } bk_device;

/* Arguments of multi-head scaled dot-product attention. The qkv layout is
 * [B, T, 3C]: q in columns [0, C), k in [C, 2C), v in [2C, 3C); head h owns
 * columns [h*HS, (h+1)*HS) of each. */
typedef struct bk_attn_args {
    int B, T, C, NH;
    int causal;        /* 1: query t sees keys <= t */
    const float *mask; /* [B, T] key mask, 1 = token may be attended to, 0 = removed;
                          NULL = all active. A query row with no visible key outputs 0. */
    const float *gate; /* [B, NH] per-head weight w multiplying each head's output;
                          NULL = all 1 */
    float *lse;        /* [B, NH, T], the tiled path (att NULL, attention_tiled_min_t):
                          the forward writes each row's log-sum-exp, the backward reads it */
} bk_attn_args;

/* AdamW hyper-parameters (decoupled weight decay, bias correction). */
typedef struct bk_adamw {
    float lr, beta1, beta2, eps, weight_decay;
} bk_adamw;

/* ---- sequence mixers (BiMamba, BiLSTM): arguments ----
 * A token mask (float [B,T], 1 = active, 0 = skipped; NULL = all active)
 * means the same for all three ops: a skipped token leaves every recurrent
 * state (conv window, scan state, LSTM h and c) exactly as it was, its output
 * is 0 and it receives no gradient. A masked run therefore equals a run on
 * the compacted sequence of active tokens, scattered back to their places.
 *
 * How a BiMamba direction is put together from them without copies (G head
 * groups of Dg = D/G channels, delta rank R, u the LayerNorm output):
 *   x, z   = two linear_forwards of u (W_in's halves), each [B,T,D]
 *   xc     = conv1d_forward(x) with silu = 1, reverse = direction
 *   xdbl   = gemm batched over g: [B*T, R+2N] blocks of W_x[g] @ xc's group g
 *            (lda D, strideA Dg; ldc G*(R+2N), strideC R+2N) -> [B,T,G,R+2N]
 *   dpre   = gemm batched over g: W_delta[g] @ xdbl[..., 0:R] -> [B,T,D]
 *   y      = scan_forward(x = xc, delta = dpre, delta_bias = b_delta,
 *            Bm = xdbl + R, Cm = xdbl + R + N, bc_stride = R + 2N, z, reverse)
 * and W_out (y_fwd + y_bwd) / 2. The backward runs the same chain back; the
 * reverse flags keep every tensor in token order.
 * A BiLSTM head h is streams 2h (left to right) and 2h+1 (right to left) of
 * lstm_forward with bidir = 1; gx is one linear_forward of u with the
 * [S*4H, d] stacked W_ih (b_ih + b_hh as its bias), and out [B,T,S,H] is
 * already "per head, forward then backward, heads concatenated". */

/* Depthwise 1-D convolution over the active tokens, K taps per channel.
 * Causal (reverse = 0): out[p_j] = act(bias + sum_k w[c,k] x[p_{j-K+1+k}]),
 * where p_0 < p_1 < ... are the active positions and a tap before the first
 * active token reads 0; w[c, K-1] multiplies the current token. reverse = 1
 * runs the same recurrence right to left (anti-causal: the convolution of
 * the reversed sequence, written back in the original order). */
#define BK_CONV_MAX_K 8
typedef struct bk_conv_args {
    int B, T, C, K;    /* K in [1, BK_CONV_MAX_K] */
    int reverse;       /* 0: left to right, 1: right to left */
    int silu;          /* 1: act = SiLU (fused), 0: identity */
    const float *mask; /* [B,T] nullable */
    int dx_overwrite;  /* backward only: 1 = dx is written, not added to (see conv1d_backward) */
} bk_conv_args;

/* Mamba-1 selective scan, per channel c of D = G groups of D/G channels,
 * state size N, over the active tokens in scan order (t = 0..T-1, or
 * T-1..0 when reverse):
 *   dt_t  = softplus(delta[t,c] + delta_bias[c])
 *   A_n   = -exp(A_log[c,n])
 *   h_t,n = exp(dt_t A_n) h_{t-1},n + dt_t Bm[t,g,n] x[t,c]       (h before the first = 0)
 *   y_t   = (sum_n Cm[t,g,n] h_t,n + Dskip[c] x[t,c]) * SiLU(z[t,c])
 * with g = c / (D/G). The state after each chunk of BK_SCAN_CHUNK steps (in
 * scan order) is saved in states[B, D, nchunks, N], nchunks =
 * ceil(T / BK_SCAN_CHUNK); the backward restarts each chunk from there and
 * recomputes it, so no per-step state is kept. reverse = 1 is the backward
 * direction of BiMamba without reversing any tensor: inputs and outputs stay
 * in the original token order.
 * Forward-only options (scan_backward requires them 0/NULL and reads delta):
 *  - delta_w: delta is computed inside, delta[t,c] = sum_r delta_w[c,r]
 *    dlow[t,g,r] (r < R, R <= BK_SCAN_MAX_R; dlow's rows bc_stride apart like
 *    Bm's), so the rank-R projection W_delta needs neither its own GEMM nor a
 *    [B,T,D] delta in memory; a->delta is then not read.
 *  - accumulate: at active tokens out's value adds onto y before the gate,
 *    out = (out + sum_n Cm h + Dskip x) * SiLU(z); masked tokens keep out. The
 *    second direction of BiMamba adds itself onto the first's ungated output
 *    (the first runs with z NULL), and the shared gate is applied once:
 *    (y_fwd + y_bwd) SiLU(z) = y_fwd SiLU(z) + y_bwd SiLU(z). */
#define BK_SCAN_MAX_N 16
#define BK_SCAN_MAX_R 32
#define BK_SCAN_CHUNK 64
typedef struct bk_scan_args {
    int B, T, D, G, N;       /* G divides D; N in [1, BK_SCAN_MAX_N]; D/G <= 1024 */
    int reverse;             /* 0: t = 0..T-1, 1: t = T-1..0 */
    int bc_stride;           /* floats between the (b,t,g) rows of Bm/Cm (and dBm/dCm); 0 = N */
    const float *x;          /* [B,T,D] */
    const float *delta;      /* [B,T,D] before softplus (W_delta applied, bias not) */
    const float *delta_bias; /* [D] nullable (0) */
    const float *A_log;      /* [D,N] */
    const float *Bm, *Cm;    /* [B,T,G,N] rows bc_stride apart */
    const float *Dskip;      /* [D] nullable (no skip term) */
    const float *z;          /* [B,T,D] nullable (no gate) */
    const float *mask;       /* [B,T] nullable */
    const float *delta_w;    /* [D,R] nullable: delta = delta_w dlow inside (forward only) */
    const float *dlow;       /* [B,T,G,R] rows bc_stride apart, with delta_w */
    int R;                   /* with delta_w: 1..BK_SCAN_MAX_R */
    int accumulate;          /* 1: out = (out + y) * gate (forward only) */
} bk_scan_args;

/* Gradients of the scan; each nullable, each accumulated (+=). dBm, dCm use
 * bc_stride like Bm, Cm. ddelta is with respect to delta before softplus.
 * overwrite = 1: the per-token gradients dx, ddelta, dBm and dCm are
 * written instead, 0 at masked tokens, with the bits an add onto a zeroed
 * buffer gives, so their first writer needs no zeroing pass of its own;
 * dz_overwrite the same for dz (only written with z). BiMamba's directions
 * share dz but not the others. Parameter gradients always accumulate. */
typedef struct bk_scan_grads {
    float *dx, *ddelta, *ddelta_bias, *dA_log, *dBm, *dCm, *dDskip, *dz;
    int overwrite, dz_overwrite;
} bk_scan_grads;

/* LSTM recurrence over S independent streams, hidden size H each (a
 * bidirectional multi-head LSTM is S = 2 * heads streams: stream 2h runs left
 * to right, 2h+1 right to left when bidir). The input projections of every
 * step come in precomputed (one GEMM by the caller):
 *   gx[b,t,s, 0:4H] = W_ih x_t + b_ih + b_hh, gates in the order i, f, g, o
 *   pre = gx + whh[s] @ h_{t-1};  i, f, o = sigmoid, g = tanh
 *   c_t = f c_{t-1} + i g;  h_t = o tanh(c_t);  out[b,t,s,:] = h_t
 * (torch.nn.LSTM's equations and gate order). Initial h and c are 0. */
#define BK_LSTM_MAX_H 256
typedef struct bk_lstm_args {
    int B, T, S, H;    /* H in [1, BK_LSTM_MAX_H] */
    int bidir;         /* 1: odd streams run right to left */
    const float *mask; /* [B,T] nullable */
} bk_lstm_args;

/* ---- The step on the device ----
 * Inside a training step nothing is copied to the host. Ops that measure
 * (losses, accuracy, gate statistics, gradient norms) ADD into a stats
 * buffer: BK_STAT_SLOTS doubles on the device, zeroed by the caller (be->zero)
 * at the start of a logging window and read with one to_host on logging
 * steps. Each op reduces its own contribution in a fixed order and adds it
 * with one thread (no atomics), so the slots are reproducible run to run.
 * double because sums over a window of many steps and rows lose float's
 * digits; sm_90 has double atomics too, should a later op need them. Slots
 * from BK_STAT_FIRST_FREE on are the caller's. */
typedef enum bk_stat {
    BK_STAT_LOSS_SUM = 0,    /* crossentropy_stats: sum of per-row losses, counted rows */
    BK_STAT_COUNTED,         /* rows with 0 <= target < V */
    BK_STAT_CORRECT,         /* counted rows whose argmax is the target */
    BK_STAT_BAD_TARGETS,     /* rows with target >= V or < -1 (skipped, never indexed) */
    BK_STAT_BUDGET_LOSS,     /* gate_forward: budget loss, already times norm */
    BK_STAT_ENTROPY_LOSS,    /* gate_forward: entropy loss, already times norm */
    BK_STAT_S_SUM,           /* gate ops: sum of s over samples (and layers, steps) */
    BK_STAT_HEADS_SUM,       /* gate ops: sum of k/H */
    BK_STAT_GATE_ROWS,       /* gate ops: samples seen (the divisor of the two above) */
    BK_STAT_ATTN_FLOPS,      /* gate ops: sum of k * head_cost[b] (when head_cost given) */
    BK_STAT_GRAD_NORM_SUM,   /* grad_norm: sum of the finite norms */
    BK_STAT_NORM_COUNT,      /* grad_norm: norms computed */
    BK_STAT_NONFINITE_STEPS, /* grad_norm: non-finite norms = steps adamw_clipped skipped */
    BK_STAT_FIRST_FREE,      /* first slot no bk op writes */
    BK_STAT_SLOTS = 32
} bk_stat;

/* Knobs of the BudgetFormer head gate for one layer (model_knobs plus shape). */
typedef struct bk_gate_args {
    int B, H;           /* samples in this call, heads (1..256) */
    float tau;          /* score softmax temperature */
    float sigma;        /* Gumbel noise scale; 0 = no noise */
    float tau_r;        /* rank-gate temperature */
    float s_min, s_max; /* budget range of the budget loss */
    float lambda_budget, lambda_entropy;
    float progress;          /* t / T_total; the entropy weight is lambda (2 progress - 1) */
    double norm;             /* loss normaliser, 1 / (B * L) in the model */
    uint64_t seed, step;     /* noise stream (step << 8) | layer of seed */
    uint64_t row_offset;     /* global index of local sample 0 */
    int layer;               /* 0..255 (the stream packs it in 8 bits) */
    int exact_gradient;      /* 1: no straight-through term in the backward */
    const double *head_cost; /* [B] on the device, nullable: FLOPs of one head */
} bk_gate_args;

/* Size of gate_forward's save buffer, floats. Layout, planes of B or B*H:
 * s[B], ds[B] (budget-loss gradient wrt s), k[B] (as float), unused[B],
 * then zn[B,H], p[B,H], m[B,H], rank[B,H] (as float), dp[B,H]
 * (entropy-loss gradient wrt p). */
#define BK_GATE_SAVE_FLOATS(B, H) ((size_t)(B) * (4 + 5 * (size_t)(H)))

/* The backend interface. bk_cpu() and bk_cuda() return tables with the same
 * signatures; models call ops only through a table, so one binary runs on both. */
/* The forms of A-ViT's depth prior (avit.prior), what q_l is made of:
 * PAPER, every patch token's gate score at layer l, a halted token's read on
 * its row as it stands (frozen where it halted: it keeps the score it halted
 * with, and a gradient); NVLABS, NVlabs' code exactly: a halted token's row
 * is zeroed, so its score is the constant sigmoid(-g), with no gradient;
 * SPEND, what each active token spends there (h while running, its
 * remainder where it halts), unclamped. */
enum { BK_PRIOR_PAPER = 0, BK_PRIOR_SPEND = 1, BK_PRIOR_NVLABS = 2 };

/* A-ViT halting of one layer (docs/design.md#a-vit-halting), for halt_forward and
 * halt_backward. Token 0 of each sample is the class token: it never halts
 * and is left out of every sum. */
typedef struct bk_halt_args {
    int B, T, C;       /* t is [B,T,C]; the score reads channel 0 */
    int layer, layers; /* this layer and the model's depth (the last halts every token) */
    float gamma;       /* gate scale: h = sigmoid(gamma * t[.,.,0] - centre) */
    float centre;      /* gate centre g */
    float eps;         /* a token halts once its cumulative score reaches 1 - eps */
    int prior;         /* prior form (avit.prior), a BK_PRIOR_ value */
    int mean_h;        /* halt_align (distill.halt_align): 0 = keep, 1 = mean_h */
} bk_halt_args;

/* Doubles of the per-layer sums halt_forward adds (hstats): psum[L] (the sum
 * over the patch tokens of p: paper and nvlabs, the gate's score h of every
 * patch token, halted or not, at every layer, the last included (NVlabs'
 * halting_score_layer); over the active ones, spend, h while running and
 * the remainder where it halts), keep[L] (active patch tokens), then one slot
 * for the sum of the remainders at halting. */
#define BK_HALT_STATS(L) (2 * (size_t)(L) + 1)

/* What halt_loss turns hstats into. */
typedef struct bk_halt_loss_args {
    int layers;
    double tokens;      /* patch tokens in the batch, B (T - 1) */
    float centre_depth; /* prior mean over layers 0..L-1 */
    float sigma;        /* prior std (layers) */
    float ponder_weight, prior_weight;
    int slot_ponder, slot_prior, slot_keep; /* dstats slots the losses and keep fraction add to */
    int prior; /* as bk_halt_args.prior (paper, nvlabs: q clamped to [0.01, 0.99]) */
} bk_halt_loss_args;

typedef struct bk_backend {
    const char *name;
    bk_device device;
    /* Sequence length from which attention runs tiled (att NULL, a->lse), the
     * length where it is faster than the [T, T] maps; 0 = no tiled path. */
    int attention_tiled_min_t;

    /* ---- memory ---- */
    /* Returns zeroed memory of `bytes` on the device, or NULL. */
    void *(*alloc)(size_t bytes);
    void (*release)(void *p);
    void (*to_device)(void *dst, const void *src_host, size_t bytes);
    void (*to_host)(void *dst_host, const void *src, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes); /* device to device */
    void (*zero)(void *p, size_t bytes);
    void (*sync)(void); /* waits for queued device work */
    /* Bytes that can still be allocated on the device (CPU: the host's
     * MemAvailable, within a cgroup memory limit). Returns 0, or -1 when
     * it cannot tell. */
    int (*mem_available)(size_t *bytes);

    /* ---- elementwise, n elements ---- */
    /* out = a + b (out may alias a or b) */
    void (*add)(float *out, const float *a, const float *b, size_t n);
    /* y += alpha * x */
    void (*axpy)(float *y, const float *x, float alpha, size_t n);
    /* x *= alpha */
    void (*scale)(float *x, float alpha, size_t n);
    /* GELU, tanh approximation */
    void (*gelu_forward)(float *out, const float *inp, size_t n);
    void (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t n);
    /* SiLU x*sigmoid(x) */
    void (*silu_forward)(float *out, const float *inp, size_t n);
    void (*silu_backward)(float *dinp, const float *inp, const float *dout, size_t n);
    /* sigmoid; the backward reads the forward's output */
    void (*sigmoid_forward)(float *out, const float *inp, size_t n);
    void (*sigmoid_backward)(float *dinp, const float *out, const float *dout, size_t n);
    /* softplus log(1+e^x), stable for large |x| */
    void (*softplus_forward)(float *out, const float *inp, size_t n);
    void (*softplus_backward)(float *dinp, const float *inp, const float *dout, size_t n);

    /* ---- embeddings ---- */
    /* out[N,C] = table[idx[n], :]; idx in [0, V) (checked by the caller) */
    void (*embedding_forward)(float *out, const int *idx, const float *table, int N, int C);
    /* dtable[idx[n], :] += dout[n, :] */
    void (*embedding_backward)(float *dtable, const float *dout, const int *idx, int N, int C);
    /* out[B,T,C] = inp[B,T,C] + pos[T,C] (out may alias inp) */
    void (*posadd_forward)(float *out, const float *inp, const float *pos, int B, int T, int C);
    /* dinp += dout (nullable); dpos += sum over b of dout */
    void (*posadd_backward)(float *dinp, float *dpos, const float *dout, int B, int T, int C);

    /* ---- matrix products ---- */
    /* out[N,OC] = inp[N,IC] @ w[OC,IC]^T + bias[OC] (bias nullable) */
    void (*linear_forward)(float *out, const float *inp, const float *w, const float *bias, int N,
                           int IC, int OC);
    /* dinp[N,IC] += dout @ w; dw[OC,IC] += dout^T @ inp; dbias[OC] += sum_n dout.
     * dinp, dw, dbias nullable. */
    void (*linear_backward)(float *dinp, float *dw, float *dbias, const float *dout,
                            const float *inp, const float *w, int N, int IC, int OC);
    /* Strided batched GEMM, row-major: for i in [0,batch):
     *   C_i[M,N] = alpha * op(A_i)[M,K] @ op(B_i)[K,N] + beta * C_i
     * op(X) = X or X^T by transa/transb; lda/ldb/ldc are row strides of the
     * matrices as stored; strides are element offsets between batch items. */
    void (*gemm)(int transa, int transb, int M, int N, int K, float alpha, const float *A, int lda,
                 long long strideA, const float *Bm, int ldb, long long strideB, float beta,
                 float *Cm, int ldc, long long strideC, int batch);

    /* ---- normalisation ---- */
    /* LayerNorm over C, eps 1e-5. Saves mean[N] and rstd[N] for the backward. */
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C);
    /* dinp, dw, db nullable */
    void (*layernorm_backward)(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C);
    /* Row softmax over C */
    void (*softmax_forward)(float *out, const float *inp, int N, int C);
    void (*softmax_backward)(float *dinp, const float *out, const float *dout, int N, int C);

    /* ---- attention ---- */
    /* out[B,T,C] = concat_h gate[b,h] * softmax(q_h k_h^T / sqrt(HS) + masks) v_h
     * att[B,NH,T,T] receives the probabilities (saved for the backward);
     * masked or causal-hidden entries are exactly 0. On a backend with
     * attention_tiled_min_t > 0, att may be NULL: no [T, T] map is made and
     * a->lse is written instead (the backward then takes att NULL too and
     * needs no scratch). */
    void (*attention_forward)(float *out, float *att, const float *qkv, const bk_attn_args *a);
    /* dqkv[B,T,3C] +=; dgate[B,NH] += (nullable; only read when a->gate).
     * scratch: B*NH*T*T floats. */
    void (*attention_backward)(float *dqkv, float *dgate, float *scratch, const float *dout,
                               const float *qkv, const float *att, const bk_attn_args *a);
    /* Inference with only K selected heads per sample. x[B,T,C] is the block
     * input (after LayerNorm); wqkv[3C,C], bqkv[3C] (nullable) the projection
     * that attention_forward's qkv would come from; heads[B,K] distinct head
     * ids. Only the Q/K/V rows of the selected heads are computed, only their
     * scores, and out[B,T,C] holds their outputs with every other head's
     * columns set to 0 (a->gate is ignored). scratch: B*K*T*(3*HS + T) floats. */
    void (*attention_selected_forward)(float *out, float *scratch, const float *x,
                                       const float *wqkv, const float *bqkv, const int *heads,
                                       int K, const bk_attn_args *a);
    /* y[B,T,OC] = sum over the K selected heads of c_h[B,T,HS] @ wo[:, h cols]^T + bo
     * (bo nullable): the output projection restricted to the selected heads'
     * columns; c[B,T,C] as written by attention_selected_forward. */
    void (*linear_selected_forward)(float *y, const float *c, const float *wo, const float *bo,
                                    const int *heads, int K, int B, int T, int C, int NH, int OC);

    /* ---- Walsh–Hadamard ---- */
    /* out[N,d] = alpha ⊙ (H_d inp)/sqrt(d) + beta, per row; pre[N,d] =
     * (H_d inp)/sqrt(d), the transform before the affine, for the backward
     * (nullable: not kept). d must satisfy bk_fwht_valid. alpha and beta
     * nullable (then the plain normalised transform). out may alias inp. */
    void (*fwht_forward)(float *out, float *pre, const float *inp, const float *alpha,
                         const float *beta, int N, int d);
    /* dinp = H_d^T (alpha ⊙ dout)/sqrt(d), overwritten (not added to: its
     * callers' buffers are fresh, and so no zeroing pass and no read of dinp
     * is needed); dalpha += sum_n dout ⊙ pre with
     * pre the forward's (H_d inp)/sqrt(d): given, or (NULL) transformed again
     * from inp (then one more transform per row). dbeta += sum_n dout.
     * dinp, dalpha, dbeta nullable; alpha nullable (= 1); inp read only when
     * dalpha is wanted and pre is NULL. scratch: N*d floats. */
    void (*fwht_backward)(float *dinp, float *dalpha, float *dbeta, float *scratch,
                          const float *dout, const float *inp, const float *pre, const float *alpha,
                          int N, int d);

    /* ---- pooling and losses ---- */
    /* out[B,C] = masked mean over t of inp[B,T,C] (mask[B,T] nullable; a row
     * with no active token pools to 0) */
    void (*meanpool_forward)(float *out, const float *inp, const float *mask, int B, int T, int C);
    void (*meanpool_backward)(float *dinp, const float *dout, const float *mask, int B, int T,
                              int C);
    /* losses[N] = -log softmax(logits[N,V])[target]; probs[N,V] saved.
     * target < 0 means "ignore": loss 0, and no gradient in the backward. A
     * target >= V is never read: treated as ignored (crossentropy_stats counts
     * it in BK_STAT_BAD_TARGETS). */
    void (*crossentropy_forward)(float *losses, float *probs, const float *logits,
                                 const int *targets, int N, int V);
    /* dlogits[N,V] += (probs - onehot(target)) * dlosses[n] */
    void (*crossentropy_backward)(float *dlogits, const float *probs, const int *targets,
                                  const float *dlosses, int N, int V);
    /* loss[0] = sum_n mask[n] * sum_c (a-b)^2 / max(1, C * sum_n mask[n])
     * (mask[N] nullable = all 1). loss is one float on the device. */
    void (*mse_forward)(float *loss, const float *a, const float *b, const float *mask, int N,
                        int C);
    /* da += dloss * d loss/da, db += dloss * d loss/db (both nullable) */
    void (*mse_backward)(float *da, float *db, const float *a, const float *b, const float *mask,
                         float dloss, int N, int C);

    /* ---- optimiser ---- */
    /* Returns sqrt(sum g^2) over n floats, on the host. */
    float (*global_norm)(const float *g, size_t n);
    /* One AdamW step t (1-based) on n parameters, gradients multiplied by
     * grad_scale first (global-norm clipping passes min(1, clip/norm)). */
    void (*adamw_update)(float *p, const float *g, float *m, float *v, size_t n, const bk_adamw *h,
                         int t, float grad_scale);

    /* ---- random numbers (Philox4x32-10, counter-based: element i of a
     * stream depends only on (seed, stream, offset + i)) ---- */
    void (*rng_uniform)(float *out, size_t n, uint64_t seed, uint64_t stream, uint64_t offset);
    void (*rng_normal)(float *out, size_t n, uint64_t seed, uint64_t stream, uint64_t offset);
    /* ---- sequence mixers (BiMamba, BiLSTM); masks as described above
     * bk_conv_args ---- */
    /* out[B,T,C] = depthwise conv of x[B,T,C] with w[C,K], bias[C] (nullable),
     * over the active tokens, SiLU fused when a->silu; masked tokens out 0. */
    void (*conv1d_forward)(float *out, const float *x, const float *w, const float *bias,
                           const bk_conv_args *a);
    /* dx[B,T,C] +=, dw[C,K] +=, dbias[C] += (each nullable). Reads the
     * forward's inputs (the pre-activation is recomputed for SiLU).
     * a->dx_overwrite: dx = instead (0 at masked tokens, the bits of an add
     * onto zeros), so a first writer needs no zeroing pass.
     * scratch: B*C*(K+1) floats. */
    void (*conv1d_backward)(float *dx, float *dw, float *dbias, float *scratch, const float *dout,
                            const float *x, const float *w, const float *bias,
                            const bk_conv_args *a);
    /* out[B,T,D] = the selective scan of bk_scan_args (masked tokens out 0);
     * states[B,D,ceil(T/BK_SCAN_CHUNK),N] receives the chunk-end states for
     * the backward (nullable at inference). */
    void (*scan_forward)(float *out, float *states, const bk_scan_args *a);
    /* Accumulates into (or with g->overwrite writes) every non-NULL
     * gradient in g. states from scan_forward with the same a.
     * scratch: B*D*(2N+2) floats. */
    void (*scan_backward)(const bk_scan_grads *g, float *scratch, const float *dout,
                          const float *states, const bk_scan_args *a);
    /* out[B,T,S,H] = h_t of each stream (masked tokens 0); saved[B,T,S,6H]
     * receives i, f, g, o, c_t, h_t per token for the backward (a masked
     * token's c, h are the carried state); saved nullable at inference.
     * whh[S,4H,H]. */
    void (*lstm_forward)(float *out, float *saved, const float *gx, const float *whh,
                         const bk_lstm_args *a);
    /* dgx[B,T,S,4H] += (nullable), dwhh[S,4H,H] += (nullable), given
     * dout[B,T,S,H] and the forward's saved. scratch: B*S*4H*H floats. */
    void (*lstm_backward)(float *dgx, float *dwhh, float *scratch, const float *dout,
                          const float *saved, const float *whh, const bk_lstm_args *a);

    /* ---- the step on the device: copy counter, stats, clipping, budget gate ----
     * (one block, kept together for rebases; see "The step on the device"
     * above the bk_stat enum) */
    /* Device-to-host copies since the last d2h_reset: calls and bytes of
     * to_host, plus any op that returns a device value to the host (today only
     * the old global_norm, counted as one 4-byte copy on both backends). A
     * training step that does not log must leave both at 0. Either pointer
     * may be NULL. Counters are per backend, thread-safe, never reset by ops. */
    void (*d2h_count)(uint64_t *calls, uint64_t *bytes);
    void (*d2h_reset)(void);
    /* Host-to-device copies since the last h2d_reset: calls and bytes of
     * to_device, the other half of the step's traffic. A training step
     * uploads its batch's own data (inputs, targets, a given mask) and
     * nothing else: constants live on the device (fill32) or are uploaded
     * once at setup. Same contract as d2h_count otherwise. */
    void (*h2d_count)(uint64_t *calls, uint64_t *bytes);
    void (*h2d_reset)(void);
    /* p[i] = word for n 32-bit words (a float's or an int's bits: 1.0f is
     * 0x3f800000, -1 is 0xffffffff): a constant made on the device, not
     * uploaded. */
    void (*fill32)(void *p, uint32_t word, size_t n);
    /* Gumbel(0,1) values offset+i of (seed, stream): bk_rng_gumbel_at, the
     * same bits on both backends. */
    void (*rng_gumbel)(float *out, size_t n, uint64_t seed, uint64_t stream, uint64_t offset);
    /* norm[0] = sqrt(sum g^2) over n floats (summed in double; one float on
     * the device, nothing returned to the host). stats (nullable): a finite
     * norm is added to BK_STAT_GRAD_NORM_SUM, a non-finite one counts 1 in
     * BK_STAT_NONFINITE_STEPS; BK_STAT_NORM_COUNT += 1 either way. */
    void (*grad_norm)(float *norm, double *stats, const float *g, size_t n);
    /* adamw_update with the clip scale computed on the device from norm[0]
     * (written by grad_norm): scale = clip > 0 && norm > clip ? clip / norm : 1.
     * When norm[0] is not finite nothing is written (p, m, v unchanged): the
     * step is skipped, and grad_norm counted it in BK_STAT_NONFINITE_STEPS. */
    void (*adamw_clipped)(float *p, const float *g, float *m, float *v, size_t n, const bk_adamw *h,
                          int t, const float *norm, float clip);
    /* Adds the statistics of a cross-entropy forward into stats:
     *   BK_STAT_LOSS_SUM += sum of losses[n] over counted rows,
     *   BK_STAT_COUNTED += counted rows (0 <= targets[n] < V),
     *   BK_STAT_CORRECT += counted rows whose argmax of logits[n, :] is the
     *                      target (ties to the lowest index; NaN logits are
     *                      never a maximum),
     *   BK_STAT_BAD_TARGETS += rows with targets[n] >= V or < -1.
     * Rows with target -1 are ignored. A bad target is never used as an index
     * (here and in crossentropy_forward/backward, which treat it as ignored);
     * the caller checks targets on the host before upload and treats a
     * nonzero BK_STAT_BAD_TARGETS as a bug. logits[N,V], losses[N] from
     * crossentropy_forward, targets[N]. */
    void (*crossentropy_stats)(double *stats, const float *logits, const float *losses,
                               const int *targets, int N, int V);
    /* dlosses[n] = value for counted rows (0 <= targets[n] < V), 0 for the
     * rest (overwrites): the backward's seed of a mean loss (value = 1 /
     * counted rows, known on the host from the targets it uploaded) without
     * an upload per step. */
    void (*crossentropy_dlosses)(float *dlosses, const int *targets, float value, int N, int V);
    /* BudgetFormer head gate, training (docs/design.md#budgetformer), for one
     * layer; every sample is independent. From f[B] (pre-sigmoid budget
     * logit) and z[B,H] (head scores):
     *   s = sigmoid(f); zn_i = z_i + sigma * gumbel(seed, (step << 8) | layer,
     *   (row_offset + b) * H + i) (no noise when sigma = 0);
     *   p = softmax(zn / tau); r_i = rank of zn_i (1 = best, ties to the
     *   lower index); gate_i = r_i == 1 ? 1 : sigmoid((s H - r_i) / tau_r);
     *   k[b] = clamp(floor(s H), 1, H) (k nullable).
     * gate[B,H] (overwritten) is the forward value of m (1 + p - sg(p)): the
     * per-head weight attention_forward takes as bk_attn_args.gate.
     * Adds into stats (nullable) BK_STAT_BUDGET_LOSS (lambda_budget * norm *
     * (max(0, s_min - s)^2 + max(0, s - s_max)^2)), BK_STAT_ENTROPY_LOSS
     * (lambda_entropy (2 progress - 1) * norm * H(p)), BK_STAT_S_SUM (s),
     * BK_STAT_HEADS_SUM (k / H), BK_STAT_GATE_ROWS (1 per sample) and, when
     * a->head_cost is set, BK_STAT_ATTN_FLOPS (k * head_cost[b]).
     * save: BK_GATE_SAVE_FLOATS(B, H) floats the backward reads (layout at
     * BK_GATE_SAVE_FLOATS). The CPU op is today's host gate, bit for bit. */
    void (*gate_forward)(float *gate, int *k, float *save, double *stats, const float *f,
                         const float *z, const bk_gate_args *a);
    /* From dgate[B,H] (attention_backward's dgate) and the saved forward:
     * df[B] += d/df and dz[B,H] += d/dz of (the gate path + the budget and
     * entropy losses). The gate's gradient to p is the straight-through
     * dw/dp = m unless a->exact_gradient (then the backward is the exact
     * gradient of the forward; for finite-difference tests). a as in the
     * forward. */
    void (*gate_backward)(float *df, float *dz, const float *dgate, const float *save,
                          const bk_gate_args *a);
    /* Inference gate (no noise): s[b] = sigmoid(f[b]); k[b] = force_k > 0 ?
     * min(force_k, H) : clamp(floor(s H), 1, H); heads[b, 0..H) = head ids by
     * rank of z (best first, ties to the lower index): the first k[b] are the
     * heads to run. stats (nullable) as gate_forward: S_SUM, HEADS_SUM,
     * GATE_ROWS, ATTN_FLOPS (head_cost[B] nullable). The caller may copy k and
     * heads to the host (inference is not a training step). */
    void (*gate_infer)(float *s, int *k, int *heads, double *stats, const float *f, const float *z,
                       const double *head_cost, int B, int H, int force_k);
    /* ---- A-ViT token halting (bk_halt_args) ---- */
    /* out[n, :] = inp[n, :] * s[n] over N rows of C (in place allowed). */
    void (*rowscale)(float *out, const float *inp, const float *s, int N, int C);
    /* One layer after its block: for each active token (mask[b,k] > 0) the
     * gate's score s = sigmoid(gamma t[b,k,0] - centre) (class token: 0),
     * h = s (last layer: 1), cum += h, and when cum >= 1 - eps the token
     * halts here (at = layer, next = 0) else rem -= h, next = 1. Inactive
     * tokens: next = 0, state unchanged, h = 0 (spend) or, paper, their
     * score s on their row as it stands, or, nvlabs, sigmoid(-centre) (the
     * score of a zeroed row), added to psum (NVlabs' q is the mean over
     * every token, halted or not). h[B,T] keeps s for the
     * backward (at the last layer too); cum, rem [B,T] (start 0 and 1; rem
     * ends as the remainder R), at[B,T] (start -1: not yet halted),
     * next[B,T] (this layer's output mask; may not alias mask). hstats
     * (BK_HALT_STATS(layers) doubles) += psum (paper: s; spend: h while
     * running, rem where it halts), keep, remainders. */
    void (*halt_forward)(float *h, float *next, float *cum, float *rem, int *at, double *hstats,
                         const float *t, const float *mask, const bk_halt_args *a);
    /* From hstats after the last layer: q_l = psum_l / sum psum (paper:
     * clamped to [0.01, 0.99], as NVlabs' code), the prior pi_l proportional
     * to exp(-(l - centre)^2 / 2 sigma^2), ponder = ponder_weight * (sum keep
     * + sum remainders) / tokens, prior = prior_weight * KL(pi || q); adds
     * both and mean keep fraction (sum keep / (tokens L)) into stats at the
     * slots given. dldp[L] (floats, overwritten): d prior / d p of one token
     * at layer l (a clamped q_l passes no gradient). */
    void (*halt_loss)(double *stats, float *dldp, const double *hstats, const bk_halt_loss_args *a);
    /* dt[b,k,0] += gamma h (1 - h) g for the patch tokens of this layer: paper,
     * g = dldp[layer] (+ pgrad while still running after it, at > layer) for
     * every patch token (halted ones too: their score is in q); nvlabs, the
     * same but 0 for a token halted before this layer; spend, g = dldp[layer] -
     * dldp[at] + pgrad for at > layer. pgrad = -ponder_weight / tokens (the
     * remainder's share of the ponder cost). */
    void (*halt_backward)(float *dt, const float *h, const int *at, const float *dldp, float pgrad,
                          const bk_halt_args *a);
    /* The ACT output (docs/design.md#a-vit-halting): out_k = sum_{l < N_k} h_k^l t_k^l + R_k
     * t_k^{N_k}. One layer's share: out[b,k,:] += w x[b,k,:] with w = h (at > layer), rem (at ==
     * layer: the remainder R), 0 (halted before, or never ran); the class token (it never halts, h
     * = 0) has w = 1 at the last layer only, so its output is its last layer's. x[B,T,C] is this
     * layer's output t^l. */
    void (*halt_act_forward)(float *out, const float *x, const float *h, const int *at,
                             const float *rem, const bk_halt_args *a);
    /* Its backward at this layer, dout = d loss / d out: dx[b,k,:] += w dout
     * (the share above) and, for the patch tokens still running after it
     * (at > layer), dx[b,k,0] += gamma h (1 - h) <dout, x - xlast> (h moves
     * its own weight and, through R, the halting layer's; xlast = x[L], equal
     * to the halting layer's output for a halted, frozen row). */
    void (*halt_act_backward)(float *dx, const float *dout, const float *x, const float *xlast,
                              const float *h, const int *at, const float *rem,
                              const bk_halt_args *a);
    /* S2S halting alignment of one layer (docs/design.md#distillation-loss, distill): over the
     * patch tokens active in mask[B,T] (n of them; N = B (T - 1) patch
     * tokens), with the student's score hs = sigmoid(gamma t[.,.,0] -
     * centre) and the teacher's ht[B,T] (clamped to [1e-6, 1 - 1e-6] in the
     * KL), loss = weight * (sum BKL(ht || hs) / n + 5 (keep_s - keep_t)^2),
     * keep_x = (1/N) sum_active sigmoid(gamma (1 - eps - tcum - hx)): the
     * fraction of patch tokens that run past this layer, in the smooth form
     * of the halting test cum < 1 - eps, with tcum[B,T] the teacher's
     * cumulative score before this layer (a->mean_h: the former form,
     * 5 (mean hs - mean ht)^2 over the active tokens; tcum unused, may be
     * NULL). Adds it into stats[slot] and its gradient into dt[b,k,0]. */
    void (*halt_align)(float *dt, double *stats, int slot, const float *t, const float *ht,
                       const float *tcum, const float *mask, float weight, const bk_halt_args *a);
    /* Label smoothing eps over a crossentropy_forward's losses (in place):
     * losses[n] = (1 - eps) losses[n] + eps (logsumexp(logits[n]) - mean_v
     * logits[n,v]) for counted rows (0 <= target < V); and its backward's
     * share: dlogits[n,v] += eps (onehot(target)_v - 1/V) dlosses[n] on top
     * of crossentropy_backward's. */
    void (*label_smooth_forward)(float *losses, const float *logits, const int *targets, int N,
                                 int V, float eps);
    void (*label_smooth_backward)(float *dlogits, const int *targets, const float *dlosses, int N,
                                  int V, float eps);
} bk_backend;

/* The optimised CPU backend; always available. (Its plain references are in
 * tests/ref/.) */
const bk_backend *bk_cpu(void);
/* on != 0: the CPU backend skips its AVX-512 kernels where they are built
 * (matrix products, GELU) and runs the portable code a CPU without AVX-512
 * runs, so tests check both paths on one machine; 0 (the default) restores
 * them. (The scan's vector width is fixed when it is compiled.) */
void bk_cpu_set_portable(int on);

/* The CUDA backend, or NULL when bf was built without CUDA or no GPU is
 * usable; *why (nullable) then points to a static reason. */
const bk_backend *bk_cuda(const char **why);

/* Picks a backend by name: "cpu", "cuda" or "auto" (CUDA when usable, else
 * CPU). Returns 0, or -1 with a message in err. */
int bk_select(const char *device, const bk_backend **out, char *err, size_t errlen);

/* 1 when d is a width the Walsh–Hadamard op supports: d = 2^n or 12*2^n, d >= 1. */
int bk_fwht_valid(int d);

/* Entry (i, j) of the unnormalised H_d (+1 or -1) that fwht_forward applies:
 * Sylvester H_{2^n} in natural order, or H_12 (Paley) ⊗ H_{2^n}. For tests and
 * docs; d must be valid. */
int bk_hadamard_entry(int d, int i, int j);

/* libgomp reads OMP_WAIT_POLICY once, when it loads, and by default spins
 * idle threads. When other work shares the cores (several trials or ranks on
 * few cores, a daemon, another job) the spinning starves the working threads:
 * a test-set evaluation took 178 s spinning against 22 s sleeping on a loaded
 * 2-core machine, and selected-heads inference fell off a cliff (160 ms
 * instead of 14 ms). Programs call this first thing in main: unless the user
 * chose a policy, it re-executes the program once with OMP_WAIT_POLICY=passive
 * (and BK_OMP_PASSIVE_SET=1, so a benchmark can run a peer program without the
 * policy it did not ask for). Returns only when no re-exec happened.
 * OpenBLAS likewise reads OPENBLAS_CORETYPE once, when it loads: where it fell
 * back to its SSE3 kernels on a CPU it does not know but that has AVX-512
 * (or AVX2), the same re-exec sets OPENBLAS_CORETYPE=SkylakeX (Haswell), the
 * kernels for what the CPU can do (3x faster sgemm on such a virtual machine).
 * A user's own OPENBLAS_CORETYPE is kept. */
void bk_openmp_passive(char **argv);

#ifdef __cplusplus
}
#endif
#endif
