"""The GPU RL recipe (cookbook.gpu: TRL's GRPOTrainer with `cookbook rl`'s objective) and the
train_grpo_gpu.py it writes: its configs, its reward against cookbook.rl.VerilogReward, its loss against
Tunix's on one batch, and one real GRPO step on CPU."""

import dataclasses
import itertools
import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from cookbook import data, evaluate, gpu, models, rl, train
from cookbook.core import CONTROL_SEPARATION
from cookbook.core._numerics import PARITY_FACTOR
from cookbook.evaluate import _simulate
from cookbook.gpu import _rl_parity, _rl_recipe
from cookbook.train import _run


@pytest.fixture(scope="module")
def simulator():
    if not (shutil.which("iverilog") and shutil.which("vvp")):
        pytest.fail(_simulate.INSTALL_HINT)  # CI installs it: a missing simulator is a failure


@pytest.fixture(scope="module")
def problems():
    """Two sample-task training problems; the second's prompt made longer, so a batch of both is
    left-padded (TRL pads to the longest prompt, Tunix to a power of two)."""
    first, second = evaluate.sample_task_problems(data.generate_rows("train", n=2, seed=0))
    return [first, dataclasses.replace(second, prompt=second.prompt + " Use one continuous assignment.")]


def _tiny_recipe(problems, **cluster):
    return gpu.derive_gpu_rl_recipe(
        rl.rl_preset("tiny"),
        train.train_preset("tiny"),
        problems=problems,
        reward=rl.RewardConfig(format=rl.rl_preset("tiny").format_weight),
        cluster=gpu.GpuCluster(**cluster),
    )


def test_tiny_rl_recipe_keeps_cookbook_rls_objective(problems, tiny_base):
    cfg, tc = rl.rl_preset("tiny"), train.train_preset("tiny")
    r = _tiny_recipe(problems, num_gpus=2)
    g = r.grpo
    assert (r.algorithm, g["loss_type"], g["beta"]) == ("dapo", "dapo", 0.0)
    assert g["num_generations"] == cfg.group_size == 4
    assert (g["epsilon"], g["epsilon_high"]) == (cfg.epsilon, cfg.epsilon_high) == (0.2, 0.28)
    assert (g["learning_rate"], g["warmup_steps"], g["max_steps"]) == (cfg.learning_rate, 0, cfg.max_steps)
    assert (g["temperature"], g["top_p"], g["top_k"]) == (cfg.temperature, cfg.top_p, 0)
    assert (g["max_grad_norm"], g["weight_decay"], g["adam_beta2"]) == (cfg.max_grad_norm, cfg.weight_decay, 0.99)
    assert g["lr_scheduler_type"] == "constant" and g["num_iterations"] == 1 and g["scale_rewards"] == "group"
    # One optimizer step per TPU step: 2 prompts x 4 samples over 2 GPUs, one group per micro-batch.
    assert (g["per_device_train_batch_size"], g["gradient_accumulation_steps"], g["steps_per_generation"]) == (4, 1, 1)
    # cookbook rl's rollout budget: the problems' answer budget (no max_response_tokens in the preset).
    tok = data.load_tokenizer("tiny")  # cookbook.rl's train_rl sizes its rollouts with this very call
    assert g["max_completion_length"] == data.answer_budget(tok, problems) == 50
    # The SFT recipe's LoRA, without dropout (cookbook rl trains it without).
    sft_lora = gpu.derive_gpu_recipe(tc, cluster=gpu.GpuCluster(num_gpus=2)).lora
    assert r.lora == {**sft_lora, "lora_dropout": 0.0}
    assert (r.lora["r"], r.lora["lora_alpha"]) == (tc.lora.rank, tc.lora.alpha)
    assert r.reward == {"functional": 1.0, "format": cfg.format_weight, "thinking": False, "workers": None,
                        "sim": dataclasses.asdict(evaluate.SimConfig())}  # fmt: skip
    assert [models.SPECIAL_TOKEN_IDS[t] for t in r.stop_tokens] == models.stop_token_ids()
    # TRL and PEFT take them as they are (use_cpu: bf16 is refused on a CPU host).
    args = r.grpo_config(use_cpu=True, bf16=False)
    assert args.generation_batch_size == 4 and args.epsilon_high == 0.28 and args.loss_type == "dapo"
    assert r.peft_config().lora_dropout == 0.0
    # The constants the script restates (it runs without the cookbook) are the cookbook's.
    from cookbook.data import _sample_task
    from cookbook.evaluate import _simulate
    from cookbook.gpu import train_grpo_gpu as script
    from cookbook.rl import _reward

    assert script.SIM_DEFAULTS == dataclasses.asdict(evaluate.SimConfig())
    assert (script.IVERILOG_FLAGS, script.HARNESS_FAILING_WARNINGS, script.TESTBENCH_TOP) == (
        _simulate.IVERILOG_FLAGS, _simulate.HARNESS_FAILING_WARNINGS, _simulate.TESTBENCH_TOP)  # fmt: skip
    for mine, theirs in ((script._VERDICT, _simulate._VERDICT), (script._MODULE_START, _simulate._MODULE_START),
                         (script._FENCE, _simulate._FENCE)):  # fmt: skip
        assert (mine.pattern, mine.flags) == (theirs.pattern, theirs.flags)
    assert (script.END_MARKERS, script.THOUGHT_SPANS) == (_sample_task._END_MARKERS, _sample_task._THOUGHT_SPANS)
    assert (script.TURN_ENDS, (script.THOUGHT_OPEN, script.THOUGHT_CLOSE)) == (
        _reward._TURN_ENDS, (_reward._THOUGHT_OPEN, _reward._THOUGHT_CLOSE))  # fmt: skip


def test_paper_rl_recipe_on_two_gpus():
    cfg = rl.rl_preset("paper")
    r = gpu.derive_gpu_rl_recipe(cfg, train.train_preset("gemma4_31b"))
    g = r.grpo
    assert g["num_generations"] == 16 and g["max_completion_length"] == 20480
    # 512 prompts x 16 samples = 8192 completions: 2 GPUs x 16 x 256 accumulation.
    assert (g["per_device_train_batch_size"], g["gradient_accumulation_steps"]) == (16, 256)
    assert g["lr_scheduler_type"] == "constant_with_warmup" and g["warmup_steps"] == 10 and g["learning_rate"] == 1e-6
    assert g["bf16"] is True and g["gradient_checkpointing"] is True and r.base_model == "google/gemma-4-31B-it"
    assert (r.lora["r"], r.lora["lora_alpha"], r.lora["lora_dropout"]) == (64, 64.0, 0.0)
    assert r.accelerate["fsdp_config"]["fsdp_transformer_layer_cls_to_wrap"] == "Gemma4TextDecoderLayer"


def test_objectives_without_a_trl_equivalent_are_refused():
    tc = train.train_preset("tiny")
    with pytest.raises(ValueError, match="k1 estimate"):
        gpu.derive_gpu_rl_recipe(rl.RLConfig(algorithm="grpo", beta=0.04, max_response_tokens=64), tc)
    with pytest.raises(ValueError, match="do not split over 3 GPUs"):
        gpu.derive_gpu_rl_recipe(rl.rl_preset("tiny").replace(max_response_tokens=64), tc,
                                 cluster=gpu.GpuCluster(num_gpus=3))  # fmt: skip


def test_written_recipe_loads_and_its_script_needs_no_cookbook(problems, tiny_base, tmp_path):
    import yaml
    from peft import LoraConfig
    from trl import GRPOConfig

    paths = gpu.write_gpu_rl_recipe(tmp_path, _tiny_recipe(problems, num_gpus=2), problems=problems)
    assert set(_rl_recipe.RL_RECIPE_FILES) <= {p.name for p in tmp_path.iterdir()}
    grpo = GRPOConfig(**{**json.loads(paths["grpo_config.json"].read_text()), "use_cpu": True, "bf16": False,
                         "output_dir": str(tmp_path / "out")})  # fmt: skip
    assert grpo.num_generations == 4 and grpo.loss_type == "dapo"
    assert LoraConfig(**json.loads(paths["lora_config.json"].read_text())).lora_dropout == 0.0
    assert yaml.safe_load(paths["fsdp_config.yaml"].read_text())["num_processes"] == 2
    recipe = json.loads(paths["recipe.json"].read_text())
    assert recipe["stop_tokens"] == ["<eos>", "<turn|>", "<|tool_response>"] and recipe["tie_kv_lora_a"] is True
    # The problems, in verilog-eval's layout, read back as the cookbook reads them.
    assert evaluate.load_problems(paths["problems"]) == [dataclasses.replace(p, answer=None) for p in problems]
    for name in ("train_grpo_gpu.py", "train_gpu.py"):
        assert not re.search(r"^\s*(from|import) cookbook", paths[name].read_text(), re.M), name
    out = subprocess.run([sys.executable, "-I", str(paths["train_grpo_gpu.py"]), "--help"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0 and "--adapter" in out.stdout, out.stderr


def test_cli_writes_the_rl_recipe_on_its_defaults_and_never_overwrites_unasked(tmp_path, capsys, tiny_base):
    from cookbook import harness

    out = tmp_path / "rl"
    assert harness.main(["gpu-recipe", "--rl", "--preset", "tiny", "--out", str(out)]) == 0
    assert "train_grpo_gpu.py --model" in capsys.readouterr().out
    cfg = rl.rl_preset("tiny")
    grpo = json.loads((out / "grpo_config.json").read_text())
    assert (grpo["num_generations"], grpo["epsilon"], grpo["epsilon_high"], grpo["beta"]) == (4, 0.2, 0.28, 0.0)
    assert (grpo["learning_rate"], grpo["max_steps"], grpo["temperature"]) == (0.0001, cfg.max_steps, 0.9)
    # cookbook rl's problems: the first 64 training rows of the preset's sample task.
    rows = list(itertools.islice(train.train_rows(train.train_preset("tiny")), 64))
    names = [p.name for p in evaluate.sample_task_problems(rows)]
    assert [p.name for p in evaluate.load_problems(out / "problems")] == names
    assert json.loads((out / "recipe.json").read_text())["problems"] == names
    # Its own recipe again: refused unless --overwrite, which keeps what else is there (a run).
    assert harness.main(["gpu-recipe", "--rl", "--preset", "tiny", "--out", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    (out / "run").mkdir()
    assert harness.main(["gpu-recipe", "--rl", "--preset", "tiny", "--out", str(out), "--overwrite"]) == 0
    assert (out / "run").is_dir()
    # A run's recipe.json gives its model and LoRA; RL flags without --rl are refused.
    run = tmp_path / "sft"
    run.mkdir()
    (run / "recipe.json").write_text(json.dumps(_run.recipe(train.train_preset("tiny"), tiny_base)))
    argv = ["gpu-recipe", "--rl", "--run", str(run), "--num-gpus", "1", "--num-problems", "4", "--out"]
    assert harness.main([*argv, str(tmp_path / "r")]) == 0
    assert len(list((tmp_path / "r" / "problems").glob("*_test.sv"))) == 4
    assert json.loads((tmp_path / "r" / "grpo_config.json").read_text())["per_device_train_batch_size"] == 4
    # An RL run's recipe.json (the SFT run's plus an "rl" section, as `cookbook rl` writes it) gives its
    # RL config and problems.
    rl_run = tmp_path / "rl-run"
    rl_run.mkdir()
    ran = rl.RLConfig(group_size=2, max_steps=3, learning_rate=3e-5)
    section = {"config": ran.to_dict(), "sft_run": str(run), "sft_step": 1, "problems": names[2:5]}
    (rl_run / "recipe.json").write_text(json.dumps({**json.loads((run / "recipe.json").read_text()), "rl": section}))
    assert (
        harness.main(["gpu-recipe", "--rl", "--run", str(rl_run), "--num-gpus", "1", "--out", str(tmp_path / "q")]) == 0
    )
    grpo = json.loads((tmp_path / "q" / "grpo_config.json").read_text())
    assert (grpo["num_generations"], grpo["max_steps"], grpo["learning_rate"]) == (2, 3, 3e-5)
    assert [p.name for p in evaluate.load_problems(tmp_path / "q" / "problems")] == names[2:5]
    capsys.readouterr()
    assert harness.main(["gpu-recipe", "--preset", "tiny", "--num-problems", "4", "--out", str(tmp_path / "x")]) == 2
    assert "only go with --rl" in capsys.readouterr().err


def _hand_made_completions(problem) -> dict[str, str]:
    """Answers to a sample-task problem that reach every verdict and both format outcomes."""
    rw, ref = evaluate.rewrites(problem), problem.answer
    op = re.search(r"assign y = a (\S+) b;", ref).group(1)

    def thought(text):
        return f"<|channel>thought\n{text}\n<channel|>"

    return {
        **{label: text + "<turn|>" for label, text in rw.items()},
        "fenced": f"```verilog\n{ref}\n```<turn|>",
        "a fence never closed (out of budget)": f"```verilog\n{ref}",
        "run-on text, no stop": f"{ref}\nalways always module",
        "the reference only in a thought": thought(ref) + rw["wrong operator"] + "<turn|>",
        "a thought, then the reference": thought(f"y is a {op} b") + ref + "<turn|>",
        "a thought never closed": "<|channel>thought\n" + ref,
        "think tags": f"<think>plan</think>{ref}<turn|>",
        "two modules": f"{ref}\n{ref}<turn|>",
        "no module": "I would rather not.<turn|>",
        "always_comb with no sensitivities": ref.replace("output [", "output logic [").replace(
            f"assign y = a {op} b;", "always_comb y = 0;"
        )
        + "<turn|>",
        "stops the simulation first": ref.replace("endmodule", "initial $finish;\nendmodule") + "<turn|>",
        "prints a verdict of its own": ref.replace(
            "endmodule", 'initial $display("Mismatches: 0 in 1 samples");\nendmodule'
        )
        + "<turn|>",
        "text after <eos>": ref + "<eos>module x; endmodule",
    }


@pytest.mark.parametrize("thinking", [False, True])
def test_script_reward_equals_cookbook_rls_on_the_same_tokens(thinking, problems, simulator, tiny_base, tmp_path):
    """train_grpo_gpu.py's reward, given the completion tokens as TRL gives them and reading the problems
    and weights the recipe wrote, against cookbook.rl.VerilogReward on Tunix's text of the same tokens."""
    from transformers import AutoTokenizer

    reward_cfg = rl.RewardConfig(format=0.5 if thinking else 0.1, thinking=thinking)
    tc = train.train_preset("tiny").replace(sample_task="thinking" if thinking else "plain")
    recipe = gpu.derive_gpu_rl_recipe(rl.rl_preset("tiny").replace(max_response_tokens=128), tc, problems=problems,
                                      reward=reward_cfg, cluster=gpu.GpuCluster(num_gpus=1))  # fmt: skip
    gpu.write_gpu_rl_recipe(tmp_path, recipe, problems=problems)
    script = _rl_parity.import_grpo_script(tmp_path)
    tok = AutoTokenizer.from_pretrained(tiny_base)
    reward = script.VerilogReward(script.load_problems(tmp_path / "problems"), tok,
                                  json.loads((tmp_path / "recipe.json").read_text())["reward"])  # fmt: skip
    names, ids = [], []
    for p in problems:
        for text in _hand_made_completions(p).values():
            names.append(p.name)
            ids.append(tok(text, add_special_tokens=False)["input_ids"])
    theirs = reward(prompts=[None] * len(ids), completions=[None] * len(ids), completion_ids=ids, problem=names)
    cookbook = rl.VerilogReward(problems, reward_cfg)
    ours = cookbook(prompts=["p"] * len(ids), completions=[tok.decode(i) for i in ids], problem=names)
    assert theirs == ours
    assert reward.last["outcomes"] == cookbook.last.outcomes
    assert reward.last["passed"] == cookbook.last.passed and reward.last["formatted"] == cookbook.last.formatted
    # The completions reach every verdict a sample-task answer can, and both format outcomes.
    kinds = {"pass", "mismatch", "compile_error", "no_samples", "runtime_error", "no_module"}
    assert set(cookbook.last.outcomes) == kinds, cookbook.last.outcomes
    assert any(cookbook.last.formatted) and not all(cookbook.last.formatted)
    assert len(set(ours)) >= 3


@pytest.fixture(scope="module")
def rl_parity(problems, simulator, tiny_base, tmp_path_factory):
    from transformers import AutoTokenizer

    from cookbook.gpu import _parity_parts

    cfg = rl.rl_preset("tiny")
    reward_cfg = rl.RewardConfig(format=cfg.format_weight)
    tok = AutoTokenizer.from_pretrained(tiny_base)
    completions = []
    for p in problems:  # a group of 4: two right answers, a wrong one, one cut off by the budget
        rw = evaluate.rewrites(p)
        completions.append(
            [
                p.answer + "<turn|>",
                f"```verilog\n{p.answer}\n```<turn|>",
                rw["wrong operator"] + "<turn|>",
                p.answer[: len(p.answer) // 2],
            ]  # fmt: skip
        )
    return _rl_parity.run_rl_parity(
        rl_config=cfg,
        train_config=_parity_parts.parity_train_config(),
        problems=problems,
        completions=completions,
        prompt_ids=[evaluate.prompt_token_ids(tok, p) for p in problems],
        tunix_reward=rl.VerilogReward(problems, reward_cfg),
        reward=reward_cfg,
        work_dir=tmp_path_factory.mktemp("gpu-rl-parity"),
    )


@pytest.mark.slow
def test_trl_sees_the_same_batch_rewards_and_lora_as_tunix(rl_parity):
    r = rl_parity
    assert r.prompts_equal  # TRL's chat-template tokens are the cookbook's (what Tunix's rollout is given)
    assert r.max_lora_copy_diff == 0.0 and r.kv_lora_a_tied == 5  # the exported adapter, loaded by --adapter
    # The script's reward, called by TRL on its own decoding path, gives Tunix's rewards and verdicts.
    assert r.outcomes_trl == r.outcomes_tunix
    assert r.rewards_trl == r.rewards_tunix
    assert r.rewards_tunix == (1.1, 1.1, 0.1, 0.0) * 2
    # TRL's advantages differ from Tunix's only by the documented constant: std + 1e-4 against std + 1e-6.
    sd = np.repeat(np.asarray(r.rewards_tunix).reshape(-1, 4).std(axis=1, ddof=1), 4)
    rescaled = np.asarray(r.advantages_trl) * (sd + 1e-4) / (sd + 1e-6)
    assert np.max(np.abs(rescaled - r.advantages_tunix)) <= 16 * np.finfo(np.float32).eps
    assert np.max(np.abs(np.subtract(r.advantages_trl, r.advantages_tunix))) > 1e-5  # the difference is real


@pytest.mark.slow
def test_trl_grpo_loss_and_gradients_equal_tunix_policy_loss_on_one_batch(rl_parity):
    """TRL's loss (the recipe's loss_type "dapo", over its two micro-batches) against Tunix's DAPO policy loss
    on the same tokens, old log-probs and advantages. Bounds: 4x TRL's own float32 error on this batch
    (the same functions on the PEFT model in float64), measured here. Measured (2-core CPU, torch on 1 thread,
    262 completion tokens in 2 micro-batches): losses -0.16482556 (Tunix) and -0.16482532 (TRL), |diff| 2.4e-7
    against a per-token floor of 5.6e-6 (bound 2.2e-5: 0.01 of it); gradients 6.5e-5 apart (relative) against
    a floor of 5.3e-5 (bound 2.1e-4); 21% of the tokens clipped. The controls sit 407x (TRL's default
    epsilon_high), 8,900x (per-sequence means) and 33,000x (the base without LoRA) bounds away."""
    r = rl_parity
    print(r.as_dict())
    assert 0 < r.loss_float32_floor < 1e-3 and 0 < r.grad_float32_floor < 1e-2
    bound = PARITY_FACTOR * r.loss_float32_floor
    assert r.loss_diff <= bound
    assert r.grad_rel_err <= PARITY_FACTOR * r.grad_float32_floor
    assert 0.05 < r.clipped_fraction < 0.5  # the clip acts on some tokens, not on all
    assert r.completion_tokens > 200 and r.micro_batches == 2
    for control in (r.control_loss_sequence_mean, r.control_loss_default_clip, r.control_loss_without_lora):
        assert abs(control - r.loss_tunix) >= CONTROL_SEPARATION * bound, (control, r.loss_tunix, bound)


@pytest.mark.slow
def test_one_grpo_step_runs_through_the_script_on_cpu(problems, simulator, tiny_base, tmp_path):
    """The written script's GRPOTrainer samples with transformers' generate (stopping on the recipe's stop
    tokens), scores with the simulator and steps: one optimizer step of the tiny preset on CPU."""
    from cookbook import core

    recipe = gpu.derive_gpu_rl_recipe(rl.rl_preset("tiny").replace(max_steps=1), train.train_preset("tiny"),
                                      problems=problems, cluster=gpu.GpuCluster(num_gpus=1, bf16=False),
                                      base_model=str(tiny_base))  # fmt: skip
    gpu.write_gpu_rl_recipe(tmp_path / "recipe", recipe, problems=problems)
    script = _rl_parity.import_grpo_script(tmp_path / "recipe")
    with core.torch_threads():
        trainer = script.build_trainer(model_path=str(tiny_base), output_dir=tmp_path / "run",
                                       recipe_dir=tmp_path / "recipe", grpo_overrides=_rl_parity.RL_CPU_OVERRIDES)  # fmt: skip
        assert trainer.eos_token_ids == models.stop_token_ids()
        trainer.train()
    assert trainer.state.global_step == 1
    log = trainer.state.log_history[0]
    assert {"rewards/verilog_reward/mean", "pass_rate", "format_rate", "clip_ratio/region_mean"} <= set(log)
    assert 0 < log["completions/max_length"] <= recipe.grpo["max_completion_length"]
    assert len(trainer.reward_funcs[0].last["outcomes"]) == 2 * 4
