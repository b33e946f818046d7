/* ckpt_bin.c — the older one-file checkpoint, checkpoint.bin (versions 1
 * and 2, described in ckpt.h): writing and reading it (ckpt_write,
 * ckpt_read) and loading one by position for a resume (ckpt_bin_load, used by
 * ckpt_load). New runs write the set (ckpt.c, where ckpt_convert rewrites a
 * checkpoint.bin as one); this file stays so that old runs still load. It
 * calls nothing in ckpt.c. */
#include "worker/io/ckpt.h"
#include "worker/io/ckpt_priv.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/hash.h"
#include "common/input_path.h"

/* Fuzz builds (FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION) do not enforce the
 * checksums, which random bytes never match, so the fuzzer reaches the
 * checks behind them. */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define BF_FUZZING 1
#else
#define BF_FUZZING 0
#endif

static const char MAGIC[8] = {'B', 'F', 'C', 'K', 'P', 'T', 0, 0};
#define HEADER_BYTES 80

static void put64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t get64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static uint32_t get32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int ckpt_write(const char *dir, const ckpt_state *s, char *err, size_t errlen) {
    char tmp[4096], final[4096];
    size_t cfg_len = s->cfg_text ? strlen(s->cfg_text) : 0;
    if (cfg_len > CKPT_MAX_CFG) {
        snprintf(err, errlen, "checkpoint: config text of %zu bytes is over the %u-byte cap",
                 cfg_len, CKPT_MAX_CFG);
        return -1;
    }
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp.%ld", dir, CKPT_NAME, (long)getpid());
    snprintf(final, sizeof final, "%s/%s", dir, CKPT_NAME);
    size_t nb = s->n_params * sizeof(float);
    uint64_t pf = FNV1A64_SEED;
    pf = fnv1a64(pf, s->cfg_text, cfg_len);
    pf = fnv1a64(pf, s->params, nb);
    pf = fnv1a64(pf, s->m, nb);
    pf = fnv1a64(pf, s->v, nb);
    unsigned char h[HEADER_BYTES];
    memset(h, 0, sizeof h);
    memcpy(h, MAGIC, 8);
    h[8] = CKPT_VERSION;
    put64(h + 16, s->n_params);
    put64(h + 24, s->step);
    put64(h + 32, s->seed);
    put64(h + 40, s->data_step);
    put64(h + 48, cfg_len);
    put64(h + 56, pf);
    put64(h + 64, fnv1a64(FNV1A64_SEED, s->cfg_text, cfg_len));
    put64(h + 72, fnv1a64(FNV1A64_SEED, h, 72));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "checkpoint: cannot create %s: %s", tmp, strerror(errno));
        return -1;
    }
    if (st_write_all(fd, h, sizeof h) || st_write_all(fd, s->cfg_text, cfg_len) ||
        st_write_all(fd, s->params, nb) || st_write_all(fd, s->m, nb) ||
        st_write_all(fd, s->v, nb) || fsync(fd)) {
        snprintf(err, errlen, "checkpoint: cannot write %s: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        return -1;
    }
    close(fd);
    if (rename(tmp, final)) {
        snprintf(err, errlen, "checkpoint: cannot rename %s to %s: %s", tmp, final,
                 strerror(errno));
        unlink(tmp);
        return -1;
    }
    int dfd = open(dir, O_RDONLY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
}

int ckpt_read(const char *path, ckpt_state *s, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    char file[4096];
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(file, sizeof file, "%s/%s", path, CKPT_NAME);
    else
        snprintf(file, sizeof file, "%s", path);
    char why[1100]; /* "not found" may name the working folder */
    FILE *f = input_path_open(file, why, sizeof why);
    if (!f) {
        snprintf(err, errlen, "checkpoint %s: cannot open: %s", file, why);
        return -1;
    }
    /* Version 1 (72-byte header, no config hash) is still read: a checkpoint
     * written by an older bf is never stranded. Its fields sit at the same
     * offsets up to byte 64. */
    unsigned char h[HEADER_BYTES];
    const size_t v1_bytes = 72;
    if (fread(h, 1, v1_bytes, f) != v1_bytes) {
        snprintf(err, errlen, "checkpoint %s: truncated header (not a bf checkpoint?)", file);
        goto fail;
    }
    if (memcmp(h, MAGIC, 8) != 0) {
        snprintf(err, errlen, "checkpoint %s: bad magic: not a bf checkpoint", file);
        goto fail;
    }
    const unsigned version = get32(h + 8);
    if (version != 1 && version != CKPT_VERSION) {
        snprintf(err, errlen, "checkpoint %s: format version %u, this bf reads versions 1 to %d",
                 file, version, CKPT_VERSION);
        goto fail;
    }
    size_t hbytes = version == 1 ? v1_bytes : HEADER_BYTES;
    if (hbytes > v1_bytes && fread(h + v1_bytes, 1, hbytes - v1_bytes, f) != hbytes - v1_bytes) {
        snprintf(err, errlen, "checkpoint %s: truncated header", file);
        goto fail;
    }
    if (!BF_FUZZING && get64(h + hbytes - 8) != fnv1a64(FNV1A64_SEED, h, hbytes - 8)) {
        snprintf(err, errlen, "checkpoint %s: header checksum mismatch (damaged file)", file);
        goto fail;
    }
    s->n_params = get64(h + 16);
    s->step = get64(h + 24);
    s->seed = get64(h + 32);
    s->data_step = get64(h + 40);
    uint64_t cfg_len = get64(h + 48);
    if (cfg_len > CKPT_MAX_CFG || s->n_params > ((uint64_t)1 << 36)) {
        snprintf(err, errlen, "checkpoint %s: implausible sizes (config %llu bytes, %llu params)",
                 file, (unsigned long long)cfg_len, (unsigned long long)s->n_params);
        goto fail;
    }
    uint64_t want = hbytes + cfg_len + 3 * s->n_params * sizeof(float);
    if (fstat(fileno(f), &st) || (uint64_t)st.st_size != want) {
        snprintf(err, errlen, "checkpoint %s: %lld bytes, expected %llu (truncated or padded)",
                 file, (long long)st.st_size, (unsigned long long)want);
        goto fail;
    }
    size_t nb = s->n_params * sizeof(float);
    s->cfg_text = calloc(cfg_len + 1, 1);
    s->params = malloc(nb ? nb : 1);
    s->m = malloc(nb ? nb : 1);
    s->v = malloc(nb ? nb : 1);
    if (!s->cfg_text || !s->params || !s->m || !s->v) {
        snprintf(err, errlen, "checkpoint %s: out of memory", file);
        goto fail;
    }
    if (fread(s->cfg_text, 1, cfg_len, f) != cfg_len || fread(s->params, 1, nb, f) != nb ||
        fread(s->m, 1, nb, f) != nb || fread(s->v, 1, nb, f) != nb) {
        snprintf(err, errlen, "checkpoint %s: short read", file);
        goto fail;
    }
    uint64_t pf = FNV1A64_SEED;
    pf = fnv1a64(pf, s->cfg_text, cfg_len);
    pf = fnv1a64(pf, s->params, nb);
    pf = fnv1a64(pf, s->m, nb);
    pf = fnv1a64(pf, s->v, nb);
    if (!BF_FUZZING && pf != get64(h + 56)) {
        snprintf(err, errlen, "checkpoint %s: payload checksum mismatch (damaged file)", file);
        goto fail;
    }
    s->cfg_hash = version == 1 ? fnv1a64(FNV1A64_SEED, s->cfg_text, cfg_len) : get64(h + 64);
    if (s->cfg_hash != fnv1a64(FNV1A64_SEED, s->cfg_text, cfg_len)) {
        snprintf(err, errlen, "checkpoint %s: config hash does not match its config text", file);
        goto fail;
    }
    fclose(f);
    return 0;
fail:
    fclose(f);
    ckpt_free(s);
    return -1;
}

void ckpt_free(ckpt_state *s) {
    free(s->params);
    free(s->m);
    free(s->v);
    free(s->cfg_text);
    memset(s, 0, sizeof *s);
}

int ckpt_bin_is(const char *path) {
    unsigned char b[8];
    char why[1100]; /* "not found" may name the working folder */
    FILE *f = input_path_open(path, why, sizeof why);
    if (!f) return 0;
    int ok = fread(b, 1, 8, f) == 8 && memcmp(b, MAGIC, 8) == 0;
    fclose(f);
    return ok;
}

int ckpt_bin_size_error(const char *file, const ckpt_state *s, const bk_params *P, char *err,
                        size_t errlen) {
    snprintf(err, errlen,
             "checkpoint %s is in the older format (checkpoint.bin: flat floats, no tensor names) "
             "and holds %zu floats per buffer; this model has %zu. An old checkpoint maps by "
             "position onto the model it was written for only: resume it with the config stored "
             "in it (`bfworker train CONFIG --resume DIR`), and the next checkpoint is written "
             "as named safetensors, which later models load by name",
             file, s->n_params, P->numel);
    return -1;
}

int ckpt_bin_load(const char *file, const bk_params *P, float *params, float *m, float *v,
                  ckpt_meta *meta, char *err, size_t errlen) {
    ckpt_state s;
    if (ckpt_read(file, &s, err, errlen)) return -1;
    if (s.n_params != P->numel) {
        ckpt_bin_size_error(file, &s, P, err, errlen);
        ckpt_free(&s);
        return -1;
    }
    size_t nb = P->numel * sizeof(float);
    memcpy(params, s.params, nb);
    if (m) memcpy(m, s.m, nb);
    if (v) memcpy(v, s.v, nb);
    meta->step = s.step;
    meta->seed = s.seed;
    meta->data_step = s.data_step;
    meta->cfg_hash = s.cfg_hash;
    meta->cfg_text = s.cfg_text;
    s.cfg_text = NULL;
    unsigned char ver[12] = {0};
    char why[1100]; /* "not found" may name the working folder */
    FILE *f = input_path_open(file, why, sizeof why);
    if (f) {
        if (fread(ver, 1, sizeof ver, f) != sizeof ver) ver[8] = 0;
        fclose(f);
    }
    meta->format_version = ver[8];
    ckpt_free(&s);
    return 0;
}
