/* cfg_sched.c — the schedule value type: a number that moves from start to
 * end over training progress, and the names of its kinds. The train loop
 * evaluates it every step; the formatter writes its kind's name. It never
 * reads YAML, never looks at the schema and never touches a bf_config. */
#include "common/cfg.h"

#include <math.h>

static const char *const sched_names[] = {"constant", "linear", "exp", "cosine"};

const char *cfg_sched_name(cfg_sched_kind k) { return (unsigned)k < 4 ? sched_names[k] : "?"; }

float cfg_schedule_at(const cfg_schedule *s, float p) {
    if (!(p > 0.0f)) p = 0.0f; /* also maps NaN to 0 */
    if (p > 1.0f) p = 1.0f;
    switch (s->kind) {
    case CFG_SCHED_CONSTANT:
        return s->start;
    case CFG_SCHED_EXP:
        if (s->start > 0.0f && s->end > 0.0f) return s->start * powf(s->end / s->start, p);
        return s->start + (s->end - s->start) * p;
    case CFG_SCHED_COSINE:
        return s->end + (s->start - s->end) * 0.5f * (1.0f + cosf(3.14159265358979f * p));
    case CFG_SCHED_LINEAR:
    default:
        return s->start + (s->end - s->start) * p;
    }
}
