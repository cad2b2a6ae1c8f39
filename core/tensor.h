/* Tensors: a small header (shape, strides, dtype, device) over memory some arena owns.
 * A tensor never owns or copies its data behind your back: views share memory, and ops that
 * need contiguous input say so instead of copying. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "base/device.h"
#include "base/dtype.h"

#define GDP_MAX_DIMS 5
#define GDP_NAME_LEN 80

typedef struct Tensor {
    DType dtype;
    Device device;
    int ndim;
    int64_t shape[GDP_MAX_DIMS];
    int64_t stride[GDP_MAX_DIMS]; /* in elements */
    int64_t numel;
    void *data; /* element 0 of this tensor (views point into their base) */

    /* Autograd. grad has this tensor's shape, is contiguous, and is allocated on first write;
     * grad_written implements "first write sets, later writes accumulate". */
    struct Tensor *grad;
    bool grad_written;
    bool requires_grad;
    bool is_param;
    bool recorded; /* an output of a node on the tape (not a leaf) */
    char name[GDP_NAME_LEN];
} Tensor;

/* SHAPE(2, 3, 4) expands to "3, (int64_t[]){2, 3, 4}": ndim and the dims, for the calls below. */
#define SHAPE(...) \
    (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]) { __VA_ARGS__ }

/* Fills shape, contiguous strides and numel of a header; no memory is touched. */
void tensor_set_shape(Tensor *t, int ndim, const int64_t *shape);
bool tensor_is_contiguous(const Tensor *t);
bool tensor_same_shape(const Tensor *a, const Tensor *b);
size_t tensor_bytes(const Tensor *t);
/* "f32[2,3,4]@cpu" into buf; returns buf. */
const char *tensor_describe(const Tensor *t, char *buf, size_t len);
#define TENSOR_DESC_LEN 96

/* Element i (row-major over the shape, strides honoured) as a double: host tensors only; for
 * tests and small debug dumps, never hot loops. */
double tensor_get_host(const Tensor *t, int64_t i);
void tensor_set_host(Tensor *t, int64_t i, double value);
