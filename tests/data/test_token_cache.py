"""The tokenised rows' cache (cookbook/data/_cache.py): a hit gives what tokenising gives,
without loading the tokenizer; anything that changes the tokens changes the key; entries are
whole, bounded and can be turned off."""

import shutil

import numpy as np
import pytest

from cookbook import data
from cookbook.data import _cache, _tokenize

pytestmark = pytest.mark.jax_only


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COOKBOOK_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("COOKBOOK_TOKEN_CACHE", raising=False)
    return tmp_path / "cache" / "tokenized"


@pytest.fixture(scope="module")
def rows():
    """Sample rows, one the template rejects (a turn with a role it does not know) and one
    over 64 tokens."""
    rows = data.generate_rows("train", n=60, seed=3)
    rows[5] = {"messages": [{"role": "user", "content": "hi"}, {"role": "wizard", "content": "x"}]}
    return rows


@pytest.fixture(scope="module")
def tok(tiny_base):
    return _tokenize._load_from_dir(tiny_base)


def _same(a, b):
    (ex_a, rep_a), (ex_b, rep_b) = a, b
    assert [e.row for e in ex_a] == [e.row for e in ex_b]
    for x, y in zip(ex_a, ex_b, strict=True):
        np.testing.assert_array_equal(x.token_ids, y.token_ids)
        np.testing.assert_array_equal(x.loss_mask, y.loss_mask)
        assert x.token_ids.dtype == y.token_ids.dtype == np.int32
        assert x.loss_mask.dtype == y.loss_mask.dtype == np.int32
    assert rep_a == rep_b


def test_a_hit_is_what_tokenising_gives_and_loads_no_tokenizer(cache, rows, tok, tiny_base, monkeypatch):
    config = data.DataConfig(seq_len=64, max_bad_fraction=0.5)
    fresh = data.prepare_examples(rows, tok, config, cache=False)
    assert any("template" in p.reason or "role" in p.reason for p in fresh[1].problems)
    assert not cache.exists()  # cache=False writes nothing

    first = data.prepare_examples(rows, tiny_base, config)  # a miss: loads the tokenizer, writes
    _same(first, fresh)
    assert len(list(cache.glob("*.npz"))) == 1 and not list(cache.glob(".*"))

    def no_load(path):
        raise AssertionError("the tokenizer was loaded on a hit")

    monkeypatch.setattr(_tokenize, "_load_from_dir", no_load)
    _same(data.prepare_examples(rows, tiny_base, config), fresh)
    # seq_len and the too-long policy are applied after the cache: one entry serves both.
    longer = data.DataConfig(seq_len=512, max_bad_fraction=0.5)
    _same(data.prepare_examples(rows, tiny_base, longer), data.prepare_examples(rows, tok, longer, cache=False))
    assert len(list(cache.glob("*.npz"))) == 1


def test_what_changes_the_tokens_changes_the_key(cache, rows, tiny_base, tmp_path):
    key = _cache.entry_key(rows, tiny_base, "auto", None)
    assert key == _cache.entry_key(list(rows), tiny_base, "auto", None)
    edited = [dict(r) for r in rows]
    edited[0] = {"messages": [dict(m) for m in rows[0]["messages"]]}
    edited[0]["messages"][-1]["content"] += " "
    assert _cache.entry_key(edited, tiny_base, "auto", None) != key
    assert _cache.entry_key(rows, tiny_base, "messages", None) != key
    other = tmp_path / "other-tokenizer"
    shutil.copytree(tiny_base, other)
    assert _cache.entry_key(rows, other, "auto", None) == key  # the same files: the same key
    template = other / "chat_template.jinja"
    template.write_text(template.read_text().replace("<|turn>", "<|turn> "))
    assert _cache.entry_key(rows, other, "auto", None) != key
    # A row that is not plain JSON, a Hub id and a slow tokenizer are not cached.
    assert _cache.entry_key([{"messages": np.arange(3)}], tiny_base, "auto", None) is None
    assert _cache.entry_key(rows, "google/gemma-4-E2B-it", "auto", None) is None
    assert _cache.entry_key(rows, object(), "auto", None) is None


def test_a_loaded_tokenizer_is_keyed_by_what_it_renders(cache, rows, tok):
    key = _cache.entry_key(rows, tok, "auto", None)
    assert key is not None
    changed = _tokenize._load_from_dir(tok.name_or_path)
    assert _cache.entry_key(rows, changed, "auto", None) == key
    changed.chat_template = changed.chat_template.replace("<|turn>", "<|turn> ")
    assert _cache.entry_key(rows, changed, "auto", None) != key


def test_a_damaged_entry_is_a_miss_and_rewritten(cache, rows, tok, tiny_base):
    config = data.DataConfig(seq_len=64, max_bad_fraction=0.5)
    fresh = data.prepare_examples(rows, tok, config, cache=False)
    data.prepare_examples(rows, tiny_base, config)
    (entry,) = cache.glob("*.npz")
    entry.write_bytes(entry.read_bytes()[:100])
    _same(data.prepare_examples(rows, tiny_base, config), fresh)
    assert entry.stat().st_size > 100


def test_the_directory_is_bounded_oldest_used_first(cache, rows, tiny_base, monkeypatch):
    import os

    config = data.DataConfig(seq_len=64, max_bad_fraction=0.5)
    data.prepare_examples(rows[:20], tiny_base, config)
    (first,) = cache.glob("*.npz")
    size = first.stat().st_size
    os.utime(first, (1, 1))  # used long ago
    data.prepare_examples(rows[20:40], tiny_base, config)
    second = next(p for p in cache.glob("*.npz") if p != first)
    monkeypatch.setenv("COOKBOOK_TOKEN_CACHE_BYTES", str(int(size * 1.5) + second.stat().st_size))
    data.prepare_examples(rows[40:], tiny_base, config)
    left = set(cache.glob("*.npz"))
    assert first not in left and second in left and len(left) == 2


def test_turned_off_it_writes_nothing(cache, rows, tiny_base, monkeypatch):
    monkeypatch.setenv("COOKBOOK_TOKEN_CACHE", "0")
    data.prepare_examples(rows, tiny_base, data.DataConfig(seq_len=64, max_bad_fraction=0.5))
    assert not cache.exists()
