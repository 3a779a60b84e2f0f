"""Streamed safetensors shards: read headers, copy tensors byte for byte, write tensor by tensor.

The ``safetensors`` library writes a file from a dict of tensors held in memory, so a
shard's worth of RAM is the least it needs. The file format is small and documented
(8-byte little-endian header length, a JSON header of ``dtype``/``shape``/
``data_offsets``, then the raw bytes), so this module writes it directly: untouched
tensors go file-to-file with ``os.copy_file_range`` (no copy through Python), and a
tensor that changes is produced in row blocks by a callback. Files written here are read
back by ``safetensors.safe_open`` in the tests.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np

_MAX_HEADER = 100 * 2**20  # same limit as the safetensors library


def numpy_dtype(code: str) -> np.dtype:
    """numpy dtype of a safetensors dtype code (``BF16`` and FP8 through ml_dtypes)."""
    import ml_dtypes

    table = {
        "F64": np.float64,
        "F32": np.float32,
        "F16": np.float16,
        "BF16": ml_dtypes.bfloat16,
        "F8_E4M3": ml_dtypes.float8_e4m3fn,
        "F8_E5M2": ml_dtypes.float8_e5m2,
        "I64": np.int64,
        "I32": np.int32,
        "I16": np.int16,
        "I8": np.int8,
        "U64": np.uint64,
        "U32": np.uint32,
        "U16": np.uint16,
        "U8": np.uint8,
        "BOOL": np.bool_,
    }
    if code not in table:
        raise ValueError(f"unsupported safetensors dtype {code!r}")
    return np.dtype(table[code])


FLOAT_CODES = ("F64", "F32", "F16", "BF16")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TensorRef:
    """Where one tensor's bytes are in a safetensors file."""

    name: str
    path: Path
    dtype: str  # safetensors code, e.g. "BF16"
    shape: tuple[int, ...]
    offset: int  # absolute byte offset in the file
    nbytes: int


def read_header(path: str | Path) -> tuple[dict[str, TensorRef], dict[str, str]]:
    """Tensors of one safetensors file (from the header only) and its ``__metadata__``."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > min(_MAX_HEADER, size - 8):
            raise ValueError(f"{path}: header length {n} is not plausible; the file is damaged")
        header = json.loads(f.read(n))
    start = 8 + n
    metadata = header.pop("__metadata__", None) or {}
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        shape = tuple(int(s) for s in info["shape"])
        want = math.prod(shape) * numpy_dtype(info["dtype"]).itemsize
        if end - begin != want or begin < 0 or start + end > size:
            raise ValueError(f"{path}: tensor {name} has offsets {begin}..{end}, needs {want} bytes in the file")
        tensors[name] = TensorRef(
            name=name, path=path, dtype=info["dtype"], shape=shape, offset=start + begin, nbytes=end - begin
        )
    return tensors, metadata


# A tensor to write: its output name, where its base bytes are, and an optional function
# ``update(block, first_row, scratch)`` that changes a block of base rows in place (float32,
# shape (rows, *shape[1:]); ``scratch`` is a same-shaped buffer it may use). None means
# "copy the bytes unchanged".
RowFn = Callable[[np.ndarray, int, np.ndarray], None]


@dataclasses.dataclass(frozen=True, kw_only=True)
class OutTensor:
    name: str
    src: TensorRef
    update: RowFn | None = None


def plan_shards(tensors: list[OutTensor], max_shard_bytes: int) -> list[list[OutTensor]]:
    """Split ``tensors`` (in order) into shards of at most ``max_shard_bytes`` of data.

    A tensor larger than the limit gets a shard of its own (as transformers does).
    """
    shards: list[list[OutTensor]] = [[]]
    used = 0
    for t in tensors:
        if shards[-1] and used + t.src.nbytes > max_shard_bytes:
            shards.append([])
            used = 0
        shards[-1].append(t)
        used += t.src.nbytes
    return [s for s in shards if s]


def shard_names(n: int) -> list[str]:
    """transformers' shard names: ``model-00001-of-00003.safetensors``."""
    if n == 1:
        return ["model.safetensors"]
    return [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]


def header_bytes(tensors: list[OutTensor], metadata: dict[str, str]) -> bytes:
    header: dict = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for t in tensors:
        header[t.name] = {
            "dtype": t.src.dtype,
            "shape": list(t.src.shape),
            "data_offsets": [offset, offset + t.src.nbytes],
        }
        offset += t.src.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # data starts 8-byte aligned, as the library writes it
    return struct.pack("<Q", len(raw)) + raw


def _copy_range(src_fd: int, dst_fd: int, offset: int, nbytes: int) -> None:
    done = 0
    while done < nbytes:
        try:
            n = os.copy_file_range(src_fd, dst_fd, nbytes - done, offset + done)
        except OSError:  # e.g. across file systems on older kernels
            n = 0
        if n == 0:
            os.lseek(src_fd, offset + done, os.SEEK_SET)
            chunk = os.read(src_fd, min(64 * 2**20, nbytes - done))
            if not chunk:
                raise OSError(f"unexpected end of file copying {nbytes} bytes at {offset}")
            _write_all(dst_fd, memoryview(chunk))
            n = len(chunk)
        done += n


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        data = data[os.write(fd, data) :]


class _Buffers:
    """Reused block buffers: fresh 64 MB arrays per block cost more in page faults than the
    arithmetic (measured 3x slower), so every block of every tensor uses the same memory."""

    def __init__(self, block_bytes: int):
        self.raw = bytearray(block_bytes)
        self.f32 = np.empty(max(block_bytes // 4, 1), np.float32)
        self.scratch = np.empty_like(self.f32)
        self.out = bytearray(block_bytes)

    def rows_per_block(self, row_elems: int) -> int:
        return max(1, min(self.f32.size, len(self.raw) // 4) // max(row_elems, 1))

    def grow(self, elems: int, itemsize: int) -> None:
        if elems > self.f32.size:  # one row wider than the block: rare, allocate once
            self.f32, self.scratch = np.empty(elems, np.float32), np.empty(elems, np.float32)
        if elems * itemsize > len(self.raw):
            self.raw, self.out = bytearray(elems * itemsize), bytearray(elems * itemsize)


def _write_updated(t: OutTensor, src: int, dst: int, bufs: _Buffers) -> None:
    """Stream one tensor through ``t.update`` in row blocks (float32), cast back, write."""
    assert t.update is not None
    dtype = numpy_dtype(t.src.dtype)
    rows = t.src.shape[0] if t.src.shape else 1
    row_shape = t.src.shape[1:]
    row_elems = math.prod(row_shape)
    step = bufs.rows_per_block(row_elems)
    bufs.grow(step * row_elems, dtype.itemsize)
    for start in range(0, rows, step):
        n = min(step, rows - start)
        elems, nbytes = n * row_elems, n * row_elems * dtype.itemsize
        view = memoryview(bufs.raw)[:nbytes]
        got = os.preadv(src, [view], t.src.offset + start * row_elems * dtype.itemsize)
        if got != nbytes:
            raise OSError(f"{t.src.path}: short read of {t.src.name} ({got} of {nbytes} bytes)")
        block = bufs.f32[:elems].reshape((n, *row_shape))
        np.copyto(block, np.frombuffer(view, dtype=dtype).reshape((n, *row_shape)), casting="unsafe")
        t.update(block, start, bufs.scratch[:elems].reshape((n, *row_shape)))
        out = np.frombuffer(bufs.out, dtype=dtype, count=elems).reshape((n, *row_shape))
        np.copyto(out, block, casting="unsafe")
        _write_all(dst, memoryview(bufs.out)[:nbytes])


def write_shard(
    path: str | Path,
    tensors: list[OutTensor],
    metadata: dict[str, str],
    *,
    block_bytes: int = 64 * 2**20,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Write one safetensors file; return its data bytes. Memory: about ``block_bytes`` x 4."""
    path = Path(path)
    files: dict[Path, int] = {}
    bufs: _Buffers | None = None
    try:
        with open(path, "wb") as out:
            out.write(header_bytes(tensors, metadata))
            out.flush()
            dst = out.fileno()
            for t in tensors:
                src = files.get(t.src.path)
                if src is None:
                    src = files[t.src.path] = os.open(t.src.path, os.O_RDONLY)
                if t.update is None:
                    _copy_range(src, dst, t.src.offset, t.src.nbytes)
                else:
                    bufs = bufs or _Buffers(block_bytes)
                    _write_updated(t, src, dst, bufs)
                if progress is not None:
                    progress(t.src.nbytes)
            os.fsync(dst)
    finally:
        for fd in files.values():
            os.close(fd)
    return sum(t.src.nbytes for t in tensors)
