/* fuzz_util — what the file-reading fuzz targets share: the input written to
 * a file of this process (the loaders read paths, as bf does). */
#ifndef BF_FUZZ_UTIL_H
#define BF_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Writes data to a per-process file named after `name` (in /dev/shm when
 * there is one) and returns its path (a static buffer); aborts when it
 * cannot, since every later result would be meaningless. */
static inline const char *fuzz_file(const char *name, const uint8_t *data, size_t size) {
    static char path[256];
    const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(path, sizeof path, "%s/bf-fuzz-%d-%s", dir, (int)getpid(), name);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
    return path;
}

#endif
