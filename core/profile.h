/* Per-op time of a training step (`gdp train --profile`): each op's forward and backward is timed
 * on the host between two synchronisations of the context's stream, summed by op name. The
 * synchronisations cost each op its launch overhead, so the sums read as "GPU time + ~10 us a
 * launch"; they show where a step goes, not the exact step time. */
#pragma once
#include <stdio.h>

#define PROFILE_MAX_OPS 64

typedef struct ProfileEntry {
    const char *name; /* the op's (static) name, or a phase of the trainer ("adamw", "all-reduce") */
    double forward_s, backward_s;
    long long forward_calls, backward_calls;
} ProfileEntry;

typedef struct OpProfile {
    ProfileEntry e[PROFILE_MAX_OPS];
    int n;
    int steps; /* steps the sums cover */
} OpProfile;

struct Ctx;
/* Adds seconds to `name`'s forward (backward = 0) or backward (1) sum. */
void profile_add(OpProfile *p, const char *name, int backward, double seconds);
/* Prints the entries, largest total first, as ms per step, with the share of the timed total. */
void profile_print(const OpProfile *p, FILE *f);
