/* req_edit.c — the edit request (bfctl edit, the dashboard): a running
 * sweep's max_parallel, values added to one of its grid axes (the new
 * trials appended, the old ones untouched), or its pending trials dropped
 * by a KEY=VALUE filter. Each is changed in the store with an EDIT event
 * (so a restarted bfd keeps it, and the dashboard's stream shows it), and
 * taken up by the next scheduling pass. */
#include "daemon/req.h"

#include <stdio.h>
#include <string.h>

/* edit {max_parallel}: how many of the job's trials run at once. */
static void edit_parallel(bfd *d, void *s, proto_msg *m, long long id, const store_job *j,
                          long long par) {
    char err[1024];
    if (par < 1 && !strcmp(j->method, "tpe")) {
        reply_err(d, s, m, PROTO_E_FIELD,
                  "edit: job %lld is a tpe sweep: max_parallel must be at least 1", id);
        return;
    }
    int was;
    if (store_job_set_parallel(d->st, id, (int)par, &was, err, sizeof err)) {
        reply_err(d, s, m, PROTO_E_INTERNAL, "edit: %s", err);
        return;
    }
    bfd_log("job %lld: max_parallel %lld (was %d)", id, par, was);
    json_t *b = json_pack("{s:I, s:I, s:i}", "job", (json_int_t)id, "max_parallel", (json_int_t)par,
                          "was", was);
    reply(d, s, m, "edited", b);
    json_decref(b);
    d->dirty = 1;
}

/* "KEY=REST" into key (a swept key's length at most) and *rest: 0, or -1
 * after replying bad_field. */
static int split_assign(bfd *d, void *s, proto_msg *m, const char *field, const char *text,
                        char key[128], const char **rest) {
    const char *eq = strchr(text, '=');
    if (!eq || eq == text || (size_t)(eq - text) >= 128 || !eq[1]) {
        reply_err(d, s, m, PROTO_E_FIELD, "edit: '%s' must be KEY=%s, got '%.80s'", field,
                  !strcmp(field, "add") ? "V1,V2,..." : "VALUE", text);
        return -1;
    }
    memcpy(key, text, (size_t)(eq - text));
    key[eq - text] = '\0';
    *rest = eq + 1;
    return 0;
}

/* The job's sweep with the axis key in *axis: 0, or nonzero after replying
 * (what_for names the edit in the message). */
static int job_axis(bfd *d, void *s, proto_msg *m, long long id, const char *key,
                    const char *what_for, sweep_spec **spec, int *axis) {
    char err[1024];
    if (store_job_sweep(d->st, id, spec, err, sizeof err)) {
        reply_err(d, s, m, PROTO_E_STATE, "edit %s: %s", what_for, err);
        return -1;
    }
    if (!(*spec)->is_sweep) {
        reply_err(d, s, m, PROTO_E_STATE, "edit %s: job %lld is one config, not a sweep", what_for,
                  id);
        sweep_spec_destroy(spec);
        return -1;
    }
    if ((*axis = sweep_axis(*spec, key, err, sizeof err)) < 0) {
        reply_err(d, s, m, PROTO_E_FIELD, "edit %s: job %lld: %s", what_for, id, err);
        sweep_spec_destroy(spec);
        return -1;
    }
    return 0;
}

/* edit {add: "KEY=V1,V2"}: values appended to a grid axis, their trials
 * appended to the job. */
static void edit_add(bfd *d, void *s, proto_msg *m, long long id, const store_job *j,
                     const char *text) {
    char key[128], err[1024];
    const char *list;
    if (split_assign(d, s, m, "add", text, key, &list)) return;
    if (strcmp(j->method, "grid")) {
        reply_err(d, s, m, PROTO_E_STATE,
                  "edit --add: job %lld is a %s sweep: values are added to grid axes only (its "
                  "trials are %s, not a product of listed values)",
                  id, j->method, !strcmp(j->method, "tpe") ? "proposed" : "drawn");
        return;
    }
    static char values[SWEEP_EDIT_VALUES][SWEEP_VALUE_MAX]; /* the loop's thread only */
    int n = sweep_split_values(list, values, SWEEP_EDIT_VALUES, err, sizeof err);
    if (n < 0) {
        reply_err(d, s, m, PROTO_E_FIELD, "edit --add %s: %s", key, err);
        return;
    }
    sweep_spec *spec;
    int axis;
    if (job_axis(d, s, m, id, key, "--add", &spec, &axis)) return;
    if (spec->params[axis].dist != SWEEP_DIST_VALUES) {
        reply_err(d, s, m, PROTO_E_FIELD,
                  "edit --add: %s is a range of job %lld, not a list of values", key, id);
        sweep_spec_destroy(&spec);
        return;
    }
    long long added;
    int rc = store_job_add_values(d->st, id, spec, axis, values, n, &added, err, sizeof err);
    sweep_spec_destroy(&spec);
    if (rc) {
        reply_err(d, s, m, PROTO_E_FIELD, "edit --add: job %lld: %s", id, err);
        return;
    }
    bfd_log("job %lld: added %d values to %s (%lld trials)", id, n, key, added);
    json_t *b = json_pack("{s:I, s:s, s:I}", "job", (json_int_t)id, "axis", key, "added",
                          (json_int_t)added);
    reply(d, s, m, "edited", b);
    json_decref(b);
    d->dirty = 1;
}

/* edit {drop_pending: "KEY=VALUE"}: the job's pending trials with that value
 * cancelled, with the reason. */
static void edit_drop(bfd *d, void *s, proto_msg *m, long long id, const char *text) {
    char key[128], canon[1024], err[1024];
    const char *value;
    if (split_assign(d, s, m, "drop_pending", text, key, &value)) return;
    sweep_spec *spec;
    int axis;
    if (job_axis(d, s, m, id, key, "--drop-pending", &spec, &axis)) return;
    if (sweep_value_canon(spec, key, value, canon, sizeof canon, err, sizeof err)) {
        reply_err(d, s, m, PROTO_E_FIELD, "edit --drop-pending: %s", err);
        sweep_spec_destroy(&spec);
        return;
    }
    int dropped;
    int rc = store_job_drop_pending(d->st, id, spec, key, canon, &dropped, err, sizeof err);
    sweep_spec_destroy(&spec);
    if (rc) {
        reply_err(d, s, m, PROTO_E_INTERNAL, "edit --drop-pending: %s", err);
        return;
    }
    bfd_log("job %lld: dropped %d pending trials with %s=%s", id, dropped, key, canon);
    json_t *b = json_pack("{s:I, s:s, s:I}", "job", (json_int_t)id, "filter", text, "dropped",
                          (json_int_t)dropped);
    reply(d, s, m, "edited", b);
    json_decref(b);
    d->dirty = 1;
}

void req_edit(bfd *d, void *s, proto_msg *m) {
    char ferr[512];
    long long id, par;
    const char *add, *drop;
    store_job j;
    FIELD(proto_get_int(m->body, "max_parallel", 0, 0, 100000, -1, &par, ferr, sizeof ferr));
    FIELD(proto_get_str(m->body, "add", 0, 4096, &add, ferr, sizeof ferr));
    FIELD(proto_get_str(m->body, "drop_pending", 0, 1024, &drop, ferr, sizeof ferr));
    if ((par >= 0) + !!add + !!drop != 1) {
        reply_err(d, s, m, PROTO_E_FIELD,
                  "edit: give one of max_parallel (N), add (\"KEY=V1,V2\") or drop_pending "
                  "(\"KEY=VALUE\")");
        return;
    }
    if (get_job_field(d, s, m, &id, &j)) return;
    if (par >= 0)
        edit_parallel(d, s, m, id, &j, par);
    else if (add)
        edit_add(d, s, m, id, &j, add);
    else
        edit_drop(d, s, m, id, drop);
}
