/* run_trial — `bfworker run`: one attempt of a trial launched by bfd.
 *   bfworker run --trial ID --connect ENDPOINT --token TOKEN --out DIR [--attempt N] [--quiet]
 * Rank 0 fetches the resolved config over the worker link (worker/link.h),
 * broadcasts it to the other ranks, trains with resume from DIR's
 * checkpoint, and streams DIR/metrics.jsonl to bfd while training runs.
 * Returns the exit status: 0 completed, 75 stopped/preempted (checkpoint
 * written), 1 failed, 64 usage. */
#ifndef RUN_TRIAL_H
#define RUN_TRIAL_H

int run_trial_main(int argc, char **argv);

#endif
