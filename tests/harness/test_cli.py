"""cookbook.harness command line: the command list, unknown commands, every command's --help, lazy imports."""

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cookbook import harness

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
# The recipe's commands, in recipe order.
COMMANDS = [
    "base",
    "data",
    "plan",
    "train",
    "rl",
    "merge",
    "serve",
    "bench",
    "eval",
    "gpu-recipe",
    "cost",
    "demo",
    "launch",
]
STAGES = (
    "core",
    "models",
    "mesh",
    "lora",
    "fit",
    "data",
    "train",
    "gpu",
    "merge",
    "serve",
    "evaluate",
    "cost",
    "rl",
    "harness",
)


def _listed(help_text: str) -> list[str]:
    """The command names of the "Commands:" list in ``cookbook``'s help."""
    lines = help_text.split("Commands:\n", 1)[1].splitlines()
    return [line.split()[0] for line in lines if line.startswith("  ") and line.strip()]


def test_no_arguments_prints_the_command_list(capsys):
    assert harness.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: cookbook")
    assert _listed(out) == COMMANDS
    for line in out.split("Commands:\n", 1)[1].splitlines():
        if line.strip():
            assert len(line.split(None, 1)) == 2, f"command without a description: {line!r}"


def test_an_unknown_command_names_the_choices(capsys):
    assert harness.main(["trian", "--steps", "3"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'trian'" in err and "choose one of " + ", ".join(COMMANDS) in err


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_from_its_stage_package(command, capsys):
    with pytest.raises(SystemExit) as e:
        harness.main([command, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: cookbook {command}")
    name = f"register_{command.replace('-', '_')}_cli"
    owners = [s for s in STAGES if callable(getattr(importlib.import_module(f"cookbook.{s}"), name, None))]
    assert len(owners) == 1, (name, owners)


def test_building_a_parser_imports_no_heavy_library():
    code = (
        "import json, sys\n"
        "from cookbook.harness import _cli\n"
        "heavy = ('jax', 'torch', 'vllm', 'tunix', 'transformers')\n"
        "out = {}\n"
        f"for command in {COMMANDS!r}:\n"
        "    _cli.build_parser(command)\n"
        "    out[command] = [m for m in heavy if m in sys.modules]\n"
        "print(json.dumps(out))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {c: [] for c in COMMANDS}


def test_python_dash_m_cookbook_is_the_same_command_line():
    run = subprocess.run(
        [sys.executable, "-m", "cookbook"], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert _listed(run.stdout) == COMMANDS
    bad = subprocess.run(
        [sys.executable, "-m", "cookbook", "nope"], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2 and "unknown command 'nope'" in bad.stderr
