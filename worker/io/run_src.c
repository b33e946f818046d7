#include "worker/io/run_src.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

int run_src_open(run_src *s, const char *path, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    size_t n = strlen(path);
    const char *suffix = "/" CKPT_MODEL_FILE;
    size_t ls = strlen(suffix);
    if (n >= sizeof s->dir) {
        snprintf(err, errlen, "path too long: %.200s...", path);
        return -1;
    }
    if (n > ls && strcmp(path + n - ls, suffix) == 0) {
        memcpy(s->dir, path, n - ls); /* .../model.safetensors: its set */
        s->dir[n - ls] = 0;
    } else if (is_dir(path) && ckpt_probe(path) == CKPT_SET) {
        snprintf(s->dir, sizeof s->dir, "%s", path);
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
