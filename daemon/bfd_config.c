/* bfd_config.c — $BF_HOME/bfd.yaml, the inventory and launcher settings.
 * One table (bfd_keys below) says every key: its kind, range or valid
 * values, default, where it goes in bfd_config and its help line. One loop
 * reads the file against it (each error PATH:LINE:COL, the key, what would
 * be valid; an unknown key names the nearest), and `bfd --help` prints it
 * (bfd_config_help). It only reads the file into a bfd_config; it opens no
 * socket and touches no store. A new key is one row here. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>
#include <arpa/inet.h>

#include "daemon/bfd.h"
#include "common/cfg.h"
#include "common/errbuf.h"
#include "common/opts.h"

/* A value as a setter sees it: the scalar's text (NULL for a list), and for
 * a list (gpus) the document and node its items are read from. */
typedef struct bfd_val {
    const char *s;
    yaml_document_t *doc;
    yaml_node_t *node;
    yaml_node_t *at; /* set by a setter: the node its error is about (a list item) */
} bfd_val;

struct bfd_key;
typedef int (*bfd_setter)(const struct bfd_key *k, bfd_config *c, bfd_val *v, char *why, size_t n);

/* One key of bfd.yaml. `def` is the default as the text a user would write,
 * applied through the same setter; NULL when bfd works it out at start
 * (`def_doc` says how). */
typedef struct bfd_key {
    const char *key;
    bfd_setter set;
    double lo, hi;       /* numbers: the inclusive range */
    const char *valid;   /* names: the valid values, '|' between */
    size_t off, cap;     /* where it goes in bfd_config, and its size */
    const char *def;     /* the default as text, or NULL */
    const char *shape;   /* how a value looks, for --help */
    const char *def_doc; /* the default, for --help, when def does not say it */
    const char *help;
} bfd_key;

/* What a node is, for "got ..." in messages. */
static const char *node_kind(const yaml_node_t *v) {
    return v->type == YAML_SEQUENCE_NODE  ? "a list"
           : v->type == YAML_MAPPING_NODE ? "a mapping"
                                          : "a scalar";
}

/* x from text s in [lo, hi], or -1 with why naming what (a key or "a gpu index"). */
static int number(const char *what, const char *s, double lo, double hi, double *x, char *why,
                  size_t n) {
    char *end;
    *x = s ? strtod(s, &end) : 0;
    if (!s || end == s || *end || !(*x >= lo && *x <= hi))
        return bf_fail(why, n, "%s must be a number in [%g, %g], got %s%s%s%s", what, lo, hi,
                       s ? "a scalar" : "a list", s ? " '" : "", s ? s : "", s ? "'" : "");
    return 0;
}

#define FIELD(k, c, type) ((type *)((char *)(c) + (k)->off))

static int set_double(const bfd_key *k, bfd_config *c, bfd_val *v, char *why, size_t n) {
    return number(k->key, v->s, k->lo, k->hi, FIELD(k, c, double), why, n);
}

static int set_int(const bfd_key *k, bfd_config *c, bfd_val *v, char *why, size_t n) {
    double x;
    if (number(k->key, v->s, k->lo, k->hi, &x, why, n)) return -1;
    *FIELD(k, c, int) = (int)x;
    return 0;
}

/* One of k->valid ("local|slurm|remote"); the message lists them as
 * "local, slurm or remote". */
static int set_choice(const bfd_key *k, bfd_config *c, bfd_val *v, char *why, size_t n) {
    const char *p = k->valid;
    size_t len = v->s ? strlen(v->s) : 0;
    while (v->s) {
        size_t w = strcspn(p, "|");
        if (w == len && !strncmp(p, v->s, w) && len < k->cap) {
            snprintf(FIELD(k, c, char), k->cap, "%s", v->s);
            return 0;
        }
        if (!p[w]) break;
        p += w + 1;
    }
    char list[256] = "";
    for (p = k->valid; *p;) {
        size_t w = strcspn(p, "|"), at = strlen(list);
        const char *sep = !at ? "" : strchr(p, '|') ? ", " : " or ";
        snprintf(list + at, sizeof list - at, "%s%.*s", sep, (int)w, p);
        p += w + (p[w] == '|');
    }
    return bf_fail(why, n, "%s must be %s", k->key, list);
}

static int set_bool(const bfd_key *k, bfd_config *c, bfd_val *v, char *why, size_t n) {
    const char *s = v->s;
    int on = s && (!strcmp(s, "true") || !strcmp(s, "yes") || !strcmp(s, "on"));
    int off = s && (!strcmp(s, "false") || !strcmp(s, "no") || !strcmp(s, "off"));
    *FIELD(k, c, int) = on;
    return on || off ? 0 : bf_fail(why, n, "%s must be true or false", k->key);
}

/* A name without spaces or quotes (a Slurm partition, an MPI type). */
static int set_name(const bfd_key *k, bfd_config *c, bfd_val *v, char *why, size_t n) {
    if (!v->s || strlen(v->s) >= k->cap || strpbrk(v->s, " \t\n'\""))
        return bf_fail(why, n, "%s must be a name without spaces (< %zu chars)", k->key, k->cap);
    snprintf(FIELD(k, c, char), k->cap, "%s", v->s);
    return 0;
}

static int set_program(const bfd_key *k, bfd_config *c, bfd_val *v, char *why, size_t n) {
    if (!v->s || !*v->s || strlen(v->s) >= k->cap)
        return bf_fail(why, n, "%s must be a program path", k->key);
    snprintf(FIELD(k, c, char), k->cap, "%s", v->s);
    return 0;
}

/* A file's path (read when it is used, where its content is checked). */
static int set_file(const bfd_key *k, bfd_config *c, bfd_val *v, char *why, size_t n) {
    if (!v->s || !*v->s || strlen(v->s) >= k->cap)
        return bf_fail(why, n, "%s must be a file path (< %zu chars)", k->key, k->cap);
    snprintf(FIELD(k, c, char), k->cap, "%s", v->s);
    return 0;
}

/* slurm_bin: the folder of sbatch, srun, scontrol and scancel. */
static int set_slurm_bin(const bfd_key *k, bfd_config *c, bfd_val *v, char *why, size_t n) {
    if (!v->s || !*v->s || strlen(v->s) > 500)
        return bf_fail(why, n, "%s must be a folder path", k->key);
    snprintf(c->sbatch, sizeof c->sbatch, "%s/sbatch", v->s);
    snprintf(c->srun, sizeof c->srun, "%s/srun", v->s);
    snprintf(c->scontrol, sizeof c->scontrol, "%s/scontrol", v->s);
    snprintf(c->scancel, sizeof c->scancel, "%s/scancel", v->s);
    return 0;
}

/* gpus: a count (indices 0..N-1) or a list of CUDA indices. */
static int set_gpus(const bfd_key *k, bfd_config *c, bfd_val *v, char *why, size_t n) {
    double x;
    if (v->s) {
        if (number(k->key, v->s, k->lo, k->hi, &x, why, n)) return -1;
        c->n_gpus = (int)x;
        for (int i = 0; i < c->n_gpus; i++) c->gpus[i] = i;
        return 0;
    }
    c->n_gpus = 0;
    for (yaml_node_item_t *it = v->node->data.sequence.items.start;
         it < v->node->data.sequence.items.top; it++) {
        if (c->n_gpus == BFD_MAX_GPUS) return bf_fail(why, n, "at most %d gpus", BFD_MAX_GPUS);
        yaml_node_t *item = yaml_document_get_node(v->doc, *it);
        const char *s =
            item && item->type == YAML_SCALAR_NODE ? (const char *)item->data.scalar.value : NULL;
        v->at = item;
        if (number("a gpu index", s, 0, 1023, &x, why, n)) {
            if (!s && item && item->type == YAML_MAPPING_NODE) {
                char *got = strstr(why, "got a list");
                if (got) snprintf(got, n - (size_t)(got - why), "got a mapping");
            }
            return -1;
        }
        c->gpus[c->n_gpus++] = (int)x;
    }
    v->at = NULL;
    return 0;
}

/* prometheus: "PORT" (on 127.0.0.1) or "ADDRESS:PORT", ADDRESS an IPv4 address. */
static int set_address(const bfd_key *k, bfd_config *c, bfd_val *v, char *why, size_t n) {
    const char *sv = v->s;
    char host[64] = "127.0.0.1";
    const char *port = sv ? strrchr(sv, ':') : NULL;
    if (sv && port && (size_t)(port - sv) < sizeof host) {
        memcpy(host, sv, (size_t)(port - sv));
        host[port - sv] = '\0';
        port++;
    } else if (sv && !port) {
        port = sv;
    }
    struct in_addr a;
    char *end = NULL;
    long p = port && *port ? strtol(port, &end, 10) : 0;
    if (!sv || !port || !end || *end || p < 1 || p > 65535 || inet_pton(AF_INET, host, &a) != 1)
        return bf_fail(why, n,
                       "%s must be PORT or ADDRESS:PORT (an IPv4 address, e.g. 127.0.0.1:9464), "
                       "got a scalar%s%s%s",
                       k->key, sv ? " '" : "", sv ? sv : "", sv ? "'" : "");
    snprintf(FIELD(k, c, char), k->cap, "%s:%ld", host, p);
    return 0;
}

/* http: "off", or an address as set_address reads it. */
static int set_http(const bfd_key *k, bfd_config *c, bfd_val *v, char *why, size_t n) {
    c->http_default = 0;
    if (v->s && !strcmp(v->s, "off")) {
        c->http[0] = '\0';
        return 0;
    }
    if (set_address(k, c, v, why, n) == 0) return 0;
    size_t at = strlen(why);
    snprintf(why + at, n - at, ", or off");
    return -1;
}

#define AT(f) offsetof(bfd_config, f), sizeof(((bfd_config *)0)->f)
#define NONE 0, 0, NULL

/* Every key, in the order of `bfd --help`. */
static const bfd_key bfd_keys[] = {
    {"slots", set_int, 1, 4096, NULL, AT(slots), NULL, "N", "cores",
     "cpu slots, ranks that may run at once"},
    {"gpus", set_gpus, 0, BFD_MAX_GPUS, NULL, AT(n_gpus), NULL, "[0, 1] or N", "detected",
     "the GPUs to hand out, as CUDA indices or a count"},
    {"launcher", set_choice, 0, 0, "local|slurm|remote", AT(launcher), "local",
     "local|slurm|remote", NULL,
     "local forks ranks (mpirun for several), slurm submits them with sbatch and srun, remote "
     "starts them on `bfworker serve` agents that connect to the worker endpoint, whose slots "
     "count (docs/cluster.md)"},
    {"heartbeat_timeout", set_double, 1, 86400, NULL, AT(heartbeat_timeout), "30", "S", NULL,
     "seconds without a worker message before its attempt fails"},
    {"heartbeat_interval", set_double, 0.05, 3600, NULL, AT(heartbeat_interval), "1", "S", NULL,
     "seconds between worker heartbeats (at most half heartbeat_timeout)"},
    {"startup_timeout", set_double, 1, 86400, NULL, AT(startup_timeout), "120", "S", NULL,
     "seconds from an attempt's start (under Slurm: from when its job runs) to its worker's "
     "hello; heartbeat_timeout counts from the hello on"},
    {"progress_timeout", set_double, 0, 7 * 86400, NULL, AT(progress_timeout), "0", "S", NULL,
     "seconds without a new metric point before an attempt fails (0 is off)"},
    {"kill_grace", set_double, 0, 3600, NULL, AT(kill_grace), "5", "S", NULL,
     "seconds between SIGTERM and SIGKILL on cancel"},
    {"threads_per_slot", set_int, 1, 1024, NULL, AT(threads_per_slot), "1", "N", NULL,
     "OMP_NUM_THREADS of each rank"},
    {"bfworker", set_program, NONE, AT(bfworker), NULL, "PATH", "next to bfd, or $BF_WORKER",
     "the bfworker program"},
    {"mpirun", set_program, NONE, AT(mpirun), "mpirun", "PATH", NULL, "the mpirun program"},
    {"slurm_bin", set_slurm_bin, NONE, 0, 0, NULL, "DIR", "PATH",
     "with launcher slurm, the folder of sbatch, srun, scontrol and scancel"},
    {"slurm_partition", set_name, NONE, AT(slurm_partition), NULL, "NAME", "the cluster's",
     "with launcher slurm, sbatch --partition"},
    {"slurm_mpi", set_name, NONE, AT(slurm_mpi), NULL, "TYPE", "not passed",
     "with launcher slurm, srun --mpi=TYPE"},
    {"slurm_poll", set_double, 0.2, 600, NULL, AT(slurm_poll), "2", "S", NULL,
     "with launcher slurm, seconds between scontrol queries of each job"},
    {"tensorboard", set_bool, NONE, AT(tensorboard), "true", "true|false", NULL,
     "write $BF_HOME/tensorboard/"},
    {"prometheus", set_address, NONE, AT(prometheus), NULL, "[ADDRESS:]PORT", "off",
     "serve /metrics there (a PORT alone is on 127.0.0.1)"},
    {"http", set_http, NONE, AT(http), "127.0.0.1:8265", "[ADDRESS:]PORT|off", NULL,
     "serve the dashboard, the JSON API and /metrics there, each request with the token of "
     "$BF_HOME/http.token (docs/http.md); a taken default port only warns"},
    {"http_insecure", set_bool, NONE, AT(http_insecure), "false", "true|false", NULL,
     "allow http on an address other than loopback without TLS (behind a TLS proxy)"},
    {"http_tls_cert", set_file, NONE, AT(http_tls_cert), NULL, "PATH", "none",
     "serve the dashboard over HTTPS with this PEM certificate (chain); with http_tls_key, an "
     "address other than loopback is allowed"},
    {"http_tls_key", set_file, NONE, AT(http_tls_key), NULL, "PATH", "none",
     "the PEM private key of http_tls_cert, unencrypted, not readable by others"},
};

#define N_KEYS (sizeof bfd_keys / sizeof *bfd_keys)

/* GPUs the NVIDIA driver lists, counted without loading CUDA. */
static int detect_gpus(void) {
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n > BFD_MAX_GPUS ? BFD_MAX_GPUS : n;
}

/* The table's defaults, then those bfd works out: slots = nproc, the GPUs
 * detected, bfworker next to bfd (or $BF_WORKER), slurm's programs on PATH. */
static void defaults(bfd_config *c) {
    memset(c, 0, sizeof *c);
    char why[256];
    for (size_t i = 0; i < N_KEYS; i++) {
        bfd_val v = {.s = bfd_keys[i].def};
        if (bfd_keys[i].def) bfd_keys[i].set(&bfd_keys[i], c, &v, why, sizeof why);
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    c->slots = n > 0 ? (int)n : 1;
    c->n_gpus = detect_gpus();
    for (int i = 0; i < c->n_gpus; i++) c->gpus[i] = i;
    snprintf(c->sbatch, sizeof c->sbatch, "sbatch");
    snprintf(c->srun, sizeof c->srun, "srun");
    snprintf(c->scontrol, sizeof c->scontrol, "scontrol");
    snprintf(c->scancel, sizeof c->scancel, "scancel");
    char self[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    if (k > 0) {
        self[k] = '\0';
        char *slash = strrchr(self, '/');
        if (slash) *slash = '\0';
        if (strlen(self) + 10 < sizeof c->bfworker) {
            memcpy(c->bfworker, self, strlen(self));
            memcpy(c->bfworker + strlen(self), "/bfworker", 10);
        }
    } else {
        snprintf(c->bfworker, sizeof c->bfworker, "bfworker");
    }
    const char *w = getenv("BF_WORKER");
    if (w && *w) snprintf(c->bfworker, sizeof c->bfworker, "%s", w);
    c->http_default = 1;
}

static const bfd_key *find_key(const char *key) {
    for (size_t i = 0; i < N_KEYS; i++)
        if (!strcmp(bfd_keys[i].key, key)) return &bfd_keys[i];
    return NULL;
}

/* "unknown setting 'x'; did you mean 'y'? (valid: a, b, ...)" */
static int unknown_key(const char *path, const yaml_node_t *k, const char *key, char *err,
                       size_t errlen) {
    const char *best = NULL;
    size_t bd = strlen(key) / 3 + 2; /* nearer than this, or no suggestion */
    for (size_t i = 0; i < N_KEYS; i++) {
        size_t d = cfg_edit_distance_within(key, bfd_keys[i].key, bd - 1);
        if (d < bd) bd = d, best = bfd_keys[i].key;
    }
    char valid[1024] = "";
    for (size_t i = 0; i < N_KEYS; i++) {
        size_t at = strlen(valid);
        snprintf(valid + at, sizeof valid - at, "%s%s", i ? ", " : "", bfd_keys[i].key);
    }
    return bf_fail(err, errlen, "%s:%zu:%zu: unknown setting '%s'%s%s%s (valid: %s)", path,
                   k->start_mark.line + 1, k->start_mark.column + 1, key,
                   best ? "; did you mean '" : "", best ? best : "", best ? "'?" : "", valid);
}

/* Every key of the mapping root through its row of the table. */
static int read_keys(const char *path, yaml_document_t *doc, yaml_node_t *root, bfd_config *c,
                     char *err, size_t errlen) {
    yaml_node_pair_t *first = root->data.mapping.pairs.start, *top = root->data.mapping.pairs.top;
    /* a key given twice is refused before any value is judged */
    for (yaml_node_pair_t *pr = first; pr < top; pr++) {
        yaml_node_t *k = yaml_document_get_node(doc, pr->key);
        if (!k || k->type != YAML_SCALAR_NODE) continue;
        for (yaml_node_pair_t *q = first; q < pr; q++) {
            yaml_node_t *qk = yaml_document_get_node(doc, q->key);
            if (qk && qk->type == YAML_SCALAR_NODE &&
                !strcmp((const char *)qk->data.scalar.value, (const char *)k->data.scalar.value))
                return bf_fail(err, errlen,
                               "%s:%zu:%zu: '%s' is given twice (first at line %zu); give it once",
                               path, k->start_mark.line + 1, k->start_mark.column + 1,
                               (const char *)k->data.scalar.value, qk->start_mark.line + 1);
        }
    }
    for (yaml_node_pair_t *pr = first; pr < top; pr++) {
        yaml_node_t *k = yaml_document_get_node(doc, pr->key);
        yaml_node_t *v = yaml_document_get_node(doc, pr->value);
        if (!k || !v || k->type != YAML_SCALAR_NODE)
            return bf_fail(err, errlen, "%s: keys must be plain names", path);
        const char *key = (const char *)k->data.scalar.value;
        const bfd_key *row = find_key(key);
        /* every key takes one value (gpus also a list of indices) */
        if (v->type != YAML_SCALAR_NODE &&
            !(v->type == YAML_SEQUENCE_NODE && row && row->set == set_gpus))
            return bf_fail(err, errlen, "%s:%zu:%zu: %s takes a single value, got %s", path,
                           v->start_mark.line + 1, v->start_mark.column + 1, key, node_kind(v));
        if (!row) return unknown_key(path, k, key, err, errlen);
        bfd_val val = {.s = v->type == YAML_SCALAR_NODE ? (const char *)v->data.scalar.value : NULL,
                       .doc = doc,
                       .node = v};
        char why[1024];
        if (row->set(row, c, &val, why, sizeof why)) {
            const yaml_node_t *at = val.at ? val.at : v;
            return bf_fail(err, errlen, "%s:%zu:%zu: %s", path, at->start_mark.line + 1,
                           at->start_mark.column + 1, why);
        }
    }
    if (c->heartbeat_interval * 2 > c->heartbeat_timeout)
        return bf_fail(err, errlen,
                       "%s: heartbeat_timeout must be at least twice heartbeat_interval", path);
    return 0;
}

int bfd_config_load(const char *path, bfd_config *c, char *err, size_t errlen) {
    defaults(c);
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) return 0;
        return bf_fail(err, errlen, "cannot open %s: %s", path, strerror(errno));
    }
    yaml_parser_t p;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&p)) {
        fclose(f);
        return bf_fail(err, errlen, "yaml_parser_initialize: out of memory");
    }
    yaml_parser_set_input_file(&p, f);
    if (!yaml_parser_load(&p, &doc)) {
        int rc = bf_fail(err, errlen, "%s:%zu:%zu: %s", path, p.problem_mark.line + 1,
                         p.problem_mark.column + 1, p.problem ? p.problem : "YAML error");
        yaml_parser_delete(&p);
        fclose(f);
        return rc;
    }
    yaml_parser_delete(&p);
    fclose(f);
    int rc = 0;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root) /* empty file: defaults */
        rc = 0;
    else if (root->type != YAML_MAPPING_NODE)
        rc = bf_fail(err, errlen, "%s:%zu:%zu: expected a mapping of settings", path,
                     root->start_mark.line + 1, root->start_mark.column + 1);
    else
        rc = read_keys(path, &doc, root, c, err, errlen);
    yaml_document_delete(&doc);
    return rc;
}

int bfd_config_set(bfd_config *c, const char *key, const char *value, char *err, size_t errlen) {
    const bfd_key *k = find_key(key);
    if (!k) return bf_fail(err, errlen, "no setting '%s'", key);
    bfd_val v = {.s = value};
    return k->set(k, c, &v, err, errlen);
}

void bfd_config_help(FILE *f) {
    fputs("bfd.yaml (every key optional):\n", f);
    for (size_t i = 0; i < N_KEYS; i++) {
        const bfd_key *k = &bfd_keys[i];
        char text[512];
        snprintf(text, sizeof text, "%s (default: %s)", k->help, k->def ? k->def : k->def_doc);
        int col = fprintf(f, "  %s: %s", k->key, k->shape);
        if (col < 34)
            fprintf(f, "%*s", 34 - col, "");
        else
            fprintf(f, "\n%34s", "");
        col = 34;
        opts_wrap(f, text, col, 34);
    }
}
