"""The three generators on the tiny fine-tuned model: functional pass@1 against exact match,
greedy vLLM = Tunix on the same checkpoint, and n = 5 sampling through each; the same on the
thinking run (a thought, then the module: only the module is scored)."""

import json

import pytest
from userenv import outcome_bound

from cookbook import evaluate, merge
from cookbook.evaluate import _generate, _score


@pytest.mark.slow
def test_tiny_fine_tune_functional_pass1_at_least_exact_match_and_base_near_zero(tiny_greedy):
    tuned, base = tiny_greedy.tuned, tiny_greedy.base
    assert tuned.pass_at(1) >= tuned.exact_match >= outcome_bound("plain", "exact_match", 48)
    for p in tuned.problems:  # an exact copy of the reference is a working module
        assert not p.exact[0] or p.results[0].passed, (p.problem, p.results[0])
    assert base.pass_at(1) <= 0.05 and base.exact_match <= 0.05
    assert tiny_greedy.generation.generator == "tunix" and len(tiny_greedy.generation.seeds) == 48


@pytest.mark.slow
def test_greedy_vllm_equals_tunix_and_sampling_through_the_server(tiny_greedy, vllm_lora_server):
    """The session server holds the same run's adapter ("verilog") on the base, and its all-zero copy ("base")."""
    problems, tokenizer = tiny_greedy.problems, tiny_greedy.tokenizer
    client = vllm_lora_server.client()
    served = evaluate.score_generation(
        problems, evaluate.endpoint_samples(client, "verilog", problems, tiny_greedy.sampling, tokenizer=tokenizer)
    )
    assert served.pass_at(1) == tiny_greedy.tuned.pass_at(1)
    assert [p.results[0].outcome for p in served.problems] == [p.results[0].outcome for p in tiny_greedy.tuned.problems]

    few = problems[:16]
    sampling = evaluate.PAPER_SAMPLING.replace(max_tokens=tiny_greedy.sampling.max_tokens, seed=100)
    gen = evaluate.endpoint_samples(client, "verilog", few, sampling, tokenizer=tokenizer)
    assert all(len(v) == 5 for v in gen.completions.values())
    assert gen.seeds[few[1].name] == [101, 102, 103, 104, 105]  # request seed 100 + 1; vLLM's sample i: + i
    again = evaluate.endpoint_samples(client, "verilog", few, sampling, tokenizer=tokenizer)
    assert again.completions == gen.completions  # recorded seeds reproduce the samples
    sampled = evaluate.score_generation(few, gen)
    assert sampled.ks == (1, 5) and sampled.pass_at(5) >= sampled.pass_at(1) >= outcome_bound(
        "plain", "sampled_pass1", 16
    )
    base = evaluate.score_generation(few, evaluate.endpoint_samples(client, "base", few, sampling, tokenizer=tokenizer))
    assert base.pass_at(5) <= 0.05


@pytest.mark.slow
def test_transformers_generate_agrees_in_kind(tiny_greedy):
    problems = tiny_greedy.problems[:16]
    merged = merge.ensure_merged(tiny_greedy.run_dir, text_only=True)
    model = _generate.load_transformers_model(merged)
    greedy = evaluate.score_generation(
        problems,
        evaluate.transformers_samples(model, tiny_greedy.tokenizer, problems, tiny_greedy.sampling, num_threads=1),
    )
    assert [p.completions for p in greedy.problems] == [p.completions for p in tiny_greedy.tuned.problems[:16]]
    sampling = evaluate.PAPER_SAMPLING.replace(max_tokens=tiny_greedy.sampling.max_tokens)
    gen = evaluate.transformers_samples(model, tiny_greedy.tokenizer, problems[:8], sampling, num_threads=1)
    assert all(len(v) == 5 for v in gen.completions.values()) and gen.seeds[problems[2].name] == [2] * 5
    sampled = evaluate.score_generation(problems[:8], gen)
    assert sampled.pass_at(5) >= sampled.pass_at(1) >= outcome_bound("plain", "sampled_pass1", 8)


@pytest.mark.slow
def test_cli_scores_an_endpoint(tiny_greedy, vllm_lora_server, tmp_path, capsys, monkeypatch):
    from cookbook import harness

    problems = evaluate.write_problems(tmp_path / "p", tiny_greedy.problems[:4])
    monkeypatch.setenv("COOKBOOK_TEST_VLLM_KEY", vllm_lora_server.api_key)
    code = harness.main(
        [
            "eval",
            "--problems",
            str(problems),
            "--endpoint",
            vllm_lora_server.base_url,
            "--model",
            "verilog",
            "--api-key-env",
            "COOKBOOK_TEST_VLLM_KEY",
            "--n",
            "2",
            "--max-tokens",
            str(tiny_greedy.sampling.max_tokens),
            "--seed",
            "7",
            "--summary",
            str(tmp_path / "s.json"),
            "--save-completions",
            str(tmp_path / "c.jsonl"),
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    rows = [json.loads(line) for line in out.out.splitlines()]
    assert [r["problem"] for r in rows] == [p.name for p in tiny_greedy.problems[:4]]
    assert all(r["n"] == 2 and len(r["samples"]) == 2 for r in rows) and rows[1]["seeds"] == [8, 9]
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["pass@1"] >= 0.5 and "pass@5" not in summary  # k = 5 > n = 2 is not reported
    assert summary["sampling"]["generator"] == "vllm" and summary["sampling"]["temperature"] == 0.8
    assert len(_score.read_completions(tmp_path / "c.jsonl")[rows[0]["problem"]]) == 2


@pytest.mark.slow
def test_cli_scores_a_training_run(tiny_greedy, tmp_path, capsys):
    from cookbook import harness

    problems = evaluate.write_problems(tmp_path / "p", tiny_greedy.problems[:4])
    code = harness.main(
        [
            "eval",
            "--problems",
            str(problems),
            "--run",
            str(tiny_greedy.run_dir),
            "--greedy",
            "--max-tokens",
            str(tiny_greedy.sampling.max_tokens),
            "--out",
            str(tmp_path / "r.jsonl"),
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    rows = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    expected = [p.results[0].outcome for p in tiny_greedy.tuned.problems[:4]]
    assert [r["outcomes"][0] for r in rows] == expected and "sampling" in out.err  # the progress bar


@pytest.mark.slow
def test_cli_scores_a_transformers_checkpoint(tiny_greedy, tmp_path, capsys):
    from cookbook import harness

    problems = evaluate.write_problems(tmp_path / "p", tiny_greedy.problems[:3])
    merged = merge.ensure_merged(tiny_greedy.run_dir, text_only=True)
    code = harness.main(
        [
            "eval",
            "--problems",
            str(problems),
            "--hf-model",
            str(merged),
            "--greedy",
            "--max-tokens",
            str(tiny_greedy.sampling.max_tokens),
            "--summary",
            str(tmp_path / "s.json"),
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    rows = [json.loads(line) for line in out.out.splitlines()]
    assert [r["outcomes"][0] for r in rows] == [p.results[0].outcome for p in tiny_greedy.tuned.problems[:3]]
    assert json.loads((tmp_path / "s.json").read_text())["sampling"]["generator"] == "transformers"


# ------------------------------------------------------------------------------------------
# The thinking run: a thought, then the module; only the module is scored
_THOUGHT = "<|channel>thought\n"


def _thought_in(completion: str) -> str | None:
    """The thought of a completion decoded with its special tokens (Tunix's text)."""
    if not completion.startswith(_THOUGHT) or "\n<channel|>" not in completion:
        return None
    return completion[len(_THOUGHT) :].split("\n<channel|>", 1)[0]


@pytest.mark.slow
def test_the_thinking_run_thinks_then_answers(tiny_thinking):
    from cookbook import data, train

    scores, rows = tiny_thinking.scores, tiny_thinking.rows
    # The bounds: the worst of several seeds less their spread (benchmarks/outcome_spread.py).
    assert scores.pass_at(1) >= scores.exact_match >= outcome_bound("thinking", "exact_match", 48)
    thoughts = [_thought_in(p.completions[0]) for p in scores.problems]
    right = sum(t == data.thought_of(r) for t, r in zip(thoughts, rows, strict=True))
    assert right >= outcome_bound("thinking", "thoughts_right", 48) * len(rows)
    # evaluate.held_out_greedy's count (the row's thought anywhere in the completion) holds these.
    assert right <= tiny_thinking.held_out.thoughts_right <= len(rows)
    # `cookbook train ... --eval-accuracy N` (train.evaluate): prompted with thinking on, as trained,
    # with room for the thought, and judged on the answer: the same completions as above.
    res = train.evaluate(tiny_thinking.model, tiny_thinking.tokenizer, rows, batch_size=48)
    assert [data.clean_completion(c) for c in res["completions"]] == [
        data.clean_completion(p.completions[0]) for p in scores.problems
    ]
    assert res["accuracy"] == scores.exact_match


@pytest.mark.slow
def test_thinking_pass1_through_vllm_equals_tunix(tiny_thinking, vllm_lora_server):
    """The thinking run's adapter, loaded into the session server at run time: its chat answers come
    back as `content` with the thought apart in `reasoning` (vLLM's gemma4 reasoning parser on the
    tiny tokenizer's own token ids), and score as Tunix's do; token-id prompts with special tokens
    kept give the same answers."""
    from cookbook import data, serve

    adapter = merge.ensure_peft(tiny_thinking.run_dir, layout="text")
    with pytest.raises(serve.ServeError, match="HTTP 401"):  # the server's API key guards loading too
        serve.load_lora_adapter(vllm_lora_server.base_url, "verilog-thinking", adapter, api_key="wrong")
    serve.load_lora_adapter(vllm_lora_server.base_url, "verilog-thinking", adapter, api_key=vllm_lora_server.api_key)
    problems, tunix = tiny_thinking.problems, tiny_thinking.scores
    client = vllm_lora_server.client()
    chat = evaluate.endpoint_samples(client, "verilog-thinking", problems, tiny_thinking.sampling, thinking=True)
    served = evaluate.score_generation(problems, chat)
    assert served.pass_at(1) == tunix.pass_at(1) >= outcome_bound("thinking", "pass1", 48)
    assert [p.results[0].outcome for p in served.problems] == [p.results[0].outcome for p in tunix.problems]
    assert chat.describe()["thinking"] is True
    for p, t in zip(served.problems, tunix.problems, strict=True):
        assert "<|channel>" not in p.completions[0] and "thought" not in p.completions[0]  # content: the answer
        assert chat.thoughts[p.problem] == [_thought_in(t.completions[0])]  # reasoning: the thought, apart
    ids = evaluate.endpoint_samples(
        client, "verilog-thinking", problems, tiny_thinking.sampling, tokenizer=tiny_thinking.tokenizer, thinking=True
    )
    assert [data.clean_completion(ids.completions[p.name][0]) for p in problems] == [
        data.clean_completion(t.completions[0]) for t in tunix.problems
    ]
    assert all(ids.completions[p.name][0].startswith(_THOUGHT) for p in problems)  # markers kept
