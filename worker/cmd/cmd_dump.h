/* dump — one training step of a config, written out for an outside
 * implementation to check against (tests/test_parity_torch.py):
 *   bfworker dump CONFIG.yaml [--set KEY=VALUE ...] --out DIR [--batch N]
 * opens the data as training does, builds the model from the config's seed,
 * sets the knobs of step 0 as the pipeline would, takes the first training
 * batch, runs one training-mode forward and backward and writes into DIR:
 *   model.safetensors    the initial weights, by name (F32)
 *   batch.safetensors    "ids", "mask" [B,T] and "targets" ([B] encoder,
 *                        [B,T] lm; -1 = ignored) as F32, and with the budget
 *                        "noise.L" [B,H] per layer: the scaled Gumbel noise
 *                        sigma * G the gate added to the head scores
 *   outputs.safetensors  "logits" ([B,n_classes] encoder, [B*T,V] lm)
 *   grads.safetensors    d(total loss)/d(tensor) for every parameter, by its name
 *   dump.json            the losses, the knobs and the shape
 * Nothing is trained and no checkpoint is written. */
#ifndef DUMP_H
#define DUMP_H

#include <stddef.h>

#include "common/cfg.h"

#define DUMP_MAX_BATCH 4096

/* Runs the step of c over `batch` rows (0 = c->train.batch) and writes the
 * files into out_dir (created when missing; files there of the same names
 * are replaced). Progress goes to stderr unless quiet. Returns 0, or -1 with
 * a message. */
int dump_write(const bf_config *c, const char *out_dir, int batch, int quiet, char *err,
               size_t errlen);

/* `bfworker dump ...` (argv as main's); returns the exit status: 0 done,
 * 1 failed, 64 usage. */
int dump_main(int argc, char **argv);

#endif
