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
import json
import weakref
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

ANSWER_ROLES = ("assistant", "model")
KNOWN_ROLES = ("system", "user", *ANSWER_ROLES)
BATCH_FIELDS = ("input_tokens", "input_mask", "positions", "segment_ids")


class DataError(ValueError):
    """The data set cannot be trained on as configured (too many bad rows, empty, ...)."""


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
        when some answer tokens survive the cut).
      max_bad_fraction: refuse to train when more than this fraction of rows was dropped.
      num_packing_bins: rows Grain's first-fit packer fills at once (more bins, fuller rows).
      prefetch: batches prepared ahead on a background thread (0: none).
      data_axis: mesh axis the batch dimension is sharded over.
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

    def __post_init__(self) -> None:
        if self.seq_len < 2:
            raise ValueError(f"seq_len={self.seq_len}: need at least 2 tokens per row")
        if self.batch_size < 1:
            raise ValueError(f"batch_size={self.batch_size} must be >= 1")
        if self.too_long not in ("drop", "truncate"):
            raise ValueError(f"too_long={self.too_long!r}; use 'drop' or 'truncate'")
        if not 0.0 <= self.max_bad_fraction <= 1.0:
            raise ValueError(f"max_bad_fraction={self.max_bad_fraction} must be in [0, 1]")
        if self.num_packing_bins < 1:
            raise ValueError(f"num_packing_bins={self.num_packing_bins} must be >= 1")


@dataclasses.dataclass(frozen=True)
class RowProblem:
    """A row that was dropped or changed: its 1-based row (line) number and why."""

    row: int
    reason: str
    action: Literal["dropped", "truncated"] = "dropped"

    def __str__(self) -> str:
        return f"row {self.row}: {self.reason} ({self.action})"


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataReport:
    """What validation and tokenisation found."""

    num_rows: int
    num_kept: int
    problems: tuple[RowProblem, ...]
    num_tokens: int  # tokens of the kept examples
    num_loss_tokens: int  # answer tokens (the ones trained on)

    @property
    def num_dropped(self) -> int:
        return sum(p.action == "dropped" for p in self.problems)

    @property
    def num_truncated(self) -> int:
        return sum(p.action == "truncated" for p in self.problems)

    @property
    def bad_fraction(self) -> float:
        return self.num_dropped / self.num_rows if self.num_rows else 1.0

    def summary(self, max_listed: int = 10) -> str:
        lines = [
            f"{self.num_rows} rows: {self.num_kept} kept, {self.num_dropped} dropped, "
            f"{self.num_truncated} truncated; {self.num_tokens} tokens, "
            f"{self.num_loss_tokens} trained on"
        ]
        lines += [f"  {p}" for p in self.problems[:max_listed]]
        if len(self.problems) > max_listed:
            lines.append(f"  ... and {len(self.problems) - max_listed} more")
        return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class Example:
    """One tokenised conversation: token ids and the loss mask (1 on answer tokens)."""

    token_ids: np.ndarray  # int32 [n]
    loss_mask: np.ndarray  # int32 [n]
    row: int  # 1-based row number in the source


# ------------------------------------------------------------------------------------
# Reading and validating rows


class RowError(ValueError):
    """Why one row cannot be used (the message is the reason shown to the user)."""


def read_rows(source: Any) -> tuple[list[Any], list[RowProblem]]:
    """Read raw rows from a JSONL/JSON/Parquet path, a ``datasets`` object or a list.

    Returns the rows that could be parsed (``None`` in place of unparseable ones, so row
    numbers stay aligned with the source) and the problems found while parsing: lines
    that are not UTF-8 or not valid JSON are reported with their line number here.
    """
    if isinstance(source, str | Path):
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"data file {path} does not exist")
        suffix = path.suffix.lower()
        if suffix in (".jsonl", ".json", ".ndjson"):
            return _read_jsonl(path)
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist(), []
        raise ValueError(f"{path}: unknown data format {suffix!r}; use .jsonl or .parquet")
    if hasattr(source, "features") and hasattr(source, "__getitem__"):  # datasets.Dataset
        return [dict(r) for r in source], []
    if isinstance(source, Sequence) and not isinstance(source, bytes | str):
        return list(source), []
    raise TypeError(
        f"cannot read rows from a {type(source).__name__}; pass a .jsonl/.parquet path, "
        "a datasets.Dataset or a list of dicts"
    )


def _read_jsonl(path: Path) -> tuple[list[Any], list[RowProblem]]:
    rows: list[Any] = []
    problems: list[RowProblem] = []
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                problems.append(RowProblem(number, f"not UTF-8 (byte {raw[e.start]:#04x} at column {e.start + 1})"))
                rows.append(None)
                continue
            if not line.strip():
                problems.append(RowProblem(number, "empty line"))
                rows.append(None)
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                problems.append(RowProblem(number, f"invalid JSON ({e.msg} at column {e.colno})"))
                rows.append(None)
    return rows, problems


def to_messages(row: Any) -> list[dict[str, str]]:
    """Normalise one row to a validated chat ``messages`` list.

    Accepts ``{"messages": [...]}`` and ``{"prompt": ..., "completion": ...}`` (strings,
    or TRL's conversational lists of messages). Raises :class:`RowError` with the reason
    when the row cannot be trained on.
    """
    if not isinstance(row, dict):
        raise RowError(f"expected a JSON object, got {type(row).__name__}")
    if "messages" in row:
        messages = row["messages"]
        if not isinstance(messages, list):
            raise RowError(f"'messages' must be a list, got {type(messages).__name__}")
    elif "prompt" in row or "completion" in row:
        messages = _prompt_completion_messages(row)
    else:
        raise RowError(f"no 'messages' and no 'prompt'/'completion' field (fields: {sorted(row)})")
    if not messages:
        raise RowError("'messages' is empty")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise RowError(f"message {i} must be an object, got {type(m).__name__}")
        role, content = m.get("role"), m.get("content")
        if not isinstance(role, str):
            raise RowError(f"message {i} has no string 'role' (got {role!r})")
        if role not in KNOWN_ROLES:
            raise RowError(f"message {i} has unknown role {role!r}; use one of {KNOWN_ROLES}")
        if not isinstance(content, str):
            raise RowError(f"message {i} ({role}) 'content' must be a string, got {type(content).__name__}")
        if "\ufffd" in content or any(0xD800 <= ord(c) <= 0xDFFF for c in content):
            raise RowError(f"message {i} ({role}) holds undecodable (non-UTF-8) text")
        out.append({"role": role, "content": content})
    if out[-1]["role"] not in ANSWER_ROLES:
        raise RowError(f"last message is {out[-1]['role']!r}; the row must end with an assistant answer")
    if not all(m["content"].strip() for m in out if m["role"] in ANSWER_ROLES):
        raise RowError("empty answer (assistant content is blank)")
    if not any(m["role"] == "user" for m in out):
        raise RowError("no user message")
    return out


def _prompt_completion_messages(row: dict) -> list:
    prompt, completion = row.get("prompt"), row.get("completion")
    if prompt is None or completion is None:
        missing = "prompt" if prompt is None else "completion"
        raise RowError(f"prompt/completion row without a {missing!r} field")
    if isinstance(prompt, str) and isinstance(completion, str):
        return [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}]
    if isinstance(prompt, list) and isinstance(completion, list):
        return [*prompt, *completion]
    raise RowError(
        f"'prompt' and 'completion' must both be strings or both lists of messages "
        f"(got {type(prompt).__name__} and {type(completion).__name__})"
    )


# ------------------------------------------------------------------------------------
# Tokenisation


def _render(tokenizer, messages: list[dict], add_generation_prompt: bool) -> str:
    if not getattr(tokenizer, "chat_template", None):
        raise DataError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has no chat template; load the "
            "checkpoint's tokenizer (cookbook.data.load_tokenizer), which carries Gemma 4's"
        )
    try:
        return tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt
        )
    except Exception as e:  # jinja raises from inside the template (e.g. raise_exception)
        raise RowError(f"the chat template rejected the row: {e}") from e


def tokenize_chat(tokenizer, row: Any) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of a whole conversation and its loss mask (1 on answer tokens only).

    The conversation is rendered with the tokenizer's chat template, exactly as vLLM
    renders it, then encoded without adding special tokens (the template writes
    ``<bos>``). A token is trained on when it lies inside an assistant turn's content or
    its closing ``<turn|>``: the span between the rendering of the conversation up to the
    turn *with* the generation prompt and the rendering *including* the turn (trailing
    whitespace after ``<turn|>`` excluded).

    Returns:
      ``(token_ids, loss_mask)``, both int32 of the same length.
    """
    messages = to_messages(row)
    full = _render(tokenizer, messages, False)
    spans = []
    for i, m in enumerate(messages):
        if m["role"] not in ANSWER_ROLES:
            continue
        before = _render(tokenizer, messages[:i], True)
        through = _render(tokenizer, messages[: i + 1], False)
        if not (full.startswith(before) and full.startswith(through)):
            raise RowError(
                "the chat template does not render conversations prefix-consistently; "
                "cannot locate the answer tokens"
            )
        spans.append((len(before), len(through.rstrip())))
    enc = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    ids = np.asarray(enc["input_ids"], dtype=np.int32)
    offsets = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
    mask = np.zeros(len(ids), dtype=np.int32)
    for start, end in spans:
        mask |= ((offsets[:, 0] < end) & (offsets[:, 1] > start)).astype(np.int32)
    return ids, mask


def prompt_ids(tokenizer, row: Any) -> list[int]:
    """Token ids of the prompt a server would see: turns before the last answer, plus
    the generation prompt (``<|turn>model\\n``), rendered by the chat template."""
    messages = row["messages"] if isinstance(row, dict) and "messages" in row else to_messages(row)
    while messages and messages[-1]["role"] in ANSWER_ROLES:
        messages = messages[:-1]
    if not messages:
        raise RowError("row has no turns before its answer")
    text = _render(tokenizer, list(messages), True)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def prepare_examples(
    source: Any, tokenizer, config: DataConfig
) -> tuple[list[Example], DataReport]:
    """Read, validate and tokenise every row; apply the too-long policy; report.

    Raises :class:`DataError` when no row survives or more than
    ``config.max_bad_fraction`` of the rows were dropped, listing the first reasons.
    """
    raw_rows, problems = read_rows(source)
    bad = {p.row for p in problems}
    examples: list[Example] = []
    for number, raw in enumerate(raw_rows, start=1):
        if number in bad:
            continue
        try:
            ids, mask = tokenize_chat(tokenizer, raw)
        except RowError as e:
            problems.append(RowProblem(number, str(e)))
            continue
        if len(ids) > config.seq_len:
            if config.too_long == "truncate" and mask[: config.seq_len].any():
                problems.append(
                    RowProblem(number, f"{len(ids)} tokens > seq_len={config.seq_len}", "truncated")
                )
                ids, mask = ids[: config.seq_len], mask[: config.seq_len]
            else:
                why = "" if config.too_long == "drop" else " and no answer token survives truncation"
                problems.append(
                    RowProblem(number, f"{len(ids)} tokens > seq_len={config.seq_len}{why}")
                )
                continue
        examples.append(Example(ids, mask, number))
    problems.sort(key=lambda p: p.row)
    report = DataReport(
        num_rows=len(raw_rows),
        num_kept=len(examples),
        problems=tuple(problems),
        num_tokens=int(sum(len(e.token_ids) for e in examples)),
        num_loss_tokens=int(sum(int(e.loss_mask.sum()) for e in examples)),
    )
    if not examples:
        raise DataError(f"no usable rows.\n{report.summary()}")
    if report.bad_fraction > config.max_bad_fraction:
        raise DataError(
            f"{report.num_dropped} of {report.num_rows} rows ({report.bad_fraction:.1%}) are bad, "
            f"over max_bad_fraction={config.max_bad_fraction:.1%}; refusing to train on them. "
            f"Fix the data, or raise max_bad_fraction if dropping them is intended.\n"
            f"{report.summary()}"
        )
    return examples, report


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

    Returns a ``grain.IterDataset`` of host (numpy) batches of ``batch_size //
    process_count`` rows with the fields of :data:`BATCH_FIELDS`.
    """
    import grain
    import jax

    process_count, process_index = jax.process_count(), jax.process_index()
    if config.batch_size % process_count:
        raise ValueError(
            f"batch_size={config.batch_size} does not divide over {process_count} JAX processes; "
            f"use a multiple of {process_count}"
        )
    local_batch = config.batch_size // process_count
    ds = grain.MapDataset.source(list(examples))
    if process_count > 1:
        ds = ds[process_index::process_count]
    if len(ds) == 0:
        raise DataError(f"process {process_index} got no examples ({len(examples)} in all)")
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
        return shard_batch(batch, self._mesh, self._config.data_axis)

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


def shard_batch(batch: dict[str, np.ndarray], mesh, data_axis: str = "fsdp") -> dict:
    """Host batch (this process's rows) -> global arrays sharded along ``data_axis``."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    sharding = NamedSharding(mesh, PartitionSpec(data_axis))
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
      tokenizer: a transformers tokenizer with the Gemma 4 chat template.
      config: :class:`DataConfig`.
      mesh: shard batches along ``config.data_axis`` of this mesh (None: numpy batches).
      num_epochs: passes over the data (None: forever; the trainer's max_steps stops it).
        On a multi-host slice keep None: with packing, processes can pack their slices
        into different numbers of batches, and one running out first would stall the rest.
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


def load_tokenizer(preset: str = "tiny", *, base_dir: str | Path | None = None):
    """The preset's tokenizer: the random presets' from their cached base checkpoint, the
    real ones' from the Hub (tokenizer files only, not the weights)."""
    from transformers import AutoTokenizer

    from cookbook import models

    p = models.get_preset(preset)
    if base_dir is not None:
        return AutoTokenizer.from_pretrained(str(base_dir))
    if p.hf_checkpoint is not None:
        return AutoTokenizer.from_pretrained(p.hf_checkpoint)
    return AutoTokenizer.from_pretrained(str(models.ensure_base(p)))


def vllm_model_dir(preset: str = "tiny") -> str:
    """The model vLLM serves for ``preset``: the Hub id of a real one; for a random preset
    its base checkpoint in the text-only layout vLLM on CPU loads (converted once)."""
    from cookbook import merge, models

    p = models.get_preset(preset)
    if p.hf_checkpoint is not None:
        return p.hf_checkpoint
    return str(merge.ensure_text_only_base(models.ensure_base(p), p))


def render_with_vllm(model_dir: str | Path, messages: list[dict], *, add_generation_prompt: bool = True,
                     tokenize: bool = True) -> list[int] | str:
    """Render a chat exactly as vLLM's OpenAI chat endpoint does, without a server.

    Uses vLLM's own chat-template resolution and ``safe_apply_chat_template`` on the
    model directory vLLM would serve (on CPU, the text-only layout: see
    ``cookbook.merge.ensure_text_only_base``). Importing vLLM takes ~10-20 s.
    """
    from vllm.config import ModelConfig
    from vllm.renderers.hf import safe_apply_chat_template
    from vllm.tokenizers import get_tokenizer

    model_config = ModelConfig(model=str(model_dir))
    out = safe_apply_chat_template(
        model_config, get_tokenizer(str(model_dir)), messages,
        tokenize=tokenize, add_generation_prompt=add_generation_prompt,
    )
    return list(out) if tokenize else out


def measure_throughput(rows: Any, tokenizer, config: DataConfig) -> dict[str, float]:
    """Host-side data speed on one core: read + validate + tokenise, then pad/pack+batch.

    Times :func:`prepare_examples` and one epoch of :func:`build_dataset` (prefetch off,
    so one thread does all the work). Returns tokens/s for each stage and end to end,
    counting the tokens of the kept examples, and the real-token fraction of the batches.
    """
    import time

    cfg = dataclasses.replace(config, prefetch=0)
    t0 = time.perf_counter()
    examples, report = prepare_examples(rows, tokenizer, cfg)
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
