"""cookbook.merge._layouts: notebook 07's steps over one random-LoRA run (the run notebook 07's test
shares): the checkpoint view, merged layouts, adapters, refusals, the benchmark, and that a
layout missing the bound raises."""

import json
from pathlib import Path

import numpy as np
import pytest

from cookbook import merge, models
from cookbook.merge import _verify

REPO = Path(__file__).resolve().parents[2]
MAX_SHARD_GB = 0.002  # what tests/notebooks/test_nb_07_merge.py runs: the same cached merge


@pytest.fixture(scope="module")
def run(tiny_base) -> Path:
    return _verify.ensure_random_lora_run("tiny", rank=8, alpha=16.0)


def test_resolve_run_dir_takes_a_given_dir_or_notebook_06s_cached_run(tmp_path, monkeypatch):
    from cookbook import train

    trained = []
    monkeypatch.setattr(train, "ensure_trained", lambda config: trained.append(config) or tmp_path / "cached")
    assert merge.resolve_run_dir(str(tmp_path), "tiny") == tmp_path and not trained  # given: no training
    assert merge.resolve_run_dir("", "tiny") == tmp_path / "cached"
    assert trained == [train.train_preset("tiny")]  # notebook 06's recipe for the preset


def test_inspect_checkpoint_shows_a_local_and_the_last_global_layer(run):
    view = merge.inspect_checkpoint(run)
    last_global = max(models.get_preset("tiny").global_layers)
    assert view.shown_layers == (0, last_global) and last_global > 0
    assert {r["layer"] for r in view.shown_rows()} == {0, last_global}
    assert len(view.rows) == len(view.checkpoint.pairs) == 36
    assert view.results() == {
        "preset": "tiny",
        "rank": 8,
        "alpha": 16.0,
        "step": view.checkpoint.step,
        "lora_pairs": 36,
    }
    assert view.describe().startswith(f"step {view.checkpoint.step}: rank 8, alpha 16.0, preset tiny")


def test_merged_layouts_bound_their_shards_and_record_their_dirs(run):
    merged = merge.merged_layout(run, max_shard_gb=MAX_SHARD_GB)
    index = json.loads((merged.path / "model.safetensors.index.json").read_text())
    assert len(merged.shards) == len(set(index["weight_map"].values())) >= 3
    r = merged.results()
    assert r == {
        "merged_dir": str(merged.path),
        "num_shards": len(merged.shards),
        "largest_shard_bytes": max(s["bytes"] for s in merged.shards),
    }
    assert r["largest_shard_bytes"] <= int(MAX_SHARD_GB * 2**30)
    text = merge.merged_layout(run, text_only=True, max_shard_gb=MAX_SHARD_GB)
    assert text.architectures == ("Gemma4ForCausalLM",) and text.path != merged.path
    assert text.results() == {"text_only_dir": str(text.path)}
    assert text.describe() == f"{text.path} ['Gemma4ForCausalLM'] {text.model_type}"
    assert merge.merged_layout(run, max_shard_gb=MAX_SHARD_GB).path == merged.path  # cached


def test_peft_adapters_in_both_layouts(run):
    adapters = merge.peft_adapters(run)
    assert adapters.text != adapters.multimodal
    for d in (adapters.text, adapters.multimodal):
        assert json.loads((d / "adapter_config.json").read_text())["r"] == 8
    assert adapters.results() == {"peft_text_dir": str(adapters.text), "peft_multimodal_dir": str(adapters.multimodal)}


def test_show_refusals_says_why_and_writes_nothing(run):
    merged = merge.merged_layout(run, max_shard_gb=MAX_SHARD_GB)
    before = sorted((p.name, p.stat().st_mtime_ns) for p in merged.path.iterdir())
    refusals = merge.show_refusals(run, merged.path)
    assert str(merged.path) in refusals.existing_target
    assert "16" in refusals.wrong_rank  # the rank asked for, named
    assert refusals.describe().count("refused: ") == 2
    assert sorted((p.name, p.stat().st_mtime_ns) for p in merged.path.iterdir()) == before


def test_load_merge_bench_extrapolates_to_31b():
    path = REPO / "benchmarks" / "results" / "merge_bench.json"
    bench = merge.load_merge_bench(path)
    raw = json.loads(path.read_text())
    assert bench.runs == raw["runs"] and bench.describe() == f"machine: {raw['machine']}"
    assert bench.extrapolated == _verify.extrapolate_merge(raw, "gemma4_31b")
    assert bench.results() == {"extrapolated_31b": bench.extrapolated}
    assert bench.extrapolated["layers"] == 60


def test_verify_layouts_raises_when_a_layout_misses_the_bound(monkeypatch, tmp_path):
    from cookbook.merge import _layouts

    ckpt = type("Ckpt", (), {"base_dir": str(tmp_path), "preset": "tiny"})()
    monkeypatch.setattr(_layouts, "open_lora_checkpoint", lambda run_dir: ckpt)
    monkeypatch.setattr(_layouts, "sample_tokens", lambda preset, batch, length: np.zeros((batch, length), int))
    monkeypatch.setattr(_layouts, "tunix_lora_logits", lambda base, run, tokens: None)
    monkeypatch.setattr(_layouts, "ensure_text_only_base", lambda base, preset: base)

    def result(ok):
        diffs = {"base (no LoRA)": 1.0, "merged": 1e-5 if ok else 1e-2}
        return {"ok": ok, "bound_max_abs": 1e-4, "control_over_bound": 1e4, "diffs": diffs}

    kw = dict(merged="m", text_only="t", peft_text="pt", peft_multimodal="pm", batch=1, length=4)
    monkeypatch.setattr(_layouts, "verify_merge", lambda *a, **k: result(True))
    assert merge.verify_layouts(tmp_path, **kw).ok
    monkeypatch.setattr(_layouts, "verify_merge", lambda *a, **k: result(False))
    with pytest.raises(_layouts.MergeMismatchError, match=r"'merged': 0\.01"):
        merge.verify_layouts(tmp_path, **kw)
