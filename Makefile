# weft: the two entry points are `make demo` and `make test`; both install
# missing Debian packages, configure and build first.
BUILD      ?= build
BUILD_ASAN ?= build-asan
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=
# CUDA architectures (when nvcc exists): what `make build`, `make demo` and
# the images ship; test builds compile one, which proves the CUDA sources
# compile at half the nvcc time. A tree is reconfigured when the wanted set
# changes (ccache keeps both sets' objects).
CUDA_ARCHS      ?= 80;90
TEST_CUDA_ARCHS ?= 90

.PHONY: all deps test-deps configure build programs images image-operator image-worker-cpu image-worker-cuda demo test test-build test-images test-asan e2e cluster-up cluster-down bench format clean

all: build

deps:
	@scripts/install-deps.sh build

test-deps:
	@scripts/install-deps.sh test kube images
	@scripts/python-env.sh

# The test paths build against the pinned Python environment and the CUDA
# toolkit from its wheels (scripts/python-env.sh): the CUDA sources must
# compile there. `make demo` and `make build` compile them only where a
# toolkit already is (WEFT_CUDA_ROOT, /usr/local/cuda, nvcc on PATH or that
# venv) and build CPU-only otherwise, saying so. A tree is reconfigured when
# its arguments change.
WITH_PYENV ?= 0
configure: deps
	@args="-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=$(CUDA_ARCHS) $(CMAKE_ARGS)"; \
	if [ "$(WITH_PYENV)" = 1 ]; then \
	  py=$$(scripts/python-env.sh --python) && cuda=$$(scripts/python-env.sh --cuda-root) || exit 1; \
	  args="$$args -DWEFT_PYTHON=$$py -DWEFT_CUDA_ROOT=$$cuda -DWEFT_CUDA_REQUIRED=ON"; \
	fi; \
	if [ ! -f $(BUILD)/CMakeCache.txt ] || [ "$$(cat $(BUILD)/.configure-args 2>/dev/null)" != "$$args" ]; then \
	  echo cmake -S . -B $(BUILD) $$args; \
	  cmake -S . -B $(BUILD) $$args && echo "$$args" > $(BUILD)/.configure-args; \
	fi

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The shipped programs only (what the Dockerfile's build stage runs).
PROGRAMS ?= weft-worker weft-run weft-operator
programs: configure
	cmake --build $(BUILD) -j $(JOBS) --target $(PROGRAMS)

# Container images from the Dockerfile (docker, podman or buildah; set
# IMAGE_BUILD to choose). REGISTRY/weft-operator:VERSION,
# REGISTRY/weft-worker:VERSION-cpu (Debian) and REGISTRY/weft-worker:VERSION
# (CUDA runtime); IMAGES picks a subset. Push with `docker push` (see README).
VERSION     ?= 0.1.0
REGISTRY    ?= ghcr.io/weft-dev
IMAGES      ?= operator worker-cpu worker-cuda
IMAGE_BUILD ?= $(shell if command -v docker >/dev/null; then echo docker build; \
                 elif command -v podman >/dev/null; then echo podman build; else echo buildah build; fi)
IMAGE_ARGS  ?=
CUDA_IMAGE  ?= 12.6.3
REVISION    := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
IMAGE_COMMON = $(IMAGE_BUILD) $(IMAGE_ARGS) --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION)

images: $(addprefix image-,$(IMAGES))
image-operator:
	$(IMAGE_COMMON) --target operator -t $(REGISTRY)/weft-operator:$(VERSION) .
image-worker-cpu:
	$(IMAGE_COMMON) --target worker --build-arg WORKER_BASE=debian:bookworm-slim \
	  -t $(REGISTRY)/weft-worker:$(VERSION)-cpu .
image-worker-cuda:
	$(IMAGE_COMMON) --target worker --build-arg WEFT_CUDA=ON \
	  --build-arg BUILD_BASE=nvidia/cuda:$(CUDA_IMAGE)-cudnn-devel-ubuntu24.04 \
	  --build-arg WORKER_BASE=nvidia/cuda:$(CUDA_IMAGE)-cudnn-runtime-ubuntu24.04 \
	  -t $(REGISTRY)/weft-worker:$(VERSION) .

# Only the two programs the demo runs: a first `make demo` trains minutes
# sooner than one that builds every test too.
demo: configure
	cmake --build $(BUILD) -j $(JOBS) --target weft-worker weft-run
	$(BUILD)/bin/weft-run -n 2 configs/demo.yaml --out runs/demo --no-resume

test test-build test-images e2e cluster-up: CUDA_ARCHS = $(TEST_CUDA_ARCHS)
test test-build test-images e2e cluster-up: WITH_PYENV = 1
# Everything the tests run (CI times it apart from the tests themselves).
test-build: test-deps configure
	cmake --build $(BUILD) -j $(JOBS)

# The venv's bin first on PATH: `python3` in the test scripts is the pinned one.
VENV_BIN = $(or $(WEFT_VENV),$(HOME)/.cache/weft/venv)/bin
test: test-build
	cd $(BUILD) && PATH=$(VENV_BIN):$$PATH ctest --output-on-failure -j $(JOBS) --timeout 900

# The container image test alone (tests/images: buildah builds the Dockerfile
# and runs the images).
test-images: test-deps configure
	cd $(BUILD) && PATH=$(VENV_BIN):$$PATH ctest --output-on-failure -L '^images$$'

# The local cluster (localcluster/cluster.sh): control plane, real nodes
# (kubelet, containerd, runc, CNI, CoreDNS, kube-proxy) running the images
# built from the Dockerfile (the image test writes them to $(BUILD)/images),
# weft-operator installed with helm from charts/weft; `make e2e` runs the
# end-to-end tests on fresh ones. WEFT_CLUSTER_RUNTIME=weft-node: simulated
# nodes running build/bin's programs as processes instead. WEFT_CLUSTER_KUEUE=1:
# Kueue's manager too, as a process (localcluster/kueue.sh);
# WEFT_CLUSTER_COSCHEDULING=1: scheduler-plugins' scheduler with Coscheduling
# (PodGroup gang scheduling), as a process (localcluster/coscheduling.sh).
CLUSTER ?= $(BUILD)/cluster
CLUSTER_TARGETS = weft-node weft-operator weft-worker

cluster-up: test-deps configure
	cmake --build $(BUILD) -j $(JOBS) --target $(CLUSTER_TARGETS)
	@if [ "$${WEFT_CLUSTER_RUNTIME:-containerd}" = containerd ]; then \
	  cd $(BUILD) && PATH=$(VENV_BIN):$$PATH ctest --output-on-failure -R '^images_build_and_run$$' \
	    || { echo "cluster-up: building the images failed: make test-images"; exit 1; }; \
	fi
	@localcluster/cluster.sh up $(CLUSTER) $(BUILD)

cluster-down:
	@localcluster/cluster.sh down $(CLUSTER) $(BUILD)

e2e: test-deps configure
	cmake --build $(BUILD) -j $(JOBS) --target $(CLUSTER_TARGETS)
	cd $(BUILD) && PATH=$(VENV_BIN):$$PATH ctest --output-on-failure -L '^e2e$$' --timeout 900

test-asan: test-deps
	cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DWEFT_SANITIZE=ON -DWEFT_CUDA=OFF $(CMAKE_ARGS)
	cmake --build $(BUILD_ASAN) -j $(JOBS) --target weft_kernels_tests weft_data_tests
	cd $(BUILD_ASAN) && ctest --output-on-failure -L '^(kernels|data)$$'

bench: WITH_PYENV = 1
bench: build
	$(VENV_BIN)/python tests/bench/train_throughput.py $(BUILD)
	$(VENV_BIN)/python tests/bench/dp_step_time.py $(BUILD)
	$(VENV_BIN)/python tests/bench/gemm_floor.py
	tests/bench/operator_bench.sh $(BUILD)
	tests/bench/cluster_scale.sh $(BUILD)

format:
	find contract serving clients worker operator tests -name '*.h' -o -name '*.cc' -o -name '*.cu' | xargs clang-format -i

clean:
	rm -rf $(BUILD) $(BUILD_ASAN)
