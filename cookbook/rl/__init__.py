"""Stage 10 (after training): reinforcement learning on the simulator's verdict (GRPO / DAPO with Tunix).

The paper stops at supervised LoRA; CodeV-R1, whose data it trains on, goes on with RL on a
binary functional reward. This stage takes a finished SFT run's LoRA adapters and runs Tunix's
GRPO-family learners on the same LoRA, with the reward from the cookbook's Icarus Verilog scorer
(``_reward``: the final answer only, plus a format term). ``_config`` holds the run's
hyperparameters and presets, ``_start`` the SFT run and checkpoint it starts from, ``_run`` the
run itself, ``_compare`` held-out pass@k before and after, ``_cli`` ``cookbook rl``.
"""

from cookbook.rl._cli import register_cli as register_rl_cli
from cookbook.rl._compare import format_held_out, held_out_pass
from cookbook.rl._config import RL_PRESETS, RLConfig, rl_preset
from cookbook.rl._reward import (
    RewardConfig,
    VerilogReward,
    format_judged_rewards,
    judge_rewards,
)
from cookbook.rl._run import plot_curves, train_rl, training_problems
from cookbook.rl._start import sft_start

__all__ = [
    # the run: where it starts (an SFT run's checkpoint), its config and presets, the learner
    "sft_start",
    "RLConfig",
    "RL_PRESETS",
    "rl_preset",
    "train_rl",
    "training_problems",
    # its reward: the simulator's verdict on the final answer, plus a format term
    "RewardConfig",
    "VerilogReward",
    "judge_rewards",
    "format_judged_rewards",
    # its results: reward curves, held-out pass@k before and after
    "plot_curves",
    "held_out_pass",
    "format_held_out",
    # the command line (cookbook rl)
    "register_rl_cli",
]
