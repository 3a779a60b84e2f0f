"""Stage 08: vLLM serving on 127.0.0.1, the TPU command, serving checks and the load generator."""

from cookbook.serve._bench import (  # noqa: F401
    PAPER_BURST,
    RequestResult,
    Scenario,
    compare_with_vllm_bench,
    random_prompts,
    run_point,
    run_scenario,
    scenario_prompts,
    summarize,
    sweep,
    vllm_bench_point,
)
from cookbook.serve._bench_hf import hf_generate_point, load_hf_model  # noqa: F401
from cookbook.serve._bench_report import (  # noqa: F401
    plot_load_test,
    speedup,
    table,
    write_json,
)
from cookbook.serve._check import (  # noqa: F401
    agreement,
    compare_greedy,
    hf_greedy,
    merged_greedy_parity,
    prove_fine_tuned,
    served_completions,
    served_exact_match,
)
from cookbook.serve._cli import register_bench_cli  # noqa: F401
from cookbook.serve._cli import register_cli as register_serve_cli  # noqa: E402, F401, I001
from cookbook.serve._config import ServeConfig, ServeError  # noqa: F401
from cookbook.serve._load_test import cross_check_point, load_test, measure_scenario  # noqa: F401
from cookbook.serve._lora import adapter_config, load_lora_adapter  # noqa: F401
from cookbook.serve._process import pid_alive  # noqa: F401
from cookbook.serve._render import check_rendering, render_with_vllm, vllm_model_dir  # noqa: E402, F401, I001
from cookbook.serve._served import clear_errors, served_checkpoints, start_servers  # noqa: F401
from cookbook.serve._server import (  # noqa: F401
    VLLMServer,
    check_model_dir,
    start_server,
    vllm_args,
)
from cookbook.serve._tpu import (  # noqa: F401
    TpuServeConfig,
    parse_tpu_args,
    tensor_parallel_size,
    tpu_command,
    tpu_plan,
    write_tpu_script,
)
from cookbook.serve._zero_adapter import zero_adapter  # noqa: F401
