/* Data-parallel plumbing: MPI for process setup, host collectives and scalars; NCCL for device
 * collectives on CUDA. One process per GPU, started by mpirun (or alone: an Open MPI singleton,
 * world 1, where every collective is a cheap no-op).
 *
 * Typical trainer use:
 *     Dist d; dist_init(&d, &argc, &argv);       // first thing in main, before any CUDA call
 *     Ctx *ctx = ctx_create(dev, sizes);           // dist_init already picked this rank's GPU
 *     dist_attach(&d, ctx);                        // NCCL communicator on CUDA when world > 1
 *     DistBuckets gb; dist_buckets_init(&gb, &d, &ps, zero_stage, bucket_mb);
 *     ... per step: micro-steps of forward + backward, dist_buckets_arm(&gb) before the last one's
 *                   backward (its buckets are reduced while it runs); dist_buckets_sync(&gb) (or,
 *                   without buckets, dist_sync_grads(&d, &ps, zero_stage)); optim_step(...);
 *                   dist_sync_params(&d, &ps, zero_stage);
 *     dist_finalize(&d);
 *
 * GPU choice: ctx_create uses CUDA device 0, so when several ranks share a host dist_init sets
 * CUDA_VISIBLE_DEVICES for each rank to one GPU (entry local_rank of the list the user gave, or
 * GPU local_rank when none was given) before CUDA starts. It also sets NCCL_NVLS_ENABLE=0 unless
 * the user set it (NVLink multicast stays off).
 *
 * Every collective is synchronous (except the gradient buckets, which dist_buckets_sync completes):
 * when it returns the result is in place and ctx's stream may use it. On CUDA the NCCL work runs on
 * the Dist's own stream, ordered after everything already queued on ctx's stream; while waiting
 * (and once when done), NCCL's asynchronous error state is polled, and an error or no progress for
 * timeout_s (env GDP_DIST_TIMEOUT_S, default 600) aborts every rank with a message naming this
 * rank, so a dead peer never hangs the job silently.
 *
 * Counts are always element counts (never bytes). */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "core/ctx.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct Dist {
    int rank, world;             /* in MPI_COMM_WORLD */
    int local_rank, local_world; /* among the ranks on this host (MPI_Comm_split_type shared) */
    Device device;               /* set by dist_attach; DEV_CPU before */
    Ctx *ctx;                    /* set by dist_attach */
    bool initialized;            /* dist_init ran */
    bool we_initialized_mpi;     /* MPI_Init was ours, so dist_finalize calls MPI_Finalize */
    double timeout_s;            /* collective watchdog (CUDA) */
    void *nccl_comm;             /* ncclComm_t, NULL on CPU or world 1 */
    void *nccl_stream;           /* cudaStream_t */
    void *nccl_event;            /* cudaEvent_t, for ordering the two streams */
    int64_t nccl_ops;            /* collectives (and gradient buckets) run through NCCL so far */
    /* For tests on a machine with one GPU; set before dist_attach. */
    bool force_nccl;             /* CUDA at world 1 too: a communicator of one rank, and every device
                                    collective, bucket and ZeRO-1 path runs through NCCL as on 2+ GPUs */
    int inject_nccl_error;       /* nonzero: every poll of NCCL's asynchronous error state reports this
                                    ncclResult_t, as after a peer failed (the watchdog's abort path) */
    double inject_stall_s;       /* > 0: each NCCL collective's stream first sleeps this long, as with a
                                    stuck peer (the watchdog's timeout path) */
} Dist;

/* MPI_Init (unless MPI is already up), rank/world/local rank, GPU choice and NCCL environment (see
 * above). Without mpirun this is a singleton with world 1. argc/argv may be NULL. */
void dist_init(Dist *d, int *argc, char ***argv);
/* A Dist for one process that never touches MPI (tests, tools): world 1, rank 0. */
void dist_init_single(Dist *d);
/* Binds the Dist to ctx: checks every rank chose the same kind of device (a clear error if not)
 * and, on CUDA with world > 1 (or force_nccl), creates the NCCL communicator (unique id from rank 0
 * via MPI_Bcast); a Dist attached before keeps its communicator (one per process and GPU). */
void dist_attach(Dist *d, Ctx *ctx);
/* Destroys NCCL state and, when dist_init started MPI, finalizes it. */
void dist_finalize(Dist *d);

/* Prints "gdp: error: rank R of W: <message>" and ends every rank (MPI_Abort, exit status 1). */
__attribute__((noreturn, format(printf, 2, 3))) void dist_abort(const Dist *d, const char *fmt, ...);
void dist_barrier(Dist *d);
static inline bool dist_is_root(const Dist *d) { return d->rank == 0; }

/* ---- element ranges for ZeRO-1 ------------------------------------------------------------------
 * The flat buffer of `total` elements is split into `world` contiguous shards of
 * chunk = round_up(ceil(total / world), 64) elements (the last ones may be shorter or empty):
 * rank r owns [r*chunk, min((r+1)*chunk, total)). Independent of tensor boundaries. */
void dist_shard_range(int64_t total, int rank, int world, int64_t *start, int64_t *end);

/* ---- collectives on buffers of ctx->device (float32, in place) ---------------------------------- */
/* buf[i] = mean over ranks of buf[i]. */
void dist_allreduce_mean_f32(Dist *d, float *buf, int64_t n);
/* buf[i] = sum over ranks of buf[i]. */
void dist_allreduce_sum_f32(Dist *d, float *buf, int64_t n);
/* buf has `total` elements on every rank; afterwards this rank's shard (dist_shard_range) holds the
 * mean over ranks; the rest of buf is undefined. */
void dist_reduce_scatter_mean_f32(Dist *d, float *buf, int64_t total);
/* Every rank's shard of buf is copied to every other rank: afterwards buf is complete everywhere. */
void dist_all_gather_f32(Dist *d, float *buf, int64_t total);

/* ---- host collectives (any build, any device) --------------------------------------------------- */
double dist_sum_double(Dist *d, double x);
double dist_mean_double(Dist *d, double x);
double dist_max_double(Dist *d, double x);
int64_t dist_sum_i64(Dist *d, int64_t x);
/* Host float buffers: rank r's `shard` holds its dist_shard_range(total) part; on rank 0, `full`
 * (total elements) receives every shard in place. `full` is ignored on other ranks. */
void dist_gather_to_root_f32(Dist *d, const float *shard, float *full, int64_t total);
/* Host bytes from rank 0 to everyone. */
void dist_broadcast_bytes(Dist *d, void *buf, int64_t bytes);

/* ---- parameter-store helpers for the trainer ---------------------------------------------------- */
struct ParamStore;
/* After backward: zero_stage 0 all-reduces (mean) the whole flat gradient; zero_stage 1
 * reduce-scatters it (mean), so this rank's shard holds the averaged gradient. No-op at world 1. */
void dist_sync_grads(Dist *d, struct ParamStore *ps, int zero_stage);
/* After the optimizer step: zero_stage 1 all-gathers the updated parameter shards. Stage 0: no-op
 * (every rank applied the same update). */
void dist_sync_params(Dist *d, struct ParamStore *ps, int zero_stage);

/* ---- gradient buckets overlapped with backward -----------------------------------------------------
 * The flat gradient is cut into buckets: contiguous element ranges made of whole layer groups (the
 * ParamInfo.bucket of params_begin_bucket: embeddings, each block, final norm + head), taken in
 * reverse layer order (the order backward finishes them) and merged until a bucket holds at least
 * `cap` elements (a group larger than cap is a bucket alone), as PyTorch DDP does with its 25 MiB.
 * During the last micro-step's backward a tape hook starts each bucket's reduction as soon as the
 * walk has passed the last tape node (the lowest index) that writes any gradient in it: an
 * MPI_Iallreduce (ZeRO-1: MPI_Ireduce_scatter) on the CPU, NCCL on the Dist's stream after an event
 * of the compute stream on CUDA. Buckets start in a fixed order (0, 1, ...) on every rank, so the
 * collectives match. dist_buckets_sync then waits for all of them (polling NCCL's asynchronous
 * error state on CUDA), averages (sum, then / world, as dist_sync_grads) and, on CUDA, makes the
 * compute stream wait for the NCCL stream: the result equals dist_sync_grads's. */
typedef struct GradBucket {
    int64_t start, end; /* elements of the flat gradient, [start, end) */
} GradBucket;

/* Pure: n_groups contiguous groups, group g = [group_start[g], group_start[g + 1]) and the last one
 * up to total (group_start increasing, group_start[0] = 0). Writes the buckets to out (room for
 * n_groups) in reverse layer order (out[0] holds the highest offsets) and returns their count.
 * cap <= 0: one bucket [0, total). */
int dist_plan_buckets(const int64_t *group_start, int n_groups, int64_t total, int64_t cap, GradBucket *out);

typedef struct DistBuckets {
    Dist *d;
    struct ParamStore *ps;
    int zero_stage;
    int n;               /* buckets; 0: off (world 1 or --bucket-mb 0): one reduction after backward */
    GradBucket *b;       /* in launch order */
    int *ready_at;       /* per bucket: lowest tape index writing into it (INT_MAX: none) */
    int *launched_at;    /* per bucket, for tests: the node index after which it started (tape n:
                            before the walk; -1: not during backward, in dist_buckets_sync) */
    int next;            /* next bucket to start */
    bool armed;          /* the hook is installed on ps->ctx's tape for the next backward */
    TapeHook hook;
    void *comm;          /* MPI_Comm * (a duplicate of MPI_COMM_WORLD), CPU */
    void *reqs;          /* MPI_Request[n], CPU */
    int *counts;         /* ZeRO-1, CPU: world counts per bucket for MPI_Ireduce_scatter */
} DistBuckets;

/* Plans the buckets of ps for cap = bucket_mb MiB of float32 (bucket_mb <= 0 or world 1: off).
 * Collective (call on every rank). */
void dist_buckets_init(DistBuckets *gb, Dist *d, struct ParamStore *ps, int zero_stage, double bucket_mb);
/* Installs the hook for the next backward on ps->ctx (the one whose gradients are final: the last
 * micro-step's). No-op when off. */
void dist_buckets_arm(DistBuckets *gb);
/* Replaces dist_sync_grads: starts the buckets backward did not (all of them when no armed backward
 * ran), waits for every bucket, averages, removes the hook. When off: dist_sync_grads. */
void dist_buckets_sync(DistBuckets *gb);
void dist_buckets_free(DistBuckets *gb);

#ifdef __cplusplus
}
#endif
