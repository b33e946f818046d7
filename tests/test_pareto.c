/* test_pareto — jobs/pareto.c against fronts worked out by hand: ranks,
 * crowding distances, the 2-D hypervolume and each point's contribution,
 * a 3-D hypervolume by inclusion-exclusion and against counting unit cells
 * on an integer grid, the epsilon-net order, and the rank rules checked by
 * brute force on random points. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "jobs/pareto.h"

/* both minimised: P0..P2 the front, P3 dominated by P1, P4 by P3, P5 not finite */
static const double PTS[] = {1, 5, 2, 3, 4, 1, 3, 4, 5, 5, NAN, 1};
static const int MINMIN[] = {0, 0};

Test(pareto, ranks_and_crowding_by_hand) {
    int rank[6];
    cr_assert_eq(pareto_rank(PTS, 6, 2, MINMIN, rank), 3);
    int want[] = {1, 1, 1, 2, 3, 0};
    for (int i = 0; i < 6; i++) cr_assert_eq(rank[i], want[i], "point %d", i);
    double d[6];
    cr_assert_eq(pareto_crowding(PTS, 6, 2, rank, d), 0);
    cr_assert(isinf(d[0]) && isinf(d[2]), "the ends of the front");
    /* P1: neighbours (1,5) and (4,1): 3/3 + 4/4 */
    cr_assert_float_eq(d[1], 2.0, 1e-15);
    cr_assert(isinf(d[3]) && isinf(d[4]), "a front of one point");
    cr_assert(isnan(d[5]));
    cr_assert(pareto_dominates(PTS + 2, PTS + 6, 2, MINMIN));
    cr_assert(!pareto_dominates(PTS, PTS + 2, 2, MINMIN));
    cr_assert(!pareto_dominates(PTS, PTS, 2, MINMIN), "a point does not dominate itself");
}

Test(pareto, hypervolume_2d_and_contributions_by_hand) {
    double ref[] = {6, 6};
    /* (6-1)(6-5) + (6-2)(5-3) + (6-4)(3-1) = 5 + 8 + 4 */
    cr_assert_float_eq(pareto_hypervolume(PTS, 6, 2, MINMIN, ref), 17.0, 1e-12);
    double c[6];
    cr_assert_eq(pareto_hv_contributions(PTS, 6, 2, MINMIN, ref, c), 0);
    /* exclusive boxes: P0 [1,2]x[5,6]; P1 [2,3]x[3,5] + [3,4]x[3,4]; P2 [4,6]x[1,3] */
    double want[] = {1, 3, 4, 0, 0, 0};
    for (int i = 0; i < 6; i++) cr_assert_float_eq(c[i], want[i], 1e-12, "point %d", i);
    /* the same front with objective 0 maximised (negated values) */
    double neg[12];
    for (int i = 0; i < 6; i++) neg[2 * i] = -PTS[2 * i], neg[2 * i + 1] = PTS[2 * i + 1];
    int maxmin[] = {1, 0};
    double nref[] = {-6, 6};
    cr_assert_float_eq(pareto_hypervolume(neg, 6, 2, maxmin, nref), 17.0, 1e-12);
    int rank[6];
    pareto_rank(neg, 6, 2, maxmin, rank);
    cr_assert_eq(rank[3], 2);
    /* a point not inside the reference adds nothing */
    double out[] = {7, 0};
    cr_assert_float_eq(pareto_hypervolume(out, 1, 2, MINMIN, ref), 0.0, 0);
    double r2[2];
    cr_assert_eq(pareto_reference(PTS, 6, 2, MINMIN, r2), 0);
    cr_assert_float_eq(r2[0], 5.4, 1e-12, "worst 5 plus a tenth of the range 4");
    cr_assert_float_eq(r2[1], 5.4, 1e-12);
}

Test(pareto, hypervolume_3d_by_inclusion_exclusion) {
    int mins[] = {0, 0, 0};
    double ref[] = {2, 2, 2};
    double one[] = {1, 1, 1};
    cr_assert_float_eq(pareto_hypervolume(one, 1, 3, mins, ref), 1.0, 0);
    /* boxes of 2 each, pairwise overlaps of 1, the three share 1: 6 - 3 + 1 */
    double three[] = {0, 1, 1, 1, 0, 1, 1, 1, 0};
    cr_assert_float_eq(pareto_hypervolume(three, 3, 3, mins, ref), 4.0, 1e-12);
    cr_assert_float_eq(pareto_hypervolume(three, 2, 3, mins, ref), 3.0, 1e-12);
}

Test(pareto, hypervolume_3d_counts_grid_cells) {
    /* integer points in [0,6)^3, reference (6,6,6): the volume is the
     * number of unit cells some point is below in every coordinate, exact
     * in doubles */
    srand(7);
    int mins[] = {0, 0, 0};
    double ref[] = {6, 6, 6};
    for (int round = 0; round < 20; round++) {
        int n = 1 + rand() % 12;
        double p[36];
        for (int i = 0; i < 3 * n; i++) p[i] = rand() % 6;
        int cells = 0;
        for (int a = 0; a < 6; a++)
            for (int b = 0; b < 6; b++)
                for (int c = 0; c < 6; c++) {
                    int in = 0;
                    for (int i = 0; i < n && !in; i++)
                        in = p[3 * i] <= a && p[3 * i + 1] <= b && p[3 * i + 2] <= c;
                    cells += in;
                }
        cr_assert_float_eq(pareto_hypervolume(p, (size_t)n, 3, mins, ref), (double)cells, 0,
                           "round %d", round);
    }
}

Test(pareto, ranks_follow_the_definition) {
    srand(11);
    enum { N = 200, M = 3 };
    static double v[N * M];
    int rank[N], maxi[] = {1, 0, 1};
    for (int i = 0; i < N * M; i++) v[i] = rand() % 20; /* ties on purpose */
    int fronts = pareto_rank(v, N, M, maxi, rank);
    cr_assert_gt(fronts, 1);
    for (int i = 0; i < N; i++) {
        cr_assert(rank[i] >= 1 && rank[i] <= fronts);
        int by_prev = 0;
        for (int j = 0; j < N; j++) {
            if (!pareto_dominates(v + j * M, v + i * M, M, maxi)) continue;
            cr_assert_lt(rank[j], rank[i], "%d dominates %d, so ranks before it", j, i);
            by_prev |= rank[j] == rank[i] - 1;
        }
        cr_assert(rank[i] == 1 || by_prev, "point %d (rank %d) is dominated from the front above",
                  i, rank[i]);
    }
}

Test(pareto, order_is_front_by_front_with_an_epsilon_net) {
    /* a front on a line, a dominated point, a row with no value */
    double v[] = {0, 4, 1, 3, 2, 2, 3, 1, 4, 0, 5, 5, NAN, 0};
    size_t order[7];
    cr_assert_eq(pareto_order(v, 7, 2, MINMIN, order), 0);
    /* best of objective 0; then the farthest from it; then the middle;
     * (1,3) and (3,1) tie and the lower index goes first */
    size_t want[] = {0, 4, 2, 1, 3, 5, 6};
    for (int i = 0; i < 7; i++) cr_assert_eq(order[i], want[i], "position %d", i);
}
