/* Batched sampling on CUDA (kernels/sample.h): one block per row, no sort.
 *
 * Each row: the penalty and the argmax in one pass. Without top-p, the top-k threshold is a radix
 * select on the logits' order key (a count histogram per 12-bit digit), the weights are written
 * over the logits, and the draw walks the row in id order: each thread sums a contiguous chunk,
 * a block scan gives every chunk its running start, each thread walks its chunk again from there,
 * and the lowest id where the running sum crosses the target wins. With top-p the candidate order
 * (logit descending, id ascending) is one 64-bit key, value then id, and three radix selects on it
 * give the top-k cut (by count), the top-p cut and the draw (by probability mass), so no candidate
 * list is ever sorted.
 *
 * The masses are integers: exp((x - max) / t) scaled to 2^(63 - ceil(log2 n)) and rounded, so that
 * the histograms can be summed by atomics in any order and still give the same bits every run. A
 * weight then carries an absolute error of 2^-(64 - ceil(log2 n)) (2^-49 at 32000 tokens) against the
 * row's total of at least 1 (the largest logit weighs 1): a whole row's mass is off by under 1e-10.
 * The id-order draw sums in double in a fixed order, so it is deterministic too. */
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "kernels/block_reduce.cuh"
#include "kernels/common.cuh"
#include "kernels/sample.h"

#define SAMPLE_THREADS 512
#define RADIX_BITS 12
#define FULL_MASK 0xffffffffu

typedef unsigned long long u64;

struct SampleSmem {
    u64 hist[1 << RADIX_BITS];
    u64 scan_u[33];
    double scan_d[33];
    float red_v[32];
    int red_i[32];
    u64 sel_before, sel_weight;
    int sel_digit, sel_found;
};

/* Ascending key = descending value, over all non-NaN floats; -0 takes +0's key, since the CPU's
 * comparisons see them as equal (a tie broken by id). */
__device__ __forceinline__ uint32_t desc_key(float x) {
    const uint32_t b = __float_as_uint(x == 0.f ? 0.f : x);
    return (b & 0x80000000u) ? b : (~b & 0x7fffffffu);
}

/* The candidate order as one integer: the value's key above the id's ib bits (ib 0: the value alone). */
__device__ __forceinline__ u64 order_key(float x, int i, int ib) {
    return ((u64)desc_key(x) << ib) | (ib ? (u64)i : 0ull);
}

struct Mass {
    float mx;     /* the row's largest logit */
    double t;     /* temperature */
    double scale; /* one unit of probability weight, 2^(63 - ib) */
};

/* The nucleus weight as sample_next forms it (the difference in float, then the division and exp in
 * double), in fixed point. Below exp(-46) a weight rounds to 0 at any scale, so exp is skipped there. */
__device__ __forceinline__ u64 mass_weight(float x, const Mass &m) {
    const double a = (double)(x - m.mx) / m.t;
    if (!(a > -46.0)) return 0;
    return __double2ull_rn(exp(a) * m.scale);
}

/* ---- block-wide helpers (every thread calls; blockDim.x a multiple of 32) -------------------------- */

/* The larger value, the lower id on a tie: order-free, so the butterfly gives sample_next's argmax. */
__device__ __forceinline__ void argmax_merge(float &v, int &i, float v2, int i2) {
    if (i2 >= 0 && (i < 0 || v2 > v || (v2 == v && i2 < i))) v = v2, i = i2;
}

__device__ __forceinline__ void warp_argmax(float &v, int &i) {
    for (int o = 16; o > 0; o >>= 1) {
        const float v2 = __shfl_xor_sync(FULL_MASK, v, o);
        const int i2 = __shfl_xor_sync(FULL_MASK, i, o);
        argmax_merge(v, i, v2, i2);
    }
}

__device__ void block_argmax(float &v, int &i, SampleSmem &sm) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    warp_argmax(v, i);
    __syncthreads();
    if (lane == 0) sm.red_v[warp] = v, sm.red_i[warp] = i;
    __syncthreads();
    v = lane < nw ? sm.red_v[lane] : -INFINITY;
    i = lane < nw ? sm.red_i[lane] : -1;
    warp_argmax(v, i);
}

/* Inclusive scan over the warp in lane order. */
template <typename T> __device__ __forceinline__ T warp_incl_scan(T v) {
    for (int o = 1; o < 32; o <<= 1) {
        const T t = __shfl_up_sync(FULL_MASK, v, o);
        if ((int)(threadIdx.x & 31) >= o) v += t;
    }
    return v;
}

/* Exclusive scan over the block in thread order; *total receives the sum. scratch: T[33], shared. */
template <typename T> __device__ T block_excl_scan(T v, T *scratch, T *total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const T inc = warp_incl_scan(v);
    T ex = __shfl_up_sync(FULL_MASK, inc, 1);
    if (lane == 0) ex = (T)0;
    __syncthreads(); /* an earlier call may still be reading scratch */
    if (lane == 31) scratch[warp] = inc;
    __syncthreads();
    if (warp == 0) {
        const T wi = warp_incl_scan(lane < nw ? scratch[lane] : (T)0);
        T we = __shfl_up_sync(FULL_MASK, wi, 1);
        if (lane == 0) we = (T)0;
        if (lane < nw) scratch[lane] = we;
        if (lane == 31) scratch[32] = wi;
    }
    __syncthreads();
    *total = scratch[32];
    return scratch[warp] + ex;
}

/* ---- radix select on the order key --------------------------------------------------------------- */

struct Sel {
    u64 key;     /* the selected element's order key */
    u64 before;  /* the weight of the set's elements ordered before it */
    u64 through; /* ... and including it (its whole tie group when ib is 0) */
    u64 total;   /* the weight of the whole set */
    bool found;
};

/* The smallest integer at least frac * total: a running weight reaches it exactly when the running
 * probability reaches frac (the top-p rule `acc >= top_p`). */
__device__ __forceinline__ u64 frac_target(double frac, u64 total) {
    const double t = ceil(frac * (double)total);
    return t < 1.0 ? 1ull : (u64)t;
}

/* Over the ids i < n whose order key is <= bound, taken in key order: the first element at which the
 * running weight (1 per element, or mass_weight) reaches `target`, or with frac >= 0 the target
 * frac * (the set's total weight). Digit by digit from the top: each pass histograms the weights of
 * the elements that share the digits found so far, and the one thread whose bins span the target
 * walks them. found is false when the set's total is below the target. */
template <bool MASS>
__device__ Sel radix_select(const float *row, int n, int ib, u64 bound, u64 target, double frac, const Mass &m,
                            SampleSmem &sm) {
    const int tid = threadIdx.x, bd = blockDim.x, bits = 32 + ib;
    Sel s = {0, 0, 0, 0, false};
    u64 prefix = 0, left = target;
    for (int hi = bits; hi > 0;) {
        const int lo = hi > RADIX_BITS ? hi - RADIX_BITS : 0;
        const int nb = 1 << (hi - lo);
        for (int j = tid; j < nb; j += bd) sm.hist[j] = 0;
        if (tid == 0) sm.sel_found = 0;
        __syncthreads();
        for (int i = tid; i < n; i += bd) {
            const float x = row[i];
            const u64 k = order_key(x, i, ib);
            if (k > bound || (k >> hi) != (prefix >> hi)) continue;
            const u64 w = MASS ? mass_weight(x, m) : 1ull;
            if (w) atomicAdd(&sm.hist[(k >> lo) & (u64)(nb - 1)], w);
        }
        __syncthreads();
        const int per = (nb + bd - 1) / bd, b0 = min(tid * per, nb), b1 = min(b0 + per, nb);
        u64 mine = 0;
        for (int j = b0; j < b1; j++) mine += sm.hist[j];
        u64 total;
        const u64 ex = block_excl_scan<u64>(mine, sm.scan_u, &total);
        if (hi == bits) {
            s.total = total;
            if (frac >= 0) left = frac_target(frac, total);
        }
        /* (ex, ex + mine] over the threads tile (0, total]: one thread holds the target */
        if (left > ex && left - ex <= mine) {
            u64 c = ex;
            for (int j = b0; j < b1; j++) {
                const u64 h = sm.hist[j];
                if (left - c <= h) {
                    sm.sel_digit = j, sm.sel_before = c, sm.sel_weight = h, sm.sel_found = 1;
                    break;
                }
                c += h;
            }
        }
        __syncthreads();
        const bool found = sm.sel_found;
        if (found) {
            prefix |= (u64)sm.sel_digit << lo;
            left -= sm.sel_before;
            s.before += sm.sel_before;
            s.through = s.before + sm.sel_weight;
        }
        __syncthreads(); /* every thread has read sel_* before the next pass or select resets them */
        if (!found) return s;
        hi = lo;
    }
    s.key = prefix;
    s.found = true;
    return s;
}

/* ---- the two draws ------------------------------------------------------------------------------ */

/* top_p off: keep the logits >= the top_k-th largest, weights in double as sample_next, and the
 * first id in id order whose running sum of float weights exceeds u * the sum of double weights. */
__device__ int draw_in_id_order(float *row, int n, const SampleArgs &a, float mx, int best, double u,
                                SampleSmem &sm) {
    const int tid = threadIdx.x, bd = blockDim.x;
    u64 cut_key = 0xffffffffull;
    if (a.top_k > 0 && a.top_k < n) {
        const Mass unused = {0.f, 1.0, 1.0};
        cut_key = radix_select<false>(row, n, 0, ~0ull, (u64)a.top_k, -1.0, unused, sm).key;
    }
    const double mxd = mx;
    const int per = (n + bd - 1) / bd, i0 = min(tid * per, n), i1 = min(i0 + per, n);
    double sq = 0, sf = 0;
    for (int i = i0; i < i1; i++) {
        const float x = row[i];
        const double q = desc_key(x) <= cut_key ? exp(((double)x - mxd) / a.temperature) : 0.0;
        const float qf = (float)q;
        row[i] = qf;
        sq += q;
        sf += qf;
    }
    const double sum = br_block_sum_double(sq, sm.scan_d);
    double all;
    double run = block_excl_scan<double>(sf, sm.scan_d, &all);
    const double target = u * sum;
    int pick = INT_MAX;
    for (int i = i0; i < i1; i++) {
        const float qf = row[i];
        run += qf;
        if (target < run && qf > 0) {
            pick = i;
            break;
        }
    }
    pick = br_block_min_int(pick, sm.red_i);
    return pick == INT_MAX ? best : pick;
}

/* top_p on: the top-k cut by count, the top-p cut by mass, then the draw by mass below that cut. */
__device__ int draw_nucleus(const float *row, int n, const SampleArgs &a, float mx, int best, double u,
                            SampleSmem &sm) {
    const int ib = n > 1 ? 32 - __clz(n - 1) : 0;
    const Mass m = {mx, a.temperature, ldexp(1.0, 63 - ib)};
    u64 bound = ~0ull;
    if (a.top_k > 0 && a.top_k < n) bound = radix_select<false>(row, n, ib, ~0ull, (u64)a.top_k, -1.0, m, sm).key;
    const Sel p = radix_select<true>(row, n, ib, bound, 0, a.top_p, m, sm);
    const u64 cut = p.found ? p.key : bound, mass = p.found ? p.through : p.total;
    const u64 target = (u64)floor(u * (double)mass) + 1; /* running weight > u * mass */
    if (target > mass) return best;
    const Sel d = radix_select<true>(row, n, ib, cut, target, -1.0, m, sm);
    return d.found ? (int)(d.key & ((1ull << ib) - 1)) : best;
}

__global__ void __launch_bounds__(SAMPLE_THREADS) sample_rows_kernel(SampleArgs a) {
    __shared__ SampleSmem sm;
    const int tid = threadIdx.x, bd = blockDim.x, n = a.n_tok;
    float *row = a.logits + (long long)blockIdx.x * a.v;
    const long long mask = a.seen_row ? a.seen_row[blockIdx.x] : blockIdx.x;
    const unsigned char *seen = a.seen ? a.seen + mask * (a.seen_stride ? a.seen_stride : a.v) : NULL;
    const bool penalise = seen && a.penalty > 0 && a.penalty != 1;
    float mx = -INFINITY;
    int best = -1;
    for (int i = tid; i < n; i += bd) {
        float x = row[i];
        if (penalise && seen[i]) {
            x = x > 0 ? (float)((double)x / a.penalty) : (float)((double)x * a.penalty);
            row[i] = x;
        }
        if (best < 0 || x > mx) mx = x, best = i;
    }
    block_argmax(mx, best, sm); /* its barriers also publish the penalised row to the block */
    int pick = best;
    if (a.temperature > 0) {
        const double u = a.u[blockIdx.x];
        if (a.top_p > 0 && a.top_p < 1)
            pick = draw_nucleus(row, n, a, mx, best, u, sm);
        else
            pick = draw_in_id_order(row, n, a, mx, best, u, sm);
    }
    if (tid == 0) a.out[blockIdx.x] = pick;
}

extern "C" void sample_rows_cuda(const SampleArgs *a, void *stream) {
    sample_args_check(a, "sample_rows_cuda");
    if (a->rows == 0) return;
    GDP_CHECK(a->rows <= INT_MAX, "sample_rows_cuda: %lld rows; at most %d rows a call (one block each)",
              (long long)a->rows, INT_MAX);
    sample_rows_kernel<<<(unsigned)a->rows, SAMPLE_THREADS, 0, (cudaStream_t)stream>>>(*a);
    KERNEL_CHECK();
}

__global__ void mark_seen_kernel(unsigned char *seen, int64_t stride, const int32_t *seq, const int32_t *tok,
                                 int64_t count, int n_tok) {
    const int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j < count && tok[j] >= 0 && tok[j] < n_tok) seen[(int64_t)seq[j] * stride + tok[j]] = 1;
}

extern "C" void sample_mark_seen_cuda(unsigned char *seen, int64_t stride, const int32_t *seq, const int32_t *tok,
                                      int64_t count, int n_tok, void *stream) {
    GDP_CHECK(count >= 0 && stride >= n_tok && n_tok >= 1,
              "sample_mark_seen_cuda: %lld tokens into masks of stride %lld for %d candidates: needs count >= 0 and "
              "stride >= n_tok >= 1", (long long)count, (long long)stride, n_tok);
    if (count == 0) return;
    const int threads = 256;
    mark_seen_kernel<<<(unsigned)((count + threads - 1) / threads), threads, 0, (cudaStream_t)stream>>>(
        seen, stride, seq, tok, count, n_tok);
    KERNEL_CHECK();
}
