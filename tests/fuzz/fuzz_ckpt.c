/* fuzz_ckpt — the checkpoint readers on a file of fuzzed bytes: byte 0
 * picks the safetensors reader (header, then every tensor and the data
 * checksum) or the older checkpoint.bin reader. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "worker/io/ckpt.h"
#include "worker/io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *path = fuzz_file("ckpt", data + 1, size - 1);
    char err[1024];
    if (data[0] & 1) {
        ckpt_state s;
        if (ckpt_read(path, &s, err, sizeof err) == 0) ckpt_free(&s);
    } else {
        st_file f;
        if (st_open(&f, path, err, sizeof err) == 0) {
            for (int i = 0; i < f.n; i++) {
                if (f.t[i].numel > (1u << 22)) continue; /* the file bounds it; keep runs fast */
                float *out = malloc((f.t[i].numel ? f.t[i].numel : 1) * sizeof(float));
                if (out) (void)st_read_f32(&f, i, out, err, sizeof err);
                free(out);
            }
            uint64_t h;
            (void)st_data_fnv(&f, &h, err, sizeof err);
            (void)st_find(&f, "wte");
            st_close(&f);
        }
    }
    unlink(path);
    return 0;
}
