"""What the batches cost and whether the host keeps up: padding against packing, sharded batches on a
mesh and their resume, and the host's tokens/s against what the chips consume (notebook 05).

Written by hand over the pipeline's own iterators (``_pipeline``); the mesh comes from
``cookbook.mesh`` and the chips' speed from ``cookbook.fit``'s planner.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from cookbook.data._config import DataConfig
from cookbook.data._pipeline import iter_batches, measure_throughput, real_token_fraction
from cookbook.data._tokenize import Example

# ------------------------------------------------------------------------------------
# Static shapes: padding or packing


@dataclasses.dataclass(frozen=True, kw_only=True)
class PackingEfficiency:
    """:func:`packing_efficiency`'s result: real-token fractions of one epoch, and its batches."""

    num_examples: int
    seq_len: int
    longest: int  # tokens of the data's longest example
    padded: list[dict]  # one epoch padded to seq_len
    packed: list[dict]  # one epoch packed into seq_len
    real_fraction_padded: float
    real_fraction_packed: float
    real_fraction_padded_to_longest: float

    def describe(self) -> str:
        """The data's longest example, then the three real-token fractions, one line each."""
        rows = (
            (f"padding to {self.seq_len}", self.real_fraction_padded),
            (f"packing into {self.seq_len}", self.real_fraction_packed),
            (f"padding to {self.longest} (this data's longest)", self.real_fraction_padded_to_longest),
        )
        head = f"{self.num_examples} examples, the longest {self.longest} tokens"
        return "\n".join([head, *(f"{name:>40}: {frac:.1%} real tokens" for name, frac in rows)])

    def plot(self):
        """The first padded and packed batch (:func:`plot_batch_layout`)."""
        return plot_batch_layout(self.padded[0], self.packed[0])

    def results(self) -> dict[str, Any]:
        """What notebook 05 records: ``seq_len`` and the real-token fractions."""
        return {
            "seq_len": self.seq_len,
            "real_fraction_padded": self.real_fraction_padded,
            "real_fraction_packed": self.real_fraction_packed,
            "real_fraction_padded_to_longest": self.real_fraction_padded_to_longest,
        }


def packing_efficiency(examples: Sequence[Example], config: DataConfig) -> PackingEfficiency:
    """Real-token fraction of one epoch of ``examples`` padded to ``config.seq_len``, packed into it,
    and padded to the data's longest example (``config``'s batch size and seed): the share of each
    step's compute that does useful work under each layout."""

    def epoch(packing: bool, length: int) -> list[dict]:
        cfg = dataclasses.replace(config, seq_len=length, packing=packing)
        return list(iter_batches(examples, cfg, num_epochs=1))

    longest = max(len(e.token_ids) for e in examples)
    padded, packed = epoch(False, config.seq_len), epoch(True, config.seq_len)
    return PackingEfficiency(
        num_examples=len(examples),
        seq_len=config.seq_len,
        longest=longest,
        padded=padded,
        packed=packed,
        real_fraction_padded=real_token_fraction(padded),
        real_fraction_packed=real_token_fraction(packed),
        real_fraction_padded_to_longest=real_token_fraction(epoch(False, longest)),
    )


def plot_batch_layout(padded: dict, packed: dict):
    """Segment ids of a padded and a packed batch, and the packed batch's restarting positions."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 2.6), sharey=True)
    for ax, (title, b, key) in zip(
        axes,
        [
            ("padded: segment ids", padded, "segment_ids"),
            ("packed: segment ids", packed, "segment_ids"),
            ("packed: positions", packed, "positions"),
        ],
        strict=True,
    ):
        ax.imshow(b[key], aspect="auto", interpolation="nearest", cmap="viridis")
        ax.set_title(title)
        ax.set_xlabel("token")
    axes[0].set_ylabel("batch row")
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------
# Sharded batches, resume


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShardedBatch:
    """:func:`sharded_batch`'s result: the first global batch on the demo mesh."""

    mesh: Any  # jax.sharding.Mesh
    mesh_shape: tuple[int, ...]  # (fsdp, tp)
    mesh_reason: str  # why this mesh (cookbook.mesh.mesh_for_devices)
    batch: dict[str, Any]  # field -> global jax.Array

    @property
    def batch_spec(self) -> str:
        """The ``input_tokens`` sharding's partition spec, e.g. ``P('fsdp',)``."""
        return str(self.batch["input_tokens"].sharding.spec)

    def describe(self) -> str:
        tokens = self.batch["input_tokens"]
        rows = sorted({s.data.shape for s in tokens.addressable_shards})
        return (
            f"{self.mesh_reason}\n"
            f"input_tokens {tokens.shape} {tokens.dtype}, sharding {tokens.sharding.spec} "
            f"on mesh {dict(self.mesh.shape)}\nrows held per device: {rows}"
        )

    def results(self) -> dict[str, Any]:
        """What notebook 05 records: the batch's partition spec and the mesh's shape."""
        return {"batch_spec": self.batch_spec, "mesh": list(self.mesh_shape)}


def sharded_batch(
    examples: Sequence[Example], config: DataConfig, *, preset: str, fsdp: int = 0, tp: int = 0
) -> ShardedBatch:
    """The first batch of :func:`iter_batches` on the mesh a notebook's ``MESH_FSDP``/``MESH_TP``
    ask for (0: from the devices present; :func:`cookbook.mesh.mesh_for_devices` for ``preset``
    and ``config.batch_size``), sharded along ``config.data_axis``."""
    from cookbook import mesh as mesh_lib

    choice = mesh_lib.mesh_for_devices(preset, fsdp, tp, batch=config.batch_size)
    mesh = mesh_lib.make_mesh(*choice.shape)
    it = iter_batches(examples, config, mesh=mesh)
    try:
        batch = next(it)
    finally:
        it.close()
    return ShardedBatch(mesh=mesh, mesh_shape=tuple(choice.shape), mesh_reason=choice.reason, batch=batch)


def resume_replays(examples: Sequence[Example], config: DataConfig, *, mesh=None, at: int = 5, steps: int = 10) -> bool:
    """Whether an iterator started at step ``at`` (as a resumed run starts it) yields exactly the
    batches ``at + 1 .. steps`` of one that ran from the start."""
    whole = [np.asarray(b["input_tokens"]) for b in itertools.islice(iter_batches(examples, config, mesh=mesh), steps)]
    resumed = iter_batches(examples, config, mesh=mesh, start_step=at)
    return all(np.array_equal(np.asarray(next(resumed)["input_tokens"]), whole[k]) for k in range(at, steps))


# ------------------------------------------------------------------------------------
# Is the host fast enough?


@dataclasses.dataclass(frozen=True, kw_only=True)
class HostHeadroom:
    """:func:`host_headroom`'s result: one core's data speed against the chips' consumption."""

    speed: dict[str, float]  # measure_throughput's figures
    consumer: str  # the preset whose training consumes the tokens
    consumed_tokens_per_s: float
    basis: str  # where consumed_tokens_per_s comes from (the planner, or the paper)

    @property
    def headroom_ratio(self) -> float:
        """How many times faster the host makes tokens than the chips consume them."""
        return self.speed["tokens_per_s"] / self.consumed_tokens_per_s

    def describe(self) -> str:
        s = self.speed
        return (
            f"one core: {s['tokens_per_s']:,.0f} tokens/s (tokenise {s['tokenize_tokens_per_s']:,.0f}, "
            f"pack+batch {s['batch_tokens_per_s']:,.0f})\n"
            f"{self.consumer} consumes {self.consumed_tokens_per_s:,.0f} tokens/s ({self.basis}): "
            f"{self.headroom_ratio:.0f}x headroom"
        )

    def results(self) -> dict[str, Any]:
        """What notebook 05 records: both speeds and their ratio."""
        return {
            "tokens_per_s": self.speed["tokens_per_s"],
            "consumed_tokens_per_s": self.consumed_tokens_per_s,
            "headroom_ratio": self.headroom_ratio,
        }


def host_headroom(rows: Any, tokenizer, config: DataConfig, *, preset: str = "gemma4_31b") -> HostHeadroom:
    """One core's tokenise + pack + batch throughput on ``rows`` (:func:`measure_throughput`, one
    row per batch so that every row counts) against the tokens/s ``preset``'s training consumes on
    v5p-8 (:func:`cookbook.fit.training_tokens_per_s`): the host must outpace the chips."""
    from cookbook import fit

    speed = measure_throughput(rows, tokenizer, dataclasses.replace(config, batch_size=1))
    consumed = fit.training_tokens_per_s(preset)
    return HostHeadroom(
        speed=speed,
        consumer=f"{preset} on v5p-8",
        consumed_tokens_per_s=consumed["tokens_per_s"],
        basis=consumed["basis"],
    )
