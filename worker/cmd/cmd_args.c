/* cmd_args — what every bfworker command shares on its command line: the
 * help text, the option scanner (unknown options refused), and loading a
 * config file with its --set overrides. It runs no command and opens no run. */
#include "worker/cmd/cmd.h"

#include <stdio.h>
#include <string.h>

const char *const cmd_usage =
    "usage: bfworker COMMAND [options]\n"
    "\n"
    "commands:\n"
    "  train CONFIG.yaml   train per the config (standalone, no daemon)\n"
    "      --set KEY=VALUE   override one config key (dotted path; repeatable)\n"
    "      --out DIR         write metrics.jsonl, config.yaml, the checkpoint here (default "
    "runs/NAME)\n"
    "      --resume [DIR]    continue from DIR's checkpoint if it exists (DIR: the --out "
    "folder)\n"
    "      --force           start over in an --out folder that holds a run: the new run\n"
    "                        is written beside it (DIR/.force-new) and swapped in by renames\n"
    "                        at its first checkpoint (s2s: its first stage checkpoint), so a\n"
    "                        bad input or a run that fails before leaves the old one; a swap\n"
    "                        cut short by a kill is finished by the next train into DIR;\n"
    "                        without --resume or --force such a folder is refused\n"
    "      --comm-timeout S  data parallel: a collective not done in S seconds ends the rank\n"
    "                        with status 69 (a peer died; default 600, 0 = never)\n"
    "      --quiet           no progress lines\n"
    "      --stage NAME      s2s: run only this stage (teacher, avit, profile, distill,\n"
    "                        finetune, eval); its parents must be done (= --set s2s.stage=)\n"
    "      --stage-root DIR  s2s: the stage folders NAME-KEY/ (default OUT/stages; stages\n"
    "                        done there are reused by any run with the same key)\n"
    "  eval CHECKPOINT     evaluate a checkpoint (file or its folder): accuracy, heads used,\n"
    "                      attention FLOPs and wall time\n"
    "      --split val|test  which split (default test)\n"
    "      --samples FILE    write one line per sample: mean s, tokens, loss, correct\n"
    "      --set KEY=VALUE   e.g. --set device=cpu, --set train.batch=1\n"
    "  profile RUN         a vit run's attention sparsity per layer (normalised entropy,\n"
    "                      top-10% attention mass, A-ViT keep fraction) on a calibration\n"
    "                      batch of validation images; writes RUN/profile.json\n"
    "      --samples N       calibration images (default 64)\n"
    "      --json            print the JSON instead of the table\n"
    "      --set KEY=VALUE   e.g. --set device=cpu\n"
    "  params CONFIG.yaml  print parameters per block and the total\n"
    "      --set KEY=VALUE\n"
    "  generate CHECKPOINT continue a prompt with an lm checkpoint (KV cache; file or folder)\n"
    "      --prompt TEXT     the text to continue (required; may be \"\")\n"
    "      --tokens N        tokens to generate (default 100)\n"
    "      --temperature T   0 = greedy; default 0.8\n"
    "      --top-k K         sample among the K most likely tokens (default 40; 0 = all)\n"
    "      --seed S          sampling seed (default 1)\n"
    "      --set KEY=VALUE   e.g. --set device=cpu\n"
    "  dump CONFIG.yaml --out DIR [--set KEY=VALUE ...] [--batch N] [--stage S]\n"
    "                      one training step's weights, batch, logits, gradients and losses\n"
    "                      as safetensors + JSON, for an outside check (bfworker dump --help)\n"
    "  run --trial ID --connect ENDPOINT --token TOKEN --out DIR\n"
    "                      one attempt of a trial for bfd (config and metrics over the\n"
    "                      worker link; docs/protocol.md); started by bfd, not by hand\n"
    "  serve --connect ENDPOINT [--slots N] [--name NAME] [--mpirun PATH] [--grace S]\n"
    "        [--quiet]     the agent of bfd's launcher: remote on this host: runs the\n"
    "                      attempts bfd hands it (docs/cluster.md; bfworker serve --help)\n"
    "\n"
    "SIGTERM during training writes a checkpoint and exits with status 75.\n"
    "Data parallel: mpirun -np R bfworker train ... (docs/distributed.md); exit status 1 =\n"
    "error (all ranks end), 69 = a peer rank died or hung.\n";

int cmd_listed(const char *const *list, const char *o) {
    for (; list && *list; list++)
        if (strcmp(*list, o) == 0) return 1;
    return 0;
}

int cmd_wants_help(int argc, char **argv) {
    return argc >= 3 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0);
}

/* Loads CONFIG (or a checkpoint's config text) and applies --set options from argv. */
int cmd_load_config(bf_config *c, const char *path, int argc, char **argv, int from, char *err,
                    size_t errlen) {
    cfg_defaults(c);
    if (path && cfg_load_file(c, path, err, errlen)) return -1;
    for (int i = from; i < argc; i++)
        if (strcmp(argv[i], "--set") == 0 && i + 1 < argc) {
            if (cfg_set(c, argv[++i], err, errlen)) return -1;
        }
    return cfg_validate(c, err, errlen);
}

const char *cmd_opt_value(int argc, char **argv, int from, const char *name) {
    const char *v = NULL;
    for (int i = from; i < argc - 1; i++)
        if (strcmp(argv[i], name) == 0) v = argv[++i];
    return v;
}

int cmd_has_flag(int argc, char **argv, int from, const char *name) {
    for (int i = from; i < argc; i++)
        if (strcmp(argv[i], name) == 0) return 1;
    return 0;
}

/* Rejects options this command does not know, so a typo is not silently ignored. */
int cmd_check_options(int argc, char **argv, int from, const char *const *with_value,
                      const char *const *flags) {
    for (int i = from; i < argc; i++) {
        int ok = 0;
        for (const char *const *p = with_value; *p; p++)
            if (strcmp(argv[i], *p) == 0) {
                if (i + 1 >= argc) {
                    fprintf(stderr, "bfworker: %s needs a value\n", argv[i]);
                    return -1;
                }
                i++;
                ok = 1;
                break;
            }
        for (const char *const *p = flags; !ok && *p; p++)
            if (strcmp(argv[i], *p) == 0) ok = 1;
        if (!ok) {
            fprintf(stderr, "bfworker: unknown option '%s' (see bfworker --help)\n", argv[i]);
            return -1;
        }
    }
    return 0;
}

int cmd_preamble(int argc, char **argv, const char *what) {
    if (cmd_wants_help(argc, argv)) {
        fputs(cmd_usage, stdout);
        return CMD_OK;
    }
    if (argc < 3 || argv[2][0] == '-') {
        fprintf(stderr, "bfworker %s: missing %s\n%s", argv[1], what, cmd_usage);
        return CMD_USAGE;
    }
    return -1;
}
