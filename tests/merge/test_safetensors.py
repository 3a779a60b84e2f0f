"""cookbook.merge safetensors: headers read, shards written directly, read back by the library."""

import json
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from cookbook import merge
from cookbook.merge import _safetensors


def _tensors(seed=0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "a.weight": rng.normal(size=(33, 7)).astype(np.float32),
        "b.bias": rng.normal(size=(5,)).astype(np.float16),
        "c.ids": np.arange(24, dtype=np.int64).reshape(2, 3, 4),
        "d.mask": np.array([True, False, True]),
        "e.bf16": rng.normal(size=(9, 4)).astype(ml_dtypes.bfloat16),
        "f.scalar": np.array(2.5, np.float64),
    }


def _read(path) -> dict[str, np.ndarray]:
    with safe_open(str(path), framework="numpy") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "in.safetensors"
    save_file(_tensors(), str(path), metadata={"format": "pt", "note": "x"})
    return path


def test_read_header_describes_every_tensor(source):
    refs, meta = merge.read_header(source)
    assert meta == {"format": "pt", "note": "x"}
    want = _tensors()
    assert set(refs) == set(want)
    codes = {"a.weight": "F32", "b.bias": "F16", "c.ids": "I64", "d.mask": "BOOL", "e.bf16": "BF16", "f.scalar": "F64"}
    raw = source.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    for name, ref in refs.items():
        assert (ref.name, ref.path, ref.dtype, ref.shape) == (name, source, codes[name], want[name].shape)
        assert ref.nbytes == want[name].nbytes and ref.offset >= 8 + n
        # The bytes at the offset are the tensor's own.
        assert raw[ref.offset : ref.offset + ref.nbytes] == np.ascontiguousarray(want[name]).tobytes(), name
    spans = sorted((r.offset, r.offset + r.nbytes) for r in refs.values())
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:], strict=False))  # no overlap
    assert spans[-1][1] == len(raw)


def test_write_shard_copies_tensors_the_library_reads_back(source, tmp_path):
    refs, _ = merge.read_header(source)
    order = ["e.bf16", "a.weight", "d.mask", "f.scalar", "c.ids"]  # a subset, in a new order
    out = tmp_path / "out.safetensors"
    written = merge.write_shard(out, [merge.OutTensor(name=f"x.{n}", src=refs[n]) for n in order], {"format": "pt"})
    want = _tensors()
    assert written == sum(want[n].nbytes for n in order)
    got = _read(out)
    assert set(got) == {f"x.{n}" for n in order}
    for n in order:
        assert got[f"x.{n}"].dtype == want[n].dtype and np.array_equal(got[f"x.{n}"], want[n]), n
    with safe_open(str(out), framework="numpy") as f:
        assert f.metadata() == {"format": "pt"}
    back, meta = merge.read_header(out)
    assert meta == {"format": "pt"} and [back[f"x.{n}"].dtype for n in order] == [refs[n].dtype for n in order]
    (n,) = struct.unpack("<Q", out.read_bytes()[:8])
    assert n % 8 == 0  # data 8-byte aligned
    assert out.stat().st_size == 8 + n + written


def test_write_shard_without_metadata_and_from_two_files(tmp_path):
    save_file({"p": np.ones((4, 4), np.float32)}, str(tmp_path / "1.safetensors"))
    save_file({"q": np.full((3,), 7, np.int32)}, str(tmp_path / "2.safetensors"))
    (p,), (q,) = (merge.read_header(tmp_path / f"{i}.safetensors")[0].values() for i in (1, 2))
    merge.write_shard(
        tmp_path / "o.safetensors", [merge.OutTensor(name="q", src=q), merge.OutTensor(name="p", src=p)], {}
    )
    got = _read(tmp_path / "o.safetensors")
    assert np.array_equal(got["p"], np.ones((4, 4))) and np.array_equal(got["q"], [7, 7, 7])
    assert merge.read_header(tmp_path / "o.safetensors")[1] == {}


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_write_shard_updates_rows_in_float32_and_casts_back(tmp_path, dtype):
    rng = np.random.default_rng(1)
    w = rng.normal(size=(300, 6, 5)).astype(dtype)
    save_file({"w": w, "keep": np.ones(3, np.float32)}, str(tmp_path / "in.safetensors"))
    refs, _ = merge.read_header(tmp_path / "in.safetensors")
    delta = rng.normal(0, 0.01, size=(300, 6, 5)).astype(np.float32)
    starts, progress = [], []

    def update(block, start, scratch):
        assert block.dtype == np.float32 and block.shape[1:] == (6, 5) and scratch.shape == block.shape
        starts.append((start, block.shape[0]))
        np.multiply(block, 2.0, out=scratch)
        block[:] = scratch + delta[start : start + block.shape[0]]

    merge.write_shard(
        tmp_path / "out.safetensors",
        [merge.OutTensor(name="w", src=refs["w"], update=update), merge.OutTensor(name="keep", src=refs["keep"])],
        {"format": "pt"},
        block_bytes=1024,
        progress=progress.append,
    )
    got = _read(tmp_path / "out.safetensors")
    want = (w.astype(np.float32) * 2 + delta).astype(dtype)
    assert got["w"].dtype == np.dtype(dtype) and np.array_equal(got["w"], want)
    assert np.array_equal(got["keep"], np.ones(3))
    # Several row blocks covering every row once, in order.
    assert len(starts) > 1 and starts[0][0] == 0
    assert all(s + n == t for (s, n), (t, _) in zip(starts, starts[1:], strict=False))
    assert sum(n for _, n in starts) == 300
    assert progress == [refs["w"].nbytes, refs["keep"].nbytes]


def test_bfloat16_rows_updated_in_float32_and_cast_back(tmp_path):
    import ml_dtypes
    import torch
    from safetensors.torch import load_file, save_file

    w = torch.randn(300, 40).to(torch.bfloat16)
    save_file({"w": w, "n": torch.ones(40, dtype=torch.bfloat16)}, str(tmp_path / "in.safetensors"))
    refs, _ = merge.read_header(tmp_path / "in.safetensors")
    delta = np.random.default_rng(0).normal(0, 0.01, (300, 40)).astype(np.float32)

    def fn(block, start, scratch):
        block += delta[start : start + block.shape[0]]

    # block_bytes small enough that the update runs in several row blocks
    merge.write_shard(
        tmp_path / "out.safetensors",
        [merge.OutTensor(name="w", src=refs["w"], update=fn), merge.OutTensor(name="n", src=refs["n"])],
        {"format": "pt"},
        block_bytes=4096,
    )
    out = load_file(str(tmp_path / "out.safetensors"))
    want = (w.float().numpy() + delta).astype(ml_dtypes.bfloat16).astype(np.float32)
    assert out["w"].dtype == torch.bfloat16 and np.array_equal(out["w"].float().numpy(), want)
    assert torch.equal(out["n"], torch.ones(40, dtype=torch.bfloat16))


def _ref(name: str, nbytes: int) -> merge.OutTensor:
    src = merge.TensorRef(name=name, path=Path("f"), dtype="U8", shape=(nbytes,), offset=0, nbytes=nbytes)
    return merge.OutTensor(name=name, src=src)


@pytest.mark.parametrize("seed", range(5))
def test_plan_shards_keeps_order_and_the_limit(seed):
    rng = np.random.default_rng(seed)
    limit = 100
    sizes = [int(s) for s in rng.integers(1, 160, size=40)]  # some larger than the limit
    tensors = [_ref(str(i), n) for i, n in enumerate(sizes)]
    shards = _safetensors.plan_shards(tensors, limit)
    assert [t for s in shards for t in s] == tensors  # all of them, in order, once
    for s in shards:
        total = sum(t.src.nbytes for t in s)
        assert s and (total <= limit or len(s) == 1), [t.src.nbytes for t in s]
    # Greedy: no shard could have taken the next shard's first tensor.
    for s, nxt in zip(shards, shards[1:], strict=False):
        assert sum(t.src.nbytes for t in s) + nxt[0].src.nbytes > limit


def test_plan_shards_puts_an_oversized_tensor_alone():
    tensors = [_ref("a", 30), _ref("big", 500), _ref("b", 30), _ref("c", 80)]
    groups = _safetensors.plan_shards(tensors, 100)
    assert [[t.name for t in g] for g in groups] == [["a"], ["big"], ["b"], ["c"]]
    assert _safetensors.plan_shards([], 100) == []
    assert [[t.name for t in g] for g in _safetensors.plan_shards(tensors, 10**6)] == [["a", "big", "b", "c"]]


def test_shard_names():
    assert _safetensors.shard_names(1) == ["model.safetensors"]
    assert _safetensors.shard_names(3) == [
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
    ]
    assert (
        len(set(_safetensors.shard_names(120))) == 120
        and _safetensors.shard_names(120)[-1] == "model-00120-of-00120.safetensors"
    )


def test_implausible_headers_are_refused(tmp_path):
    small = tmp_path / "small.safetensors"
    small.write_bytes(struct.pack("<Q", 4096) + b"{}")  # claims more header than the file has
    with pytest.raises(ValueError, match="header length 4096 is not plausible; the file is damaged"):
        merge.read_header(small)
    # A file large enough for the claim, but the claim is over the library's 100 MiB limit.
    big = tmp_path / "big.safetensors"
    with open(big, "wb") as f:
        f.write(struct.pack("<Q", 100 * 2**20 + 8))
        f.truncate(200 * 2**20)  # sparse: no 200 MB written
    with pytest.raises(ValueError, match=f"header length {100 * 2**20 + 8} is not plausible"):
        merge.read_header(big)


def test_tensor_offsets_outside_the_file_are_refused(tmp_path):
    def write(header: dict, data: bytes):
        raw = json.dumps(header).encode()
        path = tmp_path / "t.safetensors"
        path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
        return path

    ok = write({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8)
    assert merge.read_header(ok)[0]["t"].nbytes == 8
    short = write({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8)
    with pytest.raises(ValueError, match="tensor t has offsets 0..16"):
        merge.read_header(short)
    wrong_size = write({"t": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8)
    with pytest.raises(ValueError, match="needs 12 bytes"):
        merge.read_header(wrong_size)
    with pytest.raises(ValueError, match="unsupported safetensors dtype 'C64'"):
        merge.read_header(write({"t": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}}, b"\0" * 8))
