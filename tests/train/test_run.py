"""cookbook.train._run: a config resolved once (``prepare``), and ``ensure_trained``'s typed result."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cookbook import models, train
from cookbook.train import _run, _trainer

pytestmark = pytest.mark.jax_only


def _counting(monkeypatch, module, name):
    calls = []
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_prepare_resolves_the_base_and_its_fingerprint_once(monkeypatch, tiny_base):
    fingerprints = _counting(monkeypatch, models, "fingerprint")
    determinants = _counting(monkeypatch, _run, "result_determinants")
    config = train.train_preset("tiny").replace(base_dir=str(tiny_base))
    run = train.prepare(config)
    for _ in range(3):  # the key, the recipe and the cache directory read what was resolved
        assert run.key == _run.cache_key(config)
        assert run.recipe["base_fingerprint"] == models.fingerprint(tiny_base)
        assert run.cache_dir.name == f"tiny-{run.key}"
    # prepare: 1 each; each cache_key call above prepares again (3), each direct fingerprint call (3)
    assert (len(fingerprints), len(determinants)) == (1 + 3 + 3, 1 + 3)
    assert run.preset is config.preset and run.base_dir == tiny_base
    assert set(run.recipe) == {"recipe_version", "base_dir", "base_fingerprint", "train"}
    assert train.TrainConfig.from_dict(run.recipe["train"]) == config


def test_ensure_trained_returns_the_finished_run_typed_and_path_like(monkeypatch, tmp_path, tiny_base):
    """A run the cache holds: found without training, its config and summary on the result, and
    the preset's base fingerprinted once for the key, the recipe and the lookup together."""
    monkeypatch.setenv("COOKBOOK_CACHE", str(tmp_path / "cache"))
    config = train.train_preset("tiny").replace(base_dir=str(tiny_base))
    run = train.prepare(config)
    run.cache_dir.mkdir(parents=True)
    (run.cache_dir / "recipe.json").write_text(json.dumps(run.recipe))
    (run.cache_dir / "summary.json").write_text(json.dumps({"final_step": 7, "data_report": "fine"}))
    monkeypatch.setattr(_trainer, "train", lambda *a, **k: pytest.fail("a finished run was trained again"))
    fingerprints = _counting(monkeypatch, models, "fingerprint")

    done = train.ensure_trained(config)
    assert len(fingerprints) == 1
    assert isinstance(done, _run.TrainedRun) and isinstance(done, os.PathLike)
    assert Path(done) == run.cache_dir and str(done) == str(run.cache_dir) and done.name == run.cache_dir.name
    assert done / "recipe.json" == run.cache_dir / "recipe.json" and (done / "recipe.json").is_file()
    assert done.summary == {"final_step": 7, "data_report": "fine"}
    # the config it trained, with the base it trained on: what config_of_run reads back
    assert done.config == train.config_of_run(done) == config.replace(base_dir=str(tiny_base.resolve()))
    assert train.checkpoint_steps(done) == []  # every run-directory reader takes it as a path
    # and what a caller of the earlier Path result did with it
    assert done == run.cache_dir and done.is_dir() and done.parent == run.cache_dir.parent
    assert {done: 1}[run.cache_dir] == 1 and done.resolve() == run.cache_dir.resolve()


def test_an_unfinished_run_is_trained_into_the_cache_directory(monkeypatch, tmp_path, tiny_base):
    """ensure_trained hands train() the Run it prepared (nothing resolved twice) and its directory."""
    monkeypatch.setenv("COOKBOOK_CACHE", str(tmp_path / "cache"))
    config = train.train_preset("tiny").replace(base_dir=str(tiny_base))
    seen = {}

    def fake_train(run, run_dir, progress):
        seen.update(run=run, run_dir=run_dir)
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        (Path(run_dir) / "summary.json").write_text(json.dumps({"final_step": 1}))

    monkeypatch.setattr(_trainer, "train", fake_train)
    done = train.ensure_trained(config, progress=False)
    assert isinstance(seen["run"], _run.Run) and seen["run"].config is config
    assert seen["run_dir"] == seen["run"].cache_dir == done.path and done.summary == {"final_step": 1}
