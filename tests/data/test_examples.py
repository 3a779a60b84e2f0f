"""Notebook 05's rows and checks as package calls: the layouts' example rows, R1-length thoughts,
the resume check, the packing lines."""

import numpy as np
import pytest

from cookbook import data
from cookbook.data import _pipeline

pytestmark = pytest.mark.jax_only


def test_long_thought_rows_are_seeded_and_have_a_long_tail():
    rows = data.long_thought_rows(400, seed=3)
    assert rows == data.long_thought_rows(400, seed=3) != data.long_thought_rows(400, seed=4)
    words = np.array([len(r["response"].split("</think>")[0].split()) for r in rows])
    assert len(rows) == 400 and words.min() >= 1
    assert np.max(words) > 4 * np.median(words)  # log-normal: a tail past several times the median
    assert all(r["response"].startswith("<think>") and "endmodule" in r["response"] for r in rows)


def test_format_examples_render_with_the_thought_and_tool_call_trained(tiny_base, tmp_path):
    tokenizer = data.load_tokenizer(base_dir=tiny_base)
    path = data.write_jsonl(data.format_examples(), tmp_path / "formats.jsonl")
    view = data.inspect(path, tokenizer, data.DataConfig(seq_len=256, max_bad_fraction=1.0), show=3)
    assert data.format_example_checks(view) == {
        "thought_trained": True,
        "tool_call_trained": True,
        "tool_response_untrained": True,
    }
    text = data.format_view(view)
    assert text.startswith(view["summary"]) and text.count("\n--- row ") == 3 and "[[" in text


def test_resume_replays_and_notices_an_iterator_that_does_not(tiny_base, monkeypatch):
    tokenizer = data.load_tokenizer(base_dir=tiny_base)
    examples, _ = data.prepare_examples(data.generate_rows("train", n=120, seed=0), tokenizer, data.DataConfig())
    config = data.DataConfig(seq_len=128, batch_size=4, packing=True, seed=1)
    assert data.resume_replays(examples, config, at=5, steps=10)
    original = _pipeline.iter_batches
    monkeypatch.setattr(_pipeline, "iter_batches", lambda ex, cfg, **kw: original(ex, cfg, mesh=kw.get("mesh")))
    assert not data.resume_replays(examples, config, at=5, steps=10)  # restarts from step 0: caught


def test_format_packing_states_each_fraction():
    eff = {
        "seq_len": 256,
        "longest": 61,
        "real_fraction_padded": 0.238,
        "real_fraction_packed": 0.953,
        "real_fraction_padded_to_longest": 1.0,
    }
    lines = data.format_packing(eff).splitlines()
    assert [line.split(":")[1].strip() for line in lines] == [
        "23.8% real tokens",
        "95.3% real tokens",
        "100.0% real tokens",
    ]
    assert "padding to 61 (this data's longest)" in lines[2]
