/* Reader of the Gated DeltaProduct reference vectors (tests/data/gdp_vectors.h5, layout in
 * docs/spec.md "Reference vectors"): one HDF5 group per case with attributes mode, B, T, H, K, V, n,
 * scale, gate, h0 and float64 datasets of inputs, outputs and gradients. A file whose layout is
 * wrong (not HDF5, truncated, a missing attribute or dataset, a wrong shape) is a fatal error
 * naming the file, the case and what is wrong. */
#pragma once
#include <stdint.h>

#include "kernels/gdp/gdp.h"

#define GDP_VEC_NAME_LEN 64

typedef struct GdpVecCase {
    char name[GDP_VEC_NAME_LEN];
    GdpMode mode;
    int B, T, H, K, V, n;
    double scale;
    int gate, has_h0;  /* 0: g (h0) is all zeros in the file */
    /* float64, row-major, malloc'd; mask and dmask are NULL in householder mode */
    double *q, *k, *v, *beta, *g, *mask, *h0;
    double *o, *ht, *d_o, *dht;
    double *dq, *dk, *dv, *dbeta, *dg, *dmask, *dh0;
} GdpVecCase;

typedef struct GdpVecFile {
    int n_cases;
    GdpVecCase *cases;
} GdpVecFile;

/* Reads every case of `path`; fatal error (exit 1) with a clear message when it cannot. */
void gdp_vectors_load(const char *path, GdpVecFile *out);
void gdp_vectors_free(GdpVecFile *f);
/* The op descriptor of a case for dtype dt (no cu_seqlens). */
GdpDesc gdp_vec_desc(const GdpVecCase *c, DType dt);
