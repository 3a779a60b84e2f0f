"""train_grpo_gpu.py: RL of Gemma 4's LoRA on GPUs with TRL's GRPOTrainer, the objective of ``cookbook rl``.

This file is copied verbatim next to ``grpo_config.json``, ``lora_config.json``, ``recipe.json``,
``fsdp_config.yaml``, ``train_gpu.py`` (whose LoRA helpers it loads) and ``problems/`` by
``cookbook.gpu.write_gpu_rl_recipe``. It imports nothing from the cookbook (a GPU host needs torch,
transformers, trl, peft, accelerate, datasets and Icarus Verilog), so the files next to it are the whole recipe:

    accelerate launch --config_file fsdp_config.yaml train_grpo_gpu.py \\
        --model google/gemma-4-31B-it --adapter sft-adapter/ --out run/

What makes the objective ``cookbook rl``'s (Tunix's DAPO learner), not TRL's defaults, and why:

* The reward, restated from ``cookbook.rl.VerilogReward`` and ``cookbook.evaluate.simulate`` (written
  here by hand because this script must run without the cookbook; ``tests/gpu/test_rl_recipe.py``
  checks it gives the cookbook's rewards and verdicts): ``functional`` x (the problem's testbench passes
  on the module of the completion's *answer*: every thought channel dropped, compiled with
  ``iverilog -Wall -Winfloop -Wno-timescale -g2012``, run with ``vvp -n ... -none``, confined by a
  timeout, ``ulimit`` and an empty network namespace where allowed) + ``format`` x (one module ending
  the answer, after one closed thought channel in a thinking run).
* The reward reads the completion's *tokens* decoded with special tokens kept: TRL hands reward
  functions text decoded with ``skip_special_tokens=True``, which drops ``<|channel>`` (a thought would
  then count as the answer) and ``<turn|>`` (a completion that ran out of budget could not be told
  from one that stopped). Tunix's text keeps them.
* Generation stops on ``<eos>``, ``<turn|>`` and ``<|tool_response>`` (``recipe.json`` ``stop_tokens``),
  as Tunix's rollout in ``cookbook rl``; the stop token stays in the completion and in the loss.
* The LoRA is the SFT run's (``--adapter``, a PEFT adapter in either layout), with K and V sharing one
  ``lora_A`` as in Qwix's ``kv_einsum`` LoRA and no dropout; every ``grpo_config.json`` value that TRL
  would default otherwise is set there (``cookbook.gpu._rl_recipe`` lists them).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import functools
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

HERE = Path(__file__).resolve().parent


def sft_script(recipe_dir: str | Path = HERE):
    """``train_gpu.py`` from the recipe directory: the base model loading and Qwix's LoRA in PEFT."""
    path = Path(recipe_dir) / "train_gpu.py"
    spec = importlib.util.spec_from_file_location(f"train_gpu_{abs(hash(str(path)))}", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise FileNotFoundError(f"{path} is missing; write the recipe with cookbook.gpu.write_gpu_rl_recipe(DIR)")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_recipe(recipe_dir: str | Path = HERE) -> dict[str, Any]:
    """The recipe written next to this script: ``{"grpo", "lora", "recipe"}`` dicts."""
    d = Path(recipe_dir)
    missing = [n for n in ("grpo_config.json", "lora_config.json", "recipe.json") if not (d / n).is_file()]
    if missing:
        raise FileNotFoundError(f"{d} lacks {missing}; write the recipe with cookbook.gpu.write_gpu_rl_recipe(DIR)")
    return {
        "grpo": json.loads((d / "grpo_config.json").read_text()),
        "lora": json.loads((d / "lora_config.json").read_text()),
        "recipe": json.loads((d / "recipe.json").read_text()),
    }


# ----------------------------------------------------------------------------------------
# Problems: verilog-eval's layout (ProbNNN_name_prompt.txt, _ref.sv, _test.sv)

_PROBLEM_FILE = re.compile(r"^(Prob\d+_.+?)_(prompt\.txt|ref\.sv|test\.sv)$")


class Problem(NamedTuple):
    name: str
    prompt: str  # the user turn
    ref: str  # reference implementation (module RefModule)
    test: str  # testbench (top module tb) printing "Mismatches: M in N samples"


def load_problems(directory: str | Path) -> list[Problem]:
    """Every complete problem of a verilog-eval style directory, sorted by name."""
    root = Path(directory)
    parts: dict[str, dict[str, Path]] = {}
    for path in root.iterdir() if root.is_dir() else ():
        m = _PROBLEM_FILE.match(path.name)
        if m and path.is_file():
            parts.setdefault(m.group(1), {})[m.group(2)] = path
    complete = sorted(n for n, p in parts.items() if len(p) == 3)
    if not complete or len(complete) != len(parts):
        raise ValueError(
            f"{root}: need ProbNNN_name_prompt.txt, _ref.sv and _test.sv for every problem "
            f"({len(complete)} complete of {len(parts)})"
        )
    return [
        Problem(n, parts[n]["prompt.txt"].read_text(), parts[n]["ref.sv"].read_text(), parts[n]["test.sv"].read_text())
        for n in complete
    ]


# ----------------------------------------------------------------------------------------
# The reward: cookbook.rl.VerilogReward and cookbook.evaluate.simulate, restated

END_MARKERS = ("<turn|>", "<eos>", "<|turn>")
THOUGHT_SPANS = (("<|channel>", "<channel|>"), ("<think>", "</think>"))
THOUGHT_OPEN, THOUGHT_CLOSE = THOUGHT_SPANS[0]
TURN_ENDS = ("<turn|>", "<eos>")
IVERILOG_FLAGS = ("-Wall", "-Winfloop", "-Wno-timescale", "-g2012")
HARNESS_FAILING_WARNINGS = (
    "always_comb process has no sensitivities",
    "found no sensitivities so it will never trigger",
)
TESTBENCH_TOP = "tb"
SIM_DEFAULTS = {"timeout_s": 30.0, "max_output_bytes": 1 << 20, "max_memory_mib": 2048, "isolate_network": True}
_VERDICT = re.compile(r"^Mismatches: (\d+) in (\d+) samples\s*$", re.M)
_MODULE_START = re.compile(r"(?m)^[ \t]*(?:\(\*.*?\*\)\s*)?(?:module|macromodule)\s+[A-Za-z_]\w*")
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n?")


def clean_completion(completion: str) -> str:
    """The answer: cut at the first end-of-turn marker, every thought dropped (an unclosed one
    leaves no answer), whitespace trimmed."""
    for marker in END_MARKERS:
        completion = completion.split(marker, 1)[0]
    for start, end in THOUGHT_SPANS:
        head, closed, tail = completion.partition(end)
        if closed and start not in head:  # a closing tag without its opening one ends a thought too
            completion = tail
        while start in completion:
            before, _, rest = completion.partition(start)
            _, closed, after = rest.partition(end)
            completion = before + (after if closed else "")
    return completion.strip()


def _module_span(text: str) -> str | None:
    m = _MODULE_START.search(text)
    if m is None:
        return None
    end = text.rfind("endmodule")
    body = text[m.start() : end + len("endmodule")] if end > m.start() else text[m.start() :]
    return body.strip() + "\n"


def extract_module(completion: str) -> str | None:
    """The answer's Verilog, from its first ``module`` to its last ``endmodule``; a fenced block
    holding a module is preferred (an unclosed fence runs to the end)."""
    text, pos = clean_completion(completion), 0
    while (m := _FENCE.search(text, pos)) is not None:
        end = text.find("```", m.end())
        code = _module_span(text[m.end() : end if end >= 0 else len(text)])
        if code is not None:
            return code
        if end < 0:
            break
        pos = end + 3
    return _module_span(text)


def well_formed(completion: str, *, thinking: bool = False) -> bool:
    """The format term: one module ending the answer, after one closed thought in a thinking run."""
    body = completion
    for end in TURN_ENDS:
        body = body.split(end, 1)[0]
    if thinking:
        head, opened, rest = body.partition(THOUGHT_OPEN)
        thought, closed, answer = rest.partition(THOUGHT_CLOSE)
        if head.strip() or not opened or not closed or not thought.strip() or THOUGHT_OPEN in answer:
            return False
    elif THOUGHT_OPEN in body:
        return False
    answer = clean_completion(completion)
    if answer.count("endmodule") != 1 or extract_module(completion) is None:
        return False
    return answer.rsplit("endmodule", 1)[1].strip() in ("", "```")


@functools.cache
def _netns_prefix() -> tuple[str, ...]:
    unshare = shutil.which("unshare")
    if unshare is None:
        return ()
    try:
        ok = subprocess.run([unshare, "-rn", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return (unshare, "-rn") if ok else ()


def _run(argv: Sequence[str], cwd: Path, log: Path, sim: dict) -> int | None:
    """Run ``argv`` confined (output and memory caps, no network, its own process group);
    the exit code, or None on timeout."""
    limits = f"ulimit -f {max(1, sim['max_output_bytes'] // 512)} 2>/dev/null; "
    limits += f'ulimit -v {sim["max_memory_mib"] * 1024} 2>/dev/null; exec "$@"'
    prefix = _netns_prefix() if sim["isolate_network"] else ()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*prefix, "/bin/sh", "-c", limits, "sh", *argv],
            cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"},
        )  # fmt: skip
        try:
            return proc.wait(timeout=sim["timeout_s"])
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None


def simulate(problem: Problem, completion: str, sim: dict | None = None) -> str:
    """The outcome of one completion against ``problem``: pass, mismatch, no_samples, compile_error,
    timeout, runtime_error or no_module (``cookbook.evaluate._simulate.OUTCOMES``)."""
    sim = {**SIM_DEFAULTS, **(sim or {})}
    code = extract_module(completion)
    if code is None:
        return "no_module"
    iverilog, vvp = shutil.which("iverilog"), shutil.which("vvp")
    if not (iverilog and vvp):
        raise SystemExit("Icarus Verilog is not installed: apt-get install iverilog")
    with tempfile.TemporaryDirectory(prefix="grpo-sim-") as tmp:
        work = Path(tmp)
        for name, text in (("candidate.sv", code), ("test.sv", problem.test), ("ref.sv", problem.ref)):
            (work / name).write_text(text)
        argv = [iverilog, *IVERILOG_FLAGS, "-s", TESTBENCH_TOP, "-o", "sim.vvp", "candidate.sv", "test.sv", "ref.sv"]
        rc = _run(argv, work, work / "compile.log", sim)
        with open(work / "compile.log", "rb") as f:
            log = f.read(64 << 10).decode("utf-8", errors="replace")
        if rc is None:
            return "timeout"
        if rc != 0 or any(w in log for w in HARNESS_FAILING_WARNINGS):
            return "compile_error"
        rc = _run([vvp, "-n", "sim.vvp", "-none"], work, work / "sim.log", sim)
        with open(work / "sim.log", "rb") as f:
            out = f.read(min(sim["max_output_bytes"], 4 << 20)).decode("utf-8", errors="replace")
    if rc is None or "TIMEOUT" in out:
        return "timeout"
    verdicts = _VERDICT.findall(out)
    if rc != 0 or len(verdicts) != 1:
        return "runtime_error"
    mismatches, samples = map(int, verdicts[0])
    return "no_samples" if samples == 0 else "mismatch" if mismatches else "pass"


class VerilogReward:
    """A TRL reward function: ``functional`` x simulator pass + ``format`` x well formed, per completion.

    ``last`` holds the last call's ``{"rewards", "passed", "formatted", "outcomes"}``.
    """

    __name__ = "verilog_reward"  # TRL names the reward's metrics by it

    def __init__(self, problems: Sequence[Problem], tokenizer, config: dict[str, Any]):
        self.problems = {p.name: p for p in problems}
        self.tokenizer, self.config = tokenizer, config
        self.last: dict[str, list] | None = None

    def verdicts(self, names: Sequence[str], texts: Sequence[str]) -> dict[str, list]:
        missing = sorted(set(names) - set(self.problems))
        if missing or len(names) != len(texts):
            raise ValueError(f"{len(texts)} completions for {len(names)} names; unknown problems {missing[:3]}")
        answers = [extract_module(t) or "" for t in texts]
        unique = sorted({(n, a) for n, a in zip(names, answers, strict=True) if a})  # a group repeats itself
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        workers = self.config.get("workers") or cpus
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            done = list(pool.map(lambda job: simulate(self.problems[job[0]], job[1], self.config.get("sim")), unique))
        outcome = dict(zip(unique, done, strict=True))
        outcomes = [outcome[(n, a)] if a else "no_module" for n, a in zip(names, answers, strict=True)]
        passed = [o == "pass" for o in outcomes]
        formatted = [well_formed(t, thinking=bool(self.config.get("thinking"))) for t in texts]
        f, g = float(self.config["functional"]), float(self.config["format"])
        rewards = [f * p + g * w for p, w in zip(passed, formatted, strict=True)]
        return {"rewards": rewards, "passed": passed, "formatted": formatted, "outcomes": outcomes}

    def __call__(self, prompts, completions, completion_ids, problem, log_metric=None, **_):
        texts = [self.tokenizer.decode(ids, skip_special_tokens=False) for ids in completion_ids]
        self.last = self.verdicts(list(problem), texts)
        if log_metric is not None:
            log_metric("pass_rate", sum(self.last["passed"]) / len(texts))
            log_metric("format_rate", sum(self.last["formatted"]) / len(texts))
        return self.last["rewards"]


# ----------------------------------------------------------------------------------------
# The SFT adapter, and the trainer


def load_adapter(model, adapter_dir: str | Path, lora_kwargs: dict[str, Any]) -> int:
    """Set the PEFT model's LoRA from a PEFT adapter directory (text or released layout); returns
    the tensors set. Refuses another rank or alpha, a LoRA weight left unset, and K/V ``lora_A``
    that differ (this LoRA has one A for K and V, as Qwix's)."""
    import torch
    from safetensors.torch import load_file

    d = Path(adapter_dir)
    cfg = json.loads((d / "adapter_config.json").read_text())
    if (cfg["r"], float(cfg["lora_alpha"])) != (lora_kwargs["r"], float(lora_kwargs["lora_alpha"])):
        raise ValueError(f"{d}: r={cfg['r']}, alpha={cfg['lora_alpha']}; the recipe's LoRA has "
                         f"r={lora_kwargs['r']}, alpha={lora_kwargs['lora_alpha']}")  # fmt: skip
    tensors = load_file(str(d / "adapter_model.safetensors"))
    params = {
        n.replace(".default.", "."): p for n, p in model.named_parameters(remove_duplicate=False) if ".lora_" in n
    }

    def local(key: str) -> str | None:
        for a, b in (("", ""), (".model.layers.", ".model.language_model.layers."),
                     (".model.language_model.layers.", ".model.layers.")):  # fmt: skip
            if (alt := key.replace(a, b, 1) if a else key) in params:
                return alt
        return None

    done = set()
    with torch.no_grad():
        for key, value in tensors.items():
            name = local(key)
            k_twin = key.replace(".v_proj.", ".k_proj.")
            if name is None and ".v_proj." in key and local(k_twin) and torch.equal(value, tensors[k_twin]):
                continue  # vLLM's copy of a K = V layer's k_proj LoRA: that layer has no v_proj here
            if name is None:
                raise ValueError(f"{d}: {key} matches no LoRA weight of the model")
            if ".v_proj.lora_A." in key and k_twin in tensors and not torch.equal(value, tensors[k_twin]):
                raise ValueError(f"{d}: {key} differs from its k_proj lora_A; this LoRA shares one A for K and V")
            params[name].copy_(value.to(params[name].dtype))
            done.add(name)
    unset = sorted(set(params) - done)
    if unset:
        raise ValueError(f"{d} sets no value for {len(unset)} LoRA weights, e.g. {unset[:2]}")
    return len(done)


def build_trainer(
    *,
    model_path: str,
    output_dir: str | Path,
    recipe_dir: str | Path = HERE,
    problems_dir: str | Path | None = None,
    adapter: str | Path | None = None,
    grpo_overrides: dict[str, Any] | None = None,
    model=None,
):
    """A ``GRPOTrainer`` with the recipe's objective.

    Args:
      model_path: Hub id or local directory of the base checkpoint (and its tokenizer).
      output_dir: where TRL writes checkpoints, logs and the adapter.
      problems_dir: the problems (default: ``problems/`` next to the recipe).
      adapter: the SFT run's PEFT adapter to start from (default: a fresh LoRA, B = 0).
      grpo_overrides: changes to ``grpo_config.json`` (e.g. ``{"bf16": False}`` on CPU).
      model: an already-loaded base model (otherwise loaded from ``model_path``).
    """
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    sft = sft_script(recipe_dir)
    cfg = load_recipe(recipe_dir)
    recipe = cfg["recipe"]
    grpo = {**cfg["grpo"], **(grpo_overrides or {}), "output_dir": str(output_dir)}
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if model is None:
        model = sft.load_base_model(model_path, recipe)
    model.generation_config.eos_token_id = [tokenizer.convert_tokens_to_ids(t) for t in recipe["stop_tokens"]]
    model = sft.apply_lora(model, cfg["lora"], recipe, seed=int(grpo.get("seed", 0)))
    if adapter is not None:
        load_adapter(model, adapter, cfg["lora"])
    problems = load_problems(problems_dir or Path(recipe_dir) / "problems")
    rows = [{"prompt": [{"role": "user", "content": p.prompt}], "problem": p.name} for p in problems]
    return GRPOTrainer(
        model=model,
        reward_funcs=[VerilogReward(problems, tokenizer, recipe["reward"])],
        args=GRPOConfig(**grpo),
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="base checkpoint (default: recipe.json base_model)")
    parser.add_argument("--adapter", default=None, help="the SFT run's PEFT adapter (default: a fresh LoRA)")
    parser.add_argument("--problems", default=None, help="problems, verilog-eval layout (default: problems/ here)")
    parser.add_argument("--out", default=None, help="output directory (default: grpo_config.json output_dir)")
    parser.add_argument("--recipe-dir", default=str(HERE), help="directory holding the recipe JSON files")
    args = parser.parse_args(argv)
    cfg = load_recipe(args.recipe_dir)
    model_path = args.model or cfg["recipe"].get("base_model")
    if not model_path:
        parser.error("--model is required (recipe.json names no base_model)")
    if not (shutil.which("iverilog") and shutil.which("vvp")):
        parser.error("the reward needs Icarus Verilog: apt-get install iverilog")
    trainer = build_trainer(
        model_path=model_path,
        output_dir=args.out or cfg["grpo"].get("output_dir", "gemma4-lora-grpo-gpu"),
        recipe_dir=args.recipe_dir,
        problems_dir=args.problems,
        adapter=args.adapter,
    )
    trainer.train()
    trainer.save_model()
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "VerilogReward",
    "sft_script",
    "build_trainer",
    "clean_completion",
    "extract_module",
    "load_adapter",
    "load_problems",
    "load_recipe",
    "simulate",
    "well_formed",
]
