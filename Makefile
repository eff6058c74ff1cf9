# gatedgpt: thin wrapper around CMake (the real build is CMakeLists.txt).
#   make          build into build/
#   make test     install dependencies, build, run every test (ctest; the GPU tests skip without a GPU)
#   make test-gpu build, run the GPU tests only (ctest -L gpu: CUDA ops vs CPU ops, goldens, training)
#   make demo     install dependencies, build, prepare the built-in corpus, train a tiny gated model
#   make golden   regenerate tests/golden/*.bin with the PyTorch reference (needs python3-torch)
#   make bench    the training-step benchmark vs PyTorch (bench/README.md); bench_gemm: GEMM libraries
#   make mutants  deliberate bugs (tests/mutants.ini) against the tests: a table of what caught each (~10 min)
BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all build deps test test-gpu demo golden bench mutants clean

all: build

deps:
	@bash scripts/deps.sh

$(BUILD)/CMakeCache.txt:
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) > $(BUILD).configure.log 2>&1 || (cat $(BUILD).configure.log; exit 1)

build: $(BUILD)/CMakeCache.txt
	@cmake --build $(BUILD) -j $(JOBS)

test: deps
	@$(MAKE) --no-print-directory build
	@cd $(BUILD) && ctest --output-on-failure

test-gpu: build
	@cd $(BUILD) && ctest -L gpu --output-on-failure

demo: deps
	@$(MAKE) --no-print-directory build
	@bash scripts/prepare_kjv.sh $(BUILD)/prepare
	./$(BUILD)/train_gpt --config configs/demo_kjv_gated.ini

golden:
	/usr/bin/python3 tests/reference/gen_golden.py --out tests/golden

bench: build
	./$(BUILD)/bench_train
	bash bench/bench_mpi.sh --build $(BUILD)

mutants: deps
	python3 scripts/mutants.py

clean:
	rm -rf $(BUILD) $(BUILD).configure.log
