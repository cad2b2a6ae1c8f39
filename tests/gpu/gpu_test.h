/* A minimal test harness for GPU test programs (the GPU machine has no Check library).
 * GPU_TEST(name) { ... } declares a test; GPU_EXPECT(cond, fmt, ...) records a failure;
 * gpu_test_main() runs all tests and prints "N passed, N failed". */
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*GpuTestFn)(int *failures);
typedef struct GpuTest {
    const char *name;
    GpuTestFn fn;
} GpuTest;

#define GPU_MAX_TESTS 256
static GpuTest gpu_tests_[GPU_MAX_TESTS];
static int gpu_n_tests_;

#define GPU_TEST(name)                                                                   \
    static void name(int *failures);                                                     \
    __attribute__((constructor)) static void register_##name(void) {                     \
        if (gpu_n_tests_ < GPU_MAX_TESTS) gpu_tests_[gpu_n_tests_++] = (GpuTest){#name, name}; \
    }                                                                                    \
    static void name(int *failures)

#define GPU_EXPECT(cond, ...)                                                            \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            (*failures)++;                                                               \
            printf("  FAIL %s:%d: ", __FILE__, __LINE__);                                \
            printf(__VA_ARGS__);                                                         \
            printf("\n");                                                                \
        }                                                                                \
    } while (0)

/* Runs every test, or with names (argv[1..]) only those whose name contains one of them. */
static inline int gpu_test_run(int argc, char **argv) {
    int passed = 0, failed = 0;
    for (int i = 0; i < gpu_n_tests_; i++) {
        int want = argc <= 1;
        for (int a = 1; a < argc; a++) want |= strstr(gpu_tests_[i].name, argv[a]) != NULL;
        if (!want) continue;
        int f = 0;
        printf("-- %s\n", gpu_tests_[i].name);
        fflush(stdout);
        gpu_tests_[i].fn(&f);
        if (f) failed++; else passed++;
        printf("   %s\n", f ? "FAILED" : "ok");
        fflush(stdout);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

static inline int gpu_test_main(void) { return gpu_test_run(0, NULL); }
