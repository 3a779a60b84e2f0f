#!/usr/bin/env bash
# Fetch the wheels the GPU host lacks into benchmarks/device/wheels/ (git-ignored), for the
# device tool's `carry`. Run here, on a machine with PyPI; the GPU host has no network.
#
# The GPU host's image (Python 3.12) already holds jax (CUDA), flax, optax, orbax,
# torch, transformers, peft, accelerate, safetensors, tokenizers, pandas, pyarrow, xxhash.
# Missing there, and needed by train_step_bench.py: Tunix and Qwix (the JAX side), TRL and
# datasets (the GPU recipe), and what Tunix's trainer imports at load time (metrax, clu,
# ml_collections, tensorboardX, perfetto). Installed there with --no-deps, so pins here
# are the versions this project's CPU environment runs (requirements.txt).
set -euo pipefail
cd "$(dirname "$0")"
rm -rf wheels && mkdir wheels
PY=${PYTHON:-python3}
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d wheels \
  google-tunix==0.1.7 qwix==0.1.8 trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 \
  google-metrax==0.2.4 clu==0.0.12 ml_collections==1.1.0 tensorboardX==2.6.5 perfetto==0.59.1 \
  2> >(grep -v "is ignored: it is neither" >&2)
ls -l wheels
du -sh wheels
