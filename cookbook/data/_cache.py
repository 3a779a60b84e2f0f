"""Tokenised rows, kept on disk: the same rows, tokenizer and layout are tokenised once.

Tokenising is what the data pipeline spends: every row goes through Gemma 4's chat template
(Jinja) and the tokenizer, about 1 ms a row on one core, plus loading transformers and the
tokenizer (seconds). A run and its resume, the held-out split, a notebook and the command
that follows it read the same rows with the same tokenizer; each would tokenise them again.
This cache keeps, per row, the token ids and loss mask, or why the chat template rejected it,
keyed by the SHA-256 of:

- the rows' content (as JSON; rows that are not plain JSON values are not cached);
- the tokenizer: a directory's tokenizer and config files, or a loaded fast tokenizer's
  serialised vocabulary, chat template and special tokens;
- the layout (``data_format``, ``columns``) and the transformers/tokenizers releases;
- the source of the modules that read, render and tokenise rows (an edit to them is a miss).

``seq_len`` and the too-long policy are applied after the cache (by ``prepare_examples``), so
one entry serves every length. An entry is written whole (a temporary file renamed into
place), so a reader never sees half of one; several processes writing the same entry write
the same bytes. The directory is ``<cache root>/tokenized``, kept under 2 GiB (least recently
used first out; ``COOKBOOK_TOKEN_CACHE_BYTES`` changes that); ``COOKBOOK_TOKEN_CACHE=0`` turns
it off.

Written here: Hugging Face ``datasets`` caches ``Dataset.map`` results by fingerprinting the
mapped function with dill, which neither covers lists of rows nor the JSONL files read here,
and pickles the tokenizer on every call.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from cookbook.core import cache_root, prune_oldest

# Rows and their per-row outcome: (token ids, loss mask), or the reason the template refused it.
Tokenised = list[tuple[np.ndarray, np.ndarray] | str | None]

# What AutoTokenizer.from_pretrained reads from a directory (config.json names the class when
# tokenizer_config.json does not).
_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "tokenizer.model",
    "config.json",
)
# The modules whose code decides what a row tokenises to.
_CODE = ("_cache.py", "_formats.py", "_rows.py", "_tokenize.py")
DEFAULT_MAX_BYTES = 2 << 30


def cache_dir() -> Path | None:
    """Where entries live; None when ``COOKBOOK_TOKEN_CACHE=0``."""
    if os.environ.get("COOKBOOK_TOKEN_CACHE", "1") == "0":
        return None
    return cache_root() / "tokenized"


def _digest_json(value: Any) -> str | None:
    """SHA-256 of ``value`` as canonical JSON; None when it is not plain JSON (numbers, strings,
    lists, dicts, None), whose text could not tell two different values apart."""
    try:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=True)
    except (TypeError, ValueError):
        return None
    return hashlib.sha256(text.encode()).hexdigest()


def tokenizer_fingerprint(tokenizer: Any) -> str | None:
    """What identifies a tokenizer's output: for a directory, its tokenizer files' bytes; for a
    loaded fast tokenizer, its serialised vocabulary, chat template and special tokens. None
    (not cached) for anything else, such as a slow tokenizer or a Hub id."""
    h = hashlib.sha256()
    if isinstance(tokenizer, str | Path):
        path = Path(tokenizer)
        if not (path / "tokenizer_config.json").is_file():
            return None
        h.update(b"dir\0")
        for name in _TOKENIZER_FILES:
            file = path / name
            if file.is_file():
                h.update(name.encode() + b"\0" + file.read_bytes() + b"\0")
        return h.hexdigest()
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    special = _digest_json(getattr(tokenizer, "special_tokens_map", None))
    template = _digest_json(getattr(tokenizer, "chat_template", None))
    if special is None or template is None:
        return None
    h.update(b"obj\0" + type(tokenizer).__name__.encode() + b"\0")
    h.update(backend.to_str().encode() + b"\0" + special.encode() + template.encode())
    return h.hexdigest()


def _code_fingerprint() -> str:
    here = Path(__file__).parent
    h = hashlib.sha256()
    for name in _CODE:
        h.update((here / name).read_bytes())
    for dist in ("transformers", "tokenizers", "jinja2"):
        try:
            h.update(f"{dist}={metadata.version(dist)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{dist}=none".encode())
    return h.hexdigest()


def entry_key(rows: Sequence[Any], tokenizer: Any, data_format: str, columns: Any) -> str | None:
    """The cache key of tokenising ``rows`` with ``tokenizer`` in this layout; None when
    something in it cannot be fingerprinted (then nothing is cached)."""
    tok = tokenizer_fingerprint(tokenizer)
    rows_digest = _digest_json(list(rows))
    layout = _digest_json({"format": data_format, "columns": columns})
    if tok is None or rows_digest is None or layout is None:
        return None
    return hashlib.sha256(f"{_code_fingerprint()}|{tok}|{rows_digest}|{layout}".encode()).hexdigest()


def load(key: str) -> Tokenised | None:
    """The entry ``key``, or None when there is none (or it cannot be read: a miss)."""
    directory = cache_dir()
    if directory is None:
        return None
    path = directory / f"{key}.npz"
    try:
        with np.load(path, allow_pickle=False) as z:
            ids, mask, bounds = z["ids"], z["mask"], z["bounds"]
            status = json.loads(str(z["status"]))
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile):  # absent or damaged
        return None
    os.utime(path)  # recently used: kept longest
    out: Tokenised = []
    for i, s in enumerate(status):
        if s == 1:
            a, b = int(bounds[i]), int(bounds[i + 1])
            out.append((ids[a:b].astype(np.int32), mask[a:b].astype(np.int32)))
        else:
            out.append(s)  # None (not tokenised) or the rejection
    return out


def store(key: str, tokenised: Tokenised) -> None:
    """Write the entry ``key`` whole (temporary file, then rename), then prune the directory."""
    directory = cache_dir()
    if directory is None:
        return
    directory.mkdir(parents=True, exist_ok=True)
    pieces = [t for t in tokenised if isinstance(t, tuple)]
    lengths = [0] + [len(t[0]) if isinstance(t, tuple) else 0 for t in tokenised]
    bounds = np.cumsum(np.asarray(lengths, dtype=np.int64))
    status = [1 if isinstance(t, tuple) else t for t in tokenised]
    tmp = directory / f".{key}.{os.getpid()}.tmp.npz"
    try:
        np.savez(
            tmp,
            ids=np.concatenate([p[0] for p in pieces]).astype(np.int32) if pieces else np.zeros(0, np.int32),
            mask=np.concatenate([p[1] for p in pieces]).astype(np.uint8) if pieces else np.zeros(0, np.uint8),
            bounds=bounds,
            status=np.asarray(json.dumps(status)),
        )
        os.replace(tmp, directory / f"{key}.npz")
    finally:
        tmp.unlink(missing_ok=True)
    prune_oldest(directory, "*.npz", int(os.environ.get("COOKBOOK_TOKEN_CACHE_BYTES", DEFAULT_MAX_BYTES)))


def tokenised_rows(
    rows: Sequence[Any],
    skip: set[int],
    tokenizer: Any,
    data_format: str,
    columns: Any,
    tokenise_one: Callable[[Any, Any], tuple[np.ndarray, np.ndarray]],
    load_tokenizer: Callable[[Any], Any],
    *,
    use_cache: bool = True,
) -> Tokenised:
    """Every row's tokens and mask (1-based row ``n`` is entry ``n - 1``), from the cache or by
    ``tokenise_one(tokenizer, row)``, which raises ``RowError`` for a row the template rejects
    (kept as its message). Rows numbered in ``skip`` are not tokenised (None). ``tokenizer``
    may be a directory: it is loaded (``load_tokenizer``) only on a miss."""
    from cookbook.data._rows import RowError

    kept = [None if n in skip else row for n, row in enumerate(rows, start=1)]
    key = entry_key(kept, tokenizer, data_format, columns) if use_cache and cache_dir() is not None else None
    if key is not None and (hit := load(key)) is not None and len(hit) == len(kept):
        return hit
    if isinstance(tokenizer, str | Path):
        tokenizer = load_tokenizer(tokenizer)
    out: Tokenised = []
    for n, row in enumerate(rows, start=1):
        if n in skip:
            out.append(None)
            continue
        try:
            out.append(tokenise_one(tokenizer, row))
        except RowError as e:
            out.append(str(e))
    if key is not None:
        store(key, out)
    return out
