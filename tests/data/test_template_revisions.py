"""Every Gemma 4 chat-template revision TRL ships, on every kind of row: kept with nothing lost,
or refused with the revision and the fix; never a row trained with part of it dropped.

The five revisions are read from the installed TRL (1.16.0, requirements.txt), not copied here.
Revisions 1-4 render no thought at all; revision 5 (the cookbook's) renders the thoughts of the
turns after the last user message only. Run with ``-s`` to see each kept row's trained spans.
"""

import importlib.util
from pathlib import Path

import pytest
from chat_rows import ROWS

from cookbook import data
from cookbook.data import _cli, _rows, _tokenize
from cookbook.models import _tokenizer

REVISIONS = ["gemma4", "gemma4_v2", "gemma4_v3", "gemma4_v4", "gemma4_v5"]
# What each revision does with each kind: kept, or refused with this fix.
NO_THOUGHTS = "this revision renders no thoughts"
EARLIER_THOUGHT = "split the conversation into one row per assistant turn"
EXPECTED = {
    **{
        rev: {
            "plain": "kept",
            "system": "kept",
            "thinking": NO_THOUGHTS,
            "multi-turn thinking": NO_THOUGHTS,
            "tool call": "kept",
            "tool response": "kept",
        }
        for rev in REVISIONS[:4]
    },
    "gemma4_v5": {
        "plain": "kept",
        "system": "kept",
        "thinking": "kept",
        "multi-turn thinking": EARLIER_THOUGHT,
        "tool call": "kept",
        "tool response": "kept",
    },
}


def _trl_templates() -> Path:
    spec = importlib.util.find_spec("trl")
    assert spec is not None and spec.origin, "TRL is a dependency (requirements.txt): the GPU recipe runs it"
    return Path(spec.origin).parent / "chat_templates"


@pytest.fixture(scope="module")
def tokenizers(tiny_base) -> dict:
    out = {}
    for rev in REVISIONS:
        tok = _tokenize._load_from_dir(tiny_base)
        tok.chat_template = (_trl_templates() / f"{rev}.jinja").read_text(encoding="utf-8")
        out[rev] = tok
    return out


def test_the_five_revisions_are_the_listed_ones_and_the_fifth_is_the_cookbooks():
    from cookbook import models

    for n, rev in enumerate(REVISIONS, start=1):
        tok = type("T", (), {"chat_template": (_trl_templates() / f"{rev}.jinja").read_text(encoding="utf-8")})
        assert data.template_revision(tok).startswith(f"Gemma 4 revision {n}"), rev
    assert (_trl_templates() / "gemma4_v5.jinja").read_bytes() == models.CHAT_TEMPLATE_FILE.read_bytes()
    edited = type("T", (), {"chat_template": _tokenizer.CHAT_TEMPLATE + " "})
    assert data.template_revision(edited).startswith("an unlisted revision")


@pytest.mark.parametrize("rev", REVISIONS)
@pytest.mark.parametrize("kind", list(ROWS))
def test_each_revision_keeps_each_row_whole_or_refuses_it(rev, kind, tokenizers):
    tok, row, expected = tokenizers[rev], ROWS[kind], EXPECTED[rev][kind]
    conversation = _rows.to_conversation(row)
    text = _tokenize.render(tok, conversation)
    if expected == "kept":
        assert data.lost_content(conversation, text) == []
        ids, mask = data.tokenize_chat(tok, row)
        spans = _tokenize.trained_spans(text)
        print(f"\n[{rev} / {kind}] {_cli.marked(text, spans)}")
        trained = tok.decode(ids[mask == 1])
        # The model's own words are trained, and nothing the user, system or tool wrote.
        last = conversation.messages[-1]
        assert last["content"] in trained and trained.endswith(("<turn|>", "<|tool_response>"))
        if last.get("reasoning_content"):
            assert last["reasoning_content"] in trained
        for m in conversation.messages:
            if m["role"] in ("user", "system"):
                assert m["content"] not in trained
        if kind == "tool response":
            assert "sunny, 21 C" not in trained and "get_weather" in trained
    else:
        with pytest.raises(_rows.RowError) as caught:
            data.tokenize_chat(tok, row)
        said = str(caught.value)
        assert data.template_revision(tok) in said and expected in said and "thought" in said
        # Through the pipeline: the row is dropped with its row number and that reason, never kept.
        plain = ROWS["plain"]
        examples, report = data.prepare_examples([plain, row], tok, data.DataConfig(max_bad_fraction=0.5), cache=False)
        assert [e.row for e in examples] == [1] and [p.row for p in report.problems] == [2]
        assert expected in report.problems[0].reason
