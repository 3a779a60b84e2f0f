"""cookbook.cost: the paper's cost table reproduced from its inputs, the curve, the CLI."""

import dataclasses
import json

import numpy as np
import pytest

from cookbook import core, cost, fit, harness
from cookbook.cost import _cost


def test_paper_table_reproduced_exactly_from_its_inputs():
    t = _cost.comparison_table(serving_hours=(1, 8, 24))
    # The paper's printed figures, to the digits it printed them.
    assert round(t["tpu"]["train_usd"], 2) == 56.11
    assert round(t["gpu"]["train_usd"], 2) == 119.23
    assert round(t["tpu"]["usd_per_million_tokens"], 2) == 6.10
    assert round(t["gpu"]["usd_per_million_tokens"], 2) == 12.68
    assert (t["tpu"]["train_hours"], t["gpu"]["train_hours"]) == (3.34, 5.39)
    assert round(t["speedup"], 2) == 1.61
    assert round(t["train_cost_ratio"], 2) == 2.12
    assert round(t["total_cost_ratio"][1.0], 2) == 1.82
    assert round(t["total_cost_ratio"][8.0], 2) == 1.30
    assert round(t["total_cost_ratio"][24.0], 3) == 1.135


def test_paper_token_totals_agree_with_its_throughput():
    # 9.2M / 9.4M training tokens (implied by the per-million figures) against tokens/s x hours.
    for side in (_cost.PAPER_TPU, _cost.PAPER_GPU):
        from_speed = side.train_tokens_per_s * side.train_hours * 3600 / 1e6
        assert abs(from_speed / side.train_tokens_millions - 1) < 0.005


def test_curve_matches_points_and_never_breaks_even_at_paper_prices():
    curve = cost.cost_curve(max_hours=168, points=169)
    assert curve.ratio[0] == pytest.approx(119.2268 / 56.112)
    assert curve.ratio_at(1) == pytest.approx(1.8208, abs=1e-4)
    assert curve.ratio_at(24) == pytest.approx(1.1354, abs=1e-4)
    assert np.all(np.diff(curve.ratio) < 0)  # the training saving is diluted by serving hours
    # v6e-8 ($21.52/h) serves cheaper than 2 x H100 ($22.12/h): the TPU path never loses.
    assert curve.break_even_hours is None
    assert curve.asymptotic_ratio == pytest.approx(22.12 / 21.52)
    assert curve.ratio[-1] > curve.asymptotic_ratio


def test_break_even_when_gpu_serves_faster():
    # If the GPU served 10% more traffic per hour, it catches up after a finite time.
    gpu = dataclasses.replace(_cost.PAPER_GPU, serve_throughput_rel=1.10)
    h = _cost.break_even_hours(_cost.PAPER_TPU, gpu)
    assert h is not None and h > 0
    # Equal at the break-even point, to float64 rounding of the costs themselves (a few ulps of
    # some hundreds of dollars; 1e-12 relative is ~4,500 ulps, far under any real difference).
    tpu_at, gpu_at = float(_cost.total_cost_usd(_cost.PAPER_TPU, h)), float(_cost.total_cost_usd(gpu, h))
    assert tpu_at == pytest.approx(gpu_at, rel=1e-12, abs=0)
    assert float(_cost.total_cost_usd(_cost.PAPER_TPU, h + 10)) > float(_cost.total_cost_usd(gpu, h + 10))


def test_prices_are_sourced_or_unknown_and_overridable():
    for p in core.PRICES:
        assert p.source and p.as_of
        assert p.platform in core.PLATFORMS and p.pricing in core.PRICING_KINDS
    known = {(p.platform, p.pricing): p.usd_per_hour for p in core.PRICES if p.known}
    # The paper's three machines at the paper's prices; every other TPU slice on demand at the list
    # price per chip-hour (tests/core/test_hardware.py); nothing else is known.
    assert {k: v for k, v in known.items() if not k[0].startswith("tpu-") or k[0] in ("tpu-v5p-8", "tpu-v6e-8")} == {
        ("tpu-v5p-8", "on_demand"): 16.80,
        ("tpu-v6e-8", "on_demand"): 21.52,
        ("gpu-2xh100", "on_demand"): 22.12,
    }
    assert known[("tpu-v6e-4", "on_demand")] == pytest.approx(4 * 2.70)
    assert all(pricing == "on_demand" for _, pricing in known)
    with pytest.raises(core.UnknownPriceError, match="--price tpu-v5p-8:spot="):
        core.get_price("tpu-v5p-8", "spot")
    ov = core.parse_price_overrides(["tpu-v5p-8:spot=5.0", "gpu-2xh100=20"])
    assert core.get_price("tpu-v5p-8", "spot", ov).usd_per_hour == 5.0
    assert core.get_price("gpu-2xh100", "on_demand", ov).source == "given by the user"
    t = _cost.comparison_table(overrides=ov)
    assert t["gpu"]["train_usd"] == pytest.approx(5.39 * 20)
    with pytest.raises(ValueError, match="PLATFORM"):
        core.parse_price_overrides(["v5p=3"])


def test_predicted_row_from_plan_figures(tmp_path):
    plan_json = tmp_path / "plan.json"

    # Figures of the v5p-8, 1 x 4096, per-decoder remat compile (docs/results.md, "The first 31B compiles").
    # Records shaped like cookbook.fit.PlanReport.to_dict(); the recommended layout wins.
    def rec(remat, flash, flops, compiles=True):
        return {
            "config": {
                "preset": "gemma4_31b",
                "slice_name": "v5p-8",
                "batch": 1,
                "seq_len": 4096,
                "remat": remat,
                "flash": flash,
                "block": 512,
            },
            "compiles": compiles,
            "flops_per_chip": flops,
            "tokens_per_step": 4096,
            "flops_per_token": flops * 4 / 4096,
            "total_bytes": 18.7 * 2**30,
        }

    plan_json.write_text(
        json.dumps(
            {
                "plans": [
                    rec("none", False, 157.8e12),
                    rec("decoder", False, 1e12, False),
                    rec("decoder", True, 228.5e12),
                ]
            }
        )
    )
    assert fit.load_plan_figures(plan_json, prefer={}).tflop_per_chip_per_step == pytest.approx(157.8)
    # The layout of benchmarks/plan_31b.py: records by name, and its pick per slice.
    bench_json = tmp_path / "plan_31b.json"
    bench_json.write_text(
        json.dumps(
            {
                "mfu": 0.4,
                "recommended": {"v5p-8": {"from": "splash"}},
                "results": {
                    "dense_noremat": rec("none", False, 157.8e12),
                    "splash": rec("decoder", True, 189.7e12),
                    "short": {
                        **rec("none", False, 1e12),
                        "config": {**rec("none", False, 1e12)["config"], "num_layers": 2},
                    },
                },
            }
        )
    )
    # Splash records get the kernels' FLOPs the compiler does not count (cookbook.fit._kernels).
    from cookbook.fit._kernels import splash_kernel_flops_per_chip

    kernels = splash_kernel_flops_per_chip(fit.PlanConfig.from_dict(rec("decoder", True, 0)["config"])) / 1e12
    assert kernels == pytest.approx(20.9, abs=0.1)
    assert fit.load_plan_figures(bench_json).tflop_per_chip_per_step == pytest.approx(189.7 + kernels)
    assert fit.load_plan_figures(bench_json, prefer={}).tflop_per_chip_per_step == pytest.approx(157.8)
    plan = fit.load_plan_figures(plan_json, prefer={"remat": "decoder", "flash": True})
    assert plan.tflop_per_chip_per_step == pytest.approx(228.5 + kernels) and "flash_attention True" in plan.source
    assert plan.platform == "tpu-v5p-8" and plan.tokens_per_step == 4096
    row = _cost.predict_training(plan, mfu=0.4)  # no compiler estimate in these records: the MFU row
    step_s = (228.5 + kernels) / (459 * 0.4)
    assert row["tokens_per_s"] == pytest.approx(4096 / step_s)
    assert row["train_hours"] == pytest.approx(9.2e6 / row["tokens_per_s"] / 3600)
    assert row["train_usd"] == pytest.approx(row["train_hours"] * 16.80)
    assert row["label"] == "predicted until run on a TPU"
    assert any("MFU 40%" in a for a in row["assumptions"])
    # The paper's 763 tokens/s corresponds to a low MFU on this step.
    assert 0.05 < row["paper_implied_mfu"] < 0.15
    half = _cost.predict_training(plan, mfu=0.4, real_token_fraction=0.5)
    assert half["train_hours"] == pytest.approx(2 * row["train_hours"])


def test_predicted_row_without_plan_says_so(tmp_path):
    assert fit.load_plan_figures(tmp_path / "missing.json") is None
    row = _cost.predict_training(None)
    assert row["tokens_per_s"] == 763.0
    assert "not a prediction" in row["assumptions"][0]


def test_cli_writes_table_json_and_plot(tmp_path, capsys):
    out = tmp_path / "cost.json"
    rc = harness.main(["cost", "--json", str(out), "--plot", str(tmp_path / "c.png"), "--serving-hours", "1", "24"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "$56.11" in text and "$119.23" in text and "1.821x" in text and "1.135x" in text
    data = json.loads(out.read_text())
    assert round(data["table"]["train_cost_ratio"], 2) == 2.12
    assert (tmp_path / "c.png").stat().st_size > 10_000
    assert harness.main(["cost", "--pricing", "spot"]) == 2
    assert "unknown" in capsys.readouterr().err
    # A --plan that is not there is an error, not a silent switch to the paper's measured speed.
    assert harness.main(["cost", "--plan", str(tmp_path / "none.json")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_the_default_predicted_row_is_the_compilers_estimate_of_the_recommended_layout():
    plan = fit.load_plan_figures()  # the committed layout search, v5p-8's recommendation
    rec = fit.load_plan_results("gemma4_31b")["recommended"]["v5p-8"]
    row = _cost.predict_training(plan)
    assert row["estimate"] == "compiler" and row["label"] == "the TPU compiler's estimate, until run on a TPU"
    assert row["tokens_per_s"] == pytest.approx(rec["estimated_tokens_per_s"])
    assert any("the TPU compiler's estimate" in a for a in row["assumptions"])
    # The assumed-MFU row of the same plan counts the splash kernels' FLOPs too.
    by_mfu = _cost.predict_training(plan, estimate="mfu", mfu=0.4)
    peak = core.PLATFORMS["tpu-v5p-8"].peak_bf16_tflops_per_chip
    assert by_mfu["tokens_per_s"] == pytest.approx(plan.tokens_per_step * peak * 0.4 / plan.tflop_per_chip_per_step)
    assert plan.tflop_per_chip_per_step == pytest.approx(
        rec["flops_per_token"] * plan.tokens_per_step / 4 / 1e12
        + fit.load_plan_results("gemma4_31b")["results"][rec["from"]]["kernel_flops_per_chip"] / 1e12
    )
