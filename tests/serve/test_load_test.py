"""cookbook.serve._load_test: the load test's typed results, what they record, and the optional points."""

import json

from cookbook import serve
from cookbook.serve import _load_test


def _point(label, c, tok_s, ok=8):
    return {
        "label": label,
        "concurrency": c,
        "output_tok_s": tok_s,
        "num_requests": 8,
        "num_ok": ok,
        "ttft_ms": {"p50": 10.0 * c, "p99": 12.0 * c},
        "tpot_ms": {"p50": 1.0},
        "e2e_ms": {"p50": 20.0 * c},
        "samples": {"ttft_ms": [1.0, 2.0]},
    }


class _Server:
    base_url = "http://127.0.0.1:1/v1"
    api_key = "EMPTY"
    config = serve.ServeConfig(model_dir="/ckpt", served_model_name="verilog-merged")


def test_load_test_records_the_points_without_samples_and_the_speedup(tmp_path, monkeypatch):
    sent = {}

    def fake_sweep(url, model, prompts, output_len, concurrency, api_key):
        sent.update(url=url, model=model, prompts=prompts, output_len=output_len, concurrency=concurrency)
        return [_point("vllm", c, 30.0 * c) for c in concurrency]

    monkeypatch.setattr(_load_test, "sweep", fake_sweep)
    monkeypatch.setattr(_load_test, "load_hf_model", lambda d: ("model", d))
    monkeypatch.setattr(
        _load_test,
        "hf_sweep",
        lambda m, p, n, cs: [_point("transformers", c, 10.0 * c, ok=7 if c == 4 else 8) for c in cs],
    )
    committed = tmp_path / "committed.json"
    committed.write_text(
        json.dumps(
            {
                "preset": "small",
                "num_params": 1.2e8,
                "ratio_output_tok_s": {"1": 1.5, "16": 4.0},
                "host": {"load_avg_1m": [0.5]},
            }
        )
    )
    load = serve.load_test(
        _Server(),
        "tiny",
        num_prompts=8,
        input_len=5,
        output_len=3,
        concurrency=[1, 4],
        committed_json=committed,
        json_path=tmp_path / "bench.json",
    )
    assert (sent["model"], sent["output_len"], sent["concurrency"]) == ("verilog-merged", 3, [1, 4])
    assert len(sent["prompts"]) == 8 and {len(p) for p in sent["prompts"]} == {5}
    assert (load.speedup, load.top_concurrency) == (3.0, 4)  # 120 / 40 at concurrency 4
    assert "samples" in json.loads((tmp_path / "bench.json").read_text())[0]  # bench.json keeps them
    got = load.results()
    assert set(got) == {"bench", "tiny_smoke_speedup_at_max_concurrency", "small_benchmark_speedup", "all_requests_ok"}
    assert all("samples" not in p for p in got["bench"]) and len(got["bench"]) == 4
    assert got["tiny_smoke_speedup_at_max_concurrency"] == 3.0 and got["all_requests_ok"] is False  # 7 of 8 at c=4
    assert (got["small_benchmark_speedup"]["speedup"], got["small_benchmark_speedup"]["concurrency"]) == (4.0, 16)
    assert "3.00x on tiny" in load.describe() and "120M 'small'" in load.describe()


def test_optional_points_record_nothing_when_not_run(monkeypatch):
    load = _load_test.LoadTest(
        preset="tiny",
        prompts=[[1, 2]] * 4,
        output_len=3,
        concurrency=(1, 4, 16),
        points=[],
        speedup=1.0,
        top_concurrency=16,
        measured={},
    )
    assert serve.cross_check_point(_Server(), load, enabled=False).results() == {}
    burst = serve.measure_scenario(_Server(), serve.PAPER_BURST, vocab_size=1024, enabled=False)
    assert burst.results() == {} and "not run" in burst.describe()

    seen = {}

    def fake_cross_check(url, model, tokenizer_dir, prompts, *, output_len, concurrency, api_key):
        seen.update(tokenizer_dir=tokenizer_dir, concurrency=concurrency, output_len=output_len)
        return {"concurrency": concurrency, "ratios": {"ttft": 1.1}, "theirs": {}, "ours": {}}

    monkeypatch.setattr(_load_test, "cross_check", fake_cross_check)
    cross = serve.cross_check_point(_Server(), load)
    assert seen == {"tokenizer_dir": "/ckpt", "concurrency": 4, "output_len": 3}  # the middle concurrency
    assert cross.results() == {"vllm_bench_ratios": {"ttft": 1.1}}

    monkeypatch.setattr(_load_test, "run_scenario", lambda *a, **k: {**_point("vllm", 1, 5.0), "scenario": {}})
    burst = serve.measure_scenario(_Server(), serve.PAPER_BURST, vocab_size=1024)
    assert list(burst.results()) == ["paper_burst"] and "samples" not in burst.results()["paper_burst"]
