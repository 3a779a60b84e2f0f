"""benchmarks/runtimes.py's rows: a compile this host could not finish decides nothing."""

import importlib.util
from pathlib import Path

import pytest

from cookbook import fit
from cookbook.fit import _plan_config, _search

pytestmark = pytest.mark.jax_only
REPO = Path(__file__).resolve().parents[2]


def _runtimes():
    spec = importlib.util.spec_from_file_location("runtimes_bench", REPO / "benchmarks" / "runtimes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _report(quantize, error):
    config = fit.PlanConfig(model_preset="gemma4_31b", slice_name="v5e-1", seq_len=1024, quantize=quantize)
    return _plan_config.PlanReport(config=config.to_dict(), compiles=False, error=error)


def test_a_cell_whose_compile_died_on_this_host_is_open_not_a_misfit():
    runtimes = _runtimes()
    oom = _report(None, "at 12 layers: RESOURCE_EXHAUSTED: Ran out of memory on HBM (16.28G > 15.75G)")
    died = _report("nf4", "at 12 layers: the compile process died (exit -9): ")

    def row(reports):
        res = _search.SearchResult(preset="gemma4_31b", slice_name="v5e-1", spaces=(), reports=reports)
        return runtimes.row_of("gemma4_31b", "v5e-1", res, "benchmarks/runtimes.py", [1024])

    decided = row({"1x1/bf16": oom})  # the compiler's own verdict: a misfit
    assert decided["compiled"] is True and decided["fits"] is False
    both = row({"1x1/bf16": oom, "1x1/nf4": died})  # nf4 never finished: nothing is known of it
    assert both["compiled"] is False and both["fits"] is None
    assert "1x1/nf4" in both["why"] and "more memory" in both["why"] and "[1024]" in both["why"]
