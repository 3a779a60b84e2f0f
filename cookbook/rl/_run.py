"""One RL run: Tunix's DAPO / GRPO learner on a finished SFT run's LoRA, rewarded by the simulator.

What Tunix gives (0.1.7, ``tunix.rl``): ``RLCluster`` holds the actor (the LoRA model being
trained), the reference and the rollout engine; ``DAPOLearner`` / ``GRPOLearner`` sample a group
per prompt, score it with the reward functions, compute group-relative advantages and step the
actor's optimizer; its ``PeftTrainer`` checkpoints the LoRA parameters and the optimizer state
with Orbax under ``RUN_DIR/actor/<step>`` and restores the latest on construction, and the
learner then skips the batches already trained. What this module adds, and why:

* **One copy of the weights.** The base is loaded on a mesh (a 1 x 1 one for one device:
  without a mesh Tunix reshards the actor onto one and keeps a second copy), LoRA is applied
  and the SFT run's adapters are restored into it; the base module itself is the reference,
  which Tunix then recognises as sharing the actor's backbone (no copy). DAPO has no KL term,
  but Tunix 0.1.7's learner computes the reference's log-probabilities whenever ``beta`` is
  not 0.0, and DAPO's is None, so the reference is needed even there.
* **Stop tokens.** Tunix's rollout stops on ``<eos>`` only unless told; Gemma 4 ends its turn
  with ``<turn|>``, so the rollout gets ``cookbook.models.stop_token_ids()``. And Tunix cuts each
  completion *before* its stop token, so its loss never trained the model to stop: the rollout
  keeps it (``core.compat.tunix_rollout_keeps_stop_token``).
* **A new sampling key per step.** ``RolloutConfig.seed=None`` makes every rollout use key 0;
  the batch iterator sets the key from the run's seed and the batch's index as Tunix takes
  each batch, so a resumed run samples what the uninterrupted one did.
* **The batches** are numpy arrays (Tunix repeats every leaf per sample) with each prompt's
  problem name, which reaches the reward as a keyword; an endless, seeded order over the
  problems (a resumed run replays it and Tunix skips what was trained).
* **A run directory the other stages read:** ``recipe.json`` is the SFT run's (same base,
  preset and LoRA) plus an ``rl`` section, so ``cookbook merge``, ``serve`` and ``eval`` take an
  RL run as they take an SFT run (``cookbook.train._runs.checkpoint_root``); ``metrics.jsonl`` holds
  the reward, pass rate and format rate of every step, ``curves.png`` draws them, TensorBoard
  events (Tunix's: losses, KL, clip fraction, rewards) are under ``tensorboard/``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import logging
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cookbook import core, evaluate, models
from cookbook import data as data_lib
from cookbook import mesh as mesh_lib
from cookbook import train as train_lib
from cookbook.rl._config import RLConfig
from cookbook.rl._reward import _TURN_ENDS, RewardConfig, VerilogReward
from cookbook.rl._start import SftStart

DEFAULT_PROBLEMS = 64  # training rows turned into problems when none are given


@dataclasses.dataclass(frozen=True)
class RLResult:
    """What :func:`train_rl` did."""

    run_dir: Path
    sft_run: Path
    sft_step: int
    final_step: int
    resumed_from: int
    steps: list[dict[str, float]]  # per step: reward, pass_rate, format_rate (metrics.jsonl)
    train_time_s: float

    @property
    def pass_rates(self) -> list[float]:
        return [s["pass_rate"] for s in self.steps]


def training_problems(sft_run: str | Path, n: int = DEFAULT_PROBLEMS) -> tuple[list[evaluate.Problem], list[dict]]:
    """The SFT run's first ``n`` sample-task training rows as problems (RL trains on training
    problems only; held-out rows stay held out), and the rows."""
    config = train_lib.config_of_run(sft_run)
    if config.train_data is not None:
        raise ValueError(
            f"{sft_run} trained on {config.train_data}, not on the sample task: pass --problems DIR "
            "(verilog-eval layout, `cookbook eval --help`) with the problems to run RL on"
        )
    rows = list(itertools.islice(train_lib.train_rows(config), n))
    return evaluate.sample_task_problems(rows), rows


def _rl_section(config: RLConfig, sft_run: Path, sft_step: int, problems: Sequence[evaluate.Problem]) -> dict:
    return {
        "config": config.to_dict(),
        "sft_run": str(sft_run.resolve()),
        "sft_step": sft_step,
        "problems": [p.name for p in problems],
    }


def _prepare_run_dir(out: Path, sft_run: Path, section: dict) -> bool:
    """Write ``out/recipe.json`` for a new run; for an existing RL run with the same recipe, True
    (resume). Anything else is refused, naming the difference."""
    recipe_path = out / "recipe.json"
    if recipe_path.is_file():
        existing = json.loads(recipe_path.read_text())
        if "rl" not in existing:
            raise FileExistsError(f"{out} is a `cookbook train` run, not an RL run: choose another --out")
        if existing["rl"] != section:
            diff = sorted(k for k in section if existing["rl"].get(k) != section[k])
            raise FileExistsError(
                f"{out} is an RL run with another {', '.join(diff)}: rerun with the same settings to resume it, "
                "or choose another --out"
            )
        return True
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not an RL run directory: choose another --out")
    sft_recipe = train_lib.load_recipe(sft_run)
    out.mkdir(parents=True, exist_ok=True)
    tmp = recipe_path.with_suffix(".tmp")
    tmp.write_text(json.dumps({**sft_recipe, "rl": section}, indent=2))
    tmp.replace(recipe_path)
    return False


def _optimizer(config: RLConfig):
    import optax

    lr = (
        optax.warmup_constant_schedule(0.0, config.learning_rate, config.warmup_steps)
        if config.warmup_steps
        else config.learning_rate
    )
    tx = optax.adamw(lr, b1=0.9, b2=0.99, weight_decay=config.weight_decay)
    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), tx) if config.max_grad_norm else tx


def _batches(prompts: list[str], names: list[str], config: RLConfig, rollout_config) -> Iterator[dict[str, Any]]:
    """Endless seeded epochs over the problems (batch i is the same in every run of this config);
    sets the rollout's sampling key for each batch as Tunix takes it."""
    n, k = len(prompts), config.prompts_per_step
    orders: dict[int, np.ndarray] = {}

    def item(position: int) -> int:
        epoch = position // n
        if epoch not in orders:
            orders.clear() if len(orders) > 2 else None
            orders[epoch] = np.random.default_rng([config.seed, epoch]).permutation(n)
        return int(orders[epoch][position % n])

    for index in itertools.count():
        chunk = [item(index * k + j) for j in range(k)]
        rollout_config.seed = config.seed * 1_000_003 + index
        yield {"prompts": np.array([prompts[i] for i in chunk]), "problem": np.array([names[i] for i in chunk])}


def train_rl(
    sft_run: str | Path | SftStart,
    out: str | Path | None = None,
    config: RLConfig | None = None,
    *,
    problems: Sequence[evaluate.Problem] | None = None,
    sft_step: int | None = None,
    progress: bool = True,
) -> RLResult:
    """Run RL from ``sft_run``'s LoRA checkpoint ``sft_step`` (default its latest) into ``out``
    (resumes an unfinished ``out``).

    ``sft_run``: an SFT run directory, or an :class:`~cookbook.rl.SftStart` (:func:`sft_start`:
    its run, and its start checkpoint unless ``sft_step`` says another). ``out`` defaults to
    ``<algorithm>-from-<step>`` in this run's work directory for RL (``core.work_dir("rl")``).
    """
    import jax
    import optax  # noqa: F401  (Tunix's config imports it too; fail here if missing)
    import orbax.checkpoint as ocp
    from tqdm.auto import tqdm
    from tunix.rl import rl_cluster as rl_cluster_lib
    from tunix.rl.rollout import base_rollout
    from tunix.sft import metrics_logger

    core.setup_runtime_env()
    config = config or RLConfig()
    if isinstance(sft_run, SftStart):
        sft_run, sft_step = sft_run.run_dir, sft_run.step if sft_step is None else sft_step
    sft_run = Path(sft_run)
    train_lib.check_run_base(sft_run)
    sft_config = train_lib.config_of_run(sft_run).replace(lora={"dropout": 0.0})
    if jax.process_count() > 1:
        raise NotImplementedError("cookbook rl runs on one process; a multi-host RL run is not built yet")
    thinking = sft_config.sample_task == "thinking"
    rows = None
    if problems is None:
        problems, rows = training_problems(sft_run)
    problems = list(problems)
    sft_steps = train_lib.checkpoint_steps(sft_run)
    if not sft_steps:
        raise FileNotFoundError(f"{sft_run} holds no finished checkpoint: train it first")
    if sft_step is not None and sft_step not in sft_steps:
        raise ValueError(f"{sft_run} has no checkpoint {sft_step}; it has {sft_steps}")
    section = _rl_section(config, sft_run, sft_step or sft_steps[-1], problems)
    out = Path(out) if out is not None else core.work_dir("rl") / f"{config.algorithm}-from-{section['sft_step']}"
    resuming = _prepare_run_dir(out, sft_run, section)

    # The model: base on a mesh (1 x 1 too: one copy), LoRA, the SFT adapters; the base is the reference.
    mesh = mesh_lib.make_mesh(sft_config.mesh_fsdp, sft_config.mesh_tp)
    base, actor = train_lib.base_and_lora_model(sft_config, sft_config.base_dir, mesh)
    sft_step = train_lib.load_lora_weights(actor, sft_run, step=section["sft_step"])
    tokenizer = data_lib.load_tokenizer(base_dir=sft_config.base_dir)

    prompts = [evaluate.problem_prompt_text(tokenizer, p, thinking=thinking) for p in problems]
    longest = max(len(evaluate.prompt_token_ids(tokenizer, p, thinking=thinking)) for p in problems)
    max_prompt = 1 << (longest - 1).bit_length()
    max_tokens = config.max_response_tokens
    if max_tokens is None:
        if thinking and rows is None:
            raise ValueError("a thinking run on given problems needs max_response_tokens (the thought's budget)")
        max_tokens = data_lib.answer_budget(tokenizer, problems) + (
            data_lib.thought_budget(tokenizer, rows) if thinking else 0
        )
    rollout_config = base_rollout.RolloutConfig(
        max_tokens_to_generate=max_tokens,
        max_prompt_length=max_prompt,
        kv_cache_size=max_prompt + max_tokens + 1,
        temperature=config.temperature,
        top_p=config.top_p,
        top_k=None,
        eos_tokens=models.stop_token_ids(),
    )
    training_config = rl_cluster_lib.RLTrainingConfig(
        actor_optimizer=_optimizer(config),
        eval_every_n_steps=config.max_steps + 1,  # no eval set: held-out scoring is `cookbook eval`'s
        max_steps=config.max_steps,
        checkpoint_root_directory=str(out.resolve()),  # Tunix appends actor/
        checkpointing_options=ocp.CheckpointManagerOptions(
            save_interval_steps=config.checkpoint_every_steps, max_to_keep=config.max_checkpoints
        ),
        metrics_logging_options=metrics_logger.MetricsLoggerOptions(
            log_dir=str(out / "tensorboard"), flush_every_n_steps=1
        ),
    )
    roles = (rl_cluster_lib.Role.ACTOR, rl_cluster_lib.Role.REFERENCE, rl_cluster_lib.Role.ROLLOUT)
    cluster = rl_cluster_lib.RLCluster(
        actor=actor,
        reference=base,
        tokenizer=tokenizer,
        cluster_config=rl_cluster_lib.ClusterConfig(
            role_to_mesh=dict.fromkeys(roles, mesh),
            rollout_engine="vanilla",
            offload_to_cpu=False,
            training_config=training_config,
            rollout_config=rollout_config,
        ),
    )
    core.compat.tunix_rollout_keeps_stop_token(cluster.rollout)  # RL's loss then trains the model to stop
    reward = _StepRecorder(
        problems, RewardConfig(format=config.format_weight, thinking=thinking), out / "metrics.jsonl"
    )
    with _quiet_cpu_hbm_report():
        learner = _learner(config, cluster, reward)
    resumed_from = int(cluster.global_steps)  # the learner has restored the latest checkpoint's step
    if resuming and resumed_from >= config.max_steps:
        return _finish(out, sft_run, sft_step, resumed_from, 0.0)
    reward.step = resumed_from
    reward.bar = tqdm(total=config.max_steps, initial=resumed_from, desc="RL steps", disable=not progress)
    names = [p.name for p in problems]
    start = time.perf_counter()
    try:
        learner.train(_batches(prompts, names, config, rollout_config))
    finally:
        reward.bar.close()
    return _finish(out, sft_run, sft_step, resumed_from, time.perf_counter() - start)


@contextlib.contextmanager
def _quiet_cpu_hbm_report():
    """Tunix's learner reports HBM at start and, on a CPU, logs a warning that jax[tpu] may be
    missing: on the CPU twins that is expected, and a newcomer reads it as a failure."""

    class _Drop(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return not str(record.msg).startswith("Skipping non-TPU device")

    logger, drop = logging.getLogger("absl"), _Drop()
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


def _learner(config: RLConfig, cluster, reward):
    from tunix.rl.grpo import dapo_learner, grpo_learner

    if config.algorithm == "dapo":
        algo = dapo_learner.DAPOConfig(
            num_generations=config.group_size,
            epsilon=config.epsilon,
            epsilon_high=config.epsilon_high,
            overlong_buffer=None,  # Tunix's counts characters (docs/traps.md, trap 81)
        )
        return dapo_learner.DAPOLearner(rl_cluster=cluster, algo_config=algo, reward_fns=[reward])
    algo = grpo_learner.GRPOConfig(
        num_generations=config.group_size, beta=config.beta, epsilon=config.epsilon, loss_agg_mode="token-mean"
    )
    algo.epsilon_high = config.epsilon_high  # read by Tunix's GRPO loss where present
    return grpo_learner.GRPOLearner(rl_cluster=cluster, algo_config=algo, reward_fns=[reward])


class _StepRecorder(VerilogReward):
    """The reward, recording each step's verdicts (one call per step) to ``metrics.jsonl``."""

    def __init__(self, problems, config: RewardConfig, path: Path):
        super().__init__(problems, config)
        self.path, self.step, self.bar = path, 0, None  # set once the learner has restored its step

    def __call__(self, prompts, completions, problem, **kwargs):
        rewards = super().__call__(prompts, completions, problem, **kwargs)
        self.step += 1
        v = self.last
        row = {
            "step": self.step,
            "reward": float(np.mean(v.rewards)),
            "pass_rate": float(np.mean(v.passed)),
            "format_rate": float(np.mean(v.formatted)),
            "stopped_rate": float(np.mean([any(e in c for e in _TURN_ENDS) for c in completions])),
            "completions": len(completions),
        }
        _append_step(self.path, row)
        self.bar.update(1)
        self.bar.set_postfix(reward=f"{row['reward']:.2f}", passed=f"{row['pass_rate']:.2f}")
        return rewards


def _append_step(path: Path, row: dict) -> None:
    """One step's row; a step rerun after a resume replaces the row it had."""
    rows = [r for r in read_steps(path.parent) if r["step"] < row["step"]]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in [*rows, row]))
    tmp.replace(path)


def read_steps(run_dir: str | Path) -> list[dict[str, float]]:
    """The per-step rows of an RL run's ``metrics.jsonl`` (empty before its first step)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _finish(out: Path, sft_run: Path, sft_step: int, resumed_from: int, seconds: float) -> RLResult:
    steps = read_steps(out)
    final = train_lib.checkpoint_steps(out)
    result = RLResult(
        run_dir=out,
        sft_run=sft_run,
        sft_step=sft_step,
        final_step=final[-1] if final else 0,
        resumed_from=resumed_from,
        steps=steps,
        train_time_s=seconds,
    )
    summary = {**dataclasses.asdict(result), "run_dir": str(out), "sft_run": str(sft_run)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    if steps:
        plot_curves(out, path=out / "curves.png")
    return result


def plot_curves(run_dir: str | Path, ax=None, *, path: str | Path | None = None):
    """Reward, pass rate and format rate per RL step; saved to ``path`` when given."""
    import matplotlib

    if ax is None and path is not None:
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    steps = read_steps(run_dir)
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 3.2))
    x = [s["step"] for s in steps]
    for key, label in (("reward", "mean reward"), ("pass_rate", "pass rate (simulator)"), ("format_rate", "format")):
        ax.plot(x, [s[key] for s in steps], marker="o", ms=3, label=label)
    ax.set_xlabel("RL step")
    ax.set_ylim(-0.05, 1.25)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(f"RL on the simulator's verdict: {Path(run_dir).name}", fontsize=9)
    if path is not None and fig is not None:
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
    return ax
