"""cookbook.data._sections: notebook 05's sample task, loss-mask view, sources, messy rows,
formats and too-long policies, each checked against what it must have found."""

import json

import pytest

from cookbook import data
from cookbook.data import _cli, _sample_task

pytestmark = pytest.mark.jax_only


@pytest.fixture(scope="module")
def tok(tiny_base):
    return data.load_tokenizer(base_dir=tiny_base)


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return data.sample_task(tmp_path_factory.mktemp("task"), num_train=300, num_eval=20, seed=1)


def test_sample_task_writes_the_training_rows_and_holds_out_names(task):
    lines = task.train_path.read_text().splitlines()
    assert [json.loads(line) for line in lines] == task.train_rows and len(lines) == 300
    assert task.train_rows == data.generate_rows("train", n=300, seed=1)
    assert (
        list(task.held_out_names) == sorted(set(_sample_task.module_names("eval"))) and len(task.held_out_names) == 32
    )
    train_names = set(_sample_task.module_names("train"))
    assert not train_names & set(task.held_out_names)
    assert task.results() == {
        "num_train_rows": 300,
        "num_eval_rows": 20,
        "num_held_out_names": 32,
        "train_path": task.train_path,
    }
    first = task.train_rows[0]["messages"]
    assert task.describe().startswith(f"{first[0]['content']}\n{first[1]['content']}\n")
    assert "300 train rows, 20 eval rows" in task.describe()


def test_describe_loss_mask_counts_what_the_trainer_trains_on(tok, task):
    row = task.train_rows[0]
    ids, mask = data.tokenize_chat(tok, row)
    marked, counts = data.describe_loss_mask(tok, row).rsplit("\n", 1)
    assert marked == data.marked_tokens(tok, row)
    assert counts == f"{len(ids)} tokens, {int(mask.sum())} trained on"
    assert 0 < int(mask.sum()) < len(ids)  # the answer only, not the prompt


def test_compare_sources_finds_the_same_tokens_and_a_shuffled_reference_is_caught(tok, task, tmp_path):
    config = data.DataConfig(seq_len=256)
    reference, _ = data.prepare_examples(task.train_path, tok, config)
    got = data.compare_sources(task.train_rows[:50], reference, tok, config, out_dir=tmp_path)
    assert [(m.source, m.num_examples, m.same_tokens) for m in got.matches] == [
        ("Parquet", 50, True),
        ("datasets.Dataset", 50, True),
    ]
    assert got.all_same and (tmp_path / "train.parquet").is_file()
    # Control: other rows of the same task (same lengths, other tokens) do not match.
    other = data.generate_rows("train", n=50, seed=7)
    wrong = data.compare_sources(other, reference, tok, config, out_dir=tmp_path)
    assert not wrong.all_same and "same tokens as the JSONL's first rows: False" in wrong.describe()


def test_messy_rows_refused_at_five_percent_and_every_bad_row_found_at_ten(tok, task, tmp_path):
    config = data.DataConfig(seq_len=256, max_bad_fraction=0.05)
    check = data.check_messy_rows(task.train_rows[:150], tok, config, out_dir=tmp_path)
    assert check.refusal is not None and "row" in check.refusal
    assert check.all_found and set(check.expected_rows) == {p.row for p in check.report.problems}
    r = check.results()
    assert r["messy_refused_at_default"] and r["messy_all_reasons_found"]
    lines = (tmp_path / "messy.jsonl").read_bytes().splitlines()  # one row is not UTF-8, on purpose
    assert r["messy_rows"] == len(lines) > 150 and r["messy_dropped"] == len(check.expected_rows) == 10
    assert check.describe().startswith("refused: ") and "every bad row found: True" in check.describe()
    lenient = data.check_messy_rows(task.train_rows[:150], tok, data.DataConfig(max_bad_fraction=0.5), out_dir=tmp_path)
    assert lenient.refusal is None and not lenient.results()["messy_refused_at_default"]
    assert not lenient.describe().startswith("refused")


def test_inspect_formats_checks_the_built_in_rows_and_records_nothing_for_a_users_file(tok, task, tmp_path):
    config = data.DataConfig(seq_len=256)
    built_in = data.inspect_formats(tok, config, out_dir=tmp_path)
    assert built_in.checks == {"thought_trained": True, "tool_call_trained": True, "tool_response_untrained": True}
    assert built_in.results() == {"format_rows_shown": 3, **built_in.checks}
    assert built_in.describe().endswith(
        "thought trained: True | tool call trained: True | tool response untrained: True"
    )
    own = data.inspect_formats(tok, config, out_dir=tmp_path, data_path=task.train_path, show=2)
    assert own.checks is None and own.results() == {} and len(own.view["rows"]) == 2
    assert own.describe() == _cli.format_view(own.view)


def test_too_long_policies_drop_or_truncate_the_tail(tok):
    rows = data.long_thought_rows(60, seed=0)
    got = data.compare_too_long_policies(rows, tok, data.DataConfig(seq_len=256))
    over = got.report.num_over
    assert over > 0 and got.reports["drop"].num_over == over
    assert got.kept["drop"] == len(rows) - over  # dropped: every row over seq_len
    assert got.kept["truncate"] > got.kept["drop"] and got.report.num_truncated > 0
    pct = got.report.length_percentiles()
    assert got.results() == {
        "long_rows_p50": pct[50],
        "long_rows_max": pct[100],
        "long_rows_over": over,
        "long_rows_truncated": got.report.num_truncated,
    }
    assert pct[50] < 256 < pct[100]
    assert got.describe().splitlines()[0].startswith(f"too_long=drop: {got.kept['drop']} of 60 rows kept;")
