"""The RL run's hyperparameters: a frozen config, a paper-sized preset and a CPU-sized one.

``RL_PRESETS["paper"]`` is what CodeV-R1 reports for its RL stage (arXiv 2505.24183: DAPO, no
KL term, clipping 0.2 / 0.28, 16 samples per prompt, a binary functional reward); what it does
not state is DAPO's own recipe (arXiv 2503.14476: learning rate 1e-6, 512 prompts per step,
temperature 1.0, responses up to 20,480 tokens with the last 4,096 penalised when overlong),
which Tunix's ``DAPOConfig`` defaults follow too, but for the overlong penalty, which Tunix counts in
characters (left off). ``RL_PRESETS["tiny"]`` is the same algorithm
sized for the CPU twins: 4 samples per prompt, 2 prompts per step, a LoRA learning rate, and
responses capped by the problems' answer budget (``cookbook.data.answer_budget``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

ALGORITHMS = ("dapo", "grpo")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RLConfig:
    """One RL run on a trained LoRA: the algorithm, its sampling, its optimizer and its reward."""

    algorithm: str = "dapo"  # "dapo": no KL, clip-higher; "grpo": with beta, the reference's KL
    group_size: int = 4  # completions per prompt (GRPO's G)
    prompts_per_step: int = 2  # prompts per optimizer step (x group_size completions)
    max_steps: int = 8
    learning_rate: float = 1e-4
    warmup_steps: int = 0
    weight_decay: float = 0.0
    max_grad_norm: float | None = 1.0
    epsilon: float = 0.2  # PPO clip, low side
    epsilon_high: float = 0.28  # DAPO's clip-higher
    beta: float = 0.0  # KL to the reference (GRPO only; DAPO has none)
    temperature: float = 0.9
    top_p: float = 0.95
    max_response_tokens: int | None = None  # None: the problems' answer budget (+ thought budget)
    overlong_buffer: None = None  # DAPO's overlong penalty: not supported (Tunix 0.1.7 counts characters)
    format_weight: float = 0.1  # the reward's format term (the functional term is 1)
    checkpoint_every_steps: int = 2
    max_checkpoints: int = 3
    seed: int = 0

    def __post_init__(self):
        problems = []
        if self.algorithm not in ALGORITHMS:
            problems.append(f"algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")
        if self.group_size < 2:
            problems.append(f"group_size must be >= 2 (advantages are relative to the group), got {self.group_size}")
        for name in ("prompts_per_step", "max_steps", "checkpoint_every_steps", "max_checkpoints"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 < self.epsilon <= self.epsilon_high:
            problems.append(f"need 0 < epsilon <= epsilon_high, got {self.epsilon} and {self.epsilon_high}")
        if self.algorithm == "dapo" and self.beta:
            problems.append("DAPO has no KL term: set beta=0 or use algorithm='grpo'")
        if self.overlong_buffer is not None:
            problems.append(
                "overlong_buffer is not supported: Tunix 0.1.7's DAPO penalty counts characters, not tokens "
                "(docs/traps.md, trap 81); cap responses with max_response_tokens"
            )
        if self.temperature <= 0:
            problems.append(f"temperature must be > 0 (RL needs a spread of samples), got {self.temperature}")
        if problems:
            raise ValueError("RLConfig: " + "; ".join(problems))

    def replace(self, **changes: Any) -> RLConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RLConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown RLConfig fields {unknown}; known: {sorted(names)}")
        return cls(**d)


RL_PRESETS = {
    "tiny": RLConfig(),
    "paper": RLConfig(
        group_size=16,
        prompts_per_step=512,
        max_steps=200,
        learning_rate=1e-6,
        warmup_steps=10,
        temperature=1.0,
        top_p=1.0,
        max_response_tokens=20480,
        checkpoint_every_steps=10,
    ),
}


def rl_preset(name: str) -> RLConfig:
    if name not in RL_PRESETS:
        raise ValueError(f"unknown RL preset {name!r}; choose one of {sorted(RL_PRESETS)}")
    return RL_PRESETS[name]
