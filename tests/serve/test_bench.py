"""cookbook.serve: the load generator against a real vLLM server, the transformers baseline, summaries."""

import json
import math
import time

import numpy as np
import pytest

from cookbook import merge, serve
from cookbook.serve import _bench, _bench_report


def test_summarize_percentiles_and_throughput():
    results = [
        _bench.RequestResult(
            ok=True, prompt_len=4, output_tokens=11, ttft_s=0.01 * (i + 1), e2e_s=0.01 * (i + 1) + 1.0, itl_s=[0.1] * 10
        )
        for i in range(100)
    ]
    results.append(_bench.RequestResult(ok=False, prompt_len=4, error="HTTP 500: boom"))
    s = _bench.summarize(results, 10.0, label="x", concurrency=4)
    assert (s["num_requests"], s["num_ok"], s["errors"]) == (101, 100, ["HTTP 500: boom"])
    assert s["output_tokens"] == 1100 and s["output_tok_s"] == pytest.approx(110.0)
    assert s["ttft_ms"]["p50"] == pytest.approx(505.0) and s["ttft_ms"]["p99"] == pytest.approx(990.1)
    assert s["tpot_ms"]["p50"] == pytest.approx(100.0)  # (e2e - ttft) / (tokens - 1)
    assert s["itl_ms"]["p90"] == pytest.approx(100.0)
    assert len(s["samples"]["ttft_ms"]) == 100
    assert math.isnan(_bench.RequestResult(ok=True, prompt_len=1, output_tokens=1, ttft_s=1, e2e_s=1).tpot_s)


def test_prompts_and_the_paper_burst():
    p = serve.random_prompts(1024, 5, 7, seed=1)
    assert np.asarray(p).shape == (5, 7) and min(map(min, p)) >= 32 and max(map(max, p)) < 1024
    assert p == serve.random_prompts(1024, 5, 7, seed=1) and p != serve.random_prompts(1024, 5, 7, seed=2)
    b = serve.PAPER_BURST
    assert (b.num_prompts, b.input_len, b.output_len, b.concurrency, b.request_rate) == (64, 128, 256, None, None)
    assert len(_bench.scenario_prompts(b, vocab_size=262_144)[0]) == 128


def test_transformers_baseline_times_every_step(tiny_base):
    model = serve.load_hf_model(merge.ensure_text_only_base(tiny_base, "tiny"))
    prompts = serve.random_prompts(1024, 6, 16)
    point = serve.hf_generate_point(model, prompts, 5, concurrency=4)
    assert (point["num_ok"], point["output_tokens"], point["concurrency"]) == (6, 30, 4)
    assert 0 < point["ttft_ms"]["p50"] <= point["e2e_ms"]["p50"]
    assert len(point["samples"]["ttft_ms"]) == 6


@pytest.mark.slow
def test_load_generator_against_vllm(vllm_lora_server):
    server = vllm_lora_server
    prompts = serve.random_prompts(1024, 12, 24)
    points = _bench.sweep(server.base_url, "base", prompts, 10, [1, 6], api_key=server.api_key)
    for p in points:
        assert p["num_ok"] == 12, p["errors"]
        assert p["output_tokens"] == 120  # ignore_eos: exactly max_tokens each
        assert 0 < p["ttft_ms"]["p50"] <= p["ttft_ms"]["p90"] <= p["ttft_ms"]["p99"]
        # On a loaded host vLLM's API server merges a short stream's deltas, or the client reads it
        # in one go (TTFT = E2E, TPOT 0; seen in CI at p50, and once for all 12 requests of a point):
        # only the invariants here. That TPOT and ITL measure a stream: test_times_a_paced_stream.
        assert p["ttft_ms"]["p50"] <= p["e2e_ms"]["p50"] and p["tpot_ms"]["p50"] >= 0
    # More in flight, more tokens per second (continuous batching), even on a busy host.
    assert points[1]["output_tok_s"] > 1.5 * points[0]["output_tok_s"]
    paced = serve.run_point(server.base_url, "base", prompts[:6], 4, request_rate=20.0, api_key=server.api_key)
    assert paced["num_ok"] == 6 and paced["request_rate"] == 20.0
    bad = serve.run_point(server.base_url, "base", prompts[:2], 4, api_key="wrong-key")
    assert bad["num_ok"] == 0 and "HTTP 401" in bad["errors"][0]
    burst = _bench.run_scenario(
        server.base_url,
        "base",
        _bench.Scenario(name="mini_burst", num_prompts=8, input_len=16, output_len=4),
        vocab_size=1024,
        api_key=server.api_key,
    )
    assert burst["num_ok"] == 8 and burst["scenario"]["name"] == "mini_burst"


@pytest.mark.slow
def test_bench_cli(vllm_lora_server, tmp_path, monkeypatch, capsys):
    from cookbook import harness

    monkeypatch.setenv("BENCH_TEST_KEY", vllm_lora_server.api_key)
    out = tmp_path / "b.json"
    assert (
        harness.main(
            [
                "bench",
                "--base-url",
                vllm_lora_server.base_url,
                "--model",
                "base",
                "--vocab-size",
                "1024",
                "--input-len",
                "8",
                "--output-len",
                "3",
                "--num-prompts",
                "4",
                "--concurrency",
                "2",
                "--api-key-env",
                "BENCH_TEST_KEY",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert "TTFT p50" in capsys.readouterr().out
    point = json.loads(out.read_text())[0]
    assert (point["num_ok"], point["output_tokens"], point["concurrency"]) == (4, 12, 2)


@pytest.mark.slow
def test_agrees_with_vllms_own_benchmark(vllm_lora_server):
    """Same point, vLLM's benchmark and ours: same token counts, throughput within 2x (noisy host).

    Each tool's throughput is its tokens over its own wall time, so a stall during one run moves
    it: on this shared 2-core host (the other test stream beside it, a kernel or a compile
    starting) one run's ratio was 6.99 (2026-12-05), against 0.5-2 in every run before. Each tool
    therefore runs twice, interleaved, and the best of each is compared, as a benchmark takes the
    best of its repeats: a stall must then hit both runs of one tool to move the ratio."""
    server = vllm_lora_server
    theirs, ours = [], []
    for _ in range(2):
        theirs.append(
            _bench.vllm_bench_point(
                server.base_url,
                "base",
                server.config.model_dir,
                input_len=24,
                output_len=16,
                num_prompts=16,
                concurrency=4,
                api_key=server.api_key,
            )
        )
        ours.append(
            serve.run_point(
                server.base_url, "base", serve.random_prompts(1024, 16, 24), 16, concurrency=4, api_key=server.api_key
            )
        )
    for t, o in zip(theirs, ours, strict=True):
        assert t["completed"] == 16 and t["total_output_tokens"] == o["output_tokens"] == 256
    best_theirs = max(theirs, key=lambda t: t["output_throughput"])
    best_ours = max(ours, key=lambda o: o["output_tok_s"])
    ratios = _bench.compare_with_vllm_bench(best_ours, best_theirs)
    assert 0.5 < ratios["output_tok_s_ratio"] < 2.0, (
        ratios,
        [_bench.compare_with_vllm_bench(o, t) for t, o in zip(theirs, ours, strict=True)],
    )


@pytest.fixture
def paced_server():
    """``paced_server(first_s, gap_s, tokens)``: a local server streaming ``/v1/completions`` as vLLM
    does (one SSE event per token, then the usage event and ``[DONE]``), the first token ``first_s``
    after the request and each next one ``gap_s`` after the last; one thread per connection."""
    import socket
    import threading

    servers = []

    def start(first_s: float, gap_s: float, tokens: int) -> str:
        srv = socket.create_server(("127.0.0.1", 0))
        servers.append(srv)

        def stream(conn):
            with conn:
                conn.recv(1 << 16)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
                time.sleep(first_s)
                for i in range(tokens):
                    if i:
                        time.sleep(gap_s)
                    conn.sendall(b"data: " + json.dumps({"choices": [{"text": f"t{i}"}]}).encode() + b"\n\n")
                usage = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": tokens}}
                conn.sendall(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")

        def accept():
            while True:
                try:
                    conn, _ = srv.accept()
                except OSError:
                    return
                threading.Thread(target=stream, args=(conn,), daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()
        return f"http://127.0.0.1:{srv.getsockname()[1]}/v1"

    yield start
    for srv in servers:
        srv.close()


def test_times_a_paced_stream(paced_server):
    """TTFT, TPOT and ITL measure when each token arrives, not when the response ends. The server
    sleeps 60 ms before the first token and 40 ms between tokens, so TTFT >= 60 ms holds on any host;
    a read delayed by D shortens a request's E2E - TTFT by at most D, so TPOT's median stays above
    half the gap unless the median request's first read waits over 100 ms."""
    first_s, gap_s, tokens = 0.060, 0.040, 6
    url = paced_server(first_s, gap_s, tokens)
    p = serve.run_point(url, "base", [[40, 41, 42]] * 4, tokens, concurrency=2, timeout_s=30)
    assert (p["num_ok"], p["output_tokens"]) == (4, 4 * tokens), p["errors"]
    assert p["ttft_ms"]["p50"] >= 1000 * first_s
    assert p["tpot_ms"]["p50"] >= 1000 * gap_s / 2
    assert p["itl_ms"]["p50"] >= 1000 * gap_s / 2
    assert p["e2e_ms"]["p50"] >= p["ttft_ms"]["p50"] + (tokens - 1) * 1000 * gap_s / 2


@pytest.fixture
def misbehaving_server():
    """``misbehaving_server(reply)``: a local TCP server answering every request with ``reply`` (bytes)."""
    import socket
    import threading

    servers = []

    def start(reply: bytes) -> str:
        srv = socket.create_server(("127.0.0.1", 0))
        servers.append(srv)

        def answer():
            while True:
                try:
                    conn, _ = srv.accept()
                except OSError:
                    return
                with conn:
                    conn.recv(1 << 16)
                    conn.sendall(reply)

        threading.Thread(target=answer, daemon=True).start()
        return f"http://127.0.0.1:{srv.getsockname()[1]}/v1"

    yield start
    for srv in servers:
        srv.close()


def test_no_api_key_reaches_bench_json_or_the_table(misbehaving_server, tmp_path, capsys):
    """aiohttp's own exception for a malformed response carries the request's headers (its repr holds
    ``'Authorization': 'Bearer KEY'``), and a server may echo the header in a 401 body: neither
    reaches the record, bench.json or what is printed, while the error still says what went wrong."""
    key = "sk-cookbook-" + "7f3a9c" * 4
    malformed = misbehaving_server(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n")
    echoing = misbehaving_server(
        b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 47\r\nConnection: close\r\n\r\n"
        + f"bad token: Bearer {key}"[:47].ljust(47).encode()
    )
    points = [
        serve.run_point(url, "base", [[40, 41, 42]], 2, api_key=key, timeout_s=30) for url in (malformed, echoing)
    ]
    print(serve.table(points), points)
    out = serve.write_json(tmp_path / "bench.json", points)
    printed = capsys.readouterr().out
    assert [p["num_ok"] for p in points] == [0, 0]
    assert key not in out.read_text() and key not in printed and key not in json.dumps(points)
    assert "Bearer" not in out.read_text().replace("Bearer <redacted>", "")
    assert points[0]["errors"][0].startswith("ClientResponseError: 400") and "Content-Length" in points[0]["errors"][0]
    assert points[1]["errors"][0].startswith("HTTP 401: bad token: Bearer <redacted>"), points[1]["errors"]
    assert serve._bench.redact("'Authorization': 'Bearer other-token'") == "'Authorization': 'Bearer <redacted>'"


def test_speedup_and_the_bench_figure_at_the_highest_shared_concurrency():
    def point(label, c, tok_s):
        return {
            "label": label,
            "concurrency": c,
            "output_tok_s": tok_s,
            "ttft_ms": {"p50": 10.0 * c},
            "e2e_ms": {"p50": 20.0 * c},
            "samples": {"ttft_ms": [float(c), 2.0 * c, 3.0 * c]},
        }

    points = [point("vllm", 1, 50), point("vllm", 4, 180), point("vllm", 16, 400)]
    points += [point("transformers", 1, 40), point("transformers", 4, 60)]  # not run at 16
    assert _bench_report.speedup(points) == (3.0, 4)  # 180 / 60, the highest concurrency both ran
    assert _bench_report.speedup(points, label="transformers", over="vllm") == (60 / 180, 4)
    with pytest.raises(ValueError, match="no concurrency measured for both"):
        _bench_report.speedup(points[:3])
    fig = serve.plot_load_test(points)
    left, right = fig.axes
    assert left.get_title() == "TTFT at concurrency 16" and len(left.patches) == 30  # one engine ran at 16
    assert right.get_title() == "throughput against latency" and len(right.lines) == 2
