/* spark — a sparkline: a series of any length summarised in a fixed number
 * of bins, drawn as one line of block characters (U+2581..U+2588) or, on a
 * terminal that is not UTF-8, of ASCII " .:-=+*#". Values are folded as
 * they come (pairs averaged when the buffer fills), so memory stays fixed
 * and the line always spans the whole history. */
#ifndef BF_SPARK_H
#define BF_SPARK_H

#include <stddef.h>

#define SPARK_CAP 256

typedef struct spark {
    double v[SPARK_CAP];
    int n;         /* values in v */
    long stride;   /* raw values per entry of v */
    long pend_n;   /* raw values in the entry being filled */
    double pend_s; /* their sum */
} spark;

void spark_init(spark *s);
/* Adds x (non-finite values are skipped). */
void spark_add(spark *s, double x);
/* Writes `width` characters (1..64) into buf (NUL-terminated; at most
 * 4 * width + 1 bytes are needed with utf8): each a bin's mean scaled from
 * the lowest bin to the highest. Empty: spaces. Returns buf. */
char *spark_render(const spark *s, int width, int utf8, char *buf, size_t len);
/* 1 when LC_ALL, LC_CTYPE or LANG (the first one set) names UTF-8. */
int spark_utf8_locale(void);

#endif
