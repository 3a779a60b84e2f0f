"""cookbook.harness: recorded values flow into report.md / report.html, by shape, per section.

The fixture is a small set of recorded JSONs in the shapes the notebooks record (scalars,
a loss curve, a memory table as rows, a dict of rows, a step/loss series). The values are
deliberately odd (e.g. 0.8125, 7.25e-05) so a test only passes if they reach the report.
Real notebooks feeding the report: tests/notebooks/test_nb_09_cost_comparison.py.
"""

import json

import pytest

from cookbook import cost
from cookbook.cost import _cost
from cookbook.harness import _report


def _write(run, name, values, executed=True):
    (run / f"{name}.json").write_text(json.dumps(values))
    if executed:
        (run / f"{name}.ipynb").write_text("{}")


@pytest.fixture
def run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    _write(run, "00_quickstart", {"logit_max_abs_diff": 7.25e-05, "tiny_params": 1_953_664})
    _write(
        run,
        "01_mesh_setup",
        {
            "mesh": {"fsdp": 4, "tp": 2},
            "runtime": "cpu x 8",
            "trap": {
                "error": "k_proj missing on 1 layer",
                "by_kind": {
                    "global": {"k_proj": "1/1", "v_proj": "absent"},
                    "sliding": {"k_proj": "5/5", "v_proj": "5/5"},
                },
            },
        },
    )
    _write(
        run,
        "03_sharding_fixes",
        {
            "memory_table": [
                {"what": "params", "bytes_per_device": 123456, "sharding": "fsdp,tp"},
                {"what": "lora", "bytes_per_device": 4321, "sharding": "fsdp"},
            ]
        },
    )
    _write(
        run,
        "04_remat",
        {"remat": {"none": {"temp_mib": 41.5, "step_s": 0.21}, "decoder": {"temp_mib": 12.25, "step_s": 0.29}}},
    )
    _write(
        run,
        "06_train",
        {
            "accuracy_before": 0.0,
            "accuracy_after": 0.8125,
            "loss_curve": [4.5, 3.25, 1.75, 0.375],
            "eval": {"step": [0, 50, 100], "eval_loss": [4.4, 2.2, 0.91]},
            "log": [{"step": i, "loss": 5.0 - i / 4} for i in range(10)],
            "curves": {"train": [3.0, 2.0, 1.0, 0.5], "eval": [3.1, 1.9, 1.2]},
        },
    )
    curve = cost.cost_curve(max_hours=48, points=49)
    _write(
        run,
        "09_cost_comparison",
        {
            "paper_table": _cost.comparison_table(),
            "cost_curve": curve.to_dict(),
            "predicted": _cost.predict_training(None),
            "break_even_hours": None,
        },
    )
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    for stem in (
        "00_quickstart",
        "01_mesh_setup",
        "02_lora_naming",
        "03_sharding_fixes",
        "04_remat",
        "06_train",
        "09_cost_comparison",
    ):
        (nbs / f"{stem}.ipynb").write_text("{}")
    return run, nbs


def test_values_flow_into_every_section(run):
    run_dir, nbs = run
    rep = _report.write_report(run_dir, nbs)
    md = (run_dir / "report.md").read_text()
    status = {s.section.prefix: s.status for s in rep.sections}
    assert status == {
        "00": "ok",
        "01": "ok",
        "02": "not run",
        "03": "ok",
        "04": "ok",
        "05": "absent",
        "06": "ok",
        "07": "absent",
        "08": "absent",
        "09": "ok",
        "10": "absent",
    }

    def part(prefix):
        start = md.index(f"## {prefix}. " if prefix[0].isdigit() else f"## {prefix}")
        nxt = md.find("\n## ", start + 1)
        return md[start : nxt if nxt > 0 else None]

    glance = part("At a glance")
    row06 = next(line for line in glance.splitlines() if line.startswith("| 06_train |"))
    assert "accuracy_before = 0" in row06 and "accuracy_after = 0.8125" in row06
    assert "train_cost_ratio = 2.125" in glance and "| 05 (Data pipeline) | absent |" in glance
    assert "| logit_max_abs_diff | 7.250e-05 |" in part("00")
    assert "| mesh.fsdp | 4 |" in part("01") and "| mesh.tp | 2 |" in part("01")
    # A table nested in a dict is found and drawn as a table, next to its sibling values.
    assert "| trap.error | k_proj missing on 1 layer |" in part("01")
    assert "**trap.by_kind**" in part("01") and "| global | 1/1 | absent |" in part("01")
    assert "| params | 123,456 | fsdp,tp |" in part("03") and "| lora | 4321 | fsdp |" in part("03")
    assert "| decoder | 12.25 | 0.29 |" in part("04")
    assert "| accuracy_after | 0.8125 |" in part("06")
    assert "4 points, first 4.5, last 0.375" in part("06")
    assert "eval_loss 4.4 → 0.91" in part("06")
    assert "**log**: 10 rows; loss 5 → 2.75" in part("06")
    assert "train 3 → 0.5 (4 points), eval 3.1 → 1.2 (3 points)" in part("06")
    assert "| TPU v5p-8 (paper, measured) | 3.34 | 763 | $56.11 | $6.10 |" in part("09")
    assert "predicted until run on a TPU" in part("09")
    assert "Notebook 05 (Data pipeline) is not part of this cookbook yet." in part("05")
    assert "02_lora_naming: not run" in part("02")
    for name in (
        "06_train_loss_curve",
        "06_train_eval",
        "06_train_log",
        "06_train_curves",
        "09_cost_comparison_cost_curve",
    ):
        assert f"report_files/{name}.png" in md
        assert (run_dir / "report_files" / f"{name}.png").stat().st_size > 5_000
    page = (run_dir / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 5
    assert "<td>accuracy_after</td><td>0.8125</td>" in page
    assert "<a href='06_train.ipynb'>06_train.ipynb</a>" in page
    assert not rep.errors


def test_highlights_come_first(run):
    run_dir, nbs = run
    _write(run_dir, "06_train", {"zz_other": 1, "steps": 200, "accuracy_after": 0.8125, "loss_final": 0.3})
    md = _report.write_report(run_dir, nbs).markdown
    part = md[md.index("## 06. ") :]
    assert part.index("accuracy_after") < part.index("loss_final") < part.index("steps") < part.index("zz_other")


def test_ran_but_recorded_nothing_is_an_error(run):
    run_dir, nbs = run
    (run_dir / "02_lora_naming.ipynb").write_text("{}")  # executed, no JSON
    with pytest.raises(_report.ReportError, match="02_lora_naming ran but recorded nothing"):
        _report.write_report(run_dir, nbs)
    assert "ERROR: recorded nothing" in (run_dir / "report.md").read_text()
    _write(run_dir, "02_lora_naming", {})  # an empty record is no better
    with pytest.raises(_report.ReportError, match="02_lora_naming ran but its record is empty"):
        _report.write_report(run_dir, nbs)
    rep = _report.write_report(run_dir, nbs, strict=False)
    assert len(rep.errors) == 1


def test_unknown_notebook_gets_a_generic_section(run):
    run_dir, nbs = run
    (nbs / "11_extra_step.ipynb").write_text("{}")
    _write(run_dir, "11_extra_step", {"answer": 42})
    md = _report.write_report(run_dir, nbs).markdown
    assert "## 11. Extra step" in md and "| answer | 42 |" in md


def test_training_loss_curve_read_from_the_run(run):
    run_dir, nbs = run
    train_run = run_dir.parent / "train_run"
    train_run.mkdir()
    # cookbook.train's metrics log: one JSON line per logged scalar.
    lines = [{"name": "train/loss", "step": s, "value": 6.0 / (1 + s)} for s in range(0, 50, 5)]
    lines += [{"name": "eval/loss", "step": s, "value": 5.5 / (1 + s)} for s in (0, 25, 45)]
    (train_run / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    _write(run_dir, "06_train", {"run_dir": str(train_run), "base_accuracy": 0.0, "finetuned_accuracy": 0.875})
    md = _report.write_report(run_dir, nbs).markdown
    part = md[md.index("## 06. ") : md.index("## 07. ")]
    assert "train/loss 6 → 0.1304 (10 points)" in part and "eval/loss 5.5 → 0.1196 (3 points)" in part
    assert "report_files/06_train_loss_curve.png" in part
    assert (
        part.index("| base_accuracy | 0 |")
        < part.index("| finetuned_accuracy | 0.875 |")
        < part.index("**loss curve**")
    )


def test_serving_bench_points_become_a_table_and_a_plot(run):
    run_dir, nbs = run
    (nbs / "08_serving.ipynb").write_text("{}")

    def point(label, conc, tps, ttft):
        return {
            "label": label,
            "concurrency": conc,
            "request_rate": None,
            "num_ok": 16,
            "num_requests": 16,
            "output_tok_s": tps,
            "ttft_ms": {"p50": ttft, "p90": ttft * 1.5},
            "tpot_ms": {"p50": 7.25},
            "e2e_ms": {"p50": 190.5},
            "errors": [],
        }

    bench = [
        point("vllm", 1, 72.5, 23.0),
        point("vllm", 16, 975.25, 148.0),
        point("transformers", 1, 66.5, 32.5),
        point("transformers", 16, 476.25, 230.0),
    ]
    _write(run_dir, "08_serving", {"served_accuracy": 0.995, "bench": bench})
    md = _report.write_report(run_dir, nbs).markdown
    part = md[md.index("## 08. ") : md.index("## 09. ")]
    assert "| served_accuracy | 0.995 |" in part
    assert "| vllm | 16 |  | 16/16 | 975.2 | 148 | 222 | 7.25 | 190.5 |" in part
    assert "| transformers | 1 |  | 16/16 | 66.5 | 32.5 | 48.75 | 7.25 | 190.5 |" in part
    assert (run_dir / "report_files" / "08_serving_bench.png").stat().st_size > 5_000


def test_quality_table_in_the_papers_form_collects_every_notebooks_rows(run):
    run_dir, nbs = run
    (nbs / "08_serving.ipynb").write_text("{}")
    base = {
        "model": "tiny base",
        "recipe": "-",
        "generator": "Tunix sampler",
        "problems": "sample task (200)",
        "exact_match": 0.0,
        "greedy_pass@1": 0.0,
    }
    tuned = {
        "model": "tiny + LoRA",
        "recipe": "TPU recipe (Tunix)",
        "generator": "Tunix sampler",
        "problems": "sample task (200)",
        "exact_match": 0.9875,
        "greedy_pass@1": 0.99375,
    }
    served = {
        "model": "tiny + LoRA",
        "recipe": "TPU recipe (Tunix), merged",
        "generator": "vLLM",
        "problems": "sample task (100)",
        "greedy_pass@1": 0.99375,
        "pass@1": 0.9825,
        "pass@5": 1.0,
        "n": 5,
    }
    gpu = {
        "model": "tiny + LoRA",
        "recipe": "GPU recipe (TRL + PEFT)",
        "generator": "transformers",
        "problems": "sample task (100)",
        "pass@1": 0.9725,
        "pass@5": 1.0,
        "n": 5,
        "source": "gpu_recipe_e2e.json",
    }
    _write(run_dir, "06_train", {"finetuned_accuracy": 0.9875, "quality": [base, tuned]})
    _write(run_dir, "08_serving", {"served_accuracy": 0.995, "quality": [served]})
    md = _report.write_report(run_dir, nbs).markdown
    part = md[md.index("## Quality, in the paper's form") : md.index("## 00. ")]
    assert "| tiny base | - | Tunix sampler | sample task (200) | 0.000 | 0.000 | - | - | - | 06_train |" in part
    assert (
        "| tiny + LoRA | TPU recipe (Tunix) | Tunix sampler | sample task (200) | 0.988 | 0.994 | - | - | - |" in part
    )
    assert "| vLLM | sample task (100) | - | 0.994 | 0.983 | 1.000 | 5 | 08_serving |" in part
    assert "0.641" in part and "0.697" in part and "| the paper |" in part
    assert "The GPU recipe was not trained for this run" in part
    _write(run_dir, "08_serving", {"served_accuracy": 0.995, "quality": [served, gpu]})
    part = _report.write_report(run_dir, nbs).markdown.split("## Quality, in the paper's form")[1].split("## 00. ")[0]
    assert (
        "| GPU recipe (TRL + PEFT) | transformers | sample task (100) | - | - | 0.973 | 1.000 | 5 | gpu_recipe_e2e.json |"
        in part
        and "not trained" not in part
    )
