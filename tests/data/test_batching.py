"""cookbook.data._batching: padding against packing, the first sharded batch, resume and the
host's headroom, checked against numbers computed here from the examples themselves."""

import jax
import numpy as np
import pytest

from cookbook import data
from cookbook.data import _batching, _pipeline

pytestmark = pytest.mark.jax_only


@pytest.fixture(scope="module")
def tok(tiny_base):
    return data.load_tokenizer(base_dir=tiny_base)


@pytest.fixture(scope="module")
def examples(tok):
    rows = data.generate_rows("train", n=200, seed=0) + data.long_thought_rows(40, seed=0)
    return data.prepare_examples(rows, tok, data.DataConfig(seq_len=256, too_long="truncate", max_bad_fraction=1.0))[0]


def test_packing_efficiency_counts_real_tokens_per_layout(examples):
    config = data.DataConfig(seq_len=256, batch_size=8, packing=True, seed=0)
    eff = data.packing_efficiency(examples, config)
    lengths = [len(e.token_ids) for e in examples]
    assert eff.longest == max(lengths) and eff.num_examples == len(examples) and eff.seq_len == 256
    # Padded: one example per row, so the real fraction is the mean length of the batched rows over 256.
    rows_used = len(eff.padded) * 8
    real = sum(int((np.asarray(b["segment_ids"]) > 0).sum()) for b in eff.padded)
    assert eff.real_fraction_padded == pytest.approx(real / (rows_used * 256))
    assert all(b["segment_ids"].max() == 1 for b in eff.padded)
    assert any(b["segment_ids"].max() > 1 for b in eff.packed)  # several examples share a row
    assert eff.real_fraction_padded < eff.real_fraction_packed <= 1.0
    # Padded to the longest example: the same rows (same seed), each padded to ``longest`` only.
    assert eff.real_fraction_padded_to_longest == pytest.approx(real / (rows_used * eff.longest))
    assert eff.results() == {
        "seq_len": 256,
        "real_fraction_padded": eff.real_fraction_padded,
        "real_fraction_packed": eff.real_fraction_packed,
        "real_fraction_padded_to_longest": eff.real_fraction_padded_to_longest,
    }
    lines = eff.describe().splitlines()
    assert lines[0] == f"{len(examples)} examples, the longest {max(lengths)} tokens" and len(lines) == 4
    assert f"{eff.real_fraction_packed:.1%} real tokens" in lines[2]


def test_sharded_batch_is_split_along_fsdp_and_resume_replays(examples):
    config = data.DataConfig(seq_len=256, batch_size=8, packing=True, seed=0)
    got = data.sharded_batch(examples, config, preset="tiny", fsdp=4, tp=2)
    assert got.mesh_shape == (4, 2) and got.results() == {"batch_spec": "P('fsdp',)", "mesh": [4, 2]}
    tokens = got.batch["input_tokens"]
    assert tokens.shape == (8, 256) and isinstance(tokens, jax.Array)
    assert {s.data.shape for s in tokens.addressable_shards} == {(2, 256)}  # 8 rows over fsdp=4
    first = next(iter(_pipeline.iter_batches(examples, config)))
    assert np.array_equal(np.asarray(tokens), first["input_tokens"])  # the pipeline's first batch
    assert "rows held per device: [(2, 256)]" in got.describe()
    assert data.resume_replays(examples, config, mesh=got.mesh, at=3, steps=6)


def test_host_headroom_is_the_ratio_of_the_two_speeds(tok, monkeypatch):
    from cookbook import fit

    monkeypatch.setattr(fit, "training_tokens_per_s", lambda preset: {"tokens_per_s": 500.0, "basis": f"test {preset}"})
    rows = data.generate_rows("train", n=40, seed=0)
    got = data.host_headroom(rows, tok, data.DataConfig(seq_len=256, batch_size=8, packing=True))
    assert got.consumed_tokens_per_s == 500.0 and got.basis == "test gemma4_31b"
    assert got.speed["tokens_per_s"] > 0 and got.headroom_ratio == got.speed["tokens_per_s"] / 500.0
    assert got.results() == {
        "tokens_per_s": got.speed["tokens_per_s"],
        "consumed_tokens_per_s": 500.0,
        "headroom_ratio": got.headroom_ratio,
    }
    assert got.describe().endswith(f"(test gemma4_31b): {got.headroom_ratio:.0f}x headroom")


def test_resume_replays_and_notices_an_iterator_that_does_not(examples, monkeypatch):
    config = data.DataConfig(seq_len=256, batch_size=4, packing=True, seed=1)
    assert data.resume_replays(examples, config, at=5, steps=10)
    original = _batching.iter_batches
    monkeypatch.setattr(_batching, "iter_batches", lambda ex, cfg, **kw: original(ex, cfg, mesh=kw.get("mesh")))
    assert not data.resume_replays(examples, config, at=5, steps=10)  # restarts from step 0: caught


def test_packing_lines_state_each_fraction():
    eff = _batching.PackingEfficiency(
        num_examples=10,
        seq_len=256,
        longest=61,
        padded=[],
        packed=[],
        real_fraction_padded=0.238,
        real_fraction_packed=0.953,
        real_fraction_padded_to_longest=1.0,
    )
    head, *lines = eff.describe().splitlines()
    assert head == "10 examples, the longest 61 tokens"
    assert [line.split(":")[1].strip() for line in lines] == [
        "23.8% real tokens",
        "95.3% real tokens",
        "100.0% real tokens",
    ]
    assert "padding to 61 (this data's longest)" in lines[2]
