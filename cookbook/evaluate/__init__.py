"""Stage 08 (after serving): functional evaluation as the paper scored it, pass@k with a Verilog simulator.

Problems in verilog-eval's layout (``_problems``; the sample task's held-out rows are written
in it too), completions from a vLLM endpoint, Tunix's sampler or transformers ``generate``
(``_generate``), each compiled and simulated with Icarus Verilog against the problem's
testbench (``_simulate``), and scored as unbiased pass@k, with the quality table in the
paper's form (``_score``). ``cookbook eval`` is the command line (``_cli``). Notebook 06
reports functional pass@1 beside exact match; notebook 08 pass@1 / pass@5 of the served model.
"""

from cookbook.evaluate._cli import register_cli as register_eval_cli  # noqa: F401
from cookbook.evaluate._generate import (  # noqa: F401
    PAPER_SAMPLING,
    SamplingConfig,
    endpoint_samples,
    load_transformers_model,
    problem_prompt_text,
    prompt_token_ids,
    transformers_samples,
    tunix_samples,
)
from cookbook.evaluate._held_out import greedy_sampling, held_out_greedy  # noqa: F401
from cookbook.evaluate._problems import (  # noqa: F401
    REF_MODULE,
    Problem,
    ProblemError,
    load_problems,
    rewrites,
    sample_task_problems,
    two_input_testbench,
    write_problems,
)
from cookbook.evaluate._score import (  # noqa: F401
    CompletionsError,
    committed_quality_row,
    pass_at_k,
    quality_row,
    quality_table,
    read_completions,
    score,
    score_generation,
    score_greedy,
    write_completions,
)
from cookbook.evaluate._sections import (  # noqa: F401
    metric_examples,
    score_base_model,
    score_fine_tuned,
    score_thinking_variant,
)
from cookbook.evaluate._served import served_adapters  # noqa: F401
from cookbook.evaluate._simulate import (  # noqa: F401
    INSTALL_HINT,
    SimConfig,
    SimulatorMissing,
    check_simulator,
    extract_module,
    network_isolated,
    simulate,
    simulate_many,
)
