/* s2s_chain_train — pipeline s2s as six stages (docs/design.md#s2s-pipeline;
 * common/pipeline_decl.c): teacher -> avit -> profile -> distill -> finetune
 * -> eval. Each stage writes into ROOT/NAME-KEY/ (ROOT = s2s.root, or
 * OUT/stages) and, last, ROOT/NAME-KEY/stage.json (atomically): a folder with
 * it is done and reused, by this run and by any other whose stage has the
 * same key. s2s.stage runs one stage alone (its parents must be done): how
 * bfd runs shared stages as separate units of work. Metrics of every stage
 * go to OUT/metrics.jsonl under the stage's name ("teacher/val/acc",
 * "distill/train/loss_mse", "eval/student/test/acc"; docs/s2s.md lists
 * them), steps counted across the training stages. */
#ifndef S2S_CHAIN_H
#define S2S_CHAIN_H

#include "worker/host/host.h"

int s2s_chain_train(const bf_config *c, const train_opts *o, train_result *r, char *err,
                    size_t errlen);

#endif
