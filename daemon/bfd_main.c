/* bfd_main.c — the coordinator daemon's command line:
 *   bfd [--home DIR] [--daemonize] [--tcp HOST:PORT] [--quiet]
 *   bfd keygen [--home DIR] [--client NAME]
 * It reads the options and bfd.yaml, takes the home lock, detaches when
 * asked and calls bfd_run; keygen writes CURVE keys. It serves nothing
 * itself: the loop (loop.c) does. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "daemon/bfd.h"
#include "common/errbuf.h"
#include "common/opts.h"

static const char *USAGE =
    "usage: bfd [options]            run the coordinator (foreground, log on stderr)\n"
    "       bfd keygen [--client NAME] [--home DIR]\n"
    "\n"
    "options:\n";

/* What bfd is told on its command line (bfd_opts_table, keygen_opts). */
typedef struct bfd_args {
    const char *home, *tcp, *client, *http;
    int daemonize, quiet;
} bfd_args;

#define BA(f) OPT_AT(bfd_args, f)
static const opt_spec bfd_opts_table[] = {
    {"home", 0, OPT_STR, 0, 0, BA(home), "DIR",
     "state folder (default $BF_HOME, else ~/.bf; created 0700): the SQLite store bf.db, "
     "sockets ctl.sock worker.sock pub.sock, logs/, trials/, bfd.yaml (inventory), bfd.lock"},
    {"daemonize", 0, OPT_FLAG, 0, 0, BA(daemonize), NULL, "detach; log to DIR/bfd.log"},
    {"tcp", 0, OPT_STR, 0, 0, BA(tcp), "HOST:PORT",
     "also listen on TCP (control PORT, workers PORT+1, pub PORT+2), CURVE only: needs "
     "DIR/curve/server.key (bfd keygen); clients' public keys in DIR/curve/clients/*.pub"},
    {"http", 0, OPT_STR, 0, 0, BA(http), "ADDR:PORT",
     "serve the dashboard there (or off), over bfd.yaml's http (docs/http.md)"},
    {"quiet", 0, OPT_FLAG, 0, 0, BA(quiet), NULL, "no log lines"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

static const char *KEYGEN_USAGE = "usage: bfd keygen [--client NAME] [--home DIR]\n"
                                  "\n"
                                  "options:\n";

static const opt_spec keygen_opts[] = {
    {"home", 0, OPT_STR, 0, 0, BA(home), "DIR", "state folder, as for bfd"},
    {"client", 0, OPT_STR, 0, 0, BA(client), "NAME", "a client's keys, not the server's"},
    {"quiet", 0, OPT_FLAG, 0, 0, BA(quiet), NULL, "accepted, as for bfd"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

/* After the options in bfd --help. */
static const char *HELP_KEYGEN =
    "\n"
    "keygen writes DIR/curve/server.{key,pub}; with --client NAME it writes\n"
    "DIR/curve/NAME.{key,pub} and allows NAME.pub (copied to DIR/curve/clients/).\n"
    "\n";

/* After the table of bfd.yaml keys (bfd_config_help). */
static const char *HELP_TAIL =
    "\n"
    "Stop with SIGTERM or Ctrl-C: running trials keep running and reattach when bfd\n"
    "starts again. The protocol is in docs/protocol.md.\n";

static int resolve_home(const char *arg, char *out, size_t len) {
    const char *h = arg ? arg : getenv("BF_HOME");
    if (h && *h) {
        snprintf(out, len, "%s", h);
    } else {
        const char *home = getenv("HOME");
        if (!home || !*home) {
            fprintf(stderr, "bfd: neither --home, BF_HOME nor HOME is set\n");
            return -1;
        }
        snprintf(out, len, "%s/.bf", home);
    }
    if (out[0] != '/') {
        char cwd[512];
        if (!getcwd(cwd, sizeof cwd)) return -1;
        size_t lc = strlen(cwd), lo = strlen(out);
        if (lc + 1 + lo + 1 > len) {
            fprintf(stderr, "bfd: home path too long\n");
            return -1;
        }
        memmove(out + lc + 1, out, lo + 1);
        memcpy(out, cwd, lc);
        out[lc] = '/';
    }
    if (mkdir(out, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "bfd: mkdir %s: %s\n", out, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (stat(out, &sb) == 0 && (sb.st_mode & 077)) {
        if (chmod(out, 0700) != 0) {
            fprintf(stderr, "bfd: %s is open to other users and chmod 0700 failed: %s\n", out,
                    strerror(errno));
            return -1;
        }
    }
    return 0;
}

static int write_key(const char *path, const char *key, mode_t mode) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    if (fd < 0) {
        fprintf(stderr, "bfd keygen: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    char line[48];
    int n = snprintf(line, sizeof line, "%s\n", key);
    int ok = write(fd, line, (size_t)n) == n;
    close(fd);
    if (!ok) fprintf(stderr, "bfd keygen: short write to %s\n", path);
    return ok ? 0 : -1;
}

static int keygen(const char *home, const char *client) {
    char dir[1100], p[1300];
    snprintf(dir, sizeof dir, "%s/curve", home);
    mkdir(dir, 0700);
    snprintf(p, sizeof p, "%s/clients", dir);
    mkdir(p, 0700);
    char pub[41], sec[41];
    if (zmq_curve_keypair(pub, sec) != 0) {
        fprintf(stderr, "bfd keygen: zmq_curve_keypair: %s (is libzmq built with libsodium?)\n",
                zmq_strerror(zmq_errno()));
        return 1;
    }
    const char *name = client ? client : "server";
    for (const char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '-' || *c == '_' || *c == '.') ||
            strlen(name) > 64) {
            fprintf(stderr, "bfd keygen: NAME must be 1-64 of letters, digits, - _ .\n");
            return BF_EX_USAGE;
        }
    snprintf(p, sizeof p, "%s/%s.key", dir, name);
    if (write_key(p, sec, 0600)) return 1;
    snprintf(p, sizeof p, "%s/%s.pub", dir, name);
    if (write_key(p, pub, 0644)) return 1;
    if (client) {
        snprintf(p, sizeof p, "%s/clients/%s.pub", dir, name);
        if (write_key(p, pub, 0644)) return 1;
    }
    printf("%s/%s.key and %s.pub written%s\n", dir, name, name,
           client ? " (allowed: copied to clients/)" : "");
    return 0;
}

int main(int argc, char **argv) {
    bfd_args a = {0};
    int do_keygen = argc > 1 && !strcmp(argv[1], "keygen"), rest = argc;
    int prc = do_keygen
                  ? opts_parse("bfd keygen", KEYGEN_USAGE, keygen_opts, argc, argv, 2, &a, &rest)
                  : opts_parse("bfd", USAGE, bfd_opts_table, argc, argv, 1, &a, &rest);
    if (prc == OPTS_HELP && !do_keygen) {
        fputs(HELP_KEYGEN, stdout);
        bfd_config_help(stdout);
        fputs(HELP_TAIL, stdout);
    }
    if (prc != OPTS_OK) return prc == OPTS_HELP ? 0 : BF_EX_USAGE;
    if (rest < argc) {
        fprintf(stderr, "bfd: unexpected argument '%s' (bfd --help)\n", argv[rest]);
        return BF_EX_USAGE;
    }
    const char *home_arg = a.home, *tcp = a.tcp, *client = a.client;
    int daemonize = a.daemonize, quiet = a.quiet;
    bfd_opts o;
    memset(&o, 0, sizeof o);
    o.quiet = quiet;
    if (resolve_home(home_arg, o.home, sizeof o.home)) return 1;
    if (do_keygen) return keygen(o.home, client);
    if (tcp) {
        if (strlen(tcp) >= sizeof o.tcp) {
            fprintf(stderr, "bfd: --tcp value too long\n");
            return BF_EX_USAGE;
        }
        snprintf(o.tcp, sizeof o.tcp, "%s", tcp);
    }
    char cfgp[1200], err[2048];
    snprintf(cfgp, sizeof cfgp, "%s/bfd.yaml", o.home);
    bfd_config c;
    if (bfd_config_load(cfgp, &c, err, sizeof err)) {
        fprintf(stderr, "bfd: %s\n", err);
        return 1;
    }
    if (a.http && bfd_config_set(&c, "http", a.http, err, sizeof err)) {
        fprintf(stderr, "bfd: --http: %s\n", err);
        return BF_EX_USAGE;
    }
    /* one bfd per home: the lock is released by the kernel when bfd dies */
    char lockp[1200];
    snprintf(lockp, sizeof lockp, "%s/bfd.lock", o.home);
    int lfd = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lfd < 0) {
        fprintf(stderr, "bfd: cannot open %s: %s\n", lockp, strerror(errno));
        return 1;
    }
    if (flock(lfd, LOCK_EX | LOCK_NB) != 0) {
        char pid[32] = "?";
        ssize_t n = pread(lfd, pid, sizeof pid - 1, 0);
        if (n > 0) pid[n] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        fprintf(stderr, "bfd: another bfd (pid %s) is serving %s\n", pid, o.home);
        return 1;
    }
    if (daemonize) {
        char logp[1200];
        snprintf(logp, sizeof logp, "%s/bfd.log", o.home);
        pid_t p = fork();
        if (p < 0) {
            perror("bfd: fork");
            return 1;
        }
        if (p > 0) {
            printf("bfd: started in the background (pid %d), log %s\n", (int)p, logp);
            return 0;
        }
        setsid();
        int fd = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0600);
        int nul = open("/dev/null", O_RDONLY);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        if (nul >= 0) {
            dup2(nul, 0);
            close(nul);
        }
    }
    char pidline[32];
    int pl = snprintf(pidline, sizeof pidline, "%d\n", (int)getpid());
    if (ftruncate(lfd, 0) != 0 || pwrite(lfd, pidline, (size_t)pl, 0) != pl)
        fprintf(stderr, "bfd: cannot write %s\n", lockp);
    if (bfd_run(&o, &c, err, sizeof err)) {
        fprintf(stderr, "bfd: %s\n", err);
        return 1;
    }
    return 0;
}
