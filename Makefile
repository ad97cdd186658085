# The README's two commands:  make repro  (whole pipeline, default profile)  and  make test.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PLOTS_TEMPLATE := .dvc/offline_plots.html

export DVC_NO_ANALYTICS := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export MLFLOW_DISABLE_TELEMETRY := true
export GX_ANALYTICS_ENABLED := false
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: setup repro draw draws lint test test-fast bench clean-venv prefect-up prefect-down mlflow-ui browser-check dvc-yaml

setup: $(STAMP) $(PLOTS_TEMPLATE)

# torch first (the CPU build on this machine's disk), then everything else under the lock,
# so nothing pulls a multi-GB CUDA torch.
$(STAMP): requirements.txt constraints.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -r requirements.txt -c constraints.txt
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

# The page `dvc plots show` fills, with Vega inlined so it opens offline (named in .dvc/config).
$(PLOTS_TEMPLATE): $(STAMP)
	$(BIN)/python -m pipeline plots-template

# `dvc repro`, then an MLflow run for every stage DVC did not run (skipped or restored from its
# cache), so the store has a run of every stage (pipeline/record_runs.py). When no file DVC
# checks changed since the last successful `make repro`, it says so at once (pipeline/uptodate.py)
repro: setup
	@$(BIN)/python -m pipeline up-to-date || { \
	  $(BIN)/python -m pipeline up-to-date --forget && since=$$(date +%s) && \
	  $(BIN)/dvc repro && $(BIN)/python -m pipeline record-runs --since $$since && \
	  $(BIN)/python -m pipeline up-to-date --record; }

# Another draw of the recipe (a seed set of configs/seed_sets.yaml, precision auto or float32) in its
# own workspace under .maopd/draws/, kept in reports/<profile>/draws/; run again, it resumes
# (pipeline/draws/workspace.py, docs/usage.md#draws). `make draws` lists the kept ones.
SEED_SET ?= G
PRECISION ?= auto
PROFILE ?= tiny
draw: setup
	$(BIN)/python scripts/draw.py run --seed-set $(SEED_SET) --precision $(PRECISION) --profile $(PROFILE)

draws: setup
	$(BIN)/python scripts/draw.py list --profile $(PROFILE)

# ruff (pyproject.toml's rules); the import contracts (pyproject.toml); dvc.yaml and the plots
# templates current with pipeline/dag.py
lint: setup
	$(BIN)/ruff check pipeline flows tests scripts benchmarks
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pipeline dvc-yaml --check

test: lint
	$(BIN)/python -m pytest -q

# the suite without the end-to-end runs (marked slow)
test-fast: lint
	$(BIN)/python -m pytest -q -m "not slow"

# after editing pipeline/dag.py or a stage's imports
dvc-yaml: setup
	$(BIN)/python -m pipeline dvc-yaml

bench: setup
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

# Local orchestration (README "Prefect" and "MLflow"): both bind 127.0.0.1 only.
prefect-up: setup
	scripts/prefect-up.sh

prefect-down:
	scripts/prefect-down.sh

mlflow-ui: setup
	@MLFLOW_UI_URL=http://127.0.0.1:5000 $(BIN)/python -m pipeline mlflow-links
	MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false $(BIN)/mlflow server --app-name maopd --host 127.0.0.1 --port 5000 \
		--workers 1 --backend-store-uri sqlite:///$(CURDIR)/mlflow.db --default-artifact-root $(CURDIR)/mlartifacts

# The report, the `dvc plots` page, MLflow's runs page and a Prefect flow-run page in headless
# Chromium (Debian's package: apt-get install -y chromium); fails on a blank page or a console error.
browser-check: setup
	$(BIN)/python scripts/browser_check.py

clean-venv:
	rm -rf $(VENV)
