/* test_it_help — every bfworker command's --help lists exactly the options
 * its parser accepts (the lists or the opts.h table in cmd_specs,
 * worker/cmd/cmd.h), so help
 * and parser cannot drift apart; the help text is printed as it is written
 * (no "%%" of a format that is not one); every command has its section. */
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

static int accepted(const cmd_spec *c, const char *o) {
    return cmd_listed(c->vals, o) || cmd_listed(c->flags, o) || (c->opts && opts_find(c->opts, o));
}

static void expect_same_options(const cmd_spec *c, const char *text, const char *where) {
    char opts[64][32];
    int n = options_in(text, opts, 64);
    for (int i = 0; i < n; i++)
        cr_expect(accepted(c, opts[i]), "%s: %s prints %s, which its scanner refuses:\n%s", c->name,
                  where, opts[i], text);
    /* every option the parser accepts: its lists, or its table's rows */
    const char *names[64];
    char table[64][40];
    int k = 0;
    const char *const *lists[2] = {c->vals, c->flags};
    for (int l = 0; l < 2; l++)
        for (const char *const *o = lists[l]; o && *o && k < 64; o++) names[k++] = *o;
    for (const opt_spec *r = c->opts; r && r->name && k < 64; r++, k++) {
        snprintf(table[k], sizeof table[k], "--%s", r->name);
        names[k] = table[k];
    }
    for (int j = 0; j < k; j++) {
        int found = 0;
        for (int i = 0; i < n; i++) found |= strcmp(opts[i], names[j]) == 0;
        cr_expect(found, "%s: accepts %s but %s does not list it:\n%s", c->name, names[j], where,
                  text);
    }
}

Test(help, each_command_lists_the_options_it_accepts) {
    static char top[1 << 15], own[1 << 15], sec[1 << 13];
    cr_assert_eq(run(BF_BIN_DIR "/bfworker --help", top, sizeof top), 0);
    cr_expect_str_eq(top, cmd_usage);
    cr_expect(!strstr(top, "%%"), "a doubled %% in the help text:\n%s", top);
    cr_expect(strstr(top, "top-10% attention mass"), "%s", top);
    int commands = 0;
    for (const cmd_spec *c = cmd_specs; c->name; c++, commands++) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, BF_BIN_DIR "/bfworker %s --help", c->name);
        cr_expect_eq(run(cmd, own, sizeof own), 0, "%s", cmd);
        cr_expect(!strstr(own, "%%"), "%s:\n%s", cmd, own);
        section(top, c->name, sec, sizeof sec);
        if (strcmp(own, cmd_usage) == 0) {
            /* the command prints bfworker's help: its section lists its options */
            expect_same_options(c, sec, "its section of bfworker --help");
        } else {
            /* a usage of its own (dump, run): that lists them all, and the
             * section of bfworker --help names none it refuses */
            expect_same_options(c, own, "its --help");
            char opts[64][32];
            int n = options_in(sec, opts, 64);
            for (int i = 0; i < n; i++)
                cr_expect(accepted(c, opts[i]), "%s: bfworker --help names %s, refused", c->name,
                          opts[i]);
        }
        /* -h is the same */
        static char h[1 << 15];
        snprintf(cmd, sizeof cmd, BF_BIN_DIR "/bfworker %s -h", c->name);
        cr_expect_eq(run(cmd, h, sizeof h), 0, "%s", cmd);
        cr_expect_str_eq(h, own, "%s", cmd);
        /* and an option it does not know is refused (status 64) */
        snprintf(cmd, sizeof cmd, BF_BIN_DIR "/bfworker %s x.yaml --no-such-option 2>&1", c->name);
        cr_expect_eq(run(cmd, h, sizeof h), 64, "%s: %s", cmd, h);
    }
    cr_expect_eq(commands, 8, "%d commands", commands);
}
