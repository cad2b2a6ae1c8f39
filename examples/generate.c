/* Continues a prompt with a trained model through the C API of build/libgdpmodel.so, as
 * `gdp generate --checkpoint CKPT --prompt TEXT --tokens N --temperature X --top-k K --top-p P --seed S`
 * does, and prints the same text: the prompt, then the continuation, then a newline.
 * Usage: generate CKPT PROMPT [TOKENS [TEMPERATURE [TOP_K [TOP_P [SEED]]]]] (defaults: 128 0.8 0 1 1);
 * GDP_DEVICE=cuda (or auto) in the environment runs it on the GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/gdp_model.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s CKPT PROMPT [TOKENS [TEMPERATURE [TOP_K [TOP_P [SEED]]]]]\n", argv[0]);
        return 2;
    }
    const long tokens = argc > 3 ? atol(argv[3]) : 128;
    GdpSampling s = gdp_sampling_default();
    if (argc > 4) s.temperature = atof(argv[4]);
    if (argc > 5) s.top_k = atoi(argv[5]);
    if (argc > 6) s.top_p = atof(argv[6]);
    if (argc > 7) s.seed = strtoull(argv[7], NULL, 10);

    GdpModel *m = NULL;
    GdpBatch *b = NULL;
    int32_t *ids = NULL;
    const size_t len = strlen(argv[2]);
    int64_t n = -1;
    if (gdp_model_load(argv[1], getenv("GDP_DEVICE"), NULL, &m) != 0 || gdp_batch_new(m, 1, &s, &b) != 0 ||
        (n = gdp_model_encode(m, argv[2], len, NULL, 0)) < 1 || !(ids = malloc((size_t)n * sizeof *ids)) ||
        gdp_model_encode(m, argv[2], len, ids, n) != n || gdp_batch_prefill(b, ids, &n) != 0) {
        fprintf(stderr, "generate: %s\n", n == 0 ? "the prompt encodes to no tokens" : gdp_model_last_error());
        gdp_batch_free(b), gdp_model_free(m), free(ids);
        return 1;
    }
    fwrite(argv[2], 1, len, stdout);
    for (long i = 0; i < tokens; i++) {
        int32_t next;
        gdp_batch_sample(b, &next);
        size_t nb = 0;
        const char *bytes = gdp_model_token_bytes(m, next, &nb);
        fwrite(bytes, 1, nb, stdout);
        fflush(stdout);
        if (i + 1 < tokens && gdp_batch_step(b, &next) < 0) break; /* the last token needs no step */
    }
    printf("\n");
    gdp_batch_free(b), gdp_model_free(m), free(ids);
    return 0;
}
