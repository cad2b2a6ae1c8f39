/* State-tracking tasks: word problems on finite groups (the DeltaProduct paper's S3, S4, A5, S5,
 * after "The Illusion of State"), and parity (= Z2).
 *
 * Groups are permutation groups: an element is a permutation p of {0, ..., degree-1}, stored as
 * its images p[i]. Element ids have a fixed ordering:
 *   S<n> (2 <= n <= 6): every permutation of n points, in lexicographic order of (p[0], ..., p[n-1]);
 *   A<n> (3 <= n <= 6): the even permutations, in the same lexicographic order;
 *   Z<n> (2 <= n <= 64): the rotations i -> (i + k) mod n, id k; "parity" is Z2.
 * In every group id 0 is the identity.
 *
 * Product convention (sympy's for permutations): a·b means "apply a, then b",
 *     (a·b)(i) = b(a(i)).
 * A word x_1 x_2 ... x_T is labelled at every position t with the running product
 *     y_t = x_1 · x_2 · ... · x_t       (y_1 = x_1, y_t = y_{t-1} · x_t),
 * so the label is the permutation that applies x_1 first and x_t last. (The other convention is
 * the same task up to renaming: inverting every token and label maps one onto the other.) The
 * tokens are the element ids of the x_t, drawn i.i.d. uniformly. Optionally each word starts with a
 * beginning-of-sequence token (id |G|, outside the group) that has no label, as the paper's
 * tokenizer adds one.
 *
 * Metric (the paper's): "accuracy at length L" is the fraction of sequences whose first L
 * predictions are all correct. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/common.h"

#define GROUP_NAME_LEN 16
#define GROUP_MAX_DEGREE 64

typedef struct Group {
    char name[GROUP_NAME_LEN]; /* canonical: "S3", "A5", "Z2" (parity gives "Z2") */
    int order;                 /* |G| */
    int degree;                /* acts on {0, ..., degree-1} */
    int identity;              /* id of the identity (0) */
    uint8_t *perms;            /* [order, degree]: perms[e * degree + i] = image of i under e */
    int32_t *mul;              /* [order, order]: mul[a * order + b] = id of a·b */
    int32_t *inv;              /* [order] */
} Group;

/* "S3", "s5", "A5", "Z4", "parity" (= Z2). False with the reason in err for anything else. */
bool group_make(Group *g, const char *name, char *err, size_t len);
void group_free(Group *g);
const char *group_names_help(void); /* "S2..S6, A3..A6, Z2..Z64, parity" */

static inline int group_mul(const Group *g, int a, int b) { return g->mul[(size_t)a * g->order + b]; }
/* The id of a permutation (images p[0..degree-1]); -1 when p is not in g. */
int group_find(const Group *g, const uint8_t *p);
/* Checks the group axioms on the tables (closure, identity, inverses, associativity); false with
 * the first violation in err. */
bool group_check(const Group *g, char *err, size_t len);

/* labels[t] = x[0] · x[1] · ... · x[t] for t < T. */
void group_running_product(const Group *g, const int32_t *x, int T, int32_t *labels);

/* The label of a position that has none (the BOS token): the loss and the metric skip it. */
#define TASK_NO_LABEL (-1)

/* Seeded batches of words: B rows of task_gen_row_len ids each, row-major, and their labels. A row
 * is a word of T ids, after the BOS token (id |G|, label TASK_NO_LABEL) when bos is set; the words
 * are the same with and without it. The same seed gives the same batches on any machine. The
 * state (rng) is all there is to resume. */
typedef struct TaskGen {
    const Group *g;
    int B, T;
    bool bos;
    uint64_t seed;
    Rng rng;
} TaskGen;

void task_gen_init(TaskGen *tg, const Group *g, int B, int T, bool bos, uint64_t seed);
static inline int task_gen_row_len(const TaskGen *tg) { return tg->T + (tg->bos ? 1 : 0); }
void task_gen_reset(TaskGen *tg); /* back to the first batch */
void task_gen_next(TaskGen *tg, int32_t *inputs, int32_t *labels);

/* The accuracy metric, accumulated over batches. */
typedef struct TaskMetric {
    int T;                 /* positions per sequence */
    int64_t n_seqs;
    int64_t *first_error;  /* [T + 1]: sequences whose first wrong prediction is at index t (T: none) */
    int64_t *pos_correct;  /* [T]: sequences correct at position t */
} TaskMetric;

void task_metric_init(TaskMetric *m, int T);
void task_metric_free(TaskMetric *m);
/* Adds n sequences of T predictions and labels (row-major [n, T]). */
void task_metric_add(TaskMetric *m, const int32_t *pred, const int32_t *labels, int n);
/* Fraction of sequences whose first L predictions are all correct (1 <= L <= T). */
double task_metric_prefix_acc(const TaskMetric *m, int L);
/* Fraction of sequences correct at position t (0-based). */
double task_metric_position_acc(const TaskMetric *m, int t);
/* The largest L with prefix accuracy >= threshold (0 when even L = 1 is below it). */
int task_metric_length_at(const TaskMetric *m, double threshold);
