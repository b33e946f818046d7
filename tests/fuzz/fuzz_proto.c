/* fuzz_proto — the protocol decoder (proto_decode: frames -> message, as
 * bfd's two ROUTERs and bfctl read them) and the field validators bfd then
 * applies to a body: the metrics points, the worker fields, a metrics.jsonl
 * line. Input: byte 0 picks the leading-frame mode; the rest is split into
 * frames at each 0x1F byte (at most 12 frames, 8 kept, as proto_recv). */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int mode = data[0] & 3;
    proto_frame fr[PROTO_DECODE_FRAMES];
    int total = 0, kept = 0;
    size_t start = 1;
    for (size_t i = 1; i <= size && total < 12; i++) {
        if (i == size || data[i] == 0x1F) {
            if (kept < PROTO_DECODE_FRAMES) fr[kept++] = (proto_frame){data + start, i - start};
            total++;
            start = i + 1;
        }
    }
    proto_msg m;
    memset(&m, 0, sizeof m);
    proto_code code;
    char err[1024];
    proto_decode(fr, kept, total, mode, &m, &code, err, sizeof err);
    if (code == PROTO_OK && m.body) {
        long long v;
        double x;
        const char *s;
        char tok[PROTO_TOKEN_LEN + 1];
        (void)proto_get_int(m.body, "trial", 1, 1, PROTO_MAX_INT, 0, &v, err, sizeof err);
        (void)proto_get_int(m.body, "after", 0, 0, PROTO_MAX_INT, 0, &v, err, sizeof err);
        (void)proto_get_num(m.body, "time", 0, 0, &x, err, sizeof err);
        (void)proto_get_str(m.body, "sweep", 1, PROTO_MAX_TEXT, &s, err, sizeof err);
        (void)proto_get_str(m.body, "host", 1, PROTO_MAX_PATH, &s, err, sizeof err);
        (void)proto_get_token(m.body, "token", tok, err, sizeof err);
        proto_points ps;
        if (proto_points_parse(m.body, PROTO_MAX_POINTS, &ps, err, sizeof err) == 0) {
            for (size_t i = 0; i < ps.n; i++) {
                json_t *o = proto_points_json(&ps, i);
                char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
                free(t);
                json_decref(o);
            }
            proto_points_free(&ps);
        }
    }
    proto_msg_clear(&m);
    /* the worker reads its own metrics.jsonl back line by line */
    proto_point p;
    json_t *holder = NULL;
    (void)proto_parse_jsonl_line((const char *)data, size, 1, &p, &holder);
    json_decref(holder);
    return 0;
}
