/* train_run: the recipe of a training run. Each phase is a function of its own module
 * (train/run.h); the state they share is one TrainRun. */
#include "train/run.h"

int train_run(const TrainOptions *o, Dist *dist, TrainResult *res) {
    TrainRun r;
    run_setup(&r, o, dist); /* model config, data, model and optimizer, resume */
    run_print_header(&r);
    stop_signals_install(&r.signals);
    r.t_start = gdp_now_seconds();

    for (; r.step < r.last; r.step++) {
        StepOutcome s;
        step_begin(&r, &s);            /* learning rate, zeroed gradients */
        step_forward_backward(&r, &s); /* each micro-batch: forward, loss, backward */
        step_reduce(&r);               /* gradients averaged over ranks */
        step_update(&r, &s);           /* clip + AdamW, unless the step guard skips the step */
        step_end(&r, &s);
        run_evaluate_and_log(&r, &s);  /* validation, log.tsv, progress line */
        if (run_save(&r, &s)) {        /* checkpoint; true: a stop signal ends the run */
            r.step++;
            break;
        }
        run_print_memory_after_first_step(&r);
    }

    r.result.steps_done = r.step;
    r.result.steps_run = r.step - r.first_step;
    r.result.skipped = r.guard.total;
    stop_signals_restore(&r.signals);
    run_print_summary(&r);
    if (res) *res = r.result;
    run_free(&r);
    return 0;
}
