# gatedgpt: thin wrapper around CMake (the real build is CMakeLists.txt).
#   make          build into build/
#   make test     install dependencies, build, run every test (ctest; the GPU tests skip without a GPU)
#   make test-gpu build, run the GPU tests only (ctest -L gpu: CUDA ops vs CPU ops, goldens, training)
#   make demo     install dependencies, build, prepare the built-in corpus, train a tiny gated model, and print
#                 its accuracy on the KJV multiple-choice task beside chance
#   make golden   regenerate tests/golden/*.bin (and signals/*.bin) with the PyTorch reference (needs python3-torch)
#   make bench    the training-step benchmark vs PyTorch, hybrid layers vs full attention (bench/README.md); bench_gemm: GEMM libraries;
#                 prepare's tokenizer.json encoder vs tokenizers and tiktoken (bench/bench_tokenizer.sh, venv)
#                 prepare -j 1 vs -j 2 throughput (bench/bench_prepare.sh)
#   make interop  every exportable model kind loaded by Hugging Face transformers vs our eval/logits (venv, ~GBs);
#                 first tokenizer.json ids vs the tokenizers library on 100,000 texts (scripts/hf_tokenizer_interop.sh);
#                 last TensorBoard event files read by tensorboard's own readers vs log.jsonl (scripts/tb_interop.sh)
#   make mutants  deliberate bugs (tests/mutants.ini) against the tests: a table of what caught each (~40 min on 2 cores)
#   make sanitize every CUDA-emulator test (label cudaemu) with every launch under 4 schedules, shared memory
#                 poisoned per block; then the op tests and goldens under the racecheck (docs/gpu.md "The CUDA emulator")
#   make gpu-report  registers / smem / spills / LDL-STL / HMMA / H200 occupancy of every CUDA kernel, with
#                 checks (scripts/gpu_report.py; compiles into build-gpurep/, cached; needs nvcc, no GPU)
BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all build deps test test-gpu demo golden bench mutants interop clean

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
	@python3 scripts/make_kjv_task.py
	./$(BUILD)/train_gpt --config configs/demo_kjv_gated.ini
	@python3 scripts/make_kjv_task.py --summary runs/demo_kjv_gated/log.jsonl

golden:
	/usr/bin/python3 tests/reference/gen_golden.py --out tests/golden
	/usr/bin/python3 tests/reference/gen_signals.py

bench: build
	./$(BUILD)/bench_train
	./$(BUILD)/bench_hybrid
	./$(BUILD)/bench_decode
	bash bench/bench_mpi.sh --build $(BUILD)
	bash bench/bench_tokenizer.sh --build $(BUILD)
	bash bench/bench_prepare.sh --build $(BUILD)

mutants: deps
	python3 scripts/mutants.py

interop: build
	bash scripts/hf_tokenizer_interop.sh --build $(BUILD)
	bash scripts/interop.sh --build $(BUILD)
	bash scripts/tb_interop.sh --build $(BUILD)

.PHONY: sanitize
sanitize: build
	@cmake --build $(BUILD) -j $(JOBS) --target test_gpu_ops_race test_golden_race test_gpu_ops_bf16_race test_golden_bf16_race
	@cd $(BUILD) && CUDAEMU_SANITIZE=4 ctest -L cudaemu --output-on-failure
	@cd $(BUILD) && for t in "test_gpu_ops_race" "test_gpu_ops_race --gdn-chunk" "test_gpu_ops_bf16_race" "test_gpu_ops_bf16_race --gdn-chunk"; do \
	  echo "racecheck: $$t"; CUDAEMU_RACECHECK=1 ./tests/$$t > racecheck.log 2>&1 || { tail -3 racecheck.log; exit 1; }; done
	@cd $(BUILD) && for ini in ../tests/golden/*.ini; do for t in test_golden_race test_golden_bf16_race; do echo "racecheck: $$t $$ini"; \
	  CUDAEMU_RACECHECK=1 ./tests/$$t $$ini > racecheck.log 2>&1 || { tail -3 racecheck.log; exit 1; }; done; done

.PHONY: gpu-report
gpu-report:
	/usr/bin/python3 scripts/gpu_report.py --fetch-tools

clean:
	rm -rf $(BUILD) $(BUILD).configure.log
