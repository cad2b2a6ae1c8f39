/* HDF5 checkpoints (see train/checkpoint.h). Every failure names the file and what is wrong. */
#include "train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/h5_check.h"

/* ---- small helpers ------------------------------------------------------------------------------- */

/* A negative HDF5 result while writing `path`. */
#define H5W(path, call)                                                                                   \
    __extension__({                                                                                       \
        __typeof__(call) r_ = (call);                                                                     \
        if (r_ < 0) gdp_fatal("writing checkpoint '%s': HDF5 call %s failed (disk full? no permission?)", \
                              (path), #call);                                                             \
        r_;                                                                                               \
    })
/* A negative HDF5 result while reading `path`. */
#define H5R(path, what, call)                                                                            \
    __extension__({                                                                                      \
        __typeof__(call) r_ = (call);                                                                    \
        if (r_ < 0) gdp_fatal("checkpoint '%s' is corrupt or truncated: cannot read %s", (path), (what)); \
        r_;                                                                                              \
    })

static void mkdir_p(const char *dir) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", dir);
    size_t n = strlen(buf);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char c = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                gdp_fatal("cannot create checkpoint directory '%s': %s", buf, strerror(errno));
            buf[i] = c;
        }
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) gdp_fatal("checkpoint directory '%s' is not a directory", dir);
}

static void fsync_path(const char *path, bool is_dir) {
    int fd = open(path, is_dir ? O_RDONLY | O_DIRECTORY : O_RDONLY);
    if (fd < 0) gdp_fatal("cannot open '%s' to flush it to disk: %s", path, strerror(errno));
    if (fsync(fd) != 0 && !is_dir) gdp_fatal("fsync of '%s' failed: %s (disk full?)", path, strerror(errno));
    close(fd);
}

void checkpoint_path(char *buf, size_t len, const char *dir, int64_t step) {
    snprintf(buf, len, "%s/ckpt_%08lld.h5", dir, (long long)step);
}

/* file_type: the stored (little-endian standard) type; mem_type: the native type of *value. */
static void write_attr_scalar(const char *path, hid_t obj, const char *name, hid_t file_type, hid_t mem_type,
                              const void *value) {
    hid_t sp = H5W(path, H5Screate(H5S_SCALAR));
    hid_t a = H5W(path, H5Acreate2(obj, name, file_type, sp, H5P_DEFAULT, H5P_DEFAULT));
    H5W(path, H5Awrite(a, mem_type, value));
    H5W(path, H5Aclose(a));
    H5W(path, H5Sclose(sp));
}

static void write_attr_array(const char *path, hid_t obj, const char *name, hid_t file_type, hid_t mem_type,
                             const void *values, int n) {
    hsize_t dims[1] = {(hsize_t)n};
    hid_t sp = n > 0 ? H5W(path, H5Screate_simple(1, dims, NULL)) : H5W(path, H5Screate(H5S_NULL));
    hid_t a = H5W(path, H5Acreate2(obj, name, file_type, sp, H5P_DEFAULT, H5P_DEFAULT));
    if (n > 0) H5W(path, H5Awrite(a, mem_type, values));
    H5W(path, H5Aclose(a));
    H5W(path, H5Sclose(sp));
}

static void write_attr_string(const char *path, hid_t obj, const char *name, const char *value) {
    if (!value) value = "";
    /* Variable-length UTF-8: h5py reads it as a str. */
    hid_t t = H5W(path, H5Tcopy(H5T_C_S1));
    H5W(path, H5Tset_size(t, H5T_VARIABLE));
    H5W(path, H5Tset_cset(t, H5T_CSET_UTF8));
    write_attr_scalar(path, obj, name, t, t, &value);
    H5W(path, H5Tclose(t));
}

static hid_t create_group(const char *path, hid_t parent, const char *name) {
    return H5W(path, H5Gcreate2(parent, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
}

static void write_tensor(const char *path, hid_t group, const Tensor *t, const float *data) {
    hsize_t dims[GDP_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) dims[i] = (hsize_t)t->shape[i];
    hid_t sp = H5W(path, H5Screate_simple(t->ndim, dims, NULL));
    hid_t ds = H5W(path, H5Dcreate2(group, t->name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    H5W(path, H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
    unsigned int crc = (unsigned int)crc32_z(0L, (const Bytef *)data, (size_t)t->numel * sizeof(float));
    write_attr_scalar(path, ds, "crc32", H5T_STD_U32LE, H5T_NATIVE_UINT, &crc);
    H5W(path, H5Dclose(ds));
    H5W(path, H5Sclose(sp));
}

/* Full host copies of m and v on rank 0 (NULL elsewhere); collective under ZeRO-1. */
static void gather_optim(Optimizer *opt, Dist *dist, float **m_full, float **v_full) {
    ParamStore *ps = opt->ps;
    int world = dist ? dist->world : 1, rank = dist ? dist->rank : 0;
    int64_t n = opt->shard_end - opt->shard_start;
    float *m_sh = (float *)xmalloc((size_t)GDP_MAX(n, 1) * sizeof(float));
    float *v_sh = (float *)xmalloc((size_t)GDP_MAX(n, 1) * sizeof(float));
    ctx_synchronize(opt->ctx);
    device_memcpy(m_sh, DEV_CPU, opt->m, opt->ctx->device, (size_t)n * sizeof(float));
    device_memcpy(v_sh, DEV_CPU, opt->v, opt->ctx->device, (size_t)n * sizeof(float));
    *m_full = *v_full = NULL;
    if (rank == 0) {
        *m_full = (float *)xcalloc((size_t)ps->total, sizeof(float));
        *v_full = (float *)xcalloc((size_t)ps->total, sizeof(float));
    }
    if (opt->sharded && world > 1) {
        int64_t s, e;
        dist_shard_range(ps->total, rank, world, &s, &e);
        if (s != opt->shard_start || e != opt->shard_end)
            dist_abort(dist, "checkpoint_save: the optimizer shard [%lld, %lld) is not this rank's ZeRO-1 shard "
                             "[%lld, %lld) from dist_shard_range",
                       (long long)opt->shard_start, (long long)opt->shard_end, (long long)s, (long long)e);
        dist_gather_to_root_f32(dist, m_sh, *m_full, ps->total);
        dist_gather_to_root_f32(dist, v_sh, *v_full, ps->total);
    } else if (rank == 0) {
        memcpy(*m_full + opt->shard_start, m_sh, (size_t)n * sizeof(float));
        memcpy(*v_full + opt->shard_start, v_sh, (size_t)n * sizeof(float));
    }
    free(m_sh);
    free(v_sh);
}

static int cmp_i64_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Step of "ckpt_<8+ digits>.h5", or -1. */
static int64_t ckpt_step_of(const char *name) {
    size_t n = strlen(name);
    if (n < 5 + 8 + 3 || strncmp(name, "ckpt_", 5) != 0 || strcmp(name + n - 3, ".h5") != 0) return -1;
    int64_t step = 0;
    for (size_t i = 5; i < n - 3; i++) {
        if (name[i] < '0' || name[i] > '9') return -1;
        step = step * 10 + (name[i] - '0');
    }
    return step;
}

void checkpoint_prune(const char *dir, int keep_last, const char *protect) {
    if (keep_last <= 0) return;
    DIR *d = opendir(dir);
    if (!d) gdp_fatal("cannot list checkpoint directory '%s': %s", dir, strerror(errno));
    int64_t *steps = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t s = ckpt_step_of(e->d_name);
        if (s < 0) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            steps = (int64_t *)xrealloc(steps, (size_t)cap * sizeof(int64_t));
        }
        steps[n++] = s;
    }
    closedir(d);
    qsort(steps, (size_t)n, sizeof(int64_t), cmp_i64_desc);
    for (int i = keep_last; i < n; i++) {
        char p[4096];
        checkpoint_path(p, sizeof p, dir, steps[i]);
        if (protect && !strcmp(p, protect)) continue;
        if (unlink(p) != 0) fprintf(stderr, "gdp: warning: cannot delete old checkpoint '%s': %s\n", p, strerror(errno));
    }
    free(steps);
}

static void write_latest(const char *dir, const char *final_path) {
    const char *base = strrchr(final_path, '/');
    base = base ? base + 1 : final_path;
    char tmp[4096], dst[4096];
    snprintf(tmp, sizeof tmp, "%s/latest.tmp", dir);
    snprintf(dst, sizeof dst, "%s/latest", dir);
    FILE *f = xfopen(tmp, "w");
    if (fprintf(f, "%s\n", base) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0)
        gdp_fatal("writing '%s' failed: %s (disk full?)", tmp, strerror(errno));
    fclose(f);
    if (rename(tmp, dst) != 0) gdp_fatal("cannot rename '%s' to '%s': %s", tmp, dst, strerror(errno));
    fsync_path(dir, true);
}

char *checkpoint_save(const char *dir, ParamStore *ps, Optimizer *opt, const CheckpointMeta *meta, int keep_last,
                      Dist *dist) {
    GDP_CHECK(dir && dir[0], "checkpoint_save: no directory given");
    GDP_CHECK(ps && ps->allocated, "checkpoint_save: the ParamStore is not allocated");
    GDP_CHECK(meta, "checkpoint_save: no metadata given");
    GDP_CHECK(!opt || opt->ps == ps, "checkpoint_save: the optimizer belongs to another ParamStore");
    int rank = dist ? dist->rank : 0;
    float *m_full = NULL, *v_full = NULL;
    if (opt) gather_optim(opt, dist, &m_full, &v_full); /* collective */
    if (rank != 0) {
        dist_barrier(dist);
        return NULL;
    }
    h5_quiet();
    mkdir_p(dir);
    char final_path[4096], tmp_path[4200];
    checkpoint_path(final_path, sizeof final_path, dir, meta->step);
    snprintf(tmp_path, sizeof tmp_path, "%s.tmp", final_path);
    for (int i = 0; i < ps->n; i++)
        GDP_CHECK(!strchr(ps->items[i].t->name, '/'),
                  "checkpoint_save: parameter name '%s' contains '/', which HDF5 reads as a group path",
                  ps->items[i].t->name);

    float *params = (float *)xmalloc((size_t)ps->total * sizeof(float));
    ctx_synchronize(ps->ctx);
    device_memcpy(params, DEV_CPU, ps->flat_params, ps->ctx->device, (size_t)ps->total * sizeof(float));

    hid_t f = H5Fcreate(tmp_path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) gdp_fatal("cannot create checkpoint file '%s' (directory writable? disk full?)", tmp_path);
    const char *path = tmp_path;
    write_attr_string(path, f, "format", CHECKPOINT_FORMAT);
    int fv = CHECKPOINT_FORMAT_VERSION;
    write_attr_scalar(path, f, "format_version", H5T_STD_I32LE, H5T_NATIVE_INT, &fv);
    write_attr_string(path, f, "gdp_version", GDP_VERSION);
    long long step = (long long)meta->step, osteps = opt ? (long long)opt->t : 0;
    write_attr_scalar(path, f, "step", H5T_STD_I64LE, H5T_NATIVE_LLONG, &step);
    write_attr_scalar(path, f, "optim_steps", H5T_STD_I64LE, H5T_NATIVE_LLONG, &osteps);
    write_attr_array(path, f, "rng_state", H5T_STD_U64LE, H5T_NATIVE_UINT64, meta->rng.s, 4);
    write_attr_array(path, f, "loader_state", H5T_STD_I64LE, H5T_NATIVE_INT64, meta->loader_state, meta->loader_state ? meta->n_loader : 0);
    write_attr_string(path, f, "config", meta->config);
    int world = meta->world_size > 0 ? meta->world_size : (dist ? dist->world : 1);
    write_attr_scalar(path, f, "world_size", H5T_STD_I32LE, H5T_NATIVE_INT, &world);
    int zs = meta->zero_stage;
    write_attr_scalar(path, f, "zero_stage", H5T_STD_I32LE, H5T_NATIVE_INT, &zs);

    hid_t gp = create_group(path, f, "params");
    for (int i = 0; i < ps->n; i++) write_tensor(path, gp, ps->items[i].t, params + ps->items[i].offset);
    H5W(path, H5Gclose(gp));
    if (opt) {
        hid_t go = create_group(path, f, "optim");
        hid_t gm = create_group(path, go, "m"), gv = create_group(path, go, "v");
        for (int i = 0; i < ps->n; i++) {
            write_tensor(path, gm, ps->items[i].t, m_full + ps->items[i].offset);
            write_tensor(path, gv, ps->items[i].t, v_full + ps->items[i].offset);
        }
        H5W(path, H5Gclose(gm));
        H5W(path, H5Gclose(gv));
        H5W(path, H5Gclose(go));
    }
    if (H5Fclose(f) < 0) gdp_fatal("closing checkpoint file '%s' failed (disk full?)", tmp_path);
    free(params);
    free(m_full);
    free(v_full);

    fsync_path(tmp_path, false);
    if (rename(tmp_path, final_path) != 0)
        gdp_fatal("cannot rename '%s' to '%s': %s", tmp_path, final_path, strerror(errno));
    fsync_path(dir, true);
    write_latest(dir, final_path);
    checkpoint_prune(dir, keep_last, final_path);
    if (dist) dist_barrier(dist);
    size_t len = strlen(final_path) + 1;
    char *out = (char *)xmalloc(len);
    memcpy(out, final_path, len);
    return out;
}

/* ---- reading --------------------------------------------------------------------------------------- */

static hid_t open_checkpoint(const char *path) {
    h5_quiet();
    struct stat st;
    if (stat(path, &st) != 0) gdp_fatal("checkpoint '%s' does not exist: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) gdp_fatal("checkpoint '%s' is not a regular file", path);
    htri_t is = H5Fis_hdf5(path);
    if (is <= 0) gdp_fatal("'%s' is not an HDF5 file, so not a gdp.c checkpoint (or its header is corrupt)", path);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) gdp_fatal("cannot open checkpoint '%s': the HDF5 file is truncated or corrupt", path);
    if (H5Aexists(f, "format") <= 0)
        gdp_fatal("'%s' is an HDF5 file but not a gdp.c checkpoint (it has no 'format' attribute)", path);
    return f;
}

static char *read_attr_string(const char *path, hid_t obj, const char *name) {
    if (H5Aexists(obj, name) <= 0) gdp_fatal("checkpoint '%s' has no '%s' attribute", path, name);
    hid_t a = H5R(path, name, H5Aopen(obj, name, H5P_DEFAULT));
    hid_t t = H5R(path, name, H5Aget_type(a));
    if (H5Tget_class(t) != H5T_STRING) gdp_fatal("checkpoint '%s': attribute '%s' is not a string", path, name);
    char *out;
    if (H5Tis_variable_str(t) > 0) {
        hid_t mt = H5R(path, name, H5Tcopy(H5T_C_S1));
        H5R(path, name, H5Tset_size(mt, H5T_VARIABLE));
        H5R(path, name, H5Tset_cset(mt, H5Tget_cset(t)));
        char *v = NULL;
        H5R(path, name, H5Aread(a, mt, &v));
        size_t n = v ? strlen(v) : 0;
        out = (char *)xmalloc(n + 1);
        if (n) memcpy(out, v, n);
        out[n] = '\0';
        H5free_memory(v);
        H5Tclose(mt);
    } else {
        size_t n = H5Tget_size(t);
        out = (char *)xcalloc(n + 1, 1);
        H5R(path, name, H5Aread(a, t, out));
        out[n] = '\0';
    }
    H5Tclose(t);
    H5Aclose(a);
    return out;
}

static long long read_attr_ll(const char *path, hid_t obj, const char *name) {
    if (H5Aexists(obj, name) <= 0) gdp_fatal("checkpoint '%s' has no '%s' attribute", path, name);
    hid_t a = H5R(path, name, H5Aopen(obj, name, H5P_DEFAULT));
    long long v = 0;
    H5R(path, name, H5Aread(a, H5T_NATIVE_LLONG, &v));
    H5Aclose(a);
    return v;
}

/* A 1-D integer array attribute (n elements, NULL when n is 0). */
static void *read_attr_array(const char *path, hid_t obj, const char *name, hid_t memtype, size_t elem, int *n_out) {
    if (H5Aexists(obj, name) <= 0) gdp_fatal("checkpoint '%s' has no '%s' attribute", path, name);
    hid_t a = H5R(path, name, H5Aopen(obj, name, H5P_DEFAULT));
    hid_t sp = H5R(path, name, H5Aget_space(a));
    hssize_t n = H5Sget_simple_extent_type(sp) == H5S_NULL ? 0 : H5R(path, name, H5Sget_simple_extent_npoints(sp));
    void *buf = NULL;
    if (n > 0) {
        buf = xcalloc((size_t)n, elem);
        H5R(path, name, H5Aread(a, memtype, buf));
    }
    H5Sclose(sp);
    H5Aclose(a);
    *n_out = (int)n;
    return buf;
}

static void read_meta(const char *path, hid_t f, CheckpointInfo *info) {
    memset(info, 0, sizeof(*info));
    char *fmt = read_attr_string(path, f, "format");
    if (strcmp(fmt, CHECKPOINT_FORMAT) != 0)
        gdp_fatal("'%s' is an HDF5 file but not a gdp.c checkpoint (format attribute is '%s')", path, fmt);
    free(fmt);
    info->format_version = (int)read_attr_ll(path, f, "format_version");
    if (info->format_version > CHECKPOINT_FORMAT_VERSION || info->format_version < 1)
        gdp_fatal("checkpoint '%s' has format version %d; this gdp.c (%s) reads versions 1 to %d: use a newer gdp.c",
                  path, info->format_version, GDP_VERSION, CHECKPOINT_FORMAT_VERSION);
    char *ver = read_attr_string(path, f, "gdp_version");
    snprintf(info->gdp_version, sizeof info->gdp_version, "%s", ver);
    free(ver);
    info->step = read_attr_ll(path, f, "step");
    info->optim_steps = read_attr_ll(path, f, "optim_steps");
    int n = 0;
    uint64_t *rng = (uint64_t *)read_attr_array(path, f, "rng_state", H5T_NATIVE_UINT64, sizeof(uint64_t), &n);
    if (n != 4) gdp_fatal("checkpoint '%s': rng_state has %d values, expected 4", path, n);
    memcpy(info->rng.s, rng, sizeof info->rng.s);
    free(rng);
    info->loader_state = (int64_t *)read_attr_array(path, f, "loader_state", H5T_NATIVE_INT64, sizeof(int64_t), &n);
    info->n_loader = n;
    info->config = read_attr_string(path, f, "config");
    info->world_size = (int)read_attr_ll(path, f, "world_size");
    info->zero_stage = (int)read_attr_ll(path, f, "zero_stage");
    info->has_optim = H5Lexists(f, "optim", H5P_DEFAULT) > 0;
}

static const char *shape_str(char *buf, size_t len, int ndim, const int64_t *shape) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, len - o, "[");
    for (int i = 0; i < ndim && o < len; i++) o += (size_t)snprintf(buf + o, len - o, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (o < len) snprintf(buf + o, len - o, "]");
    return buf;
}

/* Reads every parameter-shaped tensor of group `gname` into host (flat layout); checks names and shapes. */
static void read_group(const char *path, hid_t f, const char *gname, ParamStore *ps, float *host) {
    if (H5Lexists(f, gname, H5P_DEFAULT) <= 0) gdp_fatal("checkpoint '%s' has no group /%s", path, gname);
    hid_t g = H5R(path, gname, H5Gopen2(f, gname, H5P_DEFAULT));
    H5G_info_t gi;
    H5R(path, gname, H5Gget_info(g, &gi));
    for (int i = 0; i < ps->n; i++) {
        const Tensor *t = ps->items[i].t;
        char what[256], a[160], b[160];
        snprintf(what, sizeof what, "/%s/%s", gname, t->name);
        if (H5Lexists(g, t->name, H5P_DEFAULT) <= 0)
            gdp_fatal("checkpoint '%s' has no parameter %s: it was written for a different model (check the config)",
                      path, what);
        hid_t ds = H5R(path, what, H5Dopen2(g, t->name, H5P_DEFAULT));
        hid_t sp = H5R(path, what, H5Dget_space(ds));
        int nd = H5R(path, what, H5Sget_simple_extent_ndims(sp));
        hsize_t dims[H5S_MAX_RANK];
        int64_t shape[H5S_MAX_RANK];
        H5R(path, what, H5Sget_simple_extent_dims(sp, dims, NULL));
        bool same = nd == t->ndim;
        for (int k = 0; k < nd; k++) {
            shape[k] = (int64_t)dims[k];
            if (same && shape[k] != t->shape[k]) same = false;
        }
        if (!same)
            gdp_fatal("checkpoint '%s': %s has shape %s but the model's parameter has shape %s", path, what,
                      shape_str(a, sizeof a, nd, shape), shape_str(b, sizeof b, t->ndim, t->shape));
        hid_t ty = H5R(path, what, H5Dget_type(ds));
        if (H5Tget_class(ty) != H5T_FLOAT) gdp_fatal("checkpoint '%s': %s is not a floating-point dataset", path, what);
        H5Tclose(ty);
        float *dst = host + ps->items[i].offset;
        H5R(path, what, H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst));
        if (H5Aexists(ds, "crc32") > 0) {
            hid_t at = H5R(path, what, H5Aopen(ds, "crc32", H5P_DEFAULT));
            unsigned int want = 0;
            H5R(path, what, H5Aread(at, H5T_NATIVE_UINT, &want));
            H5Aclose(at);
            unsigned int got = (unsigned int)crc32_z(0L, (const Bytef *)dst, (size_t)t->numel * sizeof(float));
            if (got != want)
                gdp_fatal("checkpoint '%s' is corrupt: the data of %s fails its checksum (crc32 %08x, stored %08x)",
                          path, what, got, want);
        }
        H5Sclose(sp);
        H5Dclose(ds);
    }
    if (gi.nlinks != (hsize_t)ps->n) {
        /* Name one entry the model does not have. */
        for (hsize_t k = 0; k < gi.nlinks; k++) {
            char name[512];
            ssize_t len = H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, k, name, sizeof name, H5P_DEFAULT);
            if (len < 0) break;
            if (!params_find(ps, name))
                gdp_fatal("checkpoint '%s' has /%s/%s, which the model does not have: it was written for a different "
                          "model (check the config)",
                          path, gname, name);
        }
        gdp_fatal("checkpoint '%s': /%s holds %llu entries but the model has %d parameters", path, gname,
                  (unsigned long long)gi.nlinks, ps->n);
    }
    H5Gclose(g);
}

void checkpoint_read_info(const char *path, CheckpointInfo *info) {
    hid_t f = open_checkpoint(path);
    read_meta(path, f, info);
    H5Fclose(f);
}

char *checkpoint_read_config(const char *path) {
    CheckpointInfo info;
    checkpoint_read_info(path, &info);
    char *cfg = info.config;
    info.config = NULL;
    checkpoint_info_free(&info);
    return cfg;
}

void checkpoint_info_free(CheckpointInfo *info) {
    if (!info) return;
    free(info->loader_state);
    free(info->config);
    info->loader_state = NULL;
    info->config = NULL;
}

void checkpoint_load(const char *path, ParamStore *ps, Optimizer *opt, CheckpointInfo *info) {
    GDP_CHECK(ps && ps->allocated, "checkpoint_load: the ParamStore is not allocated");
    GDP_CHECK(!opt || opt->ps == ps, "checkpoint_load: the optimizer belongs to another ParamStore");
    hid_t f = open_checkpoint(path);
    CheckpointInfo meta;
    read_meta(path, f, &meta);
    if (opt && !meta.has_optim)
        gdp_fatal("checkpoint '%s' holds no optimizer state (/optim), so training cannot resume from it", path);

    float *host = (float *)xcalloc((size_t)ps->total, sizeof(float));
    read_group(path, f, "params", ps, host);
    ctx_synchronize(ps->ctx);
    device_memcpy(ps->flat_params, ps->ctx->device, host, DEV_CPU, (size_t)ps->total * sizeof(float));
    device_synchronize(ps->ctx->device);
    if (opt) {
        int64_t n = opt->shard_end - opt->shard_start;
        const char *groups[2] = {"optim/m", "optim/v"};
        float *dsts[2] = {opt->m, opt->v};
        for (int k = 0; k < 2; k++) {
            memset(host, 0, (size_t)ps->total * sizeof(float));
            read_group(path, f, groups[k], ps, host);
            device_memcpy(dsts[k], ps->ctx->device, host + opt->shard_start, DEV_CPU, (size_t)n * sizeof(float));
        }
        device_synchronize(ps->ctx->device);
        opt->t = meta.optim_steps;
    }
    free(host);
    H5Fclose(f);
    if (info)
        *info = meta;
    else
        checkpoint_info_free(&meta);
}

char *checkpoint_latest(const char *dir) {
    char lp[4096];
    snprintf(lp, sizeof lp, "%s/latest", dir);
    FILE *fp = fopen(lp, "r");
    if (!fp) return NULL;
    char name[1024] = {0};
    if (!fgets(name, sizeof name, fp)) name[0] = '\0';
    fclose(fp);
    size_t n = strlen(name);
    while (n > 0 && (name[n - 1] == '\n' || name[n - 1] == '\r' || name[n - 1] == ' ')) name[--n] = '\0';
    if (n == 0 || strchr(name, '/'))
        gdp_fatal("'%s' should hold one checkpoint file name (like ckpt_00000100.h5) but holds '%s'", lp, name);
    size_t len = strlen(dir) + 1 + n + 1;
    char *path = (char *)xmalloc(len);
    snprintf(path, len, "%s/%s", dir, name);
    struct stat st;
    if (stat(path, &st) != 0)
        gdp_fatal("'%s' names checkpoint '%s', which does not exist (deleted?): fix or remove the latest file", lp,
                  path);
    return path;
}
