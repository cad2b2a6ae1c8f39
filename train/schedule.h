/* Learning-rate schedules. Steps are 0-based; total_steps is the number of optimizer steps.
 *   warmup (every kind): lr * (step + 1) / warmup for step < warmup
 *   cosine:   after warmup, lr_min + (lr - lr_min) * 0.5 * (1 + cos(pi * r)),
 *             r = (step - warmup) / (total_steps - 1 - warmup), so the last step gets lr_min
 *   linear:   after warmup, lr + (lr_min - lr) * r, the same r
 *   wsd:      warmup, then flat lr, then over the last decay_frac of total_steps (default 0.2)
 *             lr_min + (lr - lr_min) * (1 - sqrt(p)), p = (step - decay_start + 1) / decay_steps,
 *             decay_steps = round(decay_frac * total_steps), decay_start = total_steps - decay_steps
 *   constant: lr after warmup
 * with lr_min = lr * final_frac. Steps at or past total_steps get lr_min (constant: lr). */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum LrKind { LR_COSINE = 0, LR_WSD, LR_LINEAR, LR_CONSTANT } LrKind;

typedef struct LrSchedule {
    LrKind kind;
    double lr;           /* peak */
    double final_frac;   /* lr_min = lr * final_frac */
    int64_t warmup;      /* steps */
    int64_t total_steps;
    double decay_frac;   /* wsd only; <= 0 means the default 0.2 */
} LrSchedule;

/* "cosine", "wsd", "linear" or "constant"; false for anything else. */
bool lr_kind_parse(const char *text, LrKind *out);
const char *lr_kind_name(LrKind k);
/* Fatal error naming the field when the schedule makes no sense (lr < 0, warmup >= total, ...). */
void lr_schedule_check(const LrSchedule *s);
double lr_at(const LrSchedule *s, int64_t step);

#ifdef __cplusplus
}
#endif
