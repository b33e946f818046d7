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

Test(proto, points_are_validated_and_copied_out) {
    char err[256];
    proto_points ps;
    json_error_t je;
    json_t *ok = json_loads("{\"points\": [{\"seq\": 3, \"step\": 10, \"time\": 1.5, \"values\": "
                            "{\"train/loss\": 2.5, \"val/acc\": null}}, {\"seq\": 4, \"step\": 15, "
                            "\"time\": 2, \"values\": {}}, {\"seq\": 5, \"step\": 20, \"time\": 3, "
                            "\"values\": {\"train/loss\": 2.25, \"lr\": 0.5}}]}",
                            0, &je);
    cr_assert_eq(proto_points_parse(ok, 10, &ps, err, sizeof err), 0, "%s", err);
    json_decref(ok); /* nothing of the body is kept */
    cr_assert_eq(ps.n, 3);
    cr_assert_eq(ps.pt[0].seq, 3);
    cr_assert_eq(ps.pt[0].step, 10);
    cr_assert_float_eq(ps.pt[0].time, 1.5, 0);
    cr_assert_eq(ps.pt[0].nv, 1, "the null is left out");
    cr_assert_str_eq(ps.names + ps.val[ps.pt[0].first].name, "train/loss");
    cr_assert_float_eq(ps.val[ps.pt[0].first].value, 2.5, 0);
    cr_assert_eq(ps.pt[1].nv, 0);
    cr_assert_eq(ps.pt[2].nv, 2);
    cr_assert_str_eq(ps.names + ps.val[ps.pt[2].first + 1].name, "lr");
    cr_assert_float_eq(ps.val[ps.pt[2].first + 1].value, 0.5, 0);
    cr_assert_eq(ps.n_val, 3);
    cr_assert_geq(ps.bytes, 3 * sizeof(proto_pt) + 3 * sizeof(proto_val));
    json_t *back = proto_points_json(&ps, 2);
    cr_assert_eq(json_integer_value(json_object_get(back, "seq")), 5);
    cr_assert_eq(json_object_size(json_object_get(back, "values")), 2);
    cr_assert_float_eq(json_real_value(json_object_get(json_object_get(back, "values"), "lr")), 0.5,
                       0);
    json_decref(back);
    proto_points_free(&ps);
    cr_assert_eq(ps.n, 0);
    const char *bad[] = {
        "{\"points\": []}",
        "{\"points\": [{\"seq\": 0, \"step\": 1, \"time\": 1, \"values\": {}}]}",
        "{\"points\": [{\"seq\": 1, \"step\": 1, \"time\": 1, \"values\": {\"a b\": 1}}]}",
        "{\"points\": [{\"seq\": 1, \"step\": 1, \"time\": 1, \"values\": {\"a\": \"x\"}}]}",
        "{\"points\": [{\"seq\": 1, \"step\": -1, \"time\": 1, \"values\": {}}]}",
        "{\"points\": [{\"seq\": 1, \"step\": 1, \"time\": 1, \"values\": {}},"
        " {\"seq\": 3, \"step\": 1, \"time\": 1, \"values\": {}}]}",
        "{\"points\": 5}",
        "{\"points\": [{\"seq\": 1, \"step\": 1, \"time\": 1, \"values\": {\"a\": 1}}, 7]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *b = json_loads(bad[i], 0, &je);
        cr_assert(b);
        cr_assert_eq(proto_points_parse(b, 10, &ps, err, sizeof err), -1, "accepted %s", bad[i]);
        cr_assert_eq(ps.n, 0);
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
