"""Every ``cookbook`` subcommand answers bad input with one line that names the fix.

Each case runs the real command in a fresh process, as a user would, with fake secrets in the
environment: the answer must be a single line ``cookbook COMMAND: ...`` that contains the fix,
the exit status non-zero, no traceback, and no secret's value anywhere in the output. The hub is
pointed at a closed local port, so the download case behaves the same on a machine with network.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cookbook import harness
from cookbook.harness import _cli

REPO = Path(__file__).resolve().parents[2]
SECRETS = {"HF_TOKEN": "hf_cookbookFAKEsecret0123456789", "VLLM_API_KEY": "sk-cookbookFAKEsecret987"}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again on return: connections are refused


class _NeedsKey(http.server.BaseHTTPRequestHandler):
    """An endpoint that refuses every request without the right key, like vLLM with --api-key."""

    def do_GET(self):  # noqa: N802
        self.send_response(401)
        self.end_headers()
        self.wfile.write(b'{"error": "Unauthorized"}')

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def keyed_endpoint():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NeedsKey)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def bad_index_base(tiny_base, tmp_path_factory) -> Path:
    """A copy of the tiny base whose index sends one tensor to a file outside the checkpoint."""
    bad = tmp_path_factory.mktemp("bad") / "base"
    shutil.copytree(tiny_base, bad)
    index = json.loads((bad / "model.safetensors.index.json").read_text())
    key = next(iter(index["weight_map"]))
    index["weight_map"][key] = "../" + index["weight_map"][key]
    (bad / "model.safetensors.index.json").write_text(json.dumps(index))
    return bad


# (id, argv with {tmp} / {bad_base} / {closed} / {keyed} placeholders, what the line must say)
CASES = [
    (
        "base-hub-unreachable",
        ["base", "--preset", "gemma4_e2b", "--out", "{tmp}/e2b"],
        ["HF_TOKEN", "licence", "huggingface.co/google/gemma-4-E2B-it", "--base DIR"],
    ),
    ("base-unknown-preset", ["base", "--preset", "gemma5"], ["invalid choice", "--help"]),
    ("base-foreign-dir", ["base", "--out", "{tmp}"], ["refusing to overwrite", "another --out"]),
    ("plan-unknown-preset", ["plan", "--preset", "gemma5"], ["Choose one of", "tiny"]),
    ("plan-unknown-slice", ["plan", "--slice", "v9-8"], ["unknown TPU slice", "v5p-8"]),
    (
        "train-missing-data",
        ["train", "--data", "{tmp}/missing.jsonl", "--out", "{tmp}/run"],
        ["--data", "no such file", ".jsonl"],
    ),
    (
        "train-real-base-unreachable",
        ["train", "--preset", "gemma4_31b", "--no-flash", "--out", "{tmp}/run31"],
        ["HF_TOKEN", "licence", "--base DIR"],
    ),
    ("train-bad-mesh", ["train", "--mesh", "four", "--out", "{tmp}/run"], ["FSDPxTP", "1x4"]),
    ("train-unknown-flag", ["train", "--bogus"], ["unrecognized arguments", "cookbook train --help"]),
    (
        "merge-index-outside",
        ["merge", "--lora", "{tmp}/run", "--base", "{bad_base}", "--out", "{tmp}/m"],
        ["points outside the checkpoint", "cookbook base"],
    ),
    (
        "merge-no-checkpoint",
        ["merge", "--lora", "{tmp}/run", "--out", "{tmp}/m"],
        ["No Orbax LoRA checkpoint", "cookbook train"],
    ),
    ("merge-missing-flag", ["merge", "--out", "{tmp}/m"], ["--lora", "required"]),
    ("serve-missing-dir", ["serve", "{tmp}/nothing"], ["does not exist", "checkpoint directory"]),
    ("serve-bad-lora", ["serve", "{tmp}", "--lora", "adapter-without-name"], ["NAME=DIR"]),
    ("serve-tpu-unknown-preset", ["serve", "{tmp}", "--tpu", "--preset", "gemma5"], ["Choose one of"]),
    ("bench-unreachable", ["bench", "--base-url", "{closed}", "--model", "m"], ["cannot reach", "cookbook serve"]),
    ("bench-not-a-url", ["bench", "--base-url", "localhost:8000", "--model", "m"], ["http://127.0.0.1:8000/v1"]),
    (
        "bench-key-refused",
        ["bench", "--base-url", "{keyed}", "--model", "m", "--api-key-env", "VLLM_API_KEY"],
        ["wants an API key", "--api-key-env"],
    ),
    (
        "bench-key-unset",
        ["bench", "--base-url", "{keyed}", "--model", "m", "--api-key-env", "NO_SUCH_KEY_VAR"],
        ["NO_SUCH_KEY_VAR", "not set"],
    ),
    (
        "eval-missing-problems",
        ["eval", "--problems", "{tmp}/none", "--completions", "{tmp}/c.jsonl"],
        ["does not exist", "ProbNNN_name_prompt.txt"],
    ),
    ("eval-no-problems-flag", ["eval", "--completions", "{tmp}/c.jsonl"], ["--problems DIR", "--write-sample-task"]),
    ("rl-not-a-run", ["rl", "--run", "{tmp}", "--out", "{tmp}/rl"], ["is not a `cookbook train` run directory"]),
    (
        "rl-group-of-one",
        ["rl", "--run", "{tmp}", "--out", "{tmp}/rl", "--group-size", "1"],
        ["group_size must be >= 2"],
    ),
    ("launch-no-processes", ["launch", "--processes", "0", "--", "train"], ["--processes 0", ">= 1"]),
    ("gpu-recipe-not-a-run", ["gpu-recipe", "--run", "{tmp}", "--out", "{tmp}/g"], ["recipe.json", "cookbook train"]),
    ("gpu-recipe-unknown-preset", ["gpu-recipe", "--preset", "gemma5", "--out", "{tmp}/g"], ["choose one of"]),
    ("data-missing-file", ["data", "--data", "{tmp}/rows.jsonl"], ["rows.jsonl: the file does not exist", ".jsonl"]),
    (
        "data-columns-without-mapping",
        ["data", "--data", "{tmp}/stray.txt", "--format", "columns"],
        ["needs a mapping", "columns=system=system,prompt=prompt,response=response"],
    ),
    (
        "data-bad-columns",
        ["data", "--data", "{tmp}/stray.txt", "--format", "columns", "--columns", "answer=a"],
        ["unknown part", "system, prompt, response"],
    ),
    ("cost-bad-price", ["cost", "--price", "tpu=cheap"], ["PLATFORM[:PRICING]=USD", "tpu-v5p-8"]),
    ("cost-missing-plan", ["cost", "--plan", "{tmp}/plan.json"], ["no such file", "cookbook plan --json"]),
    ("cost-negative-hours", ["cost", "--serving-hours", "-5"], ["negative", "0 or more"]),
    ("demo-unknown-notebook", ["demo", "--only", "99"], ["--only 99", "no such notebook"]),
    ("demo-bad-parameter", ["demo", "-p", "1PRESET"], ["NAME=VALUE"]),
    ("demo-report-of-nothing", ["demo", "--report-only", "{tmp}"], ["not a run directory", "runs/latest"]),
    ("unknown-command", ["trian"], ["unknown command", "train"]),
]


def test_every_subcommand_has_a_bad_input_case():
    assert set(_cli.COMMANDS) <= {argv[0] for _, argv, _ in CASES}


@pytest.mark.parametrize(("argv", "fix"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_naming_the_fix(argv, fix, tmp_path, bad_index_base, keyed_endpoint):
    subs = {
        "{tmp}": str(tmp_path),
        "{bad_base}": str(bad_index_base),
        "{keyed}": keyed_endpoint,
        "{closed}": f"http://127.0.0.1:{_closed_port()}/v1",
    }
    (tmp_path / "stray.txt").write_text("a directory that is not a checkpoint or a run\n")
    args = [subs.get(a, a.replace("{tmp}", str(tmp_path))) for a in argv]
    env = {
        **os.environ,
        **SECRETS,
        "HF_ENDPOINT": f"http://127.0.0.1:{_closed_port()}",
        "HF_HUB_ETAG_TIMEOUT": "5",
        "PYTHONPATH": str(REPO),
    }
    done = subprocess.run(
        [sys.executable, "-m", "cookbook", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    out = done.stdout + done.stderr
    lines = [line for line in out.splitlines() if line.strip()]
    assert done.returncode != 0, out
    assert "Traceback" not in out, out
    assert len(lines) == 1, out
    command = "cookbook" if argv[0] not in _cli.COMMANDS else f"cookbook {argv[0]}"
    assert lines[0].startswith(f"{command}: "), lines[0]
    for needle in fix:
        assert needle in lines[0], (needle, lines[0])
    for name, value in SECRETS.items():
        assert value not in out, f"{name}'s value leaked: {out}"


@pytest.mark.parametrize(("code", "fix"), [(28, "free space on that disk"), (13, "check the permissions")])
def test_a_full_disk_or_refused_write_is_one_line_naming_the_path(code, fix, tmp_path, monkeypatch, capsys):
    """An OSError from the system (here while `cookbook gpu-recipe` writes its first file) was a
    traceback: one line naming the path and the fix, or the traceback with COOKBOOK_TRACEBACK=1."""
    import errno

    original = Path.write_text

    def refused(self, *args, **kwargs):
        if self.parent == tmp_path / "g":
            raise (PermissionError if code == errno.EACCES else OSError)(code, os.strerror(code), str(self))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", refused)
    monkeypatch.delenv("COOKBOOK_TRACEBACK", raising=False)
    assert harness.main(["gpu-recipe", "--preset", "tiny", "--out", str(tmp_path / "g")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("cookbook gpu-recipe: " + os.strerror(code)), err
    assert str(tmp_path / "g") in err[0] and fix in err[0], err
    monkeypatch.setenv("COOKBOOK_TRACEBACK", "1")
    with pytest.raises(OSError) as e:
        harness.main(["gpu-recipe", "--preset", "tiny", "--out", str(tmp_path / "g")])
    assert e.value.errno == code
