/* Reads the reference vectors (tests/data/gdp_vectors.h5) through the HDF5 C API. */
#include "tools/vectors_h5.h"

#include <errno.h>
#include <stdarg.h>
#include <hdf5.h>

#include "base/common.h"
#include "base/h5_check.h"
#include "kernels/gdp/desc.h"

typedef struct Where {
    const char *path, *group;
} Where;

#define VEC_FAIL(w, ...) gdp_fatal("vectors file %s, case '%s': %s", (w)->path, (w)->group, vec_msg_(__VA_ARGS__))

static __attribute__((format(printf, 1, 2))) const char *vec_msg_(const char *fmt, ...) {
    static _Thread_local char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

static void require_attr(const Where *w, hid_t grp, const char *name) {
    htri_t e = H5_CHECK(H5Aexists(grp, name));
    if (!e)
        VEC_FAIL(w, "attribute '%s' is missing (every case needs mode, B, T, H, K, V, n, scale, gate, h0)", name);
}

static double read_num_attr(const Where *w, hid_t grp, const char *name) {
    require_attr(w, grp, name);
    hid_t a = H5_CHECK(H5Aopen(grp, name, H5P_DEFAULT));
    hid_t sp = H5_CHECK(H5Aget_space(a));
    hid_t ty = H5_CHECK(H5Aget_type(a));
    H5T_class_t cls = H5Tget_class(ty);
    hssize_t npts = H5_CHECK(H5Sget_simple_extent_npoints(sp));
    if ((cls != H5T_INTEGER && cls != H5T_FLOAT) || npts != 1)
        VEC_FAIL(w, "attribute '%s' must be a single number", name);
    double v = 0;
    H5_CHECK(H5Aread(a, H5T_NATIVE_DOUBLE, &v));
    H5_CHECK(H5Tclose(ty));
    H5_CHECK(H5Sclose(sp));
    H5_CHECK(H5Aclose(a));
    return v;
}

static int read_int_attr(const Where *w, hid_t grp, const char *name, int lo, int hi) {
    double v = read_num_attr(w, grp, name);
    if (v != (double)(int)v || v < lo || v > hi)
        VEC_FAIL(w, "attribute '%s' = %g must be an integer in [%d, %d]", name, v, lo, hi);
    return (int)v;
}

static void read_str_attr(const Where *w, hid_t grp, const char *name, char *out, size_t len) {
    require_attr(w, grp, name);
    hid_t a = H5_CHECK(H5Aopen(grp, name, H5P_DEFAULT));
    hid_t ty = H5_CHECK(H5Aget_type(a));
    if (H5Tget_class(ty) != H5T_STRING) VEC_FAIL(w, "attribute '%s' must be a string", name);
    htri_t vl = H5_CHECK(H5Tis_variable_str(ty));
    hid_t mem = H5_CHECK(H5Tcopy(H5T_C_S1));
    if (vl) {
        H5_CHECK(H5Tset_size(mem, H5T_VARIABLE));
        H5_CHECK(H5Tset_cset(mem, H5Tget_cset(ty)));
        char *s = NULL;
        H5_CHECK(H5Aread(a, mem, &s));
        snprintf(out, len, "%s", s ? s : "");
        if (s) H5free_memory(s);
    } else {
        size_t n = H5Tget_size(ty);
        char *s = (char *)xcalloc(n + 1, 1);
        H5_CHECK(H5Tset_size(mem, n + 1));
        H5_CHECK(H5Tset_strpad(mem, H5T_STR_NULLTERM));
        H5_CHECK(H5Aread(a, mem, s));
        snprintf(out, len, "%s", s);
        free(s);
    }
    H5_CHECK(H5Tclose(mem));
    H5_CHECK(H5Tclose(ty));
    H5_CHECK(H5Aclose(a));
}

static const char *shape_str(int nd, const int64_t *dims, char *buf, size_t len) {
    size_t o = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < nd && o < len; i++) o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? "," : "", (long long)dims[i]);
    if (o < len) snprintf(buf + o, len - o, "]");
    return buf;
}

/* Reads float dataset `name` of shape dims[nd] as doubles (malloc'd). */
static double *read_dataset(const Where *w, hid_t grp, const char *name, int nd, const int64_t *dims) {
    char want[96], got[96];
    htri_t e = H5_CHECK(H5Lexists(grp, name, H5P_DEFAULT));
    if (!e) VEC_FAIL(w, "dataset '%s' is missing (expected float64 %s)", name, shape_str(nd, dims, want, sizeof want));
    hid_t ds = H5_CHECK(H5Dopen2(grp, name, H5P_DEFAULT));
    hid_t sp = H5_CHECK(H5Dget_space(ds));
    hid_t ty = H5_CHECK(H5Dget_type(ds));
    if (H5Tget_class(ty) != H5T_FLOAT) VEC_FAIL(w, "dataset '%s' is not floating point", name);
    int fnd = H5_CHECK(H5Sget_simple_extent_ndims(sp));
    hsize_t fdims[H5S_MAX_RANK];
    int64_t fd64[H5S_MAX_RANK];
    H5_CHECK(H5Sget_simple_extent_dims(sp, fdims, NULL));
    bool ok = fnd == nd;
    for (int i = 0; i < fnd; i++) {
        fd64[i] = (int64_t)fdims[i];
        if (ok && fd64[i] != dims[i]) ok = false;
    }
    if (!ok)
        VEC_FAIL(w, "dataset '%s' has shape %s, expected %s from the case's attributes", name,
                 shape_str(fnd, fd64, got, sizeof got), shape_str(nd, dims, want, sizeof want));
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= dims[i];
    double *buf = (double *)xmalloc((size_t)GDP_MAX(n, 1) * sizeof(double));
    herr_t r = H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
    if (r < 0) {
        char m[256];
        VEC_FAIL(w, "cannot read dataset '%s' (%s): is the file truncated?", name, h5_last_message(m));
    }
    H5_CHECK(H5Tclose(ty));
    H5_CHECK(H5Sclose(sp));
    H5_CHECK(H5Dclose(ds));
    return buf;
}

static void read_case(const char *path, hid_t file, const char *name, GdpVecCase *c) {
    Where w = {path, name};
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    hid_t grp = H5_CHECK(H5Gopen2(file, name, H5P_DEFAULT));
    char mode[32];
    read_str_attr(&w, grp, "mode", mode, sizeof mode);
    if (!strcmp(mode, "householder"))
        c->mode = GDP_MODE_HOUSEHOLDER;
    else if (!strcmp(mode, "split"))
        c->mode = GDP_MODE_SPLIT;
    else
        VEC_FAIL(&w, "attribute mode = '%s' is neither 'householder' nor 'split'", mode);
    c->B = read_int_attr(&w, grp, "B", 1, 1 << 20);
    c->T = read_int_attr(&w, grp, "T", 1, 1 << 24);
    c->H = read_int_attr(&w, grp, "H", 1, 1 << 12);
    c->K = read_int_attr(&w, grp, "K", 1, 1 << 14);
    c->V = read_int_attr(&w, grp, "V", 1, 1 << 14);
    c->n = read_int_attr(&w, grp, "n", 1, 1 << 10);
    c->scale = read_num_attr(&w, grp, "scale");
    c->gate = read_int_attr(&w, grp, "gate", 0, 1);
    c->has_h0 = read_int_attr(&w, grp, "h0", 0, 1);
    GdpDesc d = gdp_vec_desc(c, GDP_F64);
    if (gdp_validate(&d) != GDP_OK) VEC_FAIL(&w, "its attributes describe an invalid op: %s", gdp_last_error());
    const int64_t B = c->B, T = c->T, H = c->H, K = c->K, V = c->V, n = c->n;
    const bool hh = c->mode == GDP_MODE_HOUSEHOLDER;
    const int64_t sq[] = {B, T, H, K}, sv_s[] = {B, T, H, V}, sb_s[] = {B, T, H};
    const int64_t sk_h[] = {B, T, n, H, K}, sv_h[] = {B, T, n, H, V}, sb_h[] = {B, T, n, H};
    const int64_t sst[] = {B, H, K, V}, sm[] = {H, n, n};
    c->q = read_dataset(&w, grp, "q", 4, sq);
    c->dq = read_dataset(&w, grp, "dq", 4, sq);
    c->k = hh ? read_dataset(&w, grp, "k", 5, sk_h) : read_dataset(&w, grp, "k", 4, sq);
    c->dk = hh ? read_dataset(&w, grp, "dk", 5, sk_h) : read_dataset(&w, grp, "dk", 4, sq);
    c->v = hh ? read_dataset(&w, grp, "v", 5, sv_h) : read_dataset(&w, grp, "v", 4, sv_s);
    c->dv = hh ? read_dataset(&w, grp, "dv", 5, sv_h) : read_dataset(&w, grp, "dv", 4, sv_s);
    c->beta = hh ? read_dataset(&w, grp, "beta", 4, sb_h) : read_dataset(&w, grp, "beta", 3, sb_s);
    c->dbeta = hh ? read_dataset(&w, grp, "dbeta", 4, sb_h) : read_dataset(&w, grp, "dbeta", 3, sb_s);
    c->g = read_dataset(&w, grp, "g", 3, sb_s);
    c->dg = read_dataset(&w, grp, "dg", 3, sb_s);
    c->h0 = read_dataset(&w, grp, "h0", 4, sst);
    c->dh0 = read_dataset(&w, grp, "dh0", 4, sst);
    c->o = read_dataset(&w, grp, "o", 4, sv_s);
    c->d_o = read_dataset(&w, grp, "do", 4, sv_s);
    c->ht = read_dataset(&w, grp, "ht", 4, sst);
    c->dht = read_dataset(&w, grp, "dht", 4, sst);
    if (!hh) {
        c->mask = read_dataset(&w, grp, "mask", 3, sm);
        c->dmask = read_dataset(&w, grp, "dmask", 3, sm);
    }
    H5_CHECK(H5Gclose(grp));
}

void gdp_vectors_load(const char *path, GdpVecFile *out) {
    memset(out, 0, sizeof *out);
    h5_quiet();
    FILE *f = fopen(path, "rb");
    if (!f) gdp_fatal("vectors file %s: cannot open it: %s", path, strerror(errno));
    fclose(f);
    htri_t is = H5Fis_hdf5(path);
    if (is <= 0)
        gdp_fatal("vectors file %s: not an HDF5 file (no HDF5 signature found); give the .h5 file that "
                  "scripts/make_vectors.py writes",
                  path);
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0) {
        char m[256];
        gdp_fatal("vectors file %s: HDF5 cannot open it (%s); is it truncated or damaged?", path, h5_last_message(m));
    }
    H5G_info_t info;
    H5_CHECK(H5Gget_info(file, &info));
    int ng = 0;
    GdpVecCase *cases = (GdpVecCase *)xcalloc(GDP_MAX((size_t)info.nlinks, 1), sizeof(GdpVecCase));
    for (hsize_t i = 0; i < info.nlinks; i++) {
        char name[GDP_VEC_NAME_LEN];
        ssize_t len = H5_CHECK(H5Lget_name_by_idx(file, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT));
        if (len >= (ssize_t)sizeof name) gdp_fatal("vectors file %s: a case name is longer than %d characters", path, GDP_VEC_NAME_LEN - 1);
        hid_t obj = H5_CHECK(H5Oopen(file, name, H5P_DEFAULT));
        bool is_group = H5Iget_type(obj) == H5I_GROUP;
        H5_CHECK(H5Oclose(obj));
        if (!is_group) continue; /* only groups are cases */
        read_case(path, file, name, &cases[ng++]);
    }
    H5_CHECK(H5Fclose(file));
    if (ng == 0) gdp_fatal("vectors file %s: it holds no case (no group at its root)", path);
    out->n_cases = ng;
    out->cases = cases;
}

void gdp_vectors_free(GdpVecFile *f) {
    for (int i = 0; i < f->n_cases; i++) {
        GdpVecCase *c = &f->cases[i];
        double **all[] = {&c->q, &c->k, &c->v, &c->beta, &c->g, &c->mask, &c->h0, &c->o, &c->ht,
                          &c->d_o, &c->dht, &c->dq, &c->dk, &c->dv, &c->dbeta, &c->dg, &c->dmask, &c->dh0};
        for (size_t j = 0; j < GDP_ARRAY_LEN(all); j++) free_check(all[j]);
    }
    free(f->cases);
    f->cases = NULL;
    f->n_cases = 0;
}

GdpDesc gdp_vec_desc(const GdpVecCase *c, DType dt) {
    GdpDesc d;
    memset(&d, 0, sizeof d);
    d.mode = c->mode;
    d.B = c->B, d.T = c->T, d.H = c->H, d.K = c->K, d.V = c->V, d.n = c->n;
    d.scale = c->scale;
    d.dtype = dt;
    return d;
}
