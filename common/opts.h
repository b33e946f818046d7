/* opts — one command-line parser for every bf program: a table of options
 * (long name, short letter, value type, range, help), from which it builds
 * getopt_long's option array, parses with range checks and errors that name
 * the option and what is valid, and prints the options part of --help. */
#ifndef BF_OPTS_H
#define BF_OPTS_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    OPT_FLAG,   /* no value: the int at off becomes 1 */
    OPT_INT,    /* an int in [lo, hi] */
    OPT_LONG,   /* a long long in [lo, hi] */
    OPT_DOUBLE, /* a finite double in [lo, hi] */
    OPT_STR,    /* a const char * (argv's own text) */
    OPT_LIST,   /* every value given, in order, into an opt_list */
    OPT_CHOICE, /* one of the '|'-separated words of arg: the int at off
                 * becomes its index ("val|test": test is 1) */
    OPT_MAYBE   /* a const char * whose value may be left out: "--name
                 * VALUE" when the next word is not an option, or
                 * --name=VALUE; "" when given alone */
} opt_type;

/* Where an OPT_LIST row's values go: v[0..n), v an array of cap the caller
 * provides (cap argc is always enough). */
typedef struct opt_list {
    const char **v;
    int n, cap;
} opt_list;

/* One option. off is where its value goes in the struct opts_parse fills
 * (OPT_AT); lo == hi == 0 means any value. A NULL name ends a table. */
typedef struct opt_spec {
    const char *name; /* without the leading "--"; "" for a short-only option */
    int shortc;       /* a short letter, or 0 */
    opt_type type;
    double lo, hi;
    size_t off;
    const char *arg;  /* the value's name in help ("N", "DIR"; OPT_CHOICE: its
                       * words, "val|test"); NULL for a flag */
    const char *help; /* one line, or NULL to leave it out of --help */
} opt_spec;

#define OPT_AT(type, field) offsetof(type, field)

enum { OPTS_OK = 0, OPTS_HELP = 1, OPTS_ERROR = -1 };

/* Parses argv[first..] by table t into out (the struct the offsets are
 * into; what it holds already are the defaults). --help and -h are every
 * program's: they print usage then the options (opts_help) to stdout and
 * return OPTS_HELP. An unknown option, a missing value or one out of range
 * prints "prog: why" (for an unknown option, the nearest name and the valid
 * ones) and the same help to stderr and returns OPTS_ERROR.
 * Long names must be given whole (no abbreviations); --name=VALUE works.
 * Arguments that are not options are moved after the options: *rest is the
 * index of the first (argc when none). */
int opts_parse(const char *prog, const char *usage, const opt_spec *t, int argc, char **argv,
               int first, void *out, int *rest);

/* Writes "  --name ARG  help" for each row of t that has help, the help
 * wrapped before column 80. */
void opts_help(FILE *f, const opt_spec *t);
/* Writes text to f from column col on, wrapped before column 80, the lines
 * after the first indented by indent; ends with a newline. (--help texts.) */
void opts_wrap(FILE *f, const char *text, int col, int indent);

/* The row of t for "--name" or "-c" (o as typed), or NULL. */
const opt_spec *opts_find(const opt_spec *t, const char *o);

#ifdef __cplusplus
}
#endif
#endif
