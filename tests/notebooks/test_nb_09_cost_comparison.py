"""Notebook 09 through papermill with other prices and a planner file, via `cookbook demo`.

Running it through ``demo.run_demo(only=["09"])`` also checks the demo and the report on
a real notebook: the cost section of report.md must carry the values the notebook computed.
"""

import json

import pytest
from nbutil import REPO

from cookbook.harness import _demo


@pytest.fixture(scope="module")
def nb09_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nb09")
    plan = tmp / "plan.json"
    # The v5p-8, 1 x 4096, per-decoder-remat compile measured here (docs/results.md, "The first 31B compiles").
    plan.write_text(
        json.dumps(
            {
                "config": {
                    "preset": "gemma4_31b",
                    "slice_name": "v5p-8",
                    "batch": 1,
                    "seq_len": 4096,
                    "remat": "decoder",
                },
                "compiles": True,
                "flops_per_chip": 228.5e12,
                "tokens_per_step": 4096,
            }
        )
    )
    run_dir, rep = _demo.run_demo(
        notebooks_dir=REPO / "notebooks",
        runs_root=tmp / "runs",
        only=["09"],
        parameters={
            "PRICE_OVERRIDES": "tpu-v5p-8=12.0, tpu-v6e-8=25.0",
            "SERVING_HOURS": [2, 48],
            "MAX_SERVING_HOURS": 96.0,
            "GPU_SERVE_THROUGHPUT_REL": 1.0,
            "PLAN_JSON": str(plan),
            "ASSUMED_MFU": 0.5,
            "REAL_TOKEN_FRACTION": 0.9,
        },
    )
    return run_dir, rep, json.loads((run_dir / "09_cost_comparison.json").read_text())


def test_nb09_uses_the_given_prices(nb09_run):
    _, _, r = nb09_run
    tpu_train, gpu_train = 3.34 * 12.0, 5.39 * 22.12
    assert r["paper_table"]["tpu"]["train_usd"] == pytest.approx(tpu_train)
    assert r["train_cost_ratio"] == pytest.approx(gpu_train / tpu_train)
    assert r["total_cost_ratio_at_hours"]["48.0"] == pytest.approx((gpu_train + 48 * 22.12) / (tpu_train + 48 * 25.0))
    # v6e-8 dearer per hour than 2 x H100 now: the GPU path catches up after a finite time.
    assert r["break_even_hours"] == pytest.approx((gpu_train - tpu_train) / (25.0 - 22.12))
    curve = r["cost_curve"]
    assert curve["hours"][-1] == 96.0 and len(curve["ratio"]) == len(curve["hours"])
    assert curve["ratio"][-1] < 1.0  # past break-even the ratio is below one


def test_nb09_predicted_row_from_the_plan(nb09_run):
    _, _, r = nb09_run
    p = r["predicted"]
    assert p["label"] == "predicted until run on a TPU"
    expected_tps = 4096 * 0.9 / (228.5 / (459 * 0.5))
    assert p["tokens_per_s"] == pytest.approx(expected_tps)
    assert p["train_hours"] == pytest.approx(9.2e6 / expected_tps / 3600)
    assert any("MFU 50%" in a for a in p["assumptions"])


def test_report_section_filled_from_the_notebook(nb09_run):
    run_dir, rep, r = nb09_run
    section = next(s for s in rep.sections if s.section.prefix == "09")
    assert section.status == "ok" and section.results == r
    md = (run_dir / "report.md").read_text()
    cost_part = md[md.index("## 09. Cost comparison") :]
    assert "[09_cost_comparison.ipynb](09_cost_comparison.ipynb)" in cost_part
    assert f"| train_cost_ratio | {r['train_cost_ratio']:.4g} |" in cost_part
    assert f"| break_even_hours | {r['break_even_hours']:.4g} |" in cost_part
    assert "report_files/09_cost_comparison_cost_curve.png" in cost_part
    assert (run_dir / "report_files" / "09_cost_comparison_cost_curve.png").stat().st_size > 10_000
    # Other notebooks of the cookbook were left out of this run, and say so.
    assert all(s.status in ("not run", "absent") for s in rep.sections if s.section.prefix != "09")
