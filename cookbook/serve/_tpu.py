"""The vLLM-TPU command for a TPU v6e host, generated from the same ``ServeConfig`` as the CPU server.

:func:`tpu_command` gives the ``docker run ... vllm serve`` argv (image, model directory
mounted read-only, tensor-parallel size from the model's heads, fp8 KV cache as in the
paper, 127.0.0.1 unless asked otherwise); :func:`write_tpu_script` wraps it in a start
script that waits for ``/health``. The API key is never on a command line (where ``ps`` shows it):
docker's ``-e VLLM_API_KEY`` takes it from the docker client's environment, which the script
fills from ``ServeConfig.api_key_env``; :func:`parse_tpu_args` runs the flags through vLLM's own
argument parser (``tests/serve/test_tpu.py`` does, on CPU).
"""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

from cookbook import core, models
from cookbook.serve._config import API_KEY_ENV, ServeConfig
from cookbook.serve._lora import lora_args
from cookbook.serve._server import vllm_args


@dataclasses.dataclass(frozen=True, kw_only=True)
class TpuServeConfig:
    """The container around the server on a TPU VM."""

    image: str = "vllm/vllm-tpu:latest"  # pin a tag (e.g. the release you validated) in production
    chips: int = 8  # v6e-8: one host, 8 chips
    kv_cache_dtype: str = "fp8"  # as in the paper; "auto" keeps bf16
    container_model_dir: str = "/models/model"  # where the host's model dir is mounted (read-only)
    container_name: str = "gemma4-vllm"
    shm_size: str = "16g"
    gpu_memory_utilization: float = 0.90  # vLLM's name for the HBM fraction, TPUs included


def tensor_parallel_size(preset: str | models.ModelPreset, chips: int) -> int:
    """The largest TP size <= ``chips`` that vLLM can shard this model's attention over.

    vLLM splits query heads evenly and, for KV heads, either splits them (tp divides the
    KV-head count) or replicates them (the KV-head count divides tp). Gemma 4 31B: 32 query
    heads, 16 sliding and 4 global KV heads: TP 8 (global KV heads replicated twice), as in
    the paper's v6e-8 runs.
    """
    p = models.get_preset(preset)
    kv_counts = {p.num_kv_heads, p.effective_global_kv_heads}
    for tp in range(chips, 0, -1):
        if chips % tp or p.num_heads % tp:
            continue
        if all(kv % tp == 0 or tp % kv == 0 for kv in kv_counts):
            return tp
    return 1


# tpu-inference's CI runs E2B and E4B on one v6e chip (TP 1); v5e is not in its support matrix.
ONE_CHIP_TESTED = {"v6e": ("gemma4_e2b", "gemma4_e4b")}


def tpu_routes(slice_name: str, preset: str | models.ModelPreset, model_dir: str) -> list[str]:
    """What to run on ``slice_name``'s host, as comment lines printed above the command.

    The container is one route; pip ``vllm-tpu`` 0.32 is the other, in its own Python 3.12
    environment: its wheels are cp312 only and pin jax 0.11.2 and qwix 0.1.2, which Tunix's
    environment (qwix >= 0.1.6, jax 0.10.2 here) cannot share. Adapters can be served without a
    merge through vLLM-TPU's torchax path (``MODEL_IMPL_TYPE=vllm``, ``--enable-lora``, adapters
    loaded at runtime through ``/v1/load_lora_adapter``).
    """
    s = core.get_slice(slice_name)
    p = models.get_preset(preset)
    tp = tensor_parallel_size(p, s.num_devices)
    tested = ONE_CHIP_TESTED.get(s.chip.name, ())
    lines = [
        f"# {s.describe()}",
        f"# {p.name}: tensor parallel size {tp} (query heads {p.num_heads}, KV heads "
        f"{p.num_kv_heads} sliding / {p.effective_global_kv_heads} global)",
    ]
    if s.num_chips == 1:
        lines.append(
            "# one chip: "
            + (
                f"tpu-inference's CI serves {' and '.join(t.removeprefix('gemma4_').upper() for t in tested)} "
                f"on one {s.chip.name} chip"
                if tested
                else f"{s.chip.name} is not in tpu-inference's support matrix: this route is untested there"
            )
        )
    lines += [
        "# route 1, the container (below): docker on the TPU VM",
        "# route 2, no docker: pip vllm-tpu==0.32.0 in its own Python 3.12 venv (cp312 wheels pinning jax 0.11.2,",
        "#   qwix 0.1.2: not Tunix's environment), then the same `vllm serve` flags:",
        f"#   python3.12 -m venv ~/vllm-tpu && ~/vllm-tpu/bin/pip install vllm-tpu==0.32.0 && "
        f"~/vllm-tpu/bin/vllm serve {model_dir} --tensor-parallel-size {tp}",
        "# adapters without a merge (vLLM-TPU's torchax path): MODEL_IMPL_TYPE=vllm vllm serve BASE --enable-lora "
        "--max-lora-rank R, then POST /v1/load_lora_adapter {lora_name, lora_path}",
    ]
    return lines


def tpu_serve_args(config: ServeConfig, tpu: TpuServeConfig, preset: str | models.ModelPreset) -> list[str]:
    """``vllm serve`` flags for the TPU host (model path as the container sees it)."""
    args = vllm_args(
        dataclasses.replace(config, lora_modules=()),
        port=config.port or 8000,
        model_path=tpu.container_model_dir,
        for_tpu=True,
    )
    args += [
        "--tensor-parallel-size",
        str(tensor_parallel_size(preset, tpu.chips)),
        "--kv-cache-dtype",
        tpu.kv_cache_dtype,
        "--gpu-memory-utilization",
        str(tpu.gpu_memory_utilization),
    ]
    # adapter dirs are mounted beside the model
    return args + lora_args(config, [f"/models/lora/{n}" for n, _ in config.lora_modules])


def tpu_command(config: ServeConfig, preset: str | models.ModelPreset, tpu: TpuServeConfig | None = None) -> list[str]:
    """The ``docker run`` command (argv) that serves ``config.model_dir`` on a v6e host.

    With ``config.api_key_env`` set, the container's ``VLLM_API_KEY`` comes from the environment
    docker runs in (``-e VLLM_API_KEY``, the name alone), so the key's value is in no argv: export
    ``VLLM_API_KEY`` before running this command (:func:`write_tpu_script` does).
    """
    tpu = tpu or TpuServeConfig()
    host_dir = str(Path(config.model_dir).resolve())
    cmd = [
        "docker",
        "run",
        "--rm",
        "--name",
        tpu.container_name,
        "--privileged",
        "--net",
        "host",
        "--shm-size",
        tpu.shm_size,
        "-v",
        f"{host_dir}:{tpu.container_model_dir}:ro",
    ]
    for name, d in config.lora_modules:
        cmd += ["-v", f"{Path(d).resolve()}:/models/lora/{name}:ro"]
    if config.api_key_env:
        cmd += ["-e", API_KEY_ENV]  # the name alone: docker copies the value from its own environment
    cmd += ["--entrypoint", "vllm", tpu.image, "serve", *tpu_serve_args(config, tpu, preset)]
    return cmd


def _shell_lines(argv: list[str]) -> str:
    """argv as a readable shell command: one flag (and its value) per line, each quoted."""
    q = shlex.quote

    lines, i = [], 0
    while i < len(argv):
        part = [q(argv[i])]
        if argv[i].startswith("-") and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            if argv[i] != "--lora-modules":
                part.append(q(argv[i + 1]))
                i += 1
        lines.append(" ".join(part))
        i += 1
    return " \\\n  ".join(lines)


def write_tpu_script(
    path: str | Path, config: ServeConfig, preset: str | models.ModelPreset, tpu: TpuServeConfig | None = None
) -> Path:
    """Write a shell script that starts the container and waits for it to answer."""
    tpu = tpu or TpuServeConfig()
    argv = tpu_command(config, preset, tpu)
    port = config.port or 8000
    quoted = _shell_lines(argv)
    p = models.get_preset(preset)
    key = ""
    if config.api_key_env:  # builtins only: the value is in no process's argv
        var = config.api_key_env
        key = (
            f': "${{{var}:?set {var} to the API key the server should require}}"\n'
            f'export {API_KEY_ENV}="${{{var}}}"  # docker -e {API_KEY_ENV} passes it on by name\n'
        )
    script = f"""#!/usr/bin/env bash
# Serve {p.name} from {config.model_dir} with vLLM-TPU on a {tpu.chips}-chip v6e host.
# Generated by cookbook.serve._tpu.write_tpu_script (`cookbook serve --tpu --script`, serve.tpu_plan);
# regenerate rather than edit.
# Cold start: pulling the image (minutes, once), loading {p.num_params() / 1e9:.1f}B parameters and
# XLA-compiling the prefill/decode shapes (the bulk: expect 5-15 min on first start; later starts
# reuse the compilation cache in the container only if you mount one).
# Check: `docker logs -f {tpu.container_name}` shows "tensor_parallel_size={tensor_parallel_size(p, tpu.chips)}" and the KV
# cache size; then `curl localhost:{port}/v1/models` lists "{config.served_model_name}".
set -euo pipefail
{key}{quoted} &
server=$!
for i in $(seq 1 1800); do
  if curl -sf http://{config.host}:{port}/health >/dev/null; then echo "ready after ${{i}} s"; wait "$server"; exit; fi
  if ! kill -0 "$server" 2>/dev/null; then
    code=0; wait "$server" || code=$?
    echo "docker run exited (code $code) before the server answered; see its output above" >&2
    exit $((code ? code : 1))
  fi
  sleep 1
done
echo "not healthy after 30 min; see docker logs {tpu.container_name}" >&2
exit 1
"""
    path = Path(path)
    path.write_text(script)
    path.chmod(0o755)
    return path


def parse_tpu_args(args: list[str]):
    """Parse ``vllm serve`` flags with vLLM's own parser (raises SystemExit on a bad flag)."""

    core.setup_runtime_env()  # on a CPU host with libtpu installed, vLLM must not see two platforms
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    ns = parser.parse_args(args)
    validate_parsed_serve_args(ns)
    return ns


@dataclasses.dataclass(frozen=True, kw_only=True)
class TpuPlan:
    """:func:`tpu_plan`'s start script and what vLLM's own parser made of its ``vllm serve`` flags."""

    argv: tuple[str, ...]
    script_path: Path
    tensor_parallel_size: int
    kv_cache_dtype: str

    def describe(self) -> str:
        return (
            f"{self.script_path.read_text()}\nvLLM parses it: tensor_parallel_size {self.tensor_parallel_size} "
            f"kv_cache_dtype {self.kv_cache_dtype}"
        )

    def results(self) -> dict[str, object]:
        return {"tpu_tensor_parallel": self.tensor_parallel_size, "tpu_kv_cache_dtype": self.kv_cache_dtype}


def tpu_plan(
    config: ServeConfig, preset: str | models.ModelPreset, tpu: TpuServeConfig, script_path: str | Path
) -> TpuPlan:
    """:func:`tpu_command` for ``config`` on ``tpu``, written as a start script to ``script_path``
    (:func:`write_tpu_script`), its flags checked with vLLM's own parser (:func:`parse_tpu_args`)."""
    argv = tpu_command(config, preset, tpu)
    script = write_tpu_script(script_path, config, preset, tpu)
    parsed = parse_tpu_args(argv[argv.index("serve") + 1 :])
    return TpuPlan(
        argv=tuple(argv),
        script_path=script,
        tensor_parallel_size=parsed.tensor_parallel_size,
        kv_cache_dtype=parsed.kv_cache_dtype,
    )
