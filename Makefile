# The two commands a new user runs (README.md): `make demo` and `make test`.
# `make demo ARGS="--only 00 09"` passes options to `cookbook demo`.
# Both create .venv from requirements.txt first if needed (idempotent: seconds when done);
# `make test` also sets up what only the tests need (setup-test).
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test setup setup-test lint clean-cache

# Icarus Verilog scores the notebooks' generated Verilog (apt-get on Debian, once per machine).
demo: setup
	bash scripts/setup_env.sh --system iverilog
	$(PY) -m cookbook demo $(ARGS)

test: setup setup-test
	bash scripts/run_tests.sh

setup:
	bash scripts/setup_env.sh

# What only the tests need: Chromium and Icarus Verilog (apt-get on Debian), and the TPU-host
# environment (.venv-tpuhost, cached per machine).
setup-test:
	bash scripts/setup_env.sh --system
	bash scripts/setup_env.sh --tpu-host

lint: setup
	$(VENV)/bin/ruff check cookbook tests benchmarks notebooks scripts

clean-cache:
	rm -rf .cache runs
