"""Serve a checkpoint with vLLM's OpenAI-compatible server: locally (CPU) or on a TPU v6e host.

Locally, :class:`VLLMServer` starts ``python -m vllm.entrypoints.openai.api_server`` (the
``vllm serve`` script fails under vllm-cpu: it looks up package metadata named ``vllm``) on
127.0.0.1 and a free port, in its own process group, waits for ``/health`` and stops the
whole group on exit, on error and at interpreter exit (no orphaned engine processes).
Two ways to serve a LoRA fine-tune: the merged checkpoint (``cookbook.merge``), or the base
plus the PEFT adapter with ``--enable-lora``.

On a TPU host, ``cookbook.serve`` writes the ``docker run ... vllm serve`` command for
the vLLM-TPU image from the same :class:`ServeConfig`.

Written by hand here (vLLM has no library API for it): the process lifecycle, the
pre-flight checks that turn vLLM's deep tracebacks into actionable errors. The text-only layout vLLM-CPU needs comes from ``cookbook.merge``.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from cookbook import core, models
from cookbook.serve._config import API_KEY_ENV, ENTRY_POINT, ServeConfig, ServeError  # noqa: F401
from cookbook.serve._lora import (
    _is_lora_dir,
    _lora_rank,
    check_lora_fits,
    load_lora_adapter,
    lora_args,
    served_lora_rank,
)
from cookbook.serve._process import _descendants, pid_alive

_LIVE: set[VLLMServer] = set()


# ------------------------------------------------------------------------------------------
# Checks before starting anything
def check_model_dir(model_dir: str | Path, *, device: str = "cpu") -> dict[str, Any]:
    """Fail early, with the fix, on a directory vLLM would reject deep in its start-up."""
    path = Path(model_dir)
    if not path.is_dir():
        raise ServeError(
            f"model dir {str(path)!r} does not exist; pass a checkpoint directory "
            "(e.g. cookbook.merge.ensure_merged(run_dir, text_only=True))"
        )
    if _is_lora_dir(path):
        raise ServeError(
            f"{path} is a PEFT adapter, not a model: serve the base checkpoint with "
            f"lora_modules=(('NAME', {str(path)!r}),)"
        )
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise ServeError(f"{path} has no config.json: not a Hugging Face checkpoint")
    if not any(path.glob("*.safetensors")):
        raise ServeError(f"{path} has no *.safetensors weights")
    cfg = json.loads(cfg_file.read_text())
    archs = cfg.get("architectures") or []
    multimodal = [a for a in archs if a in models.HF_ARCHITECTURES.values()]
    if device == "cpu" and multimodal:
        raise ServeError(
            f"{path} is the multimodal {multimodal[0]} layout, which vLLM-CPU only "
            "loads with torchvision (whose PyPI build breaks this environment). Serve a text-only "
            "export: cookbook.merge.ensure_text_only_base(dir, preset), or merge with text_only=True."
        )
    return cfg


def check_port_free(host: str, port: int) -> None:
    """Raise :class:`ServeError` if ``host:port`` cannot be bound."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as e:
            raise ServeError(
                f"port {port} on {host} is in use ({e.strerror}); stop what listens "
                "there or pass port=None to pick a free one"
            ) from e


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def vllm_args(config: ServeConfig, *, port: int, model_path: str | None = None, for_tpu: bool = False) -> list[str]:
    """The server's command-line flags (everything after the entry point)."""
    cpu = not for_tpu and not core.on_tpu_host()
    cfg_dtype = config.dtype
    if cfg_dtype is None and not for_tpu:
        raw = json.loads((Path(config.model_dir) / "config.json").read_text())
        cfg_dtype = raw.get("dtype") or raw.get("torch_dtype") or "auto"
    args = [
        "--model",
        model_path or config.model_dir,
        "--served-model-name",
        config.served_model_name,
        "--host",
        config.host,
        "--port",
        str(port),
        "--max-model-len",
        str(config.max_model_len),
        "--max-num-seqs",
        str(config.max_num_seqs),
        "--seed",
        str(config.seed),
    ]
    if cfg_dtype:
        args += ["--dtype", cfg_dtype]
    if not config.compile and cpu:
        args += ["-O0"]
    if config.uni_executor and cpu:
        args += ["--distributed-executor-backend", "uni"]
    if config.reasoning_parser:
        args += ["--reasoning-parser", config.reasoning_parser]
    if config.tool_parser:
        args += ["--tool-call-parser", config.tool_parser, "--enable-auto-tool-choice"]
    args += lora_args(config, [d for _, d in config.lora_modules])
    return args + list(config.extra_args)


# ------------------------------------------------------------------------------------------
# The local server
# Run first in the child: ask Linux for SIGTERM when the parent dies (a kernel killed with
# SIGKILL runs no atexit hook), then exec the server. PR_SET_PDEATHSIG survives exec. Done in
# a tiny exec wrapper rather than Popen(preexec_fn=...), which forks a JAX-threaded parent.
_PDEATHSIG_EXEC = (
    "import ctypes, os, signal, sys\n"
    "try:\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)\n"
    "except (OSError, AttributeError):\n"
    "    pass\n"
    "if os.getppid() == 1:\n"
    "    sys.exit('parent already gone')\n"
    "os.execv(sys.executable, [sys.executable] + sys.argv[1:])\n"
)


class VLLMServer:
    """A vLLM OpenAI-compatible server in its own process group.

    Use as a context manager (``with VLLMServer(cfg) as server: ...``) or call
    :meth:`start` / :meth:`stop`; servers still running at interpreter exit are stopped.
    """

    def __init__(self, config: ServeConfig, *, log_path: str | Path | None = None):
        self.config = config
        self.port: int | None = None
        self.process: subprocess.Popen | None = None
        self.startup_s: float | None = None
        self._t0 = 0.0
        self.log_path = Path(log_path) if log_path else Path(tempfile.mkstemp(prefix="vllm-server-", suffix=".log")[1])
        self._log = None

    # -- addresses -------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        """The OpenAI base URL (``.../v1``)."""
        return f"http://{self.config.host}:{self.port}/v1"

    @property
    def api_key(self) -> str:
        env = self.config.api_key_env
        return (os.environ.get(env) if env else None) or "EMPTY"

    def client(self, **kwargs):
        """An ``openai.OpenAI`` client for this server."""
        from openai import OpenAI

        return OpenAI(base_url=self.base_url, api_key=self.api_key, **kwargs)

    # -- lifecycle -------------------------------------------------------------------------
    def command(self) -> list[str]:
        return [sys.executable, "-c", _PDEATHSIG_EXEC, "-m", ENTRY_POINT, *vllm_args(self.config, port=self.port or 0)]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        if not core.on_tpu_host():
            env.setdefault("VLLM_TARGET_DEVICE", "cpu")  # libtpu is installed; pick CPU explicitly
        env["VLLM_CPU_KVCACHE_SPACE"] = str(self.config.kv_cache_gib)
        env["VLLM_CPU_OMP_THREADS_BIND"] = self.config.cpu_threads_bind
        if self.config.cpu_reserved is not None:
            env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = str(self.config.cpu_reserved)
        env.pop(API_KEY_ENV, None)
        if self.config.api_key_env:
            key = os.environ.get(self.config.api_key_env)
            if not key:
                raise ServeError(
                    f"api_key_env={self.config.api_key_env!r} is set but that "
                    "environment variable is empty; export it (or use api_key_env=None)"
                )
            env[API_KEY_ENV] = key
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        if self.config.runtime_lora:
            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        else:
            env.pop("VLLM_ALLOW_RUNTIME_LORA_UPDATING", None)
        return env

    def load_lora_adapter(self, name: str, adapter_dir: str | Path) -> None:
        """Add a PEFT adapter to the running server as model ``name`` (``/v1/load_lora_adapter``).

        The server must have been started with ``runtime_lora=True`` and a ``max_lora_rank`` (or
        first adapters) at least this adapter's rank; the adapter is checked against the base as
        the ones given at start are. A server that refuses it raises :class:`ServeError` with
        vLLM's reason.
        """
        cfg = self.config
        if self.process is None or self.startup_s is None:
            raise ServeError("the server is not running; start it (and wait_ready) before loading an adapter")
        if not cfg.runtime_lora:
            raise ServeError(
                "this server was started without runtime_lora=True: vLLM refuses to load adapters while it runs"
            )
        check_lora_fits(
            check_model_dir(cfg.model_dir), dataclasses.replace(cfg, lora_modules=((name, str(adapter_dir)),))
        )
        rank, served_rank = _lora_rank(str(adapter_dir)), served_lora_rank(cfg)
        if rank > served_rank:
            raise ServeError(
                f"adapter {adapter_dir} has rank {rank}; this server was started with --max-lora-rank "
                f"{served_rank}: start it with max_lora_rank={rank} or more"
            )
        load_lora_adapter(self.base_url, name, adapter_dir, api_key=self.api_key if cfg.api_key_env else None)

    def start(self, *, wait: bool = True) -> VLLMServer:
        """Start the server and wait until it answers; raise :class:`ServeError` if it cannot.

        With ``wait=False`` it returns at once; call :meth:`wait_ready` before using it (to
        overlap a second server's start-up with other work).
        """
        if self.process is not None:
            raise ServeError("this server is already started")
        cfg = self.config
        model_cfg = check_model_dir(cfg.model_dir)
        for _, d in cfg.lora_modules:
            _lora_rank(d)
        check_lora_fits(model_cfg, cfg)
        if cfg.port is None:
            self.port = free_port(cfg.host)
        else:
            check_port_free(cfg.host, cfg.port)
            self.port = cfg.port
        env = self.environment()
        self.startup_s = None
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        t0 = time.perf_counter()
        self.process = subprocess.Popen(
            self.command(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        _LIVE.add(self)
        self._t0 = t0
        return self.wait_ready() if wait else self

    def wait_ready(self) -> VLLMServer:
        """Block until ``/health`` answers (stopping the server and raising if it cannot)."""
        if self.process is None:
            raise ServeError("the server is not started; call start() first")
        if self.startup_s is not None:
            return self
        try:
            self._wait_ready(self._t0)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - self._t0
        return self

    def _wait_ready(self, t0: float) -> None:
        deadline = t0 + self.config.startup_timeout_s
        url = f"http://{self.config.host}:{self.port}/health"
        while True:
            code = self.process.poll()
            if code is not None:
                raise ServeError(f"vLLM exited with code {code} while starting ({self.log_path}):\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            if time.perf_counter() > deadline:
                raise ServeError(
                    f"vLLM did not become healthy within {self.config.startup_timeout_s:.0f} s "
                    f"({self.log_path}); raise startup_timeout_s if the host is busy:\n"
                    f"{self.log_tail()}"
                )
            time.sleep(0.5)

    def process_ids(self) -> list[int]:
        """The server's process and all its descendants (engine core, workers)."""
        if self.process is None:
            return []
        return [self.process.pid, *_descendants(self.process.pid)]

    def stop(self, timeout_s: float = 20.0) -> list[int]:
        """Stop the whole process group: SIGTERM, then SIGKILL after ``timeout_s``. Returns the ids
        of the server's processes still alive afterwards (none, unless the kernel refused)."""
        proc, self.process = self.process, None
        _LIVE.discard(self)
        pids: list[int] = []
        if proc is not None:
            pids = [proc.pid, *_descendants(proc.pid)]
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                pass
            deadline = time.monotonic() + 5
            while any(pid_alive(p) for p in pids[1:]) and time.monotonic() < deadline:
                time.sleep(0.1)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            for pid in pids:  # a child that left the group (setsid) is still ours
                if pid_alive(pid):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        if self._log is not None:
            self._log.close()
            self._log = None
        return [p for p in pids if pid_alive(p)]

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> VLLMServer:
        return self.start() if self.process is None else self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"running at {self.base_url}" if self.process else "stopped"
        return f"VLLMServer({self.config.served_model_name!r}, {state})"


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        server.stop(timeout_s=5)


def start_server(config: ServeConfig, **kwargs: Any) -> VLLMServer:
    """Start a server and return it, healthy (call ``.stop()``, or use ``with``)."""
    return VLLMServer(config, **kwargs).start()
