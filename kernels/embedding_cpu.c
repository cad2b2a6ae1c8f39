/* CPU reference for embedding, in float32 and float64. */
#include "base/common.h"
#include "kernels/embedding.h"

#define DEFINE_EMB(T, SUF)                                                                                    \
    static int64_t emb_fwd_##SUF(T *out, const T *w, const int32_t *ids, int64_t n, int64_t v, int64_t c,   \
                                 int32_t *bad_id) {                                                          \
        int64_t bad = -1;                                                                                    \
        for (int64_t p = 0; p < n; p++) {                                                                    \
            int32_t id = ids[p];                                                                             \
            if (id < 0 || id >= v) {                                                                         \
                if (bad < 0) bad = p, *bad_id = id;                                                          \
                memset(out + p * c, 0, (size_t)c * sizeof(T));                                               \
            } else {                                                                                         \
                memcpy(out + p * c, w + (int64_t)id * c, (size_t)c * sizeof(T));                             \
            }                                                                                                \
        }                                                                                                    \
        return bad;                                                                                          \
    }                                                                                                        \
    static void emb_bwd_##SUF(T *dw, const T *dout, const int64_t *start, const int64_t *order, int64_t v,  \
                              int64_t c, int acc) {                                                          \
        _Pragma("omp parallel for schedule(static) if (v * c > 65536)")                                      \
        for (int64_t r = 0; r < v; r++) {                                                                    \
            T *row = dw + r * c;                                                                             \
            if (!acc)                                                                                        \
                for (int64_t j = 0; j < c; j++) row[j] = 0;                                                  \
            for (int64_t q = start[r]; q < start[r + 1]; q++) {                                              \
                const T *src = dout + order[q] * c;                                                          \
                for (int64_t j = 0; j < c; j++) row[j] += src[j];                                            \
            }                                                                                                \
        }                                                                                                    \
    }
DEFINE_EMB(float, f32)
DEFINE_EMB(double, f64)

int64_t embedding_forward_cpu(DType dt, void *out, const void *weight, const int32_t *ids, int64_t n, int64_t v,
                              int64_t c, int32_t *bad_id) {
    if (dt == GDP_F64) return emb_fwd_f64((double *)out, (const double *)weight, ids, n, v, c, bad_id);
    if (dt == GDP_F32) return emb_fwd_f32((float *)out, (const float *)weight, ids, n, v, c, bad_id);
    gdp_fatal("kernel 'embedding' on cpu supports f32 and f64, not %s", dtype_name(dt));
}

void embedding_backward_cpu(DType dt, void *dweight, const void *dout, const int32_t *ids, int64_t n, int64_t v,
                            int64_t c, int accumulate) {
    /* Counting sort of positions by id, stable: each bucket lists its positions in increasing order. */
    int64_t *start = (int64_t *)xcalloc((size_t)v + 1, sizeof(int64_t));
    int64_t *order = (int64_t *)xmalloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    for (int64_t p = 0; p < n; p++) {
        GDP_CHECK(ids[p] >= 0 && ids[p] < v, "kernel 'embedding' backward: id %d at position %lld is outside [0, %lld)",
                  ids[p], (long long)p, (long long)v);
        start[ids[p] + 1]++;
    }
    for (int64_t r = 0; r < v; r++) start[r + 1] += start[r];
    int64_t *cursor = (int64_t *)xmalloc((size_t)(v > 0 ? v : 1) * sizeof(int64_t));
    memcpy(cursor, start, (size_t)v * sizeof(int64_t));
    for (int64_t p = 0; p < n; p++) order[cursor[ids[p]]++] = p;
    free(cursor);
    if (dt == GDP_F64)
        emb_bwd_f64((double *)dweight, (const double *)dout, start, order, v, c, accumulate);
    else if (dt == GDP_F32)
        emb_bwd_f32((float *)dweight, (const float *)dout, start, order, v, c, accumulate);
    else
        gdp_fatal("kernel 'embedding' on cpu supports f32 and f64, not %s", dtype_name(dt));
    free(start);
    free(order);
}
