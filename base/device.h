/* Where memory lives and how bytes move between host and GPU. The only core file that talks to
 * the CUDA runtime directly; everything else goes through these calls, so a build without nvcc
 * (GDP_CUDA undefined) still links and reports "no CUDA" at run time. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

typedef enum Device { DEV_CPU = 0, DEV_CUDA = 1 } Device;

static inline const char *device_name(Device d) { return d == DEV_CUDA ? "cuda" : "cpu"; }

/* True when this build has CUDA and a GPU is visible. Initialises the CUDA runtime: never call it
 * in the parent process of forked (Check) tests. */
bool gdp_cuda_available(void);
bool gdp_built_with_cuda(void);

/* Parses "cpu", "cuda" or "auto" (cuda when available); fatal error naming the flag otherwise. */
Device device_parse(const char *text, const char *flag_name);

/* device_malloc ends the program when the memory is not there; device_try_malloc returns NULL, so
 * that the caller can say what to change */
void *device_malloc(Device dev, size_t bytes);
void *device_try_malloc(Device dev, size_t bytes);
void device_free(Device dev, void *p);
/* Copies between any pair of devices; synchronous with respect to the host. */
void device_memcpy(void *dst, Device dst_dev, const void *src, Device src_dev, size_t bytes);
/* rows blocks of row_bytes each, from src (a block every src_pitch bytes) to dst (every dst_pitch
 * bytes), on one device; on CUDA asynchronous on `stream` (a cudaStream_t) and capturable into a
 * graph: one copy for a whole batch of rows instead of one a row. */
void device_copy_rows(Device dev, void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t row_bytes,
                      size_t rows, void *stream);
void device_memset(Device dev, void *p, int byte, size_t bytes);
void device_synchronize(Device dev);
/* GPU memory in use on the current device (all processes) and its size, in bytes; false on CPU
 * builds or when the runtime cannot tell. */
bool device_memory_info(size_t *used, size_t *total);
