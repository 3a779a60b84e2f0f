"""tensorboardX: imported without the torch import it attempts (Tunix's metrics logger loads it).

Checked against tensorboardX 2.6.5.
"""

from __future__ import annotations


def tensorboardx_without_torch() -> bool:
    """Import tensorboardX, which Tunix's metrics logger imports, without it importing torch.

    ``tensorboardX.writer`` runs ``try: import torch`` at import time only to accept torch
    tensors in its ``add_*`` calls (``numpy_compatible``); Tunix logs JAX/numpy scalars. Where
    torch is installed (this project's ``.venv``: transformers, PEFT, vLLM) that import costs
    2-8 s in every process that imports Tunix and never uses torch (a training run, a
    notebook kernel, a planner). ``torch`` is hidden from that one import (``sys.modules``
    entry None: ``import torch`` raises ImportError), then restored: a later ``import torch``
    loads it as usual. Imports nothing when tensorboardX or torch is already loaded, or
    tensorboardX is not installed; an import that fails is undone (Tunix's own import then says
    why, where it is needed: every entry point calls this). Returns True when it imported
    tensorboardX so.

    Checked with tensorboardX 2.6.5: its import then loads only numpy, protobuf and the
    standard library, none of which caches whether torch exists.
    """
    import importlib.util
    import sys

    if "tensorboardX" in sys.modules or "torch" in sys.modules:
        return False
    if importlib.util.find_spec("tensorboardX") is None:
        return False
    sys.modules["torch"] = None  # type: ignore[assignment]
    try:
        import tensorboardX  # noqa: F401
    except Exception:  # a broken install: left for Tunix's own import to report where it is used
        for name in [m for m in sys.modules if m == "tensorboardX" or m.startswith("tensorboardX.")]:
            del sys.modules[name]
        return False
    finally:
        if sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]
    return True
