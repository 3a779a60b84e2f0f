"""Stage 08 (after serving): functional evaluation as the paper scored it, pass@k with a Verilog simulator.

Problems in verilog-eval's layout (``_problems``; the sample task's held-out rows are written
in it too), completions from a vLLM endpoint, Tunix's sampler or transformers ``generate``
(``_generate``), each compiled and simulated with Icarus Verilog against the problem's
testbench (``_simulate``), and scored as unbiased pass@k, with the quality table in the
paper's form (``_score``); a trained model's greedy answers on the held-out rows in one call
(``_held_out``). ``cookbook eval`` is the command line (``_cli``). Notebook 06 reports
functional pass@1 beside exact match (its sections: ``_sections``); notebook 08 pass@1 / pass@5
of the served model (``_served``).
"""

from cookbook.evaluate._cli import register_cli as register_eval_cli
from cookbook.evaluate._generate import (
    PAPER_SAMPLING,
    endpoint_samples,
    problem_prompt_text,
    prompt_token_ids,
    transformers_samples,
    tunix_samples,
)
from cookbook.evaluate._held_out import greedy_sampling
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
from cookbook.evaluate._sections import (
    metric_examples,
    score_base_model,
    score_fine_tuned,
    score_thinking_variant,
)
from cookbook.evaluate._served import served_adapters
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
    # notebook 06's evaluation steps and notebook 08's served adapters, each a typed result
    "score_base_model",
    "score_fine_tuned",
    "score_thinking_variant",
    "metric_examples",
    "served_adapters",
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
    # the command line (cookbook eval)
    "register_eval_cli",
    # errors: a problem set that cannot be read, completions that do not fit it, no simulator on PATH
    "ProblemError",
    "CompletionsError",
    "SimulatorMissing",
]
