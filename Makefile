# Two entry points on a fresh machine: `make demo` and `make test` (DEVELOPERS.md: every target).
# They create .venv if needed and install the pinned CPU build of torch first
# (override with e.g. `make test TORCH_SPEC="torch==2.13.0" TORCH_INDEX="--index-url URL"`).
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
DEMO_OUT ?= demo-output
PYTEST_ARGS ?=
BIN := $(VENV)/bin
STAMP := $(VENV)/.eegformer-installed

.PHONY: demo test test-fast lint ruff install benchmarks sample-data clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)" $(TORCH_INDEX)
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/eegformer demo --out $(DEMO_OUT)

LINTED := eegformer_cli tests benchmarks
# The tests on parallel workers (pytest-xdist), one per core (TEST_WORKERS=0: in one process).
# Each test file runs whole on one worker (--dist loadfile): the models its module fixtures
# train are trained once, not once per worker. One PyTorch thread per worker: with more
# threads than cores PyTorch's threads wait for each other (docs/benchmarks.md, "Threads").
TEST_WORKERS ?= auto
PYTEST := OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# Lint, format and type checks first, then every test: ruff takes seconds, mypy (its files and
# settings: pyproject.toml) about a minute without its cache (.mypy_cache), seconds with it.
test: lint
	$(PYTEST) $(PYTEST_ARGS)

# The quick loop: ruff, then the tests not marked slow (no other program, no ../shared/data,
# no demo, no training run of more than a few seconds), in under 2 minutes.
test-fast: ruff
	$(PYTEST) -m "not slow" $(PYTEST_ARGS)

lint: ruff
	$(BIN)/mypy

ruff: $(STAMP)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)

# Every benchmark of docs/benchmarks.md, one JSON file each in $(BENCH_OUT) (about an hour on 2 cores;
# run it on a quiet machine). The figures in docs/benchmarks.md are copied from such files.
BENCH_OUT ?= benchmark-results
MSU_EEG ?= ../shared/data/msu-schizophrenia/eeg
benchmarks: $(STAMP)
	mkdir -p $(BENCH_OUT)
	for name in bench_preprocess bench_train_step bench_scaling; do \
	  $(BIN)/python benchmarks/$$name.py > $(BENCH_OUT)/$$name.json || exit 1; done
	$(BIN)/python benchmarks/bench_explain.py $(MSU_EEG)/sub-001_task-rest_eeg.edf \
	  > $(BENCH_OUT)/bench_explain.json
	$(BIN)/python benchmarks/bench_accuracy.py --out $(BENCH_OUT)/accuracy \
	  --variants default,coarse_only,no_drofe > $(BENCH_OUT)/bench_accuracy.json
	$(BIN)/python benchmarks/bench_permutations.py --out $(BENCH_OUT)/permutations \
	  > $(BENCH_OUT)/bench_permutations.json
	$(BIN)/python benchmarks/bench_fingerprint.py --out $(BENCH_OUT)/fingerprint \
	  > $(BENCH_OUT)/bench_fingerprint.json

sample-data: $(STAMP)
	$(BIN)/eegformer simulate --out sample_data --overwrite

clean:
	rm -rf $(DEMO_OUT) $(BENCH_OUT) .pytest_cache build *.egg-info
