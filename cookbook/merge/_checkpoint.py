"""Read a Tunix LoRA checkpoint (Orbax) without building the model: shapes, recipe, tensors.

``cookbook train`` saves with Tunix's ``CheckpointManager``: ``RUN_DIR/checkpoints/<step>/``
with the item ``model_params`` (``nnx.state(model, nnx.LoRAParam)``: LoRA tensors only) and
the recipe as custom metadata (also in ``RUN_DIR/recipe.json``). Orbax describes every
tensor from metadata alone, so the merge can check shapes against the base before reading
data, and then restore one decoder layer at a time (``partial_restore``), keeping memory
flat at 31B. Orbax's PyTree format is read through Orbax; no pickle is involved.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from cookbook import lora


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoraCheckpoint:
    """A Tunix LoRA checkpoint step, described from its metadata (no tensor data read)."""

    step_dir: Path
    step: int
    rank: int
    alpha: float
    dropout: float
    preset: str | None
    base_dir: str | None
    run_dir: Path | None
    pairs: tuple[lora.LoraPair, ...]  # a/b hold Orbax ArrayMetadata (shape, dtype)
    commit_ns: int  # when Orbax finished the step; part of cache keys
    base_fingerprint: str | None = None  # the base's content hash (cookbook.models.fingerprint); None: an older run

    @property
    def layers(self) -> tuple[int, ...]:
        return tuple(sorted({p.layer for p in self.pairs if p.layer is not None}))  # model level: not a layer


def find_step_dir(path: str | Path, step: int | None = None) -> Path:
    """The step directory for a run dir, a checkpoint root, or a step dir (latest if None)."""
    path = Path(path).resolve()  # Orbax reads metadata from absolute paths only
    if (path / "model_params").is_dir():
        return path
    from cookbook import train

    root = next((path / d for d in train.CHECKPOINT_DIRS if (path / d).is_dir()), path)
    steps = (
        sorted(int(p.name) for p in root.iterdir() if p.name.isdigit() and (p / "model_params").is_dir())
        if root.is_dir()
        else []
    )
    if not steps:
        raise FileNotFoundError(
            f"No Orbax LoRA checkpoint under {path}: expected RUN_DIR/checkpoints/<step>/model_params "
            "(written by `cookbook train`)."
        )
    if step is None:
        return root / str(steps[-1])
    if step not in steps:
        raise FileNotFoundError(f"{root} has no step {step}; it has {steps}")
    return root / str(step)


def _lookup(meta: dict, *names: str) -> Any:
    """First of ``names`` at the top level, in a ``lora``/``lora_config`` section, in the
    ``train`` config (``recipe.json``'s, and its ``lora``), or in a nested ``recipe`` (``cookbook
    train`` stores ``{"recipe": {...}}`` with its checkpoints)."""
    train = meta.get("train") if isinstance(meta.get("train"), dict) else {}
    for section in (meta, meta.get("lora"), meta.get("lora_config"), train, train.get("lora")):
        if isinstance(section, dict):
            for n in names:
                if section.get(n) is not None:
                    return section[n]
    if isinstance(meta.get("recipe"), dict):
        return _lookup(meta["recipe"], *names)
    return None


class _QuietAbsl:
    """Orbax logs a warning for a file Tunix's layout never has (model_params/_CHECKPOINT_METADATA)."""

    def __enter__(self):
        import logging

        self.logger = logging.getLogger("absl")
        self.level = self.logger.level
        self.logger.setLevel(logging.ERROR)

    def __exit__(self, *exc):
        self.logger.setLevel(self.level)


def open_lora_checkpoint(
    path: str | Path,
    *,
    step: int | None = None,
    preset: str | None = None,
    rank: int | None = None,
    alpha: float | None = None,
) -> LoraCheckpoint:
    """Describe a LoRA checkpoint; explicit ``preset``/``rank``/``alpha`` override (and are checked)."""
    import orbax.checkpoint as ocp

    from cookbook import train

    step_dir = find_step_dir(path, step)
    meta_file = step_dir / "_CHECKPOINT_METADATA"
    step_meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
    meta = dict(step_meta.get("custom_metadata") or {})
    run_dir = step_dir.parent.parent if step_dir.parent.name in train.CHECKPOINT_DIRS else None
    if run_dir is not None and (run_dir / "recipe.json").is_file():
        meta = {**json.loads((run_dir / "recipe.json").read_text()), **meta}
    with _QuietAbsl():
        tree = ocp.PyTreeCheckpointer().metadata(step_dir / "model_params").item_metadata.tree
    pairs = tuple(lora.lora_pairs(tree))
    ranks = {p.rank for p in pairs}
    if len(ranks) != 1:
        raise ValueError(f"{step_dir}: LoRA pairs have different ranks {sorted(ranks)}; not supported")
    (found_rank,) = ranks
    recorded_rank = _lookup(meta, "rank", "lora_rank", "r")
    for claimed, what in ((recorded_rank, "its recipe"), (rank, "you asked for")):
        if claimed is not None and int(claimed) != found_rank:
            raise ValueError(
                f"{step_dir} holds rank-{found_rank} LoRA tensors but {what} rank {claimed}: "
                "a checkpoint from another run? Point --lora at the right run."
            )
    alpha = alpha if alpha is not None else _lookup(meta, "alpha", "lora_alpha")
    if alpha is None:
        raise ValueError(f"{step_dir}: no LoRA alpha recorded with the checkpoint; pass --alpha")
    return LoraCheckpoint(
        step_dir=step_dir,
        step=int(step_dir.name) if step_dir.name.isdigit() else 0,
        rank=found_rank,
        alpha=float(alpha),
        dropout=float(_lookup(meta, "dropout", "lora_dropout") or 0.0),
        preset=preset or _lookup(meta, "preset", "model_preset"),
        base_dir=_lookup(meta, "base_dir", "base"),
        run_dir=run_dir,
        pairs=pairs,
        commit_ns=int(step_meta.get("commit_timestamp_nsecs") or 0),
        base_fingerprint=_lookup(meta, "base_fingerprint"),
    )


def _lora_only(tree: Any) -> Any:
    """The subtree of LoRA leaves (a full-model checkpoint also holds the base weights)."""
    if isinstance(tree, dict):
        kept = {k: _lora_only(v) if "_lora_" not in str(k) else v for k, v in tree.items()}
        return {k: v for k, v in kept.items() if v != {}}
    return {}


def read_lora(
    ckpt: LoraCheckpoint, layers: list[int] | None = None, *, model_level: bool | None = None
) -> list[lora.LoraPair]:
    """Read the LoRA tensors of ``layers`` (default: all) as numpy arrays, nothing else.

    ``model_level``: also the model-level LoRA (E2B/E4B ``embedder.per_layer_model_projection``);
    default: only when reading all layers.
    """
    import jax
    import orbax.checkpoint as ocp

    ckptr = ocp.PyTreeCheckpointer()
    params = ckpt.step_dir / "model_params"
    with _QuietAbsl():
        tree = ckptr.metadata(params).item_metadata.tree
        wanted = {str(i) for i in (layers if layers is not None else ckpt.layers)}
        sub = _lora_only({"layers": {k: v for k, v in tree["layers"].items() if str(k) in wanted}})
        if layers is None if model_level is None else model_level:
            sub.update(_lora_only({k: v for k, v in tree.items() if k != "layers"}))
        args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), sub)
        restored = ckptr.restore(params, args=ocp.args.PyTreeRestore(item=sub, restore_args=args, partial_restore=True))
    return lora.lora_pairs(restored)
