/* test_bfctl_cli — the command-line rules of bfctl and bfd, for every
 * command (the list read from `bfctl --help`, so a new one is covered):
 *   - an unknown option is a usage error (exit 64) naming the valid ones;
 *   - the options `bfctl CMD --help` prints are exactly those its parser
 *     accepts (the "valid:" list of that error), and likewise the bfd.yaml
 *     keys `bfd --help` prints and those bfd_config accepts;
 *   - usage errors exit 64 (plot, export --tensorboard included);
 *   - `bfctl validate -` reads standard input, capped. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs the shell command cmd (stdout and stderr into out); returns its exit
 * status. */
static int sh(const char *cmd, char *out, size_t n) {
    char full[4096];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    cr_assert_not_null(p);
    size_t got = fread(out, 1, n - 1, p);
    out[got] = '\0';
    char sink[4096];
    while (fread(sink, 1, sizeof sink, p) > 0) {
    }
    int st = pclose(p);
    cr_assert(WIFEXITED(st), "%s did not exit normally", cmd);
    return WEXITSTATUS(st);
}

static int bfctl(const char *args, char *out, size_t n) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "BF_HOME=/nonexistent '%s/bfctl' %s", BF_BIN_DIR, args);
    return sh(cmd, out, n);
}

/* The set of option words ("-x", "--name") in text: each appended to set
 * (space-separated, each once). */
static void options_in(const char *text, char *set, size_t cap) {
    for (const char *p = text; *p; p++) {
        if (*p != '-' || (p > text && (isalnum((unsigned char)p[-1]) || p[-1] == '-' ||
                                       p[-1] == '/' || p[-1] == '.')))
            continue;
        const char *q = p + 1 + (p[1] == '-');
        if (!isalpha((unsigned char)*q)) continue;
        while (isalnum((unsigned char)*q) || *q == '-' || *q == '_') q++;
        char w[64];
        snprintf(w, sizeof w, " %.*s ", (int)(q - p), p);
        if (!strstr(set, w)) {
            size_t k = strlen(set);
            snprintf(set + k, cap - k, "%s", k ? w + 1 : w);
        }
        p = q - 1;
    }
}

/* Whether every word of a is in b. */
static int subset(const char *a, const char *b) {
    char w[64];
    for (const char *p = a; sscanf(p, "%63s", w) == 1;) {
        char pat[70];
        snprintf(pat, sizeof pat, " %s ", w);
        if (!strstr(b, pat)) return 0;
        p = strstr(p, w) + strlen(w);
    }
    return 1;
}

/* The commands `bfctl --help` lists (its "  NAME ..." lines), into names. */
static int commands(char names[32][32]) {
    static char out[16384];
    cr_assert_eq(bfctl("--help", out, sizeof out), 0);
    int n = 0;
    const char *p = strstr(out, "commands:\n");
    cr_assert_not_null(p);
    for (p = strchr(p, '\n') + 1; *p == ' ' && n < 32; p = strchr(p, '\n') + 1) {
        sscanf(p, " %31s", names[n]);
        n++;
    }
    return n;
}

Test(bfctl_cli, every_command_refuses_an_unknown_option_with_64) {
    char names[32][32], out[8192], args[128];
    int n = commands(names);
    cr_assert_geq(n, 17, "bfctl --help lists %d commands", n);
    const char *bogus[] = {"--bogus", "-Z", "--json-ish"};
    for (int i = 0; i < n; i++)
        for (int b = 0; b < 3; b++) {
            /* a target first, so only the option can be wrong */
            snprintf(args, sizeof args, "%s %s 1 %s", names[i],
                     !strcmp(names[i], "daemon") ? "status" : "", bogus[b]);
            int rc = bfctl(args, out, sizeof out);
            cr_assert_eq(rc, 64, "bfctl %s: exit %d: %s", args, rc, out);
            cr_assert(strstr(out, "unknown option") && strstr(out, bogus[b]), "bfctl %s: %s", args,
                      out);
        }
}

Test(bfctl_cli, help_lists_exactly_the_options_the_parser_accepts) {
    char names[32][32], out[16384], args[1100];
    int n = commands(names);
    for (int i = 0; i < n; i++) {
        snprintf(args, sizeof args, "%s --help", names[i]);
        cr_assert_eq(bfctl(args, out, sizeof out), 0, "bfctl %s", args);
        char helped[1024] = "";
        options_in(out, helped, sizeof helped);
        snprintf(args, sizeof args, "%s --bogus", names[i]);
        cr_assert_eq(bfctl(args, out, sizeof out), 64);
        const char *v = strstr(out, "(valid:");
        cr_assert_not_null(v, "bfctl %s: %s", args, out);
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)(strchr(v, ')') - v), v);
        char accepted[1024] = "";
        options_in(line, accepted, sizeof accepted);
        /* --help and -h are accepted everywhere and need not be listed */
        char h[1100], a[1100];
        snprintf(h, sizeof h, " %s --help -h ", helped);
        snprintf(a, sizeof a, " %s --help -h ", accepted);
        cr_assert(subset(helped, a) && subset(accepted, h),
                  "bfctl %s: --help shows [%s], the parser accepts [%s]", names[i], helped,
                  accepted);
    }
}

Test(bfctl_cli, usage_errors_exit_64_everywhere) {
    const char *cases[] = {"plot",
                           "plot 1 --size 5x5",
                           "plot 1 --x sideways",
                           "plot 1 --metric",
                           "export 1 --tensorboard",
                           "export --tensorboard /tmp",
                           "export 1",
                           "submit",
                           "submit x.yaml --set",
                           "best 1 -n",
                           "show",
                           "tail",
                           "logs 1",
                           "stop 1",
                           "resume 1",
                           "wait t1",
                           "validate",
                           "validate - -",
                           "expand",
                           "nosuchcommand"};
    char out[8192];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int rc = bfctl(cases[i], out, sizeof out);
        cr_assert_eq(rc, 64, "bfctl %s: exit %d: %s", cases[i], rc, out);
    }
}

Test(bfctl_cli, validate_reads_standard_input_with_a_cap) {
    char out[8192], cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s/bfctl' validate - < '%s/examples/demo_sweep.yaml'", BF_BIN_DIR,
             BF_SOURCE_DIR);
    cr_assert_eq(sh(cmd, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "ok: job 'demo-budget'"), "%s", out);
    snprintf(cmd, sizeof cmd, "printf 'name: x\\npipeline: nope\\n' | '%s/bfctl' validate -",
             BF_BIN_DIR);
    cr_assert_eq(sh(cmd, out, sizeof out), 1, "%s", out);
    cr_assert(strstr(out, "<stdin>:2:"), "the error names standard input and the line: %s", out);
    snprintf(cmd, sizeof cmd, "head -c 1048577 /dev/zero | tr '\\0' '#' | '%s/bfctl' validate -",
             BF_BIN_DIR);
    cr_assert_eq(sh(cmd, out, sizeof out), 1, "%s", out);
    cr_assert(strstr(out, "over 1048576 bytes"), "%s", out);
}

/* bfd --help names every bfd.yaml key bfd_config accepts, and no other. */
Test(bfctl_cli, bfd_help_lists_every_bfd_yaml_key) {
    char out[16384], cmd[2048], dir[] = "/tmp/bf-cli-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    snprintf(cmd, sizeof cmd, "'%s/bfd' --help", BF_BIN_DIR);
    cr_assert_eq(sh(cmd, out, sizeof out), 0);
    const char *a = strstr(out, "bfd.yaml (every key optional):"), *b = strstr(out, "Stop with");
    cr_assert(a && b);
    char helped[2048] = " ";
    for (const char *p = a + 30; p < b; p++) {
        if (!islower((unsigned char)*p) || isalnum((unsigned char)p[-1]) || p[-1] == '_' ||
            p[-1] == '(')
            continue;
        const char *q = p;
        while (islower((unsigned char)*q) || *q == '_') q++;
        if (*q == ':') {
            char w[64];
            snprintf(w, sizeof w, "%.*s ", (int)(q - p), p);
            char pat[70];
            snprintf(pat, sizeof pat, " %s", w);
            if (!strstr(helped, pat)) strncat(helped, w, sizeof helped - strlen(helped) - 1);
        }
        p = q;
    }
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/h && chmod 700 %s/h && echo 'nosuchkey: 1' > %s/h/bfd.yaml && "
             "'%s/bfd' --home %s/h --quiet",
             dir, dir, dir, BF_BIN_DIR, dir);
    cr_assert_neq(sh(cmd, out, sizeof out), 0);
    const char *v = strstr(out, "(valid: ");
    cr_assert_not_null(v, "%s", out);
    char accepted[2048] = " ";
    for (const char *p = v + 8; *p && *p != ')';) {
        size_t k = strcspn(p, ",)");
        char w[64];
        snprintf(w, sizeof w, "%.*s ", (int)k, p);
        strncat(accepted, w, sizeof accepted - strlen(accepted) - 1);
        p += k;
        while (*p == ',' || *p == ' ') p++;
    }
    cr_assert(subset(helped, accepted) && subset(accepted, helped),
              "bfd --help lists [%s], bfd.yaml accepts [%s]", helped, accepted);
    /* the rule for every key: given twice is refused naming both lines; a
     * list or a mapping where one value is expected names what it got */
    char w[64];
    for (const char *p = accepted; sscanf(p, "%63s", w) == 1; p = strstr(p, w) + strlen(w)) {
        const char *bodies[3][2] = {{"%s: 1\nslots: 1\n%s: 2\n", "given twice (first at line 1)"},
                                    {"%s: [1, 2]\n", "got a list"},
                                    {"%s: {a: 1}\n", "got a mapping"}};
        for (int k = 0; k < 3; k++) {
            if (k == 1 && !strcmp(w, "gpus")) continue; /* a list of indices */
            char body[256], yp[300];
            snprintf(body, sizeof body, bodies[k][0], w, w);
            snprintf(yp, sizeof yp, "%s/h/bfd.yaml", dir);
            FILE *f = fopen(yp, "w");
            cr_assert(f);
            fputs(body, f);
            fclose(f);
            snprintf(cmd, sizeof cmd, "'%s/bfd' --home %s/h --quiet", BF_BIN_DIR, dir);
            cr_assert_neq(sh(cmd, out, sizeof out), 0, "bfd.yaml '%s' was accepted", body);
            cr_assert(strstr(out, bodies[k][1]), "bfd.yaml '%s': %s", body, out);
        }
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

/* A sweep name that is not ASCII letters, digits and ._-: a NUL
 * ("\0" in a quoted scalar) is refused, not cut at; a character outside
 * ASCII is named whole with its code point; ESC and a newline are shown
 * as escapes, never sent raw to the terminal. */
Test(bfctl_cli, bad_names_are_refused_and_shown_escaped) {
    char out[8192], cmd[2048];
    snprintf(cmd, sizeof cmd,
             "printf 'name: \"a\\\\0b\"\\npipeline: budgetformer\\n' | '%s/bfctl' validate -",
             BF_BIN_DIR);
    cr_assert_eq(sh(cmd, out, sizeof out), 1, "a NUL in the name was accepted: %s", out);
    cr_assert(strstr(out, "<stdin>:1:7: name: 'a\\x00b' has the byte \\x00"), "%s", out);
    snprintf(cmd, sizeof cmd,
             "printf 'name: \"caf\\\\u00e9\\\\e[31m\\\\nX\"\\npipeline: budgetformer\\n' | "
             "'%s/bfctl' validate -",
             BF_BIN_DIR);
    cr_assert_eq(sh(cmd, out, sizeof out), 1, "%s", out);
    cr_assert(strstr(out, "name: 'caf\xc3\xa9\\e[31m\\nX' has the character '\xc3\xa9' (U+00E9)"),
              "%s", out);
    cr_assert_null(strchr(out, 27), "ESC reached the terminal: %s", out);
}

/* `bfctl submit` of an empty file says what `bfctl validate` says (before
 * it needs bfd), not the protocol's size rule. */
Test(bfctl_cli, submit_of_an_empty_file_says_what_validate_says) {
    char out[8192], v[8192], path[] = "/tmp/bf-cli-empty-XXXXXX", args[128];
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    snprintf(args, sizeof args, "submit %s", path);
    int rc = bfctl(args, out, sizeof out);
    snprintf(args, sizeof args, "validate %s", path);
    int vrc = bfctl(args, v, sizeof v);
    unlink(path);
    cr_assert_eq(rc, 1, "%s", out);
    cr_assert_eq(vrc, 1, "%s", v);
    cr_assert(strstr(out, ":1:1: empty sweep file"), "%s", out);
    cr_assert_str_eq(out, v);
}
