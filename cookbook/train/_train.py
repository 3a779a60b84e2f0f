"""LoRA fine-tuning of Gemma 4 with Tunix's ``PeftTrainer``: resumable, checkpointed, logged.

One :class:`TrainConfig` describes a run (model preset, base checkpoint, LoRA, data,
optimizer, checkpointing); :func:`train` runs it into a run directory and
:func:`ensure_trained` caches a finished run under ``$COOKBOOK_CACHE/runs/`` by a hash of
its full config, so notebooks and tests share one training run.

Run directory (a contract with ``cookbook.merge``)::

    RUN_DIR/recipe.json            preset, base checkpoint, LoRA, train + data config, seed
    RUN_DIR/checkpoints/<step>/    Tunix CheckpointManager (Orbax): items ``model_params``
                                   (nnx.state(model, nnx.LoRAParam)) and ``optimizer_state``;
                                   the recipe again in ``_CHECKPOINT_METADATA``'s
                                   ``custom_metadata`` as ``{"recipe": {...}}``
    RUN_DIR/metrics.jsonl          one JSON line per logged scalar (train/eval loss, lr, ...)
    RUN_DIR/tensorboard/           the same scalars for TensorBoard
    RUN_DIR/summary.json           written when the run finishes

Tunix does the training loop, LoRA-only gradients, gradient accumulation (optax
``MultiSteps``), eval loss and Orbax checkpointing (atomic: Orbax writes to a temporary
directory and renames it, so a killed save never shadows the last good step; rerunning
the same command restores the latest step and skips the batches already trained on).
Written here: the config and presets, the AdamW + warm-up/cosine optimizer, a guard that
stops on a NaN/Inf loss before a bad checkpoint is written, a JSON-lines metrics backend
and tokens/s in the progress bar, greedy exact-match evaluation with Tunix's ``Sampler``,
and the run cache.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from cookbook import core, models
from cookbook import data as data_lib
from cookbook import lora as lora_lib

RECIPE_VERSION = 1  # bump when a change makes cached runs stale
_DONE = "summary.json"


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or Inf; the last good checkpoint is kept."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """A whole LoRA fine-tuning run. Every field enters the run cache key.

    Attributes:
      model_preset: name of a ``cookbook.models`` preset.
      base_dir: Hugging Face base checkpoint; None: ``cookbook.models.ensure_base(model_preset)``.
      lora: rank, alpha, dropout, targets (PEFT names).
      data: sequence length, batch size, packing, shuffling seed (``cookbook.data``).
      train_data: a .jsonl/.parquet path; None: the built-in sample task
        (``cookbook.data``, ``num_train_rows`` rows).
      eval_data: held-out rows for eval loss and accuracy; None: the sample task's eval split.
      max_steps: optimizer steps (each of ``grad_accum_steps`` micro-batches).
      learning_rate: peak learning rate, reached after ``warmup_steps`` (linear from 0),
        then cosine decay to ``learning_rate * end_lr_fraction`` at ``max_steps``.
      weight_decay: AdamW decoupled weight decay (on LoRA parameters only).
      max_grad_norm: clip the global gradient norm; None: no clipping.
      eval_every_steps / eval_batches: eval loss every N steps over this many batches.
      checkpoint_every_steps / max_checkpoints: Orbax save interval and how many to keep.
      mesh_fsdp, mesh_tp: device mesh; 1 x 1 runs on one device (fastest on CPU).
      remat: Tunix remat policy ("none", "block", "decoder"), set after LoRA is applied.
      param_dtype: model dtype (None: the preset's).
      seed: LoRA initialisation seed (data order has its own, ``data.seed``).
    """

    model_preset: str = "tiny"
    base_dir: str | None = None
    lora: lora_lib.LoraConfig = lora_lib.LoraConfig()
    data: data_lib.DataConfig = data_lib.DataConfig()
    train_data: str | None = None
    eval_data: str | None = None
    num_train_rows: int = 3000
    num_eval_rows: int = 200
    max_steps: int = 100
    learning_rate: float = 1e-4
    warmup_steps: int = 10
    end_lr_fraction: float = 0.0
    weight_decay: float = 0.001
    adam_b1: float = 0.9
    adam_b2: float = 0.999
    grad_accum_steps: int = 1
    max_grad_norm: float | None = None
    eval_every_steps: int = 50
    eval_batches: int = 4
    checkpoint_every_steps: int = 50
    max_checkpoints: int = 3
    mesh_fsdp: int = 1
    mesh_tp: int = 1
    remat: str = "none"
    param_dtype: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("max_steps", "grad_accum_steps", "eval_every_steps", "checkpoint_every_steps",
                     "max_checkpoints", "mesh_fsdp", "mesh_tp", "eval_batches"):  # fmt: skip
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"TrainConfig.{name}={value!r}: use a positive integer")
        if not 0 <= self.warmup_steps < self.max_steps:
            raise ValueError(
                f"TrainConfig.warmup_steps={self.warmup_steps} must be in [0, max_steps={self.max_steps})"
            )
        if not self.learning_rate > 0:
            raise ValueError(f"TrainConfig.learning_rate={self.learning_rate!r} must be > 0")
        if self.max_grad_norm is not None and not self.max_grad_norm > 0:
            raise ValueError(f"TrainConfig.max_grad_norm={self.max_grad_norm!r}: use > 0 or None")
        models.get_preset(self.model_preset)  # unknown names fail here, not after loading

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with some fields changed; ``lora``/``data`` take dicts of their fields."""
        for key in ("lora", "data"):
            if isinstance(changes.get(key), dict):
                changes[key] = dataclasses.replace(getattr(self, key), **changes[key])
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if isinstance(out["lora"]["targets"], tuple):
            out["lora"]["targets"] = list(out["lora"]["targets"])
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        d = dict(d)
        lora = dict(d.pop("lora"))
        if isinstance(lora.get("targets"), list):
            lora["targets"] = tuple(lora["targets"])
        return cls(lora=lora_lib.LoraConfig(**lora), data=data_lib.DataConfig(**d.pop("data")), **d)


def train_preset(name: str) -> TrainConfig:
    """The recipe for a model preset.

    ``tiny``: the CPU recipe that takes the random tiny base from ~0% to >= 80% exact
    match on the sample task in a few CPU minutes (one device; see notebook 06).
    ``gemma4_31b``: the paper's hyperparameters (rank 64, alpha 64, dropout 0.05, lr 1e-4,
    100 warm-up steps then cosine, weight decay 0.001, no clipping, micro-batch 1 x
    accumulation 8, 4,096 tokens) on a v5p-8 mesh fsdp 1 x tp 4 with per-decoder remat.
    """
    if name == "tiny":
        # Tuned on the sample task. A high learning rate suits a LoRA that learns the task
        # from nothing on a random base. Measured with this pipeline (400-step schedule,
        # warm-up 30): held-out exact match 66% at step 100, 100% at steps 200-400. This
        # shorter schedule keeps ~the learning-rate integral of those first 200 steps and
        # ends annealed: 0% -> 100% (200/200 held-out prompts), eval loss 7.48 -> 0.11,
        # ~190 CPU-seconds of training. Dropout 0: with dropout the RNG stream
        # would also have to be checkpointed for a resumed run to match an uninterrupted one.
        return TrainConfig(
            model_preset="tiny",
            lora=lora_lib.LoraConfig(rank=16, alpha=32.0, dropout=0.0),
            data=data_lib.DataConfig(seq_len=128, batch_size=8, packing=True, seed=0),
            max_steps=240,
            learning_rate=3e-3,
            warmup_steps=20,
            end_lr_fraction=0.1,
            weight_decay=0.0,
            eval_every_steps=60,
            eval_batches=2,
            checkpoint_every_steps=60,
        )
    if name == "gemma4_31b":
        return TrainConfig(
            model_preset="gemma4_31b",
            lora=lora_lib.LoraConfig(rank=64, alpha=64.0, dropout=0.05),
            data=data_lib.DataConfig(seq_len=4096, batch_size=1, packing=True, seed=0),
            num_train_rows=10_000,
            max_steps=1244,
            learning_rate=1e-4,
            warmup_steps=100,
            weight_decay=0.001,
            grad_accum_steps=8,
            max_grad_norm=None,
            eval_every_steps=200,
            eval_batches=8,
            checkpoint_every_steps=100,
            mesh_fsdp=1,
            mesh_tp=4,
            remat="decoder",
            param_dtype="bfloat16",
        )
    raise ValueError(f"No training preset {name!r}; choose 'tiny' or 'gemma4_31b'.")


# ----------------------------------------------------------------------------------------
# Pieces


def make_optimizer(config: TrainConfig):
    """AdamW with linear warm-up then cosine decay (optional global-norm clipping).

    The learning rate is injected as a hyperparameter so Tunix logs it. Gradient
    accumulation is Tunix's job (``optax.MultiSteps``), so schedules count optimizer steps.
    """
    import optax

    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=config.learning_rate,
        warmup_steps=config.warmup_steps,
        decay_steps=config.max_steps,
        end_value=config.learning_rate * config.end_lr_fraction,
    )

    def adamw(learning_rate):
        tx = optax.adamw(learning_rate, b1=config.adam_b1, b2=config.adam_b2,
                         weight_decay=config.weight_decay)  # fmt: skip
        if config.max_grad_norm is not None:
            tx = optax.chain(optax.clip_by_global_norm(config.max_grad_norm), tx)
        return tx

    return optax.inject_hyperparams(adamw)(learning_rate=schedule)


def resolve_base_dir(config: TrainConfig) -> Path:
    if config.base_dir is not None:
        return Path(config.base_dir)
    from cookbook import models

    return models.ensure_base(config.model_preset)


def load_tokenizer(base_dir: str | Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(base_dir))


def train_rows(config: TrainConfig):
    """The training rows (a path or the sample task's rows)."""
    if config.train_data is not None:
        return config.train_data
    from cookbook import data

    return data.generate_rows("train", n=config.num_train_rows, seed=config.seed)


def eval_rows(config: TrainConfig) -> list[dict]:
    """Held-out rows, as dicts (for eval loss and for exact-match accuracy)."""
    if config.eval_data is not None:
        rows, problems = data_lib.read_rows(config.eval_data)
        return [r for r in rows if r is not None]
    from cookbook import data

    return data.generate_rows("eval", n=config.num_eval_rows, seed=config.seed)


def make_mesh(config: TrainConfig):
    """The training mesh, or None for one device (1 x 1)."""
    if config.mesh_fsdp * config.mesh_tp == 1:
        return None
    from cookbook import mesh as mesh_lib

    return mesh_lib.make_mesh(config.mesh_fsdp, config.mesh_tp)


def build_lora_model(config: TrainConfig, base_dir: str | Path | None = None, mesh: Any = "auto"):
    """The base model from ``base_dir`` with LoRA applied (B = 0: it still equals the base).

    ``mesh="auto"``: the config's mesh (:func:`make_mesh`; None on 1 x 1 is one device).
    """
    from cookbook import models

    base_dir = base_dir or resolve_base_dir(config)
    if isinstance(mesh, str):
        mesh = make_mesh(config)
    model = models.load_tunix_model(base_dir, config.model_preset, mesh=mesh, dtype=config.param_dtype)
    return lora_lib.apply_lora(
        model, config.lora, preset=config.model_preset, mesh=mesh, seed=config.seed, remat=config.remat
    )


def recipe(config: TrainConfig, base_dir: str | Path) -> dict[str, Any]:
    """What ``RUN_DIR/recipe.json`` holds: enough to rebuild the model and merge it."""
    from cookbook import models

    c = config.to_dict()
    return {
        "recipe_version": RECIPE_VERSION,
        "model_preset": config.model_preset,
        "base_dir": str(Path(base_dir).resolve()),
        "base_fingerprint": models.fingerprint(base_dir),
        "lora": c["lora"],
        "data": c["data"],
        "train": c,
        "seed": config.seed,
    }


def load_recipe(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / "recipe.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: {run_dir} is not a `cookbook train` run directory")
    return json.loads(path.read_text())


def config_of_run(run_dir: str | Path) -> TrainConfig:
    rec = load_recipe(run_dir)
    return TrainConfig.from_dict(rec["train"]).replace(base_dir=rec["base_dir"])


def checkpoint_steps(run_dir: str | Path) -> list[int]:
    """Finished checkpoint steps (Orbax's temporary directories are not steps)."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(int(p.name) for p in root.iterdir() if p.is_dir() and p.name.isdigit())


class _JsonlBackend:
    """metrax ``LoggingBackend`` appending ``{"step", "name", "value", "time"}`` lines."""

    def __init__(self, path: Path):
        self._f = path.open("a", encoding="utf-8")

    def log_scalar(self, event: str, value, **kwargs) -> None:
        if self._f.closed or not event.strip("/").startswith(("train/", "eval/")):
            return  # jax.monitoring also reports compile times etc. to every listener
        step = int(kwargs.get("step", 0))
        value = float(np.asarray(value))
        line = {"step": step, "name": event.strip("/"), "value": value if math.isfinite(value) else str(value),
                "time": round(time.time(), 3)}  # fmt: skip
        self._f.write(json.dumps(line) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


def read_metrics(run_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """``metrics.jsonl`` as ``{name: [(step, value), ...]}`` (names like ``train/loss``).

    A resumed run appends; for a step logged twice the later value wins.
    """
    out: dict[str, dict[int, float]] = {}
    path = Path(run_dir) / "metrics.jsonl"
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                out.setdefault(rec["name"], {})[rec["step"]] = float(rec["value"])
    return {k: sorted(v.items()) for k, v in out.items()}


def _make_trainer_class():
    from tunix.sft import peft_trainer

    class CookbookTrainer(peft_trainer.PeftTrainer):
        """PeftTrainer with tokens/s in the progress bar and the recipe in checkpoints."""

        recipe: dict[str, Any] = {}

        @property
        def _tqdm_train_metrics(self) -> list[str]:
            return ["loss", "tokens_per_s", "learning_rate"]

        def custom_checkpoint_metadata(self) -> dict[str, Any]:
            return {"recipe": self.recipe}

    return CookbookTrainer


def _make_hooks(trainer_cls_module, token_counter: list[int], run_dir: Path):
    from tunix.sft import hooks

    class Hooks(hooks.TrainingHooks):
        """NaN/Inf stop and tokens/s."""

        def __init__(self):
            self._t = time.perf_counter()
            self._tokens = 0

        def on_train_start(self, train_ctx):
            self._t, self._tokens = time.perf_counter(), token_counter[0]
            # So the progress bar finds the metric before the first measurement.
            train_ctx.metrics_logger.log(train_ctx.metrics_prefix, "tokens_per_s", 0.0, "train", train_ctx.train_steps)

        def on_train_end(self, train_ctx):
            pass

        def on_train_step_start(self, train_ctx):
            pass

        def on_train_step_end(self, train_ctx, train_step, train_loss):
            if train_loss is not None and not np.isfinite(np.asarray(train_loss)).all():
                raise NonFiniteLossError(_nonfinite_message(train_step, float(np.asarray(train_loss)), run_dir))
            now = time.perf_counter()
            rate = (token_counter[0] - self._tokens) / max(now - self._t, 1e-9)
            self._t, self._tokens = now, token_counter[0]
            train_ctx.metrics_logger.log(train_ctx.metrics_prefix, "tokens_per_s", rate, "train", train_step)

        def on_eval_step_start(self, train_ctx):
            pass

        def on_eval_step_end(self, train_ctx, eval_loss):
            pass

    return Hooks()


def _nonfinite_message(step: int, loss: float, run_dir: Path) -> str:
    good = checkpoint_steps(run_dir)
    kept = f"the last good checkpoint, step {good[-1]}, is kept in {run_dir / 'checkpoints'}" if good else (
        "no checkpoint had been written yet")
    return (
        f"training loss became {loss} at step {step}: stopping. {kept}. Lower learning_rate "
        f"(now in recipe.json), set max_grad_norm (e.g. 1.0) or check the data, then rerun; a rerun of "
        f"the same command resumes from the last good checkpoint."
    )


def _guard_checkpoints(trainer, run_dir: Path) -> None:
    """Refuse to save non-finite LoRA weights, so a NaN never becomes the latest checkpoint."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    manager = trainer.checkpoint_manager
    original_save = manager.save
    all_finite = jax.jit(lambda s: jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(s)])))

    def save(step, model, *args, **kwargs):
        # The loss of the step that produced these weights (Tunix buffers it, unwritten).
        loss = core.last_buffered_train_loss(trainer) or 0.0
        if not math.isfinite(loss):
            raise NonFiniteLossError(_nonfinite_message(step, loss, run_dir))
        if not bool(all_finite(nnx.state(model, nnx.LoRAParam))):
            raise NonFiniteLossError(_nonfinite_message(step, float("nan"), run_dir))
        return original_save(step, model, *args, **kwargs)

    manager.save = save


def _batches(it, mesh, axis: str, skip: int, token_counter: list[int]) -> Iterator[Any]:
    """Host batches -> device batches, counting real tokens; ``skip`` placeholders first.

    Tunix's trainer, after restoring step N, discards the first N batches it is given; the
    data iterator has already replayed them on the host (cheap), so placeholders stand in.
    """
    import jax

    yield from itertools.repeat(None, skip)
    for batch in it:
        token_counter[0] += int(np.count_nonzero(batch["segment_ids"])) * jax.process_count()
        yield data_lib.shard_batch(batch, mesh, axis) if mesh is not None else batch


# ----------------------------------------------------------------------------------------
# Training


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainResult:
    run_dir: Path
    final_step: int
    resumed_from: int
    train_time_s: float
    tokens_per_s: float
    final_train_loss: float | None
    final_eval_loss: float | None


def train(config: TrainConfig, run_dir: str | Path, *, progress: bool = True) -> TrainResult:
    """Train (or resume) ``config`` into ``run_dir``; returns a summary.

    Rerunning with the same ``run_dir`` resumes from its latest checkpoint; a different
    config in an existing run directory is refused.

    Raises:
      NonFiniteLossError: the loss became NaN/Inf (no checkpoint of that state is written).
      cookbook.data.DataError: too many bad rows in the data.
    """
    import contextlib

    import jax
    import orbax.checkpoint as ocp
    from tunix.sft import metrics_logger, peft_trainer

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    base_dir = resolve_base_dir(config)
    rec = recipe(config, base_dir)
    recipe_path = run_dir / "recipe.json"
    if recipe_path.is_file():
        old = json.loads(recipe_path.read_text())
        # The base is compared by content: the same checkpoint at another path resumes.
        same_base = old.get("base_fingerprint", old["base_dir"]) == rec.get("base_fingerprint", rec["base_dir"])
        old_train = {k: v for k, v in old["train"].items() if k != "base_dir"}
        new_train = {k: v for k, v in rec["train"].items() if k != "base_dir"}
        if old_train != new_train or not same_base:
            diff = {k: (old_train.get(k), v) for k, v in new_train.items() if old_train.get(k) != v}
            raise FileExistsError(
                f"{run_dir} holds a run with another config (changed: {diff or 'the base checkpoint'}); "
                "resume it with its own settings or choose another --out"
            )
    else:
        recipe_path.write_text(json.dumps(rec, indent=2))

    mesh = make_mesh(config)
    tokenizer = load_tokenizer(base_dir)
    # Tokenise and validate the data before the model is loaded.
    host_iter, report = data_lib.make_train_iter(train_rows(config), tokenizer, config.data, report=True)
    eval_cfg = dataclasses.replace(config.data, shuffle=False, prefetch=0)
    eval_it = data_lib.make_train_iter(eval_rows(config), tokenizer, eval_cfg, num_epochs=1)
    eval_batches = list(itertools.islice(eval_it, config.eval_batches))
    model = build_lora_model(config, base_dir, mesh)
    if mesh is not None:
        eval_batches = [data_lib.shard_batch(b, mesh, config.data.data_axis) for b in eval_batches]

    tcfg = peft_trainer.TrainingConfig(
        eval_every_n_steps=config.eval_every_steps,
        max_steps=config.max_steps,
        gradient_accumulation_steps=config.grad_accum_steps if config.grad_accum_steps > 1 else None,
        checkpoint_root_directory=str((run_dir / "checkpoints").resolve()),
        # Synchronous saves: an async save can still be reading the optimizer state when the
        # next jitted step donates (reuses) its buffers, which on CPU are the very memory
        # being written, so the checkpoint could mix two steps. A LoRA checkpoint is small
        # (31B, rank 64: ~1.5 GB with Adam state), so waiting for it costs seconds per save.
        checkpointing_options=ocp.CheckpointManagerOptions(
            save_interval_steps=config.checkpoint_every_steps,
            max_to_keep=config.max_checkpoints,
            enable_async_checkpointing=False,
        ),
        metrics_logging_options=metrics_logger.MetricsLoggerOptions(
            log_dir=str(run_dir / "tensorboard"),
            flush_every_n_steps=10,
            backend_kwargs={"custom_backend": [
                lambda: metrics_logger.TensorboardBackend(log_dir=str(run_dir / "tensorboard"), flush_every_n_steps=10),
                lambda: _JsonlBackend(run_dir / "metrics.jsonl"),
            ]},  # fmt: skip
        ),
        data_sharding_axis=(config.data.data_axis,),
        pbar_description=f"LoRA {config.model_preset}" if progress else None,
    )
    context = mesh if mesh is not None else contextlib.nullcontext()
    token_counter = [0]
    listeners_before = core.scalar_listeners()
    with context:
        trainer = _make_trainer_class()(model, make_optimizer(config), tcfg)
        trainer.recipe = rec
        trainer = trainer.with_gen_model_input_fn(data_lib.model_inputs)
        trainer.with_training_hooks(_make_hooks(None, token_counter, run_dir))
        _guard_checkpoints(trainer, run_dir)
        resumed_from = trainer.train_steps
        skip = trainer.iter_steps
        if resumed_from:
            print(f"Resuming {run_dir} from checkpoint step {resumed_from} of {config.max_steps}.")
        if resumed_from < config.max_steps:
            for _ in range(skip):  # same data order as an uninterrupted run
                next(host_iter)
        start = time.perf_counter()
        tokens_before = token_counter[0]
        try:
            if resumed_from < config.max_steps:
                trainer.train(_batches(host_iter, mesh, config.data.data_axis, skip, token_counter), eval_batches)
        finally:
            trainer.checkpoint_manager.close()  # waits for an async save in flight
            with contextlib.suppress(Exception):
                trainer.metrics_logger.close()
            core.drop_scalar_listeners_except(listeners_before)
        elapsed = time.perf_counter() - start
    jax.effects_barrier()

    metrics = read_metrics(run_dir)
    result = TrainResult(
        run_dir=run_dir,
        final_step=trainer.train_steps,
        resumed_from=resumed_from,
        train_time_s=elapsed,
        tokens_per_s=(token_counter[0] - tokens_before) / max(elapsed, 1e-9),
        final_train_loss=metrics["train/loss"][-1][1] if metrics.get("train/loss") else None,
        final_eval_loss=metrics["eval/loss"][-1][1] if metrics.get("eval/loss") else None,
    )
    summary = {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(result).items()}
    summary["data_report"] = report.summary(max_listed=5)
    summary["checkpoint_steps"] = checkpoint_steps(run_dir)
    if trainer.train_steps >= config.max_steps and (resumed_from < config.max_steps or not (run_dir / _DONE).exists()):
        (run_dir / _DONE).write_text(json.dumps(summary, indent=2))
    return result


def result_determinants() -> dict[str, Any]:
    """What besides the config and the base decides a run's weights bit for bit.

    Measured on a 2-core CPU host (``cookbook train --preset tiny --max-steps 30``): the
    same command twice in two processes gives bit-identical LoRA weights, and so does the
    same command twice with 8 fake CPU devices. Across those two settings, or with the
    process pinned to one core (``taskset -c 0``), the float32 rounding differs from step
    4-5 on (the thread pool splits reductions differently), and the tiny recipe amplifies
    that chaotically: LoRA tensors 3-4% apart (relative to a tensor's largest value) after
    30 steps, up to 74% after 240, every run at 100% exact match. So the device count, the
    CPU threads, the backend and the versions of the numerical stack key the cache.
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
    return {"platform": jax.default_backend(), "device_kind": jax.devices()[0].device_kind,
            "devices": jax.device_count(), "processes": jax.process_count(),
            "host_threads": threads if jax.default_backend() == "cpu" else None, "versions": versions}


def cache_key(config: TrainConfig) -> str:
    """Hash of everything that determines the trained weights.

    The config (with the base path left out), the base checkpoint's content
    (:func:`cookbook.models.fingerprint`: the same bytes at another path reuse the run), the
    recipe version, and :func:`result_determinants`.
    """
    from cookbook import models

    cfg = config.to_dict()
    cfg.pop("base_dir")
    blob = json.dumps({"v": RECIPE_VERSION, "config": cfg, "base": models.fingerprint(resolve_base_dir(config)),
                       "runtime": result_determinants()}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def ensure_trained(config: TrainConfig, *, progress: bool = True) -> Path:
    """A finished run of ``config``: from the cache, or trained (resuming a partial one) now."""
    import fcntl


    run_dir = core.cache_root() / "runs" / f"{config.model_preset}-{cache_key(config)}"
    if (run_dir / _DONE).is_file():
        return run_dir
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    # One trainer per run directory: a second caller (another notebook or test process)
    # waits here, then finds the run finished.
    with open(run_dir.with_name(run_dir.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (run_dir / _DONE).is_file():
            train(config, run_dir, progress=progress)
    return run_dir


# ----------------------------------------------------------------------------------------
# Loading a run and evaluating


def restore_lora_model(run_dir: str | Path, *, step: int | None = None, mesh: Any = "auto"):
    """The base model with the run's LoRA weights from checkpoint ``step`` (default latest).

    ``mesh="auto"``: the mesh the run trained on.
    """
    from tunix.sft import checkpoint_manager

    config = config_of_run(run_dir)
    steps = checkpoint_steps(run_dir)
    if not steps:
        raise FileNotFoundError(f"{run_dir}/checkpoints holds no finished checkpoint; train first")
    if step is not None and step not in steps:
        raise ValueError(f"{run_dir} has no checkpoint {step}; it has {steps}")
    model = build_lora_model(config, config.base_dir, mesh)
    manager = checkpoint_manager.CheckpointManager(str((Path(run_dir) / "checkpoints").resolve()))
    try:
        got, _ = manager.maybe_restore(model, step=step or steps[-1], restore_only_lora_params=True)
    finally:
        manager.close()
    return model


def lora_arrays(model) -> dict[str, np.ndarray]:
    """LoRA parameters as ``{"layers/0/attn/q_einsum/w_lora_a": array}`` (host copies)."""
    from flax import nnx

    state = nnx.state(model, nnx.LoRAParam)
    return {"/".join(map(str, k)): np.asarray(v.value if hasattr(v, "value") else v)
            for k, v in state.flat_state()}  # fmt: skip


def make_sampler(model, tokenizer, cache_size: int):
    """A greedy-capable Tunix ``Sampler`` for a Gemma 4 model, with a KV cache of ``cache_size``."""
    from tunix.generate import sampler as sampler_lib

    cfg = model.config
    return sampler_lib.Sampler(
        transformer=model,
        tokenizer=tokenizer,
        cache_config=sampler_lib.CacheConfig(
            cache_size=cache_size, num_layers=cfg.num_layers, num_kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim
        ),
    )


def evaluate(
    model,
    tokenizer,
    rows: list[dict],
    *,
    batch_size: int = 50,
    max_new_tokens: int | None = None,
    sampler=None,
) -> dict[str, Any]:
    """Greedy-decode each row's prompt with Tunix's ``Sampler``; exact match vs its answer.

    Prompts are rendered with the chat template and generation prompt (as vLLM renders
    them); decoding stops at ``<eos>`` or ``<turn|>``. Pass ``sampler`` (from a previous
    call's ``"sampler"``) to reuse its compiled functions; its weights are refreshed.

    Returns:
      ``{"accuracy", "correct", "n", "completions", "sampler"}``.
    """
    from flax import nnx

    from cookbook import data
    from cookbook import models as tok_lib

    if not rows:
        raise ValueError("evaluate() needs at least one row")
    prompts = [tokenizer.apply_chat_template(data_lib.to_messages(r)[:-1], tokenize=False,
                                             add_generation_prompt=True) for r in rows]  # fmt: skip
    prompt_len = max(len(data_lib.prompt_ids(tokenizer, r)) for r in rows)
    if max_new_tokens is None:
        answer_len = max(len(tokenizer(data.answer_of(r), add_special_tokens=False)["input_ids"])
                         for r in rows)  # fmt: skip
        max_new_tokens = answer_len + 8
    max_prompt = 1 << (prompt_len - 1).bit_length()
    if sampler is None:
        sampler = make_sampler(model, tokenizer, cache_size=max_prompt + max_new_tokens + 1)
    else:
        sampler.transformer_state = nnx.variables(model)
    completions: list[str] = []
    for i in range(0, len(prompts), batch_size):
        chunk = prompts[i : i + batch_size]
        padded = chunk + [chunk[-1]] * (batch_size - len(chunk))  # one compiled shape
        out = sampler(padded, max_generation_steps=max_new_tokens, max_prompt_length=max_prompt,
                      eos_tokens=tok_lib.stop_token_ids(), temperature=0.0)  # fmt: skip
        completions.extend(out.text[: len(chunk)])
    correct = sum(data.exact_match(c, r) for c, r in zip(completions, rows, strict=True))
    return {"accuracy": correct / len(rows), "correct": correct, "n": len(rows),
            "completions": completions, "sampler": sampler}  # fmt: skip


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


def describe_configs(configs: list[TrainConfig]) -> str:
    """A plain-text table of the main settings of several configs, side by side."""
    rows = {
        "model preset": lambda c: c.model_preset,
        "LoRA rank / alpha / dropout": lambda c: f"{c.lora.rank} / {c.lora.alpha:g} / {c.lora.dropout:g}",
        "LoRA targets": lambda c: c.lora.targets if isinstance(c.lora.targets, str)
        else ",".join(t.removesuffix("_proj") for t in c.lora.targets),
        "peak lr, warm-up -> cosine": lambda c: f"{c.learning_rate:g}, {c.warmup_steps} -> {c.max_steps}",
        "weight decay / clip": lambda c: f"{c.weight_decay:g} / {c.max_grad_norm or 'none'}",
        "batch x accum x seq": lambda c: f"{c.data.batch_size} x {c.grad_accum_steps} x {c.data.seq_len}",
        "packing": lambda c: str(c.data.packing),
        "optimizer steps": lambda c: str(c.max_steps),
        "mesh fsdp x tp": lambda c: f"{c.mesh_fsdp} x {c.mesh_tp}",
        "remat / dtype": lambda c: f"{c.remat} / {c.param_dtype or models.get_preset(c.model_preset).dtype}",
        "eval / checkpoint every": lambda c: f"{c.eval_every_steps} / {c.checkpoint_every_steps}",
    }
    table = [["", *[c.model_preset for c in configs]]] + [[k, *[str(f(c)) for c in configs]] for k, f in rows.items()]
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) for r in table)


_CLI_FLAGS = {  # TrainConfig path -> cookbook train flag
    "max_steps": "--max-steps", "learning_rate": "--lr", "warmup_steps": "--warmup-steps",
    "weight_decay": "--weight-decay", "grad_accum_steps": "--grad-accum", "max_grad_norm": "--clip",
    "eval_every_steps": "--eval-every", "checkpoint_every_steps": "--checkpoint-every", "seed": "--seed",
    "lora.rank": "--rank", "lora.alpha": "--alpha", "lora.dropout": "--dropout",
    "data.seq_len": "--seq-len", "data.batch_size": "--batch-size",
}  # fmt: skip


def cli_command(config: TrainConfig, *, out: str, data: str | None = None) -> str:
    """The ``cookbook train`` command line that runs ``config`` (flags only where it differs
    from its preset's recipe)."""
    recipe_cfg = train_preset(config.model_preset).to_dict()
    mine = config.to_dict()
    parts = ["cookbook", "train", "--preset", config.model_preset]
    for path, flag in _CLI_FLAGS.items():
        keys = path.split(".")
        a, b = mine, recipe_cfg
        for k in keys:
            a, b = a[k], b[k]
        if a != b and a is not None:
            parts += [flag, str(a)]
    if not config.data.packing:
        parts.append("--no-packing")
    if (config.mesh_fsdp, config.mesh_tp) != (recipe_cfg["mesh_fsdp"], recipe_cfg["mesh_tp"]):
        parts += ["--mesh", f"{config.mesh_fsdp}x{config.mesh_tp}"]
    if data or config.train_data:
        parts += ["--data", data or str(config.train_data)]
    return " ".join([*parts, "--out", out])


# ----------------------------------------------------------------------------------------
# CLI


def register_cli(sub) -> None:
    p = sub.add_parser(
        "train",
        help="LoRA fine-tuning with Tunix; rerun the same command to resume",
        description=(
            "LoRA SFT with Tunix's PeftTrainer. Starts from a training preset (--recipe, default: "
            "the model preset's) and overrides what is given. Rerunning with the same --out "
            "resumes from the latest checkpoint."
        ),
    )
    p.add_argument("--preset", default="tiny", help="model preset (tiny, gemma4_31b, ...)")
    p.add_argument("--recipe", default=None, help="training preset to start from (default: --preset)")
    p.add_argument("--data", default=None, help="training data .jsonl/.parquet (default: the sample task)")
    p.add_argument("--eval-data", default=None, help="held-out rows (default: the sample task's eval split)")
    p.add_argument("--out", required=True, help="run directory (checkpoints, metrics, recipe.json)")
    p.add_argument("--base", default=None, help="base checkpoint directory (default: cookbook base)")
    p.add_argument("--max-steps", type=int)
    p.add_argument("--lr", type=float, dest="learning_rate")
    p.add_argument("--warmup-steps", type=int)
    p.add_argument("--weight-decay", type=float)
    p.add_argument("--grad-accum", type=int, dest="grad_accum_steps")
    p.add_argument("--clip", type=float, dest="max_grad_norm", help="global-norm gradient clipping")
    p.add_argument("--eval-every", type=int, dest="eval_every_steps")
    p.add_argument("--checkpoint-every", type=int, dest="checkpoint_every_steps")
    p.add_argument("--seed", type=int)
    p.add_argument("--rank", type=int)
    p.add_argument("--alpha", type=float)
    p.add_argument("--dropout", type=float)
    p.add_argument("--seq-len", type=int)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--no-packing", action="store_true", help="pad one example per row instead of packing")
    p.add_argument("--mesh", default=None, help="FSDPxTP, e.g. 1x4 (default: the recipe's)")
    p.add_argument("--eval-accuracy", type=int, default=0, metavar="N",
                   help="after training, greedy exact match on N held-out rows")  # fmt: skip
    p.set_defaults(func=_cli)


def config_from_args(args) -> TrainConfig:
    config = train_preset(args.recipe or args.preset)
    if args.recipe and args.preset != config.model_preset:
        config = config.replace(model_preset=args.preset)
    top = {k: getattr(args, k) for k in ("max_steps", "learning_rate", "warmup_steps", "weight_decay",
                                          "grad_accum_steps", "max_grad_norm", "eval_every_steps",
                                          "checkpoint_every_steps", "seed")}  # fmt: skip
    changes: dict[str, Any] = {k: v for k, v in top.items() if v is not None}
    if args.data:
        changes["train_data"] = str(Path(args.data).resolve())
    if args.eval_data:
        changes["eval_data"] = str(Path(args.eval_data).resolve())
    if args.base:
        changes["base_dir"] = str(Path(args.base).resolve())
    if args.mesh:
        try:
            fsdp, tp = (int(x) for x in args.mesh.lower().split("x"))
        except ValueError:
            raise SystemExit(f"--mesh {args.mesh!r}: write FSDPxTP, e.g. 1x4") from None
        changes.update(mesh_fsdp=fsdp, mesh_tp=tp)
    lora = {k: v for k, v in (("rank", args.rank), ("alpha", args.alpha), ("dropout", args.dropout)) if v is not None}
    if lora:
        changes["lora"] = lora
    data = {k: v for k, v in (("seq_len", args.seq_len), ("batch_size", args.batch_size)) if v is not None}
    if args.no_packing:
        data["packing"] = False
    if args.seed is not None:
        data["seed"] = args.seed
    if data:
        changes["data"] = data
    return config.replace(**changes)


def _cli(args) -> int:
    import sys

    try:
        config = config_from_args(args)
        result = train(config, args.out)
    except (NonFiniteLossError, data_lib.DataError, FileExistsError, ValueError) as e:
        print(f"cookbook train: {e}", file=sys.stderr)
        return 1
    print(json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(result).items()}))
    if args.eval_accuracy:
        model = restore_lora_model(args.out)
        rows = eval_rows(config)[: args.eval_accuracy]
        res = evaluate(model, load_tokenizer(resolve_base_dir(config)), rows)
        print(f"exact match on {res['n']} held-out rows: {res['accuracy']:.1%}")
    return 0
