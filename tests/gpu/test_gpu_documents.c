/* Training over document boundaries on CUDA (tests/support/documents_case.h): a batch of packed
 * documents through the training library's batch loss (varlen GDP op, conv kernels with document
 * starts) against every document run alone on the CPU in float64, both modes, the prediction across a
 * boundary counted or not:
 *   - f32 (autocast off): the loss within 1e-5 relative, every gradient within 1e-4 of the largest;
 *   - bf16 autocast with bf16 activations: the loss within 2e-2 relative, and the gradients no further
 *     from the float64 ones than 0.1 of the largest or, where bf16 alone errs more (this model's
 *     large initial weights make its gradients sensitive: split mode's err by ~0.2), than twice as
 *     far as the same documents run alone in bf16 on CUDA. The f32 check is what shows that no state
 *     or conv window crosses a boundary; this one that the bf16 kernels take the boundaries too, as a
 *     crossing would move a document's gradients by far more than bf16's rounding does.
 * `test_gpu_documents NAME...` runs only the tests whose name contains one of the NAMEs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/gpu/gpu_test.h"
#include "tests/support/documents_case.h"

#define MAX_GRADS (1 << 20)

/* docs_case_packed on CUDA, bf16 with the trainer's autocast flags on the context */
static double packed_cuda(const DocsCase *c, bool bf16, bool loss_across, double *g, int64_t *n) {
    return docs_case_packed(c, DEV_CUDA, GDP_F32, bf16, loss_across, g, n);
}

static void check(int *failures, bool bf16) {
    double *g = (double *)xmalloc(sizeof(double) * MAX_GRADS), *ref = (double *)xmalloc(sizeof(double) * MAX_GRADS);
    for (int mode = 0; mode < 2; mode++)
        for (int across = 1; across >= 0; across--) {
            DocsCase c;
            docs_case_make(&c, (GdpMode)mode);
            int64_t n = 0, nr = 0;
            const double lr = docs_case_alone(&c, DEV_CPU, GDP_F64, false, across, ref, &nr);
            const double l = packed_cuda(&c, bf16, across, g, &n);
            const double el = fabs(l - lr) / fabs(lr), eg = docs_case_rel_err(g, ref, nr);
            const char *what = mode ? "split" : "householder";
            printf("  %s %s, loss across %s: loss %.8f (cpu alone %.8f, rel %.2e), gradients max rel err %.2e\n",
                   bf16 ? "bf16" : "f32", what, across ? "on" : "off", l, lr, el, eg);
            GPU_EXPECT(n == nr, "%s: %lld gradient entries on cuda, %lld on the cpu", what, (long long)n, (long long)nr);
            GPU_EXPECT(el <= (bf16 ? 2e-2 : 1e-5), "%s loss across %d: loss rel err %.3e", what, across, el);
            double bound = 1e-4;
            if (bf16) {
                int64_t na = 0;
                docs_case_alone(&c, DEV_CUDA, GDP_F32, true, across, g, &na);
                const double ea = docs_case_rel_err(g, ref, nr);
                printf("    the documents alone in bf16 on cuda: gradients max rel err %.2e\n", ea);
                bound = fmax(0.1, 2 * ea);
            }
            GPU_EXPECT(eg <= bound, "%s loss across %d: gradient rel err %.3e > %.3e", what, across, eg, bound);
        }
    free(g), free(ref);
}

GPU_TEST(documents_f32_match_cpu_alone) { check(failures, false); }

GPU_TEST(documents_bf16_match_cpu_alone) { check(failures, true); }

int main(int argc, char **argv) { return gpu_test_run(argc, argv); }
