/* Which Walsh–Hadamard widths bf supports, and the entries of the matrices it
 * applies. Pure C (no OpenMP): config validation and tests call these. */
#include "kernels/bk.h"
#include "kernels/bk_hadamard.h"

/* Widths are 2^n (n >= 0) or 12 * 2^n (n >= 0). So 1, 2, 4, 12, 24, 768 are
 * valid; 3, 6 (= 12 * 2^-1), 100 are not. */
int bk_fwht_valid(int d) {
    if (d < 1) return 0;
    if (d % 12 == 0) d /= 12;
    return (d & (d - 1)) == 0;
}

/* Sylvester H_{2^n} in natural order: H[i][j] = (-1)^popcount(i & j). */
static int sylvester_entry(unsigned i, unsigned j) {
    unsigned x = i & j, parity = 0;
    while (x) {
        parity ^= x & 1u;
        x >>= 1;
    }
    return parity ? -1 : 1;
}

int bk_hadamard_entry(int d, int i, int j) {
    if ((d & (d - 1)) == 0) return sylvester_entry((unsigned)i, (unsigned)j);
    int m = d / 12; /* H_12 (x) H_m: index i = a*m + b */
    return bk_h12[i / m][j / m] * sylvester_entry((unsigned)(i % m), (unsigned)(j % m));
}
