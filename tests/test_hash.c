/* fnv1a64 (common/hash.h): the values are persisted in checkpoints, stage
 * keys, config hashes and data caches, so they must equal the plain FNV-1a
 * byte loop for every length and alignment, match the published test
 * vectors, and chain as hashing the concatenation. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "common/hash.h"

static uint64_t byte_loop(uint64_t h, const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

Test(hash, published_vectors) {
    cr_assert_eq(fnv1a64(FNV1A64_BASIS, "", 0), 0xcbf29ce484222325ull);
    cr_assert_eq(fnv1a64(FNV1A64_BASIS, "a", 1), 0xaf63dc4c8601ec8cull);
    cr_assert_eq(fnv1a64(FNV1A64_BASIS, "foobar", 6), 0x85944171f73967e8ull);
    cr_assert_eq(fnv1a64(FNV1A64_SEED, NULL, 0), 1469598103934665603ull);
}

Test(hash, equals_the_byte_loop_at_every_length_and_offset) {
    unsigned char buf[300];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 167u + 13u);
    for (size_t off = 0; off < 9; off++)
        for (size_t n = 0; n + off <= sizeof buf; n++) {
            cr_assert_eq(fnv1a64(FNV1A64_SEED, buf + off, n), byte_loop(FNV1A64_SEED, buf + off, n),
                         "off %zu n %zu", off, n);
            cr_assert_eq(fnv1a64(FNV1A64_BASIS, buf + off, n),
                         byte_loop(FNV1A64_BASIS, buf + off, n), "off %zu n %zu", off, n);
        }
}

Test(hash, chains_as_the_concatenation) {
    const char *s = "model.layers: 4\nmodel.d: 64\n";
    size_t n = strlen(s);
    for (size_t k = 0; k <= n; k++)
        cr_assert_eq(fnv1a64(fnv1a64(FNV1A64_SEED, s, k), s + k, n - k),
                     fnv1a64(FNV1A64_SEED, s, n));
}
