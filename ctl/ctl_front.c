/* ctl_front.c — `bfctl results` and `bfctl best` for the multi-objective
 * side of sweeps: the Pareto ranks of a job's trials over its objectives,
 * trials that differ only in train.seed folded into mean +- std
 * (--group-by-seed), and several jobs side by side, rows matched by the
 * swept keys they share. It reads what bfd's `job` request gives; the
 * table itself is jobs/front.c's (the dashboard serves the same); this
 * file prints it. It changes nothing in bfd. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/bfctl.h"
#include "ctl/ctl_client.h"
#include "jobs/front.h"
#include "jobs/pareto.h"

static const char *jstr(json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

/* One value column of row r for objective name: "0.8123" or, grouped,
 * "0.8123\xc2\xb10.0100". */
static void value_text(json_t *r, const char *name, int grouped, char *buf, size_t len) {
    json_t *v = json_object_get(json_object_get(r, "objectives"), name);
    json_t *mean = grouped ? json_object_get(v, "mean") : v;
    json_t *sd = grouped ? json_object_get(v, "std") : NULL;
    if (!json_is_number(mean))
        snprintf(buf, len, "-");
    else if (json_is_number(sd))
        snprintf(buf, len, "%.4f\xc2\xb1%.4f", json_number_value(mean), json_number_value(sd));
    else
        snprintf(buf, len, "%.4f", json_number_value(mean));
}

/* The table (front_table's result) as text; front_only: its rank-1 rows. */
static void print_table(json_t *tab, json_t *const *replies, const long long *ids, int njobs,
                        int front_only) {
    int grouped = json_is_true(json_object_get(tab, "grouped_by_seed"));
    json_t *objs = json_object_get(tab, "objectives");
    json_t *rows = json_object_get(tab, grouped ? "groups" : "trials");
    int m = (int)json_array_size(objs);
    char names[640] = "";
    for (int k = 0; k < m; k++) {
        size_t l = strlen(names);
        json_t *o = json_array_get(objs, (size_t)k);
        snprintf(names + l, sizeof names - l, "%s%s (%s)", k ? ", " : "", jstr(o, "name"),
                 jstr(o, "goal"));
    }
    if (njobs == 1)
        printf("job %lld '%s': %zu %s; %s over %s%s\n", ids[0], jstr(replies[0], "name"),
               json_array_size(rows), grouped ? "seed groups" : "trials",
               front_only ? "the Pareto front" : "Pareto front marked *", names,
               grouped ? " on the means over train.seed" : "");
    else {
        printf("jobs");
        for (int j = 0; j < njobs; j++) printf(" %lld '%s'", ids[j], jstr(replies[j], "name"));
        printf(" side by side, rows matched by the keys they all sweep; Pareto front over %s "
               "marked *\n",
               names);
    }
    int width[PARETO_MAX_OBJECTIVES];
    for (int k = 0; k < m && k < PARETO_MAX_OBJECTIVES; k++) {
        int w = (int)strlen(jstr(json_array_get(objs, (size_t)k), "name")),
            least = grouped ? 15 : 10;
        width[k] = w > least ? w : least;
    }
    printf(" ");
    if (njobs > 1) printf(" %-5s", "JOB");
    printf(" %-12s %-11s %4s %8s", grouped ? "TRIALS" : "TRIAL", grouped ? "N" : "STATE", "RANK",
           "CROWDING");
    for (int k = 0; k < m; k++)
        printf(" %*s", width[k], jstr(json_array_get(objs, (size_t)k), "name"));
    printf("  PARAMS\n");
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r) {
        long long rank = json_integer_value(json_object_get(r, "rank"));
        if (front_only && rank != 1) continue;
        char who[64], state[32], rk[16] = "-", crowd[16] = "-", key[1024];
        if (grouped) {
            json_t *tr = json_object_get(r, "trials");
            long long a = json_integer_value(json_array_get(tr, 0));
            size_t nt = json_array_size(tr);
            if (nt > 1)
                snprintf(who, sizeof who, "t%lld+%zu", a, nt - 1);
            else
                snprintf(who, sizeof who, "t%lld", a);
            snprintf(state, sizeof state, "%lld/%zu",
                     (long long)json_integer_value(json_object_get(r, "n")), nt);
        } else {
            snprintf(who, sizeof who, "t%lld",
                     (long long)json_integer_value(json_object_get(r, "id")));
            snprintf(state, sizeof state, "%s", jstr(r, "state"));
        }
        if (rank) snprintf(rk, sizeof rk, "%lld", rank);
        json_t *c = json_object_get(r, "crowding");
        if (json_is_string(c))
            snprintf(crowd, sizeof crowd, "inf");
        else if (json_is_number(c))
            snprintf(crowd, sizeof crowd, "%.3f", json_number_value(c));
        printf("%c", rank == 1 ? '*' : ' ');
        if (njobs > 1) printf(" %-5lld", (long long)json_integer_value(json_object_get(r, "job")));
        printf(" %-12s %-11s %4s %8s", who, state, rk, crowd);
        for (int k = 0; k < m; k++) {
            char v[48];
            value_text(r, jstr(json_array_get(objs, (size_t)k), "name"), grouped, v, sizeof v);
            /* the +- sign is two bytes and one column */
            printf(" %*s", width[k] + (strstr(v, "\xc2\xb1") ? 1 : 0), v);
        }
        front_params_text(json_object_get(r, "params"), key, sizeof key);
        printf("  %s\n", key[0] ? key : "(no swept key)");
    }
}

int ctl_front(ctl_conn *c, const long long *jobs, int njobs, int group_by_seed, int json,
              int front_only) {
    json_t *replies[CTL_FRONT_MAX_JOBS] = {0};
    if (njobs > CTL_FRONT_MAX_JOBS) njobs = CTL_FRONT_MAX_JOBS;
    int rc = 0;
    /* every page of each job's trials */
    for (int j = 0; j < njobs && rc == 0; j++)
        rc = ctl_request_pages(c, "job", json_pack("{s:I}", "job", (json_int_t)jobs[j]), "trials",
                               &replies[j]);
    json_t *tab = NULL;
    if (rc == 0) {
        char err[512];
        tab = front_table(replies, jobs, njobs, group_by_seed, json && front_only, err, sizeof err);
        if (!tab) fprintf(stderr, "bfctl results: %s\n", err);
        rc = tab ? 0 : 1;
    }
    if (tab && json) {
        char *txt = json_dumps(tab, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12));
        if (txt) printf("%s\n", txt);
        rc = txt ? 0 : 1;
        free(txt);
    } else if (tab) {
        print_table(tab, replies, jobs, njobs, front_only);
    }
    json_decref(tab);
    for (int j = 0; j < njobs; j++) json_decref(replies[j]);
    return rc;
}

int ctl_job_objectives(ctl_conn *c, long long job) {
    json_t *r;
    if (ctl_call_or_say(c, "job", json_pack("{s:I}", "job", (json_int_t)job), &r)) return -1;
    size_t m = json_array_size(json_object_get(r, "objectives"));
    json_decref(r);
    return m ? (int)m : 1;
}
