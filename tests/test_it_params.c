/* test_it_params — `bfworker params` counts each part by the tensor names
 * (tok_emb/pos_emb, blocks.L., blocks.L.attn., ln_f/head): the numbers follow
 * from the shape, and the parts add up to the total. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN BF_SOURCE_DIR "/tests/data/golden"

typedef struct counts {
    long embedding, block[2], attn[2], head, total;
} counts;

static counts params_of(const char *yaml) {
    char cmd[1024], line[256];
    snprintf(cmd, sizeof cmd, "%s/bfworker params %s/%s", BF_BIN_DIR, GOLDEN, yaml);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p, "%s", cmd);
    counts c = {0};
    int l;
    long n, a;
    while (fgets(line, sizeof line, p)) {
        if (sscanf(line, "embedding %ld", &n) == 1) c.embedding = n;
        if (sscanf(line, "blocks.%d. %ld (attention %ld)", &l, &n, &a) == 3 && l >= 0 && l < 2) {
            c.block[l] = n;
            c.attn[l] = a;
        }
        if (sscanf(line, "head %ld", &n) == 1) c.head = n;
        if (sscanf(line, "total %ld", &n) == 1) c.total = n;
    }
    cr_assert_eq(pclose(p), 0, "%s", cmd);
    cr_expect_eq(c.embedding + c.block[0] + c.block[1] + c.head, c.total,
                 "%s: the parts do not add up to the total %ld", yaml, c.total);
    return c;
}

/* d = 32, 4 heads, T = 16, V = 300, 2 layers (tests/data/golden) */
enum { D = 32, V = 300, T = 16, NH = 4 };
static const long ATTN = D * 3 * D + 3 * D + D * D + D;                   /* qkv + dense out */
static const long BLOCK_REST = 4 * D + D * 4 * D + 4 * D + 4 * D * D + D; /* 2 LN + MLP */

Test(params, lm_counts_by_name) {
    counts c = params_of("lm_dense.yaml");
    cr_expect_eq(c.embedding, V * D + T * D);
    cr_expect_eq(c.attn[0], ATTN);
    cr_expect_eq(c.block[1], ATTN + BLOCK_REST);
    cr_expect_eq(c.head, 2 * D, "tied decoder head: ln_f only");
}

Test(params, budgetformer_counts_by_name) {
    counts c = params_of("budget_dense.yaml");
    long budget = D * (D / 4) + D / 4 + D / 4 + 1 + D * NH + NH;
    cr_expect_eq(c.attn[1], ATTN + budget);
    cr_expect_eq(c.block[0], ATTN + budget + BLOCK_REST);
    cr_expect_eq(c.head, 2 * D + 26 * D + 26, "ln_f and a 26-class head");
}
