"""Notebook 06's GPU section in one call: the GPU recipe derived from a training config, written
for ``accelerate launch``, with its summary and launch command as a typed result.

Written by hand: it composes :func:`derive_gpu_recipe`, :func:`write_gpu_recipe`, :func:`summary`
and :func:`launch_command` into what the notebook shows and records; no library has it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from cookbook import core
from cookbook.gpu._recipe import GpuCluster, GpuRecipe, derive_gpu_recipe, launch_command, write_gpu_recipe
from cookbook.gpu._recipe_cli import format_summary, summary


@dataclasses.dataclass(frozen=True, kw_only=True)
class WrittenGpuRecipe:
    """:func:`write_recipe_for`'s result: the derived recipe and the files written for it."""

    recipe: GpuRecipe
    out_dir: Path
    files: dict[str, Path]  # write_gpu_recipe's: file name -> path

    def describe(self) -> str:
        """The settings that matter, one per line, then the command a GPU user runs in ``out_dir``."""
        return f"{format_summary(self.recipe)}\n\n{launch_command(self.recipe)}"

    def results(self) -> dict[str, Any]:
        return {"gpu_recipe": summary(self.recipe), "gpu_loss_normalisation": self.recipe.loss_normalisation}


def write_recipe_for(
    config: Any, out_dir: str | Path | None = None, *, cluster: GpuCluster | None = None
) -> WrittenGpuRecipe:
    """The GPU recipe (TRL + PEFT + FSDP on ``cluster``: the paper's 2 x H100 by default) with the
    objective of ``config`` (a ``cookbook.train.TrainConfig``), written to ``out_dir``
    (:func:`write_gpu_recipe`: a new or empty directory, or one it wrote before; by default
    ``gpu_recipe`` in this run's work directory for the GPU recipe, ``core.work_dir("gpu")``)."""
    out_dir = out_dir if out_dir is not None else core.work_dir("gpu") / "gpu_recipe"
    recipe = derive_gpu_recipe(config, cluster=cluster or GpuCluster())
    files = write_gpu_recipe(out_dir, recipe)
    return WrittenGpuRecipe(recipe=recipe, out_dir=Path(out_dir), files=files)
