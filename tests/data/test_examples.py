"""Notebook 05's example rows: one per data layout, rendered with what each must show, and rows with
R1-length thoughts."""

import numpy as np
import pytest

from cookbook import data
from cookbook.data import _cli, _examples

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
    path = data.write_jsonl(_examples.format_examples(), tmp_path / "formats.jsonl")
    view = _cli.inspect(path, tokenizer, data.DataConfig(seq_len=256, max_bad_fraction=1.0), show=3)
    assert _examples.format_example_checks(view) == {
        "thought_trained": True,
        "tool_call_trained": True,
        "tool_response_untrained": True,
    }
    text = _cli.format_view(view)
    assert text.startswith(view["summary"]) and text.count("\n--- row ") == 3 and "[[" in text
