/* The kernel plan of the CUDA op: which kernel runs each pass, with which tiles, and why.
 *
 * gdp_plan_kernels is plain C and needs no GPU: it takes what the device offers (GdpDeviceCaps:
 * the architecture the loaded code was built for, multiprocessors, shared memory), the call's
 * shape and the tuning (GdpTuning), and fills a GdpKernelPlan. The CUDA launch code executes a
 * plan and decides nothing itself, so `gdp bench op --plan --arch 80` shows on any machine what an
 * A100 would run. docs/gdp-kernels.md explains the passes and the rules. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "kernels/gdp/gdp.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum GdpKernelId {
    GDP_KERNEL_NONE = 0,
    GDP_KERNEL_PREP,        /* generic prep, A, P and T in separate fp32 tiles (the smallest shared memory) */
    GDP_KERNEL_PREP2,       /* generic prep */
    GDP_KERNEL_PREP2_FAST,  /* bf16 prep, K 64, 128 or 256 compiled in */
    GDP_KERNEL_STATE,       /* generic state pass */
    GDP_KERNEL_STATE_FAST,  /* bf16 state pass on cp.async, optionally making the output */
    GDP_KERNEL_STATE_TMA,   /* the same on tensor copies (sm_90) */
    GDP_KERNEL_STATE_WG,    /* the same by V rows on wgmma (sm_90a) */
    GDP_KERNEL_OUTPUT,      /* generic output */
    GDP_KERNEL_OUTPUT_FAST, /* bf16 output */
    GDP_KERNEL_DH,          /* generic dh pass */
    GDP_KERNEL_DH_FAST,     /* bf16 dh pass on cp.async */
    GDP_KERNEL_DH_TMA,      /* the same on tensor copies (sm_90) */
    GDP_KERNEL_BWD_A,       /* generic bwd_a, a CTA per (chunk, K tile) */
    GDP_KERNEL_BWD_A_FAST,  /* bf16 bwd_a, a CTA per (K tile, chunk) */
    GDP_KERNEL_BWD_A_KRES,  /* bf16 bwd_a over the whole K of 128 */
    GDP_KERNEL_BWD_B,       /* generic WY backward */
    GDP_KERNEL_BWD_B_HH,    /* WY backward with double-buffered raw tiles (householder; split with n*n <= 64) */
    GDP_KERNEL_BWD_B_FAST,  /* bf16 WY backward */
    GDP_KERNEL_BWD_AB,      /* bwd_a (whole K) and the bf16 WY backward in one CTA */
    GDP_KERNEL_COUNT
} GdpKernelId;

/* the kinds of the fast WY backward (GdpStep.variant of BWD_B_FAST and BWD_AB): householder mode;
 * split mode summing a token's rows through fp32 tiles (any n <= 8); split mode with n = 2 or 4
 * summing them across lanes (GDP_BWDB_SPLIT_LANES + n) */
enum { GDP_BWDB_HOUSEHOLDER = 0, GDP_BWDB_SPLIT_TILES = 1, GDP_BWDB_SPLIT_LANES = 16 };

typedef struct GdpStep {
    GdpKernelId kernel;
    int kp;       /* K width compiled into a fast kernel (64, 128, 256), else 0 */
    int bv;       /* V tile of a sequential pass */
    int nst;      /* pipeline stages of a sequential pass */
    int ctp;      /* token rows of a chunk (16, 32, 64) */
    int ctpo;     /* state pass: the output's token rows it makes, 0 when it makes none */
    int variant;  /* PREP2_FAST: split mode's keys as loaded; BWD_B_HH: split mode; BWD_B_FAST, BWD_AB: kind */
    int grid[3];  /* CTAs (chunk grids before the split into launches of at most grid_y_max chunks) */
    size_t smem;  /* dynamic shared memory, bytes */
    char why[200];
} GdpStep;

typedef struct GdpKernelPlan {
    /* the forward: prep, the state pass, the output (NONE where the state pass makes it) */
    GdpStep prep, state, output;
    /* the backward without a saved forward runs prep and state_recompute first (h, Delta) */
    GdpStep state_recompute;
    /* then dh, bwd_a and bwd_b (bwd_a is BWD_AB and bwd_b NONE where they run in one CTA) */
    GdpStep dh, bwd_a, bwd_b;
    bool dmask;   /* split mode: the fixed-order sum of the per-chunk mask gradients */
    bool seq_hs;  /* sequential passes' grid (sequences x heads, V tiles): more sequences than a grid's z holds */
    /* The forward can run where the backward cannot (f32 on an A100: inference fits, training does
     * not): then the backward passes are unplanned and this says why; gdp_backward_cuda refuses with it. */
    bool backward_refused;
    char backward_why[256];
} GdpKernelPlan;

/* What the device offers the op. arch is the compute capability the loaded kernels were compiled
 * for (80, 86, 89, 90), which a PTX build can hold below the card's own. */
typedef struct GdpDeviceCaps {
    int arch;
    bool wgmma;       /* the sm_90a kernels run (a Hopper card and its own code, not JIT-compiled PTX) */
    int sm_count;
    int smem_block;   /* shared memory a block may opt in to */
    int smem_sm;      /* shared memory of a multiprocessor */
    int regs_state;   /* registers of the generic state and dh kernels (0: 128 assumed) */
    int regs_dh;
} GdpDeviceCaps;

/* The knobs of the plan; gdp_tuning_default gives today's fastest choices. */
enum { GDP_GENERIC_PREP = 1, GDP_GENERIC_SEQ = 2, GDP_GENERIC_OUTPUT = 4, GDP_GENERIC_BWD = 8, GDP_GENERIC_ALL = 15 };
typedef struct GdpTuning {
    unsigned generic; /* 0: bf16 passes named here run the generic kernels (the f32 path's), for comparison */
    int seq_tma;      /* -1: tensor copies in the saving forward's state pass and the dh pass; 0 never; 1 wherever they apply */
    bool state_wgmma; /* true: the wgmma state pass wherever it applies (every state pass of the shape) */
    int bv_state;     /* 0: the state pass's V tile is picked; 32, 64 or 128 force it (the generic pass where no fast kernel of that width fits) */
    int bv_dh;        /* 0: likewise for the dh pass */
    int bwd_a_whole_k;/* -1: whole-K bwd_a at K 128 with at most 32 chunk tokens; 0 never; 1 wherever the shape allows */
    bool bwd_fuse;    /* true: bwd_a and bwd_b in one CTA where both fit */
    bool bwd_b_split_lanes; /* true: split mode at n 2 and 4 sums a token's rows across lanes (else fp32 tiles) */
    int grid_y_max;   /* 65535: chunks a launch, and sequences before the sequential grid changes form */
    bool profile;     /* false: true times every launch (synchronously) and prints it to stderr */
} GdpTuning;

GdpTuning gdp_tuning_default(void);
/* The tuning every later call uses (process-wide; tests and benchmarks set it, nothing else must). */
void gdp_set_tuning(const GdpTuning *t);
GdpTuning gdp_get_tuning(void);

/* The caps of a typical card of compute capability arch (80 A100, 86 RTX 3090, 89 RTX 4090, 90 H100);
 * GDP_ERR_INVALID for another arch. */
GdpStatus gdp_device_caps_of_arch(int arch, GdpDeviceCaps *caps);

/* The plan of a call. saved: the forward keeps its intermediates and the backward reads them.
 * aligned16: every input and output row may be moved 16 bytes at a time (K and V multiples of 8 and
 * 16-byte aligned tensors). GDP_ERR_UNSUPPORTED (with gdp_last_error) when no kernel fits. */
GdpStatus gdp_plan_kernels(const GdpDesc *desc, const GdpDeviceCaps *caps, const GdpTuning *tuning, bool saved,
                           bool aligned16, GdpKernelPlan *plan);

/* CUDA builds: the plan on the current device (its caps filled in), for 16-byte aligned tensors. */
GdpStatus gdp_plan_device(const GdpDesc *desc, bool saved, GdpDeviceCaps *caps, GdpKernelPlan *plan);

const char *gdp_kernel_name(GdpKernelId k);
/* The plan as text, one line a step. */
void gdp_plan_print(const GdpKernelPlan *plan, const GdpDesc *desc, const GdpDeviceCaps *caps, bool saved, FILE *out);

#ifdef __cplusplus
}
#endif
