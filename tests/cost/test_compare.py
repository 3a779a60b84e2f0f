"""cookbook.cost._compare: notebook 09's steps (prices, the paper's table, the what-if, the predicted row)."""

from __future__ import annotations

import json

import pytest

from cookbook import cost


def test_prices_read_once_from_the_parameter_string():
    prices = cost.resolve_prices("on_demand", "tpu-v5p-8=12.0, tpu-v6e-8=25.0,")
    assert prices.overrides == {"tpu-v5p-8:on_demand": 12.0, "tpu-v6e-8:on_demand": 25.0}
    assert cost.resolve_prices("on_demand", ["gpu-2xh100:spot=9.5"]).overrides == {"gpu-2xh100:spot": 9.5}
    assert cost.resolve_prices().overrides == {}
    shown = prices.markdown()
    assert "| $12.00 |" in shown and "given by the user" in shown
    with pytest.raises(ValueError, match="pricing 'hourly'"):
        cost.resolve_prices("hourly")
    with pytest.raises(ValueError, match="bad price override"):
        cost.resolve_prices("on_demand", "v5p=3")


def test_paper_comparison_records_the_papers_figures():
    table = cost.paper_comparison(cost.resolve_prices(), serving_hours=[1, 24])
    r = table.results()
    assert r["pricing"] == "on_demand" and r["paper_table"] is table.table
    assert round(r["train_cost_ratio"], 2) == 2.12 and round(r["speedup"], 2) == 1.61
    assert set(r["total_cost_ratio_at_hours"]) == {"1.0", "24.0"}
    assert round(r["total_cost_ratio_at_hours"]["1.0"], 2) == 1.82
    assert "$56.11" in table.markdown() and "cookbook" not in table.markdown()


def test_cost_curve_results_and_description():
    curve = cost.cost_curve(max_hours=48, points=49)
    r = curve.results()
    assert r["cost_curve"]["hours"][-1] == 48.0 and r["break_even_hours"] is None
    assert r["asymptotic_ratio"] == pytest.approx(22.12 / 21.52)
    assert curve.describe() == f"break-even: never; the ratio tends to {22.12 / 21.52:.4f}x"
    dear_v6e = cost.resolve_prices("on_demand", "tpu-v6e-8=25.0")
    be = cost.cost_curve(pricing="on_demand", overrides=dear_v6e.overrides).break_even_hours
    assert be is not None and cost.cost_curve(overrides=dear_v6e.overrides).describe().startswith(
        f"break-even: after {be:,.1f} h of serving"
    )


def test_a_faster_gpu_breaks_even_after_a_finite_time():
    prices = cost.resolve_prices()
    what_if = cost.gpu_what_if(1.10, prices, max_hours=168.0)
    be = what_if.curve.break_even_hours
    assert be is not None and be > 0
    assert what_if.results() == {
        "what_if_gpu_serve_throughput_rel": 1.10,
        "what_if_break_even_hours": be,
        "what_if_ratio_at_24h": what_if.curve.ratio_at(24),
    }
    assert f"after {be:,.0f} h ({be / 24:,.1f} days)" in what_if.describe()
    assert cost.gpu_what_if(1.0, prices).results()["what_if_break_even_hours"] is None  # the paper's "equal"
    with pytest.raises(ValueError, match="above 0"):
        cost.gpu_what_if(0.0, prices)


def test_predicted_row_from_a_plan_has_its_mfu_sweep(tmp_path):
    plan = tmp_path / "plan.json"
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
    predicted = cost.predicted_row(cost.resolve_prices(), plan_json=str(plan), mfu=0.5, real_token_fraction=0.9)
    assert predicted.row["tokens_per_s"] == pytest.approx(4096 * 0.9 / (228.5 / (459 * 0.5)))
    assert predicted.results() == {"predicted": predicted.row}
    assert [r["mfu_assumed"] for r in predicted.sweep] == [0.2, 0.4, 0.6]
    assert predicted.sweep[1]["tokens_per_s"] == pytest.approx(4096 * 0.9 / (228.5 / (459 * 0.4)))
    shown = predicted.sweep_markdown()
    assert "| 20% |" in shown and "| 60% |" in shown and f"{predicted.row['paper_implied_mfu']:.1%}" in shown
    assert "cookbook, **predicted until run on a TPU**" in cost.paper_comparison(cost.resolve_prices()).markdown(
        predicted
    )


def test_predicted_row_without_a_plan_has_no_sweep(tmp_path):
    predicted = cost.predicted_row(cost.resolve_prices(), plan_json=tmp_path / "missing.json")
    assert predicted.row["tokens_per_s"] == 763.0 and predicted.sweep == ()
    assert predicted.sweep_markdown().startswith("No planner output")
