/* Learning-rate schedules (see train/schedule.h). */
#include "train/schedule.h"

#include <math.h>
#include <string.h>

#include "base/common.h"

static const char *const kind_names[] = {"cosine", "wsd", "linear", "constant"};

bool lr_kind_parse(const char *text, LrKind *out) {
    for (int i = 0; i < 4; i++)
        if (text && !strcmp(text, kind_names[i])) {
            *out = (LrKind)i;
            return true;
        }
    return false;
}

const char *lr_kind_name(LrKind k) { return (int)k >= 0 && (int)k < 4 ? kind_names[k] : "?"; }

static double decay_frac_of(const LrSchedule *s) { return s->decay_frac > 0 ? s->decay_frac : 0.2; }

void lr_schedule_check(const LrSchedule *s) {
    GDP_CHECK((int)s->kind >= 0 && (int)s->kind < 4, "lr schedule: unknown kind %d (use cosine, wsd, linear or constant)",
              (int)s->kind);
    GDP_CHECK(s->lr >= 0 && isfinite(s->lr), "lr schedule: the learning rate %g must be finite and >= 0", s->lr);
    GDP_CHECK(s->final_frac >= 0 && s->final_frac <= 1, "lr schedule: the final lr fraction %g must be in [0, 1]",
              s->final_frac);
    GDP_CHECK(s->total_steps >= 1, "lr schedule: the number of steps (%lld) must be at least 1",
              (long long)s->total_steps);
    GDP_CHECK(s->warmup >= 0 && s->warmup <= s->total_steps,
              "lr schedule: warmup (%lld steps) must be in [0, steps = %lld]", (long long)s->warmup,
              (long long)s->total_steps);
    GDP_CHECK(decay_frac_of(s) <= 1, "lr schedule: the wsd decay fraction %g must be in (0, 1]", s->decay_frac);
}

double lr_at(const LrSchedule *s, int64_t step) {
    double lr = s->lr, lr_min = s->lr * s->final_frac;
    if (step < 0) step = 0;
    if (step < s->warmup) return lr * (double)(step + 1) / (double)s->warmup;
    if (s->kind == LR_CONSTANT) return lr;
    if (step >= s->total_steps) return lr_min;
    if (s->kind == LR_WSD) {
        int64_t decay_steps = (int64_t)llround(decay_frac_of(s) * (double)s->total_steps);
        if (decay_steps < 1) decay_steps = 1;
        int64_t decay_start = s->total_steps - decay_steps;
        if (step < decay_start) return lr;
        double p = (double)(step - decay_start + 1) / (double)decay_steps;
        return lr_min + (lr - lr_min) * (1.0 - sqrt(p));
    }
    int64_t span = s->total_steps - 1 - s->warmup;
    double r = span > 0 ? (double)(step - s->warmup) / (double)span : 1.0;
    if (r > 1) r = 1;
    if (s->kind == LR_LINEAR) return lr + (lr_min - lr) * r;
    return lr_min + (lr - lr_min) * 0.5 * (1.0 + cos(M_PI * r));
}
