"""Stage 10 (after training): reinforcement learning on the simulator's verdict (GRPO / DAPO with Tunix).

The paper stops at supervised LoRA; CodeV-R1, whose data it trains on, goes on with RL on a
binary functional reward. This stage takes a finished SFT run's LoRA adapters and runs Tunix's
GRPO-family learners on the same LoRA, with the reward from the cookbook's Icarus Verilog scorer
(``_reward``: the final answer only, plus a format term).
"""

from cookbook.rl._cli import register_cli as register_rl_cli  # noqa: F401
from cookbook.rl._compare import format_held_out, held_out_pass  # noqa: F401
from cookbook.rl._config import RL_PRESETS, RLConfig, rl_preset  # noqa: F401
from cookbook.rl._reward import (  # noqa: F401
    RewardConfig,
    VerilogReward,
    format_judged_rewards,
    judge_rewards,
    well_formed,
)
from cookbook.rl._run import plot_curves, train_rl, training_problems  # noqa: E402, F401
from cookbook.rl._start import sft_start  # noqa: E402, F401

__all__ = [
    # the run
    "sft_start",
    "RLConfig",
    "RL_PRESETS",
    "rl_preset",
    "train_rl",
    "training_problems",
    # its reward
    "RewardConfig",
    "VerilogReward",
    "well_formed",
    "judge_rewards",
    "format_judged_rewards",
    # its results
    "plot_curves",
    "held_out_pass",
    "format_held_out",
    # the command line (cookbook rl)
    "register_rl_cli",
]
