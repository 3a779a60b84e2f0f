"""Run directories and the run cache: what a run holds, how to load it back, what keys it.

Run directory (a contract with ``cookbook.merge``)::

    RUN_DIR/recipe.json            base checkpoint (path and content fingerprint) and the
                                   TrainConfig (``train``: preset, LoRA, data, seed, ...)
    RUN_DIR/checkpoints/<step>/    Tunix CheckpointManager (Orbax): items ``model_params``
                                   (nnx.state(model, nnx.LoRAParam)) and ``optimizer_state``;
                                   the recipe again in ``_CHECKPOINT_METADATA``'s
                                   ``custom_metadata`` as ``{"recipe": {...}}``
    RUN_DIR/metrics.jsonl          one JSON line per logged scalar (train/eval loss, lr, ...)
    RUN_DIR/tensorboard/           the same scalars for TensorBoard
    RUN_DIR/summary.json           written when the run finishes
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from cookbook import data as data_lib
from cookbook import lora as lora_lib
from cookbook import models
from cookbook.train._config import TrainConfig

RECIPE_VERSION = 1  # bump when a change makes cached runs stale


_DONE = "summary.json"


def resolve_base_dir(config: TrainConfig) -> Path:
    if config.base_dir is not None:
        return Path(config.base_dir)

    return models.ensure_base(config.model_preset)


def train_rows(config: TrainConfig):
    """The training rows (a path or the sample task's rows)."""
    if config.train_data is not None:
        return config.train_data
    from cookbook import data

    return data.generate_rows(
        "train", n=config.num_train_rows, seed=config.seed, thinking=config.sample_task == "thinking"
    )


def eval_rows(config: TrainConfig) -> list[dict]:
    """Held-out rows, as dicts (for eval loss and for exact-match accuracy)."""
    if config.eval_data is not None:
        rows, problems = data_lib.read_rows(config.eval_data)
        return [r for r in rows if r is not None]
    from cookbook import data

    return data.generate_rows(
        "eval", n=config.num_eval_rows, seed=config.seed, thinking=config.sample_task == "thinking"
    )


def config_mesh(config: TrainConfig):
    """The training mesh, or None for one device (1 x 1)."""
    if config.mesh_fsdp * config.mesh_tp == 1:
        return None
    from cookbook import mesh as mesh_lib

    return mesh_lib.make_mesh(config.mesh_fsdp, config.mesh_tp)


def build_lora_model(config: TrainConfig, base_dir: str | Path | None = None, mesh: Any = "auto"):
    """The base model from ``base_dir`` with LoRA applied (B = 0: it still equals the base).

    ``mesh="auto"``: the config's mesh (:func:`config_mesh`; None on 1 x 1 is one device).
    """

    if isinstance(mesh, str):
        mesh = config_mesh(config)
    return base_and_lora_model(config, base_dir, mesh)[1]


def base_and_lora_model(config: TrainConfig, base_dir: str | Path | None, mesh) -> tuple[Any, Any]:
    """The base model and the LoRA model built on it (B = 0), sharing the base's arrays: what
    :func:`build_lora_model` returns, with the base kept (RL's frozen reference)."""
    base_dir = base_dir or resolve_base_dir(config)
    base = models.load_tunix_model(base_dir, config.preset, mesh=mesh, dtype=config.param_dtype)
    model = lora_lib.apply_lora(
        base,
        config.lora,
        preset=config.preset,
        mesh=mesh,
        seed=config.seed,
        remat=config.remat,
        quantize=config.quantize,
        quant_tile=config.quant_tile,
    )
    if config.flash_attention:
        models.set_flash_attention(model, config.flash_block)  # after LoRA (trap 2)
    return base, model


def load_recipe(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / "recipe.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: {run_dir} is not a `cookbook train` run directory")
    return json.loads(path.read_text())


def run_summary(run_dir: str | Path) -> dict[str, Any]:
    """What a finished run recorded (``RUN_DIR/summary.json``): final step, training time, tokens/s,
    the last train and eval losses, the data report, the checkpoints kept."""
    path = Path(run_dir) / _DONE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the run in {run_dir} has not finished (rerun `cookbook train`)")
    return json.loads(path.read_text())


def check_run_base(run_dir: str | Path) -> Path:
    """The base checkpoint ``run_dir`` trained on, refused if the weights at its recorded path
    are no longer the ones it trained on (compared by content fingerprint; a run recorded before
    fingerprints is taken at its path, as before)."""
    return _checked_base(load_recipe(run_dir), run_dir)


def _checked_base(rec: dict[str, Any], run_dir: str | Path) -> Path:
    base_dir = Path(rec["base_dir"])
    models.check_same_base(
        base_dir,
        rec,
        what=f"the run {run_dir}",
        fix=f"put that base back at {base_dir} (`cookbook base`, or the download it was), "
        "or train a new run on this one",
    )
    return base_dir


def config_of_run(run_dir: str | Path) -> TrainConfig:
    """The :class:`TrainConfig` ``run_dir`` trained (``recipe.json``), with its base's path."""
    return _config_of_recipe(load_recipe(run_dir))


def _config_of_recipe(rec: dict[str, Any]) -> TrainConfig:
    return TrainConfig.from_dict(rec["train"]).replace(base_dir=rec["base_dir"])


# Where a run keeps its Orbax checkpoints: `cookbook train` (Tunix's PeftTrainer) in checkpoints/,
# `cookbook rl` (Tunix's RLCluster, which appends the role to its root) in actor/. Both hold
# <step>/model_params with the LoRA parameters only, so everything that reads an SFT run's
# adapters reads an RL run's.
CHECKPOINT_DIRS = ("checkpoints", "actor")


def checkpoint_root(run_dir: str | Path) -> Path:
    """The directory of ``run_dir``'s checkpoint steps (``checkpoints/``, or ``actor/`` for an RL run)."""
    for name in CHECKPOINT_DIRS:
        if (Path(run_dir) / name).is_dir():
            return Path(run_dir) / name
    return Path(run_dir) / CHECKPOINT_DIRS[0]


def checkpoint_steps(run_dir: str | Path) -> list[int]:
    """Finished checkpoint steps (Orbax's temporary directories are not steps)."""
    root = checkpoint_root(run_dir)
    if not root.is_dir():
        return []
    return sorted(int(p.name) for p in root.iterdir() if p.is_dir() and p.name.isdigit())


def read_metrics(run_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """``metrics.jsonl`` as ``{name: [(step, value), ...]}`` (names like ``train/loss``).

    A resumed run appends; for a step logged twice the later value wins. A line that is not a
    whole record (the torn last line of a run killed mid-write) is skipped with a warning.
    """
    import warnings

    out: dict[str, dict[int, float]] = {}
    path = Path(run_dir) / "metrics.jsonl"
    if path.is_file():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                name, step, value = rec["name"], int(rec["step"]), float(rec["value"])
            except (ValueError, TypeError, KeyError) as e:
                warnings.warn(
                    f"{path}:{number}: skipped, not a whole metrics record ({type(e).__name__}: "
                    f"{line[:60]!r}); a run killed while writing leaves one",
                    stacklevel=2,
                )
                continue
            out.setdefault(name, {})[step] = value
    return {k: sorted(v.items()) for k, v in out.items()}


def result_determinants() -> dict[str, Any]:
    """What besides the config and the base decides a run's weights bit for bit.

    Measured on a 2-core CPU host (``cookbook train --preset tiny --max-steps 30``): the
    same command twice in two processes gives bit-identical LoRA weights, and so does the
    same command twice with 8 fake CPU devices. Across those two settings, or with the
    process pinned to one core (``taskset -c 0``), the float32 rounding differs from step
    4-5 on (the thread pool splits reductions differently), and the tiny recipe amplifies
    that chaotically: LoRA tensors 3-4% apart (relative to a tensor's largest value) after
    30 steps, up to 74% after 240, every run at 100% exact match. So the device count, the
    CPU threads, the backend and the versions of the numerical stack key the cache, and on CPU
    the LoRA gradients' formulation (``cookbook.core.compat.qwix_lora_grads_for_cpu``, since 2026-12-02:
    the same math in another summation order).
    """
    import os
    from importlib import metadata

    import jax

    versions = {}
    for pkg in ("jax", "jaxlib", "flax", "optax", "google-tunix", "qwix"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "platform": jax.default_backend(),
        "device_kind": jax.devices()[0].device_kind,
        "devices": jax.device_count(),
        "processes": jax.process_count(),
        "host_threads": threads if jax.default_backend() == "cpu" else None,
        "versions": versions,
        **({"lora_grads": "cookbook-cpu-1"} if jax.default_backend() == "cpu" else {}),
    }


def restore_lora_model(run_dir: str | Path, *, step: int | None = None, mesh: Any = "auto", dense_base: bool = False):
    """The base model with the run's LoRA weights from checkpoint ``step`` (default latest).

    ``mesh="auto"``: the mesh the run trained on. LoRA dropout is off. ``dense_base``: a QLoRA run's adapters on
    the unquantized base, which is what merging them into the bf16 checkpoint computes (the
    model as trained has the quantized base).
    """

    # For evaluation, sampling and merging: LoRA dropout off (Qwix applies it on every call,
    # so a recipe with dropout, such as 31B's, would otherwise score a noisy model).
    rec = load_recipe(run_dir)  # read once: the base is checked and the config rebuilt from it
    _checked_base(rec, run_dir)
    config = _config_of_recipe(rec).replace(lora={"dropout": 0.0})
    if dense_base:
        config = config.replace(quantize=None)
    model = build_lora_model(config, config.base_dir, mesh)
    load_lora_weights(model, run_dir, step=step)
    return model


def load_lora_weights(model, run_dir: str | Path, *, step: int | None = None) -> int:
    """Restore ``run_dir``'s LoRA weights of checkpoint ``step`` (default latest) into ``model``
    (a LoRA model of the run's preset and LoRA config) in place; the step restored."""
    from tunix.sft import checkpoint_manager

    steps = checkpoint_steps(run_dir)
    if not steps:
        raise FileNotFoundError(f"{checkpoint_root(run_dir)} holds no finished checkpoint; train first")
    if step is not None and step not in steps:
        raise ValueError(f"{run_dir} has no checkpoint {step}; it has {steps}")
    manager = checkpoint_manager.CheckpointManager(str(checkpoint_root(run_dir).resolve()))
    try:
        manager.maybe_restore(model, step=step or steps[-1], restore_only_lora_params=True)
    finally:
        manager.close()
    return step or steps[-1]


def lora_arrays(model) -> dict[str, np.ndarray]:
    """LoRA parameters as ``{"layers/0/attn/q_einsum/w_lora_a": array}`` (host copies)."""
    from flax import nnx

    state = nnx.state(model, nnx.LoRAParam)
    return {"/".join(map(str, k)): np.asarray(v.value if hasattr(v, "value") else v)
            for k, v in state.flat_state()}  # fmt: skip


def plot_loss(run_dir: str | Path, ax=None):
    """Train and eval loss curves of a run (matplotlib axes)."""
    import matplotlib.pyplot as plt

    metrics = read_metrics(run_dir)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.5))
    for name, style in (("train/loss", "-"), ("eval/loss", "o-")):
        if metrics.get(name):
            steps, values = zip(*metrics[name], strict=True)
            ax.plot(steps, values, style, label=name, markersize=4)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy (answer tokens)")
    ax.set_yscale("log")
    ax.legend()
    ax.grid(alpha=0.3)
    return ax
