/* data_priv — helpers shared by the data_*.c files; not part of the API. */
#ifndef DATA_PRIV_H
#define DATA_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include "worker/data/data.h"

/* Writes a printf-style message into err and returns code. */
int data_fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Reads a whole regular file of at most cap bytes into a NUL-terminated
 * malloc'd buffer (owned by the caller). */
int data_read_file(const char *path, uint64_t cap, char **buf, size_t *len, char *err,
                   size_t errlen);

/* A growing int32 array. */
typedef struct tokvec {
    int32_t *v;
    size_t n, cap;
} tokvec;

/* Appends n ids; DATA_ENOMEM on failure (tv unchanged). */
int data_tokvec_push(tokvec *tv, const int32_t *ids, size_t n);

#endif
