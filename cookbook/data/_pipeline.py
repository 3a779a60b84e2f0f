"""The data pipeline: chat rows in, sharded fixed-shape training batches out.

Rows are read from JSONL, Parquet, a Hugging Face ``datasets`` object or a list of dicts,
in chat (``{"messages": [...]}``) or prompt/completion form. Each row is rendered with the
tokenizer's own Gemma 4 chat template (the one vLLM uses when serving, so training and
serving see the same tokens) and the loss is masked to the answer tokens, closing
``<turn|>`` included. Every row is checked before training starts: a bad row is dropped
(or, when asked, an over-long one truncated) and reported with its row number and
reason; if too many rows are bad, :class:`DataError` stops the run and says why.

Batches have static shapes for XLA, either padded (one example per row) or packed
(several examples per row, by Grain's first-fit packing: segment ids, positions that
restart per segment and an attention mask kept within a segment). Grain shuffles,
batches and prefetches; each JAX process reads its own slice of the data, and the
batches come out as global ``jax.Array``s sharded along the mesh's data axis. A batch is
a dict with Tunix ``TrainingInput``'s ``input_tokens`` and ``input_mask`` (the loss mask)
plus ``positions`` and ``segment_ids``, which ``TrainingInput`` has no fields for;
:func:`model_inputs` is the ``gen_model_input_fn`` that turns it into the arguments of
Tunix's loss.

Written here (none of the libraries does it): validation with row-numbered reasons,
answer-only loss masks from the template's character offsets, and the segment-aware
attention mask Tunix's Gemma 4 takes.
"""

from __future__ import annotations

import atexit
import dataclasses
import weakref
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from cookbook.data._config import DataConfig
from cookbook.data._rows import DataError, DataReport
from cookbook.data._tokenize import Example, prepare_examples

# ------------------------------------------------------------------------------------
# Batches


def _as_features(example: Example) -> dict[str, np.ndarray]:
    return {"input_tokens": example.token_ids, "input_mask": example.loss_mask}


def _pad_features(features: dict[str, np.ndarray], seq_len: int) -> dict[str, np.ndarray]:
    """One example per row: pad to ``seq_len``; segment 1 on real tokens, 0 on padding."""
    n = len(features["input_tokens"])
    out = {}
    for key in ("input_tokens", "input_mask"):
        padded = np.zeros(seq_len, dtype=np.int32)
        padded[:n] = features[key]
        out[key] = padded
    out["positions"] = np.where(np.arange(seq_len) < n, np.arange(seq_len), 0).astype(np.int32)
    out["segment_ids"] = (np.arange(seq_len) < n).astype(np.int32)
    return out


def _from_packed(features: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Grain's packer names its extra outputs ``<feature>_segment_ids``/``_positions``."""
    return {
        "input_tokens": features["input_tokens"].astype(np.int32),
        "input_mask": features["input_mask"].astype(np.int32),
        "positions": features["input_tokens_positions"].astype(np.int32),
        "segment_ids": features["input_tokens_segment_ids"].astype(np.int32),
    }


def build_dataset(examples: Sequence[Example], config: DataConfig, *, num_epochs: int | None = None):
    """The Grain pipeline for this process: shard, shuffle per epoch, pad or pack, batch.

    Returns a ``grain.IterDataset`` of host (numpy) batches with the fields of
    :data:`BATCH_FIELDS`: global batches of ``batch_size`` rows (``process_split="rows"``;
    :func:`shard_batch` feeds each process its rows), or this process's ``batch_size //
    process_count`` rows of its own slice of the data (``"records"``).
    """
    import grain
    import jax

    process_count, process_index = jax.process_count(), jax.process_index()
    check_process_split(config, len(examples), process_count)
    local_batch = config.batch_size
    ds = grain.MapDataset.source(list(examples))
    if process_count > 1 and config.process_split == "records":
        ds = ds[process_index::process_count]
        local_batch = config.batch_size // process_count
    ds = ds.map(_as_features)
    if config.shuffle:
        ds = ds.seed(config.seed).shuffle()  # a new order every epoch
    ds = ds.repeat(num_epochs)
    it = ds.to_iter_dataset()
    if config.packing:
        length = {"input_tokens": config.seq_len, "input_mask": config.seq_len}
        it = grain.experimental.FirstFitPackIterDataset(
            it,
            length_struct=length,
            num_packing_bins=config.num_packing_bins,
            seed=config.seed,
            shuffle_bins=config.shuffle,
        ).map(_from_packed)
    else:
        it = it.map(lambda f: _pad_features(f, config.seq_len))
    it = it.batch(local_batch, drop_remainder=True)
    if config.prefetch > 0:
        it = grain.experimental.ThreadPrefetchIterDataset(it, prefetch_buffer_size=config.prefetch)
    return it


# Grain's prefetch iterators fail noisily when garbage-collected during interpreter
# shutdown; close the live ones while modules still exist.
_LIVE_ITERATORS: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_live_iterators() -> None:
    for it in list(_LIVE_ITERATORS):
        it.close()


class TrainIterator(Iterator[dict]):
    """Iterator of training batches; knows its step and can save/restore Grain's state.

    Each batch is a dict (a pytree Tunix's ``PeftTrainer`` shards and passes to
    ``gen_model_input_fn``; use :func:`model_inputs` there):

    * ``input_tokens`` int32 [B, T]: token ids (0 = ``<pad>`` on padding).
    * ``input_mask`` int32 [B, T]: the LOSS mask, 1 on answer tokens only (Tunix's
      ``TrainingInput.input_mask`` and its default loss use it this way).
    * ``positions`` int32 [B, T]: RoPE positions, restarting at 0 for every packed example.
    * ``segment_ids`` int32 [B, T]: 1, 2, ... per example in the row, 0 on padding
      (unpacked batches: 1 on the example, 0 on padding).

    With a mesh, fields are global ``jax.Array``s sharded ``P(data_axis)`` on the batch
    dimension (assembled from each process's rows on multi-host); without one, numpy.
    """

    def __init__(self, dataset, config: DataConfig, mesh=None, start_step: int = 0):
        self._config = config
        self._mesh = mesh
        self._it = iter(dataset)
        self.step = 0
        if mesh is not None:
            axis = mesh.shape.get(config.data_axis)
            if axis is None:
                raise ValueError(f"mesh has no axis {config.data_axis!r} (axes: {tuple(mesh.shape)})")
            if config.batch_size % axis:
                raise ValueError(
                    f"batch_size={config.batch_size} does not divide over the mesh's "
                    f"{config.data_axis!r} axis of size {axis}; use a multiple of {axis}"
                )
        _LIVE_ITERATORS.add(self)
        for _ in range(start_step):  # deterministic replay: cheap host work, no device
            next(self._it)
            self.step += 1

    def __next__(self) -> dict:
        if self._it is None:
            raise StopIteration  # closed
        batch = next(self._it)
        self.step += 1
        if self._mesh is None:
            return batch
        return shard_batch(batch, self._mesh, self._config.data_axis, global_rows=self._config.process_split == "rows")

    def close(self) -> None:
        """Stop Grain's prefetch thread (also done at interpreter exit)."""
        it, self._it = self._it, None
        if it is not None and hasattr(it, "close"):
            it.close()

    def get_state(self) -> dict:
        """Grain's iterator state plus the step (save it beside a checkpoint)."""
        return {"step": self.step, "grain": self._it.get_state()}

    def set_state(self, state: dict) -> None:
        self._it.set_state(state["grain"])
        self.step = int(state["step"])


def check_process_split(config: DataConfig, num_examples: int, process_count: int) -> None:
    """Refuse, before any step, data that cannot be split over ``process_count`` processes."""
    if config.batch_size % process_count:
        raise DataError(
            f"batch_size={config.batch_size} does not divide over {process_count} JAX processes; "
            f"use a multiple of {process_count}"
        )
    if num_examples < process_count:
        raise DataError(
            f"{num_examples} usable rows for {process_count} JAX processes: every process needs at "
            "least one; give more data or fewer processes"
        )
    if config.process_split == "records" and num_examples // process_count < 1:
        raise DataError(
            f"process_split='records' leaves a process without rows ({num_examples} rows, {process_count} processes)"
        )


def process_rows(batch_size: int, mesh, data_axis: str = "fsdp") -> slice:
    """The rows of a global batch that this process's devices hold (sharded on ``data_axis``)."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    sharding = NamedSharding(mesh, PartitionSpec(data_axis))
    spans = {idx[0].indices(batch_size)[:2] for idx in sharding.addressable_devices_indices_map((batch_size,)).values()}
    start, stop = min(a for a, _ in spans), max(b for _, b in spans)
    covered = sum(b - a for a, b in spans)
    if covered != stop - start and len(spans) > 1 and jax.process_count() > 1:
        raise ValueError(
            f"this process's devices hold non-contiguous rows {sorted(spans)} of the batch: build the "
            "mesh from jax.devices() in order (cookbook.mesh.make_mesh does)"
        )
    return slice(start, stop)


def shard_batch(batch: dict[str, np.ndarray], mesh, data_axis: str = "fsdp", *, global_rows: bool = True) -> dict:
    """Host batch -> global arrays sharded along ``data_axis``.

    ``global_rows``: ``batch`` is the whole global batch (every process has it) and this
    process feeds only its rows; else ``batch`` is already this process's rows.
    """
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    sharding = NamedSharding(mesh, PartitionSpec(data_axis))
    if global_rows and jax.process_count() > 1:
        n = len(next(iter(batch.values())))
        rows = process_rows(n, mesh, data_axis)
        return {k: jax.make_array_from_process_local_data(sharding, v[rows], v.shape) for k, v in batch.items()}
    return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in batch.items()}


def make_train_iter(
    rows: Any,
    tokenizer,
    config: DataConfig,
    *,
    mesh=None,
    num_epochs: int | None = None,
    start_step: int = 0,
    report: bool = False,
) -> TrainIterator | tuple[TrainIterator, DataReport]:
    """Training batches from ``rows`` (any source :func:`read_rows` takes).

    Args:
      rows: data path, ``datasets.Dataset`` or list of rows.
      tokenizer: a transformers tokenizer with the Gemma 4 chat template, or the directory
        it is saved in (loaded only when the rows are not in the tokenised rows' cache).
      config: :class:`DataConfig`.
      mesh: shard batches along ``config.data_axis`` of this mesh (None: numpy batches).
      num_epochs: passes over the data (None: forever; the trainer's max_steps stops it).
        With ``process_split="records"`` on several hosts keep None: with packing,
        processes can pack their slices into different numbers of batches, and one running
        out first would stall the rest.
      start_step: skip this many batches, to resume a run with the same order. (Tunix's
        ``PeftTrainer`` restoring a checkpoint already skips the batches it has trained
        on when given a fresh iterator: do not skip twice.)
      report: also return the :class:`DataReport`.

    Raises:
      DataError: when too many rows are bad (see :func:`prepare_examples`).
    """
    examples, data_report = prepare_examples(rows, tokenizer, config)
    it = iter_batches(examples, config, mesh=mesh, num_epochs=num_epochs, start_step=start_step)
    return (it, data_report) if report else it


def iter_batches(
    examples: Sequence[Example],
    config: DataConfig,
    *,
    mesh=None,
    num_epochs: int | None = None,
    start_step: int = 0,
) -> TrainIterator:
    """Training batches from already prepared examples (:func:`prepare_examples`).

    The same as :func:`make_train_iter` without reading and tokenising again: build the
    examples once, then as many iterators (other seeds, padding or packing, a resume
    point) as needed. ``config.seq_len`` must be at least the longest example's length.
    """
    longest = max((len(e.token_ids) for e in examples), default=0)
    if longest > config.seq_len:
        raise ValueError(
            f"an example has {longest} tokens > seq_len={config.seq_len}; prepare the examples "
            "with this config (prepare_examples applies the too-long policy)"
        )
    return TrainIterator(build_dataset(examples, config, num_epochs=num_epochs), config, mesh, start_step)


def segment_attention_mask(segment_ids, positions=None):
    """[B, T, T] attention mask: causal, and only within the same segment.

    Padding (segment 0) attends only to padding, so no query row is all-masked (a fully
    masked softmax row would give NaNs in some kernels) and real tokens never see it.
    Works on numpy or JAX arrays (inside ``jit`` too).
    """
    import jax.numpy as jnp

    seg = jnp.asarray(segment_ids)
    t = seg.shape[-1]
    causal = jnp.tril(jnp.ones((t, t), dtype=jnp.bool_))
    same = seg[:, :, None] == seg[:, None, :]
    return same & causal[None]


def model_inputs(batch: dict) -> dict:
    """Tunix ``gen_model_input_fn``: a batch -> the default loss function's arguments.

    ``trainer.with_gen_model_input_fn(cookbook.data.model_inputs)``; returns
    ``input_tokens``, ``input_mask`` (loss mask), ``positions`` and ``attention_mask``.
    """
    return {
        "input_tokens": batch["input_tokens"],
        "input_mask": batch["input_mask"],
        "positions": batch["positions"],
        "attention_mask": segment_attention_mask(batch["segment_ids"]),
    }


def real_token_fraction(batches: Iterable[dict]) -> float:
    """Fraction of batch slots holding real tokens (segment id > 0) over ``batches``."""
    real = total = 0
    for b in batches:
        seg = np.asarray(b["segment_ids"])
        real += int((seg > 0).sum())
        total += seg.size
    return real / total if total else 0.0


# ------------------------------------------------------------------------------------
# Tokenizer, vLLM's rendering, throughput


def measure_throughput(rows: Any, tokenizer, config: DataConfig) -> dict[str, float]:
    """Host-side data speed on one core: read + validate + tokenise, then pad/pack+batch.

    Times :func:`prepare_examples` and one epoch of :func:`build_dataset` (prefetch off,
    so one thread does all the work). Returns tokens/s for each stage and end to end,
    counting the tokens of the kept examples, and the real-token fraction of the batches.
    """
    import time

    cfg = dataclasses.replace(config, prefetch=0)
    t0 = time.perf_counter()
    examples, report = prepare_examples(rows, tokenizer, cfg, cache=False)  # tokenising is measured
    t1 = time.perf_counter()
    batches = list(build_dataset(examples, cfg, num_epochs=1))
    t2 = time.perf_counter()
    tokens = report.num_tokens
    batched = sum(int((b["segment_ids"] > 0).sum()) for b in batches)
    return {
        "tokens": float(tokens),
        "tokenize_tokens_per_s": tokens / (t1 - t0),
        "batch_tokens_per_s": batched / (t2 - t1),
        "tokens_per_s": tokens / (t2 - t0),
        "real_token_fraction": real_token_fraction(batches),
        "num_batches": float(len(batches)),
    }
