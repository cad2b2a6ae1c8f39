/* CUDA SwiGLU gate (f32 and bf16 storage, float math). */
#include "kernels/common.cuh"
#include "kernels/swiglu.h"

template <typename T>
__global__ void swiglu_fwd_kernel(T *y, const T *a, const T *b, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float av = to_f32(a[i]);
        y[i] = from_f32<T>(av * sigmoid_f32(av) * to_f32(b[i]));
    }
}

template <typename T>
__global__ void swiglu_bwd_kernel(T *da, T *db, const T *dy, const T *a, const T *b, long long n, int acc_a,
                                  int acc_b) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float av = to_f32(a[i]), g = to_f32(dy[i]), s = sigmoid_f32(av);
        if (da) {
            float v = g * to_f32(b[i]) * s * (1.f + av * (1.f - s));
            da[i] = from_f32<T>(acc_a ? to_f32(da[i]) + v : v);
        }
        if (db) {
            float v = g * av * s;
            db[i] = from_f32<T>(acc_b ? to_f32(db[i]) + v : v);
        }
    }
}

/* The same in 16-byte packs (the MLP's activations are long and aligned). */
template <typename T>
__global__ void swiglu_fwd_packed_kernel(Pack16<T> *y, const Pack16<T> *a, const Pack16<T> *b, long long packs) {
    for (long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x; p < packs;
         p += (long long)gridDim.x * blockDim.x) {
        const Pack16<T> av = a[p], bv = b[p];
        Pack16<T> yv;
#pragma unroll
        for (int j = 0; j < Pack16<T>::N; j++) {
            const float x = to_f32(av.v[j]);
            yv.v[j] = from_f32<T>(x * sigmoid_f32(x) * to_f32(bv.v[j]));
        }
        y[p] = yv;
    }
}

template <typename T>
__global__ void swiglu_bwd_packed_kernel(Pack16<T> *da, Pack16<T> *db, const Pack16<T> *dy, const Pack16<T> *a,
                                         const Pack16<T> *b, long long packs, int acc_a, int acc_b) {
    for (long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x; p < packs;
         p += (long long)gridDim.x * blockDim.x) {
        const Pack16<T> av = a[p], bv = b[p], gv = dy[p];
        Pack16<T> dav, dbv;
        if (da && acc_a) dav = da[p];
        if (db && acc_b) dbv = db[p];
#pragma unroll
        for (int j = 0; j < Pack16<T>::N; j++) {
            const float x = to_f32(av.v[j]), g = to_f32(gv.v[j]), s = sigmoid_f32(x);
            const float va = g * to_f32(bv.v[j]) * s * (1.f + x * (1.f - s)), vb = g * x * s;
            dav.v[j] = from_f32<T>(acc_a ? to_f32(dav.v[j]) + va : va);
            dbv.v[j] = from_f32<T>(acc_b ? to_f32(dbv.v[j]) + vb : vb);
        }
        if (da) da[p] = dav;
        if (db) db[p] = dbv;
    }
}

extern "C" void swiglu_forward_cuda(DType dt, void *y, const void *a, const void *b, int64_t n, void *stream) {
    if (n == 0) return;
    DISPATCH_F32_BF16(dt, "swiglu", {
        if (packs_fit<T>(n, y, a, b)) {
            const long long packs = n / Pack16<T>::N;
            swiglu_fwd_packed_kernel<T><<<grid_for(packs, 256), 256, 0, (cudaStream_t)stream>>>(
                (Pack16<T> *)y, (const Pack16<T> *)a, (const Pack16<T> *)b, packs);
        } else {
            swiglu_fwd_kernel<T><<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>((T *)y, (const T *)a,
                                                                                    (const T *)b, n);
        }
    });
    KERNEL_CHECK();
}

extern "C" void swiglu_backward_cuda(DType dt, void *da, void *db, const void *dy, const void *a, const void *b,
                                     int64_t n, int acc_a, int acc_b, void *stream) {
    if (n == 0 || (!da && !db)) return;
    DISPATCH_F32_BF16(dt, "swiglu", {
        if (packs_fit<T>(n, da, db, dy, a, b)) {
            const long long packs = n / Pack16<T>::N;
            swiglu_bwd_packed_kernel<T><<<grid_for(packs, 256), 256, 0, (cudaStream_t)stream>>>(
                (Pack16<T> *)da, (Pack16<T> *)db, (const Pack16<T> *)dy, (const Pack16<T> *)a, (const Pack16<T> *)b,
                packs, acc_a, acc_b);
        } else {
            swiglu_bwd_kernel<T><<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(
                (T *)da, (T *)db, (const T *)dy, (const T *)a, (const T *)b, n, acc_a, acc_b);
        }
    });
    KERNEL_CHECK();
}
