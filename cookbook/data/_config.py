"""The data pipeline's settings (``DataConfig``) and the fields of a batch."""

from __future__ import annotations

import dataclasses
from typing import Literal

BATCH_FIELDS = ("input_tokens", "input_mask", "positions", "segment_ids")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataConfig:
    """How rows become batches.

    Attributes:
      seq_len: tokens per batch row (static shape).
      batch_size: rows per *global* batch (all processes together); must divide by the
        mesh's data-axis size and by the number of JAX processes.
      packing: pack several examples per row (True) or pad one example per row (False).
      seed: shuffling seed; the same seed gives the same batches.
      shuffle: shuffle rows (each epoch in a new order).
      too_long: ``"drop"`` examples longer than ``seq_len`` or ``"truncate"`` them (kept
        when some trained tokens survive the cut: with a long thought, that can be part of
        the thought and none of the answer; ``cookbook data`` shows how many rows are over).
      max_bad_fraction: refuse to train when more than this fraction of rows was dropped.
      num_packing_bins: rows Grain's first-fit packer fills at once (more bins, fuller rows).
      prefetch: batches prepared ahead on a background thread (0: none).
      data_axis: mesh axis the batch dimension is sharded over.
      data_format: the rows' layout, one of :data:`cookbook.data.FORMATS` (``"auto"`` picks
        it per row from the fields: messages, ShareGPT, prompt/completion, CodeV-R1, alpaca).
      columns: for ``data_format="columns"``, which column holds the system prompt, the
        prompt and the response: ``{"system": ..., "prompt": ..., "response": ...}`` or the
        string ``"system=COL,prompt=COL,response=COL"``.
      process_split: how several JAX processes (hosts) share the data. ``"rows"``: every
        process runs the same pipeline over all rows and feeds only its rows of each global
        batch, so the global batches are exactly a single-process run's (host work is not
        split; ~120k tokens/s per core covers tens of hosts). ``"records"``: Grain's
        per-process sharding, each process reads, packs and batches only its slice of the
        rows: host work splits, but packed batches differ from a single-process run's.
    """

    seq_len: int = 128
    batch_size: int = 16
    packing: bool = False
    seed: int = 0
    shuffle: bool = True
    too_long: Literal["drop", "truncate"] = "drop"
    max_bad_fraction: float = 0.05
    num_packing_bins: int = 64
    prefetch: int = 2
    data_axis: str = "fsdp"
    process_split: Literal["rows", "records"] = "rows"
    data_format: str = "auto"
    columns: dict[str, str] | str | None = None

    def __hash__(self) -> int:  # frozen, but ``columns`` is a dict: hash its items
        return hash(tuple(tuple(sorted(v.items())) if isinstance(v, dict) else v for v in dataclasses.astuple(self)))

    def __post_init__(self) -> None:
        from cookbook.data._formats import check_format, parse_columns

        object.__setattr__(self, "columns", parse_columns(self.columns))
        check_format(self.data_format, self.columns)
        if self.seq_len < 2:
            raise ValueError(f"seq_len={self.seq_len}: need at least 2 tokens per row")
        if self.batch_size < 1:
            raise ValueError(f"batch_size={self.batch_size} must be >= 1")
        if self.too_long not in ("drop", "truncate"):
            raise ValueError(f"too_long={self.too_long!r}; use 'drop' or 'truncate'")
        if not 0.0 <= self.max_bad_fraction <= 1.0:
            raise ValueError(f"max_bad_fraction={self.max_bad_fraction} must be in [0, 1]")
        if self.process_split not in ("rows", "records"):
            raise ValueError(f"process_split={self.process_split!r}; use 'rows' or 'records'")
        if self.num_packing_bins < 1:
            raise ValueError(f"num_packing_bins={self.num_packing_bins} must be >= 1")
