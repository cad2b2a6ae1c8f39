/* Saving during a run: a checkpoint every --checkpoint-every steps, at the end, and when a stop
 * signal came to any rank (when there is an output folder), and the message a stop ends with. */
#include <stdio.h>
#include <stdlib.h>

#include "base/common.h"
#include "train/checkpoint.h"
#include "train/run.h"

bool run_save(TrainRun *r, const StepOutcome *s) {
    const TrainOptions *o = r->o;
    int stop = (int)dist_max_double(r->dist, (double)stop_signal_received());
    bool want = o->out && (s->is_last || stop || (o->checkpoint_every > 0 && (r->step + 1) % o->checkpoint_every == 0));
    if (want) {
        int64_t data_state[TRAIN_DATA_STATE_MAX];
        int n_state = r->train->get_state ? r->train->get_state(r->train->user, data_state, TRAIN_DATA_STATE_MAX) : 0;
        CheckpointMeta meta = {r->step + 1, r->rng, data_state, n_state, r->cfg_text, 0, o->zero_stage,
                               r->guard_saved, guard_state(&r->guard, r->guard_saved)};
        char *path = checkpoint_save(o->out, &r->ps, &r->opt, &meta, o->keep, r->dist);
        if (path) {
            snprintf(r->result.checkpoint, sizeof r->result.checkpoint, "%s", path);
            if (!o->quiet) printf("checkpoint: %s\n", path);
            free(path);
        }
    }
    if (!stop || s->is_last) return false;
    r->result.stopped_by = stop;
    if (r->root && o->out)
        printf("stopped by %s after step %lld of %lld: checkpoint %s written; resume with --resume %s "
               "(and this run's other flags)\n",
               stop_signal_name(stop), (long long)r->step + 1, (long long)o->steps, r->result.checkpoint, o->out);
    else if (r->root)
        printf("stopped by %s after step %lld of %lld; nothing was saved (no --out)\n", stop_signal_name(stop),
               (long long)r->step + 1, (long long)o->steps);
    fflush(stdout);
    return true;
}
