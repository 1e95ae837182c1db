# weft: the two entry points are `make demo` and `make test`; both install
# missing Debian packages, configure and build first.
BUILD      ?= build
BUILD_ASAN ?= build-asan
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=

.PHONY: all deps test-deps configure build demo test test-asan e2e cluster-up cluster-down bench format clean

all: build

deps:
	@scripts/install-deps.sh build

test-deps:
	@scripts/install-deps.sh test kube

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_ARGS)

configure: deps $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	$(BUILD)/bin/weft-run -n 2 configs/demo.yaml --out runs/demo --no-resume

test: test-deps configure
	cmake --build $(BUILD) -j $(JOBS)
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

# The local cluster (tests/kube/cluster.sh): control plane, weft-node,
# weft-operator; `make e2e` runs the end-to-end tests on a fresh one.
CLUSTER ?= $(BUILD)/cluster
CLUSTER_TARGETS = weft-node weft-operator weft-worker

cluster-up: test-deps configure
	cmake --build $(BUILD) -j $(JOBS) --target $(CLUSTER_TARGETS)
	@tests/kube/cluster.sh up $(CLUSTER) $(BUILD)

cluster-down:
	@tests/kube/cluster.sh down $(CLUSTER) $(BUILD)

e2e: test-deps configure
	cmake --build $(BUILD) -j $(JOBS) --target $(CLUSTER_TARGETS)
	cd $(BUILD) && ctest --output-on-failure -L '^e2e$$' --timeout 900

test-asan: test-deps
	cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DWEFT_SANITIZE=ON -DWEFT_CUDA=OFF $(CMAKE_ARGS)
	cmake --build $(BUILD_ASAN) -j $(JOBS) --target weft_kernels_tests weft_data_tests
	cd $(BUILD_ASAN) && ctest --output-on-failure -L '^(kernels|data)$$'

bench: build
	/usr/bin/python3 tests/bench/train_throughput.py $(BUILD)
	/usr/bin/python3 tests/bench/dp_step_time.py $(BUILD)
	tests/bench/operator_bench.sh $(BUILD)

format:
	find contract worker operator tests -name '*.h' -o -name '*.cc' -o -name '*.cu' | xargs clang-format -i

clean:
	rm -rf $(BUILD) $(BUILD_ASAN)
