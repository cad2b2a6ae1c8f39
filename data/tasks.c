/* Group word problems: permutation tables, running products, seeded batches, the prefix metric.
 * Conventions (element order, product, labels) are in data/tasks.h. */
#include "data/tasks.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *group_names_help(void) { return "S2..S6, A3..A6, Z2..Z64, parity (= Z2)"; }

/* The next permutation in lexicographic order; false after the last one. */
static bool next_perm(uint8_t *p, int n) {
    int i = n - 2;
    while (i >= 0 && p[i] >= p[i + 1]) i--;
    if (i < 0) return false;
    int j = n - 1;
    while (p[j] <= p[i]) j--;
    uint8_t t = p[i];
    p[i] = p[j], p[j] = t;
    for (int a = i + 1, b = n - 1; a < b; a++, b--) t = p[a], p[a] = p[b], p[b] = t;
    return true;
}

static bool is_even(const uint8_t *p, int n) {
    int inv = 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) inv += p[i] > p[j];
    return inv % 2 == 0;
}

static int factorial(int n) { return n <= 1 ? 1 : n * factorial(n - 1); }

/* Every listing below is in lexicographic order, so group_find is a binary search. */
int group_find(const Group *g, const uint8_t *p) {
    int lo = 0, hi = g->order - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        int c = memcmp(g->perms + (size_t)mid * g->degree, p, (size_t)g->degree);
        if (c == 0) return mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

static bool parse_name(const char *name, char *kind, int *n) {
    if (!strcmp(name, "parity") || !strcmp(name, "Parity") || !strcmp(name, "PARITY")) {
        *kind = 'Z', *n = 2;
        return true;
    }
    char k = (char)toupper((unsigned char)name[0]);
    if (k != 'S' && k != 'A' && k != 'Z') return false;
    const char *d = name + 1;
    if (!*d || strlen(d) > 3) return false;
    for (const char *c = d; *c; c++)
        if (!isdigit((unsigned char)*c)) return false;
    *kind = k, *n = atoi(d);
    return true;
}

bool group_make(Group *g, const char *name, char *err, size_t len) {
    memset(g, 0, sizeof *g);
    char kind;
    int n;
    if (!name || !parse_name(name, &kind, &n)) {
        snprintf(err, len, "unknown group '%s': use one of %s", name ? name : "(null)", group_names_help());
        return false;
    }
    if ((kind == 'S' && (n < 2 || n > 6)) || (kind == 'A' && (n < 3 || n > 6)) || (kind == 'Z' && (n < 2 || n > 64))) {
        snprintf(err, len, "group '%s' is out of range: use one of %s", name, group_names_help());
        return false;
    }
    snprintf(g->name, sizeof g->name, "%c%d", kind, n);
    g->degree = n;
    g->identity = 0;
    if (kind == 'Z') {
        g->order = n;
        g->perms = (uint8_t *)xmalloc((size_t)n * n);
        for (int k = 0; k < n; k++)
            for (int i = 0; i < n; i++) g->perms[k * n + i] = (uint8_t)((i + k) % n);
    } else {
        int all = factorial(n);
        g->order = kind == 'S' ? all : all / 2;
        g->perms = (uint8_t *)xmalloc((size_t)g->order * n);
        uint8_t p[GROUP_MAX_DEGREE];
        for (int i = 0; i < n; i++) p[i] = (uint8_t)i;
        int e = 0;
        do {
            if (kind == 'S' || is_even(p, n)) memcpy(g->perms + (size_t)e++ * n, p, (size_t)n);
        } while (next_perm(p, n));
        GDP_CHECK(e == g->order, "internal: group %s listed %d elements, expected %d", g->name, e, g->order);
    }
    /* Tables: (a·b)(i) = b(a(i)). */
    const int N = g->order, d = g->degree;
    g->mul = (int32_t *)xmalloc((size_t)N * N * sizeof(int32_t));
    g->inv = (int32_t *)xmalloc((size_t)N * sizeof(int32_t));
    uint8_t c[GROUP_MAX_DEGREE];
    for (int a = 0; a < N; a++) {
        const uint8_t *pa = g->perms + (size_t)a * d;
        for (int b = 0; b < N; b++) {
            const uint8_t *pb = g->perms + (size_t)b * d;
            for (int i = 0; i < d; i++) c[i] = pb[pa[i]];
            int id = group_find(g, c);
            GDP_CHECK(id >= 0, "internal: group %s is not closed (%d·%d)", g->name, a, b);
            g->mul[(size_t)a * N + b] = id;
        }
        for (int i = 0; i < d; i++) c[pa[i]] = (uint8_t)i;
        g->inv[a] = group_find(g, c);
        GDP_CHECK(g->inv[a] >= 0, "internal: group %s lacks the inverse of %d", g->name, a);
    }
    return true;
}

void group_free(Group *g) {
    free(g->perms), free(g->mul), free(g->inv);
    memset(g, 0, sizeof *g);
}

bool group_check(const Group *g, char *err, size_t len) {
    const int N = g->order;
    for (int a = 0; a < N; a++) {
        if (group_mul(g, g->identity, a) != a || group_mul(g, a, g->identity) != a) {
            snprintf(err, len, "%s: %d is not fixed by the identity", g->name, a);
            return false;
        }
        int ia = g->inv[a];
        if (ia < 0 || ia >= N || group_mul(g, a, ia) != g->identity || group_mul(g, ia, a) != g->identity) {
            snprintf(err, len, "%s: inv[%d] = %d is not an inverse", g->name, a, ia);
            return false;
        }
        for (int b = 0; b < N; b++) {
            int ab = group_mul(g, a, b);
            if (ab < 0 || ab >= N) {
                snprintf(err, len, "%s: %d·%d = %d is not an element", g->name, a, b, ab);
                return false;
            }
            for (int c = 0; c < N; c++)
                if (group_mul(g, ab, c) != group_mul(g, a, group_mul(g, b, c))) {
                    snprintf(err, len, "%s: (%d·%d)·%d != %d·(%d·%d)", g->name, a, b, c, a, b, c);
                    return false;
                }
        }
    }
    return true;
}

void group_running_product(const Group *g, const int32_t *x, int T, int32_t *labels) {
    int acc = g->identity;
    for (int t = 0; t < T; t++) {
        acc = group_mul(g, acc, x[t]);
        labels[t] = acc;
    }
}

/* ---- batches --------------------------------------------------------------------------------------- */

void task_gen_init(TaskGen *tg, const Group *g, int B, int T, bool bos, uint64_t seed) {
    GDP_CHECK(B > 0 && T > 0, "task_gen_init: batch %d and length %d must be positive", B, T);
    tg->g = g, tg->B = B, tg->T = T, tg->bos = bos, tg->seed = seed;
    rng_seed(&tg->rng, seed);
}

void task_gen_reset(TaskGen *tg) { rng_seed(&tg->rng, tg->seed); }

void task_gen_next(TaskGen *tg, int32_t *inputs, int32_t *labels) {
    const int T = tg->T, row = task_gen_row_len(tg), word = row - T;
    for (int b = 0; b < tg->B; b++) {
        int32_t *x = inputs + (size_t)b * row, *y = labels + (size_t)b * row;
        if (tg->bos) x[0] = tg->g->order, y[0] = TASK_NO_LABEL;
        for (int t = 0; t < T; t++) x[word + t] = (int32_t)rng_below(&tg->rng, (uint64_t)tg->g->order);
        group_running_product(tg->g, x + word, T, y + word);
    }
}

/* ---- metric ---------------------------------------------------------------------------------------- */

void task_metric_init(TaskMetric *m, int T) {
    GDP_CHECK(T > 0, "task_metric_init: length %d must be positive", T);
    m->T = T, m->n_seqs = 0;
    m->first_error = (int64_t *)xcalloc((size_t)T + 1, sizeof(int64_t));
    m->pos_correct = (int64_t *)xcalloc((size_t)T, sizeof(int64_t));
}

void task_metric_free(TaskMetric *m) {
    free(m->first_error), free(m->pos_correct);
    memset(m, 0, sizeof *m);
}

void task_metric_add(TaskMetric *m, const int32_t *pred, const int32_t *labels, int n) {
    const int T = m->T;
    for (int s = 0; s < n; s++) {
        const int32_t *p = pred + (size_t)s * T, *y = labels + (size_t)s * T;
        int first = T;
        for (int t = 0; t < T; t++) {
            bool ok = p[t] == y[t];
            m->pos_correct[t] += ok;
            if (!ok && first == T) first = t;
        }
        m->first_error[first]++;
        m->n_seqs++;
    }
}

double task_metric_prefix_acc(const TaskMetric *m, int L) {
    GDP_CHECK(L >= 1 && L <= m->T, "task_metric_prefix_acc: L = %d is outside 1..%d", L, m->T);
    if (m->n_seqs == 0) return 0;
    /* the first L predictions are right when the first error is at index >= L */
    int64_t ok = 0;
    for (int t = L; t <= m->T; t++) ok += m->first_error[t];
    return (double)ok / (double)m->n_seqs;
}

double task_metric_position_acc(const TaskMetric *m, int t) {
    GDP_CHECK(t >= 0 && t < m->T, "task_metric_position_acc: t = %d is outside 0..%d", t, m->T - 1);
    return m->n_seqs ? (double)m->pos_correct[t] / (double)m->n_seqs : 0;
}

int task_metric_length_at(const TaskMetric *m, double threshold) {
    int best = 0;
    for (int L = 1; L <= m->T; L++)
        if (task_metric_prefix_acc(m, L) >= threshold) best = L;
        else break; /* prefix accuracy never rises with L */
    return best;
}
