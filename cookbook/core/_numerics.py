"""Bounds for parity checks, derived from the float32 noise measured on the machine running them.

Two float32 implementations of one function (Tunix and transformers on the same weights; a
merged checkpoint and the LoRA it came from) never agree exactly. Each sits some distance
from the exact value, and that distance depends on the CPU, its threads, the sequence
length and the weights: on one 2-core machine transformers' float32 logits of the ``tiny``
model at 133 tokens are 1.24e-4 from its own float64 result, and an absolute bound of 1e-4
picked elsewhere failed there. So no bound here is a constant. Each check measures the
*floor* on its own inputs: the reference implementation's float32 result against the same
implementation in float64 (cheap at CPU sizes). Then, by the triangle inequality,

    |candidate32 - reference32| <= |candidate32 - exact| + |reference32 - exact|
                                 ~= 2 x floor      (when both are float32 of the same function)

where the candidate's own float32 error is taken to be of the reference's size (measured on
``tiny``: Tunix with float64 weights moves its logits by 1.2e-4, transformers' float32 error
is 1.2-1.8e-4). :data:`PARITY_FACTOR` doubles that once more for margin. A real bug (an
unmerged projection, a swapped norm, the base without its LoRA) is orders of magnitude past
the bound, which is why every check keeps a control that must exceed it by
:data:`CONTROL_SEPARATION`.

Written here because no library offers it: numpy's ``allclose`` wants the tolerance as input.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np

# torch's intra-op threads for a reference computation (see torch_threads).
REFERENCE_TORCH_THREADS = 1

# 2 for two float32 implementations each within the floor of the exact value, x2 margin.
PARITY_FACTOR = 4.0
# A control (the base without LoRA, a perturbed weight) must be at least this many bounds away.
CONTROL_SEPARATION = 100.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Float32Floor:
    """How far the reference implementation's float32 result is from its float64 result."""

    max_abs: float  # max |ref32 - ref64|
    mean_abs: float  # mean |ref32 - ref64|
    scale: float  # max |ref64|, for a sense of the relative size

    @property
    def max_bound(self) -> float:
        return PARITY_FACTOR * self.max_abs

    @property
    def mean_bound(self) -> float:
        return PARITY_FACTOR * self.mean_abs

    def as_dict(self) -> dict[str, float]:
        return {
            "floor_max_abs": self.max_abs,
            "floor_mean_abs": self.mean_abs,
            "scale": self.scale,
            "bound_max_abs": self.max_bound,
            "bound_mean_abs": self.mean_bound,
        }


def float32_floor(ref32: Any, ref64: Any) -> Float32Floor:
    """The floor of a check: the same reference computed in float32 and in float64."""
    a, b = np.asarray(ref32, np.float64), np.asarray(ref64, np.float64)
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"float32 and float64 results must have one non-empty shape; got {a.shape} and {b.shape}")
    diff = np.abs(a - b)
    return Float32Floor(max_abs=float(diff.max()), mean_abs=float(diff.mean()), scale=float(np.abs(b).max()))


def merge_floors(*floors: Float32Floor) -> Float32Floor:
    """The largest of several floors (several references checked against one bound)."""
    return Float32Floor(
        max_abs=max(f.max_abs for f in floors),
        mean_abs=max(f.mean_abs for f in floors),
        scale=max(f.scale for f in floors),
    )


def compare(candidate: Any, reference: Any, floor: Float32Floor) -> dict[str, Any]:
    """Max and mean |candidate - reference| against the floor's bounds.

    Returns a dict for notebooks and tests: the differences, the bounds, how many bounds
    the difference is (``max_over_bound``; below 1 passes) and ``ok``.
    """
    a, b = np.asarray(candidate, np.float64), np.asarray(reference, np.float64)
    if a.shape != b.shape:
        raise ValueError(f"candidate shape {a.shape} != reference shape {b.shape}")
    diff = np.abs(a - b)
    out = {
        "max_abs_diff": float(diff.max()),
        "mean_abs_diff": float(diff.mean()),
        "bound_max_abs": floor.max_bound,
        "bound_mean_abs": floor.mean_bound,
        "max_over_bound": float(diff.max()) / floor.max_bound if floor.max_bound else float("inf"),
    }
    out["ok"] = bool(out["max_abs_diff"] <= floor.max_bound and out["mean_abs_diff"] <= floor.mean_bound)
    return out


def check_separated(control: dict[str, Any], name: str = "control") -> None:
    """Raise unless ``control`` (a :func:`compare` result) is :data:`CONTROL_SEPARATION` bounds away.

    A bound that a deliberately wrong model also meets proves nothing.
    """
    if not control["max_over_bound"] >= CONTROL_SEPARATION:
        raise AssertionError(
            f"{name} differs by {control['max_abs_diff']:.3g}, only {control['max_over_bound']:.3g} x the bound "
            f"{control['bound_max_abs']:.3g}: the check cannot tell right from wrong here (needs "
            f">= {CONTROL_SEPARATION:g} x). Use longer sequences or a control that changes the model more."
        )


def summation_bound(n_terms: int, sum_abs: float, dtype: Any = np.float32) -> float:
    """Worst-case rounding error of a float sum of ``n_terms`` values (and their products).

    Higham's bound for recursive summation in any order, ``(n - 1) u sum|x|`` with unit
    roundoff ``u = eps / 2``; ``n eps sum|x|`` also covers rounding each term (a square, a
    product) once. For checks whose exact value is known in closed form: a reduction over a
    device mesh may add in any order.
    """
    return float(n_terms) * float(np.finfo(dtype).eps) * float(sum_abs)  # in float64, whatever dtype


@contextlib.contextmanager
def torch_threads(threads: int | None = REFERENCE_TORCH_THREADS) -> Iterator[None]:
    """Run torch's CPU kernels on ``threads`` intra-op threads inside the block (None: as they are).

    A reference must give the same numbers in every process, or the floor measured from it
    moves. With two threads it does not: transformers' float32 logits of the ``tiny_e2b``
    twin (128 tokens, torch 2.13 CPU, this 2-core machine) came out three ways across fresh
    processes, 1.05e-4, 7.4e-4 or 1.83e-2 from its float64 logits (about one process in
    four off the first; the first divergence is inside layer 0's attention), and a 1.83e-2
    floor put the parity check's swapped-norm control at 3.9 bounds instead of ~700 (a CI
    failure). On one thread, 14 of 14 processes gave the same logits, 1.05e-4 from float64 (and
    12 of 12 pinned to one core with ``taskset``).
    Float64 was the same in every process either way.
    """
    if threads is None:
        yield
        return
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
