# Two entry points on a fresh machine: `make demo` and `make test`.
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

.PHONY: demo test install benchmarks sample-data clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)" $(TORCH_INDEX)
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/eegformer demo --out $(DEMO_OUT)

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

benchmarks: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

sample-data: $(STAMP)
	$(BIN)/eegformer simulate --out sample_data --overwrite

clean:
	rm -rf $(DEMO_OUT) .pytest_cache build *.egg-info
