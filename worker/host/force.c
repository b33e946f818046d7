/* force.c — see force.h. */
#include "worker/host/force.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "worker/io/ckpt.h"

/* BF_TEST_CRASH_AT=POINT: the process kills itself (SIGKILL, nothing
 * cleaned up) at that point of the swap; tests/test_it_force.c uses it to
 * show each state a crash can leave is resolved. Points: swap-begin (the
 * new checkpoint whole, nothing moved), swap-old (one old file moved out),
 * swap-mid (the old run out, nothing of the new one in), swap-new (one new
 * file moved in), swap-end (the new run in, .force-old not yet removed). */
static void crash_point(const char *point) {
    const char *at = getenv("BF_TEST_CRASH_AT");
    if (at && strcmp(at, point) == 0) raise(SIGKILL);
}

int force_is_run_file(const char *name) {
    static const char *const files[] = {"metrics.jsonl",
                                        CKPT_NAME,
                                        CKPT_MODEL_FILE,
                                        CKPT_OPTIM_FILE,
                                        CKPT_STATE_FILE,
                                        "." CKPT_MODEL_FILE ".tmp",
                                        "." CKPT_OPTIM_FILE ".tmp",
                                        "config.yaml",
                                        "tokenizer.model",
                                        "test_samples.tsv",
                                        "profile.json"};
    for (size_t k = 0; k < sizeof files / sizeof *files; k++)
        if (strcmp(name, files[k]) == 0) return 1;
    return strncmp(name, "events.out.tfevents.", 20) == 0;
}

static int is_dir(const char *p) {
    struct stat st;
    return lstat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The names of the plain files in dir that pass keep (NULL: all), malloc'd
 * (the caller frees with free_names); *n of them. Read before anything is
 * moved: a folder changed while it is read may list a name twice or not at
 * all. 0 or -1 with a message. */
static int list_files(const char *dir, int (*keep)(const char *), char ***names, int *n, char *err,
                      size_t errlen) {
    *names = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "--force: cannot open %s: %s", dir, strerror(errno));
        return -1;
    }
    int cap = 0, rc = 0;
    struct dirent *e;
    char p[4400];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (keep && !keep(e->d_name)) continue;
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (lstat(p, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            char **grown = realloc(*names, (size_t)cap * sizeof *grown);
            if (!grown) {
                rc = -1;
                break;
            }
            *names = grown;
        }
        if (!((*names)[*n] = strdup(e->d_name))) {
            rc = -1;
            break;
        }
        (*n)++;
    }
    closedir(d);
    if (rc) snprintf(err, errlen, "--force: out of memory listing %s", dir);
    return rc;
}

static void free_names(char **names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

/* Renames the files of `from` that pass keep into `to` (an existing folder;
 * a file of the same name there is replaced); crash_point(point) after the
 * first. 0 or -1 with a message. */
static int move_files(const char *from, const char *to, int (*keep)(const char *),
                      const char *point, char *err, size_t errlen) {
    char **names;
    int n;
    if (list_files(from, keep, &names, &n, err, errlen)) return -1;
    char a[4400], b[4400];
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        snprintf(a, sizeof a, "%s/%s", from, names[i]);
        snprintf(b, sizeof b, "%s/%s", to, names[i]);
        if (rename(a, b) != 0) {
            snprintf(err, errlen, "--force: cannot move %s to %s: %s", a, b, strerror(errno));
            rc = -1;
        } else if (i == 0 && point) {
            crash_point(point);
        }
    }
    free_names(names, n);
    return rc;
}

/* Removes folder p and the files in it (the staging folders are flat);
 * missing is fine. 0 or -1 with a message. */
static int remove_flat(const char *p, char *err, size_t errlen) {
    if (!is_dir(p)) return 0;
    char **names;
    int n;
    if (list_files(p, NULL, &names, &n, err, errlen)) return -1;
    char f[4400];
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        snprintf(f, sizeof f, "%s/%s", p, names[i]);
        if (unlink(f) != 0 && errno != ENOENT) {
            snprintf(err, errlen, "--force: cannot remove %s: %s", f, strerror(errno));
            rc = -1;
        }
    }
    free_names(names, n);
    if (rc == 0 && rmdir(p) != 0 && errno != ENOENT) {
        snprintf(err, errlen, "--force: cannot remove %s: %s", p, strerror(errno));
        rc = -1;
    }
    return rc;
}

/* fsync of folder p: the renames into and out of it are durable once this
 * returns 0; -1 with a message (the swap stops there, the old run kept). */
static int sync_dir(const char *p, char *err, size_t errlen) {
    int fd = open(p, O_RDONLY | O_DIRECTORY);
    int rc = fd < 0 ? -1 : fsync(fd);
    int e = errno;
    if (fd >= 0) close(fd);
    if (rc == 0) return 0;
    snprintf(err, errlen, "--force: cannot sync %s: %s", p, strerror(e));
    return -1;
}

typedef struct paths {
    char fresh[4200], old[4200], part[4200];
} paths;

static void paths_of(const char *dir, paths *p) {
    snprintf(p->fresh, sizeof p->fresh, "%s/" FORCE_NEW, dir);
    snprintf(p->old, sizeof p->old, "%s/" FORCE_OLD, dir);
    snprintf(p->part, sizeof p->part, "%s/" FORCE_OLD_PART, dir);
}

/* Steps 2-4 from .force-old.part with the old run out of dir (the rest of
 * it is moved out first: a crash may have stopped step 1 half way). */
static int finish(const char *dir, const paths *p, int from_part, char *err, size_t errlen) {
    if (from_part) {
        if (move_files(dir, p->part, force_is_run_file, "swap-old", err, errlen)) return -1;
        if (rename(p->part, p->old) != 0) {
            snprintf(err, errlen, "--force: cannot rename %s to %s: %s", p->part, p->old,
                     strerror(errno));
            return -1;
        }
        /* the old run out, whole, for good before anything of the new one
         * comes in */
        if (sync_dir(p->old, err, errlen) || sync_dir(dir, err, errlen)) return -1;
        crash_point("swap-mid");
    }
    if (is_dir(p->fresh)) {
        if (move_files(p->fresh, dir, NULL, "swap-new", err, errlen)) return -1;
        if (rmdir(p->fresh) != 0) {
            snprintf(err, errlen, "--force: cannot remove %s: %s", p->fresh, strerror(errno));
            return -1;
        }
        crash_point("swap-end");
    }
    /* the new run in for good before the old one goes */
    if (sync_dir(dir, err, errlen)) return -1;
    return remove_flat(p->old, err, errlen);
}

int force_swap(const char *dir, int *begun, char *err, size_t errlen) {
    paths p;
    paths_of(dir, &p);
    crash_point("swap-begin");
    if (is_dir(p.part) || is_dir(p.old)) {
        snprintf(err, errlen,
                 "--force: %s holds %s from an earlier swap (bfworker train resolves it when "
                 "it starts)",
                 dir, is_dir(p.part) ? FORCE_OLD_PART : FORCE_OLD);
        return -1;
    }
    if (mkdir(p.part, 0755) != 0) {
        snprintf(err, errlen, "--force: cannot create %s: %s", p.part, strerror(errno));
        return -1;
    }
    if (begun) *begun = 1;
    return finish(dir, &p, 1, err, errlen);
}

int force_recover(const char *dir, int quiet, char *err, size_t errlen) {
    paths p;
    paths_of(dir, &p);
    int part = is_dir(p.part), old = is_dir(p.old), fresh = is_dir(p.fresh);
    if (!part && !old && !fresh) return 0;
    if (part && old) {
        snprintf(err, errlen,
                 "%s holds both %s and %s, which no --force swap leaves: move the run you "
                 "want to keep out of them by hand",
                 dir, FORCE_OLD_PART, FORCE_OLD);
        return -1;
    }
    if (part && !fresh) {
        /* no new run to finish with (removed by hand): the old one goes back */
        if (move_files(p.part, dir, NULL, NULL, err, errlen)) return -1;
        if (rmdir(p.part) != 0) {
            snprintf(err, errlen, "--force: cannot remove %s: %s", p.part, strerror(errno));
            return -1;
        }
        if (!quiet)
            fprintf(stderr,
                    "bfworker: %s: a --force swap was killed and its new run (%s) is gone: the "
                    "old run's files are moved back\n",
                    dir, FORCE_NEW);
        return 0;
    }
    if (part || old) {
        if (finish(dir, &p, part, err, errlen)) return -1;
        if (!quiet)
            fprintf(stderr,
                    "bfworker: %s: finished the --force swap a killed run had begun (its new "
                    "run's checkpoint was whole): the folder holds the new run\n",
                    dir);
        return 0;
    }
    if (remove_flat(p.fresh, err, errlen)) return -1;
    if (!quiet)
        fprintf(stderr,
                "bfworker: %s: removed %s, left by a --force run that ended before its first "
                "checkpoint: the old run is kept as it was\n",
                dir, FORCE_NEW);
    return 0;
}

int force_discard(const char *dir, char *err, size_t errlen) {
    paths p;
    paths_of(dir, &p);
    return remove_flat(p.fresh, err, errlen);
}
