/* bfctl logs tTRIAL [-f]: a trial's log (its workers' stdout and stderr),
 * paged from bfd's `logs` request; -f polls until the trial ends. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ctl/bfctl.h"
#include "ctl/ctl_client.h"

const opt_spec bfctl_logs_opts[] = {
    {"", 'f', OPT_FLAG, 0, 0, OPT_AT(ctl_flags, follow), NULL, "follow it until the trial ends"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

int bfctl_logs(int argc, char **argv) {
    ctl_flags a = {0};
    int rest = argc,
        prc = bfctl_parse(
            argc, argv, "a trial's log (its workers' stdout and stderr); -f follows it", &a, &rest);
    if (prc >= 0) return prc;
    argc -= rest - 1; /* the arguments after the options, argv[0] still the name */
    argv += rest - 1;
    long long job, trial;
    if (ctl_target_arg(argc, argv, NULL, "logs tTRIAL [-f]", 't', &job, &trial)) return BF_EX_USAGE;
    int follow = a.follow;
    ctl_conn *c;
    if (ctl_connect_or_say(&c)) return 1;
    long long off = 0;
    int rc = 0;
    for (;;) {
        json_t *r;
        if (ctl_request(
                c, "logs",
                json_pack("{s:I, s:I}", "trial", (json_int_t)trial, "offset", (json_int_t)off),
                &r)) {
            rc = 1;
            break;
        }
        const char *data = ctl_jstr(r, "data");
        fwrite(data, 1, strlen(data), stdout);
        fflush(stdout);
        long long next = ctl_jint(r, "next"), size = ctl_jint(r, "size");
        json_decref(r);
        int got = next > off;
        off = next;
        if (got && off < size) continue;
        if (!follow) break;
        json_t *t;
        if (ctl_request(c, "trial", json_pack("{s:I}", "trial", (json_int_t)trial), &t)) {
            rc = 1;
            break;
        }
        int fin = ctl_terminal_state(ctl_jstr(t, "state"));
        json_decref(t);
        if (fin && !got) break;
        usleep(300000);
    }
    ctl_close(&c);
    return rc;
}
