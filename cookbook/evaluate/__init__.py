"""Functional evaluation as the paper scored it, pass@k with a Verilog simulator; the stage after data.

Problems in verilog-eval's layout (``_problems``; the sample task's held-out rows are written
in it too), completions from a vLLM endpoint, Tunix's sampler or transformers ``generate``
(``_generate``), each compiled and simulated with Icarus Verilog against the problem's
testbench (``_simulate``), and scored as unbiased pass@k, with the quality table in the
paper's form (``_score``); a trained model's greedy answers on the held-out rows in one call
(``_held_out``). ``cookbook eval`` is the command line (``_cli``; ``cookbook.harness`` adds a
training run's model to its sources). It comes before the stages that score with it: notebook
06 reports functional pass@1 beside exact match (``cookbook.train``'s scores), notebook 08
pass@1 / pass@5 of the served model and its adapters (``cookbook.serve``), notebook 10 rewards
RL with the simulator (``cookbook.rl``).
"""

from cookbook.evaluate._cli import add_eval_parser
from cookbook.evaluate._generate import (
    PAPER_SAMPLING,
    endpoint_samples,
    problem_prompt_text,
    prompt_token_ids,
    transformers_samples,
    tunix_samples,
)
from cookbook.evaluate._held_out import HeldOutResult, greedy_sampling, held_out_greedy
from cookbook.evaluate._problems import (
    Problem,
    ProblemError,
    load_problems,
    rewrites,
    sample_task_problems,
    two_input_testbench,
    write_problems,
)
from cookbook.evaluate._score import (
    CompletionsError,
    committed_quality_row,
    quality_row,
    quality_table,
    score,
    score_generation,
    score_greedy,
)
from cookbook.evaluate._simulate import (
    SimConfig,
    SimulatorMissing,
    check_simulator,
    extract_module,
    network_isolated,
    simulate,
    simulate_many,
)

__all__ = [
    # a trained model's greedy answers to the held-out rows, scored (notebook 06's and 08's scores)
    "held_out_greedy",
    "HeldOutResult",
    # problem sets in verilog-eval's layout, and the sample task's held-out problems
    "Problem",
    "load_problems",
    "write_problems",
    "sample_task_problems",
    "two_input_testbench",
    "rewrites",
    # completions from a vLLM endpoint, Tunix's sampler or transformers, sampled as the paper did
    "PAPER_SAMPLING",
    "greedy_sampling",
    "endpoint_samples",
    "tunix_samples",
    "transformers_samples",
    "problem_prompt_text",
    "prompt_token_ids",
    # the functional scorer: Icarus Verilog, network-isolated where it can be
    "SimConfig",
    "check_simulator",
    "network_isolated",
    "extract_module",
    "simulate",
    "simulate_many",
    # pass@k and the quality table in the paper's form
    "score",
    "score_generation",
    "score_greedy",
    "quality_row",
    "committed_quality_row",
    "quality_table",
    # the command line (cookbook eval; cookbook.harness registers it with a training run's model)
    "add_eval_parser",
    # errors: a problem set that cannot be read, completions that do not fit it, no simulator on PATH
    "ProblemError",
    "CompletionsError",
    "SimulatorMissing",
]
