/* The 12x12 Hadamard matrix of the Paley construction (q = 11): H_12 = I + S,
 * S = [[0, 1^T], [-1, Q]] with Q the Jacobsthal matrix Q[i][j] = chi(j - i)
 * (chi the quadratic character mod 11). H_12 H_12^T = 12 I. It is NOT
 * symmetric, so backward passes use its transpose. Widths d = 12 * 2^n apply
 * H_12 (x) H_{2^n}: index i = a * 2^n + b. Shared by the CPU and CUDA backends. */
#ifndef BK_HADAMARD_H
#define BK_HADAMARD_H

static const signed char bk_h12[12][12] = {
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},       {-1, 1, 1, -1, 1, 1, 1, -1, -1, -1, 1, -1},
    {-1, -1, 1, 1, -1, 1, 1, 1, -1, -1, -1, 1}, {-1, 1, -1, 1, 1, -1, 1, 1, 1, -1, -1, -1},
    {-1, -1, 1, -1, 1, 1, -1, 1, 1, 1, -1, -1}, {-1, -1, -1, 1, -1, 1, 1, -1, 1, 1, 1, -1},
    {-1, -1, -1, -1, 1, -1, 1, 1, -1, 1, 1, 1}, {-1, 1, -1, -1, -1, 1, -1, 1, 1, -1, 1, 1},
    {-1, 1, 1, -1, -1, -1, 1, -1, 1, 1, -1, 1}, {-1, 1, 1, 1, -1, -1, -1, 1, -1, 1, 1, -1},
    {-1, -1, 1, 1, 1, -1, -1, -1, 1, -1, 1, 1}, {-1, 1, -1, 1, 1, 1, -1, -1, -1, 1, -1, 1}};

#endif
