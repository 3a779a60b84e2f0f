"""The data pipeline: template rendering and loss masks, bad rows, padding and packing,
Grain order and resume, sharding, and that packed rows really keep examples apart."""

import json

import numpy as np
import pytest

from cookbook import data
from cookbook.data import _config, _pipeline, _rows, _sample_task
from cookbook.models import _parity


@pytest.fixture(scope="module")
def tok(tiny_base):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_base)


@pytest.fixture(scope="module")
def rows():
    return data.generate_rows("train", n=400)


@pytest.fixture(scope="module")
def examples(tok, rows):
    """The rows tokenised once (every sample row fits 128 tokens)."""
    return data.prepare_examples(rows, tok, data.DataConfig(seq_len=128))[0]


def _segments(batch):
    """(row, segment id) -> token ids and loss mask of every packed example."""
    out = {}
    for r in range(batch["segment_ids"].shape[0]):
        seg = np.asarray(batch["segment_ids"][r])
        for s in np.unique(seg[seg > 0]):
            sel = seg == s
            out[(r, int(s))] = (np.asarray(batch["input_tokens"][r])[sel], np.asarray(batch["input_mask"][r])[sel])
    return out


# ------------------------------------------------------------------------------------
# Rendering and masks


@pytest.mark.jax_only
def test_loss_mask_covers_exactly_the_answer_and_turn_end(tok, rows):
    for row in rows[:20]:
        ids, mask = data.tokenize_chat(tok, row)
        assert ids.dtype == mask.dtype == np.int32 and ids.shape == mask.shape
        answer = tok.decode(ids[mask == 1])
        assert answer == data.answer_of(row) + "<turn|>"
        # Everything before the answer is the prompt a server sees.
        first = int(np.argmax(mask))
        assert list(ids[:first]) == data.prompt_ids(tok, row)
        assert mask[first:].all() or tok.decode(ids[mask == 0][first:]).strip() == ""


def test_prompt_completion_and_messages_rows_tokenise_alike(tok):
    row = data.generate_rows("eval", n=1)[0]
    pc = {"prompt": data.prompt_of(row), "completion": data.answer_of(row)}
    conversational = {"prompt": row["messages"][:1], "completion": row["messages"][1:]}
    for other in (pc, conversational):
        for a, b in zip(data.tokenize_chat(tok, row), data.tokenize_chat(tok, other), strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.jax_only
def test_multi_turn_masks_every_answer(tok):
    row = {
        "messages": [
            {"role": "system", "content": "Answer in Verilog."},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "module a; endmodule"},
            {"role": "user", "content": "second"},
            {"role": "assistant", "content": "module b; endmodule"},
        ]
    }
    ids, mask = data.tokenize_chat(tok, row)
    assert tok.decode(ids[mask == 1]) == "module a; endmodule<turn|>module b; endmodule<turn|>"


@pytest.mark.slow
def test_vllm_renders_the_same_prompt(tok, tiny_base):
    """vLLM's own template resolution and rendering give the tokens we train on."""
    from cookbook import merge, serve
    from cookbook.serve import _render

    served_dir = merge.ensure_text_only_base(tiny_base, "tiny")  # what vLLM on CPU serves
    assert _render.vllm_model_dir("tiny") == str(served_dir)
    rows = data.generate_rows("eval", n=3)
    check = serve.check_rendering("tiny", tok, rows)  # notebook 05's check
    assert (check.rows, check.identical) == (3, True) and check.example == tok.decode(data.prompt_ids(tok, rows[0]))
    for row in rows:
        served = _render.render_with_vllm(served_dir, row["messages"][:1])
        assert served == data.prompt_ids(tok, row)
    text = _render.render_with_vllm(served_dir, row["messages"], add_generation_prompt=False, tokenize=False)
    assert text == tok.apply_chat_template(row["messages"], tokenize=False)
    ids, mask = data.tokenize_chat(tok, row)
    assert tok.decode(ids) == text
    # A thinking row and a tool-calling row: vLLM, given the request's tools and
    # chat_template_kwargs, renders the prompt and the whole conversation as training does.
    weather = {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "Weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    rows = [{"prompt": "An inverter?", "response": "<think>One NOT gate.</think>module inv; endmodule"},
            {"tools": [weather], "messages": [
                {"role": "user", "content": "Paris?"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "1", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}]},
                {"role": "tool", "tool_call_id": "1", "content": "18 C"}, {"role": "assistant", "content": "Mild."}]}]  # fmt: skip
    for row in rows:
        conv = _rows.to_conversation(row)
        kwargs = conv.template_kwargs()
        prompt = [m for m in conv.messages][
            : max(i for i, m in enumerate(conv.messages) if m["role"] != "assistant") + 1
        ]
        assert _render.render_with_vllm(served_dir, prompt, **kwargs) == data.prompt_ids(tok, row)
        full = _render.render_with_vllm(
            served_dir, conv.messages, add_generation_prompt=False, tokenize=False, **kwargs
        )
        assert tok.decode(data.tokenize_chat(tok, row)[0]) == full
        assert ("<|channel>thought" in full) == conv.thinking and ("<|tool_call>" in full) == bool(conv.tools)


# ------------------------------------------------------------------------------------
# Sources and bad rows


def test_jsonl_parquet_and_datasets_read_the_same(tmp_path, tok, rows):
    import datasets

    path = data.write_jsonl(rows[:30], tmp_path / "rows.jsonl")
    ds = datasets.Dataset.from_list(rows[:30])
    ds.to_parquet(str(tmp_path / "rows.parquet"))
    cfg = data.DataConfig(seq_len=64)
    ref, _ = data.prepare_examples(rows[:30], tok, cfg)
    for source in (path, tmp_path / "rows.parquet", ds):
        got, report = data.prepare_examples(source, tok, cfg)
        assert report.num_kept == 30 and not report.problems
        for a, b in zip(ref, got, strict=True):
            np.testing.assert_array_equal(a.token_ids, b.token_ids)
            np.testing.assert_array_equal(a.loss_mask, b.loss_mask)


def _messy_file(tmp_path, good_rows):
    path = tmp_path / "messy.jsonl"
    expected = _sample_task.write_messy_jsonl(path, good_rows)
    return path, expected, len(path.read_bytes().splitlines())


@pytest.mark.jax_only
def test_every_bad_row_is_reported_with_its_line_and_reason(tmp_path, tok, rows):
    path, expected, n_lines = _messy_file(tmp_path, rows[:190])
    examples, report = data.prepare_examples(path, tok, data.DataConfig(seq_len=64, max_bad_fraction=0.1))
    assert report.num_rows == n_lines
    assert report.num_dropped == len(expected) and report.num_kept == n_lines - len(expected)
    got = {p.row: p.reason for p in report.problems}
    assert set(got) == set(expected)
    for line, fragment in expected.items():
        assert fragment in got[line], (line, got[line])
    assert not {e.row for e in examples} & set(expected)
    assert "row 3: invalid JSON" in report.summary()


def test_too_many_bad_rows_refuse_to_train_and_say_why(tmp_path, tok, rows):
    path, expected, n_lines = _messy_file(tmp_path, rows[:40])
    with pytest.raises(data.DataError, match=r"10 of \d+ rows .* are bad, over max_bad_fraction=5.0%") as err:
        data.make_train_iter(path, tok, data.DataConfig(seq_len=64))
    assert "row 15: not UTF-8" in str(err.value)
    with pytest.raises(data.DataError, match="no usable rows"):
        data.prepare_examples([{"messages": []}], tok, data.DataConfig(max_bad_fraction=1.0))


def test_truncate_policy_keeps_long_rows_cut_to_seq_len(tok):
    row = {"prompt": "write it", "completion": " ".join(["assign y = a + b;"] * 40)}
    examples, report = data.prepare_examples(
        [row, data.generate_rows("eval", n=1)[0]], tok, data.DataConfig(seq_len=64, too_long="truncate")
    )
    assert report.num_kept == 2 and report.num_truncated == 1 and report.num_dropped == 0
    assert len(examples[0].token_ids) == 64 and examples[0].loss_mask.sum() > 0
    # A prompt alone longer than seq_len leaves no answer: dropped even when truncating.
    long_prompt = {"prompt": "x " * 200, "completion": "y"}
    _, report = data.prepare_examples(
        [long_prompt, row], tok, data.DataConfig(seq_len=64, too_long="truncate", max_bad_fraction=1.0)
    )
    assert report.num_dropped == 1 and report.num_truncated == 1
    assert "no answer token survives truncation" in report.problems[0].reason


# ------------------------------------------------------------------------------------
# Padding and packing


def test_padded_batches(tok, rows):
    cfg = data.DataConfig(seq_len=64, batch_size=8, shuffle=False)
    batch = next(data.make_train_iter(rows, tok, cfg))
    assert set(batch) == set(_config.BATCH_FIELDS)
    assert all(v.shape == (8, 64) and v.dtype == np.int32 for v in batch.values())
    ids, mask = data.tokenize_chat(tok, rows[0])
    n = len(ids)
    np.testing.assert_array_equal(batch["input_tokens"][0, :n], ids)
    np.testing.assert_array_equal(batch["input_mask"][0, :n], mask)
    assert (batch["input_tokens"][0, n:] == 0).all() and (batch["input_mask"][0, n:] == 0).all()
    np.testing.assert_array_equal(batch["segment_ids"][0], (np.arange(64) < n).astype(np.int32))
    np.testing.assert_array_equal(batch["positions"][0, :n], np.arange(n))


@pytest.mark.jax_only
def test_packed_batches_hold_whole_examples_with_restarting_positions(tok, rows):
    cfg = data.DataConfig(seq_len=256, batch_size=4, packing=True, seed=3)
    by_tokens = {tuple(data.tokenize_chat(tok, r)[0]): data.tokenize_chat(tok, r)[1] for r in rows}
    it = data.make_train_iter(rows, tok, cfg, num_epochs=1)
    batches = list(it)
    seen = 0
    for batch in batches:
        for r in range(4):
            seg, pos = batch["segment_ids"][r], batch["positions"][r]
            starts = np.flatnonzero(np.diff(seg, prepend=0) != 0)
            assert (pos[starts[seg[starts] > 0]] == 0).all()  # positions restart per example
        for (_, _), (ids, mask) in _segments(batch).items():
            assert tuple(ids) in by_tokens  # each segment is one whole example
            np.testing.assert_array_equal(mask, by_tokens[tuple(ids)])
            seen += 1
    assert seen == len(rows)  # one epoch, nothing lost, nothing doubled (unique rows)
    assert _pipeline.real_token_fraction(batches) >= 0.95


def test_packing_beats_padding_at_the_same_shape(examples):
    def frac(packing):
        cfg = data.DataConfig(seq_len=256, batch_size=4, packing=packing)
        return _pipeline.real_token_fraction(_pipeline.iter_batches(examples, cfg, num_epochs=1))

    padded, packed = frac(False), frac(True)
    assert packed >= 0.95 and padded < 0.3, (packed, padded)


def test_segment_attention_mask():
    seg = np.array([[1, 1, 2, 2, 2, 0]])
    mask = np.asarray(data.segment_attention_mask(seg))[0]
    expected = np.array(
        [
            [1, 0, 0, 0, 0, 0],
            [1, 1, 0, 0, 0, 0],
            [0, 0, 1, 0, 0, 0],
            [0, 0, 1, 1, 0, 0],
            [0, 0, 1, 1, 1, 0],
            [0, 0, 0, 0, 0, 1],
        ],
        dtype=bool,
    )
    np.testing.assert_array_equal(mask, expected)


@pytest.mark.slow
def test_packed_row_gives_each_example_its_own_logits(tok, tiny_base, rows):
    """The Tunix model on a packed row = the model on each example alone."""
    import jax.numpy as jnp
    from flax import nnx

    from cookbook import core, models
    from cookbook.core import _numerics

    model = models.load_tunix_model(tiny_base, models.get_preset("tiny"))
    forward = nnx.jit(lambda m, tokens, positions, mask: m(tokens, positions, None, mask)[0])
    cfg = data.DataConfig(seq_len=128, batch_size=1, packing=True, shuffle=False)
    batch = next(data.make_train_iter(rows, tok, cfg))
    inputs = data.model_inputs(batch)
    packed = forward(
        model, jnp.asarray(inputs["input_tokens"]), jnp.asarray(inputs["positions"]), inputs["attention_mask"]
    )
    segments = _segments(batch)
    assert len(segments) >= 2
    seg = np.asarray(batch["segment_ids"][0])
    floors = {}
    for (_, s), (ids, _) in segments.items():
        n = len(ids)
        alone = forward(model, jnp.asarray(ids[None]), jnp.arange(n)[None], jnp.tril(jnp.ones((n, n), bool))[None])
        # Same function, another layout: float32 rounding only. Bound: 4x transformers' own
        # float32 error on this example (float32 vs float64), measured here (numerics).
        floors[s] = core.float32_floor(
            _parity.transformers_logits(tiny_base, ids[None]),
            _parity.transformers_logits(tiny_base, ids[None], dtype="float64"),
        )
        check = core.compare(np.asarray(packed[0])[seg == s], np.asarray(alone[0]), floors[s])
        assert check["ok"], (s, check)
    # Control: with a plain causal mask the second example sees the first, and differs.
    causal = jnp.tril(jnp.ones((128, 128), bool))[None]
    leaky = forward(model, jnp.asarray(inputs["input_tokens"]), jnp.asarray(inputs["positions"]), causal)
    _numerics.check_separated(
        core.compare(np.asarray(leaky[0])[seg == 2], np.asarray(packed[0])[seg == 2], floors[2]),
        "causal mask across examples",
    )


# ------------------------------------------------------------------------------------
# Order, resume, sharding


def _tokens(it, n):
    return [np.asarray(next(it)["input_tokens"]) for _ in range(n)]


@pytest.mark.jax_only
@pytest.mark.parametrize("packing", [False, True])
def test_order_is_deterministic_and_resumable(examples, packing):
    cfg = data.DataConfig(seq_len=128, batch_size=8, packing=packing, seed=7)
    ref = _tokens(_pipeline.iter_batches(examples, cfg), 60)  # past one epoch (400 rows)
    again = _tokens(_pipeline.iter_batches(examples, cfg), 60)
    for a, b in zip(ref, again, strict=True):
        np.testing.assert_array_equal(a, b)
    other = _tokens(
        _pipeline.iter_batches(examples, data.DataConfig(seq_len=128, batch_size=8, packing=packing, seed=8)), 1
    )
    assert not np.array_equal(ref[0], other[0])
    resumed = _pipeline.iter_batches(examples, cfg, start_step=48)
    assert resumed.step == 48
    for a, b in zip(ref[48:], _tokens(resumed, 12), strict=True):
        np.testing.assert_array_equal(a, b)
    # Grain's iterator state, saved part-way, restores the same stream.
    it = _pipeline.iter_batches(examples, cfg)
    _tokens(it, 20)
    state = it.get_state()
    fresh = _pipeline.iter_batches(examples, cfg)
    fresh.set_state(state)
    assert fresh.step == 20
    for a, b in zip(ref[20:30], _tokens(fresh, 10), strict=True):
        np.testing.assert_array_equal(a, b)


def test_epochs_reshuffle(examples):
    cfg = data.DataConfig(seq_len=64, batch_size=8, seed=0)
    batches = _tokens(_pipeline.iter_batches(examples, cfg, num_epochs=2), 100)
    first, second = np.concatenate(batches[:50]), np.concatenate(batches[50:])
    assert not np.array_equal(first, second)
    assert sorted(map(tuple, first)) == sorted(map(tuple, second))


@pytest.mark.jax_only
def test_batches_are_sharded_on_the_data_axis(examples, mesh_4x2):
    from jax.sharding import PartitionSpec

    cfg = data.DataConfig(seq_len=64, batch_size=8)
    host = next(_pipeline.iter_batches(examples, cfg))
    batch = next(_pipeline.iter_batches(examples, cfg, mesh=mesh_4x2))
    for key, value in batch.items():
        assert value.shape == (8, 64)
        assert value.sharding.spec == PartitionSpec("fsdp")
        assert len(value.addressable_shards) == 8 and value.addressable_shards[0].data.shape == (2, 64)
        np.testing.assert_array_equal(np.asarray(value), host[key])
    with pytest.raises(ValueError, match="batch_size=6 does not divide over the mesh's 'fsdp' axis of size 4"):
        _pipeline.iter_batches(examples, data.DataConfig(batch_size=6), mesh=mesh_4x2)


_MULTIHOST_WORKER = """
import json, sys
import numpy as np
from cookbook import data, mesh
from cookbook.data import _pipeline, _tokenize
coordinator, pid, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
mesh.initialize_distributed(coordinator, 2, pid)
import jax
from jax.experimental import multihost_utils
examples = [_tokenize.Example(np.asarray(t, np.int32), np.asarray(m, np.int32), n) for t, m, n in json.load(open(path))]
out = {}
for split in ("rows", "records"):
    config = data.DataConfig(seq_len=64, batch_size=8, seed=0, process_split=split)
    it = _pipeline.iter_batches(examples, config, mesh=mesh.make_mesh(4, 2))
    out[split] = []
    for _ in range(2):
        batch = next(it)["input_tokens"]
        out[split].append({"shape": list(batch.shape),
                           "global": np.asarray(multihost_utils.process_allgather(batch, tiled=True)).tolist()})
print("RESULT " + json.dumps({"pid": jax.process_index(), "count": jax.process_count(), "batches": out}), flush=True)
jax.distributed.shutdown()
"""


@pytest.mark.slow
def test_each_process_reads_its_own_rows(tmp_path, examples):
    """Two JAX processes (4 fake devices each) share one global batch.

    ``process_split="rows"`` (the default): the global batches are exactly a one-process
    run's. ``"records"`` (Grain per-process sharding): half the rows from each process's slice.
    """
    import os
    import socket
    import subprocess
    import sys

    path = tmp_path / "examples.json"
    path.write_text(json.dumps([[e.token_ids.tolist(), e.loss_mask.tolist(), e.row] for e in examples[:64]]))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _MULTIHOST_WORKER, f"127.0.0.1:{port}", str(i), str(path)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    results = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=300)
            line = next((ln for ln in out.splitlines() if ln.startswith("RESULT ")), None)
            assert p.returncode == 0 and line, out[-3000:]
            results.append(json.loads(line[len("RESULT ") :]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    all_rows = {tuple(np.pad(e.token_ids, (0, 64 - len(e.token_ids)))): e.row for e in examples[:64]}
    assert [r["count"] for r in results] == [2, 2]
    one_process = _pipeline.iter_batches(examples[:64], data.DataConfig(seq_len=64, batch_size=8, seed=0))
    for step in range(2):
        a, b = (r["batches"]["rows"][step] for r in results)
        assert a["global"] == b["global"] == np.asarray(next(one_process)["input_tokens"]).tolist()
        a, b = (r["batches"]["records"][step] for r in results)
        assert a["shape"] == [8, 64] and a["global"] == b["global"]  # one global batch
        source_rows = [all_rows[tuple(row)] for row in a["global"]]
        # Rows 0-3 come from process 0's slice (odd row numbers: examples[0::2]), 4-7 from process 1's.
        assert all(n % 2 == 1 for n in source_rows[:4]) and all(n % 2 == 0 for n in source_rows[4:])
        assert len(set(source_rows)) == 8


def test_a_tokenizer_without_chat_template_is_refused(tok):
    import copy

    bare = copy.deepcopy(tok)
    bare.chat_template = None
    with pytest.raises(data.DataError, match="has no chat template"):
        data.tokenize_chat(bare, data.generate_rows("eval", n=1)[0])
