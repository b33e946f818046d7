/* Shared by the integration tests of the image pipelines: a tiny IDX image
 * set written into `dir` (12 x 12 images, three classes: a bar at the top,
 * at the bottom, or down the middle, over noise), and running a command for
 * its output and exit status. */
#ifndef IT_IDX_H
#define IT_IDX_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

static char dir[64] __attribute__((unused)); /* the test's folder (write_set) */

static inline void be32(FILE *f, unsigned v) {
    unsigned char b[4] = {v >> 24, v >> 16, v >> 8, v};
    fwrite(b, 1, 4, f);
}

/* n images of class i % 3 with noise from seed into NAME-images / NAME-labels
 * (the images gzipped through gzip(1) when gz: both kinds are read). */
static inline void it_idx_write(const char *folder, const char *name, int n, unsigned seed,
                                int gz) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s-images", folder, name);
    FILE *f = fopen(p, "wb");
    cr_assert(f != NULL);
    unsigned char m[4] = {0, 0, 8, 3};
    fwrite(m, 1, 4, f);
    be32(f, (unsigned)n), be32(f, 12), be32(f, 12);
    for (int i = 0; i < n; i++)
        for (int y = 0; y < 12; y++)
            for (int x = 0; x < 12; x++) {
                seed = seed * 1103515245u + 12345u;
                int k = i % 3, on = k == 0   ? (y == 1 || y == 2)
                                    : k == 1 ? (y == 9 || y == 10)
                                             : (x == 5 || x == 6);
                fputc(on ? 192 + (int)(seed >> 26) : (int)(seed >> 26), f); /* <= 255 */
            }
    fclose(f);
    if (gz) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "gzip %s", p);
        cr_assert_eq(system(cmd), 0);
    }
    snprintf(p, sizeof p, "%s/%s-labels", folder, name);
    f = fopen(p, "wb");
    cr_assert(f != NULL);
    unsigned char ml[4] = {0, 0, 8, 1};
    fwrite(ml, 1, 4, f);
    be32(f, (unsigned)n);
    for (int i = 0; i < n; i++) fputc(i % 3, f);
    fclose(f);
}

/* ... into the test's `dir` */
static inline void write_set(const char *name, int n, unsigned seed, int gz) {
    it_idx_write(dir, name, n, seed, gz);
}

static inline int run_cmd(const char *cmd, char *out, size_t outlen) {
    FILE *p = popen(cmd, "r");
    cr_assert(p != NULL, "popen %s", cmd);
    size_t n = fread(out, 1, outlen - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#endif
