/* Data-parallel plumbing: MPI (host) and NCCL (CUDA). See train/dist.h. */
#include "train/dist.h"

#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <time.h>
#include <unistd.h>

#include "base/common.h"
#include "core/params.h"

#ifdef GDP_CUDA
#include <nccl.h>

#include "base/cuda_check.h"
#endif

/* MPI calls return their error (MPI_ERRORS_RETURN is set on MPI_COMM_WORLD) and we say which. */
#define MPI_CHECK(d, call)                                                                                   \
    do {                                                                                                     \
        int mpi_err_ = (call);                                                                               \
        if (mpi_err_ != MPI_SUCCESS) {                                                                       \
            char mpi_msg_[MPI_MAX_ERROR_STRING];                                                             \
            int mpi_len_ = 0;                                                                                \
            MPI_Error_string(mpi_err_, mpi_msg_, &mpi_len_);                                                 \
            dist_abort((d), "MPI call failed at %s:%d: %s: %s", __FILE__, __LINE__, #call, mpi_msg_);         \
        }                                                                                                    \
    } while (0)

#ifdef GDP_CUDA
#define NCCL_CHECK(d, call)                                                                                  \
    do {                                                                                                     \
        ncclResult_t nccl_r_ = (call);                                                                       \
        if (nccl_r_ != ncclSuccess)                                                                          \
            dist_abort((d), "NCCL call failed at %s:%d: %s: %s (%s)", __FILE__, __LINE__, #call,             \
                       ncclGetErrorString(nccl_r_), ncclGetLastError(NULL));                                 \
    } while (0)
#endif

static bool mpi_up(void) {
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    return inited && !finalized;
}

void dist_abort(const Dist *d, const char *fmt, ...) {
    fflush(stdout);
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int rank = d ? d->rank : 0, world = d ? d->world : 1;
    fprintf(stderr, "gdp: error: rank %d of %d: %s\n", rank, world, msg);
    fflush(stderr);
#ifdef GDP_CUDA
    if (d && d->nccl_comm) ncclCommAbort((ncclComm_t)d->nccl_comm);
#endif
    if (d && d->world > 1 && mpi_up()) MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

/* Number of NVIDIA GPUs on this host without starting CUDA (0 when unknown). */
static int count_host_gpus(void) {
    DIR *dir = opendir("/proc/driver/nvidia/gpus");
    if (!dir) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dir)))
        if (e->d_name[0] != '.') n++;
    closedir(dir);
    return n;
}

/* One GPU per local rank, through CUDA_VISIBLE_DEVICES (ctx_create uses device 0). */
static void bind_gpu(const Dist *d) {
    if (d->local_world <= 1 || getenv("GDP_NO_GPU_BIND")) return;
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    char pick[256];
    if (vis && vis[0]) {
        char list[1024];
        snprintf(list, sizeof list, "%s", vis);
        char *items[128];
        int n = 0;
        for (char *tok = strtok(list, ","); tok && n < 128; tok = strtok(NULL, ",")) items[n++] = tok;
        if (n == 0) return;
        if (n < d->local_world && d->rank == 0)
            fprintf(stderr, "gdp: warning: %d ranks on this host but CUDA_VISIBLE_DEVICES lists %d GPUs: ranks share GPUs\n",
                    d->local_world, n);
        snprintf(pick, sizeof pick, "%s", items[d->local_rank % n]);
    } else {
        int n = count_host_gpus();
        if (n == 0) return; /* no NVIDIA driver: a CPU run */
        if (n < d->local_world && d->rank == 0)
            fprintf(stderr, "gdp: warning: %d ranks on this host but only %d GPUs: ranks share GPUs\n", d->local_world,
                    n);
        snprintf(pick, sizeof pick, "%d", d->local_rank % n);
    }
    setenv("CUDA_VISIBLE_DEVICES", pick, 1);
}

static double timeout_from_env(void) {
    const char *t = getenv("GDP_DIST_TIMEOUT_S");
    if (t && t[0]) {
        char *end = NULL;
        double v = strtod(t, &end);
        if (end && *end == '\0' && v > 0) return v;
        fprintf(stderr, "gdp: warning: GDP_DIST_TIMEOUT_S='%s' is not a positive number; using 600\n", t);
    }
    return 600.0;
}

void dist_init_single(Dist *d) {
    memset(d, 0, sizeof(*d));
    d->world = d->local_world = 1;
    d->device = DEV_CPU;
    d->initialized = true;
    d->timeout_s = timeout_from_env();
}

void dist_init(Dist *d, int *argc, char ***argv) {
    dist_init_single(d);
    /* NVLink multicast (NVLS) is off by default; a value the user set wins. */
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int err = MPI_Init(argc, argv);
        if (err != MPI_SUCCESS) gdp_fatal("MPI_Init failed (error %d): is Open MPI installed and working?", err);
        d->we_initialized_mpi = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_CHECK(d, MPI_Comm_rank(MPI_COMM_WORLD, &d->rank));
    MPI_CHECK(d, MPI_Comm_size(MPI_COMM_WORLD, &d->world));
    MPI_Comm local;
    MPI_CHECK(d, MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &local));
    MPI_CHECK(d, MPI_Comm_rank(local, &d->local_rank));
    MPI_CHECK(d, MPI_Comm_size(local, &d->local_world));
    MPI_Comm_free(&local);
    bind_gpu(d);
}

/* Whether device collectives do anything: with several ranks, or through NCCL when a test forces it. */
static bool collectives_on(const Dist *d) { return d->world > 1 || (d->force_nccl && d->device == DEV_CUDA); }

void dist_attach(Dist *d, Ctx *ctx) {
    GDP_CHECK(d && d->initialized, "dist_attach: call dist_init (or dist_init_single) first");
    d->ctx = ctx;
    d->device = ctx->device;
    if (!collectives_on(d)) return;
    double dv = (double)ctx->device;
    double lo = -dist_max_double(d, -dv), hi = dist_max_double(d, dv);
    if (lo != hi)
        dist_abort(d, "the ranks use different devices (this one: %s; some cpu, some cuda): give every rank the "
                      "same --device, and one GPU per rank",
                   device_name(ctx->device));
    if (ctx->device != DEV_CUDA) return;
#ifdef GDP_CUDA
    /* A later run in the same process (tests, gdp tasks) reuses the communicator: it belongs to the
     * GPU, not to the context. */
    if (d->nccl_comm) return;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (d->rank == 0) NCCL_CHECK(d, ncclGetUniqueId(&id));
    if (d->world > 1) MPI_CHECK(d, MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));
    ncclComm_t comm;
    NCCL_CHECK(d, ncclCommInitRank(&comm, d->world, id, d->rank));
    d->nccl_comm = comm;
    cudaStream_t s;
    cudaEvent_t e;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    d->nccl_stream = s;
    d->nccl_event = e;
#else
    dist_abort(d, "dist_attach on cuda: this build has no CUDA support");
#endif
}

void dist_finalize(Dist *d) {
    if (!d || !d->initialized) return;
#ifdef GDP_CUDA
    if (d->nccl_comm) {
        ncclCommDestroy((ncclComm_t)d->nccl_comm);
        CUDA_CHECK(cudaStreamDestroy((cudaStream_t)d->nccl_stream));
        CUDA_CHECK(cudaEventDestroy((cudaEvent_t)d->nccl_event));
        d->nccl_comm = d->nccl_stream = d->nccl_event = NULL;
    }
#endif
    if (d->we_initialized_mpi && mpi_up()) MPI_Finalize();
    d->initialized = false;
}

void dist_barrier(Dist *d) {
    if (d->world <= 1) return;
    MPI_CHECK(d, MPI_Barrier(MPI_COMM_WORLD));
}

void dist_shard_range(int64_t total, int rank, int world, int64_t *start, int64_t *end) {
    if (world < 1) world = 1;
    int64_t chunk = CEIL_DIV(CEIL_DIV(total, (int64_t)world), (int64_t)64) * 64;
    int64_t s = GDP_MIN((int64_t)rank * chunk, total);
    *start = s;
    *end = GDP_MIN(s + chunk, total);
}

/* ---- NCCL path ------------------------------------------------------------------------------------ */
#ifdef GDP_CUDA
static bool use_nccl(const Dist *d) { return d->device == DEV_CUDA && collectives_on(d); }

/* inject_stall_s: a host function on the NCCL stream holds it as a peer that never arrives would. */
static void CUDART_CB stall_stream(void *secs) {
    double s = *(const double *)secs;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static void nccl_begin(Dist *d) {
    GDP_CHECK(d->nccl_comm, "dist: a CUDA collective before dist_attach created the NCCL communicator");
    cudaEvent_t e = (cudaEvent_t)d->nccl_event;
    CUDA_CHECK(cudaEventRecord(e, (cudaStream_t)ctx_stream(d->ctx)));
    CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)d->nccl_stream, e, 0));
    if (d->inject_stall_s > 0)
        CUDA_CHECK(cudaLaunchHostFunc((cudaStream_t)d->nccl_stream, stall_stream, &d->inject_stall_s));
    d->nccl_ops++;
}

/* NCCL's asynchronous error state (a failed peer, a network error): any error ends every rank
 * (dist_abort: the message names this rank, ncclCommAbort, MPI_Abort). */
static void nccl_check_async(Dist *d, const char *what) {
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(d, ncclCommGetAsyncError((ncclComm_t)d->nccl_comm, &async));
    if (d->inject_nccl_error) async = (ncclResult_t)d->inject_nccl_error;
    if (async != ncclSuccess && async != ncclInProgress)
        dist_abort(d, "%s: NCCL reported an asynchronous error: %s (%s); another rank probably failed", what,
                   ncclGetErrorString(async), ncclGetLastError((ncclComm_t)d->nccl_comm));
}

/* Waits for the queued NCCL work, polling NCCL's error state and a timeout. */
static void nccl_finish(Dist *d, const char *what) {
    cudaEvent_t e = (cudaEvent_t)d->nccl_event;
    CUDA_CHECK(cudaEventRecord(e, (cudaStream_t)d->nccl_stream));
    double t0 = gdp_now_seconds();
    for (;;) {
        cudaError_t q = cudaEventQuery(e);
        if (q == cudaSuccess) break;
        if (q != cudaErrorNotReady) dist_abort(d, "%s: CUDA error while waiting: %s", what, cudaGetErrorString(q));
        nccl_check_async(d, what);
        if (gdp_now_seconds() - t0 > d->timeout_s)
            dist_abort(d, "%s: no progress for %.0f s (GDP_DIST_TIMEOUT_S): another rank is dead or stuck", what,
                       d->timeout_s);
        usleep(50);
    }
    /* Once more after completion: an aborted communicator lets its kernels finish early, so the
     * event completes although the result is not there. */
    nccl_check_async(d, what);
}

#ifdef GDP_CUDA
/* The part of [lo, hi) of buf (total elements, sharded as dist_shard_range) that each rank owns,
 * averaged over ranks onto that rank: one ncclReduce per rank, grouped (a reduce-scatter for
 * shards of any size). */
static void nccl_reduce_to_owners(Dist *d, float *buf, int64_t total, int64_t lo, int64_t hi) {
    ncclComm_t comm = (ncclComm_t)d->nccl_comm;
    cudaStream_t st = (cudaStream_t)d->nccl_stream;
    NCCL_CHECK(d, ncclGroupStart());
    for (int r = 0; r < d->world; r++) {
        int64_t rs, re;
        dist_shard_range(total, r, d->world, &rs, &re);
        rs = GDP_MAX(rs, lo), re = GDP_MIN(re, hi);
        if (re > rs) NCCL_CHECK(d, ncclReduce(buf + rs, buf + rs, (size_t)(re - rs), ncclFloat, ncclAvg, r, comm, st));
    }
    NCCL_CHECK(d, ncclGroupEnd());
}
#endif

static bool even_shards(int64_t total, int world) {
    int64_t s, e;
    dist_shard_range(total, 0, world, &s, &e);
    return (e - s) * world == total;
}
#endif

static void check_int_count(const Dist *d, int64_t n, const char *what) {
    if (n > INT_MAX) dist_abort(d, "%s: %lld elements exceed what one MPI call takes (%d)", what, (long long)n, INT_MAX);
}

/* ---- device buffers --------------------------------------------------------------------------------- */
static void allreduce_f32(Dist *d, float *buf, int64_t n, bool mean) {
    if (!collectives_on(d) || n <= 0) return;
#ifdef GDP_CUDA
    if (use_nccl(d)) {
        nccl_begin(d);
        NCCL_CHECK(d, ncclAllReduce(buf, buf, (size_t)n, ncclFloat, mean ? ncclAvg : ncclSum,
                                    (ncclComm_t)d->nccl_comm, (cudaStream_t)d->nccl_stream));
        nccl_finish(d, "all-reduce");
        return;
    }
#endif
    GDP_CHECK(d->device == DEV_CPU, "dist: device collectives on cuda need a CUDA build and dist_attach");
    const int64_t step = (int64_t)1 << 30;
    for (int64_t off = 0; off < n; off += step) {
        int cnt = (int)GDP_MIN(step, n - off);
        MPI_CHECK(d, MPI_Allreduce(MPI_IN_PLACE, buf + off, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    }
    if (mean) {
        float w = (float)d->world;
        for (int64_t i = 0; i < n; i++) buf[i] /= w;
    }
}

void dist_allreduce_mean_f32(Dist *d, float *buf, int64_t n) { allreduce_f32(d, buf, n, true); }
void dist_allreduce_sum_f32(Dist *d, float *buf, int64_t n) { allreduce_f32(d, buf, n, false); }

static void shard_tables(const Dist *d, int64_t total, int *counts, int *displs) {
    for (int r = 0; r < d->world; r++) {
        int64_t s, e;
        dist_shard_range(total, r, d->world, &s, &e);
        counts[r] = (int)(e - s);
        displs[r] = (int)s;
    }
}

void dist_reduce_scatter_mean_f32(Dist *d, float *buf, int64_t total) {
    if (!collectives_on(d) || total <= 0) return;
    int64_t start, end;
    dist_shard_range(total, d->rank, d->world, &start, &end);
#ifdef GDP_CUDA
    if (use_nccl(d)) {
        ncclComm_t comm = (ncclComm_t)d->nccl_comm;
        cudaStream_t s = (cudaStream_t)d->nccl_stream;
        nccl_begin(d);
        if (even_shards(total, d->world)) {
            NCCL_CHECK(d, ncclReduceScatter(buf, buf + start, (size_t)(end - start), ncclFloat, ncclAvg, comm, s));
        } else {
            nccl_reduce_to_owners(d, buf, total, 0, total);
        }
        nccl_finish(d, "reduce-scatter");
        return;
    }
#endif
    GDP_CHECK(d->device == DEV_CPU, "dist: device collectives on cuda need a CUDA build and dist_attach");
    check_int_count(d, total, "reduce-scatter");
    int *counts = (int *)xmalloc(sizeof(int) * (size_t)d->world), *displs = (int *)xmalloc(sizeof(int) * (size_t)d->world);
    shard_tables(d, total, counts, displs);
    /* In place: the input is all of buf, this rank's result lands at buf[0..count). */
    MPI_CHECK(d, MPI_Reduce_scatter(MPI_IN_PLACE, buf, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    int64_t n = end - start;
    if (start > 0 && n > 0) memmove(buf + start, buf, (size_t)n * sizeof(float));
    float w = (float)d->world;
    for (int64_t i = start; i < end; i++) buf[i] /= w;
    free(counts);
    free(displs);
}

void dist_all_gather_f32(Dist *d, float *buf, int64_t total) {
    if (!collectives_on(d) || total <= 0) return;
#ifdef GDP_CUDA
    if (use_nccl(d)) {
        ncclComm_t comm = (ncclComm_t)d->nccl_comm;
        cudaStream_t s = (cudaStream_t)d->nccl_stream;
        int64_t start, end;
        dist_shard_range(total, d->rank, d->world, &start, &end);
        nccl_begin(d);
        if (even_shards(total, d->world)) {
            NCCL_CHECK(d, ncclAllGather(buf + start, buf, (size_t)(end - start), ncclFloat, comm, s));
        } else {
            NCCL_CHECK(d, ncclGroupStart());
            for (int r = 0; r < d->world; r++) {
                int64_t rs, re;
                dist_shard_range(total, r, d->world, &rs, &re);
                if (re > rs) NCCL_CHECK(d, ncclBroadcast(buf + rs, buf + rs, (size_t)(re - rs), ncclFloat, r, comm, s));
            }
            NCCL_CHECK(d, ncclGroupEnd());
        }
        nccl_finish(d, "all-gather");
        return;
    }
#endif
    GDP_CHECK(d->device == DEV_CPU, "dist: device collectives on cuda need a CUDA build and dist_attach");
    check_int_count(d, total, "all-gather");
    int *counts = (int *)xmalloc(sizeof(int) * (size_t)d->world), *displs = (int *)xmalloc(sizeof(int) * (size_t)d->world);
    shard_tables(d, total, counts, displs);
    MPI_CHECK(d, MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, MPI_FLOAT, MPI_COMM_WORLD));
    free(counts);
    free(displs);
}

/* ---- host collectives --------------------------------------------------------------------------------- */
static double allreduce_double(Dist *d, double x, MPI_Op op) {
    if (d->world <= 1) return x;
    double y = 0;
    MPI_CHECK(d, MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, op, MPI_COMM_WORLD));
    return y;
}

double dist_sum_double(Dist *d, double x) { return allreduce_double(d, x, MPI_SUM); }
double dist_mean_double(Dist *d, double x) { return allreduce_double(d, x, MPI_SUM) / (double)d->world; }
double dist_max_double(Dist *d, double x) { return allreduce_double(d, x, MPI_MAX); }

int64_t dist_sum_i64(Dist *d, int64_t x) {
    if (d->world <= 1) return x;
    long long in = (long long)x, out = 0;
    MPI_CHECK(d, MPI_Allreduce(&in, &out, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
    return (int64_t)out;
}

void dist_gather_to_root_f32(Dist *d, const float *shard, float *full, int64_t total) {
    int64_t start, end;
    dist_shard_range(total, d->rank, d->world, &start, &end);
    if (d->world <= 1) {
        if (full != shard && total > 0) memmove(full, shard, (size_t)total * sizeof(float));
        return;
    }
    check_int_count(d, total, "gather");
    int *counts = (int *)xmalloc(sizeof(int) * (size_t)d->world), *displs = (int *)xmalloc(sizeof(int) * (size_t)d->world);
    shard_tables(d, total, counts, displs);
    MPI_CHECK(d, MPI_Gatherv(shard, (int)(end - start), MPI_FLOAT, d->rank == 0 ? full : NULL, counts, displs,
                             MPI_FLOAT, 0, MPI_COMM_WORLD));
    free(counts);
    free(displs);
}

void dist_broadcast_bytes(Dist *d, void *buf, int64_t bytes) {
    if (d->world <= 1 || bytes <= 0) return;
    const int64_t step = (int64_t)1 << 30;
    for (int64_t off = 0; off < bytes; off += step)
        MPI_CHECK(d, MPI_Bcast((char *)buf + off, (int)GDP_MIN(step, bytes - off), MPI_BYTE, 0, MPI_COMM_WORLD));
}

/* ---- parameter-store helpers ---------------------------------------------------------------------------- */
void dist_sync_grads(Dist *d, ParamStore *ps, int zero_stage) {
    if (!d || !collectives_on(d)) return;
    GDP_CHECK(zero_stage == 0 || zero_stage == 1, "dist_sync_grads: ZeRO stage %d is not supported (use 0 or 1)",
              zero_stage);
    if (zero_stage == 1)
        dist_reduce_scatter_mean_f32(d, ps->flat_grads, ps->total);
    else
        dist_allreduce_mean_f32(d, ps->flat_grads, ps->total);
}

void dist_sync_params(Dist *d, ParamStore *ps, int zero_stage) {
    if (!d || !collectives_on(d) || zero_stage != 1) return;
    dist_all_gather_f32(d, ps->flat_params, ps->total);
}

/* ---- gradient buckets overlapped with backward ------------------------------------------------------------ */
int dist_plan_buckets(const int64_t *group_start, int n_groups, int64_t total, int64_t cap, GradBucket *out) {
    if (n_groups <= 0 || total <= 0) return 0;
    GDP_CHECK(group_start[0] == 0, "dist_plan_buckets: the first group starts at %lld, not 0",
              (long long)group_start[0]);
    for (int g = 1; g < n_groups; g++)
        GDP_CHECK(group_start[g] > group_start[g - 1] && group_start[g] < total,
                  "dist_plan_buckets: group %d starts at %lld: starts must increase and stay below %lld", g,
                  (long long)group_start[g], (long long)total);
    if (cap <= 0) {
        out[0] = (GradBucket){0, total};
        return 1;
    }
    int n = 0;
    int64_t end = total;
    for (int g = n_groups - 1; g >= 0; g--) {
        int64_t s = group_start[g];
        if (end - s >= cap || g == 0) {
            out[n++] = (GradBucket){s, end};
            end = s;
        }
    }
    return n;
}

static void buckets_launch(DistBuckets *gb, int k) {
    Dist *d = gb->d;
    float *buf = gb->ps->flat_grads;
    int64_t s = gb->b[k].start, n = gb->b[k].end - s;
#ifdef GDP_CUDA
    if (use_nccl(d)) {
        ncclComm_t comm = (ncclComm_t)d->nccl_comm;
        cudaStream_t st = (cudaStream_t)d->nccl_stream;
        nccl_begin(d); /* the NCCL stream waits for the backward queued so far */
        if (gb->zero_stage == 0) {
            NCCL_CHECK(d, ncclAllReduce(buf + s, buf + s, (size_t)n, ncclFloat, ncclAvg, comm, st));
        } else {
            /* Reduce-scatter of this bucket: each rank's part of it (its ZeRO-1 shard) to that rank. */
            nccl_reduce_to_owners(d, buf, gb->ps->total, s, s + n);
        }
        nccl_check_async(d, "gradient buckets");
        return;
    }
#endif
    GDP_CHECK(d->device == DEV_CPU, "dist: gradient buckets on cuda need a CUDA build and dist_attach");
    MPI_Comm comm = *(MPI_Comm *)gb->comm;
    MPI_Request *req = (MPI_Request *)gb->reqs + k;
    if (gb->zero_stage == 0)
        MPI_CHECK(d, MPI_Iallreduce(MPI_IN_PLACE, buf + s, (int)n, MPI_FLOAT, MPI_SUM, comm, req));
    else /* in place: this rank's part of the bucket lands at buf + s (moved into place after the wait) */
        MPI_CHECK(d, MPI_Ireduce_scatter(MPI_IN_PLACE, buf + s, gb->counts + (size_t)k * (size_t)d->world, MPI_FLOAT,
                                         MPI_SUM, comm, req));
}

/* Starts, in order, every bucket that nothing from tape index i down still writes. */
static void buckets_try_launch(DistBuckets *gb, int i) {
    while (gb->next < gb->n && gb->ready_at[gb->next] >= i) {
        gb->launched_at[gb->next] = i;
        buckets_launch(gb, gb->next++);
    }
    /* Open MPI moves non-blocking collectives on inside MPI calls: give it a turn per node. */
    if (gb->d->device == DEV_CPU && gb->next > 0) {
        int flag = 0;
        MPI_CHECK(gb->d, MPI_Testall(gb->next, (MPI_Request *)gb->reqs, &flag, MPI_STATUSES_IGNORE));
    }
}

static void buckets_begin(void *user, const Tape *tape) {
    DistBuckets *gb = (DistBuckets *)user;
    GDP_CHECK(gb->next == 0, "gradient buckets: a second backward before dist_buckets_sync (arm them for the last "
                             "micro-step only)");
    for (int k = 0; k < gb->n; k++) gb->ready_at[k] = INT_MAX, gb->launched_at[k] = -1;
    /* The lowest tape index writing into each bucket: the nodes whose inputs' gradients lie in it. */
    uintptr_t base = (uintptr_t)gb->ps->flat_grads;
    int64_t total = gb->ps->total;
    for (int i = 0; i < tape->n; i++) {
        const Node *nd = &tape->nodes[i];
        for (int j = 0; j < nd->n_in; j++) {
            const Tensor *x = nd->in[j];
            if (!x || !x->requires_grad || !x->grad || !x->grad->data) continue;
            uintptr_t p = (uintptr_t)x->grad->data;
            if (p < base || p >= base + (uintptr_t)total * sizeof(float)) continue;
            int64_t off = (int64_t)((p - base) / sizeof(float)), end = GDP_MIN(off + x->grad->numel, total);
            /* buckets run downward in offset: b[k].start decreases with k */
            int lo = 0, hi = gb->n - 1;
            while (lo < hi) { /* first k with b[k].start <= off */
                int mid = (lo + hi) / 2;
                if (gb->b[mid].start <= off) hi = mid;
                else lo = mid + 1;
            }
            for (int k = lo; k >= 0 && gb->b[k].start < end; k--)
                if (i < gb->ready_at[k]) gb->ready_at[k] = i;
        }
    }
    buckets_try_launch(gb, tape->n);
}

static void buckets_passed(void *user, const Tape *tape, int i) {
    (void)tape;
    buckets_try_launch((DistBuckets *)user, i);
}

void dist_buckets_init(DistBuckets *gb, Dist *d, ParamStore *ps, int zero_stage, double bucket_mb) {
    memset(gb, 0, sizeof *gb);
    gb->d = d, gb->ps = ps, gb->zero_stage = zero_stage;
    GDP_CHECK(zero_stage == 0 || zero_stage == 1, "gradient buckets: ZeRO stage %d is not supported (use 0 or 1)",
              zero_stage);
    GDP_CHECK(ps && ps->allocated, "dist_buckets_init: allocate the parameters first");
    if (!d || !collectives_on(d) || !(bucket_mb > 0)) return;
    int64_t cap = (int64_t)ceil(bucket_mb * 1048576.0 / sizeof(float));
    int64_t *starts = (int64_t *)xmalloc(sizeof(int64_t) * (size_t)ps->n);
    int ng = 0;
    for (int i = 0; i < ps->n; i++)
        if (i == 0 || ps->items[i].bucket != ps->items[i - 1].bucket) starts[ng++] = ps->items[i].offset;
    gb->b = (GradBucket *)xmalloc(sizeof(GradBucket) * (size_t)ng);
    gb->n = dist_plan_buckets(starts, ng, ps->total, GDP_MAX(cap, (int64_t)1), gb->b);
    free(starts);
    gb->ready_at = (int *)xmalloc(sizeof(int) * (size_t)gb->n);
    gb->launched_at = (int *)xmalloc(sizeof(int) * (size_t)gb->n);
    for (int k = 0; k < gb->n; k++) gb->ready_at[k] = INT_MAX, gb->launched_at[k] = -1;
    gb->hook = (TapeHook){buckets_begin, buckets_passed, gb};
    if (d->device == DEV_CPU) {
        for (int k = 0; k < gb->n; k++) check_int_count(d, gb->b[k].end - gb->b[k].start, "gradient bucket");
        MPI_Comm *comm = (MPI_Comm *)xmalloc(sizeof(MPI_Comm));
        /* Its own communicator: the buckets never interleave with the trainer's other collectives. */
        MPI_CHECK(d, MPI_Comm_dup(MPI_COMM_WORLD, comm));
        MPI_Comm_set_errhandler(*comm, MPI_ERRORS_RETURN);
        gb->comm = comm;
        MPI_Request *reqs = (MPI_Request *)xmalloc(sizeof(MPI_Request) * (size_t)gb->n);
        for (int k = 0; k < gb->n; k++) reqs[k] = MPI_REQUEST_NULL;
        gb->reqs = reqs;
        if (zero_stage == 1) {
            gb->counts = (int *)xmalloc(sizeof(int) * (size_t)gb->n * (size_t)d->world);
            for (int k = 0; k < gb->n; k++)
                for (int r = 0; r < d->world; r++) {
                    int64_t rs, re;
                    dist_shard_range(ps->total, r, d->world, &rs, &re);
                    rs = GDP_MAX(rs, gb->b[k].start), re = GDP_MIN(re, gb->b[k].end);
                    gb->counts[(size_t)k * (size_t)d->world + (size_t)r] = re > rs ? (int)(re - rs) : 0;
                }
        }
    } else {
#ifdef GDP_CUDA
        GDP_CHECK(d->nccl_comm, "gradient buckets on cuda: call dist_attach first (it creates the NCCL communicator)");
#else
        dist_abort(d, "gradient buckets on cuda: this build has no CUDA support");
#endif
    }
}

static void buckets_disarm(DistBuckets *gb) {
    if (gb->armed && gb->ps->ctx->tape.hook == &gb->hook) gb->ps->ctx->tape.hook = NULL;
    gb->armed = false;
}

void dist_buckets_arm(DistBuckets *gb) {
    if (gb->n == 0) return;
    Tape *tape = &gb->ps->ctx->tape;
    GDP_CHECK(!tape->hook || tape->hook == &gb->hook, "dist_buckets_arm: the tape already has another hook");
    tape->hook = &gb->hook;
    gb->armed = true;
}

void dist_buckets_sync(DistBuckets *gb) {
    Dist *d = gb->d;
    if (gb->n == 0) {
        buckets_disarm(gb);
        dist_sync_grads(d, gb->ps, gb->zero_stage);
        return;
    }
    buckets_disarm(gb);
    /* What backward did not start (all of it when no armed backward ran) starts now, in order. */
    while (gb->next < gb->n) buckets_launch(gb, gb->next++);
    gb->next = 0;
#ifdef GDP_CUDA
    if (use_nccl(d)) {
        nccl_finish(d, "gradient buckets");
        /* The optimizer (on the compute stream) reads the reduced gradients: order it after NCCL. */
        CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)ctx_stream(d->ctx), (cudaEvent_t)d->nccl_event, 0));
        return;
    }
#endif
    MPI_CHECK(d, MPI_Waitall(gb->n, (MPI_Request *)gb->reqs, MPI_STATUSES_IGNORE));
    float *buf = gb->ps->flat_grads;
    const float w = (float)d->world;
    for (int k = 0; k < gb->n; k++) {
        int64_t s = gb->b[k].start, e = gb->b[k].end;
        if (gb->zero_stage == 1) {
            int64_t cnt = gb->counts[(size_t)k * (size_t)d->world + (size_t)d->rank], start, end;
            dist_shard_range(gb->ps->total, d->rank, d->world, &start, &end);
            int64_t dst = GDP_MAX(s, start);
            if (cnt > 0 && dst > s) memmove(buf + dst, buf + s, (size_t)cnt * sizeof(float));
            s = dst, e = dst + cnt;
        }
        for (int64_t i = s; i < e; i++) buf[i] /= w;
    }
}

void dist_buckets_free(DistBuckets *gb) {
    if (!gb) return;
    if (gb->ps) buckets_disarm(gb);
    if (gb->comm && mpi_up()) MPI_Comm_free((MPI_Comm *)gb->comm);
    free(gb->comm);
    free(gb->reqs);
    free(gb->counts);
    free(gb->b);
    free(gb->ready_at);
    free(gb->launched_at);
    memset(gb, 0, sizeof *gb);
}
