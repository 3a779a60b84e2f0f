"""LoRA fine-tuning of Gemma 4 with Tunix's ``PeftTrainer``: resumable, checkpointed, logged.

:func:`train` runs a :class:`TrainConfig` into a run directory; :func:`ensure_trained`
caches a finished run under the cache root's ``runs/`` by what determines its weights,
so notebooks and tests share one training run.

Tunix does the training loop, LoRA-only gradients, gradient accumulation (optax
``MultiSteps``), eval loss and Orbax checkpointing (atomic: Orbax writes to a temporary
directory and renames it, so a killed save never shadows the last good step; rerunning
the same command restores the latest step and skips the batches already trained on).
Written here: a guard that stops on a NaN/Inf loss before a bad checkpoint is written, a
JSON-lines metrics backend, tokens/s in the progress bar, and the run cache.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from cookbook import core, models
from cookbook import data as data_lib
from cookbook import mesh as mesh_lib
from cookbook.train._config import TrainConfig, make_optimizer
from cookbook.train._run import Run, TrainedRun, prepare
from cookbook.train._runs import _DONE, build_lora_model, checkpoint_steps, read_metrics


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or Inf; the last good checkpoint is kept."""


class _JsonlBackend:
    """metrax ``LoggingBackend`` appending ``{"step", "name", "value", "time"}`` lines.

    Each line is one ``write`` to a file opened for appending, so it lands whole; a run killed
    mid-write may leave a torn last line, which is ended first so that the next record starts a
    line of its own (``read_metrics`` skips the torn one).
    """

    def __init__(self, path: Path):
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if path.stat().st_size:
            with path.open("rb") as f:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    os.write(self._fd, b"\n")

    def log_scalar(self, event: str, value, **kwargs) -> None:
        if self._fd is None or not event.strip("/").startswith(("train/", "eval/")):
            return  # jax.monitoring also reports compile times etc. to every listener
        step = int(kwargs.get("step", 0))
        value = float(np.asarray(value))
        line = {"step": step, "name": event.strip("/"), "value": value if math.isfinite(value) else str(value),
                "time": round(time.time(), 3)}  # fmt: skip
        os.write(self._fd, (json.dumps(line) + "\n").encode())

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _make_trainer_class():
    base = core.compat.tunix_trainer_with_progress(("loss", "tokens_per_s", "learning_rate"))

    class CookbookTrainer(base):
        """PeftTrainer with tokens/s in the progress bar and the recipe in checkpoints."""

        recipe: dict[str, Any] = {}

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
    kept = (
        f"the last good checkpoint, step {good[-1]}, is kept in {run_dir / 'checkpoints'}"
        if good
        else ("no checkpoint had been written yet")
    )
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

    all_finite = jax.jit(lambda s: jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(s)])))

    def before_save(step, model):
        # The loss of the step that produced these weights (Tunix buffers it, unwritten).
        loss = core.compat.last_buffered_train_loss(trainer) or 0.0
        if not math.isfinite(loss):
            raise NonFiniteLossError(_nonfinite_message(step, loss, run_dir))
        if not bool(all_finite(nnx.state(model, nnx.LoRAParam))):
            raise NonFiniteLossError(_nonfinite_message(step, float("nan"), run_dir))

    core.compat.tunix_guard_checkpoint_saves(trainer, before_save)


def _batches(it, mesh, data: data_lib.DataConfig, skip: int, token_counter: list[int]) -> Iterator[Any]:
    """Host batches -> device batches, counting real tokens; ``skip`` placeholders first.

    Tunix's trainer, after restoring step N, discards the first N batches it is given; the
    data iterator has already replayed them on the host (cheap), so placeholders stand in.
    With ``process_split="rows"`` every process holds the global batch and feeds its rows.
    """
    import jax

    global_rows = data.process_split == "rows"
    yield from itertools.repeat(None, skip)
    for batch in it:
        tokens = int(np.count_nonzero(batch["segment_ids"]))
        token_counter[0] += tokens if global_rows else tokens * jax.process_count()
        yield (
            data_lib.shard_batch(batch, mesh, data.data_axis, global_rows=global_rows) if mesh is not None else batch
        )


def _check_multiprocess(config: TrainConfig, mesh) -> None:
    """Refuse, before any step, a multi-process layout that cannot work."""
    import jax

    n = jax.process_count()
    if n == 1:
        return
    if mesh is None or mesh.devices.size != jax.device_count():
        raise ValueError(
            f"a {n}-process run needs a mesh over all {jax.device_count()} devices; the config's is "
            f"{config.mesh_fsdp}x{config.mesh_tp}. Set --mesh FSDPxTP with FSDP*TP = {jax.device_count()}"
        )
    axis = int(mesh.shape[config.data.data_axis])
    if config.data.batch_size % axis:
        raise ValueError(
            f"global batch_size={config.data.batch_size} does not divide over the mesh's "
            f"{config.data.data_axis!r} axis ({axis}); use a multiple of {axis}"
        )


def _shared_recipe(run_dir: Path, rec: dict[str, Any]) -> None:
    """Check the run directory's recipe against ``rec`` (every process), then write it (process 0).

    Every process reads before anyone writes, so all of them refuse a mismatch alike; on
    several processes ``run_dir`` must be one directory all of them see (a shared file
    system or a mounted bucket).
    """
    import jax

    recipe_path = run_dir / "recipe.json"
    if recipe_path.is_file():
        old = json.loads(recipe_path.read_text())
        # The base is compared by content: the same checkpoint at another path resumes. A run
        # recorded before fingerprints has only its base's path to compare.
        if old.get("base_fingerprint") and rec.get("base_fingerprint"):
            same_base = old["base_fingerprint"] == rec["base_fingerprint"]
        else:
            same_base = Path(old["base_dir"]).resolve() == Path(rec["base_dir"]).resolve()
        if not same_base:
            raise models.BaseMismatchError(
                f"{run_dir} was trained on the base {old['base_dir']} (fingerprint {old.get('base_fingerprint')}), "
                f"but this run's base {rec['base_dir']} holds other weights (fingerprint "
                f"{rec.get('base_fingerprint')}); resume with --base {old['base_dir']} or choose another --out"
            )
        try:  # through the config, so that a field added since (at its default) is no change
            old_cfg = TrainConfig.from_dict(old["train"]).to_dict()
        except (TypeError, ValueError):
            old_cfg = old["train"]
        old_train = {k: v for k, v in old_cfg.items() if k != "base_dir"}
        new_train = {k: v for k, v in rec["train"].items() if k != "base_dir"}
        if old_train != new_train:
            diff = {k: (old_train.get(k), v) for k, v in new_train.items() if old_train.get(k) != v}
            raise FileExistsError(
                f"{run_dir} holds a run with another config (changed: {diff}); "
                "resume it with its own settings or choose another --out"
            )
        if jax.process_count() > 1:
            _barrier("recipe read")
        return
    if jax.process_count() > 1:
        _barrier("recipe read")
    if jax.process_index() == 0:
        tmp = recipe_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(rec, indent=2))
        tmp.replace(recipe_path)
    if jax.process_count() > 1:
        _barrier("recipe written")


def _barrier(name: str) -> None:
    from jax.experimental import multihost_utils

    multihost_utils.sync_global_devices(f"cookbook.train: {name}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainResult:
    run_dir: Path
    final_step: int
    resumed_from: int
    train_time_s: float
    tokens_per_s: float
    final_train_loss: float | None
    final_eval_loss: float | None


def _commit_optimizer_state(trainer) -> None:
    """On one device, commit the optimizer state (optax's step counts, the optimizer's step) to
    the adapters' device before the first step, so that Tunix compiles its train step once.

    On a mesh Tunix does this itself (``PeftTrainer._shard_optimizer``: "If not, the _train_step
    will be compiled 2 times"), but it returns early without one (``core.commit_arrays``). A
    restored state is committed already.
    """
    from flax import nnx

    lora = [v.get_value() for _, v in nnx.state(trainer.model, nnx.LoRAParam).flat_state()]
    sharding = next((x.sharding for x in lora if getattr(x, "committed", False)), None)
    if sharding is not None:
        nnx.update(trainer.optimizer, core.commit_arrays(nnx.state(trainer.optimizer), sharding))


def train(config: TrainConfig | Run, run_dir: str | Path, *, progress: bool = True) -> TrainResult:
    """Train (or resume) ``config`` (or the :class:`Run` :func:`prepare` resolved from it) into
    ``run_dir``; returns a summary.

    Rerunning with the same ``run_dir`` resumes from its latest checkpoint; a different
    config in an existing run directory is refused.

    Raises:
      NonFiniteLossError: the loss became NaN/Inf (no checkpoint of that state is written).
      cookbook.data.DataError: too many bad rows in the data.
    """
    import contextlib

    import jax

    run = config if isinstance(config, Run) else None
    config = run.config if run is not None else config
    if config.flash_attention and jax.default_backend() != "tpu":
        raise ValueError(
            f"flash_attention=True (splash attention) runs on TPU only; this process runs on "
            f"{jax.default_backend()}. Set flash_attention=False (--no-flash) here."
        )
    run = run or prepare(config)  # before the trainer's imports: a missing base is said at once
    base_dir = run.base_dir
    import orbax.checkpoint as ocp
    from tunix.sft import metrics_logger, peft_trainer

    primary = jax.process_index() == 0
    if str(run_dir).startswith(("gs://", "s3://")):
        raise ValueError(
            f"--out {run_dir}: the run directory must be a path on this host; mount the bucket "
            "(gcsfuse --implicit-dirs BUCKET /mnt/bucket) and pass /mnt/bucket/runs/NAME"
        )
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    rec = run.recipe
    mesh = run.mesh
    _check_multiprocess(config, mesh)
    # Every process must run the same recipe (the base by content: paths may differ per host).
    mesh_lib.check_same_everywhere(json.dumps({**rec, "base_dir": None}, sort_keys=True), "training config")
    _shared_recipe(run_dir, rec)
    # Tokenise and validate the data before the model is loaded. The tokenizer is named by its
    # directory: it is loaded only if the rows are not in the tokenised rows' cache.
    tokenizer = base_dir
    host_iter, report = data_lib.make_train_iter(run.train_rows, tokenizer, config.data, report=True)
    eval_cfg = dataclasses.replace(config.data, shuffle=False, prefetch=0)
    eval_it = data_lib.make_train_iter(run.eval_rows, tokenizer, eval_cfg, num_epochs=1)
    eval_batches = list(itertools.islice(eval_it, config.eval_batches))
    model = build_lora_model(config, base_dir, mesh)
    if mesh is not None:
        eval_batches = [
            data_lib.shard_batch(b, mesh, config.data.data_axis, global_rows=config.data.process_split == "rows")
            for b in eval_batches
        ]

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
            backend_kwargs={
                "custom_backend": [
                    lambda: metrics_logger.TensorboardBackend(
                        log_dir=str(run_dir / "tensorboard"), flush_every_n_steps=10
                    ),
                    lambda: _JsonlBackend(run_dir / "metrics.jsonl"),
                ]
            },  # fmt: skip
        ),
        data_sharding_axis=(config.data.data_axis,),
        pbar_description=f"LoRA {config.model_preset}" if progress and primary else None,
    )
    context = mesh if mesh is not None else contextlib.nullcontext()
    token_counter = [0]
    listeners_before = core.compat.scalar_listeners()
    with context:
        trainer = _make_trainer_class()(model, make_optimizer(config), tcfg)
        if mesh is None:
            _commit_optimizer_state(trainer)
        trainer.recipe = rec
        trainer = trainer.with_gen_model_input_fn(data_lib.model_inputs)
        trainer.with_training_hooks(_make_hooks(None, token_counter, run_dir))
        _guard_checkpoints(trainer, run_dir)
        resumed_from = trainer.train_steps
        skip = trainer.iter_steps
        if resumed_from and primary:
            print(f"Resuming {run_dir} from checkpoint step {resumed_from} of {config.max_steps}.", flush=True)
        if resumed_from < config.max_steps:
            for _ in range(skip):  # same data order as an uninterrupted run
                next(host_iter)
        start = time.perf_counter()
        tokens_before = token_counter[0]
        try:
            if resumed_from < config.max_steps:
                with models.remat_policy(config.remat):  # decoder_dots' policy, while the step traces
                    trainer.train(_batches(host_iter, mesh, config.data, skip, token_counter), eval_batches)
        finally:
            trainer.checkpoint_manager.close()  # waits for an async save in flight
            with contextlib.suppress(Exception):
                trainer.metrics_logger.close()
            core.compat.drop_scalar_listeners_except(listeners_before)
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
    finished = trainer.train_steps >= config.max_steps
    if primary and finished and (resumed_from < config.max_steps or not (run_dir / _DONE).exists()):
        (run_dir / _DONE).write_text(json.dumps(summary, indent=2))
    return result


def ensure_trained(config: TrainConfig | Run, *, progress: bool = True) -> TrainedRun:
    """A finished run of ``config``: from the cache, or trained (resuming a partial one) now.

    Returns a :class:`TrainedRun`, a path-like of the run directory with the config it trained
    and its summary."""
    run = config if isinstance(config, Run) else prepare(config)
    # One trainer per run directory: a second caller (another notebook or test process)
    # waits, then finds the run finished.
    path = core.fill_once(
        run.cache_dir, lambda d: (d / _DONE).is_file(), lambda: train(run, run.cache_dir, progress=progress)
    )
    return TrainedRun.finished(run, path)
