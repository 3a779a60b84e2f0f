"""Every reach into a dependency's private API, one module per dependency, in one place.

Each function here touches a name its library does not promise to keep, and names the version
it was checked on (:data:`CHECKED_VERSIONS`). When a pin changes (requirements.txt), rerun
``tests/core/test_compat.py``: :func:`check` asks each module whether every reach still finds
what it expects, so a rename upstream fails there, by name, instead of deep inside a training
run. Nothing outside this package imports a library's private name.

Process-wide patches (:data:`PATCHES`) are installed by one call, :func:`install`, which
``cookbook.core.setup_runtime_env`` makes at every entry point (the ``cookbook`` command, each
notebook's setup cell, the test session, the benchmarks). It imports nothing: each patch is
applied the moment its library loads (``_hooks.after_import``), so a process that never loads
Tunix or Qwix never pays for them. Nothing else patches anything as a side effect; code that
needs a patch (``cookbook.lora.apply_lora``) checks :func:`installed` and says what to call.
Each patch names the test that fails when upstream no longer needs it.

The rest are scoped: a context manager that restores what it swapped (:func:`fast_abstract_tracing`,
:func:`tunix_activation_sharding`, :func:`nnx_remat_with_policy`, :func:`qwix_lora_grads_as_is`),
or a change to one object the caller owns (:func:`tunix_guard_checkpoint_saves` on a trainer,
:func:`tunix_moe_routes_on_residual` on a model, :func:`qwix_tie_dequantization` on a provider).

| module | dependency | reaches |
| --- | --- | --- |
| ``_jax`` | jax 0.10.2 | tracer origin message; monitoring listeners |
| ``_flax`` | flax 0.12.8 | ``nnx.remat`` as Tunix calls it |
| ``_tunix`` | google-tunix 0.1.7 | trainer loss, progress metrics, buffered loss, checkpoint save; Gemma 4 sharding, safetensors mapping, MoE router, quantized Einsum |
| ``_qwix`` | qwix 0.1.8 | QLoRA weights when tracing; dequantization tie; CPU LoRA gradients |
| ``_tensorboardx`` | tensorboardX 2.6.5 | its torch import |
| ``_transformers`` | transformers 5.12.1 | ``_no_split_modules`` |
| ``_jupyter`` | jupyter_client 8.10.0 | the interrupt before a kernel's shutdown |
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable

from cookbook.core.compat._flax import nnx_remat_with_policy
from cookbook.core.compat._hooks import after_import
from cookbook.core.compat._jax import drop_scalar_listeners_except, fast_abstract_tracing, scalar_listeners
from cookbook.core.compat._jupyter import without_shutdown_interrupt
from cookbook.core.compat._qwix import (
    qwix_finds_quantized_weights_when_tracing,
    qwix_lora_grads_as_is,
    qwix_lora_grads_for_cpu,
    qwix_tie_dequantization,
)
from cookbook.core.compat._tensorboardx import tensorboardx_without_torch
from cookbook.core.compat._transformers import no_split_modules
from cookbook.core.compat._tunix import (
    TQDM_METRICS_ATTRIBUTE,
    last_buffered_train_loss,
    tunix_activation_sharding,
    tunix_einsum_accepts_quantized,
    tunix_gemma4_key_mapping,
    tunix_gemma4_preprocess,
    tunix_guard_checkpoint_saves,
    tunix_loss_fn,
    tunix_moe_routes_on_residual,
    tunix_rollout_keeps_stop_token,
    tunix_trainer_with_progress,
)

__all__ = [
    # installing the process-wide patches
    "PATCHES",
    "Patch",
    "install",
    "installed",
    "require_installed",
    # checking the reaches against the installed versions
    "CHECKED_VERSIONS",
    "check",
    # jax
    "fast_abstract_tracing",
    "scalar_listeners",
    "drop_scalar_listeners_except",
    # flax
    "nnx_remat_with_policy",
    # tunix
    "TQDM_METRICS_ATTRIBUTE",
    "tunix_loss_fn",
    "tunix_activation_sharding",
    "last_buffered_train_loss",
    "tunix_trainer_with_progress",
    "tunix_guard_checkpoint_saves",
    "tunix_rollout_keeps_stop_token",
    "tunix_gemma4_key_mapping",
    "tunix_gemma4_preprocess",
    "tunix_moe_routes_on_residual",
    "tunix_einsum_accepts_quantized",
    # qwix
    "qwix_finds_quantized_weights_when_tracing",
    "qwix_tie_dequantization",
    "qwix_lora_grads_for_cpu",
    "qwix_lora_grads_as_is",
    # tensorboardX, transformers, jupyter_client
    "tensorboardx_without_torch",
    "no_split_modules",
    "without_shutdown_interrupt",
]

CHECKED_VERSIONS = {"jax": "0.10.2", "flax": "0.12.8", "google-tunix": "0.1.7", "qwix": "0.1.8"}


@dataclasses.dataclass(frozen=True)
class Patch:
    """A process-wide patch: applied once ``module`` is imported; ``test`` (in
    ``tests/core/test_compat.py``) fails when upstream no longer needs it."""

    module: str
    apply: Callable[[], bool]
    why: str
    test: str


PATCHES = (
    Patch(
        "tunix.models.gemma4.model",
        tunix_einsum_accepts_quantized,
        "Tunix 0.1.7's Einsum casts its weight with jnp.astype, which a Qwix-quantized weight refuses",
        "test_tunix_einsum_still_rejects_a_quantized_weight_and_the_patch_runs_it",
    ),
    Patch(
        "qwix._src.utils.flax_util",
        qwix_finds_quantized_weights_when_tracing,
        "Qwix 0.1.8 loses an nnx.Linear's quantized kernel while tracing: QLoRA's MLP adapters vanish",
        "test_qwix_still_loses_mlp_adapters_when_tracing_and_the_wrapper_keeps_them",
    ),
    Patch(
        "qwix._src.providers.lora",
        qwix_lora_grads_for_cpu,
        "XLA CPU (jaxlib 0.10.2) transposes the activations for Qwix's MLP LoRA gradients: 44% of the tiny step",
        "test_lora_grads_for_cpu_equal_qwixs_and_drop_xla_cpus_transposed_copies",
    ),
)

_INSTALLED = [False]


def install() -> None:
    """Install every process-wide patch (:data:`PATCHES`) as its library loads; idempotent.

    Also imports tensorboardX with torch hidden (:func:`tensorboardx_without_torch`), which must
    happen before Tunix is imported. ``cookbook.core.setup_runtime_env`` calls this.
    """
    if _INSTALLED[0]:
        return
    tensorboardx_without_torch()
    for patch in PATCHES:
        after_import(patch.module, patch.apply)
    _INSTALLED[0] = True


def installed() -> bool:
    """Whether :func:`install` has run in this process."""
    return _INSTALLED[0]


def require_installed(what: str) -> None:
    """Raise, naming the fix, unless :func:`install` has run (``what`` needs its patches)."""
    if not _INSTALLED[0]:
        raise RuntimeError(
            f"{what} needs the cookbook's library patches (cookbook.core.compat.PATCHES): call "
            "cookbook.core.setup_runtime_env() once at the start of the program (every cookbook "
            "entry point does), or cookbook.core.compat.install()"
        )


def check() -> dict[str, bool]:
    """Whether each private name this package uses is where it expects (for the compat test).

    transformers' reach (the GPU recipe's FSDP wrap unit) is checked where the GPU recipe can run:
    transformers with torch (the TPU-host environment has transformers' tokenizers but no torch, and
    its modeling modules do not import without it); jupyter_client's where it is installed.
    """
    from cookbook.core.compat import _flax, _jax, _jupyter, _qwix, _transformers, _tunix

    found = {**_jax.checks(), **_flax.checks(), **_tunix.checks(), **_qwix.checks()}
    if all(importlib.util.find_spec(m) is not None for m in ("transformers", "torch")):
        found.update(_transformers.checks())
    if importlib.util.find_spec("jupyter_client") is not None:  # the notebooks' environment, not the TPU host's
        found.update(_jupyter.checks())
    return found
