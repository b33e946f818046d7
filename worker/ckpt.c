#include "worker/ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char MAGIC[8] = {'B', 'F', 'C', 'K', 'P', 'T', 0, 0};
#define HEADER_BYTES 72
#define FNV_INIT 1469598103934665603ull

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) {
        h ^= c[i];
        h *= 1099511628211ull;
    }
    return h;
}

static void put64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t get64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static int write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int ckpt_write(const char *dir, const ckpt_state *s, char *err, size_t errlen) {
    char tmp[4096], final[4096];
    size_t cfg_len = s->cfg_text ? strlen(s->cfg_text) : 0;
    if (cfg_len > CKPT_MAX_CFG) {
        snprintf(err, errlen, "checkpoint: config text of %zu bytes is over the %u-byte cap", cfg_len,
                 CKPT_MAX_CFG);
        return -1;
    }
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp.%ld", dir, CKPT_NAME, (long)getpid());
    snprintf(final, sizeof final, "%s/%s", dir, CKPT_NAME);
    size_t nb = s->n_params * sizeof(float);
    uint64_t pf = FNV_INIT;
    pf = fnv(pf, s->cfg_text, cfg_len);
    pf = fnv(pf, s->params, nb);
    pf = fnv(pf, s->m, nb);
    pf = fnv(pf, s->v, nb);
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
    put64(h + 64, fnv(FNV_INIT, h, 64));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "checkpoint: cannot create %s: %s", tmp, strerror(errno));
        return -1;
    }
    if (write_all(fd, h, sizeof h) || write_all(fd, s->cfg_text, cfg_len) ||
        write_all(fd, s->params, nb) || write_all(fd, s->m, nb) || write_all(fd, s->v, nb) ||
        fsync(fd)) {
        snprintf(err, errlen, "checkpoint: cannot write %s: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        return -1;
    }
    close(fd);
    if (rename(tmp, final)) {
        snprintf(err, errlen, "checkpoint: cannot rename %s to %s: %s", tmp, final, strerror(errno));
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
    FILE *f = fopen(file, "rb");
    if (!f) {
        snprintf(err, errlen, "checkpoint %s: cannot open: %s", file, strerror(errno));
        return -1;
    }
    unsigned char h[HEADER_BYTES];
    if (fread(h, 1, sizeof h, f) != sizeof h) {
        snprintf(err, errlen, "checkpoint %s: truncated header (not a bf checkpoint?)", file);
        goto fail;
    }
    if (memcmp(h, MAGIC, 8) != 0) {
        snprintf(err, errlen, "checkpoint %s: bad magic: not a bf checkpoint", file);
        goto fail;
    }
    if (get64(h + 64) != fnv(FNV_INIT, h, 64)) {
        snprintf(err, errlen, "checkpoint %s: header checksum mismatch (damaged file)", file);
        goto fail;
    }
    if (h[8] != CKPT_VERSION) {
        snprintf(err, errlen, "checkpoint %s: version %d, this bf reads version %d", file, h[8],
                 CKPT_VERSION);
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
    uint64_t want = HEADER_BYTES + cfg_len + 3 * s->n_params * sizeof(float);
    if (fstat(fileno(f), &st) || (uint64_t)st.st_size != want) {
        snprintf(err, errlen, "checkpoint %s: %lld bytes, expected %llu (truncated or padded)", file,
                 (long long)st.st_size, (unsigned long long)want);
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
    uint64_t pf = FNV_INIT;
    pf = fnv(pf, s->cfg_text, cfg_len);
    pf = fnv(pf, s->params, nb);
    pf = fnv(pf, s->m, nb);
    pf = fnv(pf, s->v, nb);
    if (pf != get64(h + 56)) {
        snprintf(err, errlen, "checkpoint %s: payload checksum mismatch (damaged file)", file);
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
