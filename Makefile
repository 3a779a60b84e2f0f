# The two commands a new user runs (README.md): `make demo` and `make test`; `make check` is the
# inner loop (lint, format, the structure tests and every test not marked slow; under 5 minutes).
# `make demo ARGS="--only 00 09"` passes options to `cookbook demo`.
# Both create .venv from requirements.txt first if needed (idempotent: seconds when done);
# `make test` also sets up what only the tests need (setup-test).
VENV ?= .venv
PY := $(VENV)/bin/python
# glibc's malloc on transparent huge pages: XLA's CPU runtime maps fresh buffers every step, and
# this makes a CPU training run ~13% cheaper, numerics unchanged (cookbook.core.CPU_GLIBC_TUNABLES says
# why; benchmarks/malloc_bench.py measures it). A value you set is kept.
export GLIBC_TUNABLES ?= glibc.malloc.hugetlb=1

.PHONY: demo test check setup setup-test lint clean-cache

# Icarus Verilog scores the notebooks' generated Verilog (apt-get on Debian, once per machine).
demo: setup
	bash scripts/setup_env.sh --system iverilog
	$(PY) -m cookbook demo $(ARGS)

test: setup setup-test
	bash scripts/run_tests.sh

RUFF_PATHS := cookbook tests benchmarks notebooks scripts

check: setup
	bash scripts/setup_env.sh --system iverilog
	$(VENV)/bin/ruff check $(RUFF_PATHS)
	$(VENV)/bin/ruff format --check $(RUFF_PATHS)
	bash scripts/run_tests.sh -m "not slow" -n 2 --dist loadfile $(ARGS)

setup:
	bash scripts/setup_env.sh

# What only the tests need: Chromium and Icarus Verilog (apt-get on Debian), and the TPU-host
# environment (.venv-tpuhost, cached per machine).
setup-test:
	bash scripts/setup_env.sh --system
	bash scripts/setup_env.sh --tpu-host

lint: setup
	$(VENV)/bin/ruff check $(RUFF_PATHS)

clean-cache:
	rm -rf .cache runs
