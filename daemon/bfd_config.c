/* bfd_config.c — $BF_HOME/bfd.yaml, the inventory and launcher settings:
 * defaults (slots = nproc, the GPUs detected), then each key validated with
 * PATH:LINE:COL in its message. It only reads the file into a bfd_config;
 * it opens no socket and touches no store. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>
#include <arpa/inet.h>

#include "daemon/bfd.h"
#include "common/errbuf.h"

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

static void defaults(bfd_config *c) {
    memset(c, 0, sizeof *c);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    c->slots = n > 0 ? (int)n : 1;
    c->n_gpus = detect_gpus();
    for (int i = 0; i < c->n_gpus; i++) c->gpus[i] = i;
    snprintf(c->launcher, sizeof c->launcher, "local");
    c->heartbeat_timeout = 30;
    c->heartbeat_interval = 1;
    c->kill_grace = 5;
    c->threads_per_slot = 1;
    snprintf(c->mpirun, sizeof c->mpirun, "mpirun");
    c->slurm_poll = 2;
    c->tensorboard = 1;
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
}

/* What a node is, for "got ..." in messages. */
static const char *node_kind(const yaml_node_t *v) {
    return v->type == YAML_SEQUENCE_NODE  ? "a list"
           : v->type == YAML_MAPPING_NODE ? "a mapping"
                                          : "a scalar";
}

static int num(const char *path, yaml_node_t *v, double lo, double hi, double *out, const char *key,
               char *err, size_t errlen) {
    char *end;
    const char *s = v->type == YAML_SCALAR_NODE ? (const char *)v->data.scalar.value : "";
    double x = strtod(s, &end);
    if (v->type != YAML_SCALAR_NODE || end == s || *end || !(x >= lo && x <= hi))
        return bf_fail(err, errlen, "%s:%zu:%zu: %s must be a number in [%g, %g], got %s%s%s%s",
                       path, v->start_mark.line + 1, v->start_mark.column + 1, key, lo, hi,
                       node_kind(v), v->type == YAML_SCALAR_NODE ? " '" : "", s,
                       v->type == YAML_SCALAR_NODE ? "'" : "");
    *out = x;
    return 0;
}

/* prometheus: "PORT" (on 127.0.0.1) or "ADDRESS:PORT", ADDRESS an IPv4 address. */
static int prom_address(const char *path, yaml_node_t *v, const char *sv, char *out, size_t cap,
                        char *err, size_t errlen) {
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
        return bf_fail(err, errlen,
                       "%s:%zu:%zu: prometheus must be PORT or ADDRESS:PORT (an IPv4 address, "
                       "e.g. 127.0.0.1:9464), got %s%s%s%s",
                       path, v->start_mark.line + 1, v->start_mark.column + 1, node_kind(v),
                       sv ? " '" : "", sv ? sv : "", sv ? "'" : "");
    snprintf(out, cap, "%s:%ld", host, p);
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
    if (!root) goto out; /* empty file: defaults */
    if (root->type != YAML_MAPPING_NODE) {
        rc = bf_fail(err, errlen, "%s:%zu:%zu: expected a mapping of settings", path,
                     root->start_mark.line + 1, root->start_mark.column + 1);
        goto out;
    }
    /* a key given twice is refused before any value is judged */
    for (yaml_node_pair_t *pr = root->data.mapping.pairs.start;
         pr < root->data.mapping.pairs.top && !rc; pr++) {
        yaml_node_t *k = yaml_document_get_node(&doc, pr->key);
        if (!k || k->type != YAML_SCALAR_NODE) continue;
        const char *key = (const char *)k->data.scalar.value;
        for (yaml_node_pair_t *q = root->data.mapping.pairs.start; q < pr && !rc; q++) {
            yaml_node_t *qk = yaml_document_get_node(&doc, q->key);
            if (qk && qk->type == YAML_SCALAR_NODE &&
                !strcmp((const char *)qk->data.scalar.value, key))
                rc = bf_fail(err, errlen,
                             "%s:%zu:%zu: '%s' is given twice (first at line %zu); give it once",
                             path, k->start_mark.line + 1, k->start_mark.column + 1, key,
                             qk->start_mark.line + 1);
        }
    }
    for (yaml_node_pair_t *pr = root->data.mapping.pairs.start;
         pr < root->data.mapping.pairs.top && !rc; pr++) {
        yaml_node_t *k = yaml_document_get_node(&doc, pr->key);
        yaml_node_t *v = yaml_document_get_node(&doc, pr->value);
        if (!k || !v || k->type != YAML_SCALAR_NODE) {
            rc = bf_fail(err, errlen, "%s: keys must be plain names", path);
            break;
        }
        const char *key = (const char *)k->data.scalar.value;
        /* every key takes one value (gpus also a list of indices) */
        if (v->type != YAML_SCALAR_NODE &&
            !(v->type == YAML_SEQUENCE_NODE && !strcmp(key, "gpus"))) {
            rc = bf_fail(err, errlen, "%s:%zu:%zu: %s takes a single value, got %s", path,
                         v->start_mark.line + 1, v->start_mark.column + 1, key, node_kind(v));
            break;
        }
        const char *sv = v->type == YAML_SCALAR_NODE ? (const char *)v->data.scalar.value : NULL;
        double x = 0;
        if (strcmp(key, "slots") == 0) {
            if (!(rc = num(path, v, 1, 4096, &x, key, err, errlen))) c->slots = (int)x;
        } else if (strcmp(key, "gpus") == 0) {
            if (v->type == YAML_SEQUENCE_NODE) {
                c->n_gpus = 0;
                for (yaml_node_item_t *it = v->data.sequence.items.start;
                     it < v->data.sequence.items.top && !rc; it++) {
                    if (c->n_gpus == BFD_MAX_GPUS) {
                        rc = bf_fail(err, errlen, "%s: at most %d gpus", path, BFD_MAX_GPUS);
                        break;
                    }
                    if (!(rc = num(path, yaml_document_get_node(&doc, *it), 0, 1023, &x,
                                   "a gpu index", err, errlen)))
                        c->gpus[c->n_gpus++] = (int)x;
                }
            } else if (!(rc = num(path, v, 0, BFD_MAX_GPUS, &x, key, err, errlen))) {
                c->n_gpus = (int)x;
                for (int i = 0; i < c->n_gpus; i++) c->gpus[i] = i;
            }
        } else if (strcmp(key, "launcher") == 0) {
            if (!sv ||
                (strcmp(sv, "local") != 0 && strcmp(sv, "slurm") != 0 && strcmp(sv, "remote") != 0))
                rc = bf_fail(err, errlen, "%s:%zu:%zu: launcher must be local, slurm or remote",
                             path, v->start_mark.line + 1, v->start_mark.column + 1);
            else
                snprintf(c->launcher, sizeof c->launcher, "%s", sv);
        } else if (strcmp(key, "slurm_poll") == 0) {
            rc = num(path, v, 0.2, 600, &c->slurm_poll, key, err, errlen);
        } else if (strcmp(key, "slurm_bin") == 0) {
            if (!sv || !*sv || strlen(sv) > 500) {
                rc = bf_fail(err, errlen, "%s:%zu:%zu: slurm_bin must be a folder path", path,
                             v->start_mark.line + 1, v->start_mark.column + 1);
            } else {
                snprintf(c->sbatch, sizeof c->sbatch, "%s/sbatch", sv);
                snprintf(c->srun, sizeof c->srun, "%s/srun", sv);
                snprintf(c->scontrol, sizeof c->scontrol, "%s/scontrol", sv);
                snprintf(c->scancel, sizeof c->scancel, "%s/scancel", sv);
            }
        } else if (strcmp(key, "slurm_partition") == 0 || strcmp(key, "slurm_mpi") == 0) {
            int part = key[6] == 'p';
            char *dst = part ? c->slurm_partition : c->slurm_mpi;
            size_t cap = part ? sizeof c->slurm_partition : sizeof c->slurm_mpi;
            if (!sv || strlen(sv) >= cap || strpbrk(sv, " \t\n'\""))
                rc = bf_fail(err, errlen,
                             "%s:%zu:%zu: %s must be a name without spaces (< %zu chars)", path,
                             v->start_mark.line + 1, v->start_mark.column + 1, key, cap);
            else
                snprintf(dst, cap, "%s", sv);
        } else if (strcmp(key, "heartbeat_timeout") == 0) {
            rc = num(path, v, 1, 86400, &c->heartbeat_timeout, key, err, errlen);
        } else if (strcmp(key, "heartbeat_interval") == 0) {
            rc = num(path, v, 0.05, 3600, &c->heartbeat_interval, key, err, errlen);
        } else if (strcmp(key, "progress_timeout") == 0) {
            rc = num(path, v, 0, 7 * 86400, &c->progress_timeout, key, err, errlen);
        } else if (strcmp(key, "kill_grace") == 0) {
            rc = num(path, v, 0, 3600, &c->kill_grace, key, err, errlen);
        } else if (strcmp(key, "threads_per_slot") == 0) {
            if (!(rc = num(path, v, 1, 1024, &x, key, err, errlen))) c->threads_per_slot = (int)x;
        } else if (strcmp(key, "tensorboard") == 0) {
            int on = sv && (!strcmp(sv, "true") || !strcmp(sv, "yes") || !strcmp(sv, "on"));
            int off = sv && (!strcmp(sv, "false") || !strcmp(sv, "no") || !strcmp(sv, "off"));
            if (!on && !off)
                rc = bf_fail(err, errlen, "%s:%zu:%zu: tensorboard must be true or false", path,
                             v->start_mark.line + 1, v->start_mark.column + 1);
            c->tensorboard = on;
        } else if (strcmp(key, "prometheus") == 0) {
            rc = prom_address(path, v, sv, c->prometheus, sizeof c->prometheus, err, errlen);
        } else if (strcmp(key, "bfworker") == 0 || strcmp(key, "mpirun") == 0) {
            char *dst = key[0] == 'b' ? c->bfworker : c->mpirun;
            size_t cap = key[0] == 'b' ? sizeof c->bfworker : sizeof c->mpirun;
            if (!sv || !*sv || strlen(sv) >= cap)
                rc = bf_fail(err, errlen, "%s:%zu:%zu: %s must be a program path", path,
                             v->start_mark.line + 1, v->start_mark.column + 1, key);
            else
                snprintf(dst, cap, "%s", sv);
        } else {
            rc = bf_fail(err, errlen,
                         "%s:%zu:%zu: unknown setting '%s' (valid: slots, gpus, launcher, "
                         "heartbeat_timeout, heartbeat_interval, progress_timeout, kill_grace, "
                         "threads_per_slot, "
                         "bfworker, mpirun, slurm_bin, slurm_partition, slurm_mpi, slurm_poll, "
                         "tensorboard, prometheus)",
                         path, k->start_mark.line + 1, k->start_mark.column + 1, key);
        }
    }
    if (!rc && c->heartbeat_interval * 2 > c->heartbeat_timeout)
        rc = bf_fail(err, errlen, "%s: heartbeat_timeout must be at least twice heartbeat_interval",
                     path);
out:
    yaml_document_delete(&doc);
    return rc;
}
