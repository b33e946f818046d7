/* common/spark: sparklines of known series, folding past the buffer, the
 * ASCII fallback and the locale check. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/spark.h"

Test(spark, rising_falling_and_flat) {
    spark s;
    char b[300];
    spark_init(&s);
    cr_assert_str_eq(spark_render(&s, 4, 0, b, sizeof b), "    ");
    for (int i = 0; i < 8; i++) spark_add(&s, i);
    cr_assert_str_eq(spark_render(&s, 8, 1, b, sizeof b),
                     "\u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588");
    cr_assert_str_eq(spark_render(&s, 8, 0, b, sizeof b), " .:-=+*#");
    cr_assert_str_eq(spark_render(&s, 4, 0, b, sizeof b), " :+#"); /* pairs averaged */
    spark_init(&s);
    for (int i = 0; i < 3; i++) spark_add(&s, 5);
    spark_add(&s, NAN); /* skipped */
    cr_assert_str_eq(spark_render(&s, 6, 0, b, sizeof b), "---   ");
    /* a buffer too small cuts whole characters */
    char tiny[5];
    spark_init(&s);
    for (int i = 0; i < 8; i++) spark_add(&s, i);
    cr_assert_str_eq(spark_render(&s, 8, 1, tiny, sizeof tiny), "\u2581");
}

Test(spark, folds_a_long_series_and_keeps_its_shape) {
    spark s;
    spark_init(&s);
    /* 100000 values falling then rising: a V whatever the buffer does */
    for (int i = 0; i < 100000; i++) spark_add(&s, fabs(i - 50000.0));
    cr_assert(s.n <= SPARK_CAP && s.n >= SPARK_CAP / 2, "%d entries", s.n);
    char b[64];
    spark_render(&s, 9, 0, b, sizeof b);
    cr_assert_eq(b[0], '#', "%s", b);
    cr_assert_eq(b[8], '#', "%s", b);
    cr_assert_eq(b[4], ' ', "%s", b);
}

Test(spark, locale) {
    setenv("LC_ALL", "", 1);
    setenv("LC_CTYPE", "", 1);
    setenv("LANG", "en_US.UTF-8", 1);
    cr_assert(spark_utf8_locale());
    setenv("LC_ALL", "C", 1);
    cr_assert(!spark_utf8_locale());
    setenv("LC_ALL", "", 1);
    setenv("LANG", "C.utf8", 1);
    cr_assert(spark_utf8_locale());
}
