# hvdbench: the one entry point for people and CI.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.hvdbench-ready
MODE ?= torch-ddp
ARGS ?=
PYTEST_ARGS ?=

.PHONY: help venv bench test test-fast lint bench-overhead clean
help:
	@echo "make bench          set up (first time) and run a benchmark that fits this machine (MODE=$(MODE) ARGS=...)"
	@echo "make test           set up (first time) and run the whole test suite"
	@echo "make test-fast      unit and CLI tests only"
	@echo "make lint           ruff on the package and tests, bash -n on scripts"
	@echo "make bench-overhead torch-ddp vs a bare DDP loop, tf-horovod vs a bare Horovod TF loop"
	@echo "make venv           the venv with torch, tensorflow-cpu, tf-keras and patched Horovod"

venv: $(STAMP)
$(STAMP): pyproject.toml requirements/venv.txt scripts/setup.sh docker/build-horovod.sh $(wildcard docker/horovod/*.patch)
	scripts/setup.sh $(VENV) $(PYTHON)
	touch $(STAMP)

bench: venv
	$(VENV)/bin/bench $(MODE) $(ARGS)

test: venv
	scripts/run-tests.sh $(PY) $(PYTEST_ARGS)

test-fast: venv
	scripts/run-tests.sh $(PY) -m "not slow" $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check bench tests benchmarks
	bash -n scripts/*.sh docker/*.sh .ci/run

bench-overhead: venv
	$(PY) benchmarks/overhead.py --mode torch-ddp $(ARGS)
	$(PY) benchmarks/overhead.py --mode tf-horovod --image-size 32 $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build *.egg-info
