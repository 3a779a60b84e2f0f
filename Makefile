# The two commands a new user runs (README.md): `make demo` and `make test`.
# `make demo ARGS="--only 00 09"` passes options to `cookbook demo`.
# Both create .venv from requirements.txt first if needed (idempotent: seconds when done).
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test setup lint clean-cache

demo: setup
	$(PY) -m cookbook demo $(ARGS)

test: setup
	bash scripts/run_tests.sh

setup:
	bash scripts/setup_env.sh

lint: setup
	$(VENV)/bin/ruff check cookbook tests benchmarks notebooks scripts

clean-cache:
	rm -rf .cache runs
