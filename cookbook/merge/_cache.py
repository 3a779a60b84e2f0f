"""The merged checkpoint, PEFT adapter and text-only base that later notebooks reuse: built once.

Each lives in a directory keyed by what decides its bytes (the checkpoint step and its commit
time, the options, the format version), under the run (``RUN/merged/``) or the cache root. Two
processes on a cold cache (two notebooks, a test and a server) would otherwise both build it and
the second would replace the first's finished directory under whoever reads it: the build holds
the directory's lock (:func:`cookbook.core.fill_once`), so the second waits and reuses it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from cookbook import core, models
from cookbook.merge._checkpoint import LoraCheckpoint, open_lora_checkpoint
from cookbook.merge._merge import (
    DEFAULT_MAX_SHARD_BYTES,
    MERGE_FORMAT_VERSION,
    export_peft,
    merge_lora,
)


def _cache_dir(ckpt: LoraCheckpoint, kind: str, options: dict) -> Path:
    key = hashlib.sha256(
        json.dumps(
            {"ckpt": str(ckpt.step_dir.resolve()), "commit": ckpt.commit_ns, "v": MERGE_FORMAT_VERSION, **options},
            sort_keys=True,
        ).encode()
    ).hexdigest()[:10]
    root = ckpt.run_dir if ckpt.run_dir is not None else core.cache_root() / "merged"
    return root / "merged" / f"step{ckpt.step}-{kind}-{key}"


def ensure_merged(
    run_dir: str | Path,
    *,
    text_only: bool = False,
    step: int | None = None,
    base_dir: str | Path | None = None,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    progress: bool = True,
) -> Path:
    """The merged checkpoint of a training run, merged once and cached under the run dir."""
    ckpt = open_lora_checkpoint(run_dir, step=step)
    base_dir = Path(base_dir or ckpt.base_dir or models.ensure_base(ckpt.preset or "tiny"))
    out = _cache_dir(
        ckpt,
        "text" if text_only else "multimodal",
        {"text_only": text_only, "max_shard_bytes": max_shard_bytes, "base": str(base_dir)},
    )
    return core.fill_once(
        out,
        models.is_complete,
        lambda: merge_lora(
            base_dir,
            ckpt,
            out,
            text_only=text_only,
            max_shard_bytes=max_shard_bytes,
            overwrite=out.exists(),
            progress=progress,
        ),
    )


def ensure_text_only_base(base_dir: str | Path, preset: str | models.ModelPreset) -> Path:
    """The base checkpoint in the text-only ``Gemma4ForCausalLM`` layout, converted once."""
    p = models.get_preset(preset)
    base_dir = Path(base_dir)
    if not any(k.startswith("model.language_model.") for k in models.read_checkpoint_index(base_dir)):
        return base_dir  # already text-only
    key = hashlib.sha256(f"{base_dir.resolve()}|{MERGE_FORMAT_VERSION}".encode()).hexdigest()[:10]
    out = core.cache_root() / "text_only" / f"{base_dir.name}-{key}"
    return core.fill_once(
        out,
        models.is_complete,
        lambda: merge_lora(base_dir, None, out, text_only=True, preset=p.name, overwrite=out.exists(), progress=False),
    )


def ensure_peft(run_dir: str | Path, *, layout: str = "text", step: int | None = None) -> Path:
    """The run's PEFT adapter, exported once and cached under the run dir."""
    ckpt = open_lora_checkpoint(run_dir, step=step)
    out = _cache_dir(ckpt, f"peft-{layout}", {"layout": layout})
    return core.fill_once(
        out, models.is_complete, lambda: export_peft(ckpt, out, layout=layout, overwrite=out.exists())
    )
