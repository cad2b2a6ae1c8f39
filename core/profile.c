#include "core/profile.h"

#include <stdlib.h>
#include <string.h>

void profile_add(OpProfile *p, const char *name, int backward, double seconds) {
    int i = 0;
    while (i < p->n && strcmp(p->e[i].name, name)) i++;
    if (i == p->n) {
        if (p->n == PROFILE_MAX_OPS) return; /* more distinct names than fit: the rest go untimed */
        memset(&p->e[i], 0, sizeof p->e[i]);
        p->e[i].name = name;
        p->n++;
    }
    if (backward)
        p->e[i].backward_s += seconds, p->e[i].backward_calls++;
    else
        p->e[i].forward_s += seconds, p->e[i].forward_calls++;
}

static int by_total_desc(const void *a, const void *b) {
    const ProfileEntry *x = (const ProfileEntry *)a, *y = (const ProfileEntry *)b;
    double tx = x->forward_s + x->backward_s, ty = y->forward_s + y->backward_s;
    return (tx < ty) - (tx > ty);
}

void profile_print(const OpProfile *p, FILE *f) {
    ProfileEntry sorted[PROFILE_MAX_OPS];
    memcpy(sorted, p->e, sizeof(ProfileEntry) * (size_t)p->n);
    qsort(sorted, (size_t)p->n, sizeof sorted[0], by_total_desc);
    double total = 0;
    for (int i = 0; i < p->n; i++) total += sorted[i].forward_s + sorted[i].backward_s;
    const double per = p->steps > 0 ? 1e3 / p->steps : 0;
    fprintf(f, "profile over %d step(s), ms per step (calls per step):\n", p->steps);
    fprintf(f, "  %-22s %10s %10s %10s %7s\n", "op", "forward", "backward", "total", "share");
    for (int i = 0; i < p->n; i++) {
        const ProfileEntry *e = &sorted[i];
        double t = e->forward_s + e->backward_s;
        fprintf(f, "  %-22s %10.3f %10.3f %10.3f %6.1f%%  (%lld + %lld)\n", e->name, e->forward_s * per,
                e->backward_s * per, t * per, total > 0 ? 100 * t / total : 0, e->forward_calls / (p->steps ? p->steps : 1),
                e->backward_calls / (p->steps ? p->steps : 1));
    }
    fprintf(f, "  %-22s %32.3f\n", "timed total", total * per);
}
