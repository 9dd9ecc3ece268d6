# looper: `make demo` runs a short night on this machine; `make test` runs every test.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
DEMO    ?= build/demo

.PHONY: venv system system-base demo test test-fast verify-json lint bench bench-fast calibrate-gpu gpu-check clean

# System packages (Debian; scripts/system_packages.txt): installed as root, else the apt line and
# a failure. LOOPER_SKIP_TIERS=ssh,browser,slurm leaves a tier out (its tests are skipped
# and named at the end of `make test`).
system:
	scripts/setup_system.sh

system-base:
	scripts/setup_system.sh base

$(STAMP): pyproject.toml | system-base
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

# The main job on embedded defaults: local executor, built-in planner, synthetic data.
demo: $(STAMP)
	rm -rf $(DEMO)
	$(BIN)/looper init $(DEMO) --preset demo
	cd $(DEMO) && $(abspath $(BIN))/looper run --max-experiments 1; code=$$?; \
	  $(abspath $(BIN))/looper history; \
	  $(abspath $(BIN))/looper report --html report.html; \
	  exit $$code

# Every test on two pytest-xdist workers, a test file on one worker (its module fixture, such as the one real
# tiny night in tests/e2e/test_installed.py, made once); SLURM tests take turns (tests/executors/slurm/conftest.py). TEST_WORKERS=0: all in this one process.
TEST_WORKERS ?= 2

# The pure core (looper/core/, the whole folder) must stay fully branch-covered by its own tests, tests/core
# (issue 3). Not yet so: the four modules of CORE_NOT_YET (the knob block, plan and search at 93-96 %, one
# branch of MATCHES.json's regions); every other core module, and any new one, is held at 100 %.
CORE_NOT_YET := looper/core/propose/hyperblock.py,looper/core/propose/plan.py,looper/core/propose/search.py,looper/core/scoring/matches.py

test: system $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not e2e" tests/core --cov=looper.core --cov-branch --cov-report=
	$(BIN)/python -m coverage report --fail-under=100 --skip-covered --show-missing --omit='$(CORE_NOT_YET)'
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# The fast tier: budget 30 s on an idle 2-core machine, on two pytest-xdist workers; the run ends with its duration and, over the
# budget, its slowest tests (scripts/pytest_clock.py, tests/tiers.py). Bytecode caches are written
# (git-ignored __pycache__) even where PYTHONDONTWRITEBYTECODE is set: recompiling costs ~3 s a run.
test-fast: $(STAMP)
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -m "not e2e" -n 2 --dist loadfile

# One verdict object (last line) for the project's own fast checks.
verify-json: $(STAMP)
	@$(BIN)/python scripts/verify_json.py

lint: $(STAMP)
	$(BIN)/ruff check looper tests scripts bench prepare.py train.py evaluate.py

# Every benchmark, the slow ML ones (real training, tens of minutes) included.
bench: $(STAMP)
	$(BIN)/python bench/run_all.py --all

# The quick benchmarks only; the slow ones keep their last generated result.
bench-fast: $(STAMP)
	$(BIN)/python bench/run_all.py

# On a lent GPU (not in CI): the baseline and the gate's calibration at full scale, one command. 16 seeds of
# the baseline train.py and 16 of LR0 0.003 on the same seeds (the planted change), each fine-tuning the
# start weights in PRETRAINED_DIR (default the shipped checkpoint; a user's own: `python -m
# looper.convert_weights best.pt` writes one), then both procedures resampled. Refuses to run without CUDA.
PRETRAINED_DIR ?= looper/pretrained
GPU_POOL ?= bench/out/calibration-gpu
calibrate-gpu: $(STAMP)
	LOOPER_PRETRAINED_DIR=$(abspath $(PRETRAINED_DIR)) $(BIN)/python bench/calibration_pool.py --scale full \
	  --require-gpu --seeds 16 --degraded 16 --noop 0 --variant lrlow=0.003 --jobs 1 --out $(GPU_POOL)
	$(BIN)/python bench/calibration_resample.py --pool $(GPU_POOL) --procedures pooled,paired --caps 2,4,8 \
	  --draws 1500 --shift-to 1,2 --scale-to 1,2 --scale-from lrlow --jobs 2 --json bench/calibration/gpu-full.json

# On a machine with a GPU (not in CI): looper's GPU path proved in about 9 minutes, each step one line of
# bench/out/gpu-check/summary.txt (bench/gpu_check.py; docs/GPU.md). CI runs its dry run on a CPU.
gpu-check: $(STAMP)
	$(BIN)/python bench/gpu_check.py

clean:
	rm -rf $(VENV) build .pytest_cache
