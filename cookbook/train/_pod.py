"""Training on a multi-host TPU pod slice without Pathways: the commands a user runs.

Every host runs the same ``cookbook train`` command; JAX's multi-controller runtime
(``jax.distributed.initialize``, called by ``cookbook train`` on a TPU VM) finds the
coordinator and each host's id itself; each host feeds its rows of every global batch;
Orbax writes each checkpoint from all hosts together into one directory, which therefore
must be one all hosts see: a Cloud Storage bucket mounted with gcsfuse, or a Filestore /
NFS share. Written here: only the command lines (nothing of this runs on CPU).
"""

from __future__ import annotations

import dataclasses
import re
import shlex

from cookbook import core
from cookbook import mesh as mesh_lib
from cookbook.train._config import TrainConfig, cli_command


def pod_commands(
    config: TrainConfig,
    *,
    slice_name: str,
    tpu_name: str = "my-tpu",
    zone: str = "us-east5-a",
    bucket: str = "my-bucket",
    run_name: str = "run",
) -> str:
    """The shell lines that train ``config`` on the multi-host slice ``slice_name``.

    The mesh is :func:`cookbook.mesh.choose_mesh`'s for the slice's chips at the config's
    global batch (a MeshError names a batch that fits when this one does not).
    """
    s = core.get_slice(slice_name)
    choice = mesh_lib.choose_mesh(config.preset, s, config.data.batch_size)
    if not re.fullmatch(r"[A-Za-z0-9._-]+", run_name):
        raise ValueError(f"run name {run_name!r}: use letters, digits, '.', '_' or '-'")
    mount = "$HOME/bucket"  # expanded by each host's shell
    run_dir = f"{mount}/runs/{run_name}"
    on_slice = dataclasses.replace(config, mesh_fsdp=choice.fsdp, mesh_tp=choice.tp)
    train = cli_command(on_slice, out=run_dir, data=config.train_data)
    ssh = f"gcloud compute tpus tpu-vm ssh {tpu_name} --zone {zone} --worker=all --command"
    setup = (
        "git clone REPO_URL gemma4-tpu-cookbook && cd gemma4-tpu-cookbook && "
        "pip install -e '.[tpu]' -c constraints/tpu-host.txt && "
        f"cookbook base --preset {config.model_preset}"
    )
    lines = [
        f"# {config.model_preset} on {s.name}: {s.num_chips} chips on {s.num_hosts} hosts, mesh fsdp {choice.fsdp} "
        f"x tp {choice.tp} ({choice.reason})",
        "# 1. Once: the repository and its environment on every host (the TPU-host constraints pin",
        "#    the versions CI tested), and the base checkpoint (each host reads its own copy).",
        f"{ssh} {shlex.quote(setup)}",
        f"# 2. Once: one run directory all hosts see: the bucket gs://{bucket}, mounted on every host.",
        f"{ssh} {shlex.quote(f'mkdir -p {mount} && gcsfuse --implicit-dirs {bucket} {mount}')}",
        "# 3. The same command on every host; rerun it to resume from the last checkpoint.",
        f"{ssh} '{'cd gemma4-tpu-cookbook && ' + train}'",
        "#",
        f"# Layout: gs://{bucket}/runs/{run_name}/recipe.json, checkpoints/<step>/ (Orbax, written by all hosts",
        "# together: LoRA weights and optimizer state), metrics.jsonl and tensorboard/ (host 0).",
        f"# Watch: tensorboard --logdir gs://{bucket}/runs/{run_name}/tensorboard",
    ]
    return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class LocalHostsRun:
    """What :func:`train_on_local_processes` ran: the command, the mesh over all processes' devices,
    and process 0's summary of the run."""

    processes: int
    run_dir: str
    mesh: tuple[int, int]  # (fsdp, tp)
    command: list[str]
    summary: dict

    def describe(self) -> str:
        s = self.summary
        return (
            f"{self.processes} processes, mesh fsdp {self.mesh[0]} x tp {self.mesh[1]}: step {s['final_step']}, "
            f"train loss {s['final_train_loss']:.4f}\n  cookbook {shlex.join(self.command)}"
        )

    def results(self) -> dict:
        """What notebook 06 records of it."""
        return {"multihost": {"returncode": 0, "mesh": list(self.mesh), "command": self.command},
                "multihost_final_step": self.summary["final_step"]}  # fmt: skip


def train_on_local_processes(
    config: TrainConfig, out: str, *, processes: int = 2, devices_per_process: int = 4, timeout_s: float = 900.0
) -> LocalHostsRun | None:
    """Train ``config`` as ``processes`` hosts would, on this machine (``cookbook launch``).

    Each process gets ``devices_per_process`` fake CPU devices; the mesh is
    :func:`cookbook.mesh.choose_mesh`'s over all of them. None when ``processes`` is 0, or off a
    CPU host: a TPU VM's devices are its chips (:func:`pod_commands` says how a pod runs). A run
    that fails raises RuntimeError with its exit code and the command.
    """
    import json
    from pathlib import Path

    import jax

    if not processes or jax.default_backend() != "cpu":
        return None
    choice = mesh_lib.choose_mesh(config.preset, processes * devices_per_process, config.data.batch_size)
    on_hosts = dataclasses.replace(config, mesh_fsdp=choice.fsdp, mesh_tp=choice.tp)
    argv = shlex.split(cli_command(on_hosts, out=str(out)))[1:]  # drop "cookbook"
    code = mesh_lib.launch_local(
        argv, processes=processes, devices_per_process=devices_per_process, timeout_s=timeout_s
    )
    summary = Path(out) / "summary.json"
    if code != 0 or not summary.is_file():
        raise RuntimeError(
            f"the {processes}-process run exited with {code} (summary written: {summary.is_file()}); its "
            f"processes' output is above. The command: cookbook launch --processes {processes} "
            f"--devices-per-process {devices_per_process} -- {shlex.join(argv)}"
        )
    return LocalHostsRun(processes, str(out), (choice.fsdp, choice.tp), argv, json.loads(summary.read_text()))
