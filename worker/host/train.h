/* train — one training run of a process, for `bfworker train` and for a
 * trial bfd runs: picks the driver of c's pipeline (s2s: its stages,
 * host/s2s_chain.c; any other: one pipeline through host/host.c). */
#ifndef TRAIN_H
#define TRAIN_H

#include "worker/host/host.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Trains per c; returns TRAIN_OK, TRAIN_PREEMPTED (stopped by *o->stop after
 * writing a checkpoint) or TRAIN_ERROR with a message. r nullable. Every
 * rank calls this with the same config; only rank 0 writes files and prints
 * progress. A TRAIN_ERROR on one rank may leave the others waiting in a
 * collective: the caller must then end the job (comm_abort). */
int train_config(const bf_config *c, const train_opts *o, train_result *r, char *err,
                 size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
