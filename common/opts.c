/* opts.c — the option-table parser (opts.h) over getopt_long: the option
 * array and the short-option string are built from the table, each value is
 * read by its row's type and checked against its range, and --help is
 * printed from the same rows, so what a program says it accepts is what it
 * accepts. */
#include "common/opts.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/cfg.h"

#define OPTS_MAX 64 /* rows of a table */

const opt_spec *opts_find(const opt_spec *t, const char *o) {
    for (; t->name; t++) {
        if (*t->name && o[0] == '-' && o[1] == '-' && !strcmp(o + 2, t->name)) return t;
        if (t->shortc && o[0] == '-' && o[1] == t->shortc && !o[2]) return t;
    }
    return NULL;
}

void opts_wrap(FILE *f, const char *text, int col, int indent) {
    for (const char *p = text; *p;) {
        size_t w = strcspn(p, " ");
        if (col > indent && col + 1 + (int)w > 80) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
        } else if (p != text) {
            fputc(' ', f);
            col++;
        }
        fprintf(f, "%.*s", (int)w, p);
        col += (int)w;
        p += w;
        while (*p == ' ') p++;
    }
    fputc('\n', f);
}

void opts_help(FILE *f, const opt_spec *t) {
    for (; t->name; t++) {
        if (!t->help) continue;
        char head[96];
        int n = !*t->name   ? snprintf(head, sizeof head, "  -%c", t->shortc)
                : t->shortc ? snprintf(head, sizeof head, "  -%c, --%s", t->shortc, t->name)
                            : snprintf(head, sizeof head, "  --%s", t->name);
        if (t->arg && n > 0 && (size_t)n < sizeof head)
            snprintf(head + n, sizeof head - (size_t)n, t->type == OPT_MAYBE ? " [%s]" : " %s",
                     t->arg);
        if (strlen(head) < 24)
            fprintf(f, "%-24s", head);
        else
            fprintf(f, "%s\n%24s", head, "");
        opts_wrap(f, t->help, 24, 24);
    }
}

/* How r is written: "--name", or "-c" for a short-only row. */
static const char *label(const opt_spec *r, char *out, size_t n) {
    if (*r->name)
        snprintf(out, n, "--%s", r->name);
    else
        snprintf(out, n, "-%c", r->shortc);
    return out;
}

/* The range of r as "in [lo, hi]", or "" when any value goes. */
static void range(const opt_spec *r, char *out, size_t n) {
    if (r->lo == 0 && r->hi == 0)
        out[0] = '\0';
    else if (r->type == OPT_DOUBLE)
        snprintf(out, n, " in [%g, %g]", r->lo, r->hi);
    else
        snprintf(out, n, " in [%.0f, %.0f]", r->lo, r->hi);
}

/* Reads text s into r's place in out; -1 after saying why on stderr. */
static int store(const char *prog, const opt_spec *r, const char *s, void *out) {
    char *at = (char *)out + r->off, rng[96];
    range(r, rng, sizeof rng);
    int any = r->lo == 0 && r->hi == 0;
    char *end = NULL;
    errno = 0;
    switch (r->type) {
    case OPT_FLAG:
        *(int *)at = 1;
        return 0;
    case OPT_STR:
        *(const char **)at = s;
        return 0;
    case OPT_MAYBE:
        *(const char **)at = s ? s : "";
        return 0;
    case OPT_CHOICE: {
        int k = 0;
        for (const char *w = r->arg; *w; k++) {
            size_t len = strcspn(w, "|");
            if (strlen(s) == len && !strncmp(w, s, len)) {
                *(int *)at = k;
                return 0;
            }
            w += len + (w[len] == '|');
        }
        char l[72];
        fprintf(stderr, "%s: %s takes one of ", prog, label(r, l, sizeof l));
        for (const char *w = r->arg; *w;) {
            size_t len = strcspn(w, "|");
            fprintf(stderr, "%s%.*s", w == r->arg ? "" : ", ", (int)len, w);
            w += len + (w[len] == '|');
        }
        fprintf(stderr, "; got '%s'\n", s);
        return -1;
    }
    case OPT_LIST: {
        opt_list *l = (opt_list *)(void *)at;
        if (!l->v || l->n >= l->cap) {
            char l2[72];
            fprintf(stderr, "%s: %s is given more than %d times\n", prog, label(r, l2, sizeof l2),
                    l->cap);
            return -1;
        }
        l->v[l->n++] = s;
        return 0;
    }
    case OPT_INT:
    case OPT_LONG: {
        long long v = strtoll(s, &end, 10);
        if (end == s || *end || errno || (!any && (v < r->lo || v > r->hi)) ||
            (r->type == OPT_INT && (v < -2147483647LL - 1 || v > 2147483647LL)))
            break;
        if (r->type == OPT_INT)
            *(int *)at = (int)v;
        else
            *(long long *)at = v;
        return 0;
    }
    case OPT_DOUBLE: {
        double v = strtod(s, &end);
        if (end == s || *end || errno || !isfinite(v) || (!any && (v < r->lo || v > r->hi))) break;
        *(double *)at = v;
        return 0;
    }
    }
    char l[72];
    fprintf(stderr, "%s: %s takes %s%s, got '%s'\n", prog, label(r, l, sizeof l),
            r->type == OPT_DOUBLE ? "a number" : "an integer", rng, s);
    return -1;
}

/* "unknown option 'x'; did you mean '--y'? (valid: --a, -b, ...)": the
 * nearest long name when one is near, and every option of t. */
static void unknown(const char *prog, const opt_spec *t, const char *o) {
    const char *best = NULL;
    size_t bd = 3;
    const char *name = o + strspn(o, "-");
    char bare[64];
    snprintf(bare, sizeof bare, "%.*s", (int)strcspn(name, "="), name);
    for (const opt_spec *r = t; r->name; r++) {
        size_t d = *r->name ? cfg_edit_distance_within(bare, r->name, bd - 1) : bd;
        if (d < bd) bd = d, best = r->name;
    }
    fprintf(stderr, "%s: unknown option '%s'", prog, o);
    if (best) fprintf(stderr, "; did you mean '--%s'?", best);
    fputs(" (valid:", stderr);
    for (const opt_spec *r = t; r->name; r++) {
        char l[72];
        fprintf(stderr, "%s %s", r == t ? "" : ",", label(r, l, sizeof l));
        if (r->shortc && *r->name) fprintf(stderr, ", -%c", r->shortc);
    }
    fprintf(stderr, "%s)\n", t->name ? "" : " none");
}

static int fail(const char *prog, const char *usage, const opt_spec *t) {
    (void)prog;
    fputs(usage, stderr);
    opts_help(stderr, t);
    return OPTS_ERROR;
}

int opts_parse(const char *prog, const char *usage, const opt_spec *t, int argc, char **argv,
               int first, void *out, int *rest) {
    struct option lo[OPTS_MAX + 2];
    char shorts[3 * OPTS_MAX + 4] = ":h";
    size_t n = 0, ns = 2;
    int row = 0;
    for (const opt_spec *r = t; r->name && n < OPTS_MAX; r++, row++) {
        if (*r->name)
            lo[n++] = (struct option){r->name,
                                      r->type == OPT_FLAG    ? no_argument
                                      : r->type == OPT_MAYBE ? optional_argument
                                                             : required_argument,
                                      NULL, 256 + row};
        if (r->shortc) {
            shorts[ns++] = (char)r->shortc;
            if (r->type != OPT_FLAG) shorts[ns++] = ':';
            if (r->type == OPT_MAYBE) shorts[ns++] = ':';
        }
    }
    shorts[ns] = '\0';
    lo[n] = (struct option){"help", no_argument, NULL, 'h'};
    lo[n + 1] = (struct option){NULL, 0, NULL, 0};
    /* getopt_long reads from argv[1]: hand it argv[first - 1..] */
    int ac = argc - first + 1;
    char **av = argv + first - 1;
    optind = 0; /* a fresh scan (glibc), also when called a second time */
    opterr = 0;
    for (;;) {
        int li = -1;
        int c = getopt_long(ac, av, shorts, lo, &li);
        if (c == -1) break;
        /* the option as typed: the last element read, or the one before
         * it when that was the option's value */
        int at = optind - (optarg && optind >= 2 && optarg == av[optind - 1] ? 2 : 1);
        const char *tok = av[at > 0 ? at : 1];
        if (c == 'h') {
            fputs(usage, stdout);
            opts_help(stdout, t);
            return OPTS_HELP;
        }
        if (c == '?') {
            unknown(prog, t, optopt && optopt < 256 ? (char[]){'-', (char)optopt, 0} : tok);
            return fail(prog, usage, t);
        }
        if (c == ':') {
            const opt_spec *r = optopt >= 256 ? &t[optopt - 256] : NULL;
            for (const opt_spec *q = t; !r && q->name; q++)
                if (q->shortc == optopt) r = q;
            char l[72];
            fprintf(stderr, "%s: %s needs a value (%s)\n", prog, r ? label(r, l, sizeof l) : tok,
                    r && r->arg ? r->arg : "VALUE");
            return fail(prog, usage, t);
        }
        const opt_spec *r = NULL;
        if (c >= 256) {
            r = &t[c - 256];
            /* a long name is given whole: "--tri" is not "--trial" */
            size_t len = strcspn(tok + 2, "=");
            if (strncmp(tok, "--", 2) || len != strlen(r->name) || strncmp(tok + 2, r->name, len)) {
                unknown(prog, t, tok);
                return fail(prog, usage, t);
            }
        } else {
            for (const opt_spec *q = t; !r && q->name; q++)
                if (q->shortc == c) r = q;
        }
        /* an OPT_MAYBE's value as the next word, when that is no option */
        const char *v = optarg;
        if (r && r->type == OPT_MAYBE && !v && optind < ac && av[optind][0] != '-')
            v = av[optind++];
        if (!r || store(prog, r, v, out)) return fail(prog, usage, t);
    }
    if (rest) *rest = first - 1 + optind;
    return OPTS_OK;
}
