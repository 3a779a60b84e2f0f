#!/usr/bin/env bash
# The whole test suite, as CI runs it: unit tests, papermill runs of every notebook with
# non-default parameters (tests/notebooks/), `make demo` on a fresh cache, which runs every
# notebook as committed (tests/harness/test_make_demo.py), and the browser tests. With no
# arguments: the JAX-side tests (marker jax_only) in the TPU-host environment (.venv-tpuhost:
# the newest Python here, constraints/tpu-host.txt, no torch, no vLLM), then everything else,
# with the main job's tests running beside both (see below). With arguments, one pytest run of
# those (e.g. `scripts/run_tests.sh tests/fit -k plan`); `--tpu-host`: the TPU-host pass alone.
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

tpu_host_pass() {
  if [[ ! -x "$TPU_HOST_VENV/bin/python" ]]; then
    echo "run_tests: no $TPU_HOST_VENV (see scripts/setup_env.sh --tpu-host): TPU-host pass skipped"
    return 0
  fi
  # The random base is built through transformers + torch, which this environment lacks: build
  # it in the main one and hand over a copy, alone, so plans and runs are made afresh here.
  local base cache rc=0
  base=$(PYTHONPATH=$PWD "$VENV/bin/python" -m cookbook base --preset tiny)
  cache=$(mktemp -d)
  mkdir -p "$cache/base"
  cp -r "$base" "$cache/base/"
  echo "run_tests: TPU-host pass, $("$TPU_HOST_VENV/bin/python" --version), tests marked jax_only"
  COOKBOOK_CACHE=$cache PYTHONPATH=$PWD "$TPU_HOST_VENV/bin/pytest" -m "jax_only and not torch" "${JAX_SIDE[@]}" \
    -p no:cacheprovider --durations=10 -q || rc=$?
  rm -rf "$cache"
  return $rc
}

if [[ "${1:-}" == --tpu-host ]]; then  # that pass alone
  tpu_host_pass
  exit
fi
if [[ $# -gt 0 ]]; then  # a chosen subset: one pytest run, as asked
  exec "$VENV/bin/pytest" tests -p no:cacheprovider --durations=25 "$@"
fi

# The whole suite. The main job (`make demo` on a fresh cache, ~15 minutes, and the browser test
# of its report) shares nothing with the other tests, not even the artefact cache, and the rest
# of the suite averages about one busy core of the two: it runs beside them, niced so the timed
# tests (benchmarks) keep their core. Its output follows the main run's.
DEMO_TESTS=(tests/harness/test_make_demo.py tests/harness/test_browser.py::test_report_in_a_browser)
demo_log=$(mktemp)
nice -n 10 "$VENV/bin/pytest" "${DEMO_TESTS[@]}" -p no:cacheprovider --durations=5 >"$demo_log" 2>&1 &
demo_pid=$!
trap 'kill $demo_pid 2>/dev/null || true' EXIT
tpu_rc=0
tpu_host_pass || tpu_rc=$?
main_rc=0
"$VENV/bin/pytest" tests -p no:cacheprovider --durations=25 --ignore=tests/harness/test_make_demo.py \
  --deselect tests/harness/test_browser.py::test_report_in_a_browser || main_rc=$?
demo_rc=0
wait $demo_pid || demo_rc=$?
trap - EXIT
echo "run_tests: the main job's tests (${DEMO_TESTS[*]}), run beside the rest:"
cat "$demo_log"
rm -f "$demo_log"
if ((tpu_rc)); then
  echo "run_tests: the TPU-host pass FAILED (exit $tpu_rc); see its output above" >&2
fi
if ((demo_rc)); then
  echo "run_tests: the main job's tests FAILED (exit $demo_rc); see their output above" >&2
fi
for rc in $main_rc $demo_rc $tpu_rc; do
  ((rc == 0)) || exit $rc
done
exit 0
