/* cmd_export — `bfworker export CHECKPOINT --out FILE [--dtype f32|bf16]`:
 * a run's weights (RUN/model.safetensors, or a .safetensors file) as one
 * safetensors file for inference elsewhere, its tensors in F32 or in BF16
 * (each fp32 master rounded to nearest even, kernels/bk_bf16.h), its
 * metadata (the config) carried over. It reads the checkpoint and writes
 * only FILE; resuming always reads the fp32 masters of the run itself. */
#include "worker/cmd/cmd.h"
#include "worker/io/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/input_path.h"

/* What `bfworker export` is told (cmd_export_opts). */
typedef struct export_args {
    const char *out;
    int dtype; /* 0 f32, 1 bf16 */
} export_args;

#define EX(f) OPT_AT(export_args, f)
const opt_spec cmd_export_opts[] = {
    {"out", 0, OPT_STR, 0, 0, EX(out), "FILE", "the safetensors file to write (required)"},
    {"dtype", 0, OPT_CHOICE, 0, 0, EX(dtype), "f32|bf16",
     "the tensors' type in FILE: F32 as trained, or BF16 rounded to nearest even (f32)"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

/* The metadata key export adds: the dtype and where it came from. */
#define EXPORT_META_KEY "bf_export"

/* Reads every tensor of the open file as fp32 and writes them to out
 * (as BF16 when bf16), with the source's metadata and EXPORT_META_KEY.
 * Returns 0, or -1 with a message. */
static int export_file(const st_file *f, const char *out, int bf16, char *err, size_t errlen) {
    st_entry *e = calloc((size_t)f->n + 1, sizeof *e);
    int64_t *shapes = calloc((size_t)f->n * ST_MAX_DIMS + 1, sizeof *shapes);
    float **data = calloc((size_t)f->n + 1, sizeof *data);
    const char **meta = calloc(2 * ((size_t)f->n_meta + 1), sizeof *meta);
    int rc = -1, n_meta = 0;
    if (!e || !shapes || !data || !meta) {
        snprintf(err, errlen, "out of memory for %d tensors", f->n);
        goto done;
    }
    for (int i = 0; i < f->n; i++) {
        const st_tensor *t = &f->t[i];
        data[i] = malloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
        if (!data[i]) {
            snprintf(err, errlen, "%.1024s: out of memory for tensor \"%.200s\" (%llu floats)",
                     f->path, t->name, (unsigned long long)t->numel);
            goto done;
        }
        if (st_read_as_f32(f, i, data[i], err, errlen)) goto done;
        for (int d = 0; d < t->ndim; d++)
            shapes[(size_t)i * ST_MAX_DIMS + d] = (int64_t)t->shape[d];
        e[i] = (st_entry){t->name, t->ndim, shapes + (size_t)i * ST_MAX_DIMS, data[i]};
    }
    for (int k = 0; k < f->n_meta; k++) {
        if (strcmp(f->meta_key[k], EXPORT_META_KEY) == 0) continue; /* replaced below */
        meta[2 * n_meta] = f->meta_key[k];
        meta[2 * n_meta + 1] = f->meta_val[k];
        n_meta++;
    }
    meta[2 * n_meta] = EXPORT_META_KEY;
    meta[2 * n_meta + 1] = bf16 ? "BF16, each F32 master rounded to nearest even" : "F32";
    n_meta++;
    rc = st_write_as(out, e, f->n, meta, n_meta, bf16, err, errlen);
done:
    for (int i = 0; data && i < f->n; i++) free(data[i]);
    free(data);
    free(shapes);
    free(e);
    free(meta);
    return rc;
}

int cmd_export(int argc, char **argv) {
    const char *path = NULL;
    export_args a = {0};
    int prc = cmd_parse(argc, argv, NULL, &a, &path);
    if (prc >= 0) return prc;
    if (!a.out) return cmd_usage_error("--out FILE is required");
    char err[2048], file[4096];
    int is_dir = 0;
    if (input_path_check("CHECKPOINT", path, INPUT_FILE | INPUT_DIR,
                         "a .safetensors file or a run folder", &is_dir, err, sizeof err)) {
        fprintf(stderr, "bfworker export: %s\n", err);
        return CMD_USAGE;
    }
    if ((size_t)snprintf(file, sizeof file, is_dir ? "%s/model.safetensors" : "%s", path) >=
        sizeof file) {
        fprintf(stderr, "bfworker export: CHECKPOINT: path too long (%zu bytes)\n", strlen(path));
        return CMD_USAGE;
    }
    st_file f;
    if (st_open(&f, file, err, sizeof err)) {
        fprintf(stderr, "bfworker export: %s\n", err);
        return 1;
    }
    int rc = export_file(&f, a.out, a.dtype, err, sizeof err);
    st_close(&f);
    if (rc) {
        fprintf(stderr, "bfworker export: %s\n", err);
        return 1;
    }
    return 0;
}
