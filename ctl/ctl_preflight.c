/* ctl_preflight — `bfctl validate`'s look at a sweep's data files, the
 * checks bfworker makes when a trial starts, made before anything is
 * submitted: each data path of the base config exists (a relative one
 * looked up where bfctl runs, which is where bfd's workers will read it:
 * the submitting shell's folder), is a regular file (not a folder, a FIFO,
 * a device: common/input_path.h), is not empty, and budgetformer's
 * training file holds at least 2 distinct labels. It opens files but never
 * blocks on one (input_path_open). */
#include "ctl/bfctl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/cfg.h"
#include "common/input_path.h"

/* Whether the TSV f (label<TAB>text lines) has 2 distinct labels; the
 * first label into first. Reads until the second label is seen. */
static int two_labels(FILE *f, char *first, size_t firstlen) {
    char *line = NULL;
    size_t cap = 0;
    int have = 0, two = 0;
    first[0] = '\0';
    while (!two && getline(&line, &cap, f) > 0) {
        size_t n = strcspn(line, "\t\n");
        if (line[n] != '\t' || n == 0) continue; /* the worker names bad lines */
        line[n] = '\0';
        if (!have)
            snprintf(first, firstlen, "%s", line), have = 1;
        else
            two = strcmp(line, first) != 0;
    }
    free(line);
    return two;
}

int ctl_data_preflight(const bf_config *c, void (*say)(void *ud, const char *msg), void *ud) {
    const struct {
        const char *key, *path;
    } keys[] = {{"data.train", c->data.train},
                {"data.val", c->data.val},
                {"data.test", c->data.test},
                {"data.path", c->data.path},
                {"data.train_images", c->data.train_images},
                {"data.train_labels", c->data.train_labels},
                {"data.test_images", c->data.test_images},
                {"data.test_labels", c->data.test_labels}};
    int bad = 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const char *p = keys[i].path;
        if (!p[0]) continue;
        char msg[2048], why[1100];
        FILE *f = input_path_open(p, why, sizeof why);
        if (!f) {
            snprintf(msg, sizeof msg, "%s: %s: %s", keys[i].key, p, why);
            say(ud, msg), bad++;
            continue;
        }
        struct stat st;
        if (fstat(fileno(f), &st) == 0 && st.st_size == 0) {
            snprintf(msg, sizeof msg, "%s: %s is empty", keys[i].key, p);
            say(ud, msg), bad++;
        } else if (!strcmp(keys[i].key, "data.train") && !strcmp(c->pipeline, "budgetformer")) {
            char first[256];
            if (!two_labels(f, first, sizeof first)) {
                if (first[0])
                    snprintf(msg, sizeof msg,
                             "%s: %s has one distinct label ('%s'); training needs at least 2",
                             keys[i].key, p, first);
                else
                    snprintf(msg, sizeof msg,
                             "%s: %s has no label<TAB>text line; training needs lines of at "
                             "least 2 distinct labels",
                             keys[i].key, p);
                say(ud, msg), bad++;
            }
        }
        fclose(f);
    }
    return bad;
}
