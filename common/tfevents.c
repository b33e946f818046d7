/* tfevents.c — TensorBoard event files (tfevents.h): CRC-32C, a minimal
 * protobuf encoder for the Event, Summary and HParams messages bf writes,
 * and TFRecord framing into a file. It only writes (never reads an event
 * file back), knows no daemon or job store, and reports failures into the
 * caller's buffer; it never exits or prints. */
#include "common/tfevents.h"
#include "common/errbuf.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TFE_MAX_RECORD (16u << 20) /* one event; ours are far smaller */
#define TFE_MAX_DISCRETE 32        /* distinct numbers listed; more become an interval */

/* ------------------------------------------------------------------ CRC-32C */

static uint32_t crc_table[8][256];
static int crc_ready;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
    crc_ready = 1;
}

uint32_t tfevents_crc32c(uint32_t crc, const void *data, size_t n) {
    if (!crc_ready) crc_init(); /* idempotent: a race writes the same table */
    const unsigned char *p = data;
    uint32_t c = ~crc;
    /* slicing by 8: eight table lookups per 8 bytes */
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
            crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^
            crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
    return ~c;
}

uint32_t tfevents_masked_crc(const void *data, size_t n) {
    uint32_t c = tfevents_crc32c(0, data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ------------------------------------------------------- protobuf encoding */

/* A growing buffer; `bad` sticks once an allocation failed or a cap was hit. */
typedef struct pb {
    unsigned char *p;
    size_t n, cap;
    int bad;
} pb;

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

static void pb_raw(pb *b, const void *d, size_t n) {
    if (b->bad || n == 0) return;
    if (b->n + n > TFE_MAX_RECORD) {
        b->bad = 1;
        return;
    }
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        unsigned char *q = realloc(b->p, cap);
        if (!q) {
            b->bad = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void pb_varint(pb *b, uint64_t v) {
    unsigned char t[10];
    size_t k = 0;
    do {
        t[k] = (unsigned char)(v & 0x7f);
        v >>= 7;
        if (v) t[k] |= 0x80;
        k++;
    } while (v);
    pb_raw(b, t, k);
}

static void pb_key(pb *b, unsigned field, unsigned wt) { pb_varint(b, (uint64_t)field << 3 | wt); }

static void pb_u64le(pb *b, uint64_t v) {
    unsigned char t[8];
    for (int i = 0; i < 8; i++) t[i] = (unsigned char)(v >> (8 * i));
    pb_raw(b, t, 8);
}

static void pb_double(pb *b, unsigned field, double x) {
    uint64_t v;
    memcpy(&v, &x, 8);
    pb_key(b, field, WT_I64);
    pb_u64le(b, v);
}

static void pb_float(pb *b, unsigned field, float x) {
    uint32_t v;
    memcpy(&v, &x, 4);
    unsigned char t[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    pb_key(b, field, WT_I32);
    pb_raw(b, t, 4);
}

static void pb_int(pb *b, unsigned field, int64_t v) {
    pb_key(b, field, WT_VARINT);
    pb_varint(b, (uint64_t)v); /* negative int64: ten bytes, as protobuf does */
}

static void pb_bytes(pb *b, unsigned field, const void *d, size_t n) {
    pb_key(b, field, WT_LEN);
    pb_varint(b, n);
    pb_raw(b, d, n);
}

static void pb_str(pb *b, unsigned field, const char *s) { pb_bytes(b, field, s, strlen(s)); }

/* Appends sub as a length-delimited field and empties it. */
static void pb_msg(pb *b, unsigned field, pb *sub) {
    if (sub->bad) b->bad = 1;
    pb_bytes(b, field, sub->p, sub->n);
    sub->n = 0;
}

static void pb_free(pb *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* Field numbers (tensorboard/compat/proto/event.proto, summary.proto,
 * tensor.proto; tensorboard/plugins/hparams/api.proto, plugin_data.proto;
 * google/protobuf/struct.proto). */
enum {
    EV_WALL_TIME = 1,
    EV_STEP = 2,
    EV_FILE_VERSION = 3,
    EV_SUMMARY = 5,
    SUM_VALUE = 1,
    VAL_TAG = 1,
    VAL_SIMPLE = 2,
    VAL_TENSOR = 8,
    VAL_METADATA = 9,
    META_PLUGIN_DATA = 1,
    PLUGIN_NAME = 1,
    PLUGIN_CONTENT = 2,
    HP_SESSION_START = 3,
    HP_SESSION_END = 4,
    HP_EXPERIMENT = 2,
    EXP_DESCRIPTION = 1,
    EXP_TIME_CREATED = 3,
    EXP_HPARAM_INFOS = 4,
    EXP_METRIC_INFOS = 5,
    EXP_NAME = 6,
    HPI_NAME = 1,
    HPI_TYPE = 4,
    HPI_DOMAIN_DISCRETE = 5,
    HPI_DOMAIN_INTERVAL = 6,
    HPI_DIFFERS = 7,
    IV_MIN = 1,
    IV_MAX = 2,
    MI_NAME = 1,
    MI_DISPLAY_NAME = 3,
    MN_GROUP = 1,
    MN_TAG = 2,
    SSI_HPARAMS = 1,
    SSI_GROUP_NAME = 4,
    SSI_START_TIME = 5,
    SEI_STATUS = 1,
    SEI_END_TIME = 2,
    MAP_KEY = 1,
    MAP_VALUE = 2,
    PV_NUMBER = 2,
    PV_STRING = 3,
    PV_BOOL = 4,
    LV_VALUES = 1
};

enum { DT_UNSET = 0, DT_STRING = 1, DT_BOOL = 2, DT_FLOAT64 = 3 };

/* The Event bytes of one scalar into b. */
static void encode_scalar(pb *b, const char *tag, int64_t step, double wall_time, double value) {
    pb val = {0}, sum = {0};
    pb_str(&val, VAL_TAG, tag);
    pb_float(&val, VAL_SIMPLE, (float)value);
    pb_msg(&sum, SUM_VALUE, &val);
    pb_double(b, EV_WALL_TIME, wall_time);
    pb_int(b, EV_STEP, step);
    pb_msg(b, EV_SUMMARY, &sum);
    pb_free(&val);
    pb_free(&sum);
}

size_t tfevents_encode_scalar(unsigned char *buf, size_t cap, const char *tag, int64_t step,
                              double wall_time, double value) {
    pb b = {0};
    encode_scalar(&b, tag, step, wall_time, value);
    size_t n = b.bad || b.n > cap ? 0 : b.n;
    if (n) memcpy(buf, b.p, n);
    pb_free(&b);
    return n;
}

/* ------------------------------------------------------------------ writer */

struct tfevents {
    FILE *f;
    char path[4096];
    long long size;
    int failed; /* a write failed since the last flush */
};

/* mkdir -p */
static int make_dirs(const char *dir, char *err, size_t errlen) {
    char p[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof p) return bf_fail(err, errlen, "folder name too long: %s", dir);
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0') continue;
        char c = p[i];
        p[i] = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return bf_fail(err, errlen, "mkdir %s: %s", p, strerror(errno));
        p[i] = c;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return bf_fail(err, errlen, "%s is not a folder", dir);
    return 0;
}

static int write_record(tfevents *w, const pb *b, char *err, size_t errlen) {
    if (b->bad) return bf_fail(err, errlen, "%s: event too large or out of memory", w->path);
    unsigned char head[12];
    uint64_t len = b->n;
    for (int i = 0; i < 8; i++) head[i] = (unsigned char)(len >> (8 * i));
    uint32_t hc = tfevents_masked_crc(head, 8), dc = tfevents_masked_crc(b->p, b->n);
    for (int i = 0; i < 4; i++) head[8 + i] = (unsigned char)(hc >> (8 * i));
    unsigned char foot[4] = {(unsigned char)dc, (unsigned char)(dc >> 8), (unsigned char)(dc >> 16),
                             (unsigned char)(dc >> 24)};
    if (fwrite(head, 1, 12, w->f) != 12 || fwrite(b->p, 1, b->n, w->f) != b->n ||
        fwrite(foot, 1, 4, w->f) != 4) {
        w->failed = 1;
        return bf_fail(err, errlen, "writing %s: %s", w->path, strerror(errno));
    }
    w->size += 16 + (long long)b->n;
    return 0;
}

int tfevents_create(const char *dir, double wall_time, tfevents **out, char *err, size_t errlen) {
    *out = NULL;
    if (make_dirs(dir, err, errlen)) return -1;
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    tfevents *w = calloc(1, sizeof *w);
    if (!w) return bf_fail(err, errlen, "out of memory");
    int fd = -1;
    for (int k = 1; k <= 100 && fd < 0; k++) {
        char suffix[16] = "";
        if (k > 1) snprintf(suffix, sizeof suffix, ".%d", k);
        int n = snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s%s", dir,
                         (long long)wall_time, host, suffix);
        if (n < 0 || (size_t)n >= sizeof w->path) {
            free(w);
            return bf_fail(err, errlen, "event file name too long in %s", dir);
        }
        fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EEXIST) {
            int rc = bf_fail(err, errlen, "cannot create %s: %s", w->path, strerror(errno));
            free(w);
            return rc;
        }
    }
    if (fd < 0 || !(w->f = fdopen(fd, "wb"))) {
        if (fd >= 0) close(fd);
        free(w);
        return bf_fail(err, errlen, "cannot create an event file in %s", dir);
    }
    pb b = {0};
    pb_double(&b, EV_WALL_TIME, wall_time);
    pb_str(&b, EV_FILE_VERSION, "brain.Event:2");
    int rc = write_record(w, &b, err, errlen);
    pb_free(&b);
    if (rc || tfevents_flush(w, err, errlen)) {
        char e2[8];
        tfevents_close(&w, e2, sizeof e2);
        return -1;
    }
    *out = w;
    return 0;
}

int tfevents_reopen(const char *path, long long size, tfevents **out, char *err, size_t errlen) {
    *out = NULL;
    tfevents *w = calloc(1, sizeof *w);
    if (!w) return bf_fail(err, errlen, "out of memory");
    if (strlen(path) >= sizeof w->path) {
        free(w);
        return bf_fail(err, errlen, "path too long: %s", path);
    }
    snprintf(w->path, sizeof w->path, "%s", path);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    struct stat st = {0};
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size < size || size < 0 ||
        ftruncate(fd, (off_t)size) != 0 || lseek(fd, 0, SEEK_END) != (off_t)size ||
        !(w->f = fdopen(fd, "ab"))) {
        int rc = fd >= 0 && st.st_size < size
                     ? bf_fail(err, errlen, "%s is shorter (%lld bytes) than recorded (%lld)", path,
                               (long long)st.st_size, size)
                     : bf_fail(err, errlen, "cannot reopen %s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        free(w);
        return rc;
    }
    w->size = size;
    *out = w;
    return 0;
}

int tfevents_flush(tfevents *w, char *err, size_t errlen) {
    int bad = w->failed || fflush(w->f) != 0 || ferror(w->f);
    w->failed = 0;
    if (bad) return bf_fail(err, errlen, "writing %s failed", w->path);
    return 0;
}

int tfevents_close(tfevents **wp, char *err, size_t errlen) {
    tfevents *w = *wp;
    if (!w) return 0;
    *wp = NULL;
    int rc = w->failed ? bf_fail(err, errlen, "writing %s failed", w->path) : 0;
    if (fclose(w->f) != 0 && !rc) rc = bf_fail(err, errlen, "closing %s failed", w->path);
    free(w);
    return rc;
}

const char *tfevents_path(const tfevents *w) { return w->path; }
long long tfevents_size(const tfevents *w) { return w->size; }

int tfevents_scalar(tfevents *w, const char *tag, int64_t step, double wall_time, double value,
                    char *err, size_t errlen) {
    pb b = {0};
    encode_scalar(&b, tag, step, wall_time, value);
    int rc = write_record(w, &b, err, errlen);
    pb_free(&b);
    return rc;
}

/* ------------------------------------------------------------------ HParams */

/* An event holding one summary value of the hparams plugin: tag, and the
 * HParamsPluginData whose `field` is data. */
static int write_plugin_event(tfevents *w, const char *tag, unsigned field, pb *data,
                              double wall_time, char *err, size_t errlen) {
    static const unsigned char null_tensor[] = {0x08, 0x01, 0x12, 0x02, 0x12, 0x00};
    pb hp = {0}, plugin = {0}, meta = {0}, val = {0}, sum = {0}, ev = {0};
    pb_msg(&hp, field, data); /* version 0: the default, not written */
    pb_str(&plugin, PLUGIN_NAME, "hparams");
    pb_msg(&plugin, PLUGIN_CONTENT, &hp);
    pb_msg(&meta, META_PLUGIN_DATA, &plugin);
    pb_str(&val, VAL_TAG, tag);
    pb_msg(&val, VAL_METADATA, &meta);
    pb_bytes(&val, VAL_TENSOR, null_tensor, sizeof null_tensor);
    pb_msg(&sum, SUM_VALUE, &val);
    pb_double(&ev, EV_WALL_TIME, wall_time);
    pb_msg(&ev, EV_SUMMARY, &sum);
    int rc = write_record(w, &ev, err, errlen);
    pb *all[] = {&hp, &plugin, &meta, &val, &sum, &ev};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) pb_free(all[i]);
    return rc;
}

/* Lists and objects become their compact JSON text; NULL when out of memory. */
static char *value_text(json_t *v) {
    if (json_is_string(v)) return strdup(json_string_value(v));
    return json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(15));
}

/* A google.protobuf.Value of v into b (type: DT_* the hparam was declared
 * with, DT_UNSET: v's own). */
static void encode_value(pb *b, json_t *v, int type) {
    if (type == DT_UNSET) type = json_is_number(v) ? DT_FLOAT64 : json_is_boolean(v) ? DT_BOOL : 0;
    if (type == DT_FLOAT64 && json_is_number(v)) {
        pb_double(b, PV_NUMBER, json_number_value(v));
    } else if (type == DT_BOOL && json_is_boolean(v)) {
        pb_key(b, PV_BOOL, WT_VARINT);
        pb_varint(b, json_is_true(v) ? 1 : 0);
    } else {
        char *t = value_text(v);
        if (!t) {
            b->bad = 1;
            return;
        }
        pb_str(b, PV_STRING, t);
        free(t);
    }
}

/* The swept parameters gathered so far: each key in first-seen order with
 * its distinct values (at most 10,000 a key), and the set of (key, value)
 * pairs seen, so a value is looked up once, not compared with every value
 * before it (100,000 trials of 10,000 seeds took seconds that way). */
struct tfevents_hparams {
    json_t *keys;  /* key -> [values] */
    json_t *order; /* [keys] */
    json_t *seen;  /* "key\x1fvalue text" -> true */
};

tfevents_hparams *tfevents_hparams_new(void) {
    tfevents_hparams *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->keys = json_object();
    h->order = json_array();
    h->seen = json_object();
    if (!h->keys || !h->order || !h->seen) tfevents_hparams_free(&h);
    return h;
}

void tfevents_hparams_free(tfevents_hparams **hp) {
    tfevents_hparams *h = *hp;
    if (!h) return;
    *hp = NULL;
    json_decref(h->keys);
    json_decref(h->order);
    json_decref(h->seen);
    free(h);
}

/* The text that names v among the values of key in h->seen: numbers by
 * their value (1 and 1.0 are one value), anything
 * else by its compact JSON with sorted keys. NULL when out of memory. */
static char *seen_key(const char *key, json_t *v) {
    char *text = NULL;
    if (json_is_number(v)) {
        double x = json_number_value(v);
        char num[40];
        snprintf(num, sizeof num, "n%.17g", x == 0 ? 0.0 : x);
        text = strdup(num);
    } else {
        char *dump = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
        if (dump) {
            size_t n = strlen(dump) + 2;
            text = malloc(n);
            if (text) snprintf(text, n, "j%s", dump);
            free(dump);
        }
    }
    if (!text) return NULL;
    size_t n = strlen(key) + strlen(text) + 2;
    char *out = malloc(n);
    if (out) snprintf(out, n, "%s\x1f%s", key, text);
    free(text);
    return out;
}

void tfevents_hparams_add(tfevents_hparams *h, json_t *params) {
    const char *k;
    json_t *v;
    json_object_foreach(params, k, v) {
        json_t *vals = json_object_get(h->keys, k);
        if (!vals) {
            json_object_set_new(h->keys, k, json_array());
            json_array_append_new(h->order, json_string(k));
            vals = json_object_get(h->keys, k);
        }
        if (!vals || json_array_size(vals) >= 10000) continue;
        char *sk = seen_key(k, v);
        if (!sk || json_object_get(h->seen, sk)) {
            free(sk);
            continue;
        }
        json_object_set_new(h->seen, sk, json_true());
        json_array_append(vals, v);
        free(sk);
    }
}

int tfevents_experiment(tfevents *w, const char *name, json_t *trials_params,
                        const char *const *metrics, size_t n_metrics, double wall_time, char *err,
                        size_t errlen) {
    tfevents_hparams *h = tfevents_hparams_new();
    if (!h) return bf_fail(err, errlen, "tfevents_experiment: out of memory");
    size_t i;
    json_t *params;
    json_array_foreach(trials_params, i, params) tfevents_hparams_add(h, params);
    int rc = tfevents_experiment_write(w, name, h, metrics, n_metrics, wall_time, err, errlen);
    tfevents_hparams_free(&h);
    return rc;
}

int tfevents_experiment_write(tfevents *w, const char *name, const tfevents_hparams *h,
                              const char *const *metrics, size_t n_metrics, double wall_time,
                              char *err, size_t errlen) {
    pb exp = {0}, info = {0}, list = {0}, val = {0}, mi = {0}, mn = {0};
    pb_str(&exp, EXP_NAME, name);
    pb_str(&exp, EXP_DESCRIPTION, name);
    pb_double(&exp, EXP_TIME_CREATED, wall_time);
    json_t *keys = h->keys, *order = h->order;
    size_t i;
    json_t *kj;
    json_array_foreach(order, i, kj) {
        const char *k = json_string_value(kj);
        json_t *vals = json_object_get(keys, k);
        int all_num = 1, all_bool = 1;
        size_t j;
        json_t *v;
        double lo = INFINITY, hi = -INFINITY;
        json_array_foreach(vals, j, v) {
            if (!json_is_number(v)) all_num = 0;
            if (!json_is_boolean(v)) all_bool = 0;
            if (json_is_number(v)) {
                lo = fmin(lo, json_number_value(v));
                hi = fmax(hi, json_number_value(v));
            }
        }
        int type = all_num ? DT_FLOAT64 : all_bool ? DT_BOOL : DT_STRING;
        pb_str(&info, HPI_NAME, k);
        pb_key(&info, HPI_TYPE, WT_VARINT);
        pb_varint(&info, (uint64_t)type);
        if (json_array_size(vals) > 1) { /* TensorBoard lists differing hparams first */
            pb_key(&info, HPI_DIFFERS, WT_VARINT);
            pb_varint(&info, 1);
        }
        if (type == DT_FLOAT64 && json_array_size(vals) > TFE_MAX_DISCRETE) {
            pb iv = {0};
            pb_double(&iv, IV_MIN, lo);
            pb_double(&iv, IV_MAX, hi);
            pb_msg(&info, HPI_DOMAIN_INTERVAL, &iv);
            pb_free(&iv);
        } else {
            json_array_foreach(vals, j, v) {
                encode_value(&val, v, type);
                pb_msg(&list, LV_VALUES, &val);
            }
            pb_msg(&info, HPI_DOMAIN_DISCRETE, &list);
        }
        pb_msg(&exp, EXP_HPARAM_INFOS, &info);
    }
    for (size_t m = 0; m < n_metrics; m++) {
        pb_str(&mn, MN_GROUP, "");
        pb_str(&mn, MN_TAG, metrics[m]);
        pb_msg(&mi, MI_NAME, &mn);
        pb_str(&mi, MI_DISPLAY_NAME, metrics[m]);
        pb_msg(&exp, EXP_METRIC_INFOS, &mi);
    }
    int rc =
        write_plugin_event(w, "_hparams_/experiment", HP_EXPERIMENT, &exp, wall_time, err, errlen);
    pb *all[] = {&exp, &info, &list, &val, &mi, &mn};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) pb_free(all[k]);
    return rc;
}

int tfevents_session_start(tfevents *w, json_t *params, const char *group, double wall_time,
                           char *err, size_t errlen) {
    pb ssi = {0}, entry = {0}, val = {0};
    const char *k;
    json_t *v;
    json_object_foreach(params, k, v) {
        pb_str(&entry, MAP_KEY, k);
        encode_value(&val, v, DT_UNSET);
        pb_msg(&entry, MAP_VALUE, &val);
        pb_msg(&ssi, SSI_HPARAMS, &entry);
    }
    if (group && *group) pb_str(&ssi, SSI_GROUP_NAME, group);
    pb_double(&ssi, SSI_START_TIME, wall_time);
    int rc = write_plugin_event(w, "_hparams_/session_start_info", HP_SESSION_START, &ssi,
                                wall_time, err, errlen);
    pb_free(&ssi);
    pb_free(&entry);
    pb_free(&val);
    return rc;
}

int tfevents_session_end(tfevents *w, tfevents_status status, double wall_time, char *err,
                         size_t errlen) {
    pb sei = {0};
    pb_key(&sei, SEI_STATUS, WT_VARINT);
    pb_varint(&sei, (uint64_t)status);
    pb_double(&sei, SEI_END_TIME, wall_time);
    int rc = write_plugin_event(w, "_hparams_/session_end_info", HP_SESSION_END, &sei, wall_time,
                                err, errlen);
    pb_free(&sei);
    return rc;
}

int tfevents_job_dir(char *buf, size_t len, const char *base, const char *job_name, int64_t job) {
    char name[128];
    size_t k = 0;
    for (const char *c = job_name ? job_name : ""; *c && k + 1 < sizeof name; c++) {
        char ch = *c;
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '-' || ch == '_' || ch == '.';
        name[k++] = ok ? ch : '_';
    }
    name[k] = '\0';
    if (k == 0 || strspn(name, ".") == k) snprintf(name, sizeof name, "job");
    int n = snprintf(buf, len, "%s/%s-%lld", base, name, (long long)job);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}
