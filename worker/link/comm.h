/* comm — the collectives of data-parallel training: one process per rank,
 * MPI between processes, NCCL between GPUs when bf was built with NCCL.
 *
 * A process started by a launcher (mpirun, srun: the launcher's rank
 * variables are in the environment) initialises MPI and is rank r of W. A
 * process started on its own does not touch MPI and is rank 0 of 1, so a
 * plain `bfworker train` needs no MPI runtime at all (BF_MPI=1 forces MPI's
 * singleton start instead). With W = 1 every collective is a no-op that
 * leaves its buffer unchanged, bit for bit.
 *
 * Errors: every MPI call runs under MPI_ERRORS_RETURN and every MPI / NCCL /
 * CUDA call is checked; a failure returns -1 with a message naming the call
 * and carrying the library's text. A peer that dies mid-collective is not
 * always reported by MPI (shared-memory transports spin), so a watchdog
 * thread (comm_set_timeout) ends a process whose collective has not finished
 * in time. Only main should call comm_abort / rely on the watchdog exit. */
#ifndef COMM_H
#define COMM_H

#include <stddef.h>

#include "kernels/bk.h"

typedef struct comm comm_t;

/* Starts the communicator (MPI when launched by mpirun/srun or BF_MPI=1).
 * argc/argv may be NULL. Returns 0 with *out set, or -1 with a message. */
int comm_init(int *argc, char ***argv, comm_t **out, char *err, size_t errlen);

/* Stops the watchdog, frees the NCCL communicator and finalises MPI; nulls
 * *self_p. Safe on NULL. */
void comm_destroy(comm_t **self_p);

/* Ends every rank of the job (MPI_Abort with code) when more than one rank
 * runs; returns without doing anything for a single process, so the caller
 * then exits as usual. */
void comm_abort(comm_t *c, int code);

/* Rank, world size, rank within this node, ranks on this node. A NULL c is
 * rank 0 of 1. */
int comm_rank(const comm_t *c);
int comm_world(const comm_t *c);

/* Collectives that have not finished after `seconds` (0 = never) end the
 * process with exit status exit_code and a message on stderr naming the
 * rank and the collective. Starts the watchdog thread on first use. */
void comm_set_timeout(comm_t *c, double seconds, int exit_code);

/* on = 0: collectives from now on are not timed (a rank waits for another
 * doing long one-sided work: tokenizer training, a checkpoint write); on = 1
 * times them again. */
void comm_watch(comm_t *c, int on);

/* Before the backend is chosen: with NCCL built in, picks this rank's GPU
 * (node-local rank modulo the GPUs seen) so the CUDA backend is created on
 * it. Without NCCL or without GPUs a no-op. Returns 0 or -1 with a message. */
int comm_select_gpu(comm_t *c, char *err, size_t errlen);

/* After the backend is chosen: when be is CUDA and NCCL is built in, creates
 * the NCCL communicator (rank 0 ncclGetUniqueId, MPI_Bcast, ncclCommInitRank;
 * also with one rank, so the collective path runs on a single GPU). Returns
 * 0 (also when there is nothing to do) or -1 with a message. */
int comm_gpu_setup(comm_t *c, const bk_backend *be, char *err, size_t errlen);

/* In-place sum over ranks of n floats on be's device: ncclAllReduce on CUDA
 * with NCCL, else MPI_Allreduce (a CUDA buffer without NCCL is staged
 * through host memory). force: run the collective even with one rank (the
 * benchmark); otherwise W = 1 returns at once. Returns 0 or -1 with a message. */
int comm_allreduce_sum(comm_t *c, const bk_backend *be, float *buf, size_t n, int force, char *err,
                       size_t errlen);
/* The same, then divided by the world size: the mean over ranks. */
int comm_allreduce_mean(comm_t *c, const bk_backend *be, float *buf, size_t n, int force, char *err,
                        size_t errlen);

/* In-place sum over ranks of n doubles in host memory. */
int comm_sum_f64(comm_t *c, double *buf, int n, char *err, size_t errlen);

/* *any = 1 when flag is non-zero on at least one rank (all ranks get the
 * same answer). Also a barrier. */
int comm_any(comm_t *c, int flag, int *any, char *err, size_t errlen);

/* Broadcasts bytes of host memory from root to every rank. */
int comm_bcast(comm_t *c, void *buf, size_t bytes, int root, char *err, size_t errlen);

#endif
