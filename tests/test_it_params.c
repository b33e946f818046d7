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

/* `params` counts from the declared tensors without allocating them: a
 * 59.7-billion-parameter model (240 GB of weights) is counted on a machine
 * that could not hold it, exactly, and says what training it would need. */
Test(params, counts_a_model_too_big_to_allocate) {
    char cmd[1024], line[512];
    snprintf(cmd, sizeof cmd,
             "%s/bfworker params %s/lm_dense.yaml --set model.d_model=8192 --set model.layers=64 "
             "--set model.heads=64 --set model.vocab=1000000 2>&1",
             BF_BIN_DIR, GOLDEN);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    long long total = -1;
    double mib = -1;
    while (fgets(line, sizeof line, p)) {
        sscanf(line, "total %lld", &total);
        sscanf(line, "memory to train at train.batch 4 (one rank): %lf MiB", &mib);
    }
    cr_assert_eq(pclose(p), 0, "%s", cmd);
    const long long d = 8192, l = 64, v = 1000000, t = 16;
    const long long attn = d * 3 * d + 3 * d + d * d + d,
                    rest = 4 * d + d * 4 * d + 4 * d + 4 * d * d + d;
    cr_expect_eq(total, v * d + t * d + l * (attn + rest) + 2 * d, "total %lld", total);
    /* weights, gradients and the two AdamW moments alone: 16 bytes each */
    cr_expect_gt(mib, 16.0 * (double)total / (1024.0 * 1024.0), "%.1f MiB", mib);
}

/* A model that does not fit is refused before it is allocated, with what
 * it needs part by part and what is available (not found buffer by buffer,
 * or by the OOM killer). */
Test(params, train_refuses_a_model_that_does_not_fit) {
    char cmd[2048], out[4096];
    snprintf(cmd, sizeof cmd,
             "d=$(mktemp -d) && %s/bfworker train %s/lm_dense.yaml "
             "--set data.path=%s/tests/data/glosses_train.tsv --set model.d_model=8192 "
             "--set model.layers=24 --set model.heads=64 --out $d/run 2>&1; echo \"rc=$?\"; "
             "rm -rf $d",
             BF_BIN_DIR, GOLDEN, BF_SOURCE_DIR);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    pclose(p);
    cr_expect(strstr(out, "rc=1"), "%s", out);
    cr_expect(strstr(out, "the model does not fit: it needs ") && strstr(out, "GiB on cpu") &&
                  strstr(out, "AdamW moments") && strstr(out, "GiB is available"),
              "%s", out);
    cr_expect(!strstr(out, "step "), "training started:\n%s", out);
}

/* s2s: one replaced layer's mixer per kind at DeiT-Tiny's width (d 192,
 * 3 heads, d_h 64), W_O included, by the formulas of docs/design.md#wide-bilstm-mixer,
 * docs/design.md#bimamba-2-mixer and docs/s2s.md; and a vit model.mixers entry counted as that
 * mixer, not as attention. */
Test(params, s2s_counts_each_mixer) {
    char cmd[1024], line[512], name[32];
    snprintf(cmd, sizeof cmd,
             "%s/bfworker params %s/examples/s2s.yaml --set model.d_model=192 "
             "--set model.heads=3 --set distill.mixer=bilstm_wide 2>&1",
             BF_BIN_DIR, BF_SOURCE_DIR);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    long n, attn = -1, wide = -1, lstm = -1, m2 = -1;
    int marked = 0, students = 0;
    while (fgets(line, sizeof line, p)) {
        students |= strncmp(line, "students:", 9) == 0; /* the whole students' totals follow */
        if (students || sscanf(line, " %31s %ld", name, &n) != 2) continue;
        if (!strcmp(name, "attention")) attn = n;
        if (!strcmp(name, "bilstm")) lstm = n;
        if (!strcmp(name, "bimamba2")) m2 = n;
        if (!strcmp(name, "bilstm_wide")) wide = n, marked = strstr(line, "(distill.mixer)") != 0;
    }
    cr_assert_eq(pclose(p), 0, "%s", cmd);
    const long C = 192, dh = 64, wo = C * C + C;
    cr_expect_eq(attn, 3 * C * C + 3 * C + wo);
    /* hidden d_h/2 per direction over the full input: ih 4 C^2 + 4C, hh 2 C d_h */
    cr_expect_eq(lstm, 4 * C * C + 4 * C + 2 * C * dh + wo, "bilstm %ld", lstm);
    /* pre C^2 + C, ih 8 C d_h + 8C, hh 8 C d_h, head 2 C d_h + C */
    cr_expect_eq(wide, 2 * C * C + 18 * C * dh + 11 * C, "bilstm_wide %ld", wide);
    cr_expect(marked, "the configured distill.mixer is not marked");
    /* per direction in_proj (2C + 2N + H) C, conv (C + 2N) x 5, dt_bias,
     * A_log, D 3H, norm C; fuse 2 C d_h; at N = 128 */
    const long N = 128, H = 3, dir = (2 * C + 2 * N + H) * C + (C + 2 * N) * 5 + 3 * H + C;
    cr_expect_eq(m2, 2 * dir + 2 * C * dh + wo, "bimamba2 %ld", m2);

    snprintf(cmd, sizeof cmd,
             "%s/bfworker params %s/examples/vit.yaml --set model.mixers=attention,bilstm_wide "
             "2>&1",
             BF_BIN_DIR, BF_SOURCE_DIR);
    p = popen(cmd, "r");
    cr_assert_not_null(p);
    int found = 0;
    while (fgets(line, sizeof line, p))
        found |= strstr(line, "blocks.1.") && strstr(line, "(bilstm_wide ");
    cr_assert_eq(pclose(p), 0, "%s", cmd);
    cr_expect(found, "layer 1 not counted as bilstm_wide");
}

/* Given the training file, the head is sized for its distinct labels (4 in
 * glosses_train.tsv: counted here from the file), not for 26, and the note
 * says so. */
Test(params, budgetformer_head_sized_by_the_training_file) {
    char cmd[1024], line[512];
    int labels = 0;
    snprintf(cmd, sizeof cmd, "cut -f1 %s/tests/data/glosses_train.tsv | sort -u | wc -l",
             BF_SOURCE_DIR);
    FILE *p = popen(cmd, "r");
    cr_assert(p && fscanf(p, "%d", &labels) == 1 && labels >= 2);
    pclose(p);
    snprintf(cmd, sizeof cmd,
             "%s/bfworker params %s/budget_dense.yaml --set data.train=%s/tests/data/"
             "glosses_train.tsv",
             BF_BIN_DIR, GOLDEN, BF_SOURCE_DIR);
    p = popen(cmd, "r");
    cr_assert_not_null(p);
    long head = -1;
    int said = 0;
    char want[128];
    snprintf(want, sizeof want, "(classifier sized for the %d distinct labels of ", labels);
    while (fgets(line, sizeof line, p)) {
        long n;
        if (sscanf(line, "head %ld", &n) == 1) head = n;
        said |= strstr(line, want) != NULL;
    }
    cr_assert_eq(pclose(p), 0, "%s", cmd);
    cr_expect_eq(head, 2 * D + labels * D + labels, "ln_f and a %d-class head", labels);
    cr_expect(said, "no note naming the %d labels", labels);
}

/* s2s: the ViT teacher and each mixer's student over the configured
 * replaced layers: a student's total is the teacher's with each replaced
 * layer's attention traded for the mixer (both counted W_O included, from
 * the same output); auto:K counts K layers. */
Test(params, s2s_lists_the_teacher_and_each_student) {
    static const char *const sets[][2] = {{"[1,3]", "layers 1, 3 replaced"},
                                          {"auto:3", "auto:3 replaced"}};
    for (int s = 0; s < 2; s++) {
        char cmd[1024], line[512], name[32];
        snprintf(cmd, sizeof cmd,
                 "%s/bfworker params %s/examples/s2s.yaml --set distill.replace_layers=%s 2>&1",
                 BF_BIN_DIR, BF_SOURCE_DIR, sets[s][0]);
        FILE *p = popen(cmd, "r");
        cr_assert_not_null(p);
        long n, total = -1, one[8] = {0}, student[8] = {0};
        int teacher = 0, told = 0, students = 0, k;
        while (fgets(line, sizeof line, p)) {
            teacher |= strncmp(line, "teacher: the dense ViT, 6 layers", 32) == 0;
            told |= strstr(line, sets[s][1]) != NULL;
            students |= strncmp(line, "students:", 9) == 0;
            if (sscanf(line, "total %ld", &n) == 1) total = n;
            if (sscanf(line, " %31s %ld", name, &n) != 2) continue;
            for (k = 0; k <= 3; k++) /* attention, bimamba, bilstm, bilstm_wide */
                if (!strcmp(name,
                            (const char *[]){"attention", "bimamba", "bilstm", "bilstm_wide"}[k]))
                    *(students ? &student[k] : &one[k]) = n;
        }
        cr_assert_eq(pclose(p), 0, "%s", cmd);
        cr_expect(teacher && told, "%s: no teacher line or no replaced set", cmd);
        int r = s ? 3 : 2;
        for (k = 1; k <= 3; k++)
            cr_expect_eq(student[k], total + r * (one[k] - one[0]),
                         "%s: student %d: %ld, teacher %ld, mixer %ld, attention %ld", sets[s][0],
                         k, student[k], total, one[k], one[0]);
    }
}
