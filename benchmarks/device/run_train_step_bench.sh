#!/usr/bin/env bash
# benchmarks/train_step_bench.py on the lent GPU host (one H200), in one call of the device tool.
#
# Here first (PyPI, ~3 MB):   benchmarks/device/build_wheels.sh
# Then, from the repo root:   run(command="bash benchmarks/device/run_train_step_bench.sh",
#                                 carry=["benchmarks/device/wheels"], timeout_s=450)
#
# Model: a random Gemma 4 31B twin (the release's exact widths, 262,144 vocabulary, 5:1
# sliding:global pattern, K = V global layers) with LAYERS layers, bf16, 1 x 4,096 tokens,
# LoRA rank 64 on all seven projections; JAX layouts remat none/decoder x micro-batch 1/2
# for the estimate table. Six layers is one whole 5:1 period (the per-layer cost is the real
# one; the LM head's share of the step is about a third, against ~5% at 60 layers), sized to
# the 15-minute device budget rather than to memory (~30 layers would fit without remat).
#
# Expected (estimated, never run): ~30 s setup, ~1 min building the 8.7 GB random base,
# ~3 min for the JAX process (load, LoRA, four compiles), ~1 min for PyTorch; LIMIT_S stops
# it at 6 min in any case, keeping what was measured. A first call's machine start adds
# 1-2 min; an early failure (imports, env.txt) leaves time to fix and rerun.
#
# Writes under $OUT (commit the JSON as benchmarks/results/train_step_bench_h200.json):
# train_step_bench_h200.json (written after the JAX process too, so a run cut short still
# returns it), bench.log, env.txt.
# Knobs (environment): LAYERS (6), SEQ (4096), BATCH (1), WARMUP (3), STEPS (8),
# LIMIT_S (360: the benchmark's own time limit), PRESET (gemma4_31b), DEVICE (gpu; cpu with
# PRESET=tiny rehearses this script on a CPU host), PYTHON (python3), SITE (/tmp/site: where
# the wheels are installed).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$(mktemp -d)}
LAYERS=${LAYERS:-6} SEQ=${SEQ:-4096} BATCH=${BATCH:-1} WARMUP=${WARMUP:-3} STEPS=${STEPS:-8} LIMIT_S=${LIMIT_S:-360}
PRESET=${PRESET:-gemma4_31b} DEVICE=${DEVICE:-gpu} PY=${PYTHON:-python3} SITE=${SITE:-/tmp/site}
NAME=train_step_bench_$([ "$DEVICE" = gpu ] && echo h200 || echo cpu_rehearsal).json
t0=$(date +%s)

ls benchmarks/device/wheels/*.whl >/dev/null 2>&1 || { echo "no wheels: run benchmarks/device/build_wheels.sh here and carry benchmarks/device/wheels"; exit 3; }
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
  benchmarks/device/wheels/*.whl 2> >(grep -v "is ignored: it is neither" >&2) || { echo "installing the carried wheels failed"; exit 3; }
export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export COOKBOOK_CACHE=${COOKBOOK_CACHE:-/tmp/cookbook-cache} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
[ "$DEVICE" = cpu ] && export JAX_PLATFORMS=cpu

# What the machine holds, and every import the benchmark needs, before any minute goes to it.
{
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  nproc; free -g | head -2; df -h /tmp | tail -1
  XLA_PYTHON_CLIENT_PREALLOCATE=false "$PY" - <<'PY'
import importlib.metadata as md, sys
print("python", sys.version.split()[0])
for n in ("jax", "jaxlib", "jax-cuda13-plugin", "flax", "optax", "orbax-checkpoint", "google-tunix", "qwix", "torch",
          "transformers", "peft", "trl", "accelerate", "datasets", "safetensors", "tokenizers", "numpy"):
    try:
        print(f"{n}=={md.version(n)}")
    except md.PackageNotFoundError:
        print(f"{n}: MISSING")
import jax, torch
print("jax devices", jax.devices(), "| torch cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name() if torch.cuda.is_available() else "")
import qwix, trl, datasets, peft  # noqa: F401
from tunix.models.gemma4 import model  # noqa: F401
from cookbook import core, fit, gpu, train  # noqa: F401
core.compat.tunix_loss_fn()
print("imports ok")
PY
} 2>&1 | tee "$OUT/env.txt"
grep -q "^imports ok" "$OUT/env.txt" || { echo "the import check failed (see env.txt): add the missing wheel to build_wheels.sh"; exit 4; }
echo "setup took $(( $(date +%s) - t0 )) s"

timeout -k 15 $((LIMIT_S + 45)) "$PY" benchmarks/train_step_bench.py --device "$DEVICE" --preset "$PRESET" \
  ${LAYERS:+--num-layers "$LAYERS"} --seq-len "$SEQ" --batch-size "$BATCH" --warmup-steps "$WARMUP" --steps "$STEPS" \
  --time-limit-s "$LIMIT_S" --out "$OUT/$NAME" 2>&1 | tee "$OUT/bench.log"
rc=${PIPESTATUS[0]}
echo "total $(( $(date +%s) - t0 )) s, exit $rc"
exit "$rc"
