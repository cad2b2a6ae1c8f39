#include "base/device.h"

#include "base/common.h"

#ifdef GDP_CUDA
#include "base/cuda_check.h"
#endif

bool gdp_built_with_cuda(void) {
#ifdef GDP_CUDA
    return true;
#else
    return false;
#endif
}

bool gdp_cuda_available(void) {
#ifdef GDP_CUDA
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return n > 0;
#else
    return false;
#endif
}

Device device_parse(const char *text, const char *flag_name) {
    if (!strcmp(text, "cpu")) return DEV_CPU;
    if (!strcmp(text, "cuda") || !strcmp(text, "gpu")) {
        if (!gdp_built_with_cuda())
            gdp_fatal("%s cuda: this build of gdp has no CUDA support (nvcc was not found at build time); "
                      "use %s cpu or rebuild with the CUDA toolkit installed",
                      flag_name, flag_name);
        if (!gdp_cuda_available())
            gdp_fatal("%s cuda: no CUDA GPU is visible on this machine; use %s cpu", flag_name, flag_name);
        return DEV_CUDA;
    }
    if (!strcmp(text, "auto")) return gdp_cuda_available() ? DEV_CUDA : DEV_CPU;
    gdp_fatal("%s '%s' is not a device: use cpu, cuda or auto", flag_name, text);
}

/* The memory, or NULL; on CUDA *why (if not NULL) then holds cudaMalloc's error. A CUDA allocation
 * failure is not sticky: it is cleared for the caller's next call. */
static void *device_alloc(Device dev, size_t bytes, const char **why) {
    if (bytes == 0) bytes = 1;
    if (dev == DEV_CPU) {
        void *p = NULL;
        return posix_memalign(&p, 256, bytes) == 0 ? p : NULL;
    }
#ifdef GDP_CUDA
    void *p = NULL;
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaSuccess) return p;
    (void)cudaGetLastError();
    if (why) *why = cudaGetErrorString(err);
    return NULL;
#else
    gdp_fatal("device memory on cuda: this build has no CUDA support");
#endif
}

void *device_try_malloc(Device dev, size_t bytes) { return device_alloc(dev, bytes, NULL); }

void *device_malloc(Device dev, size_t bytes) {
    const char *why = NULL;
    void *p = device_alloc(dev, bytes, &why);
    if (p) return p;
    if (dev == DEV_CPU) gdp_fatal("out of host memory allocating %zu MiB", bytes >> 20);
    gdp_fatal("cudaMalloc of %zu MiB failed: %s; lower the batch size or the arena sizes", bytes >> 20, why);
}

void device_free(Device dev, void *p) {
    if (!p) return;
    if (dev == DEV_CPU) {
        free(p);
        return;
    }
#ifdef GDP_CUDA
    CUDA_CHECK(cudaFree(p));
#endif
}

void device_memcpy(void *dst, Device dst_dev, const void *src, Device src_dev, size_t bytes) {
    if (bytes == 0) return;
    if (dst_dev == DEV_CPU && src_dev == DEV_CPU) {
        memmove(dst, src, bytes);
        return;
    }
#ifdef GDP_CUDA
    enum cudaMemcpyKind kind = dst_dev == DEV_CUDA ? (src_dev == DEV_CUDA ? cudaMemcpyDeviceToDevice
                                                                          : cudaMemcpyHostToDevice)
                                                   : cudaMemcpyDeviceToHost;
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind));
#else
    gdp_fatal("device_memcpy involving cuda: this build has no CUDA support");
#endif
}

void device_copy_rows(Device dev, void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t row_bytes,
                      size_t rows, void *stream) {
    if (rows == 0 || row_bytes == 0) return;
    if (dev == DEV_CPU) {
        for (size_t r = 0; r < rows; r++)
            memmove((char *)dst + r * dst_pitch, (const char *)src + r * src_pitch, row_bytes);
        return;
    }
#ifdef GDP_CUDA
    CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows, cudaMemcpyDeviceToDevice,
                                 (cudaStream_t)stream));
#else
    (void)stream;
    gdp_fatal("device_copy_rows on cuda: this build has no CUDA support");
#endif
}

void device_memset(Device dev, void *p, int byte, size_t bytes) {
    if (bytes == 0) return;
    if (dev == DEV_CPU) {
        memset(p, byte, bytes);
        return;
    }
#ifdef GDP_CUDA
    CUDA_CHECK(cudaMemset(p, byte, bytes));
#endif
}

void device_synchronize(Device dev) {
#ifdef GDP_CUDA
    if (dev == DEV_CUDA) CUDA_CHECK(cudaDeviceSynchronize());
#else
    (void)dev;
#endif
}

bool device_memory_info(size_t *used, size_t *total) {
#ifdef GDP_CUDA
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    *used = total_b - free_b, *total = total_b;
    return true;
#else
    (void)used, (void)total;
    return false;
#endif
}
