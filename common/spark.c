/* spark.c — sparklines (spark.h): folds a series of any length into a fixed
 * buffer and renders it as one line of characters into the caller's buffer.
 * It never prints and never allocates. */
#include "common/spark.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void spark_init(spark *s) {
    memset(s, 0, sizeof *s);
    s->stride = 1;
}

void spark_add(spark *s, double x) {
    if (!isfinite(x)) return;
    if (s->stride < 1) spark_init(s);
    s->pend_s += x;
    if (++s->pend_n < s->stride) return;
    if (s->n == SPARK_CAP) { /* fold: pairs averaged, each entry now twice as wide */
        for (int i = 0; i < SPARK_CAP / 2; i++) s->v[i] = (s->v[2 * i] + s->v[2 * i + 1]) / 2;
        s->n = SPARK_CAP / 2;
        s->stride *= 2;
        if (s->pend_n < s->stride) return; /* the pending entry fills to the new width */
    }
    s->v[s->n++] = s->pend_s / (double)s->pend_n;
    s->pend_s = 0;
    s->pend_n = 0;
}

char *spark_render(const spark *s, int width, int utf8, char *buf, size_t len) {
    static const char *const blocks[8] = {"\u2581", "\u2582", "\u2583", "\u2584",
                                          "\u2585", "\u2586", "\u2587", "\u2588"};
    static const char ascii[] = " .:-=+*#";
    if (width < 1) width = 1;
    if (width > 64) width = 64;
    double bin[64];
    int have[64] = {0}, nb = 0;
    int n = s->n;
    /* the entry being filled counts too, so a short series shows at once */
    double extra = s->pend_n ? s->pend_s / (double)s->pend_n : NAN;
    int total = n + (s->pend_n ? 1 : 0);
    for (int b = 0; b < width; b++) bin[b] = 0;
    if (total > 0) {
        nb = total < width ? total : width;
        int cnt[64] = {0};
        for (int i = 0; i < total; i++) {
            int b = (int)((long)i * nb / total);
            bin[b] += i < n ? s->v[i] : extra;
            cnt[b]++;
        }
        for (int b = 0; b < nb; b++)
            if (cnt[b]) bin[b] /= cnt[b], have[b] = 1;
    }
    double lo = INFINITY, hi = -INFINITY;
    for (int b = 0; b < nb; b++)
        if (have[b]) lo = fmin(lo, bin[b]), hi = fmax(hi, bin[b]);
    size_t w = 0;
    for (int b = 0; b < width; b++) {
        const char *c;
        char one[2] = {' ', '\0'};
        if (b >= nb || !have[b]) {
            c = " ";
        } else {
            int level = hi > lo ? (int)((bin[b] - lo) / (hi - lo) * 7.999) : 3;
            if (utf8) {
                c = blocks[level];
            } else {
                one[0] = ascii[level];
                c = one;
            }
        }
        size_t k = strlen(c);
        if (w + k + 1 > len) break;
        memcpy(buf + w, c, k);
        w += k;
    }
    if (len) buf[w < len ? w : len - 1] = '\0';
    return buf;
}

/* 1 when s holds "utf-8" or "utf8", any case. */
static int names_utf8(const char *s) {
    char low[128];
    size_t k = 0;
    for (; s[k] && k + 1 < sizeof low; k++)
        low[k] = (char)(s[k] >= 'A' && s[k] <= 'Z' ? s[k] - 'A' + 'a' : s[k]);
    low[k] = '\0';
    return strstr(low, "utf-8") != NULL || strstr(low, "utf8") != NULL;
}

int spark_utf8_locale(void) {
    const char *names[3] = {"LC_ALL", "LC_CTYPE", "LANG"};
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(names[i]);
        if (v && *v) return names_utf8(v);
    }
    return 0;
}
