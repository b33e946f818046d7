/* force — bfworker train --force's write-beside-and-swap of a run folder
 * (docs/checkpoints.md, "--force"). The new run writes into DIR/.force-new;
 * once its first checkpoint there is whole, force_swap moves it in:
 *   1. DIR/.force-old.part is made and the old run's files are renamed into it;
 *   2. .force-old.part is renamed .force-old (the old run is out, whole);
 *   3. the new run's files are renamed from .force-new into DIR, and
 *      .force-new removed;
 *   4. .force-old and its files are removed.
 * Each step renames or removes what is already whole elsewhere, so a process
 * killed anywhere leaves a state that force_recover resolves, in one
 * direction per state:
 *   - .force-old.part or .force-old: the swap had begun, which it does only
 *     once the new run's checkpoint is whole: it is finished (the new run);
 *   - .force-new alone: a new run that never reached its swap: it is
 *     removed, and the old run stays byte for byte.
 * Only rank 0 calls these. Files other than a run's (stage folders, a
 * user's own) stay where they are. */
#ifndef FORCE_H
#define FORCE_H

#include <stddef.h>

#define FORCE_NEW ".force-new"
#define FORCE_OLD ".force-old"
#define FORCE_OLD_PART ".force-old.part"

/* Whether name (a file in a run folder) belongs to a run and so is moved out
 * by a swap: metrics.jsonl, the checkpoint set or checkpoint.bin (and their
 * temporaries), state.json, config.yaml, tokenizer.model, test_samples.tsv,
 * profile.json, TensorBoard event files. */
int force_is_run_file(const char *name);

/* Swaps dir/.force-new in for dir's run (steps 1-4 above). 0, or -1 with a
 * message; *begun (nullable) is set to 1 once step 1 has started: from then
 * on .force-new must not be discarded (the next force_recover finishes the
 * swap), before it the old run is untouched. */
int force_swap(const char *dir, int *begun, char *err, size_t errlen);

/* Resolves what a process killed during a --force run left in dir (see
 * above); nothing to do is 0. Says what it did on stderr unless quiet.
 * 0, or -1 with a message naming the folders (then nothing is removed). */
int force_recover(const char *dir, int quiet, char *err, size_t errlen);

/* Removes dir/.force-new and its files (a --force run that failed before its
 * swap); missing is fine. 0 or -1 with a message. */
int force_discard(const char *dir, char *err, size_t errlen);

#endif
