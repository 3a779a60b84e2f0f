"""Notebook 06's training sections, one call each: which size fits this runtime, the run and its
loss curves, what decides its weights, the rerun that resumes it, and the same run on several
hosts; each returns a typed result that says what it found and what the notebook records.

Written by hand: these compose this package's own functions (``ensure_trained``, ``run_summary``,
``read_metrics``, ``train``, ``train_on_local_processes``, ``pod_commands``) and
``cookbook.fit.size_advice`` into the steps the notebook shows; no library has them.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from cookbook import core
from cookbook.train._config import TrainConfig, train_preset
from cookbook.train._pod import LocalHostsRun, pod_commands, train_on_local_processes
from cookbook.train._runs import checkpoint_steps, plot_loss, read_metrics, result_determinants, run_summary
from cookbook.train._trainer import ensure_trained, train

# ------------------------------------------------------------------------------------
# Which size fits this runtime


@dataclasses.dataclass(frozen=True, kw_only=True)
class RuntimeAdvice:
    """:func:`runtime_advice`'s verdict: ``fit.size_advice`` for the tiny default (None for a chosen size)."""

    preset: str
    advice: str | None

    def describe(self) -> str:
        if self.advice is None:
            return f"MODEL_PRESET = {self.preset!r} is chosen: no size advice (it is given for the tiny default)"
        return self.advice

    def results(self) -> dict[str, Any]:
        return {}  # advice for the reader only


def runtime_advice(preset: str, runtime=None) -> RuntimeAdvice:
    """For the tiny default ``preset``: the largest released size whose LoRA step fits this runtime
    (``cookbook.fit.size_advice``: the committed runtime table on a TPU; on CPU, that tiny runs).
    A preset other than tiny was chosen by the user: nothing to advise, and JAX is not started."""
    if preset != "tiny":
        return RuntimeAdvice(preset=preset, advice=None)
    from cookbook import fit

    return RuntimeAdvice(preset=preset, advice=fit.size_advice(runtime))


# ------------------------------------------------------------------------------------
# The run: trained or reused from the cache, its summary and loss curves

SUMMARY_SHOWN = ("final_step", "train_time_s", "tokens_per_s", "final_train_loss", "final_eval_loss")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunOverview:
    """:func:`run_overview`'s finished run: where it is, what it recorded, its checkpoints and metrics."""

    run_dir: Path
    model_preset: str
    max_steps: int  # the config's
    summary: dict[str, Any]  # summary.json
    checkpoints: list[int]
    metrics: dict[str, list[tuple[int, float]]]  # metrics.jsonl: {name: [(step, value), ...]}

    def describe(self) -> str:
        """The run directory, the summary's headline figures, the checkpoints kept, the data report."""
        return "\n".join(
            [
                str(self.run_dir),
                str({k: self.summary[k] for k in SUMMARY_SHOWN}),
                f"checkpoints: {self.checkpoints}",
                str(self.summary["data_report"]),
            ]
        )

    def plot_loss(self, ax=None):
        """Train and eval loss per step (:func:`cookbook.train.plot_loss`), titled; the matplotlib axes."""
        ax = plot_loss(self.run_dir, ax)
        ax.set_title(f"LoRA on {self.model_preset}: answer-token cross-entropy")
        return ax

    def results(self) -> dict[str, Any]:
        """What notebook 06 records of the run: its directory, schedule, first and last losses, speed."""
        return {
            "run_dir": str(self.run_dir),
            "max_steps": self.max_steps,
            "first_train_loss": self.metrics["train/loss"][0][1],
            "final_train_loss": self.metrics["train/loss"][-1][1],
            "final_eval_loss": self.metrics["eval/loss"][-1][1],
            "train_time_s": self.summary["train_time_s"],
            "tokens_per_s": self.summary["tokens_per_s"],
        }


def run_overview(config: TrainConfig, *, progress: bool = True) -> RunOverview:
    """``config`` trained (:func:`cookbook.train.ensure_trained`: from the run cache when it was
    trained before), with what its run directory holds: ``summary.json``, the checkpoint steps and
    ``metrics.jsonl``."""
    run_dir = Path(ensure_trained(config, progress=progress))
    return RunOverview(
        run_dir=run_dir,
        model_preset=config.model_preset,
        max_steps=config.max_steps,
        summary=run_summary(run_dir),
        checkpoints=checkpoint_steps(run_dir),
        metrics=read_metrics(run_dir),
    )


# ------------------------------------------------------------------------------------
# What decides the weights, and the rerun that resumes


@dataclasses.dataclass(frozen=True, kw_only=True)
class Reproducibility:
    """:func:`reproducibility`: what besides the config and the base decides a run's weights bit for bit."""

    determinants: dict[str, Any]  # result_determinants(): devices, threads, backend, versions

    def describe(self) -> str:
        return json.dumps(self.determinants)

    def results(self) -> dict[str, Any]:
        return {"reproducible_given": self.determinants}


def reproducibility() -> Reproducibility:
    """This process's :func:`cookbook.train.result_determinants` (they key the run cache too)."""
    return Reproducibility(determinants=result_determinants())


@dataclasses.dataclass(frozen=True, kw_only=True)
class Rerun:
    """:func:`rerun`'s result: the step it resumed from and the step it ended at."""

    resumed_from: int
    final_step: int
    max_steps: int

    def describe(self) -> str:
        return f"resumed from step {self.resumed_from}, now at step {self.final_step} of {self.max_steps}"

    def results(self) -> dict[str, Any]:
        return {"rerun_resumed_from": self.resumed_from}


def rerun(config: TrainConfig, run_dir: str | Path, *, progress: bool = True) -> Rerun:
    """The training command again on ``run_dir`` (:func:`cookbook.train._trainer.train`): it restores the
    latest checkpoint and skips the batches trained on; on a finished run nothing is left to do."""
    result = train(config, Path(run_dir), progress=progress)
    return Rerun(resumed_from=result.resumed_from, final_step=result.final_step, max_steps=config.max_steps)


# ------------------------------------------------------------------------------------
# More than one host: local processes playing hosts, and a pod's commands


@dataclasses.dataclass(frozen=True, kw_only=True)
class Multihost:
    """:func:`multihost`'s result: the local multi-process run (None where it did not run) and
    the commands that train the paper's recipe on a multi-host slice."""

    processes: int  # as asked
    run: LocalHostsRun | None
    pod_commands: str

    def describe(self) -> str:
        if self.run is not None:
            ran = self.run.describe()
        elif not self.processes:
            ran = "the local multi-process run is skipped (0 processes asked)"
        else:
            ran = "the local multi-process run is for a CPU host (a TPU VM's devices are its chips: see below)"
        return f"{ran}\n{self.pod_commands}"

    def results(self) -> dict[str, Any]:
        return self.run.results() if self.run is not None else {}


def multihost(
    config: TrainConfig,
    out: str | Path | None = None,
    *,
    processes: int,
    steps: int,
    pod_preset: str = "gemma4_31b",
    pod_slice: str = "v5p-32",
    pod_batch_size: int = 4,
) -> Multihost:
    """``config`` shortened to ``steps`` optimizer steps (one warm-up step) and trained into ``out``
    by ``processes`` local processes playing hosts (:func:`cookbook.train._pod.train_on_local_processes`;
    none with 0 processes or off a CPU host), and :func:`cookbook.train._pod.pod_commands` for
    ``pod_preset``'s recipe at a global batch of ``pod_batch_size`` on ``pod_slice``. ``out``
    defaults to ``two-hosts`` in this run's work directory for training (``core.work_dir("train")``)."""
    out = out if out is not None else core.work_dir("train") / "two-hosts"
    run = train_on_local_processes(config.replace(max_steps=steps, warmup_steps=1), out, processes=processes)
    pod = train_preset(pod_preset).replace(data={"batch_size": pod_batch_size})
    return Multihost(processes=processes, run=run, pod_commands=pod_commands(pod, slice_name=pod_slice))
