/* s2s_stages — the six stages of pipeline s2s and their keys, shared by the
 * worker (which writes each stage into ROOT/NAME-KEY/) and bfd (which
 * schedules each key once across trials and jobs).
 *
 * A stage's key names exactly the config it depends on: FNV-1a 64 over
 *   "stage=NAME\n"
 *   "KEY=VALUE\n"   for every dependency key, in the schema table's order,
 *                   VALUE as cfg_format_value writes it (canonical flow text)
 *   "parent=PARENT_KEY\n"  (empty for teacher)
 * written as 16 hex digits. Dependencies are listed by key prefix
 * (s2s_stages.c), so a key added to the schema under a listed prefix is a
 * dependency without a change here. Keys no stage depends on (device,
 * train.eval_every, train.checkpoint_every, train.log_every, model.mixers,
 * budget.*) never change a key. */
#ifndef S2S_STAGES_H
#define S2S_STAGES_H

#include "common/cfg.h"

#ifdef __cplusplus
extern "C" {
#endif

#define S2S_STAGES 6
#define S2S_KEY_LEN 16

typedef struct s2s_stage {
    const char *name; /* static: "teacher", "avit", ... */
    char key[S2S_KEY_LEN + 1];
    char parent[S2S_KEY_LEN + 1]; /* "" for teacher */
    char dir[32];                 /* folder name "NAME-KEY" */
} s2s_stage;

/* The six stages of pipeline s2s, in order: teacher, avit, profile, distill,
 * finetune, eval, each with its key, its parent's key and its folder name.
 * Pure function of c (whatever c.pipeline says). */
void s2s_stage_plan(const bf_config *c, s2s_stage out[S2S_STAGES]);

/* Index 0..5 of a stage name, or -1 if it is not one. */
int s2s_stage_index(const char *name);

/* Name of stage i (0..5), or NULL. */
const char *s2s_stage_name(int i);

/* 1 when stage i depends on config key `key` directly (not through its
 * parent), else 0; for docs, tests and `bfctl`. */
int s2s_stage_depends(int i, const char *key);

#ifdef __cplusplus
}
#endif
#endif
