/* cmd_table — every bfworker command with its entry, argument, summary and
 * option table, in the order of the help text: what bfworker_main.c
 * dispatches on, what `bfworker --help` is written from, and what
 * tests/test_it_help.c checks each command's help and parser against. It
 * only lists; the commands never refer back to it. */
#include "worker/cmd/cmd.h"

#include <stddef.h>

const cmd_spec cmd_specs[] = {
    {"train", cmd_train, "CONFIG.yaml",
     "train per the config (standalone, no daemon; data parallel under mpirun)", cmd_train_opts},
    {"eval", cmd_eval, "CHECKPOINT",
     "evaluate a checkpoint (file or its folder): accuracy, heads used, attention FLOPs and wall "
     "time",
     cmd_eval_opts},
    {"profile", cmd_profile, "RUN",
     "a vit run's attention sparsity per layer on a calibration batch; writes RUN/profile.json",
     cmd_profile_opts},
    {"params", cmd_params, "CONFIG.yaml",
     "print parameters per block, the total and the memory training takes", cmd_params_opts},
    {"generate", cmd_generate, "CHECKPOINT",
     "continue a prompt with an lm checkpoint (KV cache; file or folder)", cmd_generate_opts},
    {"dump", cmd_dump, "CONFIG.yaml",
     "one training step's weights, batch, logits, gradients and losses as safetensors + JSON, "
     "for an outside check",
     cmd_dump_opts},
    {"export", cmd_export, "CHECKPOINT",
     "a run's weights as one safetensors file for inference, F32 or BF16 (--dtype bf16)",
     cmd_export_opts},
    {"run", cmd_run, NULL,
     "one attempt of a trial for bfd (config and metrics over the worker link; "
     "docs/protocol.md); started by bfd, not by hand",
     cmd_run_opts},
    {"serve", cmd_serve, NULL,
     "the agent of bfd's launcher: remote on this host: runs the attempts bfd hands it "
     "(docs/cluster.md)",
     cmd_serve_opts},
    {NULL, NULL, NULL, NULL, NULL},
};

void cmd_help(FILE *f) {
    fputs("usage: bfworker COMMAND [options]\n\ncommands:\n", f);
    for (const cmd_spec *c = cmd_specs; c->name; c++) {
        char head[64];
        int n = snprintf(head, sizeof head, "  %s %s", c->name, c->arg ? c->arg : "[options]");
        fprintf(f, "%-23s ", head);
        opts_wrap(f, c->summary, n < 23 ? 24 : n + 1, 24);
    }
    fputs("\n`bfworker COMMAND --help` lists the command's options.\n", f);
}
