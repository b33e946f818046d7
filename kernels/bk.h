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

/* Mamba-2's SSD scan (state space duality; Dao & Gu, 2024), the scan of a
 * BiMamba-2 direction: H heads of P channels, state size N, one group (B and
 * C shared by every head), a scalar decay per head; over the active tokens in
 * scan order (t = 0..T-1, or T-1..0 when reverse):
 *   dt_t = softplus(dt[t,h] + dt_bias[h]);  A_h = -exp(A_log[h])
 *   S_t  = exp(dt_t A_h) S_{t-1} + dt_t x_t Bm_t^T   (S [P,N], S before the first = 0)
 *   y_t  = S_t Cm_t + Dskip[h] x_t                    (x_t, y_t: head h's P channels)
 * computed by chunks of `chunk` active tokens as the paper's chunked
 * algorithm: inside a chunk the quadratic form y = ((Cm Bm^T) o L)(dt x) with
 * L[i,j] = exp(sum_{j<k<=i} dt_k A) as matrix products, plus the state
 * entering the chunk read out through Cm; between chunks the state is passed
 * on. The state entering each chunk is saved in states[B,H,nch,P,N],
 * nch = ceil(T / chunk), for the backward. */
#define BK_SSD_CHUNK 64
#define BK_SSD_MAX 1024 /* P, N and chunk at most this */
typedef struct bk_ssd_args {
    int B, T, H, P, N;
    int chunk;            /* active tokens per chunk, 0 = BK_SSD_CHUNK */
    int reverse;          /* 0: t = 0..T-1, 1: t = T-1..0 */
    int ld;               /* floats between the (b,t) rows of x, Bm, Cm (and dx, dBm, dCm) */
    const float *x;       /* [B,T,H*P] rows ld apart */
    const float *Bm, *Cm; /* [B,T,N] rows ld apart */
    const float *dt;      /* [B,T,H] before softplus, dt_bias not added */
    const float *dt_bias; /* [H] */
    const float *A_log;   /* [H] */
    const float *Dskip;   /* [H] nullable (no skip term) */
    const float *mask;    /* [B,T] nullable */
} bk_ssd_args;
/* Floats of the scratch ssd_forward and ssd_backward take. */
#define BK_SSD_SCRATCH(B, T, H, P, N, Q)                                                           \
    ((size_t)(B) *                                                                                 \
     ((size_t)(H) * (P) * (N) + 4 * (size_t)(Q) * (N) + 2 * (size_t)(Q) * (Q) +                    \
      4 * (size_t)(Q) * (P) + (size_t)(N) + 5 * (size_t)(Q) + 3 * (size_t)(H) + (size_t)(T)))

/* Gradients of the SSD scan. dx, dBm, dCm (rows ld apart) and ddt [B,T,H]
 * (with respect to dt before softplus) are written, 0 at masked tokens, and
 * must not be NULL; ddt_bias, dA_log, dDskip [H] are accumulated (+=), each
 * nullable. */
typedef struct bk_ssd_grads {
    float *dx, *dBm, *dCm, *ddt;
    float *ddt_bias, *dA_log, *dDskip;
} bk_ssd_grads;

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

    /* The ops (kernels/bk_ops.def: each with its contract), as members. */
#define BK_OP(ret, name, params) ret(*name) params;
#include "kernels/bk_ops.def"
#undef BK_OP
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
