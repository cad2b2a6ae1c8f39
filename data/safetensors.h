/* Reading safetensors files (Hugging Face's format): 8 bytes little-endian header length N, N bytes
 * of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the
 * raw little-endian tensor bytes, offsets relative to the end of the header. Only what a checkpoint
 * import needs: the index, and any tensor of F32, F16, BF16 or F64 as float32 (F32 bit for bit). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define SAFETENSORS_MAX_DIMS 8

typedef struct SafeTensor {
    char *name;
    char dtype[8];                        /* "F32", "BF16", ... as the file says */
    int ndim;
    int64_t shape[SAFETENSORS_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end;                  /* byte range after the header */
} SafeTensor;

typedef struct SafeTensors {
    char *path;
    FILE *f;
    uint64_t data_start;                  /* 8 + header length */
    int n;
    SafeTensor *t;
} SafeTensors;

/* Opens and indexes path; false with the reason (naming the file) in err, nothing left open. */
bool safetensors_open(const char *path, SafeTensors *st, char *err, size_t errlen);
void safetensors_close(SafeTensors *st);
const SafeTensor *safetensors_find(const SafeTensors *st, const char *name);
/* Reads t as float32 into dst[t->numel]; false with the reason in err (unsupported dtype, I/O). */
bool safetensors_read_f32(const SafeTensors *st, const SafeTensor *t, float *dst, char *err, size_t errlen);
