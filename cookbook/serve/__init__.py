"""Stage 08: vLLM serving on 127.0.0.1, the TPU command, serving checks and the load generator."""

from cookbook.serve._bench import (  # noqa: F401
    PAPER_BURST,
    RequestResult,
    Scenario,
    committed_benchmark,
    compare_with_vllm_bench,
    hf_generate_point,
    load_hf_model,
    plot_latency_distribution,
    plot_throughput_latency,
    random_prompts,
    run_point,
    run_scenario,
    scenario_prompts,
    summarize,
    sweep,
    table,
    vllm_bench_point,
    write_json,
)
from cookbook.serve._check import (  # noqa: F401
    agreement,
    answer_budget,
    compare_greedy,
    hf_greedy,
    served_completions,
    served_exact_match,
)
from cookbook.serve._cli import check_endpoint, register_bench_cli  # noqa: F401
from cookbook.serve._cli import register_cli as register_serve_cli  # noqa: E402, F401, I001
from cookbook.serve._render import render_with_vllm, vllm_model_dir  # noqa: E402, F401, I001
from cookbook.serve._server import (  # noqa: F401
    API_KEY_ENV,
    ServeConfig,
    ServeError,
    VLLMServer,
    check_model_dir,
    pid_alive,
    start_server,
    vllm_args,
    zero_adapter,
)
from cookbook.serve._tpu import (  # noqa: F401
    TpuServeConfig,
    parse_tpu_args,
    tensor_parallel_size,
    tpu_command,
    write_tpu_script,
)
