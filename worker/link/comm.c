/* comm.c — data-parallel collectives (comm.h): MPI ranks from a launcher,
 * GPU selection, NCCL between GPUs when built with it, all-reduce and
 * broadcast, and the watchdog that aborts a stuck collective. */

#include "worker/link/comm.h"

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/prctl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef BF_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 10, 0)
#error "bf needs NCCL 2.10 or newer (ncclAvg)"
#endif
#endif

/* MPI counts are int: large buffers go in chunks of this many elements. */
#define CHUNK ((size_t)1 << 30)

struct comm {
    int mpi; /* 1: this process called MPI_Init_thread */
    int rank, world, local_rank, local_world;
    MPI_Comm node;
#ifdef BF_HAVE_NCCL
    ncclComm_t nccl;
#endif
    int has_nccl;
    /* watchdog */
    pthread_t wd;
    int wd_started;
    atomic_int wd_quit;
    atomic_llong coll_since_ms; /* start of the collective in flight, 0 = none */
    _Atomic(const char *) coll_what;
    atomic_llong timeout_ms;
    atomic_int timeout_exit;
    atomic_int unwatched; /* 1: collectives are not timed (comm_watch) */
};

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int mpi_fail(char *err, size_t errlen, const comm_t *c, const char *call, int rc) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", rc);
    snprintf(err, errlen, "rank %d/%d: %s failed: %s (a peer rank may have died)", c ? c->rank : 0,
             c ? c->world : 1, call, msg);
    return -1;
}

/* Marks the start and end of a collective for the watchdog. */
static void coll_begin(comm_t *c, const char *what) {
    atomic_store(&c->coll_what, what);
    atomic_store(&c->coll_since_ms, now_ms());
}
static void coll_end(comm_t *c) { atomic_store(&c->coll_since_ms, 0); }

static void *watchdog_main(void *arg) {
    comm_t *c = arg;
    while (!atomic_load(&c->wd_quit)) {
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
        long long since = atomic_load(&c->coll_since_ms), limit = atomic_load(&c->timeout_ms);
        if (since && limit > 0 && !atomic_load(&c->unwatched) && now_ms() - since > limit) {
            /* async-safe enough: this thread holds no lock the others need */
            fprintf(stderr,
                    "bfworker: rank %d/%d: %s has not completed after %.0f s: a peer rank died or "
                    "hangs; exiting with status %d\n",
                    c->rank, c->world, atomic_load(&c->coll_what), (double)limit / 1000.0,
                    atomic_load(&c->timeout_exit));
            fflush(stderr);
            _exit(atomic_load(&c->timeout_exit));
        }
    }
    return NULL;
}

/* A launcher started us when it left its rank variables in the environment. */
static int launched_by_mpi(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE",
                                 "MPI_LOCALNRANKS",      NULL};
    for (const char **v = vars; *v; v++)
        if (getenv(*v)) return 1;
    const char *f = getenv("BF_MPI");
    return f && strcmp(f, "1") == 0;
}

int comm_init(int *argc, char ***argv, comm_t **out, char *err, size_t errlen) {
    *out = NULL;
    comm_t *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    c->world = c->local_world = 1;
    c->node = MPI_COMM_NULL;
    if (!launched_by_mpi()) {
        *out = c;
        return 0;
    }
    /* A rank must not outlive its launcher: if mpirun is killed (kill -9 of a
     * trial's process group, a crashed daemon's cleanup), the ranks get
     * SIGTERM, checkpoint and exit instead of training on as orphans. */
    pid_t parent = getppid();
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) == 0 && getppid() != parent) raise(SIGTERM);
    int provided = 0, rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) {
        free(c);
        return mpi_fail(err, errlen, NULL, "MPI_Init_thread", rc);
    }
    c->mpi = 1;
    if ((rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN)) != MPI_SUCCESS) {
        mpi_fail(err, errlen, c, "MPI_Comm_set_errhandler", rc);
        goto fail;
    }
    if ((rc = MPI_Comm_rank(MPI_COMM_WORLD, &c->rank)) != MPI_SUCCESS ||
        (rc = MPI_Comm_size(MPI_COMM_WORLD, &c->world)) != MPI_SUCCESS) {
        mpi_fail(err, errlen, c, "MPI_Comm_rank/size", rc);
        goto fail;
    }
    if ((rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL,
                                  &c->node)) != MPI_SUCCESS ||
        (rc = MPI_Comm_set_errhandler(c->node, MPI_ERRORS_RETURN)) != MPI_SUCCESS ||
        (rc = MPI_Comm_rank(c->node, &c->local_rank)) != MPI_SUCCESS ||
        (rc = MPI_Comm_size(c->node, &c->local_world)) != MPI_SUCCESS) {
        mpi_fail(err, errlen, c, "MPI_Comm_split_type(SHARED)", rc);
        goto fail;
    }
    *out = c;
    return 0;
fail:
    comm_destroy(&c);
    return -1;
}

void comm_destroy(comm_t **self_p) {
    comm_t *c = self_p ? *self_p : NULL;
    if (!c) return;
    if (c->wd_started) {
        atomic_store(&c->wd_quit, 1);
        pthread_join(c->wd, NULL);
    }
#ifdef BF_HAVE_NCCL
    if (c->has_nccl) ncclCommDestroy(c->nccl);
#endif
    if (c->mpi) {
        if (c->node != MPI_COMM_NULL) MPI_Comm_free(&c->node);
        MPI_Finalize();
    }
    free(c);
    *self_p = NULL;
}

void comm_abort(comm_t *c, int code) {
    if (c && c->mpi && c->world > 1) MPI_Abort(MPI_COMM_WORLD, code);
}

int comm_rank(const comm_t *c) { return c ? c->rank : 0; }
int comm_world(const comm_t *c) { return c ? c->world : 1; }

void comm_set_timeout(comm_t *c, double seconds, int exit_code) {
    if (!c) return;
    atomic_store(&c->timeout_ms, (long long)(seconds * 1000.0));
    atomic_store(&c->timeout_exit, exit_code);
    if (seconds > 0 && !c->wd_started && c->world > 1) {
        if (pthread_create(&c->wd, NULL, watchdog_main, c) == 0) c->wd_started = 1;
    }
}

void comm_watch(comm_t *c, int on) {
    if (c) atomic_store(&c->unwatched, !on);
}

#ifdef BF_HAVE_NCCL
static int cuda_fail(char *err, size_t errlen, const comm_t *c, const char *call, cudaError_t e) {
    snprintf(err, errlen, "rank %d/%d: %s failed: %s (%s)", c->rank, c->world, call,
             cudaGetErrorString(e), cudaGetErrorName(e));
    return -1;
}
static int nccl_fail(char *err, size_t errlen, const comm_t *c, const char *call, ncclResult_t r) {
    snprintf(err, errlen, "rank %d/%d: %s failed: %s%s%s", c->rank, c->world, call,
             ncclGetErrorString(r), c->has_nccl ? ": " : "",
             c->has_nccl ? ncclGetLastError(c->nccl) : "");
    return -1;
}
#endif

int comm_select_gpu(comm_t *c, char *err, size_t errlen) {
#ifdef BF_HAVE_NCCL
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
        cudaGetLastError(); /* no GPU: clear the sticky error, CPU it is */
        return 0;
    }
    cudaError_t e = cudaSetDevice(c->local_rank % n);
    if (e != cudaSuccess) return cuda_fail(err, errlen, c, "cudaSetDevice", e);
#else
    (void)c;
    (void)err;
    (void)errlen;
#endif
    return 0;
}

int comm_gpu_setup(comm_t *c, const bk_backend *be, char *err, size_t errlen) {
#ifdef BF_HAVE_NCCL
    if (be->device != BK_CUDA || c->has_nccl) return 0;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    ncclResult_t r;
    if (c->rank == 0 && (r = ncclGetUniqueId(&id)) != ncclSuccess)
        return nccl_fail(err, errlen, c, "ncclGetUniqueId", r);
    if (c->mpi) {
        int rc = MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return mpi_fail(err, errlen, c, "MPI_Bcast(ncclUniqueId)", rc);
    }
    if ((r = ncclCommInitRank(&c->nccl, c->world, id, c->rank)) != ncclSuccess)
        return nccl_fail(err, errlen, c, "ncclCommInitRank", r);
    c->has_nccl = 1;
#else
    (void)c;
    (void)be;
    (void)err;
    (void)errlen;
#endif
    return 0;
}

static int mpi_allreduce_chunks(comm_t *c, void *buf, size_t n, MPI_Datatype t, size_t elem,
                                MPI_Op op, const char *what, char *err, size_t errlen) {
    coll_begin(c, what);
    for (size_t o = 0; o < n; o += CHUNK) {
        size_t k = n - o < CHUNK ? n - o : CHUNK;
        int rc = MPI_Allreduce(MPI_IN_PLACE, (char *)buf + o * elem, (int)k, t, op, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) {
            coll_end(c);
            return mpi_fail(err, errlen, c, what, rc);
        }
    }
    coll_end(c);
    return 0;
}

/* op_mean: divide by the world size afterwards. */
static int allreduce(comm_t *c, const bk_backend *be, float *buf, size_t n, int force, int op_mean,
                     char *err, size_t errlen) {
    if (!c || (c->world == 1 && !force) || n == 0) return 0;
#ifdef BF_HAVE_NCCL
    if (be->device == BK_CUDA && c->has_nccl) {
        coll_begin(c, "ncclAllReduce(gradients)");
        ncclResult_t r = ncclAllReduce(buf, buf, n, ncclFloat32, op_mean ? ncclAvg : ncclSum,
                                       c->nccl, 0 /* legacy stream, as the CUDA backend */);
        if (r != ncclSuccess) {
            coll_end(c);
            return nccl_fail(err, errlen, c, "ncclAllReduce", r);
        }
        cudaError_t e = cudaStreamSynchronize(0);
        coll_end(c);
        if (e != cudaSuccess) return cuda_fail(err, errlen, c, "cudaStreamSynchronize", e);
        return 0;
    }
#endif
    if (!c->mpi) {
        /* one process without MPI: the sum is the buffer itself */
        return 0;
    }
    float *host = buf;
    if (be->device != BK_CPU) {
        host = malloc(n * sizeof(float));
        if (!host) {
            snprintf(err, errlen, "out of memory staging %zu floats for MPI_Allreduce", n);
            return -1;
        }
        be->to_host(host, buf, n * sizeof(float));
    }
    int rc = mpi_allreduce_chunks(c, host, n, MPI_FLOAT, sizeof(float), MPI_SUM,
                                  "MPI_Allreduce(gradients)", err, errlen);
    if (rc == 0 && op_mean && c->world > 1) {
        float inv = 1.0f / (float)c->world;
        for (size_t i = 0; i < n; i++) host[i] *= inv;
    }
    if (host != buf) {
        if (rc == 0) be->to_device(buf, host, n * sizeof(float));
        free(host);
    }
    return rc;
}

int comm_allreduce_sum(comm_t *c, const bk_backend *be, float *buf, size_t n, int force, char *err,
                       size_t errlen) {
    return allreduce(c, be, buf, n, force, 0, err, errlen);
}

int comm_allreduce_mean(comm_t *c, const bk_backend *be, float *buf, size_t n, int force, char *err,
                        size_t errlen) {
    return allreduce(c, be, buf, n, force, 1, err, errlen);
}

int comm_sum_f64(comm_t *c, double *buf, int n, char *err, size_t errlen) {
    if (!c || !c->mpi || c->world == 1 || n <= 0) return 0;
    return mpi_allreduce_chunks(c, buf, (size_t)n, MPI_DOUBLE, sizeof(double), MPI_SUM,
                                "MPI_Allreduce(step statistics)", err, errlen);
}

int comm_any(comm_t *c, int flag, int *any, char *err, size_t errlen) {
    *any = flag != 0;
    if (!c || !c->mpi || c->world == 1) return 0;
    int v = flag != 0;
    if (mpi_allreduce_chunks(c, &v, 1, MPI_INT, sizeof(int), MPI_LOR, "MPI_Allreduce(stop flag)",
                             err, errlen))
        return -1;
    *any = v;
    return 0;
}

int comm_bcast(comm_t *c, void *buf, size_t bytes, int root, char *err, size_t errlen) {
    if (!c || !c->mpi || c->world == 1 || bytes == 0) return 0;
    coll_begin(c, "MPI_Bcast");
    for (size_t o = 0; o < bytes; o += CHUNK) {
        size_t k = bytes - o < CHUNK ? bytes - o : CHUNK;
        int rc = MPI_Bcast((char *)buf + o, (int)k, MPI_BYTE, root, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) {
            coll_end(c);
            return mpi_fail(err, errlen, c, "MPI_Bcast", rc);
        }
    }
    coll_end(c);
    return 0;
}
