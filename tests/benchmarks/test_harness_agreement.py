"""benchmarks/harness_agreement.py: verilog-eval's harness rule, ported, and the cookbook's scorer
agreeing with it on what a model writes (real iverilog both times)."""

import importlib.util
import json
from pathlib import Path

import pytest

from cookbook import evaluate

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("harness_agreement", REPO / "benchmarks" / "harness_agreement.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("log", "code"),
    [
        ("Hint: Total mismatched samples is 0 out of 236 samples\nMismatches: 0 in 236 samples\n", "."),
        ("Mismatches: 3 in 236 samples\n", "R"),
        ("c.sv:2: warning: always_comb process has no sensitivities.\nMismatches: 0 in 236 samples\n", "n"),
        ("c.sv:3: syntax error\nc.sv:3: error: invalid module item.\n", "S"),
        ("c.sv:4: error: Unknown module type: add9\n", "m"),
        ("no error here\nMismatches: 0 in 236 samples\n", "C"),  # the harness greps every line for "error"
        ("Mismatches: 0 in 0 samples\n", "."),  # no sample run, and still a pass there
        ("TIMEOUT\n", "T"),
    ],
)
def test_the_ported_rule_codes_logs_as_sv_iv_analyze_does(bench, log, code):
    assert bench.harness_code(log, "module TopModule(); endmodule") == code


def test_no_verdict_with_a_reset_edge_is_coded_r(bench):
    assert bench.harness_code("", "always @(posedge clk, posedge reset)") == "r"


def test_the_scorer_agrees_with_the_harness_on_every_kind_a_model_writes(bench):
    """One sample-task problem and the zero problem, each kind run through both; the kinds that
    differ by design differ the way the docstring says."""
    from cookbook import data

    evaluate.check_simulator()  # fails naming the package where Icarus Verilog is missing
    problem = evaluate.sample_task_problems(data.generate_rows("eval", n=1))[0]
    zero, zero_kinds = bench.zero_problem()
    jobs = [(problem, kind, text) for kind, text in bench.completions(problem).items()]
    jobs += [(zero, kind, text) for kind, text in zero_kinds.items()]
    for p, kind, text in jobs:
        ours = evaluate.simulate(p, text, evaluate.SimConfig(timeout_s=10))
        theirs = bench.harness_run(p, evaluate.extract_module(text), 10) == "."
        if kind in bench.BY_DESIGN:
            assert ours.passed == (kind == "prints the word error") and theirs != ours.passed, (kind, ours)
        else:
            assert ours.passed == theirs, (kind, ours)
    assert sum(kind.startswith("no sensitivities") for _, kind, _ in jobs) == 2


def test_the_committed_measurement_is_full_agreement_on_the_usual_kinds(bench):
    result = json.loads((REPO / "benchmarks" / "results" / "harness_agreement.json").read_text())
    assert result["usual_kinds"]["agreement"] == 1.0 and result["usual_kinds"]["samples"] >= 100
    assert set(result["by_design"]) == set(bench.BY_DESIGN)
    assert all(d["kind"] in bench.BY_DESIGN for d in result["differ"])
