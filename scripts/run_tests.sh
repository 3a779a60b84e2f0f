#!/usr/bin/env bash
# The whole test suite, as CI runs it: unit tests, papermill runs of every notebook with
# non-default parameters (tests/test_nb_*.py), and `make demo` on a fresh cache, which runs
# every notebook as committed (tests/harness/test_make_demo.py).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${COOKBOOK_VENV:-.venv}

# 8 fake CPU devices, CPU backends even though libtpu is installed, artefact cache in the repo.
export XLA_FLAGS="${XLA_FLAGS:-} --xla_force_host_platform_device_count=8"
export JAX_PLATFORMS=${JAX_PLATFORMS:-cpu}
export VLLM_TARGET_DEVICE=${VLLM_TARGET_DEVICE:-cpu}
export COOKBOOK_CACHE=${COOKBOOK_CACHE:-$PWD/.cache/cookbook}
export TOKENIZERS_PARALLELISM=false

exec "$VENV/bin/pytest" tests -p no:cacheprovider --durations=25 "$@"
