/* HDF5 checkpoints (see train/checkpoint.h). Every failure names the file and what is wrong. */
#include "train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <hdf5.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "base/h5_check.h"

/* ---- small helpers ------------------------------------------------------------------------------- */

/* The in-memory HDF5 file being built, closed by h5w_fail so that no error exits with it open
 * (libhdf5's exit handler would try to flush it). */
static hid_t building = -1;

__attribute__((noreturn)) static void h5w_fail(const char *path, const char *call) {
    char m[256];
    h5_last_message(m);
    if (building >= 0) H5Fclose(building);
    building = -1;
    gdp_fatal("building checkpoint '%s' in memory: HDF5 call %s failed: %s (out of host memory?)", path, call, m);
}

/* A negative HDF5 result while building the file for `path`. */
#define H5W(path, call)                            \
    __extension__({                                \
        __typeof__(call) r_ = (call);              \
        if (r_ < 0) h5w_fail((path), #call);       \
        r_;                                        \
    })
/* A negative HDF5 result while reading `path`. */
#define H5R(path, what, call)                                                                            \
    __extension__({                                                                                      \
        __typeof__(call) r_ = (call);                                                                    \
        if (r_ < 0) read_fatal("checkpoint '%s' is corrupt or truncated: cannot read %s", (path), (what)); \
        r_;                                                                                              \
    })

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

/* HDF5 stamps every object with its creation time unless told not to: without the stamps the same
 * training state always gives the same bytes, so two runs (or a resumed run and an uninterrupted
 * one) can be compared with cmp. */
static hid_t untimed_plist(const char *path, hid_t cls) {
    hid_t pl = H5W(path, H5Pcreate(cls));
    H5W(path, H5Pset_obj_track_times(pl, 0));
    return pl;
}

static hid_t create_group(const char *path, hid_t parent, const char *name) {
    hid_t gcpl = untimed_plist(path, H5P_GROUP_CREATE);
    hid_t g = H5W(path, H5Gcreate2(parent, name, H5P_DEFAULT, gcpl, H5P_DEFAULT));
    H5W(path, H5Pclose(gcpl));
    return g;
}

static void write_tensor(const char *path, hid_t group, const Tensor *t, const float *data) {
    hsize_t dims[GDP_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) dims[i] = (hsize_t)t->shape[i];
    hid_t sp = H5W(path, H5Screate_simple(t->ndim, dims, NULL));
    hid_t dcpl = untimed_plist(path, H5P_DATASET_CREATE);
    hid_t ds = H5W(path, H5Dcreate2(group, t->name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT));
    H5W(path, H5Pclose(dcpl));
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

/* The steps of DIR's ckpt_*.h5 files, newest first (malloc'd, *n of them). */
static int64_t *list_steps(const char *dir, int *n_out) {
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
    if (n > 1) qsort(steps, (size_t)n, sizeof(int64_t), cmp_i64_desc);
    *n_out = n;
    return steps;
}

void checkpoint_prune(const char *dir, int keep_last, const char *protect) {
    if (keep_last <= 0) return;
    int n = 0;
    int64_t *steps = list_steps(dir, &n);
    for (int i = keep_last; i < n; i++) {
        char p[4096];
        checkpoint_path(p, sizeof p, dir, steps[i]);
        if (protect && !strcmp(p, protect)) continue;
        if (unlink(p) != 0) fprintf(stderr, "gdp: warning: cannot delete old checkpoint '%s': %s\n", p, strerror(errno));
    }
    free(steps);
}

/* Deletes the ckpt_*.h5.tmp and latest.tmp files of DIR: a process killed inside a write leaves
 * one behind, and a resumed run with other --checkpoint-every steps would never overwrite it.
 * Called after a checkpoint and `latest` were renamed into place, when no .tmp of ours is left. */
static void remove_stale_tmps(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return; /* only tidying: the checkpoint itself is written */
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        bool ckpt_tmp = n > 7 && !strncmp(e->d_name, "ckpt_", 5) && !strcmp(e->d_name + n - 7, ".h5.tmp");
        if (!ckpt_tmp && strcmp(e->d_name, "latest.tmp") != 0) continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (unlink(p) == 0) fprintf(stderr, "note: removed '%s', left by a run that was killed while writing it\n", p);
    }
    closedir(d);
}

/* Writes all of buf to path (created or truncated) and fsyncs it. On failure closes and deletes
 * path and returns false with errno set; no partial file is left behind. */
static bool write_file_durably(const char *path, const void *buf, size_t n, size_t *written) {
    *written = 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (fd < 0) return false;
    const char *p = (const char *)buf;
    while (*written < n) {
        ssize_t w = write(fd, p + *written, n - *written);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = ENOSPC;
            break;
        }
        *written += (size_t)w;
    }
    if (*written == n && fsync(fd) == 0) {
        if (close(fd) == 0) return true;
        fd = -1;
    }
    int e = errno;
    if (fd >= 0) close(fd);
    unlink(path);
    errno = e;
    return false;
}

static void write_latest(const char *dir, const char *final_path) {
    const char *base = strrchr(final_path, '/');
    base = base ? base + 1 : final_path;
    char tmp[4096], dst[4096], text[1024];
    snprintf(tmp, sizeof tmp, "%s/latest.tmp", dir);
    snprintf(dst, sizeof dst, "%s/latest", dir);
    int n = snprintf(text, sizeof text, "%s\n", base);
    size_t done;
    if (!write_file_durably(tmp, text, (size_t)n, &done))
        gdp_fatal("writing '%s' failed: %s (disk full?); '%s' is complete, resume from it", tmp, strerror(errno),
                  final_path);
    if (rename(tmp, dst) != 0) {
        int e = errno;
        unlink(tmp);
        gdp_fatal("cannot rename '%s' to '%s': %s; '%s' is complete, resume from it", tmp, dst, strerror(e),
                  final_path);
    }
    fsync_path(dir, true);
}

/* The whole-file check (see checkpoint.h): CRC-32 of every byte of the file, the 4 bytes of the
 * stored CRC counted as zeros. `at` is the offset of buf in the file. */
static uLong crc_update_skipping_field(uLong crc, const unsigned char *buf, size_t n, uint64_t at) {
    static const unsigned char zeros[4] = {0};
    const uint64_t f0 = CKPT_HEADER_CRC_AT, f1 = CKPT_HEADER_CRC_AT + 4;
    if (at + n <= f0 || at >= f1) return crc32_z(crc, buf, n);
    size_t before = at < f0 ? (size_t)(f0 - at) : 0;
    crc = crc32_z(crc, buf, before);
    size_t in_field = (size_t)(GDP_MIN((uint64_t)(at + n), f1) - (at + before));
    crc = crc32_z(crc, zeros, in_field);
    return crc32_z(crc, buf + before + in_field, n - before - in_field);
}

static void put_le(unsigned char *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* NULL when every value is finite, else the name of the first tensor with a NaN or Inf (and its
 * element in *at). */
static const char *first_nonfinite(const ParamStore *ps, const float *flat, int64_t *at) {
    for (int i = 0; i < ps->n; i++) {
        const float *x = flat + ps->items[i].offset;
        for (int64_t j = 0; j < ps->items[i].t->numel; j++)
            if (!isfinite(x[j])) {
                *at = j;
                return ps->items[i].t->name;
            }
    }
    return NULL;
}

char *checkpoint_save(const char *dir, ParamStore *ps, Optimizer *opt, const CheckpointMeta *meta, int keep_last,
                      Dist *dist) {
    GDP_CHECK(dir && dir[0], "checkpoint_save: no directory given");
    GDP_CHECK(ps && ps->allocated, "checkpoint_save: the ParamStore is not allocated");
    GDP_CHECK(meta, "checkpoint_save: no metadata given");
    GDP_CHECK(!opt || opt->ps == ps, "checkpoint_save: the optimizer belongs to another ParamStore");
    GDP_CHECK(meta->step >= 0, "checkpoint_save: step %lld is negative", (long long)meta->step);
    GDP_CHECK(meta->n_loader >= 0 && meta->n_loader <= CHECKPOINT_MAX_STATE && meta->n_train_state >= 0 &&
                  meta->n_train_state <= CHECKPOINT_MAX_STATE,
              "checkpoint_save: %d loader and %d trainer state values (at most %d each)", meta->n_loader,
              meta->n_train_state, CHECKPOINT_MAX_STATE);
    int rank = dist ? dist->rank : 0;
    float *m_full = NULL, *v_full = NULL;
    if (opt) gather_optim(opt, dist, &m_full, &v_full); /* collective */
    if (rank != 0) {
        dist_barrier(dist);
        return NULL;
    }
    h5_quiet();
    gdp_mkdir_p(dir, "checkpoint");
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
    /* A NaN in the state would make every later resume useless: keep the earlier checkpoints. */
    const float *tensors[3] = {params, m_full, v_full};
    const char *kinds[3] = {"parameter", "AdamW first moment of", "AdamW second moment of"};
    for (int k = 0; k < (opt ? 3 : 1); k++) {
        int64_t at = 0;
        const char *bad = first_nonfinite(ps, tensors[k], &at);
        if (bad)
            gdp_fatal("not writing checkpoint '%s': %s %s holds a non-finite value (element %lld); the earlier "
                      "checkpoints in '%s' are untouched",
                      final_path, kinds[k], bad, (long long)at, dir);
    }

    /* Built in memory (HDF5's core driver) and written with plain write(): a full disk is then one
     * failed write() we handle, never an HDF5 file left half-flushed, and the whole-file CRC is
     * computed on the bytes that go to disk. */
    double payload = (double)ps->total * 4.0 * (opt ? 3.0 : 1.0);
    size_t increment = (size_t)GDP_MIN(payload + 4.0 * 1048576, 1024.0 * 1048576);
    hid_t fcpl = H5W(tmp_path, H5Pcreate(H5P_FILE_CREATE));
    H5W(tmp_path, H5Pset_userblock(fcpl, CKPT_HEADER_BYTES));
    H5W(tmp_path, H5Pset_obj_track_times(fcpl, 0)); /* the root group too (see untimed_plist) */
    hid_t fapl = H5W(tmp_path, H5Pcreate(H5P_FILE_ACCESS));
    H5W(tmp_path, H5Pset_fapl_core(fapl, increment, 0));
    hid_t f = H5Fcreate(tmp_path, H5F_ACC_TRUNC, fcpl, fapl);
    if (f < 0) h5w_fail(tmp_path, "H5Fcreate");
    building = f;
    H5Pclose(fcpl);
    H5Pclose(fapl);
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
    write_attr_array(path, f, "train_state", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, meta->train_state,
                     meta->train_state ? meta->n_train_state : 0);
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
    free(params);
    free(m_full);
    free(v_full);
    H5W(path, H5Fflush(f, H5F_SCOPE_LOCAL));
    /* The image starts at HDF5's base address, after the user block we reserved for the header. */
    ssize_t hdf5_bytes = H5W(path, H5Fget_file_image(f, NULL, 0));
    ssize_t size = hdf5_bytes + CKPT_HEADER_BYTES;
    unsigned char *image = (unsigned char *)xmalloc((size_t)size);
    H5W(path, H5Fget_file_image(f, image + CKPT_HEADER_BYTES, (size_t)hdf5_bytes));
    building = -1;
    if (H5Fclose(f) < 0) gdp_fatal("checkpoint '%s': closing the in-memory HDF5 file failed", path);

    /* The CRC covers the header too. */
    memset(image, 0, CKPT_HEADER_BYTES);
    memcpy(image, CKPT_HEADER_MAGIC, CKPT_HEADER_MAGIC_LEN);
    put_le(image + CKPT_HEADER_SIZE_AT, (uint64_t)size, 8);
    put_le(image + CKPT_HEADER_CRC_AT + 4, CKPT_HEADER_VERSION, 4);
    uLong crc = crc_update_skipping_field(crc32_z(0L, Z_NULL, 0), image, (size_t)size, 0);
    put_le(image + CKPT_HEADER_CRC_AT, (uint64_t)crc, 4);

    size_t written = 0;
    if (!write_file_durably(tmp_path, image, (size_t)size, &written)) {
        int e = errno;
        free(image);
        gdp_fatal("writing checkpoint '%s' failed after %zu of %zd bytes: %s (disk full? quota? file size "
                  "limit?); the partial file was removed and the earlier checkpoints in '%s' are untouched",
                  tmp_path, written, size, strerror(e), dir);
    }
    free(image);
    if (rename(tmp_path, final_path) != 0) {
        int e = errno;
        unlink(tmp_path);
        gdp_fatal("cannot rename '%s' to '%s': %s", tmp_path, final_path, strerror(e));
    }
    fsync_path(dir, true);
    write_latest(dir, final_path);
    remove_stale_tmps(dir);
    checkpoint_prune(dir, keep_last, final_path);
    if (dist) dist_barrier(dist);
    size_t len = strlen(final_path) + 1;
    char *out = (char *)xmalloc(len);
    memcpy(out, final_path, len);
    return out;
}

/* ---- reading --------------------------------------------------------------------------------------- */

typedef enum { VERIFY_OK, VERIFY_LEGACY, VERIFY_BAD } VerifyResult;

/* Checks the whole file against its header before HDF5 parses a byte of it: a flipped bit in
 * HDF5's own metadata can crash libhdf5, which no check after H5Fopen could prevent. VERIFY_BAD
 * leaves the reason in why. */
static VerifyResult verify_file(const char *path, char *why, size_t len) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        snprintf(why, len, "cannot open it: %s", strerror(errno));
        return VERIFY_BAD;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        snprintf(why, len, "it is not a regular file");
        return VERIFY_BAD;
    }
    uint64_t size = (uint64_t)st.st_size;
    size_t cap = 1 << 20;
    unsigned char *buf = (unsigned char *)xmalloc(cap);
    ssize_t got = pread(fd, buf, CKPT_HEADER_BYTES, 0);
    static const unsigned char hdf5_sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    VerifyResult res = VERIFY_BAD;
    if (got >= 8 && !memcmp(buf, hdf5_sig, 8)) {
        res = VERIFY_LEGACY;
    } else if (got < CKPT_HEADER_BYTES || memcmp(buf, CKPT_HEADER_MAGIC, CKPT_HEADER_MAGIC_LEN) != 0) {
        snprintf(why, len, "it starts with neither a gdp.c checkpoint header nor an HDF5 signature (%lld bytes)",
                 (long long)size);
    } else if (get_le(buf + CKPT_HEADER_CRC_AT + 4, 4) != CKPT_HEADER_VERSION) {
        snprintf(why, len, "its header has layout %llu; this gdp.c (%s) reads layout %d (newer gdp.c? or corrupt)",
                 (unsigned long long)get_le(buf + CKPT_HEADER_CRC_AT + 4, 4), GDP_VERSION, CKPT_HEADER_VERSION);
    } else if (get_le(buf + CKPT_HEADER_SIZE_AT, 8) != size) {
        snprintf(why, len, "it is %llu bytes but was written with %llu (truncated, or a corrupt header)",
                 (unsigned long long)size, (unsigned long long)get_le(buf + CKPT_HEADER_SIZE_AT, 8));
    } else {
        uLong want = (uLong)get_le(buf + CKPT_HEADER_CRC_AT, 4), crc = crc32_z(0L, Z_NULL, 0);
        uint64_t at = 0;
        while (at < size) {
            size_t n = (size_t)GDP_MIN((uint64_t)cap, size - at);
            ssize_t r = pread(fd, buf, n, (off_t)at);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            crc = crc_update_skipping_field(crc, buf, (size_t)r, at);
            at += (uint64_t)r;
        }
        if (at != size)
            snprintf(why, len, "reading it failed after %llu of %llu bytes: %s", (unsigned long long)at,
                     (unsigned long long)size, strerror(errno));
        else if (crc != want)
            snprintf(why, len, "its bytes fail the whole-file checksum (crc32 %08lx, stored %08lx)", (unsigned long)crc,
                     (unsigned long)want);
        else
            res = VERIFY_OK;
    }
    free(buf);
    close(fd);
    return res;
}

bool checkpoint_verify(const char *path, char *why, size_t len) {
    char tmp[512];
    VerifyResult r = verify_file(path, tmp, sizeof tmp);
    if (r == VERIFY_LEGACY) snprintf(tmp, sizeof tmp, "it has no whole-file checksum (written by an older gdp.c)");
    if (why && len) snprintf(why, len, "%s", r == VERIFY_OK ? "" : tmp);
    return r == VERIFY_OK;
}

bool checkpoint_readable(const char *path, char *why, size_t len) {
    char tmp[512];
    VerifyResult r = verify_file(path, tmp, sizeof tmp);
    if (why && len) snprintf(why, len, "%s", r == VERIFY_BAD ? tmp : "");
    return r != VERIFY_BAD;
}

/* The checkpoint being read, closed (with everything opened in it: H5F_CLOSE_STRONG) before a read
 * error exits. */
static hid_t reading = -1;

static void close_reading(void) {
    if (reading >= 0) H5Fclose(reading);
    reading = -1;
}

__attribute__((noreturn, format(printf, 3, 4))) static void read_fatal_at(const char *file, int line, const char *fmt,
                                                                          ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    close_reading();
    gdp_fatal_at(file, line, "%s", msg);
}
#define read_fatal(...) read_fatal_at(__FILE__, __LINE__, __VA_ARGS__)

static hid_t open_checkpoint(const char *path) {
    h5_quiet();
    struct stat st;
    if (stat(path, &st) != 0) gdp_fatal("checkpoint '%s' does not exist: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) gdp_fatal("checkpoint '%s' is not a regular file", path);
    char why[512];
    VerifyResult v = verify_file(path, why, sizeof why);
    if (v == VERIFY_BAD) gdp_fatal("checkpoint '%s' is corrupt or not a gdp.c checkpoint: %s", path, why);
    if (v == VERIFY_LEGACY)
        fprintf(stderr, "gdp: warning: '%s' has no whole-file checksum (a checkpoint of an older gdp.c, or another "
                        "HDF5 file): only its datasets' checksums are checked\n", path);
    htri_t is = H5Fis_hdf5(path);
    if (is <= 0) gdp_fatal("'%s' is not an HDF5 file, so not a gdp.c checkpoint (or its header is corrupt)", path);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0 || H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0)
        gdp_fatal("checkpoint '%s': cannot set up HDF5 file access (out of memory?)", path);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    if (f < 0) gdp_fatal("cannot open checkpoint '%s': the HDF5 file is truncated or corrupt", path);
    if (H5Aexists(f, "format") <= 0) {
        H5Fclose(f);
        gdp_fatal("'%s' is an HDF5 file but not a gdp.c checkpoint (it has no 'format' attribute)", path);
    }
    reading = f;
    return f;
}

static char *read_attr_string(const char *path, hid_t obj, const char *name) {
    if (H5Aexists(obj, name) <= 0) read_fatal("checkpoint '%s' has no '%s' attribute", path, name);
    hid_t a = H5R(path, name, H5Aopen(obj, name, H5P_DEFAULT));
    hid_t t = H5R(path, name, H5Aget_type(a));
    if (H5Tget_class(t) != H5T_STRING) read_fatal("checkpoint '%s': attribute '%s' is not a string", path, name);
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
    if (H5Aexists(obj, name) <= 0) read_fatal("checkpoint '%s' has no '%s' attribute", path, name);
    hid_t a = H5R(path, name, H5Aopen(obj, name, H5P_DEFAULT));
    long long v = 0;
    H5R(path, name, H5Aread(a, H5T_NATIVE_LLONG, &v));
    H5Aclose(a);
    return v;
}

/* A 1-D numeric array attribute (n elements, NULL when n is 0); at most CHECKPOINT_MAX_STATE. */
static void *read_attr_array(const char *path, hid_t obj, const char *name, hid_t memtype, size_t elem, int *n_out) {
    if (H5Aexists(obj, name) <= 0) read_fatal("checkpoint '%s' has no '%s' attribute", path, name);
    hid_t a = H5R(path, name, H5Aopen(obj, name, H5P_DEFAULT));
    hid_t sp = H5R(path, name, H5Aget_space(a));
    hssize_t n = H5Sget_simple_extent_type(sp) == H5S_NULL ? 0 : H5R(path, name, H5Sget_simple_extent_npoints(sp));
    if (n > CHECKPOINT_MAX_STATE)
        read_fatal("checkpoint '%s' is corrupt: attribute '%s' has %lld values (at most %d)", path, name, (long long)n,
                   CHECKPOINT_MAX_STATE);
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
        read_fatal("'%s' is an HDF5 file but not a gdp.c checkpoint (format attribute is '%s')", path, fmt);
    free(fmt);
    info->format_version = (int)read_attr_ll(path, f, "format_version");
    if (info->format_version > CHECKPOINT_FORMAT_VERSION || info->format_version < 1)
        read_fatal("checkpoint '%s' has format version %d; this gdp.c (%s) reads versions 1 to %d: use a newer gdp.c",
                  path, info->format_version, GDP_VERSION, CHECKPOINT_FORMAT_VERSION);
    char *ver = read_attr_string(path, f, "gdp_version");
    snprintf(info->gdp_version, sizeof info->gdp_version, "%s", ver);
    free(ver);
    info->step = read_attr_ll(path, f, "step");
    info->optim_steps = read_attr_ll(path, f, "optim_steps");
    int n = 0;
    uint64_t *rng_s = (uint64_t *)read_attr_array(path, f, "rng_state", H5T_NATIVE_UINT64, sizeof(uint64_t), &n);
    if (n != 4) read_fatal("checkpoint '%s': rng_state has %d values, expected 4", path, n);
    Rng rng;
    memcpy(rng.s, rng_s, sizeof rng.s);
    free(rng_s);
    info->rng = rng;
    info->loader_state = (int64_t *)read_attr_array(path, f, "loader_state", H5T_NATIVE_INT64, sizeof(int64_t), &n);
    info->n_loader = n;
    /* train_state came later: older checkpoints have none */
    if (H5Aexists(f, "train_state") > 0) {
        info->train_state = (double *)read_attr_array(path, f, "train_state", H5T_NATIVE_DOUBLE, sizeof(double), &n);
        info->n_train_state = n;
    }
    info->config = read_attr_string(path, f, "config");
    long long world = read_attr_ll(path, f, "world_size"), zs = read_attr_ll(path, f, "zero_stage");
    info->has_optim = H5Lexists(f, "optim", H5P_DEFAULT) > 0;
    /* Hand-edited or corrupt values would otherwise train from a negative step or divide by a zero
     * bias correction. */
    if (info->step < 0 || info->step > CHECKPOINT_MAX_STEP)
        read_fatal("checkpoint '%s': step = %lld is out of range (0 to %lld)", path, (long long)info->step,
                   (long long)CHECKPOINT_MAX_STEP);
    if (info->optim_steps < 0 || info->optim_steps > info->step || (!info->has_optim && info->optim_steps != 0))
        read_fatal("checkpoint '%s': optim_steps = %lld is out of range (0 to step = %lld%s)", path,
                   (long long)info->optim_steps, (long long)info->step,
                   info->has_optim ? "" : ", and 0 without optimizer state");
    if (world < 1 || world > (1 << 24))
        read_fatal("checkpoint '%s': world_size = %lld is out of range (1 to %d)", path, world, 1 << 24);
    if (zs != 0 && zs != 1) read_fatal("checkpoint '%s': zero_stage = %lld must be 0 or 1", path, zs);
    info->world_size = (int)world;
    info->zero_stage = (int)zs;
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
    if (H5Lexists(f, gname, H5P_DEFAULT) <= 0) read_fatal("checkpoint '%s' has no group /%s", path, gname);
    hid_t g = H5R(path, gname, H5Gopen2(f, gname, H5P_DEFAULT));
    H5G_info_t gi;
    H5R(path, gname, H5Gget_info(g, &gi));
    for (int i = 0; i < ps->n; i++) {
        const Tensor *t = ps->items[i].t;
        char what[256], a[160], b[160];
        snprintf(what, sizeof what, "/%s/%s", gname, t->name);
        if (H5Lexists(g, t->name, H5P_DEFAULT) <= 0)
            read_fatal("checkpoint '%s' has no parameter %s: it was written for a different model (check the config)",
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
            read_fatal("checkpoint '%s': %s has shape %s but the model's parameter has shape %s", path, what,
                      shape_str(a, sizeof a, nd, shape), shape_str(b, sizeof b, t->ndim, t->shape));
        hid_t ty = H5R(path, what, H5Dget_type(ds));
        if (H5Tget_class(ty) != H5T_FLOAT) read_fatal("checkpoint '%s': %s is not a floating-point dataset", path, what);
        H5Tclose(ty);
        float *dst = host + ps->items[i].offset;
        H5R(path, what, H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst));
        if (H5Aexists(ds, "crc32") <= 0)
            read_fatal("checkpoint '%s' is corrupt: %s has no crc32 attribute, so its data cannot be checked", path,
                       what);
        {
            hid_t at = H5R(path, what, H5Aopen(ds, "crc32", H5P_DEFAULT));
            unsigned int want = 0;
            H5R(path, what, H5Aread(at, H5T_NATIVE_UINT, &want));
            H5Aclose(at);
            unsigned int got = (unsigned int)crc32_z(0L, (const Bytef *)dst, (size_t)t->numel * sizeof(float));
            if (got != want)
                read_fatal("checkpoint '%s' is corrupt: the data of %s fails its checksum (crc32 %08x, stored %08x)",
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
                read_fatal("checkpoint '%s' has /%s/%s, which the model does not have: it was written for a different "
                          "model (check the config)",
                          path, gname, name);
        }
        read_fatal("checkpoint '%s': /%s holds %llu entries but the model has %d parameters", path, gname,
                  (unsigned long long)gi.nlinks, ps->n);
    }
    H5Gclose(g);
}

void checkpoint_read_info(const char *path, CheckpointInfo *info) {
    hid_t f = open_checkpoint(path);
    read_meta(path, f, info);
    close_reading();
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
    free(info->train_state);
    free(info->config);
    info->loader_state = NULL;
    info->train_state = NULL;
    info->config = NULL;
}

void checkpoint_load(const char *path, ParamStore *ps, Optimizer *opt, CheckpointInfo *info) {
    GDP_CHECK(ps && ps->allocated, "checkpoint_load: the ParamStore is not allocated");
    GDP_CHECK(!opt || opt->ps == ps, "checkpoint_load: the optimizer belongs to another ParamStore");
    hid_t f = open_checkpoint(path);
    CheckpointInfo meta;
    read_meta(path, f, &meta);
    if (opt && !meta.has_optim)
        read_fatal("checkpoint '%s' holds no optimizer state (/optim), so training cannot resume from it", path);

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
    close_reading();
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
        read_fatal("'%s' should hold one checkpoint file name (like ckpt_00000100.h5) but holds '%s'", lp, name);
    size_t len = strlen(dir) + 1 + n + 1;
    char *path = (char *)xmalloc(len);
    snprintf(path, len, "%s/%s", dir, name);
    struct stat st;
    if (stat(path, &st) != 0)
        read_fatal("'%s' names checkpoint '%s', which does not exist (deleted?): fix or remove the latest file", lp,
                  path);
    return path;
}

char *checkpoint_find_resume(const char *dir, char *note, size_t len) {
    if (len) note[0] = '\0';
    char lp[4096], named[1024] = "";
    snprintf(lp, sizeof lp, "%s/latest", dir);
    FILE *fp = fopen(lp, "r");
    if (fp) {
        if (!fgets(named, sizeof named, fp)) named[0] = '\0';
        fclose(fp);
        size_t k = strlen(named);
        while (k > 0 && (named[k - 1] == '\n' || named[k - 1] == '\r' || named[k - 1] == ' ')) named[--k] = '\0';
    }
    int n = 0;
    int64_t *steps = list_steps(dir, &n);
    char path[4096];
    size_t used = 0;
    char *found = NULL;
    for (int i = 0; i < n && !found; i++) {
        checkpoint_path(path, sizeof path, dir, steps[i]);
        const char *base = strrchr(path, '/') + 1;
        /* the usual case: `latest` names the newest file, which checkpoint_load verifies anyway */
        if (i == 0 && !strcmp(base, named)) {
            found = path;
            break;
        }
        char why[512];
        if (verify_file(path, why, sizeof why) == VERIFY_BAD) {
            if (used < len)
                used += (size_t)snprintf(note + used, len - used, "skipping '%s': %s; ", path, why);
            continue;
        }
        found = path;
        if (used < len)
            used += (size_t)snprintf(note + used, len - used, "%s; resuming from the newest valid checkpoint, '%s'",
                                     !fp              ? "the folder has no 'latest' file (a run stopped before writing it)"
                                     : !named[0]      ? "its 'latest' file is empty"
                                     : !strcmp(base, named) ? "newer checkpoints are unreadable"
                                                      : "its 'latest' file names an older or missing checkpoint (a run "
                                                        "stopped between writing the checkpoint and updating "
                                                        "'latest')",
                                     path);
    }
    free(steps);
    if (!found) return NULL;
    size_t plen = strlen(found) + 1;
    char *out = (char *)xmalloc(plen);
    memcpy(out, found, plen);
    return out;
}
