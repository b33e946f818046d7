/* fuzz_loaders — the data loaders on a file of fuzzed bytes: byte 0 picks
 * the loader (TSV classification set, UTF-8 text corpus, IDX array,
 * tokenized cache), the rest is the file. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "worker/data/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *path = fuzz_file("data", data + 1, size - 1);
    char err[1024];
    switch (data[0] & 3) {
    case 0: {
        data_tsv_t *d = NULL, *v = NULL;
        if (data_tsv_load(path, NULL, &d, err, sizeof err) == DATA_OK) {
            /* the same file as a validation split labelled by the training one */
            if (data_tsv_load(path, d, &v, err, sizeof err) == DATA_OK) data_tsv_destroy(&v);
            data_tsv_destroy(&d);
        }
        break;
    }
    case 1: {
        data_text_t *t = NULL;
        if (data_text_load(path, 0.1, &t, err, sizeof err) == DATA_OK) data_text_destroy(&t);
        break;
    }
    case 2: {
        data_idx_t *x = NULL;
        if (data_idx_read(path, 1u << 24, &x, err, sizeof err) == DATA_OK) data_idx_destroy(&x);
        break;
    }
    default: {
        data_tok_t *d = NULL;
        if (data_cache_read(path, NULL, 0, 0, &d, err, sizeof err) == DATA_OK) data_tok_destroy(&d);
        break;
    }
    }
    unlink(path);
    return 0;
}
