/* run_src.c — opens a finished run's weights and config for eval and
 * generate (run_src.h): a run folder, a checkpoint set or checkpoint.bin,
 * and loads them into a model with its tokenizer. */

#include "worker/io/run_src.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/input_path.h"
#include "worker/data/data_sets.h"
#include "worker/io/safetensors.h"

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The config a set recorded in its model.safetensors. */
static int set_config(run_src *s, char *err, size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", s->dir, CKPT_MODEL_FILE);
    st_file f;
    if (st_open(&f, path, err, errlen)) return -1;
    const char *cfg = st_meta(&f, "config");
    if (!cfg) {
        snprintf(err, errlen, "%s has no 'config' in its metadata (not a bf checkpoint)", path);
        st_close(&f);
        return -1;
    }
    s->cfg_text = strdup(cfg);
    st_close(&f);
    if (!s->cfg_text) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

/* 1 when the file at path begins as a safetensors file does (a u64 header
 * length, then '{'), not as an older checkpoint.bin ("BFCKPT"). */
static int looks_safetensors(const char *path) {
    char why[1100]; /* "not found" may name the working folder */
    FILE *f = input_path_open(path, why, sizeof why);
    unsigned char b[9];
    int ok = f && fread(b, 1, 9, f) == 9 && memcmp(b, "BFCKPT", 6) != 0 && b[8] == '{';
    if (f) fclose(f);
    return ok;
}

/* The stage folders of an s2s run root that hold a checkpoint, most useful
 * first (avit: what profile reads), into list ("" when none). */
static void stage_folders(const char *root, char *list, size_t n) {
    static const char *const order[] = {"avit-", "finetune-", "distill-", "teacher-"};
    char stages[4200];
    snprintf(stages, sizeof stages, "%s/stages", root);
    size_t w = 0;
    list[0] = '\0';
    for (size_t k = 0; k < sizeof order / sizeof *order; k++) {
        DIR *d = opendir(stages);
        if (!d) return;
        struct dirent *e;
        while ((e = readdir(d))) {
            char p[4600];
            if (strncmp(e->d_name, order[k], strlen(order[k])) != 0) continue;
            snprintf(p, sizeof p, "%s/%s", stages, e->d_name);
            if (!is_dir(p) || ckpt_probe(p) == CKPT_NONE || w + strlen(p) + 3 >= n) continue;
            w += (size_t)snprintf(list + w, n - w, "%s%s", w ? ", " : "", p);
        }
        closedir(d);
    }
}

int run_src_open(run_src *s, const char *path, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    size_t n = strlen(path);
    if (n >= sizeof s->dir) {
        snprintf(err, errlen, "path too long: %.200s...", path);
        return -1;
    }
    /* a FIFO or a device would block the open below: refused by kind */
    int dir = 0;
    if (input_path_check(NULL, path, INPUT_FILE | INPUT_DIR,
                         "a run folder, its " CKPT_MODEL_FILE " or a " CKPT_NAME, &dir, err,
                         errlen))
        return -1;
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    if (dir) {
        ckpt_kind k = ckpt_probe(path);
        if (k == CKPT_SET) snprintf(s->dir, sizeof s->dir, "%s", path);
        if (k == CKPT_NONE) {
            char list[2048];
            stage_folders(path, list, sizeof list);
            if (list[0])
                snprintf(err, errlen,
                         "%s is the root of an s2s run: its checkpoints are in its stage "
                         "folders; give one of them: %s",
                         path, list);
            else
                snprintf(err, errlen, "%s holds no checkpoint (no %s, %s or %s there)", path,
                         CKPT_STATE_FILE, CKPT_MODEL_FILE, CKPT_NAME);
            return -1;
        }
    } else if (strcmp(base, CKPT_MODEL_FILE) == 0) {
        /* DIR/model.safetensors (or model.safetensors here): its set is the run */
        if (base == path)
            snprintf(s->dir, sizeof s->dir, ".");
        else
            snprintf(s->dir, sizeof s->dir, "%.*s", (int)(base - path - 1), path);
        if (!s->dir[0]) snprintf(s->dir, sizeof s->dir, "/");
    } else if (looks_safetensors(path)) {
        snprintf(err, errlen,
                 "%s is a safetensors file but not a run's %s: give the run folder (it "
                 "holds %s and %s)",
                 path, CKPT_MODEL_FILE, CKPT_MODEL_FILE, CKPT_STATE_FILE);
        return -1;
    }
    if (s->dir[0]) {
        if (set_config(s, err, errlen)) {
            run_src_close(s);
            return -1;
        }
        return 0;
    }
    if (ckpt_read(path, &s->old, err, errlen)) return -1;
    s->cfg_text = strdup(s->old.cfg_text);
    if (!s->cfg_text) {
        run_src_close(s);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

int run_src_load(run_src *s, model *m, char *err, size_t errlen) {
    size_t n = m->np.P.numel;
    if (!s->dir[0]) {
        if (s->old.n_params != n) {
            snprintf(err, errlen, "checkpoint has %zu parameters but its config builds %zu",
                     s->old.n_params, n);
            return -1;
        }
        m->be->to_device(m->np.P.data, s->old.params, n * sizeof(float));
        return 0;
    }
    float *hp = malloc(n * sizeof(float));
    if (!hp) {
        snprintf(err, errlen, "out of memory loading %zu parameters", n);
        return -1;
    }
    ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    int rc = ckpt_load(s->dir, &m->np.P, hp, NULL, NULL, &meta, err, errlen);
    if (!rc) m->be->to_device(m->np.P.data, hp, n * sizeof(float));
    for (int i = 0; !rc && i < meta.n_counters; i++) /* the A-ViT gate goes with the weights */
        model_take_counter(m, meta.counters[i].name, meta.counters[i].value);
    ckpt_meta_free(&meta);
    free(hp);
    return rc;
}

void run_src_close(run_src *s) {
    ckpt_free(&s->old);
    free(s->cfg_text);
    memset(s, 0, sizeof *s);
}

int run_src_tokenizer(const run_src *s, tok_t **tok, char *err, size_t errlen) {
    *tok = NULL;
    if (!s->dir[0]) return 1;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", s->dir, DATA_RUN_TOKENIZER);
    struct stat st;
    if (stat(path, &st) != 0) return 1;
    return tok_load(tok, path, err, errlen) ? -1 : 0;
}
