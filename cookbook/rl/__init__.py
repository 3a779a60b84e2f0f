"""Stage 10 (after training): reinforcement learning on the simulator's verdict (GRPO / DAPO with Tunix).

The paper stops at supervised LoRA; CodeV-R1, whose data it trains on, goes on with RL on a
binary functional reward. This stage takes a finished SFT run's LoRA adapters and runs Tunix's
GRPO-family learners on the same LoRA, with the reward from the cookbook's Icarus Verilog scorer
(``_reward``: the final answer only, plus a format term).
"""

from cookbook.rl._reward import (  # noqa: F401
    RewardConfig,
    Verdicts,
    VerilogReward,
    well_formed,
)

__all__ = ["RewardConfig", "Verdicts", "VerilogReward", "well_formed"]
