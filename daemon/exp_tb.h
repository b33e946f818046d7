/* exp_tb — bfd's TensorBoard exporter: each trial's stored points, as they
 * are stored, into $BF_HOME/tensorboard/NAME-JOB/tTRIAL/events.out.tfevents.*
 * (common/tfevents.h), with the HParams experiment in NAME-JOB/ and each
 * trial's session start and end in its own run.
 *
 * The store is the source: a trial's writer appends what the store holds
 * past the last sequence number it wrote. Next to each event file,
 * tTRIAL/.bf-progress records a (file size, last seq) pair that is known to
 * be complete; a restarted bfd cuts the file back to that size and goes on
 * from that seq, so a crash between storing and writing neither loses nor
 * repeats a point.
 *
 * Used by the event loop only (one thread). Functions return 0 or -1 with a
 * message; a trial whose files cannot be written is retried 30 s later. */
#ifndef EXP_TB_H
#define EXP_TB_H

#include <stddef.h>
#include <stdint.h>

#include "jobs/store.h"

typedef struct exp_tb exp_tb;

/* base: the folder of the job folders ($BF_HOME/tensorboard). enabled 0:
 * every call does nothing. */
int exp_tb_open(const char *base, int enabled, exp_tb **out, char *err, size_t errlen);
/* Saves every writer's progress and closes its file; an experiment being
 * gathered is finished from st first. */
void exp_tb_close(exp_tb **t, store *st);

/* New points of trial are in the store: writes them (a bounded number per
 * call; the rest on later ticks). */
int exp_tb_trial(exp_tb *t, store *st, int64_t trial, double now, char *err, size_t errlen);
/* The trial's attempt is over: writes the rest, its session end when its
 * state is final (COMPLETED, STOPPED: success; FAILED, CANCELLED:
 * failure), and closes its file. */
int exp_tb_trial_end(exp_tb *t, store *st, int64_t trial, double now, char *err, size_t errlen);
/* At start: finishes the files of trials that ended while bfd was down, or
 * whose last writes a crash cut off (a progress file without its session
 * end, of a trial whose state is final). */
int exp_tb_recover(exp_tb *t, store *st, double now, char *err, size_t errlen);
/* Once per loop round: gathers a job's experiment a page of its trials at
 * a time (a writer's first open starts it; written after its last trial),
 * continues trials that are behind and saves progress at most once a
 * second per trial; about 10 ms of each, going on next round. */
int exp_tb_tick(exp_tb *t, store *st, double now, char *err, size_t errlen);

#endif
