"""Where an RL run starts: an SFT recipe's run at one of its checkpoints, and the control beside it.

RL is compared against the same SFT run continued by SFT for as many steps (a later checkpoint of
that run), so both checkpoints must exist. Checked here, before the RL run, rather than when the
comparison samples them afterwards: a missing control would otherwise fail only after every RL
step had run. Written by hand: the runs (``train.ensure_trained``) and their checkpoints
(``train.checkpoint_steps``) are the cookbook's own.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from cookbook import train as train_lib


@dataclasses.dataclass(frozen=True, kw_only=True)
class SftStart:
    """An SFT run, the checkpoint RL starts from and the checkpoint that is its control."""

    recipe: str  # the SFT recipe (``train.train_preset``)
    run_dir: Path  # its run directory (the cache's, trained if it was not there)
    step: int  # the checkpoint RL starts from
    control_step: int  # ``step`` plus the RL steps: the same run, trained on by SFT instead
    kept_steps: tuple[int, ...]  # the run's finished checkpoints

    @property
    def checkpoint(self) -> tuple[Path, int]:
        """(run directory, step) of the start, as ``rl.held_out_pass`` takes it."""
        return self.run_dir, self.step

    @property
    def control_checkpoint(self) -> tuple[Path, int]:
        """(run directory, step) of the control."""
        return self.run_dir, self.control_step

    def describe(self) -> str:
        return (
            f"SFT run ({self.recipe} recipe): {self.run_dir}; checkpoints {list(self.kept_steps)}. "
            f"RL starts from step {self.step}; the control is step {self.control_step}."
        )

    def results(self) -> dict[str, Any]:
        return {"sft_step": self.step}


def sft_start(recipe: str, *, step: int, rl_steps: int) -> SftStart:
    """``recipe``'s SFT run (``train.ensure_trained(train.train_preset(recipe))``: notebook 06's for
    ``"tiny"``, trained now if the cache lacks it) at checkpoint ``step``, with its checkpoint
    ``step + rl_steps`` as the control.

    Raises ``ValueError`` naming the checkpoints the run keeps when either is not one of them.
    """
    if rl_steps < 1:
        raise ValueError(f"rl_steps={rl_steps}: RL takes at least one step")
    run_dir = Path(train_lib.ensure_trained(train_lib.train_preset(recipe)))
    kept = tuple(train_lib.checkpoint_steps(run_dir))
    for what, wanted in (("start", step), ("control", step + rl_steps)):
        if wanted not in kept:
            raise ValueError(
                f"the {recipe} SFT run has no checkpoint {wanted} (the {what}: step {step}"
                + (f" + {rl_steps} RL steps" if what == "control" else "")
                + f"); it keeps {list(kept)}: choose a start and RL steps whose start and sum are among them"
            )
    return SftStart(recipe=recipe, run_dir=run_dir, step=step, control_step=step + rl_steps, kept_steps=kept)
