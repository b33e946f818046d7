/* test_opts — the option-table parser (common/opts.h) on argv written by
 * hand: a value whose word may be left out (OPT_MAYBE, bfworker train's
 * --resume [DIR]) in each of its forms and beside arguments that are not
 * options; a choice among named words (OPT_CHOICE) and the error that lists
 * them; a number out of range and an unknown option named with what is
 * valid, exit OPTS_ERROR. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/opts.h"

typedef struct args {
    const char *resume, *out;
    int split, quiet, n;
} args;

#define A(f) OPT_AT(args, f)
static const opt_spec table[] = {
    {"resume", 0, OPT_MAYBE, 0, 0, A(resume), "DIR", "continue (from DIR)"},
    {"out", 'o', OPT_STR, 0, 0, A(out), "DIR", "where"},
    {"split", 0, OPT_CHOICE, 0, 0, A(split), "val|test", "which split"},
    {"quiet", 0, OPT_FLAG, 0, 0, A(quiet), NULL, "no progress"},
    {"n", 0, OPT_INT, 1, 9, A(n), "N", "how many"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

/* What opts_parse wrote to stderr while parsing "prog WORDS..." (words
 * separated by spaces) into a; its status in *rc, the first argument that
 * is not an option in *rest; argv as permuted in av. */
static char *parse(const char *words, args *a, int *rc, int *rest, char **av) {
    static char buf[512], err[4096];
    snprintf(buf, sizeof buf, "prog %s", words);
    int ac = 0;
    for (char *w = strtok(buf, " "); w && ac < 31; w = strtok(NULL, " ")) av[ac++] = w;
    av[ac] = NULL;
    *a = (args){.split = -1};
    fflush(stderr);
    FILE *tmp = tmpfile();
    cr_assert_not_null(tmp);
    int saved = dup(2);
    dup2(fileno(tmp), 2);
    *rc = opts_parse("prog", "usage: prog\n", table, ac, av, 1, a, rest);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(err, 1, sizeof err - 1, tmp);
    err[n] = '\0';
    fclose(tmp);
    return err;
}

Test(opts, maybe_takes_the_next_word_unless_it_is_an_option) {
    args a;
    int rc, rest;
    char *av[32];
    parse("cfg.yaml --resume runs/x --quiet", &a, &rc, &rest, av);
    cr_assert_eq(rc, OPTS_OK);
    cr_expect_str_eq(a.resume, "runs/x");
    cr_expect_eq(a.quiet, 1);
    cr_assert_eq(rest, 4); /* cfg.yaml moved after the options */
    cr_expect_str_eq(av[rest], "cfg.yaml");
    parse("cfg.yaml --resume --quiet", &a, &rc, &rest, av);
    cr_assert_eq(rc, OPTS_OK);
    cr_expect_str_eq(a.resume, "");
    cr_expect_eq(a.quiet, 1);
    cr_expect_str_eq(av[rest], "cfg.yaml");
    parse("cfg.yaml --resume", &a, &rc, &rest, av);
    cr_assert_eq(rc, OPTS_OK);
    cr_expect_str_eq(a.resume, "");
    parse("--resume=runs/y cfg.yaml", &a, &rc, &rest, av);
    cr_assert_eq(rc, OPTS_OK);
    cr_expect_str_eq(a.resume, "runs/y");
    cr_expect_str_eq(av[rest], "cfg.yaml");
    cr_expect_eq(rest, 2);
    /* after an argument that is not an option, both moved in their order */
    parse("a --resume d b --out o", &a, &rc, &rest, av);
    cr_assert_eq(rc, OPTS_OK);
    cr_expect_str_eq(a.resume, "d");
    cr_expect_str_eq(a.out, "o");
    cr_assert_eq(rest, 5);
    cr_expect_str_eq(av[5], "a");
    cr_expect_str_eq(av[6], "b");
    /* and the help shows the value as optional */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    opts_help(f, table);
    fclose(f);
    cr_expect(strstr(text, "--resume [DIR]"), "%s", text);
    cr_expect(strstr(text, "--split val|test"), "%s", text);
    free(text);
}

Test(opts, choice_is_an_index_and_a_wrong_word_lists_the_valid_ones) {
    args a;
    int rc, rest;
    char *av[32];
    parse("--split test", &a, &rc, &rest, av);
    cr_assert_eq(rc, OPTS_OK);
    cr_expect_eq(a.split, 1);
    parse("--split=val", &a, &rc, &rest, av);
    cr_assert_eq(rc, OPTS_OK);
    cr_expect_eq(a.split, 0);
    char *err = parse("--split tes", &a, &rc, &rest, av);
    cr_expect_eq(rc, OPTS_ERROR);
    cr_expect(strstr(err, "prog: --split takes one of val, test; got 'tes'"), "%s", err);
    err = parse("--split valx", &a, &rc, &rest, av);
    cr_expect_eq(rc, OPTS_ERROR);
    cr_expect(strstr(err, "got 'valx'"), "%s", err);
}

Test(opts, bad_numbers_and_unknown_options_say_what_is_valid) {
    args a;
    int rc, rest;
    char *av[32];
    char *err = parse("--n 10", &a, &rc, &rest, av);
    cr_expect_eq(rc, OPTS_ERROR);
    cr_expect(strstr(err, "prog: --n takes an integer in [1, 9], got '10'"), "%s", err);
    err = parse("--n", &a, &rc, &rest, av);
    cr_expect_eq(rc, OPTS_ERROR);
    cr_expect(strstr(err, "prog: --n needs a value (N)"), "%s", err);
    err = parse("--qiet", &a, &rc, &rest, av);
    cr_expect_eq(rc, OPTS_ERROR);
    cr_expect(strstr(err, "unknown option '--qiet'; did you mean '--quiet'?"), "%s", err);
    cr_expect(strstr(err, "valid: --resume, --out, -o, --split, --quiet, --n"), "%s", err);
}
