#include "worker/ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char MAGIC[8] = {'B', 'F', 'C', 'K', 'P', 'T', 0, 0};
#define HEADER_BYTES 80
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

static uint32_t get32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
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
        snprintf(err, errlen, "checkpoint: config text of %zu bytes is over the %u-byte cap",
                 cfg_len, CKPT_MAX_CFG);
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
    put64(h + 64, fnv(FNV_INIT, s->cfg_text, cfg_len));
    put64(h + 72, fnv(FNV_INIT, h, 72));
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
    FILE *f = fopen(file, "rb");
    if (!f) {
        snprintf(err, errlen, "checkpoint %s: cannot open: %s", file, strerror(errno));
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
    if (get64(h + hbytes - 8) != fnv(FNV_INIT, h, hbytes - 8)) {
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
    uint64_t pf = FNV_INIT;
    pf = fnv(pf, s->cfg_text, cfg_len);
    pf = fnv(pf, s->params, nb);
    pf = fnv(pf, s->m, nb);
    pf = fnv(pf, s->v, nb);
    if (pf != get64(h + 56)) {
        snprintf(err, errlen, "checkpoint %s: payload checksum mismatch (damaged file)", file);
        goto fail;
    }
    s->cfg_hash = version == 1 ? fnv(FNV_INIT, s->cfg_text, cfg_len) : get64(h + 64);
    if (s->cfg_hash != fnv(FNV_INIT, s->cfg_text, cfg_len)) {
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

/* Keys whose value does not change what training computes. */
static int key_ignored(const char *k, size_t n) {
    static const char *keys[] = {
        "device", "data.dir", "train.log_every", "train.eval_every", "train.checkpoint_every",
        NULL};
    for (const char **p = keys; *p; p++)
        if (strlen(*p) == n && memcmp(*p, k, n) == 0) return 1;
    return 0;
}

/* Finds "key: value" for key in text; returns the value's start and length, or NULL. */
static const char *find_key(const char *text, const char *key, size_t klen, size_t *vlen) {
    for (const char *l = text; l && *l;) {
        const char *e = strchr(l, '\n');
        size_t n = e ? (size_t)(e - l) : strlen(l);
        if (n > klen + 1 && memcmp(l, key, klen) == 0 && l[klen] == ':') {
            const char *v = l + klen + 1;
            while (v < l + n && *v == ' ') v++;
            *vlen = (size_t)(l + n - v);
            return v;
        }
        l = e ? e + 1 : NULL;
    }
    return NULL;
}

/* Checks every key of a against b; which names a's role in the message. */
static int cfg_lines_match(const char *a, const char *b, int a_is_ckpt, char *err, size_t errlen) {
    for (const char *l = a; l && *l;) {
        const char *e = strchr(l, '\n');
        size_t n = e ? (size_t)(e - l) : strlen(l);
        const char *colon = memchr(l, ':', n);
        if (colon && !key_ignored(l, (size_t)(colon - l))) {
            size_t klen = (size_t)(colon - l), alen, blen = 0;
            const char *av = colon + 1;
            while (av < l + n && *av == ' ') av++;
            alen = (size_t)(l + n - av);
            const char *bv = find_key(b, l, klen, &blen);
            if (!bv || blen != alen || memcmp(av, bv, alen) != 0) {
                const char *cv = a_is_ckpt ? av : bv, *nv = a_is_ckpt ? bv : av;
                size_t cl = a_is_ckpt ? alen : blen, nl = a_is_ckpt ? blen : alen;
                snprintf(err, errlen,
                         "the checkpoint was written with a different config: %.*s is %.*s in the "
                         "checkpoint but %.*s now (resume with the checkpoint's config, or train "
                         "into a fresh --out)",
                         (int)klen, l, cv ? (int)cl : 9, cv ? cv : "(missing)", nv ? (int)nl : 9,
                         nv ? nv : "(missing)");
                return -1;
            }
        }
        l = e ? e + 1 : NULL;
    }
    return 0;
}

int ckpt_config_check(const char *ckpt_cfg, const char *cur_cfg, char *err, size_t errlen) {
    if (cfg_lines_match(ckpt_cfg, cur_cfg, 1, err, errlen)) return -1;
    return cfg_lines_match(cur_cfg, ckpt_cfg, 0, err, errlen);
}
