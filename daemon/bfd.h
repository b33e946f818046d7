/* bfd — the coordinator daemon: one zmq_poll event loop over the control
 * ROUTER, the worker ROUTER, a self-pipe for signals and (with --tcp) the
 * ZAP authenticator; SQLite store; local launcher; metrics hub. */
#ifndef BFD_H
#define BFD_H

#include <stddef.h>
#include <stdio.h>

#define BFD_MAX_GPUS 64

/* Inventory and launcher settings ($BF_HOME/bfd.yaml, every key optional). */
typedef struct bfd_config {
    int slots;              /* cpu slots: ranks that may run at once (default nproc) */
    int n_gpus;             /* GPUs to hand out (default: detected) */
    int gpus[BFD_MAX_GPUS]; /* their CUDA indices */
    char launcher[16]; /* "local" (fork/mpirun), "slurm" (sbatch + srun) or "remote" (agents) */
    double heartbeat_timeout;  /* s without a worker message before its attempt fails (30) */
    double heartbeat_interval; /* s between worker heartbeats (1) */
    double startup_timeout;    /* s from an attempt's start to its worker's hello (120) */
    double kill_grace;         /* s between SIGTERM and SIGKILL on cancel (5) */
    double progress_timeout;   /* s without a new metric point before an attempt fails (0: off) */
    int threads_per_slot;      /* OMP_NUM_THREADS of each rank (1) */
    char bfworker[1024];       /* the bfworker program (default: next to bfd) */
    char mpirun[256];          /* mpirun program (default "mpirun") */
    /* launcher: slurm */
    char slurm_partition[128]; /* sbatch --partition ("": the cluster's default) */
    char slurm_mpi[64];        /* srun --mpi=... ("": not passed) */
    double slurm_poll;         /* s between scontrol queries of each Slurm job (2) */
    char sbatch[600], srun[600], scontrol[600], scancel[600]; /* from slurm_bin (or PATH) */
    /* exporters (daemon/exp_tb.h, daemon/prom.h) */
    int tensorboard;      /* write $BF_HOME/tensorboard/ (default 1) */
    char prometheus[256]; /* HOST:PORT of /metrics ("": off, the default) */
    /* the dashboard and JSON API (daemon/http.h, docs/http.md) */
    char http[256];           /* HOST:PORT ("": off; default 127.0.0.1:8265) */
    int http_default;         /* http is the default, not asked for: a taken port only warns */
    int http_insecure;        /* serve a non-loopback address without TLS (default 0: refused) */
    char http_tls_cert[1024]; /* PEM certificate: serve HTTPS ("": plain HTTP) */
    char http_tls_key[1024];  /* PEM private key of http_tls_cert */
} bfd_config;

/* Fills defaults, then reads path when it exists: a YAML mapping of the keys
 * in bfd_config.c's table (bfd_config_help prints them). Returns 0, or -1
 * with "PATH:LINE:COL: message". */
int bfd_config_load(const char *path, bfd_config *c, char *err, size_t errlen);

/* Applies one key as bfd.yaml would (for a command-line override such as
 * --http). Returns 0, or -1 with "KEY must be ..." in err. */
int bfd_config_set(bfd_config *c, const char *key, const char *value, char *err, size_t errlen);

/* Writes the bfd.yaml part of `bfd --help`: every key, its values, default
 * and what it does, from the same table the loader reads by. */
void bfd_config_help(FILE *f);

typedef struct bfd_opts {
    char home[1024];
    char tcp[256]; /* HOST:PORT or "" */
    int quiet;
} bfd_opts;

/* Runs the daemon until SIGTERM/SIGINT. The caller holds the home lock.
 * Returns 0 on a clean stop, or -1 with a message (startup failures). */
int bfd_run(const bfd_opts *o, const bfd_config *c, char *err, size_t errlen);

#endif
