"""Stage 08: vLLM serving on 127.0.0.1, the TPU command, serving checks, what the served model and
its adapters score (``cookbook.evaluate``'s simulator), and the load generator."""

from cookbook.serve._adapters import served_adapters
from cookbook.serve._bench import PAPER_BURST, random_prompts, run_point
from cookbook.serve._bench_hf import hf_generate_point, load_hf_model
from cookbook.serve._bench_report import plot_load_test, table, write_json
from cookbook.serve._check import merged_greedy_parity, prove_fine_tuned
from cookbook.serve._cli import register_bench_cli
from cookbook.serve._cli import register_cli as register_serve_cli
from cookbook.serve._config import ServeConfig, ServeError
from cookbook.serve._load_test import cross_check_point, load_test, measure_scenario
from cookbook.serve._lora import adapter_config, load_lora_adapter
from cookbook.serve._pass_at_k import served_greedy_pass, served_pass_at_k
from cookbook.serve._render import check_rendering
from cookbook.serve._served import clear_errors, served_checkpoints, start_servers
from cookbook.serve._server import VLLMServer
from cookbook.serve._tpu import TpuServeConfig, tpu_plan
from cookbook.serve._zero_adapter import zero_adapter

__all__ = [
    # the config and the server
    "ServeConfig",
    "ServeError",
    "VLLMServer",
    # notebook 08's steps, each a typed result
    "served_checkpoints",
    "start_servers",
    "clear_errors",
    "check_rendering",
    "prove_fine_tuned",
    "merged_greedy_parity",
    "served_greedy_pass",
    "served_pass_at_k",
    "load_test",
    "measure_scenario",
    "cross_check_point",
    "served_adapters",
    "plot_load_test",
    "table",
    "PAPER_BURST",
    # LoRA adapters served by vLLM
    "adapter_config",
    "load_lora_adapter",
    "zero_adapter",
    # the load generator and the transformers baseline (benchmarks/serve_bench.py)
    "random_prompts",
    "run_point",
    "hf_generate_point",
    "load_hf_model",
    "write_json",
    # serving on a TPU slice
    "TpuServeConfig",
    "tpu_plan",
    # the command line (cookbook serve, cookbook bench)
    "register_serve_cli",
    "register_bench_cli",
]
