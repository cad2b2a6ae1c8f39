/* One decode step for every row of a ModelState: a token per row through model_forward_state at
 * T = 1 (the training layer code, with the GDP op's per-token kernel), the logits back to the host
 * or left on the device for a sampler there.
 *
 * On CUDA the step is captured into a CUDA graph per set of rows (their number and the addresses
 * of their state) and replayed for later steps over the same rows: a step of a small model is
 * hundreds of short kernels whose launch costs a graph pays once. The first step over a set of
 * rows runs plain (it loads the kernels and lets cuBLAS choose its GEMMs outside a capture), the
 * second captures the graph and replays it, and the later ones replay it. Everything a step reads
 * or writes keeps its address between the capture and each replay:
 *   - the ids go to a device buffer of the graph's own (copied in before the replay, from pinned
 *     memory of its own, so that the copy does not wait for the stream);
 *   - the activations come from the acts and scratch arenas at the marks they had at the capture,
 *     and the logits are read from the acts arena at the capture's offset (after the replay);
 *     so nothing may stay live in those arenas above those marks between steps (decoding keeps
 *     nothing there: the model_prefill_* calls rewind after each chunk). A step that finds an arena
 *     used beyond its graph's mark captures that graph again;
 *   - parameters never move; the state rows are part of the key.
 * cuBLAS gets a workspace of the graph's own (cublasSetWorkspace) before every step, graph or
 * not, so that nothing is allocated during a capture and a replay runs the same GEMM kernels as
 * the plain forward: replayed logits equal the plain step's bit for bit
 * (tests/gpu/test_gpu_decode.c).
 *
 * The plain forward (model_prefill_host or _device with T = 1) runs instead on the CPU, with
 * graphs off, under op profiling or a GDP_DEBUG_SYNC build (both synchronise inside the forward),
 * and from the first capture that fails on (cudaStreamBeginCapture, EndCapture or
 * cudaGraphInstantiate returning an error). */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "layers/state.h"

typedef struct DecodeGraph {
    bool enabled;                   /* CUDA: capture and replay the step (decode_graph_init sets it true) */
    struct DecodeGraphCache *cache; /* CUDA: the graphs, their id buffers and the cuBLAS workspace */
} DecodeGraph;

/* What a DecodeGraph has done (for tests and reports). */
typedef struct DecodeGraphStats {
    int graphs;         /* graphs held now */
    int captures;       /* captures made (a capture done again after an arena moved counts again) */
    int64_t replays;    /* steps that ran as a replay */
    int64_t plain;      /* steps that ran the plain forward */
    bool capture_failed; /* a capture failed: every later step is plain */
} DecodeGraphStats;

/* Graphs on; on a CUDA model also the cuBLAS workspace. */
void decode_graph_init(DecodeGraph *g, const Model *m);
/* Frees the graphs and buffers and gives cuBLAS back its own workspace; waits for the stream. */
void decode_graph_free(DecodeGraph *g);
/* Every row of s consumes its token: ids host int32 [s->B], each in [0, vocab_size); logits host
 * float32 [s->B, cfg_out_dim] after it; s->pos advances by one. The context's recording must be
 * off or is turned off for the call. */
void decode_graph_step(DecodeGraph *g, Model *m, ModelState *s, const int32_t *ids, float *logits);
/* decode_graph_step with the logits left on the model's device: returns them, float32
 * [s->B, cfg_out_dim], in the acts arena above its mark, where the next forward writes: work that
 * reads or overwrites them must be enqueued on the context's stream before it. A replay returns
 * without waiting for the stream. */
float *decode_graph_step_device(DecodeGraph *g, Model *m, ModelState *s, const int32_t *ids);
DecodeGraphStats decode_graph_stats(const DecodeGraph *g);
