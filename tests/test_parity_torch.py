"""The outside party for test_it_parity_torch: an independent PyTorch model of
each bf architecture, written from the equations of docs/design.md#algorithms
and the tensor names of docs/checkpoints.md, not from bf's C code.

  test_parity_torch.py DUMP_DIR [DUMP_DIR ...]

Each DUMP_DIR is what `bfworker dump` wrote: model.safetensors (bf's
weights), batch.safetensors (ids, mask, targets, the budget's noise per
layer), outputs.safetensors (bf's logits), grads.safetensors (bf's gradient
of every tensor after one training-mode forward and backward) and dump.json
(bf's losses, knobs, shape). The model here loads the weights by name
(load_state_dict, strict: every name must match), runs the same batch in
float64, and checks

  logits      max |bf - torch| <= 1e-4 * max |torch|
  losses      total, task, budget, entropy: |bf - torch| <= 1e-4 |torch| + 1e-9
  gradients   every tensor, elementwise:
              |bf - torch| <= 1e-3 |torch| + 1e-5 max|torch of that tensor| + 1e-30
              (the floor: entries five orders below the tensor's largest are
              sums that cancel, where bf's float32 rounding, ~1e-7 of the
              magnitude of the summed terms, is all that is left; no absolute
              floor beyond 1e-30, since at init the scan's own gradients (A_log,
              dt_proj, x_proj) are ~1e-12 and must still be checked);
              bimamba2's tensors also |bf - torch| <= 1e-4 max|torch of that tensor|

and exits non-zero naming the tensor, the worst element and both values on
the first mismatch. A budget case must be well-posed first: no two heads'
noisy scores within 1e-4 (bf ranks float32 scores), and no sample's s within
1e-3 of an edge of budget.range (there the float32 hinge gradient is
ill-conditioned, ulp(s)/|s - edge|: measured, bf and this model run in
float32 then both differ from float64 by 2e-4). The summary line says how
many samples were outside the range, i.e. whether the hinge was exercised. Everything is float64 here, so the reference does not
depend on summation order; bf runs float32.

The model:
  x = tok_emb[ids] + pos_emb[t]
  per block (pre-LN):  x += Attn(LN1(x));  x += W2 GELU(W1 LN2(x))   (hidden 4d)
  LN: eps 1e-5. GELU: the tanh approximation (bf's kernels use the tanh form).
  Attn: q, k, v = the three d-wide thirds of u Wqkv^T + b (head h = columns
  h*d_h .. (h+1)*d_h of each); softmax(q k^T / sqrt(d_h)) with masked keys
  (mask 0) and, in the decoder, later positions removed; a query with no
  visible key outputs 0. Head outputs (times the gate w) are concatenated to c
  and projected: dense W_O c + b_O, or Hadamard alpha * (H_d c)/sqrt(d) + beta
  with Sylvester H_d in natural order (only d = 2^n here; bf's 12*2^n Paley
  form is not rebuilt).
  Budget (training): u_bar = masked mean of u = LN1(x); s = sigmoid(f(u_bar)),
  f = d -> d/4 -> 1 with GELU; z = scorer(u_bar); p = softmax((z + noise)/tau)
  with bf's dumped noise; r = ranks of z + noise (1 = best, ties to the lower
  index; no gradient); m_i = 1 at rank 1, else sigmoid((s H - r_i)/tau_r);
  w = m * (1 + p - stopgrad(p)).
  Heads: encoder = masked mean of LN_f(x) then head; decoder = LN_f(x) tok_emb^T.
  BiLSTM layers (model.mixers): torch.nn.LSTM per head over each sample's
  active tokens (any mask), see BiLSTMMixer.
  Wide BiLSTM layers (bilstm_wide): the S2S authors' layout from their paper
  (dense pre-projection, an LSTM of hidden d_h per head per direction over the
  head's d_h channels, a per-head projection of [fwd; bwd]), see BiLSTMWideMixer.
  BiMamba-2 layers (bimamba2): the S2S authors' layout of two Mamba-2 blocks,
  the SSD recurrence written from the Mamba-2 paper's description (scalar
  decay per head, one group of B and C, state N = shape "d_state"), token by
  token, gated RMSNorm, a grouped 1x1 fusion of the directions per head; see
  BiMamba2Mixer.
  BiMamba layers (model.mixers): a plain sequential selective scan written
  from docs/design.md#mamba-selective-scan-and-the-bidirectional-mixer ("Mamba selective scan, and the multi-head bidirectional
  mixer"), one sample and one step at a time over its active tokens, see
  BiMambaMixer.
  Loss: CE (mean over targets >= 0)
        + lambda_b * mean over samples and layers of
          [max(0, s_min - s)^2 + max(0, s - s_max)^2]
        + lambda_e * (2 progress - 1) * mean over samples and layers of H(p).

The ViT (shape model "vit") and its A-ViT halting: class ViT below, its
docstring gives the equations. An A-ViT dump also compares the ponder and
prior losses, the retention (mean fraction of patch tokens active per layer)
and per layer the active patch tokens (exactly) and the p they spent; it must
be well-posed (no cumulative score within 1e-4 of 1 - eps, where float32
could decide the other way) and meaningful (retention strictly between 1/L
and 1, some token halting mid-depth). Then each of AVIT_MUTANTS, a
deliberate departure of the reference from the halting equations, must fail
against the same dump (attention-only dumps), or the check reports that it
cannot see that part. An A-ViT dump also holds bf's inference forward of the
batch, halted tokens physically dropped (infer.safetensors, infer.json): its
logits, retention and correct count must be the reference's (the masked
forward computes the same function).

A dump of S2S stage 1 (`bfworker dump --stage distill`, dump.json "stage":
"distill") is checked by check_distill: the teacher from its own file
(dump.json's distill.teacher), the student under its masks, each loss term
from docs/design.md#distillation-loss's formulas (distill_reference's docstring) within RTOL_TERM,
every student gradient as above, and each of DISTILL_MUTANTS must fail. A
stage 2 dump (--stage finetune) is an A-ViT ViT with mixers, checked as one
with the CE smoothed by the dump's label_smoothing (distill.label_smoothing,
which stage 1 uses too), and its reference with another smoothing must fail
(finetune_note).

The ViT's blocks may hold mixers (shape "mixers", as S2S's student does):
they run under the halting masks. Every dump with mixers runs each of
MIXER_MUTANTS that can show on it (masked tokens run, the scan state's
gradient cut at chunk boundaries, delta rank 1, the partial tile's state
dropped; mixer_mutants) and each must fail.
"""
import json
import math
import os
import sys

import numpy as np

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:  # a missing torch is a failure, not a skip: CI installs it
    print("test_parity_torch.py: cannot import torch (%s): install Debian's python3-torch "
          "(sh scripts/setup.sh)" % e, file=sys.stderr)
    sys.exit(2)
# build/pydeps (scripts/setup.sh) holds the safetensors package; it goes after
# Debian's own packages, so torch runs with the numpy it was built for
if os.environ.get("BF_PYDEPS"):
    sys.path.append(os.environ["BF_PYDEPS"])
from safetensors.torch import load_file  # noqa: E402

RTOL_LOGITS = 1e-4
RTOL_LOSS = 1e-4
RTOL_GRAD = 1e-3
# bimamba2's own tensors also within 1e-4 of their tensor's largest gradient
# (issue 42's bound for the authors' mixers, normwise)
RTOL_MIXER2 = 1e-4
# stage 1's terms (tap MSE, halting alignment, smoothed CE, total): bf sums
# them in double from float32 tensors, so a term keeps the float32 rounding
# of its inputs (~1e-7 relative), amplified where it is a difference of
# near-equal scores (the alignment: measured below 1e-5 relative)
RTOL_TERM = 1e-5
FLOOR_TERM = 1e-10
FLOOR_GRAD = 1e-5  # times the tensor's largest reference gradient


class Failure(Exception):
    pass


def sylvester(d):
    """Unnormalised Sylvester Hadamard matrix of order d = 2^n, natural order:
    H_1 = [1], H_2k = [[H_k, H_k], [H_k, -H_k]]."""
    if d < 1 or d & (d - 1):
        raise Failure("hadamard width %d is not a power of two (the 12*2^n Paley form is "
                      "not rebuilt by this test)" % d)
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def masked_mean(x, mask):
    """x [B,T,C], mask [B,T] (1 = token) -> [B,C]; a row with no token -> 0."""
    m = mask.unsqueeze(-1)
    n = mask.sum(1, keepdim=True)
    return (x * m).sum(1) / torch.where(n > 0, n, torch.ones_like(n))


class MLP(nn.Module):
    def __init__(self, d_in, hidden, d_out):
        super().__init__()
        self.fc = nn.Linear(d_in, hidden)
        self.proj = nn.Linear(hidden, d_out)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Hadamard(nn.Module):
    """y = alpha * (H_d c)/sqrt(d) + beta; H_d symmetric, so c H_d works per row."""

    def __init__(self, d):
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(d))
        self.beta = nn.Parameter(torch.zeros(d))
        self.register_buffer("H", sylvester(d), persistent=False)

    def forward(self, c):
        d = c.shape[-1]
        return self.alpha * (c @ self.H.to(c.dtype)) / math.sqrt(d) + self.beta


class Budget(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d // 4)
        self.out = nn.Linear(d // 4, 1)


class Attention(nn.Module):
    def __init__(self, d, heads, causal, hadamard, budget):
        super().__init__()
        self.d, self.heads, self.causal = d, heads, causal
        self.qkv = nn.Linear(d, 3 * d)
        self.out = Hadamard(d) if hadamard else nn.Linear(d, d)
        self.has_budget = budget
        if budget:
            self.budget = Budget(d)
            self.scorer = nn.Linear(d, heads)

    def gate(self, u, mask, noise, kn):
        """The soft training gate w [B,H] and this layer's budget and entropy sums."""
        H = self.heads
        ubar = masked_mean(u, mask)
        s = torch.sigmoid(self.budget.out(F.gelu(self.budget.fc(ubar), approximate="tanh")))
        s = s.squeeze(-1)  # [B]
        zn = self.scorer(ubar) + noise
        p = torch.softmax(zn / kn["tau"], dim=-1)
        # ranks of z + noise, 1 = best; ties to the lower index; no gradient
        v = zn.detach()
        idx = torch.arange(H)
        better = (v.unsqueeze(1) > v.unsqueeze(2)) | (
            (v.unsqueeze(1) == v.unsqueeze(2)) & (idx.view(1, 1, H) < idx.view(1, H, 1)))
        rank = 1 + better.sum(-1).to(u.dtype)  # rank[b,i] = 1 + #{j better than i}
        m = torch.where(rank == 1, torch.ones_like(rank),
                        torch.sigmoid((s.unsqueeze(-1) * H - rank) / kn["tau_r"]))
        w = m * (1 + p - p.detach())
        hinge = (torch.clamp(kn["s_min"] - s, min=0) ** 2 + torch.clamp(s - kn["s_max"], min=0) ** 2)
        ent = -(p * torch.log(p)).sum(-1)
        self.last_s = s.detach()
        self.last_zn = v
        return w, hinge.sum(), ent.sum()

    def forward(self, u, mask, noise, kn):
        B, T, C = u.shape
        H, hs = self.heads, C // self.heads
        w, hinge, ent = None, 0, 0
        if self.has_budget:
            w, hinge, ent = self.gate(u, mask, noise, kn)
        q, k, v = self.qkv(u).split(C, dim=-1)
        q, k, v = (t.view(B, T, H, hs).transpose(1, 2) for t in (q, k, v))  # [B,H,T,hs]
        att = q @ k.transpose(-1, -2) / math.sqrt(hs)
        visible = (mask > 0).view(B, 1, 1, T).expand(B, H, T, T)
        if self.causal:
            visible = visible & torch.ones(T, T, dtype=torch.bool).tril()
        att = torch.softmax(att.masked_fill(~visible, float("-inf")), dim=-1)
        # a query with no visible key outputs 0
        att = torch.where(visible.any(-1, keepdim=True), att, torch.zeros_like(att))
        y = att @ v  # [B,H,T,hs]
        if w is not None:
            y = y * w.view(B, H, 1, 1)
        c = y.transpose(1, 2).reshape(B, T, C)
        self.last_c = c  # the output before W_O (S2S's distillation target)
        return self.out(c), hinge, ent


class OutOnly(nn.Module):
    """The replaced attention's output projection, under its names (attn.out.*)."""

    def __init__(self, d, hadamard):
        super().__init__()
        self.out = Hadamard(d) if hadamard else nn.Linear(d, d)


class Params(nn.Module):
    def __init__(self, **shapes):
        super().__init__()
        for k, v in shapes.items():
            setattr(self, k, nn.Parameter(torch.zeros(*v)))


class BiLSTMMixer(nn.Module):
    """Per head a torch.nn.LSTM(d, d_h/2, bidirectional) over u, its weights
    the slices of bf's lstm.ih / lstm.hh (streams 2h forward, 2h+1 backward;
    b_ih = lstm.ih.bias, b_hh = 0); outputs per head concatenated, then W_O.
    Any mask (docs/design.md#bilstm-mixer: a mixer skips masked tokens, its state carries over
    them unchanged, its output there is 0): each sample's active tokens run
    alone, in order, through the module, their outputs scattered back into
    zeros; a sample with no active token outputs zeros.

    mutant "mask_carry": masked tokens run too, with input 0 (the state
    moves over them), their outputs still zeroed."""

    mutant = None

    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.hsz = heads, d // heads // 2
        G = 4 * self.hsz
        self.ih = nn.Linear(d, 2 * heads * G)
        self.hh = Params(weight=(2 * heads * G, self.hsz))
        # the reference module, unregistered: its parameters are bf's slices
        self.__dict__["ref"] = nn.LSTM(d, self.hsz, batch_first=True, bidirectional=True).double()

    def forward(self, u, mask):
        B, T, _ = u.shape
        G, outs = 4 * self.hsz, []
        self.holes = getattr(self, "holes", False) or not bool((mask == 1).all())
        for h in range(self.heads):
            f, b = slice(2 * h * G, (2 * h + 1) * G), slice((2 * h + 1) * G, (2 * h + 2) * G)
            w = {"weight_ih_l0": self.ih.weight[f], "weight_hh_l0": self.hh.weight[f],
                 "bias_ih_l0": self.ih.bias[f], "bias_hh_l0": torch.zeros_like(self.ih.bias[f]),
                 "weight_ih_l0_reverse": self.ih.weight[b],
                 "weight_hh_l0_reverse": self.hh.weight[b],
                 "bias_ih_l0_reverse": self.ih.bias[b],
                 "bias_hh_l0_reverse": torch.zeros_like(self.ih.bias[b])}
            # the module's own forward over bf's tensors (what it would run
            # after load_state_dict of these slices, with their gradients)
            object.__setattr__(self.ref, "_flat_weights",
                               [w[n] for n in self.ref._flat_weights_names])
            rows = []
            for s in range(B):
                row = torch.zeros(T, 2 * self.hsz, dtype=u.dtype)
                if self.mutant == "mask_carry":
                    y, _ = self.ref((u[s] * mask[s].unsqueeze(-1)).unsqueeze(0))
                    row = y[0] * mask[s].unsqueeze(-1)
                else:
                    idx = torch.nonzero(mask[s] > 0).view(-1)
                    if idx.numel():
                        y, _ = self.ref(u[s, idx].unsqueeze(0))
                        row = row.index_put((idx,), y[0])
                rows.append(row)
            outs.append(torch.stack(rows))
        return torch.cat(outs, -1)


class BiLSTMWideMixer(nn.Module):
    """The S2S authors' multi-head BiLSTM as their paper describes it: a dense
    pre-projection C -> C; per head a torch.nn.LSTM(d_h, d_h, bidirectional)
    over that head's d_h channels of it; per head a linear map of the two
    directions' outputs [fwd; bwd] (2 d_h) to d_h; heads concatenated, then
    W_O (docs/design.md#wide-bilstm-mixer). Tensors: lstm_wide.pre (Linear), lstm_wide.ih
    [H*8d_h, d_h] (head h's rows h*8d_h..: forward gates, then backward) and
    its bias [8C] (b_ih; b_hh = 0), lstm_wide.hh [2H*4d_h, d_h], lstm_wide.head
    [C, 2d_h] + bias [C] (head h's rows h*d_h..). Masks as BiLSTMMixer: each
    sample's active tokens run alone, in order; masked tokens output 0 (the
    head projection's bias too).

    mutant "mask_carry": masked tokens run too, with input 0."""

    mutant = None

    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.dh = heads, d // heads
        G = 4 * self.dh
        self.pre = nn.Linear(d, d)
        self.ih = Params(weight=(2 * heads * G, self.dh), bias=(2 * heads * G,))
        self.hh = Params(weight=(2 * heads * G, self.dh))
        self.head = Params(weight=(d, 2 * self.dh), bias=(d,))
        self.__dict__["ref"] = nn.LSTM(self.dh, self.dh, batch_first=True,
                                       bidirectional=True).double()

    def forward(self, u, mask):
        B, T, _ = u.shape
        dh, G, outs = self.dh, 4 * self.dh, []
        self.holes = getattr(self, "holes", False) or not bool((mask == 1).all())
        p = self.pre(u)
        for h in range(self.heads):
            f, b = slice(2 * h * G, (2 * h + 1) * G), slice((2 * h + 1) * G, (2 * h + 2) * G)
            w = {"weight_ih_l0": self.ih.weight[f], "weight_hh_l0": self.hh.weight[f],
                 "bias_ih_l0": self.ih.bias[f], "bias_hh_l0": torch.zeros_like(self.ih.bias[f]),
                 "weight_ih_l0_reverse": self.ih.weight[b],
                 "weight_hh_l0_reverse": self.hh.weight[b],
                 "bias_ih_l0_reverse": self.ih.bias[b],
                 "bias_hh_l0_reverse": torch.zeros_like(self.ih.bias[b])}
            object.__setattr__(self.ref, "_flat_weights",
                               [w[n] for n in self.ref._flat_weights_names])
            ph = p[:, :, h * dh:(h + 1) * dh]
            rows = []
            for s in range(B):
                row = torch.zeros(T, 2 * dh, dtype=u.dtype)
                if self.mutant == "mask_carry":
                    y, _ = self.ref((ph[s] * mask[s].unsqueeze(-1)).unsqueeze(0))
                    row = y[0]
                else:
                    idx = torch.nonzero(mask[s] > 0).view(-1)
                    if idx.numel():
                        y, _ = self.ref(ph[s, idx].unsqueeze(0))
                        row = row.index_put((idx,), y[0])
                rows.append(row)
            hs = torch.stack(rows)  # [B,T,2d_h]: forward then backward
            rh = slice(h * dh, (h + 1) * dh)
            outs.append(hs @ self.head.weight[rh].t() + self.head.bias[rh])
        return torch.cat(outs, -1) * (mask > 0).to(u.dtype).unsqueeze(-1)


class MambaDirection(nn.Module):
    """One direction's own tensors: conv [D,K] + bias, x_proj [G*(R+2N), Dg],
    dt_proj [D,R] + bias, A_log [D,N], D [D]."""

    def __init__(self, D, G, R, N, K):
        super().__init__()
        self.conv = Params(weight=(D, K), bias=(D,))
        self.x_proj = Params(weight=(G * (R + 2 * N), D // G))
        self.dt_proj = Params(weight=(D, R), bias=(D,))
        self.A_log = nn.Parameter(torch.zeros(D, N))
        self.D = nn.Parameter(torch.zeros(D))


class BiMambaMixer(nn.Module):
    """docs/design.md#mamba-selective-scan-and-the-bidirectional-mixer's BiMamba, per head group g of d_h channels (G = heads groups,
    every projection block-diagonal: group g owns rows g*Dg.. of each [D, .]
    tensor, rows g*(R+2N).. of x_proj, rows g*d_h.. of out), E = 2 (D = 2d,
    Dg = 2 d_h), N = 16, R = ceil(d_h/16), K = 4:
      [x; z] = W_in u (in.weight [2D, d_h]: rows [0, D) x, [D, 2D) z)
      per direction: x <- SiLU(causal depthwise conv(x) + bias);
        [delta; B; C] = W_x x; Delta = softplus(W_Delta delta + b_Delta);
        A = -exp(A_log); h_t = exp(Delta_t A) h_{t-1} + Delta_t B_t x_t;
        y_t = C_t . h_t + D x_t; y <- y SiLU(z)
      the backward direction runs the same on the reversed sequence (its own
      conv, W_x, W_Delta, b_Delta, A_log, D); inner = W_out (y_fwd + reverse(y_bwd))/2.
    A mask leaves the state unchanged over masked tokens and outputs 0 there:
    each sample runs on its active tokens alone (any mask, not only a
    prefix), its outputs scattered back into zeros.

    mutant (the self-check, MIXER_MUTANTS): "mask_carry" runs masked tokens
    too with input 0 (the state decays and the conv window moves over them);
    "chunk_grad" stops the state's gradient every BK_SCAN_CHUNK = 64 steps (a
    backward that does not carry the state's gradient into the chunk before,
    where bf restarts from the saved chunk state); "delta_rank" keeps only
    the first of the R delta components; "partial_tile" drops the state's
    part of y (y = D x) in the channels of each group past its last whole
    16-channel tile (bf's AVX-512 scan runs those lanes in a partial tile)."""

    N, K = 16, 4
    CHUNK, TILE = 64, 16
    mutant = None

    def __init__(self, d, heads):
        super().__init__()
        self.G, self.dh = heads, d // heads
        self.D, self.Dg, self.R = 2 * d, 2 * self.dh, (self.dh + 15) // 16
        self.add_module("in", Params(weight=(2 * self.D, self.dh)))
        self.fwd = MambaDirection(self.D, self.G, self.R, self.N, self.K)
        self.bwd = MambaDirection(self.D, self.G, self.R, self.N, self.K)
        self.out = Params(weight=(d, self.Dg))

    def blockdiag(self, v, w, rows, cols):
        """v [L, G*cols] times the transposed blocks w[g*rows:(g+1)*rows] -> [L, G*rows]."""
        return torch.cat([v[:, g * cols:(g + 1) * cols] @ w[g * rows:(g + 1) * rows].t()
                          for g in range(self.G)], -1)

    def direction(self, p, x, z):
        """One direction over L tokens in order: x, z [L, D] -> y [L, D]."""
        L, D, G, Dg, R, N, K = x.shape[0], self.D, self.G, self.Dg, self.R, self.N, self.K
        xp = torch.cat([torch.zeros(K - 1, D, dtype=x.dtype), x], 0)
        pre = p.conv.bias + sum(p.conv.weight[:, k] * xp[k:k + L] for k in range(K))
        xc = F.silu(pre)
        P = R + 2 * N
        dbc = self.blockdiag(xc, p.x_proj.weight, P, Dg).view(L, G, P)
        delta, Bm, Cm = dbc[..., :R], dbc[..., R:R + N], dbc[..., R + N:]
        if self.mutant == "delta_rank":
            delta = torch.cat([delta[..., :1], torch.zeros_like(delta[..., 1:])], -1)
        dt = F.softplus(self.blockdiag(delta.reshape(L, G * R), p.dt_proj.weight, Dg, R) +
                        p.dt_proj.bias)
        # channel c of group g sees its group's B and C
        Bc = Bm.repeat_interleave(Dg, dim=1)  # [L, D, N]
        Cc = Cm.repeat_interleave(Dg, dim=1)
        A = -torch.exp(p.A_log)
        h = torch.zeros(D, N, dtype=x.dtype)
        ys = []
        # the channels past each group's last whole tile (the mutant drops their state part)
        keep = ((torch.arange(D) % Dg) < Dg // self.TILE * self.TILE).to(x.dtype)
        for t in range(L):
            if self.mutant == "chunk_grad" and t and t % self.CHUNK == 0:
                h = h.detach()
            h = torch.exp(dt[t].unsqueeze(-1) * A) * h + (dt[t] * xc[t]).unsqueeze(-1) * Bc[t]
            yt = (h * Cc[t]).sum(-1)
            if self.mutant == "partial_tile":
                yt = yt * keep
            ys.append(yt + p.D * xc[t])
        y = torch.stack(ys) if ys else torch.zeros(0, D, dtype=x.dtype)
        return y * F.silu(z)

    def forward(self, u, mask):
        B, T, C = u.shape
        w_in = getattr(self, "in").weight
        self.holes = getattr(self, "holes", False) or not bool((mask == 1).all())
        self.gaps = getattr(self, "gaps", False) or bool((mask[:, 1:] > mask[:, :-1]).any())
        self.longest = max(getattr(self, "longest", 0), int(mask.sum(1).max()))
        out = torch.zeros(B, T, C, dtype=u.dtype)
        rows = []
        for b in range(B):
            idx = torch.nonzero(mask[b] > 0).view(-1)
            ub = u[b, idx]
            if self.mutant == "mask_carry":
                idx, ub = torch.arange(T), u[b] * mask[b].unsqueeze(-1)
            x = self.blockdiag(ub, w_in[:self.D], self.Dg, self.dh)
            z = self.blockdiag(ub, w_in[self.D:], self.Dg, self.dh)
            yf = self.direction(self.fwd, x, z)
            yb = self.direction(self.bwd, x.flip(0), z.flip(0)).flip(0)
            inner = self.blockdiag((yf + yb) / 2, self.out.weight, self.dh, self.Dg)
            if self.mutant == "mask_carry":
                inner = inner * mask[b].unsqueeze(-1)
            rows.append(out[b].index_put((idx,), inner))
        return torch.stack(rows)


class Mamba2Direction(nn.Module):
    """One Mamba-2 block's tensors (no out_proj): in_proj [2C+2N+H, C] (no
    bias), conv1d [C+2N, 4] + bias, dt_bias, A_log, D [H], norm [C]."""

    def __init__(self, d, heads, N):
        super().__init__()
        self.in_proj = Params(weight=(2 * d + 2 * N + heads, d))
        self.conv1d = Params(weight=(d + 2 * N, 4), bias=(d + 2 * N,))
        self.dt_bias = nn.Parameter(torch.zeros(heads))
        self.A_log = nn.Parameter(torch.zeros(heads))
        self.D = nn.Parameter(torch.zeros(heads))
        self.norm = Params(weight=(d,))


class BiMamba2Mixer(nn.Module):
    """The S2S authors' BiMamba as their paper and the Mamba-2 paper describe
    it (docs/design.md#bimamba-2-mixer): per direction a Mamba-2 block with
    expansion 1, head width d_h = C/H, one group, state N, conv width 4:
      [z, x, B, C, dt] = in_proj(u); [x, B, C] = SiLU(causal depthwise conv);
      Delta = softplus(dt + dt_bias); A = -exp(A_log) (a scalar per head);
      S_t = exp(Delta_t A) S_{t-1} + Delta_t x_t B_t^T (S [d_h, N] per head);
      y_t = S_t C_t + D x_t; y <- RMSNorm(y * SiLU(z)) * w over all C, eps 1e-5
    (the gate before the norm, Mamba-2's default); the backward direction is
    the same block on the reversed sequence; then per head a 1x1 convolution
    (no bias) of [fwd_h; bwd_h] to d_h (fuse.weight [C, 2d_h], head h's rows
    h*d_h..), W_O after. Masks: each sample runs on its active tokens alone,
    outputs scattered back into zeros.

    mutants: "mask_carry" runs masked tokens too with input 0; "chunk_grad"
    stops the state's gradient every 64 tokens (bf's chunks)."""

    CHUNK = 64
    mutant = None

    def __init__(self, d, heads, N):
        super().__init__()
        self.H, self.dh, self.N, self.d = heads, d // heads, N, d
        self.fwd = Mamba2Direction(d, heads, N)
        self.bwd = Mamba2Direction(d, heads, N)
        self.fuse = Params(weight=(d, 2 * self.dh))

    def direction(self, p, u):
        """One Mamba-2 block over L tokens in order: u [L, C] -> [L, C]."""
        L, C, N, H, dh = u.shape[0], self.d, self.N, self.H, self.dh
        if L == 0:
            return torch.zeros(0, C, dtype=u.dtype)
        proj = u @ p.in_proj.weight.t()
        z, xbc, dt = proj[:, :C], proj[:, C:2 * C + 2 * N], proj[:, 2 * C + 2 * N:]
        xp = torch.cat([torch.zeros(3, C + 2 * N, dtype=u.dtype), xbc], 0)
        xbc = F.silu(F.conv1d(xp.t().unsqueeze(0), p.conv1d.weight.unsqueeze(1), p.conv1d.bias,
                              groups=C + 2 * N)[0].t())
        x, Bm, Cm = xbc[:, :C].view(L, H, dh), xbc[:, C:C + N], xbc[:, C + N:]
        delta = F.softplus(dt + p.dt_bias)  # [L, H]
        A = -torch.exp(p.A_log)
        S = torch.zeros(H, dh, N, dtype=u.dtype)
        ys = []
        for t in range(L):
            if self.mutant == "chunk_grad" and t and t % self.CHUNK == 0:
                S = S.detach()
            dec = torch.exp(delta[t] * A).view(H, 1, 1)
            S = dec * S + (delta[t].view(H, 1) * x[t]).unsqueeze(-1) * Bm[t].view(1, 1, N)
            ys.append((S * Cm[t].view(1, 1, N)).sum(-1) + p.D.view(H, 1) * x[t])
        y = torch.stack(ys).reshape(L, C) if ys else torch.zeros(0, C, dtype=u.dtype)
        g = y * F.silu(z)
        return g * torch.rsqrt((g * g).mean(-1, keepdim=True) + 1e-5) * p.norm.weight

    def forward(self, u, mask):
        B, T, C = u.shape
        H, dh = self.H, self.dh
        self.gaps = getattr(self, "gaps", False) or bool((mask[:, 1:] > mask[:, :-1]).any())
        self.longest = max(getattr(self, "longest", 0), int(mask.sum(1).max()))
        w = self.fuse.weight.view(H, dh, 2 * dh)
        rows = []
        for b in range(B):
            idx = torch.nonzero(mask[b] > 0).view(-1)
            ub = u[b, idx]
            if self.mutant == "mask_carry":
                idx, ub = torch.arange(T), u[b] * mask[b].unsqueeze(-1)
            yf = self.direction(self.fwd, ub)
            yb = self.direction(self.bwd, ub.flip(0)).flip(0)
            cat = torch.cat([yf.view(-1, H, dh), yb.view(-1, H, dh)], -1)  # [L, H, 2d_h]
            inner = torch.einsum("lhi,hoi->lho", cat, w).reshape(-1, C)
            if self.mutant == "mask_carry":
                inner = inner * mask[b].unsqueeze(-1)
            rows.append(torch.zeros(T, C, dtype=u.dtype).index_put((idx,), inner))
        return torch.stack(rows)


class Block(nn.Module):
    def __init__(self, d, heads, causal, hadamard, budget, mixer="attention", d_state=128):
        super().__init__()
        self.ln1 = nn.LayerNorm(d, eps=1e-5)
        self.mixer = mixer
        if mixer == "bilstm":
            self.lstm = BiLSTMMixer(d, heads)
            self.attn = OutOnly(d, hadamard)
        elif mixer == "bimamba":
            self.mamba = BiMambaMixer(d, heads)
            self.attn = OutOnly(d, hadamard)
        elif mixer == "bilstm_wide":
            self.lstm_wide = BiLSTMWideMixer(d, heads)
            self.attn = OutOnly(d, hadamard)
        elif mixer == "bimamba2":
            self.mamba2 = BiMamba2Mixer(d, heads, d_state)
            self.attn = OutOnly(d, hadamard)
        else:
            self.attn = Attention(d, heads, causal, hadamard, budget)
        self.ln2 = nn.LayerNorm(d, eps=1e-5)
        self.mlp = MLP(d, 4 * d, d)

    def forward(self, x, mask, noise, kn):
        if self.mixer == "bilstm":
            x = x + self.attn.out(self.lstm(self.ln1(x), mask))
            return x + self.mlp(self.ln2(x)), 0, 0
        if self.mixer == "bimamba":
            x = x + self.attn.out(self.mamba(self.ln1(x), mask))
            return x + self.mlp(self.ln2(x)), 0, 0
        if self.mixer == "bilstm_wide":
            x = x + self.attn.out(self.lstm_wide(self.ln1(x), mask))
            return x + self.mlp(self.ln2(x)), 0, 0
        if self.mixer == "bimamba2":
            x = x + self.attn.out(self.mamba2(self.ln1(x), mask))
            return x + self.mlp(self.ln2(x)), 0, 0
        a, hinge, ent = self.attn(self.ln1(x), mask, noise, kn)
        x = x + a
        return x + self.mlp(self.ln2(x)), hinge, ent


class Transformer(nn.Module):
    """The encoder classifier (n_classes > 0) or the causal decoder LM (tied head)."""

    def __init__(self, sh):
        super().__init__()
        d, V, T = sh["d_model"], sh["vocab"], sh["seq_len"]
        self.encoder = sh["n_classes"] > 0
        self.tok_emb = nn.Embedding(V, d)
        self.pos_emb = nn.Embedding(T, d)
        self.blocks = nn.ModuleList(
            Block(d, sh["heads"], not self.encoder, sh["hadamard"], sh["budget"],
                  sh.get("mixers", ["attention"] * sh["layers"])[l], sh.get("d_state", 128))
            for l in range(sh["layers"]))
        self.ln_f = nn.LayerNorm(d, eps=1e-5)
        if self.encoder:
            self.head = nn.Linear(d, sh["n_classes"])

    def forward(self, ids, mask, targets, noise, kn):
        B, T = ids.shape
        x = self.tok_emb(ids) + self.pos_emb(torch.arange(T)).unsqueeze(0)
        hinge, ent = 0, 0
        for l, blk in enumerate(self.blocks):
            x, h, e = blk(x, mask, noise[l] if noise else None, kn)
            hinge, ent = hinge + h, ent + e
        x = self.ln_f(x)
        if self.encoder:
            logits = self.head(masked_mean(x, mask))
            tg = targets.view(B)
        else:
            logits = (x @ self.tok_emb.weight.t()).view(B * T, -1)
            tg = targets.view(B * T)
        task = F.cross_entropy(logits, tg, ignore_index=-1, reduction="mean")
        norm = 1.0 / (B * len(self.blocks))
        budget = kn["lambda_budget"] * norm * hinge
        entropy = kn["lambda_entropy"] * (2 * kn["progress"] - 1) * norm * ent
        return logits, task, budget, entropy


class ViT(nn.Module):
    """docs/design.md#vit's DeiT-style ViT: the image (the dump's ids are its pixels
    0..255, row-major [H, W]) cut into p x p patches (row-major patch order,
    row-major pixels within a patch), each scaled to [-1, 1] (v * 2/255 - 1)
    and embedded by patch_emb; the class token leads, positions are added; the
    pre-LN blocks see every token both ways; the classifier reads LN_f of the
    class token.

    A-ViT (docs/design.md#a-vit-halting, docs/s2s.md), when avit is given: after block l,
    patch token k's score is h = sigmoid(gamma t[k, 0] - g) from channel 0 of
    the block's output (h = 1 at the last layer, so every token halts there);
    its cumulative score halts it once it reaches 1 - eps; its remainder is
    R = 1 - (the sum of its h before the layer where it halts). The class
    token never halts. The trunk's output is ACT's: out_k = sum of h_k^l t_k^l
    over the layers it ran before halting + R_k t_k^(halting layer); the class
    token's is its last layer's (it never halts), which the classifier reads. Layer l runs under the
    mask of the tokens still running: halted tokens are no attention keys,
    their LayerNorm outputs and both branch outputs are zero (their rows stop
    changing). Losses: ponder_weight * mean over patch tokens of rho = N + R
    (N = layers it ran), and prior_weight * KL(prior || q) (A-ViT eq. 10 and
    NVlabs' code): q_l = the batch's mean halting score at layer l (the gate's
    sigmoid of every patch token, halted ones too as NVlabs' code averages
    over all tokens, the last layer's too, before ACT replaces it by 1),
    normalised over layers and clamped to
    [0.01, 0.99]; the prior a Gaussian over layers 0..L-1 (std 1 layer)
    centred where the retention asked puts it (prior_centre below, from
    docs/design.md#a-vit-halting, not from bf; plus the pipeline's retention-control shift, a
    state the dump reports).
    eps = 0.01 and the prior's std are docs/design.md#a-vit-halting's constants, not the dump's.
    The halting decisions are discrete (no gradient); every h and remainder
    carries its gradient into the losses.

    mutant (the self-check): one deliberate departure from these equations
    that the comparison must catch."""

    def __init__(self, sh):
        super().__init__()
        d, T, p = sh["d_model"], sh["seq_len"], sh["patch"]
        self.p, self.H, self.W = p, sh["image_h"], sh["image_w"]
        self.patch_emb = nn.Linear(p * p, d)
        self.cls_token = nn.Parameter(torch.zeros(1, d))
        self.pos_emb = Params(weight=(T, d))
        mixers = sh.get("mixers") or ["attention"] * sh["layers"]
        self.blocks = nn.ModuleList(Block(d, sh["heads"], False, False, False, mixers[l],
                                          sh.get("d_state", 128))
                                    for l in range(sh["layers"]))
        self.ln_f = nn.LayerNorm(d, eps=1e-5)
        self.head = nn.Linear(d, sh["n_classes"])

    def embed(self, ids):
        B, p = ids.shape[0], self.p
        img = ids.view(B, self.H, self.W).to(torch.float64) * (2.0 / 255.0) - 1.0
        patches = img.view(B, self.H // p, p, self.W // p, p).permute(0, 1, 3, 2, 4)
        patches = patches.reshape(B, -1, p * p)
        x = torch.cat([self.cls_token.expand(B, 1, -1), self.patch_emb(patches)], 1)
        return x + self.pos_emb.weight.unsqueeze(0)

    @staticmethod
    def block(blk, x, active, keys):
        """One pre-LN block under the token mask active [B,T] (keys: the
        attention's key mask); masked rows come out unchanged. blk.inner: the
        mixing's output before W_O (the attention's head outputs, or the
        mixer's), S2S's tap."""
        m = active.unsqueeze(-1)
        if blk.mixer == "attention":
            a, _, _ = blk.attn(blk.ln1(x) * m, keys, None, None)
            blk.inner = blk.attn.last_c
        else:  # a mixer sees the tokens the attention would see as keys
            mix = {"bilstm": "lstm", "bimamba": "mamba", "bilstm_wide": "lstm_wide",
                   "bimamba2": "mamba2"}[blk.mixer]
            mix = getattr(blk, mix)
            blk.inner = mix(blk.ln1(x) * m, keys)
            a = blk.attn.out(blk.inner)
        x = x + a * m
        return x + blk.mlp(blk.ln2(x) * m) * m

    def forward(self, ids, targets, avit=None, mutant=None, ext=None, ce_eps=0.0):
        """(logits, task loss, info). ext: per-layer token masks [B,T] the
        blocks run under instead of halting on their own (S2S stage 1's
        student under its teacher's masks); info["outs"] then holds every
        block's output. ce_eps: label smoothing of the task CE (smoothed_ce).
        With halting, info also holds per layer the mask the block ran under
        ("active"), the patch tokens' cumulative score before it ("cum") and
        their gate scores after it ("scores")."""
        x = self.embed(ids)
        B, T, _ = x.shape
        L = len(self.blocks)
        info = {}
        if ext is not None:
            info["outs"] = []
            for l, blk in enumerate(self.blocks):
                x = self.block(blk, x, ext[l], ext[l])
                info["outs"].append(x)
        elif avit is None:
            ones = torch.ones(B, T, dtype=x.dtype)
            for blk in self.blocks:
                x = self.block(blk, x, ones, ones)
        else:
            gamma, g, eps = avit["gamma"], avit["gate_center"], AVIT_EPS
            one = torch.ones(B, 1, dtype=x.dtype)
            active = torch.ones(B, T, dtype=x.dtype)
            cum = torch.zeros(B, T - 1, dtype=x.dtype)  # no gradient needed: decisions only
            rem = torch.ones(B, T - 1, dtype=x.dtype)
            rho = torch.zeros(B, T - 1, dtype=x.dtype)
            psum, keep, margin = [], [], math.inf
            halted_at = torch.full((B, T - 1), -1, dtype=torch.long)
            out = torch.zeros_like(x[:, 1:])
            info.update(active=[], cum=[], scores=[])
            for l, blk in enumerate(self.blocks):
                keys = torch.ones_like(active) if mutant == "keys" else active
                info["active"].append(active)
                info["cum"].append(cum)
                x = self.block(blk, x, active, keys)
                run = active[:, 1:] > 0
                every = torch.sigmoid(gamma * x[:, 1:, 0] - g)
                info["scores"].append(every)
                if mutant == "halt_grad":
                    every = every.detach()
                score = torch.where(run, every, torch.zeros_like(every))
                # ACT uses h = 1 at the last layer; the prior reads the gate's score there too
                h = torch.where(run, torch.ones_like(score), score) if l == L - 1 else score
                cum = cum + h.detach()
                if l < L - 1 and bool(run.any()):
                    margin = min(margin, float((cum - (1 - eps))[run].abs().min()))
                stop = run & (cum >= 1 - eps)
                r_rho = rem.detach() if mutant == "ponder_grad" else rem
                if mutant == "remainder":
                    r_rho = h
                rho = rho + run.to(x.dtype) + torch.where(stop, r_rho, torch.zeros_like(rem))
                # the ACT output: h while running, the remainder R where it halts
                w = torch.where(stop, rem, torch.where(run, h, torch.zeros_like(h)))
                out = out + w.unsqueeze(-1) * x[:, 1:]
                rem = torch.where(run & ~stop, rem - h, rem)
                halted_at = torch.where(stop, torch.full_like(halted_at, l), halted_at)
                # NVlabs' q: the mean score over every patch token, halted ones too;
                # avit.prior nvlabs as NVlabs' code runs it: a halted token's row is
                # zeroed before each later block (out.data *= mask_token), so its
                # score there is the gate of a zero row
                if avit.get("prior") == "nvlabs":
                    zero_row = torch.sigmoid(gamma * torch.zeros_like(every) - g)
                    every = torch.where(run, every, zero_row)
                psum.append(h.sum() if mutant == "last_score" and l == L - 1 else every.sum())
                keep.append(int(run.sum()))
                active = torch.cat([one, (run & ~stop).to(x.dtype)], 1)
            psum_t = torch.stack(psum)
            q = torch.clamp(psum_t / psum_t.sum(), 0.01, 0.99)
            centre = prior_centre(avit["retention_target"], L) + avit["prior_shift"]
            centre += 0.5 if mutant == "prior_centre" else 0.0
            depth = torch.arange(L, dtype=x.dtype)
            prior = torch.exp(-0.5 * ((depth - centre) / AVIT_SIGMA) ** 2)
            prior = prior / prior.sum()
            kl = (prior * (torch.log(prior) - torch.log(q))).sum()
            info.update({"ponder": avit["ponder_weight"] * rho.mean(),
                         "prior": avit["prior_weight"] * kl,
                         "retention": sum(keep) / (B * (T - 1) * L), "keep": keep,
                         "psum": [float(v) for v in psum], "margin": margin,
                         "halted_at": torch.bincount(halted_at.view(-1), minlength=L).tolist()})
        if avit is not None and ext is None:  # the class token never halts: its last layer's
            x = torch.cat([x[:, :1], out], 1)
        logits = self.head(self.ln_f(x)[:, 0])
        task = smoothed_ce(logits, targets.view(B), ce_eps)
        return logits, task, info


def smoothed_ce(logits, targets, eps):
    """Mean over rows of the cross-entropy against the smoothed target
    q = (1 - eps) onehot(target) + eps / V: -sum_v q_v log softmax(logits)_v
    (eps 0: the plain CE)."""
    V = logits.shape[-1]
    q = (1 - eps) * F.one_hot(targets, V).to(logits.dtype) + eps / V
    return -(q * torch.log_softmax(logits, -1)).sum(-1).mean()


AVIT_EPS, AVIT_SIGMA = 0.01, 1.0  # docs/design.md#a-vit-halting's halting threshold; the prior's std (layers)

# each must make an A-ViT dump fail: the check sees every part of the halting
AVIT_MUTANTS = ("keys", "remainder", "prior_centre", "halt_grad", "ponder_grad", "last_score")


def prior_centre(r, L):
    """docs/design.md#a-vit-halting: the retention r is the mean fraction of tokens active per
    layer; read the prior as the distribution of the depth at which tokens
    halt (a token halting at layer l runs l + 1 of L layers), so the centre c
    solves sum_l pi_l(c) (l + 1) / L = r, pi a Gaussian over layers 0..L-1 of
    std AVIT_SIGMA. Solved here by bisection on [-2L, 3L]."""
    def implied(c):
        p = [math.exp(-0.5 * ((l - c) / AVIT_SIGMA) ** 2) for l in range(L)]
        return sum(pl * (l + 1) for l, pl in enumerate(p)) / (sum(p) * L)
    lo, hi = -2.0 * L, 3.0 * L
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if implied(mid) < r:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


# each that applies to a dump with mixers must make it fail (BiMambaMixer,
# BiLSTMMixer): the check sees the masks, the chunked scan, the delta rank and
# the partial tile
MIXER_MUTANTS = ("mask_carry", "chunk_grad", "delta_rank", "partial_tile")


def set_mixer_mutant(model, mutant):
    for mod in model.modules():
        if isinstance(mod, (BiMambaMixer, BiLSTMMixer, BiLSTMWideMixer, BiMamba2Mixer)):
            mod.mutant = mutant


def mixer_mutants(model):
    """The MIXER_MUTANTS that can show on this dump, from what the reference's
    mixers saw: a mask that is not all ones, a sample longer than a scan chunk,
    R > 1, a group width that leaves a partial tile."""
    mus = set()
    for mod in model.modules():
        if isinstance(mod, (BiLSTMMixer, BiLSTMWideMixer)) and mod.holes:
            mus.add("mask_carry")
        if isinstance(mod, BiMamba2Mixer):
            # as BiMambaMixer: only a hole shows (zeros run through a
            # padding tail, or ahead of the backward direction, add 0 to a
            # zero state while the conv bias is 0, as at init)
            if mod.gaps:
                mus.add("mask_carry")
            if mod.longest > mod.CHUNK:
                mus.add("chunk_grad")
        if isinstance(mod, BiMambaMixer):
            # only a hole (a masked token before an active one): over a
            # padding tail the carried state never reaches an output, and
            # ahead of the backward direction's first token it stays 0 while
            # the conv bias is (at init) 0
            if mod.gaps:
                mus.add("mask_carry")
            if mod.longest > mod.CHUNK:
                mus.add("chunk_grad")
            if mod.R > 1:
                mus.add("delta_rank")
            if mod.Dg % mod.TILE:
                mus.add("partial_tile")
    return [m for m in MIXER_MUTANTS if m in mus]


def mixer_note(model, run_mutant):
    """Runs every applicable mixer mutant through run_mutant (which raises
    Failure when the mutant is caught); a note for the summary line."""
    mus, caught = mixer_mutants(model), []
    for mu in mus:
        try:
            run_mutant(mu)
        except Failure as e:
            caught.append("%s (%s)" % (mu, str(e).split(":")[0]))
            continue
        raise Failure("the mixer mutant '%s' of the reference matches bf too: the check cannot "
                      "see that part of the mixer" % mu)
    if not mus:
        return ""
    longest = max([getattr(m, "longest", 0) for m in model.modules()
                   if isinstance(m, BiMambaMixer)] or [0])
    return "; mixer mutants caught %d of %d: %s%s" % (
        len(caught), len(mus), ", ".join(caught),
        " (longest scan %d tokens)" % longest if longest else "")


def close(name, bf, ref, rtol, floor=0.0):
    """Elementwise |bf - ref| <= rtol |ref| + floor; returns the worst ratio."""
    bf, ref = bf.to(torch.float64), ref.to(torch.float64)
    if bf.shape != ref.shape:
        raise Failure("%s: bf has shape %s, torch %s" % (name, list(bf.shape), list(ref.shape)))
    err = (bf - ref).abs()
    bound = rtol * ref.abs() + floor
    ratio = err / bound
    i = int(torch.argmax(ratio.reshape(-1)))
    worst = float(ratio.reshape(-1)[i])
    if not worst <= 1.0:  # also catches NaN
        at = list(np.unravel_index(i, tuple(ref.shape))) if ref.dim() else []
        raise Failure("%s: element %s is %.9g in bf but %.9g in torch (|diff| %.3g > bound %.3g; "
                      "max |torch| %.3g)" % (name, [int(a) for a in at], float(bf.reshape(-1)[i]),
                                             float(ref.reshape(-1)[i]), float(err.reshape(-1)[i]),
                                             float(bound.reshape(-1)[i]), float(ref.abs().max())))
    return worst


def compare_grads(params, bf_grads):
    """Every tensor's gradient, elementwise; returns the worst ratio and its tensor."""
    if set(params) != set(bf_grads):
        raise Failure("gradient names differ: only bf %s, only torch %s" % (
            sorted(set(bf_grads) - set(params)), sorted(set(params) - set(bf_grads))))
    worst_grad, worst_name = 0.0, ""
    for name, p in params.items():
        ref = p.grad if p.grad is not None else torch.zeros_like(p)
        floor = FLOOR_GRAD * float(ref.abs().max()) + 1e-30
        r = close("gradient of " + name, bf_grads[name], ref, RTOL_GRAD, floor)
        if ".mamba2." in name:  # the S2S authors' BiMamba: 1e-4 of the tensor's largest too
            close("gradient of " + name, bf_grads[name], ref, 0.0,
                  RTOL_MIXER2 * float(ref.abs().max()) + 1e-30)
        if r >= worst_grad:
            worst_grad, worst_name = r, name
    return worst_grad, worst_name


def check_loss(meta, name, v):
    v = float(v)
    if not abs(meta["loss"][name] - v) <= RTOL_LOSS * abs(v) + 1e-9:
        raise Failure("%s: bf %.9g, torch %.9g" % (name, meta["loss"][name], v))


def vit_reference(meta, weights, batch, mutant=None, mixer_mutant=None, ce_eps=None):
    """The torch ViT over the dump's batch, its loss backwarded; (model, logits,
    losses, halting info). mutant: one of AVIT_MUTANTS, mixer_mutant: one of
    MIXER_MUTANTS; ce_eps: label smoothing of the CE (None: the dump's
    label_smoothing, 0 but in S2S's stage 2; another: the finetune control)."""
    sh = meta["shape"]
    if ce_eps is None:
        ce_eps = float(meta.get("label_smoothing", 0.0))
    model = ViT(sh)
    model.load_state_dict(weights, strict=True)
    model = model.double()
    set_mixer_mutant(model, mixer_mutant)
    if not bool((batch["mask"] == 1).all()):
        raise Failure("a vit batch's mask is not all ones")
    logits, task, info = model(batch["ids"].long(), batch["targets"].long(),
                               meta.get("avit") if sh["avit"] else None, mutant, ce_eps=ce_eps)
    losses = {"loss_task": task}
    if sh["avit"]:
        losses.update(loss_ponder=info["ponder"], loss_prior=info["prior"])
    losses["loss"] = sum(losses.values())
    losses["loss"].backward()
    return model, logits.detach(), losses, info


def compare_vit(meta, model, logits, losses, info, bf_logits, bf_grads):
    """Raises Failure on the first difference; returns (worst logit ratio,
    worst gradient ratio, its tensor)."""
    worst_logit = close("logits", bf_logits, logits, 0, RTOL_LOGITS * float(logits.abs().max()))
    for k, v in losses.items():
        check_loss(meta, k, v)
    if meta["shape"]["avit"]:
        bf = meta["avit"]
        if [int(k) for k in bf["keep"]] != info["keep"]:
            raise Failure("active patch tokens per layer: bf %s, torch %s" % (
                [int(k) for k in bf["keep"]], info["keep"]))
        close("p spent per layer (psum)", torch.tensor(bf["psum"], dtype=torch.float64),
              torch.tensor(info["psum"], dtype=torch.float64), RTOL_LOSS, 1e-9)
        if not abs(meta["loss"]["retention"] - info["retention"]) <= 1e-12:
            raise Failure("retention: bf %.9g, torch %.9g" % (meta["loss"]["retention"],
                                                              info["retention"]))
    worst_grad, worst_name = compare_grads(dict(model.named_parameters()), bf_grads)
    return worst_logit, worst_grad, worst_name


def check_vit(d, meta, weights, batch, bf_logits, bf_grads):
    sh = meta["shape"]
    if sh["aug_pad"] or sh["aug_flip"]:
        raise Failure("the dump's training batch was augmented (aug.crop_pad %d, aug.hflip %s): "
                      "this model sees the images as they are; dump with --set aug.crop_pad=0 "
                      "--set aug.hflip=false" % (sh["aug_pad"], bool(sh["aug_flip"])))
    if sh["avit"] and (meta["avit"].get("prior") not in ("paper", "nvlabs") or
                       meta["avit"].get("output") != "act"):
        raise Failure("the dump halts with avit.prior %s and avit.output %s; this reference is "
                      "docs/design.md#a-vit-halting's (paper or nvlabs, act)" % (meta["avit"].get("prior"),
                                                               meta["avit"].get("output")))
    if sh["avit"] and (meta["avit"]["eps"] != np.float32(AVIT_EPS) or
                       meta["avit"]["prior_sigma"] != AVIT_SIGMA):
        raise Failure("bf halts at eps %g with a prior std of %g; docs/design.md#a-vit-halting says %g and %g" % (
            meta["avit"]["eps"], meta["avit"]["prior_sigma"], AVIT_EPS, AVIT_SIGMA))
    model, logits, losses, info = vit_reference(meta, weights, batch)
    L = sh["layers"]
    note = ""
    if sh["avit"]:
        # well-posed: bf decides in float32; a cumulative score this close to
        # 1 - eps would compare rounding, not equations
        if info["margin"] < 1e-4:
            raise Failure("a token's cumulative score is %.3g from 1 - eps: its halting is "
                          "ambiguous in float32; move avit.gate_center" % info["margin"])
        # and meaningful: tokens halt between the first and the last layer
        mid = sum(info["halted_at"][1:L - 1])
        if not (1.0 / L < info["retention"] < 1.0) or mid == 0:
            raise Failure("retention %.4g (halting depths %s): no token halts mid-depth, the "
                          "halting is not exercised; move avit.gate_center" % (
                              info["retention"], info["halted_at"]))
    worst_logit, worst_grad, worst_name = compare_vit(meta, model, logits, losses, info,
                                                      bf_logits, bf_grads)
    if sh["avit"]:
        infer_note = check_infer(d, logits, info, batch)
        caught = []
        # the halting's mutants on attention-only dumps: a mixer dump's
        # sequential scans make each rerun slow, and its own mutants follow
        mixer_dump = bool(set(sh.get("mixers", [])) - {"attention"})
        for mu in () if mixer_dump else AVIT_MUTANTS:
            mm, ml, mls, mi = vit_reference(meta, weights, batch, mu)
            try:
                compare_vit(meta, mm, ml, mls, mi, bf_logits, bf_grads)
            except Failure as e:
                caught.append("%s (%s)" % (mu, str(e).split(":")[0]))
                continue
            raise Failure("the mutant '%s' of the reference matches bf too: the check cannot "
                          "see that part of the halting" % mu)
        note += (" ponder %.6g prior %.6g, retention %.4f (prior centre %.4g, halting depths %s, "
                "margin to 1-eps %.2g)" % (
                    float(losses["loss_ponder"]), float(losses["loss_prior"]), info["retention"],
                    meta["avit"]["prior_centre"], info["halted_at"], info["margin"]))
        if caught:
            note += "; mutants caught %d of %d: %s" % (len(caught), len(AVIT_MUTANTS),
                                                       ", ".join(caught))
        note += infer_note
    if meta.get("stage") == "finetune":
        note += finetune_note(meta, weights, batch, bf_logits, bf_grads)
    note += mixer_note(model, lambda mu: compare_vit(
        meta, *vit_reference(meta, weights, batch, mixer_mutant=mu), bf_logits, bf_grads))
    mixers = "".join(" " + k for k in sorted(set(sh.get("mixers", [])) - {"attention"}))
    return ("%s: vit%s%s, %d tensors: logits within %.2g of the bound, loss %.6f (task %.6f%s), "
            "worst gradient %s at %.2g of the bound" % (
                os.path.basename(os.path.normpath(d)), " avit" if sh["avit"] else "", mixers,
                len(list(model.parameters())), worst_logit, float(losses["loss"]),
                float(losses["loss_task"]), note, worst_name, worst_grad))


def other_smoothing(eps):
    """A label smoothing that is not eps: the control of a smoothed CE (0,
    or CONTROL_SMOOTHING when eps is 0)."""
    return CONTROL_SMOOTHING if eps == 0 else 0.0


def finetune_note(meta, weights, batch, bf_logits, bf_grads):
    """S2S stage 2 (bfworker dump --stage finetune): the student, mixers in
    some layers, halting on its own, whose loss is the CE smoothed by the
    dump's label_smoothing (distill.label_smoothing, docs/s2s.md) + ponder +
    prior. The control: the same reference with another smoothing in the CE
    must fail against the dump."""
    sh = meta["shape"]
    if not (sh["avit"] and set(sh.get("mixers", [])) - {"attention"}):
        raise Failure("a finetune dump without halting or without a mixer: stage 2's student "
                      "has both")
    eps = float(meta["label_smoothing"])
    ctl = other_smoothing(eps)
    try:
        compare_vit(meta, *vit_reference(meta, weights, batch, ce_eps=ctl), bf_logits, bf_grads)
    except Failure as e:
        return "; finetune: the CE smoothed by %g, control (smoothing %g) caught (%s)" % (
            eps, ctl, str(e).split(":")[0])
    raise Failure("the finetune reference with label smoothing %g matches bf's %g too: the "
                  "check cannot see stage 2's smoothing" % (ctl, eps))


# S2S stage 1 (docs/design.md#distillation-loss 4., docs/s2s.md "Distill loss")
# the control of a dump whose CE is not smoothed (other_smoothing); a smoothed
# dump's control is the plain CE. The smoothing itself is the dump's
# (distill.label_smoothing, default 0.1 as FAR's)
CONTROL_SMOOTHING = 0.1
ALIGN_KEEP_WEIGHT = 5.0  # docs/design.md#distillation-loss: 5 (keep_student - keep_teacher)^2
# each must make a distill dump fail: the check sees the form of the alignment,
# the smoothing and (where a replaced layer has halted tokens) the MSE's mask
DISTILL_MUTANTS = ("align_form", "smoothing", "mse_unmasked")


def distill_reference(meta, weights, batch, teacher_w, mutant=None):
    """Stage 1 written from docs/design.md#distillation-loss and docs/s2s.md: the teacher (an A-ViT
    ViT with attention in every layer, teacher_w) halts on its own over the
    batch, without gradient; the student (weights) runs under the teacher's
    per-layer masks (no halting of its own; its classifier reads LN_f of the
    class token's last row). For replaced layer l (a mixer in the student),
    with m the teacher's mask of layer l (class token included):
      mse_l = sum_tokens m |s - t|^2 / (C sum m), s the student mixer's output
      before W_O, t the teacher attention's output before W_O;
    for every layer l but the last, over the patch tokens the teacher runs
    at l (n of them; N = B (T - 1) patch tokens in all), with the student's
    score hs = sigmoid(gamma y_l[., 0] - g) from its block output y_l and the
    teacher's ht (its own gate's):
      halt_l = lambda_h [ (1/n) sum BKL(clamp(ht, 1e-6) || clamp(hs, 1e-12))
                          + 5 (keep_s - keep_t)^2 ]
      keep_x = (1/N) sum_active sigmoid(gamma (1 - eps - C - hx)), C the
      teacher's cumulative score before layer l (the smooth halting test:
      the fraction of patch tokens that run past layer l)
      (halt_align mean_h: 5 (mean hs - mean ht)^2 over the n tokens instead);
    CE with the dump's label smoothing eps (smoothed_ce: the target
    (1 - eps) onehot + eps / V); total = CE + lambda_mse sum
    mse_l + sum halt_l, backwarded to every student tensor.
    mutant (DISTILL_MUTANTS): "align_form" takes the other alignment form,
    "smoothing" another smoothing (other_smoothing), "mse_unmasked" every
    token in the MSE.
    Returns (student, logits, terms, teacher info)."""
    sh, dm = meta["shape"], meta["distill"]
    L = sh["layers"]
    ids, targets = batch["ids"].long(), batch["targets"].long().view(-1)
    tsh = dict(sh, mixers=["attention"] * L)
    teacher = ViT(tsh)
    teacher.load_state_dict(teacher_w, strict=True)
    teacher = teacher.double()
    avit = {"gamma": dm["gamma"], "gate_center": dm["gate_center"], "retention_target": 0.5,
            "prior_shift": 0.0, "ponder_weight": 0.0, "prior_weight": 0.0}
    with torch.no_grad():
        if dm.get("teacher_kind") == "dense":  # distill.teacher dense: no halting, no masks
            _, _, tinfo = teacher(ids, targets)
            ones = torch.ones(ids.shape[0], sh["seq_len"], dtype=torch.float64)
            tinfo.update(active=[ones] * L, margin=math.inf)
        else:
            _, _, tinfo = teacher(ids, targets, avit)
    student = ViT(sh)
    student.load_state_dict(weights, strict=True)
    student = student.double()
    logits, _, sinfo = student(ids, targets, ext=tinfo["active"])
    eps_ls = float(dm["label_smoothing"])
    if mutant == "smoothing":
        eps_ls = other_smoothing(eps_ls)
    terms = {"loss_ce": smoothed_ce(logits, targets, eps_ls)}
    mse = []
    for l in dm["replaced"]:
        s, t = student.blocks[l].inner, teacher.blocks[l].inner.detach()
        m = tinfo["active"][l]
        if mutant == "mse_unmasked":
            m = torch.ones_like(m)
        C = s.shape[-1]
        mse.append((m * ((s - t) ** 2).sum(-1)).sum() / max(1.0, C * float(m.sum())))
    terms["loss_mse"] = mse
    form = dm["halt_align"]
    if mutant == "align_form":
        form = "mean_h" if form == "keep" else "keep"
    gamma, g, eps = dm["gamma"], dm["gate_center"], AVIT_EPS
    halt, B, T = [], ids.shape[0], sh["seq_len"]
    N = B * (T - 1)
    for l in range(L - 1):
        run = tinfo["active"][l][:, 1:] > 0
        n = int(run.sum())
        if n == 0 or dm["lambda_halt"] == 0:
            halt.append(torch.zeros((), dtype=torch.float64))
            continue
        hs = torch.sigmoid(gamma * sinfo["outs"][l][:, 1:, 0] - g)[run]
        ht = tinfo["scores"][l][run]
        p, q = ht.clamp(1e-6, 1 - 1e-6), hs.clamp(1e-12, 1 - 1e-12)
        bkl = (p * torch.log(p / q) + (1 - p) * torch.log((1 - p) / (1 - q))).sum() / n
        if form == "keep":
            c = tinfo["cum"][l][run]
            d = (torch.sigmoid(gamma * (1 - eps - c - hs)).sum() -
                 torch.sigmoid(gamma * (1 - eps - c - ht)).sum()) / N
        else:
            d = hs.mean() - ht.mean()
        halt.append(dm["lambda_halt"] * (bkl + ALIGN_KEEP_WEIGHT * d * d))
    terms["loss_halt"] = halt
    terms["loss"] = terms["loss_ce"] + dm["lambda_mse"] * sum(mse) + sum(halt)
    terms["loss"].backward()
    return student, logits.detach(), terms, tinfo


def compare_distill(meta, student, logits, terms, bf_logits, bf_grads):
    """Raises Failure on the first difference; returns (worst logit ratio,
    worst term ratio, worst gradient ratio, its tensor)."""
    dm = meta["distill"]
    worst_logit = close("logits", bf_logits, logits, 0, RTOL_LOGITS * float(logits.abs().max()))
    worst_term = 0.0
    for name in ("loss_ce", "loss_mse", "loss_halt", "loss"):
        ref = terms[name]
        ref = torch.stack(ref) if isinstance(ref, list) else ref
        bf = torch.tensor(dm[name], dtype=torch.float64)
        worst_term = max(worst_term, close("distill term " + name, bf, ref.detach(), RTOL_TERM,
                                           FLOOR_TERM))
    worst_grad, worst_name = compare_grads(dict(student.named_parameters()), bf_grads)
    return worst_logit, worst_term, worst_grad, worst_name


def check_distill(d, meta, weights, batch, bf_logits, bf_grads):
    """A `bfworker dump --stage distill` dump against distill_reference."""
    sh, dm = meta["shape"], meta["distill"]
    dense = dm.get("teacher_kind") == "dense"
    if dense and (sh["avit"] or dm["lambda_halt"] != 0):
        raise Failure("a dense teacher's stage 1 with halting (avit %s, lambda_halt %g): "
                      "docs/s2s.md says none" % (sh["avit"], dm["lambda_halt"]))
    if not 0 <= dm["label_smoothing"] <= 1 or (not dense and dm["eps"] != np.float32(AVIT_EPS)):
        raise Failure("bf's stage 1 smooths labels by %g and halts at eps %g; docs/design.md#distillation-loss says "
                      "a smoothing in [0, 1] and eps %g" % (dm["label_smoothing"], dm["eps"], AVIT_EPS))
    mixers = sh.get("mixers") or []
    replaced = [l for l, k in enumerate(mixers) if k != "attention"]
    if dm["replaced"] != replaced:
        raise Failure("replaced layers: bf %s, the student's mixers %s" % (dm["replaced"],
                                                                            mixers))
    # the teacher's own file (a run folder's model.safetensors), not bf's copy of it
    path = dm["teacher"]
    teacher_w = load_file(os.path.join(path, "model.safetensors") if os.path.isdir(path)
                          else path)
    # the student is the teacher with mixers in the replaced layers: every
    # tensor of the teacher the student has, bf loaded from it
    for name, w in weights.items():
        if name in teacher_w and not torch.equal(w, teacher_w[name]):
            raise Failure("student tensor %s is not the teacher's (init.from by name)" % name)
    shared = sum(1 for n in weights if n in teacher_w)
    student, logits, terms, tinfo = distill_reference(meta, weights, batch, teacher_w)
    keep = [int((a[:, 1:] > 0).sum()) for a in tinfo["active"]]
    if keep != [int(k) for k in dm["teacher_keep"]]:
        raise Failure("the teacher's active patch tokens per layer: bf %s, torch %s" % (
            dm["teacher_keep"], keep))
    # well-posed: bf's teacher decides in float32
    if tinfo["margin"] < 1e-4:
        raise Failure("a teacher token's cumulative score is %.3g from 1 - eps: its halting is "
                      "ambiguous in float32; move avit.gate_center" % tinfo["margin"])
    # meaningful: the alignment has active tokens and a replaced layer runs
    # under a mask with halted tokens (else the MSE's mask is not exercised)
    L = sh["layers"]
    if not dense and not any(0 < keep[l] < keep[0] for l in range(1, L - 1)):
        raise Failure("the teacher keeps patch tokens %s per layer: no layer past the first "
                      "aligns a partly halted batch; move avit.gate_center" % keep)
    worst_logit, worst_term, worst_grad, worst_name = compare_distill(
        meta, student, logits, terms, bf_logits, bf_grads)
    partial = any(bool((tinfo["active"][l] == 0).any()) for l in replaced)
    caught = []
    # a dense teacher aligns no halting: only the smoothing can show
    mutants = [mu for mu in DISTILL_MUTANTS if (mu != "mse_unmasked" or partial) and
               (not dense or mu == "smoothing")]
    for mu in mutants:
        try:
            compare_distill(meta, *distill_reference(meta, weights, batch, teacher_w, mu)[:3],
                            bf_logits, bf_grads)
        except Failure as e:
            caught.append("%s (%s)" % (mu, str(e).split(":")[0]))
            continue
        raise Failure("the distill mutant '%s' of the reference matches bf too: the check cannot "
                      "see that part of stage 1" % mu)
    def term(name):
        """torch's value per entry, with |bf - torch| and its ratio to |torch|"""
        ref = terms[name]
        ref = torch.stack(ref).detach() if isinstance(ref, list) else ref.detach().view(1)
        bf = torch.tensor(dm[name], dtype=torch.float64).view(-1)
        return ", ".join("%.6g (abs %.1g rel %.1g)" % (
            float(r), float((b - r).abs()), float((b - r).abs() / r.abs()) if r != 0 else 0.0)
            for b, r in zip(bf, ref))
    mix = "".join(" " + k for k in sorted(set(mixers) - {"attention"}))
    return ("%s: s2s distill%s, %s teacher, replaced layers %s, halt_align %s, %d tensors (%d from the "
            "teacher): logits within %.2g of the bound; terms within %.2g of the bound: total "
            "%s, CE smoothed by %g %s, loss_mse [%s], loss_halt [%s]; worst gradient %s at %.2g of "
            "the bound; teacher keeps %s (margin to 1-eps %.2g); distill mutants caught %d of "
            "%d: %s" % (
                os.path.basename(os.path.normpath(d)), mix, "dense" if dense else "A-ViT",
                replaced, dm["halt_align"],
                len(list(student.parameters())), shared, worst_logit, worst_term, term("loss"),
                float(dm["label_smoothing"]), term("loss_ce"), term("loss_mse"), term("loss_halt"), worst_name, worst_grad,
                keep, tinfo["margin"], len(caught), len(mutants), ", ".join(caught)))


def encoder_reference(meta, weights, batch, mixer_mutant=None):
    """The torch encoder or decoder over the dump's batch, its loss backwarded;
    (model, logits, losses)."""
    sh, kn = meta["shape"], meta["knobs"]
    model = Transformer(sh)
    # strict: every bf tensor has a place in the torch model and none is left over
    model.load_state_dict(weights, strict=True)
    model = model.double()
    set_mixer_mutant(model, mixer_mutant)
    ids = batch["ids"].long()
    mask = batch["mask"].double()
    targets = batch["targets"].long()
    noise = None
    if sh["budget"]:
        noise = [batch["noise.%d" % l].double() for l in range(sh["layers"])]
    logits, task, budget, entropy = model(ids, mask, targets, noise, kn)
    loss = task + budget + entropy
    loss.backward()
    return model, logits.detach(), {"loss": loss, "loss_task": task, "loss_budget": budget,
                                    "loss_entropy": entropy}


def compare_encoder(meta, model, logits, losses, bf_logits, bf_grads):
    """Raises Failure on the first difference; returns (worst logit ratio,
    worst gradient ratio, its tensor)."""
    worst_logit = close("logits", bf_logits, logits, 0, RTOL_LOGITS * float(logits.abs().max()))
    for k, v in losses.items():
        check_loss(meta, k, v)
    worst_grad, worst_name = compare_grads(dict(model.named_parameters()), bf_grads)
    return worst_logit, worst_grad, worst_name


def check_infer(d, logits, info, batch):
    """bf's inference forward of the same batch (halted tokens physically
    dropped: infer.safetensors, infer.json) against the reference's masked
    forward: the logits (the same bound as training's), the retention and
    the correct count; a note for the summary line."""
    path = os.path.join(d, "infer.safetensors")
    if not os.path.exists(path):
        raise Failure("an A-ViT dump without infer.safetensors: bf's inference path is not "
                      "dumped (a bfworker older than this check?)")
    bf = load_file(path)["logits"]
    meta = json.load(open(os.path.join(d, "infer.json")))
    worst = close("inference logits (halted tokens dropped)", bf, logits, 0,
                  RTOL_LOGITS * float(logits.abs().max()))
    if not abs(meta["retention"] - info["retention"]) <= 1e-9:
        raise Failure("inference retention: bf %.9g, torch %.9g" % (meta["retention"],
                                                                    info["retention"]))
    correct = int((logits.argmax(-1) == batch["targets"].long().view(-1)).sum())
    if int(meta["correct"]) != correct:
        raise Failure("inference correct: bf %d, torch %d" % (int(meta["correct"]), correct))
    return ", inference with dropping: logits within %.2g of the bound, %d correct" % (
        worst, correct)


def check_dump(d):
    meta = json.load(open(os.path.join(d, "dump.json")))
    sh, kn = meta["shape"], meta["knobs"]
    weights = load_file(os.path.join(d, "model.safetensors"))
    batch = load_file(os.path.join(d, "batch.safetensors"))
    bf_logits = load_file(os.path.join(d, "outputs.safetensors"))["logits"]
    bf_grads = load_file(os.path.join(d, "grads.safetensors"))
    if meta.get("stage") == "distill":
        return check_distill(d, meta, weights, batch, bf_logits, bf_grads)
    if sh["model"] == "vit":
        return check_vit(d, meta, weights, batch, bf_logits, bf_grads)
    model, logits, losses = encoder_reference(meta, weights, batch)
    ids = batch["ids"]
    task, budget, entropy, loss = (losses[k] for k in ("loss_task", "loss_budget",
                                                       "loss_entropy", "loss"))

    # is the case well-posed? (before any comparison, so that a failure says why)
    if sh["budget"]:
        below = sum(int((b.attn.last_s < kn["s_min"]).sum()) for b in model.blocks)
        above = sum(int((b.attn.last_s > kn["s_max"]).sum()) for b in model.blocks)
        # s starts in the middle of budget.range (clamped to [0.02, 0.98]): only a
        # range such as [0.99, 1] or [0, 0.01] puts it outside at step 0, where
        # the hinge and its gradient are checked
        hinge_note = "s outside the range %d+%d of %d" % (below, above, len(ids) * sh["layers"])
        if not (below or above):
            hinge_note += " (the hinge is not exercised)"
        # near an edge of the range the hinge's gradient 2 (s - edge) carries bf's
        # float32 rounding of s relative to the distance (ulp(s) / |s - edge|):
        # such a case would compare rounding, not equations
        near = min(float(torch.minimum((b.attn.last_s - kn["s_min"]).abs(),
                                       (b.attn.last_s - kn["s_max"]).abs()).min())
                   for b in model.blocks)
        if near < 1e-3:
            raise Failure("a sample's s is %.3g from an edge of budget.range, where the float32 "
                          "hinge gradient is ill-conditioned: move the range" % near)
        extra = ", " + hinge_note
        ms = sum(float(b.attn.last_s.mean()) for b in model.blocks) / sh["layers"]
        if not abs(meta["loss"]["mean_s"] - ms) <= 1e-5 * abs(ms):
            raise Failure("mean_s: bf %.9g, torch %.9g" % (meta["loss"]["mean_s"], ms))
        # the ranks are taken from float32 scores in bf: a gap below the float32
        # noise of z would make them ambiguous and the case meaningless
        gap = min(float((b.attn.last_zn.sort(-1).values.diff(dim=-1)).min())
                  for b in model.blocks)
        if gap < 1e-4:
            raise Failure("two heads' noisy scores are %.3g apart: ranks are ambiguous; pick "
                          "another seed" % gap)
    else:
        extra = ""
    worst_logit, worst_grad, worst_name = compare_encoder(meta, model, logits, losses, bf_logits,
                                                          bf_grads)
    params = dict(model.named_parameters())
    empty = int((batch["mask"].sum(1) == 0).sum())
    holes = int(sum(bool(((r[1:] > r[:-1]).any())) for r in batch["mask"]))
    if empty or holes:
        extra += ", mask: %d samples empty, %d with holes" % (empty, holes)
    extra += mixer_note(model, lambda mu: compare_encoder(
        meta, *encoder_reference(meta, weights, batch, mu), bf_logits, bf_grads))
    mixers = "".join(" " + k for k in sorted(set(sh.get("mixers", [])) - {"attention"}))
    return ("%s: %s%s%s%s, %d tensors: logits within %.2g of the bound, loss %.6f (task %.6f "
            "budget %.3g entropy %+.3g%s), worst gradient %s at %.2g of the bound" % (
                os.path.basename(os.path.normpath(d)), "encoder" if sh["n_classes"] else "lm",
                " budget" if sh["budget"] else "", " hadamard" if sh["hadamard"] else " dense",
                mixers, len(params), worst_logit, float(loss), float(task), float(budget),
                float(entropy), extra, worst_name, worst_grad))


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    torch.manual_seed(0)
    failed = 0
    for d in argv[1:]:
        try:
            print("ok " + check_dump(d))
        except Failure as e:
            print("FAIL %s: %s" % (d, e))
            failed += 1
    print("torch %s: %d of %d dumps match bf" % (torch.__version__, len(argv) - 1 - failed,
                                                  len(argv) - 1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
