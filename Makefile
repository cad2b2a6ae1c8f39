# gdp.c build. `make` builds build/gdp (and the CUDA kernels when nvcc is found);
# `make test` runs every CPU test; `make test-gpu` the CUDA-vs-CPU tests (GPU machine);
# `make test-asan` the CPU tests under AddressSanitizer + UBSan; `make test-dist` the 2-rank MPI tests.
# Variables: BUILD=dir (default build), NO_CUDA=1 (CPU-only build), GPU_ARCH (below), DEBUG=1,
# ARCH=flags (default -march=native: the CPU GEMM's micro-kernel runs 2x faster with AVX; ARCH= for a
# binary that runs on any x86-64).

BUILD    ?= build
# GPU_ARCH: 80, 86, 89 or 90 (one architecture's code), all (each of them and PTX for later GPUs), or
# compute_80 (Ampere PTX only, which the driver compiles at load: the Ampere kernels on any newer card).
# Default: the architecture of the first GPU nvidia-smi lists, else 90.
GPU_ARCH ?= $(or $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .),90)
CC       ?= gcc
CUDA_HOME ?= $(or $(patsubst %/bin/nvcc,%,$(shell command -v nvcc 2>/dev/null)),/usr/local/cuda)
NVCC     := $(shell command -v nvcc 2>/dev/null || (test -x $(CUDA_HOME)/bin/nvcc && echo $(CUDA_HOME)/bin/nvcc))

ifeq ($(NO_CUDA),1)
NVCC :=
endif

OPT      := $(if $(DEBUG),-O0 -g3,-O2 -g)
ARCH     ?= -march=native
CSTD     := -std=c11 -D_GNU_SOURCE
WARN     := -Wall -Wextra -Wno-unused-parameter
INC      := -I.
HDF5_CFLAGS := $(shell pkg-config --cflags hdf5 2>/dev/null)
HDF5_LIBS   := $(shell pkg-config --libs hdf5 2>/dev/null)
MPI_CFLAGS  := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIBS    := $(shell mpicc --showme:link 2>/dev/null)
CHECK_CFLAGS := $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS   := $(shell pkg-config --libs check 2>/dev/null)

CFLAGS   += $(CSTD) $(OPT) $(ARCH) $(WARN) $(INC) -fopenmp -MMD -MP $(HDF5_CFLAGS) $(MPI_CFLAGS) $(EXTRA_CFLAGS)
LDLIBS   := $(HDF5_LIBS) $(MPI_LIBS) -fopenmp -lz -lm -lpthread

ifneq ($(NVCC),)
CFLAGS   += -DGDP_CUDA -I$(CUDA_HOME)/include
# 90 builds sm_90a, whose wgmma the Hopper state pass uses (an sm_90 cubin beside it would leave the
# pick to the driver); its compute_90 PTX serves later GPUs, where the planner never takes wgmma.
gencode_of = $(if $(filter 90,$(1)),-gencode=arch=compute_90a$(comma)code=sm_90a,-gencode=arch=compute_$(1)$(comma)code=sm_$(1))
comma := ,
GPU_ARCH_N := $(patsubst sm_%,%,$(GPU_ARCH))
ifeq ($(GPU_ARCH_N),all)
GENCODE  := $(foreach a,80 86 89 90,$(call gencode_of,$(a))) -gencode=arch=compute_90,code=compute_90
else ifeq ($(GPU_ARCH_N),compute_80)
GENCODE  := -gencode=arch=compute_80,code=compute_80
else ifneq ($(filter 80 86 89 90,$(GPU_ARCH_N)),)
GENCODE  := $(call gencode_of,$(GPU_ARCH_N)) -gencode=arch=compute_$(GPU_ARCH_N),code=compute_$(GPU_ARCH_N)
else
$(error GPU_ARCH=$(GPU_ARCH): use 80, 86, 89, 90, all or compute_80)
endif
NVCCFLAGS = -std=c++17 -O3 -lineinfo -DGDP_CUDA -I. $(HDF5_CFLAGS) $(MPI_CFLAGS) $(GENCODE) \
             -Xcompiler -Wall,-Wextra,-Wno-unused-parameter,-fPIC -MMD -MP $(EXTRA_NVCCFLAGS)
LDLIBS   += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublas -lcublasLt -lnccl -lstdc++
CU_SRC   := $(wildcard base/*.cu kernels/*.cu kernels/gdp/*.cu layers/*.cu core/*.cu)
else
CU_SRC   :=
endif

# Library sources: everything except the program's main and the tests.
C_SRC    := $(wildcard base/*.c core/*.c core/ops/*.c kernels/*.c kernels/gdp/*.c layers/*.c data/*.c train/*.c \
                      tools/*.c train/cli/*.c api/*.c)
C_SRC    := $(filter-out train/cli/main.c,$(C_SRC))
ifeq ($(NVCC),)
C_SRC    := $(filter-out core/cuda_ctx.c,$(C_SRC))
endif
# The op registry (core/tape.h: gdp_op_registry) is generated: every `const OpDef op_NAME_def = `
# definition in the node files, in file order, then the pointwise list's; adding an op adds no line.
OP_NODE_SRC := $(sort $(wildcard core/ops/*.c)) core/tape.c
OP_REGISTRY := $(BUILD)/gen/op_registry.c
C_SRC    += $(OP_REGISTRY)
OBJ      := $(C_SRC:%.c=$(BUILD)/obj/%.o) $(CU_SRC:%.cu=$(BUILD)/obj/%.cu.o)

TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
GPU_TEST_SRC := $(wildcard tests/gpu/test_*.c)
GPU_TEST_BIN := $(GPU_TEST_SRC:tests/gpu/%.c=$(BUILD)/tests/gpu/%)

# build/libgdp.so: the Gated DeltaProduct op alone (kernels/gdp/gdp.h), for other programs.
GDP_LIB_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard kernels/gdp/*.c) base/common.c)
ifneq ($(NVCC),)
GDP_LIB_OBJ += $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(wildcard kernels/gdp/*.cu))
endif

.PHONY: all test test-gpu test-asan test-dist test-all clean
all: $(BUILD)/gdp $(BUILD)/libgdp.so $(BUILD)/libgdpmodel.so $(BUILD)/examples/generate $(BUILD)/lookahead_bf16

$(BUILD)/libgdp.so: $(GDP_LIB_OBJ)
	$(CC) -shared -o $@ $^ $(LDFLAGS) $(LDLIBS)

# build/libgdpmodel.so: the model-level API (api/gdp_model.h) over the library (the program's
# subcommands left out); the version script exports its gdp_model_* / gdp_batch_* / gdp_sampling_*
# calls alone, so that the library's internal names cannot clash with a program's, and
# --no-undefined makes a missing object a link error rather than a failure to load.
MODEL_LIB_OBJ := $(filter-out $(BUILD)/obj/train/cli/%,$(OBJ))
$(BUILD)/libgdpmodel.so: $(MODEL_LIB_OBJ) api/gdp_model.map
	$(CC) -shared -o $@ $(MODEL_LIB_OBJ) -Wl,--version-script=api/gdp_model.map -Wl,--no-undefined $(LDFLAGS) $(LDLIBS)

# examples/: programs on the public APIs, linked as a user would (the header and the shared library);
# the rpath finds the library beside the examples folder.
$(BUILD)/examples/%: examples/%.c api/gdp_model.h $(BUILD)/libgdpmodel.so
	@mkdir -p $(@D)
	$(CC) $(CSTD) $(OPT) $(WARN) $(INC) $(EXTRA_CFLAGS) $(LDFLAGS) -o $@ $< -L$(BUILD) -lgdpmodel -Wl,-rpath,'$$ORIGIN/..'

$(BUILD)/libgdpcore.a: $(OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/gdp: $(BUILD)/obj/train/cli/main.o $(BUILD)/libgdpcore.a
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# bench/lookahead_bf16.c: a numerics experiment on the CPU (its header says what it prints)
$(BUILD)/lookahead_bf16: bench/lookahead_bf16.c $(BUILD)/libgdpcore.a
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libgdpcore.a $(LDLIBS)

$(OP_REGISTRY): $(OP_NODE_SRC) Makefile
	@mkdir -p $(@D)
	@{ echo '/* Generated by the Makefile from the node files: every op gdp.c knows. */'; \
	   echo '#include "core/ops.h"'; echo '#include "core/tape.h"'; \
	   sed -n 's/^const OpDef \(op_[a-z0-9_]*_def\) = .*/extern const OpDef \1;/p' $(OP_NODE_SRC); \
	   echo '#define PW_EXTERN(E, name, lo, hi) extern const OpDef op_##name##_def;'; \
	   echo 'GDP_POINTWISE_OPS(PW_EXTERN)'; \
	   echo 'const OpDef *const gdp_op_registry[] = {'; \
	   sed -n 's/^const OpDef \(op_[a-z0-9_]*_def\) = .*/    \&\1,/p' $(OP_NODE_SRC); \
	   echo '#define PW_ENTRY(E, name, lo, hi) &op_##name##_def,'; \
	   echo '    GDP_POINTWISE_OPS(PW_ENTRY)'; \
	   echo '};'; \
	   echo 'const int gdp_op_registry_len = (int)(sizeof(gdp_op_registry) / sizeof(gdp_op_registry[0]));'; \
	 } > $@.tmp && mv $@.tmp $@

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fPIC -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@


$(BUILD)/tests/%: tests/%.c $(BUILD)/libgdpcore.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(CHECK_CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libgdpcore.a $(CHECK_LIBS) $(LDLIBS)

$(BUILD)/tests/gpu/%: tests/gpu/%.c $(BUILD)/libgdpcore.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libgdpcore.a $(LDLIBS)

# The op's float64 reference vectors; a test run without them is a build error, not a failed test
# (scripts/make_vectors.py writes them).
VECTORS  := tests/data/gdp_vectors.h5

# Every CPU test binary runs; the shell tests in tests/cli drive build/gdp as a user would.
test: $(VECTORS) $(BUILD)/gdp $(BUILD)/libgdpmodel.so $(BUILD)/examples/generate $(TEST_BIN)
	@BUILD=$(BUILD) sh tests/run_all.sh $(TEST_BIN)

# Without CUDA the GPU test programs cannot be built: tests/run_gpu.sh then says the tests are skipped.
test-gpu: $(VECTORS) $(BUILD)/gdp $(if $(NVCC),$(GPU_TEST_BIN))
	@BUILD=$(BUILD) sh tests/run_gpu.sh $(if $(NVCC),$(GPU_TEST_BIN))

# Sanitized code runs several times slower (forks of a sanitized process most of all): Check's
# per-test timeouts get 4x.
test-asan:
	+CK_TIMEOUT_MULTIPLIER=4 $(MAKE) BUILD=build-asan NO_CUDA=1 EXTRA_CFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	    LDFLAGS="-fsanitize=address,undefined" test

test-dist: $(BUILD)/gdp $(BUILD)/tests/test_dist_mpi
	+@BUILD=$(BUILD) MAKE="$(MAKE)" sh tests/run_dist.sh

# Everything CI runs: the CPU tests, the same tests under ASan+UBSan, and the 2-rank MPI tests.
test-all: test test-dist
	+$(MAKE) test-asan

clean:
	rm -rf $(BUILD) build-asan

-include $(OBJ:.o=.d) $(BUILD)/obj/train/cli/main.d $(TEST_BIN:=.d) $(GPU_TEST_BIN:=.d) $(BUILD)/lookahead_bf16.d
