/* test_it_help — every bfworker command's --help lists exactly the options
 * its parser accepts (its opts.h table in cmd_specs, worker/cmd/cmd.h), and
 * names no other in its text, so help and parser cannot drift apart; the
 * help text is printed as it is written (no "%%" of a format that is not
 * one); every command has its line in bfworker --help; a bad command line
 * of each command says where and what is valid, with status 64. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "worker/cmd/cmd.h"

/* stdout of cmd into out; its exit status */
static int run(const char *cmd, char *out, size_t n) {
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p, "%s", cmd);
    size_t got = fread(out, 1, n - 1, p);
    out[got] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The section of the help text of command name: from its line "  NAME ..."
 * to the next command's line (two spaces, then a letter) or a blank line. */
static void section(const char *help, const char *name, char *out, size_t n) {
    char head[64];
    snprintf(head, sizeof head, "\n  %s ", name);
    const char *a = strstr(help, head);
    cr_assert_not_null(a, "no section for '%s' in:\n%s", name, help);
    a++;
    const char *b = a + 1;
    for (; (b = strchr(b, '\n')); b++)
        if (b[1] == '\n' || (b[1] == ' ' && b[2] == ' ' && b[3] >= 'a' && b[3] <= 'z')) break;
    size_t len = b ? (size_t)(b - a) : strlen(a);
    snprintf(out, n, "%.*s", (int)len, a);
}

/* Every "--word" in text (not --help), each once, into opts; returns how many. */
static int options_in(const char *text, char opts[][32], int max) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, "--")); p += 2) {
        if (p > text && p[-1] != ' ' && p[-1] != '[' && p[-1] != '(') continue;
        size_t len = 2;
        while ((p[len] >= 'a' && p[len] <= 'z') || p[len] == '-') len++;
        if (len == 2) continue;
        char o[32];
        snprintf(o, sizeof o, "%.*s", (int)len, p);
        if (strcmp(o, "--help") == 0) continue;
        int seen = 0;
        for (int i = 0; i < n; i++) seen |= strcmp(opts[i], o) == 0;
        if (!seen && n < max) snprintf(opts[n++], 32, "%s", o);
    }
    return n;
}

static int accepted(const cmd_spec *c, const char *o) { return opts_find(c->opts, o) != NULL; }

/* Every option text names is one c accepts, and every row of c's table
 * that has help is named in text. */
static void expect_same_options(const cmd_spec *c, const char *text, const char *where) {
    char opts[64][32];
    int n = options_in(text, opts, 64);
    for (int i = 0; i < n; i++)
        cr_expect(accepted(c, opts[i]), "%s: %s prints %s, which its parser refuses:\n%s", c->name,
                  where, opts[i], text);
    for (const opt_spec *r = c->opts; r->name; r++) {
        if (!r->help) continue;
        char name[40];
        snprintf(name, sizeof name, "--%s", r->name);
        int found = 0;
        for (int i = 0; i < n; i++) found |= strcmp(opts[i], name) == 0;
        cr_expect(found, "%s: accepts %s but %s does not list it:\n%s", c->name, name, where, text);
    }
}

Test(help, each_command_lists_the_options_it_accepts) {
    static char top[1 << 15], own[1 << 15], sec[1 << 13];
    cr_assert_eq(run(BF_BIN_DIR "/bfworker --help", top, sizeof top), 0);
    cr_expect(!strstr(top, "%%"), "a doubled %% in the help text:\n%s", top);
    int commands = 0;
    for (const cmd_spec *c = cmd_specs; c->name; c++, commands++) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, BF_BIN_DIR "/bfworker %s --help", c->name);
        cr_expect_eq(run(cmd, own, sizeof own), 0, "%s", cmd);
        char head[64];
        snprintf(head, sizeof head, "usage: bfworker %s ", c->name);
        cr_expect(!strncmp(own, head, strlen(head)), "%s:\n%s", cmd, own);
        cr_expect(!strstr(own, "%%"), "%s:\n%s", cmd, own);
        expect_same_options(c, own, "its --help");
        /* bfworker --help has a line for it that names no option it refuses */
        section(top, c->name, sec, sizeof sec);
        char opts[64][32];
        int n = options_in(sec, opts, 64);
        for (int i = 0; i < n; i++)
            cr_expect(accepted(c, opts[i]), "%s: bfworker --help names %s, refused", c->name,
                      opts[i]);
        if (!strcmp(c->name, "profile")) cr_expect(strstr(own, "top-10%"), "%s", own);
        /* -h is the same */
        static char h[1 << 15];
        snprintf(cmd, sizeof cmd, BF_BIN_DIR "/bfworker %s -h", c->name);
        cr_expect_eq(run(cmd, h, sizeof h), 0, "%s", cmd);
        cr_expect_str_eq(h, own, "%s", cmd);
        /* and an option it does not know is refused (status 64), naming
         * the ones it knows */
        snprintf(cmd, sizeof cmd, BF_BIN_DIR "/bfworker %s x.yaml --no-such-option 2>&1", c->name);
        cr_expect_eq(run(cmd, h, sizeof h), 64, "%s: %s", cmd, h);
        cr_expect(strstr(h, "unknown option '--no-such-option'") && strstr(h, "(valid: --"),
                  "%s: %s", cmd, h);
    }
    cr_expect_eq(commands, 9, "%d commands", commands);
}

/* stdout and stderr of cmd into out; its exit status */
static int run_all(const char *cmd, char *out, size_t n) {
    char full[2048];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    return run(full, out, n);
}

/* A bad command line of each command is refused with status 64 and a
 * message that says where (the option or the argument) and what is valid,
 * read by the option table before anything is opened: a bad value is said
 * even when the config does not exist. Arguments that are not options may
 * come before the options. */
Test(help, bad_lines_say_where_and_what_is_valid) {
    static const struct {
        const char *args, *says;
    } bad[] = {
        {"train x.yaml --outt d", "unknown option '--outt'; did you mean '--out'?"},
        {"train x.yaml --comm-timeout soon", "--comm-timeout takes a number in [0, 1e+07], got "
                                             "'soon'"},
        {"eval ck --split tset", "--split takes one of val, test; got 'tset'"},
        {"eval", "bfworker eval: missing CHECKPOINT"},
        {"profile r --samples 0", "--samples takes an integer in [1, 4096], got '0'"},
        {"params x.yaml --set", "--set needs a value (KEY=VALUE)"},
        {"params a.yaml b.yaml", "bfworker params: unexpected argument 'b.yaml'"},
        {"generate ck --prompt hi --tokens many", "--tokens takes an integer in [0, 100000], got "
                                                  "'many'"},
        {"generate ck --prompt hi --top-k -1", "--top-k takes an integer in [0, 1048576]"},
        {"dump x.yaml --out d --batch 0", "--batch takes an integer in [1, 4096], got '0'"},
        {"dump x.yaml --out d --stage distil", "--stage takes one of train, distill, finetune; "
                                               "got 'distil'"},
        {"serve --connect ipc:///tmp/x --slots 0", "--slots takes an integer in [1, 256], got "
                                                   "'0'"},
        {"serve --connect ipc:///tmp/x --grace", "--grace needs a value (S)"},
        {"run --trial 0", "--trial takes an integer in [1, "},
    };
    static char out[1 << 15];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, BF_BIN_DIR "/bfworker %s", bad[i].args);
        cr_expect_eq(run_all(cmd, out, sizeof out), 64, "%s:\n%s", cmd, out);
        cr_expect(strstr(out, bad[i].says), "%s: wanted \"%s\" in:\n%s", cmd, bad[i].says, out);
    }
    /* the config after its options: the same as before them */
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             BF_BIN_DIR "/bfworker params --set model.layers=3 " BF_SOURCE_DIR
                        "/tests/data/golden/lm_dense.yaml");
    cr_expect_eq(run_all(cmd, out, sizeof out), 0, "%s:\n%s", cmd, out);
    cr_expect(strstr(out, "blocks.2.") && !strstr(out, "blocks.3."), "%s:\n%s", cmd, out);
}
