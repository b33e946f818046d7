/* protocol/proto: envelope round trip over a real ZeroMQ pair, and the
 * validation of points, lines, names and tokens. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include <zmq.h>

#include "protocol/proto.h"

Test(proto, envelope_round_trip_and_errors) {
    void *ctx = zmq_ctx_new();
    void *r = zmq_socket(ctx, ZMQ_ROUTER), *d = zmq_socket(ctx, ZMQ_DEALER);
    cr_assert_eq(zmq_bind(r, "inproc://proto-test"), 0);
    cr_assert_eq(zmq_connect(d, "inproc://proto-test"), 0);
    char err[256];
    proto_msg route = {.has_req = 1, .req = 42};
    json_t *b = json_pack("{s:i}", "x", 7);
    cr_assert_eq(proto_send(d, &route, NULL, "status", b, 0, err, sizeof err), 0, "%s", err);
    json_decref(b);
    proto_msg m;
    memset(&m, 0, sizeof m);
    proto_code code;
    cr_assert_eq(proto_recv(r, 0, PROTO_RECV_ROUTED, &m, &code, err, sizeof err), 0);
    cr_assert_eq(code, PROTO_OK, "%s", err);
    cr_assert_str_eq(m.type, "status");
    cr_assert(m.has_req && m.req == 42);
    cr_assert_gt(m.ident_len, 0);
    cr_assert_eq(json_integer_value(json_object_get(m.body, "x")), 7);
    /* reply to the routing id */
    cr_assert_eq(proto_send_error(r, &m, PROTO_E_NOT_FOUND, "no job 9", 0, err, sizeof err), 0);
    proto_msg rep;
    memset(&rep, 0, sizeof rep);
    cr_assert_eq(proto_recv(d, 0, 0, &rep, &code, err, sizeof err), 0);
    cr_assert_str_eq(rep.type, "error");
    cr_assert_str_eq(json_string_value(json_object_get(rep.body, "code")), "not_found");
    cr_assert_eq(rep.req, 42);
    /* wrong version, with the req still read for the error reply */
    zmq_send(d, "bf", 2, ZMQ_SNDMORE);
    zmq_send(d, "7", 1, ZMQ_SNDMORE);
    zmq_send(d, "status", 6, ZMQ_SNDMORE);
    zmq_send(d, "{\"req\": 5}", 10, 0);
    cr_assert_eq(proto_recv(r, 0, PROTO_RECV_ROUTED, &m, &code, err, sizeof err), 0);
    cr_assert_eq(code, PROTO_E_VERSION);
    cr_assert(m.has_req && m.req == 5);
    /* ten frames: drained, one error */
    for (int i = 0; i < 10; i++) zmq_send(d, "x", 1, i < 9 ? ZMQ_SNDMORE : 0);
    cr_assert_eq(proto_recv(r, 0, PROTO_RECV_ROUTED, &m, &code, err, sizeof err), 0);
    cr_assert_eq(code, PROTO_E_FRAMES);
    cr_assert_eq(proto_recv(r, ZMQ_DONTWAIT, PROTO_RECV_ROUTED, &m, &code, err, sizeof err), 1);
    proto_msg_clear(&m);
    proto_msg_clear(&rep);
    zmq_close(r);
    zmq_close(d);
    zmq_ctx_term(ctx);
}

Test(proto, points_are_validated) {
    char err[256];
    proto_point *p;
    size_t n;
    json_error_t je;
    json_t *ok = json_loads("{\"points\": [{\"seq\": 3, \"step\": 10, \"time\": 1.5, \"values\": "
                            "{\"train/loss\": 2.5, \"val/acc\": null}}, {\"seq\": 4, \"step\": 15, "
                            "\"time\": 2, \"values\": {}}]}",
                            0, &je);
    cr_assert_eq(proto_parse_points(ok, 10, &p, &n, err, sizeof err), 0, "%s", err);
    cr_assert_eq(n, 2);
    cr_assert_eq(p[0].seq, 3);
    cr_assert_eq(p[0].n, 2);
    cr_assert_str_eq(p[0].name[0], "train/loss");
    cr_assert_float_eq(p[0].value[0], 2.5, 0);
    cr_assert(p[0].is_null[1]);
    json_t *back = proto_point_json(&p[0], 0);
    cr_assert_eq(json_object_size(json_object_get(back, "values")), 1, "nulls left out");
    json_decref(back);
    free(p);
    json_decref(ok);
    const char *bad[] = {
        "{\"points\": []}",
        "{\"points\": [{\"seq\": 0, \"step\": 1, \"time\": 1, \"values\": {}}]}",
        "{\"points\": [{\"seq\": 1, \"step\": 1, \"time\": 1, \"values\": {\"a b\": 1}}]}",
        "{\"points\": [{\"seq\": 1, \"step\": 1, \"time\": 1, \"values\": {\"a\": \"x\"}}]}",
        "{\"points\": [{\"seq\": 1, \"step\": -1, \"time\": 1, \"values\": {}}]}",
        "{\"points\": [{\"seq\": 1, \"step\": 1, \"time\": 1, \"values\": {}},"
        " {\"seq\": 3, \"step\": 1, \"time\": 1, \"values\": {}}]}",
        "{\"points\": 5}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *b = json_loads(bad[i], 0, &je);
        cr_assert(b);
        cr_assert_eq(proto_parse_points(b, 10, &p, &n, err, sizeof err), -1, "accepted %s", bad[i]);
        json_decref(b);
    }
}

/* jansson's allocations, counted (json_set_alloc_funcs) */
static long g_allocs;
static void *count_malloc(size_t n) {
    g_allocs++;
    return malloc(n);
}

/* A message's body is parsed once: decoding it allocates what one parse
 * of the body does (it was parsed twice, once for its req). A body with a
 * repeated key is refused and its req still found for the error reply. */
Test(proto, a_body_is_parsed_once) {
    json_set_alloc_funcs(count_malloc, free);
    const char *body = "{\"req\": 7, \"trial\": 3, \"points\": [{\"seq\": 1, \"step\": 2, "
                       "\"time\": 3, \"values\": {\"train/loss\": 1.5, \"lr\": 0.1}}]}";
    json_error_t je;
    g_allocs = 0;
    json_t *once = json_loadb(body, strlen(body), JSON_REJECT_DUPLICATES, &je);
    long one_parse = g_allocs;
    json_decref(once);
    proto_frame fr[4] = {{"bf", 2}, {"1", 1}, {"metrics", 7}, {body, strlen(body)}};
    proto_msg m;
    memset(&m, 0, sizeof m);
    proto_code code;
    char err[512];
    g_allocs = 0;
    proto_decode(fr, 4, 4, 0, &m, &code, err, sizeof err);
    cr_assert_eq(code, PROTO_OK, "%s", err);
    cr_assert_eq(m.req, 7);
    cr_expect_eq(g_allocs, one_parse, "decoding allocated %ld times, one parse %ld", g_allocs,
                 one_parse);
    proto_msg_clear(&m);
    const char *dup = "{\"req\": 9, \"a\": 1, \"a\": 2}";
    fr[3] = (proto_frame){dup, strlen(dup)};
    proto_decode(fr, 4, 4, 0, &m, &code, err, sizeof err);
    cr_assert_eq(code, PROTO_E_JSON);
    cr_assert(m.has_req && m.req == 9, "the error reply lost the req");
    proto_msg_clear(&m);
    json_set_alloc_funcs(malloc, free);
}

Test(proto, jsonl_lines_names_tokens) {
    proto_point p;
    json_t *h;
    const char *line = "{\"step\": 5, \"time\": 17.25, \"train/loss\": 1.5, \"x\": null}\n";
    cr_assert_eq(proto_parse_jsonl_line(line, strlen(line), 9, &p, &h), 0);
    cr_assert_eq(p.seq, 9);
    cr_assert_eq(p.step, 5);
    cr_assert_eq(p.n, 2);
    cr_assert(p.is_null[1]);
    json_decref(h);
    cr_assert_eq(proto_parse_jsonl_line("{\"step\": 5, \"ti", 15, 1, &p, &h), -1);
    json_decref(h);
    cr_assert(proto_name_ok("val/acc"));
    cr_assert(!proto_name_ok(""));
    cr_assert(!proto_name_ok("a\"b"));
    char longname[80];
    memset(longname, 'a', 64);
    longname[64] = '\0';
    cr_assert(!proto_name_ok(longname));
    cr_assert(proto_type_ok("submit", 6));
    cr_assert(!proto_type_ok("Submit", 6));
    char tok[33], tok2[33], err[128];
    cr_assert_eq(proto_random_token(tok, err, sizeof err), 0);
    cr_assert_eq(proto_random_token(tok2, err, sizeof err), 0);
    cr_assert_eq(strlen(tok), 32);
    cr_assert_str_neq(tok, tok2);
    json_t *b = json_pack("{s:s}", "token", tok);
    char out[33];
    cr_assert_eq(proto_get_token(b, "token", out, err, sizeof err), 0);
    json_decref(b);
    b = json_pack("{s:s}", "token", "ABC");
    cr_assert_eq(proto_get_token(b, "token", out, err, sizeof err), -1);
    json_decref(b);
    long long v;
    b = json_pack("{s:f}", "n", 1.5);
    cr_assert_eq(proto_get_int(b, "n", 1, 0, 10, 0, &v, err, sizeof err), -1);
    json_decref(b);
}
