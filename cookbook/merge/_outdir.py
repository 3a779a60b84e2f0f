"""Where a merge may write: never into an input, replacing only its own earlier outputs, renamed into place."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from cookbook.merge._checkpoint import LoraCheckpoint

_COMPLETE = ".cookbook-complete.json"
# What the completion record of an output says it is: the only directories --overwrite replaces.
_OUTPUT_KINDS = ("cookbook merge output", "cookbook PEFT adapter")


def _clean_stale_tmp(out: Path) -> None:
    """Remove temporaries of earlier merges into ``out`` whose process is gone (killed)."""
    for tmp in out.parent.glob(f".{out.name}.tmp-*"):
        try:
            pid = int((tmp / ".pid").read_text())
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(tmp, ignore_errors=True)
        except (OSError, ValueError):
            pass


def _is_own_output(path: Path) -> bool:
    """Whether ``path`` is a finished output of :func:`merge_lora` or :func:`export_peft`."""
    try:
        rec = json.loads((path / _COMPLETE).read_text())
    except (OSError, ValueError):
        return False
    # Outputs written before the record named its kind: the keys only these two records have.
    return isinstance(rec, dict) and (
        rec.get("kind") in _OUTPUT_KINDS
        or {"text_only", "max_shard_bytes"} <= rec.keys()
        or {"lora_step_dir", "layout"} <= rec.keys()
    )


def check_out_dir(
    out: str | Path, *, inputs: dict[str, str | Path | None], overwrite: bool, flag: str = "--out"
) -> Path:
    """Refuse an output directory that would cost data, before anything is read, written or removed.

    OUT may not be an input (``inputs``: what -> path), hold one, or lie inside one; the one place
    inside a LoRA run it may go is ``RUN/merged/``, where :func:`ensure_merged` caches. An existing
    OUT is replaced only with ``overwrite``, and only if it is empty or an earlier output of this
    module (its ``.cookbook-complete.json`` says so): never a training run, a base, or a project.
    """
    out = Path(out)
    where = out.resolve()
    for what, path in inputs.items():
        if path is None:
            continue
        src = Path(path).resolve()
        if where == src or where in src.parents:
            raise ValueError(
                f"{flag} {out} is or holds the {what} {path}: writing there would delete it. "
                f"Choose an {flag} outside {path}"
            )
        if src in where.parents and not (what == "LoRA run" and src / "merged" in (where, *where.parents)):
            raise ValueError(
                f"{flag} {out} lies inside the {what} {path}. Choose an {flag} outside it"
                + (f" (or under {path}/merged/)" if what == "LoRA run" else "")
            )
    if out.exists() or out.is_symlink():
        if not overwrite:
            raise FileExistsError(
                f"{flag} {out} exists; refusing to overwrite it. Pass --overwrite (overwrite=True) "
                f"to replace an earlier output of cookbook merge, or choose another {flag}"
            )
        if not (out.is_dir() and not out.is_symlink() and (_is_own_output(out) or not any(out.iterdir()))):
            raise FileExistsError(
                f"{flag} {out} exists and is not an earlier output of cookbook merge (no {_COMPLETE} "
                "naming one); refusing to replace it even with --overwrite. Choose another "
                f"{flag} or remove it yourself"
            )
    return out


def _inputs(base_dir: str | Path | None, ckpt: LoraCheckpoint | None) -> dict[str, Path | None]:
    lora = None if ckpt is None else (ckpt.run_dir or ckpt.step_dir)
    return {"base checkpoint": None if base_dir is None else Path(base_dir), "LoRA run": lora}


def _move_into_place(tmp: Path, out: Path) -> None:
    """Rename the finished ``tmp`` to ``out``, replacing an earlier output (checked by the caller):
    ``out`` is briefly absent, never half-written."""
    trash = out.parent / f".{out.name}.old-{os.getpid()}"
    if out.exists():
        out.rename(trash)
    tmp.rename(out)
    shutil.rmtree(trash, ignore_errors=True)
