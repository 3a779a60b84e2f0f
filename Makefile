# The two commands a new user runs (README.md): `make demo` and `make test`.
# Both create .venv from requirements.txt first if needed (idempotent: seconds when done).
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test setup lint clean-cache

demo: setup
	$(PY) -m cookbook demo

test: setup
	bash scripts/run_tests.sh

setup:
	bash scripts/setup_env.sh

lint: setup
	$(VENV)/bin/ruff check cookbook tests benchmarks

clean-cache:
	rm -rf .cache runs
