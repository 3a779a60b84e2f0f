"""A training config resolved once (:class:`Run`), and a finished run as a typed result (:class:`TrainedRun`).

:func:`prepare` resolves what a :class:`TrainConfig` names: the model preset, the base checkpoint
(downloaded or written once) and its content fingerprint, what besides the config decides the
weights (:func:`result_determinants`), hence the cache key and ``recipe.json``; the mesh and the
rows when first asked for. :func:`cookbook.train._trainer.train` and :func:`cookbook.train.ensure_trained`
take it, so one ``cookbook train`` resolves each of these once.

:func:`cookbook.train.ensure_trained` returns a :class:`TrainedRun`: the run directory (it is a
path-like: ``Path(run)``, ``run / "metrics.jsonl"``, ``str(run)``), the config it trained and
what ``summary.json`` recorded, read once. Written by hand: it is this package's own contract.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from cookbook import core, models
from cookbook import data as data_lib
from cookbook import lora as lora_lib
from cookbook.train._config import TrainConfig
from cookbook.train._runs import (
    _DONE,
    RECIPE_VERSION,
    config_mesh,
    eval_rows,
    resolve_base_dir,
    result_determinants,
    train_rows,
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Run:
    """A :class:`TrainConfig` with everything it names resolved once (:func:`prepare`)."""

    config: TrainConfig  # as given (its base_dir may be None: the preset's own base)
    preset: models.ModelPreset
    base_dir: Path
    base_fingerprint: str  # the base's content hash (models.fingerprint)
    determinants: dict[str, Any]  # result_determinants(): devices, threads, versions

    @functools.cached_property
    def key(self) -> str:
        """Hash of everything that determines the trained weights (:func:`cache_key`)."""
        cfg = self.config.to_dict()
        cfg.pop("base_dir")
        parts = {"v": RECIPE_VERSION, "config": cfg, "base": self.base_fingerprint, "runtime": self.determinants}
        if self.config.quantize:
            parts["qlora_step"] = lora_lib.QLORA_STEP
        if self.config.sample_task == "thinking":  # the rows' thoughts: a new wording trains a new run
            parts["thought"] = data_lib.THOUGHT_TEMPLATE
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def cache_dir(self) -> Path:
        """Where :func:`cookbook.train.ensure_trained` keeps this run: the cache root's ``runs/``."""
        return core.cache_root() / "runs" / f"{self.config.model_preset}-{self.key}"

    @functools.cached_property
    def recipe(self) -> dict[str, Any]:
        """What ``RUN_DIR/recipe.json`` holds: the base (path and fingerprint) and the config."""
        return {
            "recipe_version": RECIPE_VERSION,
            "base_dir": str(self.base_dir.resolve()),
            "base_fingerprint": self.base_fingerprint,
            "train": self.config.to_dict(),
        }

    @functools.cached_property
    def mesh(self):
        """The training mesh, or None for one device (1 x 1)."""
        return config_mesh(self.config)

    @functools.cached_property
    def train_rows(self):
        """The training rows (a path, or the sample task's rows)."""
        return train_rows(self.config)

    @functools.cached_property
    def eval_rows(self) -> list[dict]:
        """The held-out rows, as dicts (for eval loss and exact match)."""
        return eval_rows(self.config)


def prepare(config: TrainConfig) -> Run:
    """``config`` resolved once: its preset, its base (``models.ensure_base`` when the config names
    none), the base's fingerprint and what else decides the weights."""
    base_dir = resolve_base_dir(config)
    return Run(
        config=config,
        preset=config.preset,
        base_dir=base_dir,
        base_fingerprint=models.fingerprint(base_dir),
        determinants=result_determinants(),
    )


def cache_key(config: TrainConfig) -> str:
    """Hash of everything that determines the trained weights.

    The config (with the base path left out), the base checkpoint's content
    (:func:`cookbook.models.fingerprint`: the same bytes at another path reuse the run), the
    recipe version, :func:`result_determinants`, and for a QLoRA recipe the quantized step
    (:data:`cookbook.lora.QLORA_STEP`: a run trained before the step changed is not reused; bf16
    runs keep their keys), and for the thinking sample task the wording of its thoughts
    (:data:`cookbook.data.THOUGHT_TEMPLATE`).
    """
    return prepare(config).key


def recipe(config: TrainConfig, base_dir: str | Path) -> dict[str, Any]:
    """What ``RUN_DIR/recipe.json`` holds for ``config`` trained on ``base_dir``."""
    run = Run(
        config=config,
        preset=config.preset,
        base_dir=Path(base_dir),
        base_fingerprint=models.fingerprint(base_dir),
        determinants={},
    )
    return run.recipe


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class TrainedRun(os.PathLike):
    """A finished run (:func:`cookbook.train.ensure_trained`): its directory, the config it trained
    and what its ``summary.json`` recorded. A path-like: ``Path(run)`` and ``run / name`` are in
    its directory, ``str(run)`` is the directory."""

    path: Path
    config: TrainConfig  # with base_dir the base it trained on
    summary: dict[str, Any]  # summary.json: final_step, train_time_s, tokens_per_s, losses, data_report, ...

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)

    def __truediv__(self, other: str | os.PathLike) -> Path:
        return self.path / other

    def __getattr__(self, attr: str) -> Any:
        # Everything else a pathlib.Path has (is_dir, exists, parent, resolve, glob, ...), so a
        # caller written for ``ensure_trained``'s earlier Path keeps working.
        if attr.startswith("__") or attr in ("path", "config", "summary"):
            raise AttributeError(attr)
        return getattr(self.path, attr)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TrainedRun):
            return self.path == other.path
        if isinstance(other, (str, os.PathLike)):
            return self.path == Path(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.path)

    @classmethod
    def finished(cls, run: Run, path: Path) -> TrainedRun:
        """``path`` (where ``run`` finished) as a typed result; its summary read once."""
        return cls(
            path=Path(path),
            config=run.config.replace(base_dir=str(run.base_dir.resolve())),
            summary=json.loads((Path(path) / _DONE).read_text()),
        )
