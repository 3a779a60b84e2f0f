#!/usr/bin/env bash
# The whole test suite, as CI runs it: unit tests, papermill runs of every notebook with
# non-default parameters (tests/notebooks/), `make demo` on the suite's cache (empty in a fresh
# clone), which runs every notebook as committed (tests/harness/test_make_demo.py), the browser
# tests, and the JAX-side tests (marker jax_only) again in the TPU-host environment (.venv-tpuhost:
# the newest Python here, constraints/tpu-host.txt, no torch, no vLLM). With no arguments, two
# streams side by side (see below). With arguments, one pytest run of those (e.g.
# `scripts/run_tests.sh tests/fit -k plan`, or `-m "not slow"`: `make check`); `--tpu-host`: the
# TPU-host pass alone.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${COOKBOOK_VENV:-.venv}
TPU_HOST_VENV=${COOKBOOK_TPU_HOST_VENV:-.venv-tpuhost}
# The directories that hold JAX-side tests; the marker picks the tests within them.
JAX_SIDE=(tests/core tests/models tests/mesh tests/lora tests/fit tests/data tests/train)

# 8 fake CPU devices, CPU backends even though libtpu is installed, artefact cache in the repo.
export XLA_FLAGS="${XLA_FLAGS:-} --xla_force_host_platform_device_count=8"
export JAX_PLATFORMS=${JAX_PLATFORMS:-cpu}
export VLLM_TARGET_DEVICE=${VLLM_TARGET_DEVICE:-cpu}
export COOKBOOK_CACHE=${COOKBOOK_CACHE:-$PWD/.cache/cookbook}
export TOKENIZERS_PARALLELISM=false
# glibc's malloc on huge pages, as the Makefile sets it (cookbook.core.CPU_GLIBC_TUNABLES).
export GLIBC_TUNABLES=${GLIBC_TUNABLES-glibc.malloc.hugetlb=1}
# Per-test wall and CPU seconds (tests/profiling.py), one file per stream; scripts/profile_tests.py
# prints them.
PROFILE_DIR=${COOKBOOK_TEST_PROFILE_DIR:-$PWD/.cache/test-profile}

# CI sets CI=true: there a missing test environment fails the run instead of skipping its tests.
on_ci() { [[ -n "${CI:-}" && ! "${CI,,}" =~ ^(0|false|no)$ ]]; }

tpu_host_pass() {
  if [[ ! -x "$TPU_HOST_VENV/bin/python" ]]; then
    if on_ci; then
      echo "run_tests: no $TPU_HOST_VENV, and CI (CI=$CI) must run the TPU-host pass: build it with" \
        "'bash scripts/setup_env.sh --tpu-host' (needs Python 3.12 or 3.13: 'pyenv install 3.13')" >&2
      return 1
    fi
    echo "run_tests: TPU-host pass NOT RUN: no $TPU_HOST_VENV; build it with 'bash scripts/setup_env.sh --tpu-host'"
    return 0
  fi
  # The random bases are built through transformers + torch, which this environment lacks: build
  # them in the main one and hand over copies, alone, so plans and runs are made afresh here. XLA's
  # compiled executables are shared with the main environment's cache (its jax-compile/): the same
  # jax/jaxlib pins (constraints/tpu-host.txt), so a hit is the executable this stack would compile
  # (JAX keys entries by jaxlib version and the lowered program, which this stack still traces and
  # lowers itself); it took this pass from 118 to 70 CPU-seconds, measured alone 2026-12-03.
  local base cache preset rc=0 xla_cache=${JAX_COMPILATION_CACHE_DIR-$COOKBOOK_CACHE/jax-compile}
  cache=$(mktemp -d)
  mkdir -p "$cache/base"
  for preset in tiny tiny_e2b tiny_12b tiny_26b_a4b; do  # tiny and the three structural twins
    base=$(PYTHONPATH=$PWD "$VENV/bin/python" -m cookbook base --preset "$preset")
    cp -r "$base" "$cache/base/"
  done
  echo "run_tests: TPU-host pass, $("$TPU_HOST_VENV/bin/python" --version), tests marked jax_only"
  # The two slowest twin checks (LoRA on a 4 x 2 mesh for both twins, QLoRA on the E2B twin: ~1.5
  # of this pass's ~4.5 minutes) and the check of the CPU LoRA gradients' compiled step (two tiny
  # compiles) run in .venv only: the same library versions, and the code they reach runs here on
  # tiny (and the twins' loading, targets and PEFT round trip on both).
  COOKBOOK_CACHE=$cache JAX_COMPILATION_CACHE_DIR=$xla_cache COOKBOOK_TEST_STREAM=tpu-host \
    COOKBOOK_TEST_PROFILE=$PROFILE_DIR/tpu-host.jsonl \
    PYTHONPATH=$PWD "$TPU_HOST_VENV/bin/pytest" -m "jax_only and not torch" "${JAX_SIDE[@]}" \
    -k "not test_apply_lora_on_4x2_mesh_starts_as_identity and not test_qlora_on_the_e2b_twin and not test_lora_grads_for_cpu" \
    -p no:cacheprovider --durations=10 -q || rc=$?
  rm -rf "$cache"
  return $rc
}

if [[ "${1:-}" == --tpu-host ]]; then  # that pass alone
  tpu_host_pass
  exit
fi
if [[ $# -gt 0 ]]; then  # a chosen subset: one pytest run, as asked
  # Paths given (tests/fit, tests/x.py::test_y): those alone; only options (-k, -m): all of tests/.
  where=(tests)
  for arg in "$@"; do [[ -e "${arg%%::*}" ]] && where=() && break; done
  exec "$VENV/bin/pytest" "${where[@]}" -p no:cacheprovider --durations=25 "$@"
fi

# The whole suite, in two streams side by side, one pytest process each (one stream kept about one
# of the two cores busy). scripts/profile_tests.py --split balances them from the committed
# per-file profile (tests/profile.json, rewritten from a run's .cache/test-profile/ with
# `scripts/profile_tests.py --json tests/profile.json`): the second starts with the main job
# (`make demo` on the suite's cache, which a fresh clone starts empty, and the browser test of its
# report), so that what it trains is what the suite's shared runs reuse (tests/userenv.py); files
# sharing an in-memory fixture stay together; the TPU-host pass ends whichever stream ends sooner
# without it (it shares the compilation cache the training tests filled). The second stream is
# niced, with everything it starts. Its output follows the first's.
mapfile -t STREAMS < <("$VENV/bin/python" scripts/profile_tests.py --split)
# Each stream pinned to half of this machine's CPUs, and everything it starts with it (one core each
# on 2 cores): a stream's time is then its files' times on one core, which the split predicts
# (scripts/profile_tests.py --cores). COOKBOOK_TEST_PIN=0, fewer than 2 CPUs or no taskset: unpinned.
CORES=()
if [[ "${COOKBOOK_TEST_PIN:-1}" != 0 ]] && command -v taskset >/dev/null; then
  mapfile -t CORES < <("$VENV/bin/python" scripts/profile_tests.py --cores)
fi
pin() {  # pin CPULIST: this (sub)shell and what it starts, to those CPUs; none given: as it is
  [[ -n "${1:-}" ]] || return 0
  taskset -pc "$1" "$BASHPID" >/dev/null || { echo "run_tests: the $2 stream is not pinned (taskset failed)"; return 0; }
  echo "run_tests: the $2 stream is pinned to CPU $1"
}
run_stream() {  # run_stream NAME FILE... (the entry tpu-host: the TPU-host pass, after the files)
  local name=$1 rc=0 files=() f tpu=0
  shift
  for f in "$@"; do [[ "$f" == tpu-host ]] && tpu=1 || files+=("$f"); done
  echo "run_tests: the $name stream: ${#files[@]} files$( ((tpu)) && echo ', then the TPU-host pass')"
  COOKBOOK_TEST_STREAM=$name COOKBOOK_TEST_PROFILE=$PROFILE_DIR/$name.jsonl \
    "$VENV/bin/pytest" "${files[@]}" -p no:cacheprovider --durations=20 \
    || { rc=$?; echo "run_tests: the $name stream's tests FAILED (exit $rc)"; }
  if ((tpu)); then
    tpu_host_pass || { rc=$?; echo "run_tests: the TPU-host pass FAILED (exit $rc)"; }
  fi
  return $rc
}
side_stream() {  # runs in its own subshell (&): niced, and everything it starts with it
  renice -n 10 -p "$BASHPID" >/dev/null
  pin "${CORES[1]:-}" second
  read -ra second <<<"${STREAMS[1]}"
  run_stream second "${second[@]}"
}
rm -rf "$PROFILE_DIR" && mkdir -p "$PROFILE_DIR"
side_log=$(mktemp)
set -m  # the second stream gets its own process group: stopping this script stops all of it
side_stream >"$side_log" 2>&1 &
side_pid=$!
set +m
trap 'kill -- -$side_pid 2>/dev/null || true' EXIT
main_rc=0
read -ra first <<<"${STREAMS[0]}"
(pin "${CORES[0]:-}" first && run_stream first "${first[@]}") || main_rc=$?
side_rc=0
wait $side_pid || side_rc=$?
trap - EXIT
echo "run_tests: the second stream, run beside the first:"
cat "$side_log"
rm -f "$side_log"
echo "run_tests: where the time went (scripts/profile_tests.py $PROFILE_DIR for more)"
"$VENV/bin/python" scripts/profile_tests.py "$PROFILE_DIR" --top 10 || true
if ((side_rc)); then
  echo "run_tests: the second stream FAILED (exit $side_rc); see its output above" >&2
fi
"$VENV/bin/python" scripts/profile_tests.py "$PROFILE_DIR" --closing-line || true
((main_rc == 0)) || exit $main_rc
exit $side_rc
