"""Flax: a remat policy for the ``nnx.remat`` calls Tunix makes with none.

Checked against flax 0.12.8 and google-tunix 0.1.7.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator


@contextlib.contextmanager
def nnx_remat_with_policy(policy: str | None) -> Iterator[None]:
    """While the block runs (a step being traced), ``flax.nnx.remat`` passes ``policy`` (a
    ``jax.checkpoint_policies`` name); None: a no-op.

    Tunix 0.1.7 calls ``nnx.remat(fn, graph_updates=False)`` in every remat-wrapped forward pass and
    takes no policy, so the module attribute is swapped for a partial with the policy for the
    duration of the trace, then restored. ``tests/fit/test_remat.py`` checks the swap and that it
    ends with the block.
    """
    if policy is None:
        yield
        return
    import jax
    from flax import nnx

    original = nnx.remat
    nnx.remat = functools.partial(original, policy=getattr(jax.checkpoint_policies, policy))
    try:
        yield
    finally:
        nnx.remat = original


def checks() -> dict[str, bool]:
    import inspect

    from flax import nnx
    from tunix.models.gemma4 import model as gemma4_model

    return {
        "tunix gemma4 calls nnx.remat through the flax.nnx module attribute": callable(getattr(nnx, "remat", None))
        and "nnx.remat(" in inspect.getsource(gemma4_model),
    }
