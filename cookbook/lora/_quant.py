"""QLoRA: a quantized, frozen Gemma 4 base under LoRA adapters that stay bf16/f32 (Qwix).

Qwix does the quantization (``qwix.LoraProvider(weight_qtype=..., tile_size=...)``; its
``LoraProvider`` is a PTQ provider, so the frozen weight is stored quantized and
dequantized inside each einsum/dot). What is written here is only the choice of rules and
the checks Qwix does not make before it is too late:

* **Which weights are quantized.** Every decoder projection (PEFT's ``all-linear``), as
  bitsandbytes QLoRA quantizes every ``nn.Linear`` of the base whether or not it gets an
  adapter. Qwix matches one rule per module, so the adapted projections get a LoRA rule
  with the quantized type and the others a plain quantization rule. Embeddings and norms
  stay in the base dtype (in both QLoRA recipes).
* **The tile.** Qwix quantizes per channel on the non-contracting axes and in tiles of
  ``tile_size`` along the *last* contracting axis of each weight (for ``attn_vec_einsum``,
  ``NHD``, that is ``head_dim``, not ``heads x head_dim``). A tile that does not divide
  that axis fails deep in the first call; :func:`check_quant_tile` names every weight it
  does not divide and the tiles that would work.

The quantization names are the cookbook's (``nf4``, ``int8``, ``fp8``); :data:`QUANT_TYPES`
maps them to Qwix's.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Sequence
from typing import Any

from cookbook import core, models
from cookbook.lora._config import LoraConfig
from cookbook.lora._names import ALL_LINEAR

# cookbook name -> Qwix weight_qtype. nf4: 4-bit NormalFloat (QLoRA's type); int8: 8-bit
# integers; fp8: float8 e4m3 (the format TPU v5p/v6e and H100/H200 run natively).
QUANT_TYPES = {"nf4": "nf4", "int8": "int8", "fp8": "float8_e4m3fn"}
# Bits per stored weight element (scales come on top, one per tile per channel).
QUANT_BITS = {"nf4": 4, "int8": 8, "fp8": 8}
# Tunix's QLoRA notebook uses nf4 with tile 128; 128 divides every Gemma 4 contraction axis
# (embed 5376 = 21 x 256, head_dim 256/512, MLP hidden 21504).
DEFAULT_QUANT_TILE = 128


@dataclasses.dataclass(frozen=True)
class QuantizedWeight:
    """One weight Qwix stores quantized: module path, shape, contracting axes (the last one is tiled)."""

    path: str
    shape: tuple[int, ...]
    contracting_axes: tuple[int, ...]

    @property
    def tiled_axis(self) -> int:
        return self.contracting_axes[-1]

    @property
    def tiled_dim(self) -> int:
        return self.shape[self.tiled_axis]


def qwix_qtype(quantize: str) -> str:
    """Qwix's ``weight_qtype`` for a cookbook quantization name (ValueError names the choices)."""
    if quantize not in QUANT_TYPES:
        raise ValueError(
            f"unknown quantization {quantize!r}: use one of {', '.join(QUANT_TYPES)} (or none for a bf16 base)"
        )
    return QUANT_TYPES[quantize]


def _contracting_axes(einsum_str: str) -> tuple[int, ...]:
    """The weight's (right operand's) contracted axes, in its own order (Qwix tiles the last)."""
    inputs, out = einsum_str.replace(" ", "").split("->")
    lhs, rhs = inputs.split(",")
    return tuple(i for i, c in enumerate(rhs) if c in lhs and c not in out)


@functools.lru_cache(maxsize=16)
def quantized_weights(preset: str | models.ModelPreset) -> tuple[QuantizedWeight, ...]:
    """Every weight a QLoRA run stores quantized (the decoder projections of ``preset``).

    Read from the Tunix model itself (abstract, no memory): the ``Einsum`` modules' einsum
    strings give the contracting axes, ``nnx.Linear`` contracts its kernel's first axis.
    """
    from flax import nnx

    from cookbook.lora._targets import qwix_module_path

    p = models.get_preset(preset)
    pattern = qwix_module_path(ALL_LINEAR, p)
    out = []
    for path, module in models.abstract_model(p).iter_modules():
        spath = "/".join(map(str, path))
        if not re.fullmatch(pattern, spath):
            continue
        if isinstance(module, nnx.Linear):
            out.append(QuantizedWeight(spath, tuple(module.kernel.value.shape), (0,)))
        else:
            out.append(QuantizedWeight(spath, tuple(module.w.value.shape), _contracting_axes(module.einsum_str)))
    return tuple(out)


def working_tiles(preset: str | models.ModelPreset, candidates=(32, 64, 128, 256, 512)) -> list[int]:
    """The tile sizes among ``candidates`` that divide every quantized weight's tiled axis."""
    g = functools.reduce(math.gcd, (w.tiled_dim for w in quantized_weights(preset)))
    return [t for t in candidates if g % t == 0]


def default_quant_tile(preset: str | models.ModelPreset) -> int:
    """The largest tile up to :data:`DEFAULT_QUANT_TILE` that divides every quantized weight of ``preset``.

    128 on every released size; smaller on the CPU presets (``tiny``: 32), whose widths 128 does not
    divide. ValueError when none of 32-128 does.
    """
    p = models.get_preset(preset)
    if p.is_moe:  # QLoRA is refused there (check_quant_tile says why); its experts have no tile to fit
        return DEFAULT_QUANT_TILE
    tiles = [t for t in working_tiles(p) if t <= DEFAULT_QUANT_TILE]
    if not tiles:
        raise ValueError(f"no quantization tile of 32-{DEFAULT_QUANT_TILE} divides every quantized weight of {p.name}")
    return max(tiles)


def check_quant_tile(preset: str | models.ModelPreset, quantize: str | None, tile: int | None) -> None:
    """Raise ValueError, before any weight is touched, if ``tile`` fails a weight of ``preset``.

    ``tile=None`` is Qwix's per-channel quantization (the whole contracting axis is one
    tile): allowed for int8/fp8, refused for nf4, whose 16 levels need small blocks
    (QLoRA uses 64).
    """
    if quantize is None:
        return
    qwix_qtype(quantize)
    p = models.get_preset(preset)
    if p.is_moe:
        # Tunix runs the experts through ragged_dot, which Qwix's PTQ provider (the QLoRA base)
        # does not intercept: only attention and the dense branch would be quantized, and
        # quantized_weights() would meet the MoE block itself (no `w`). Found compiling the
        # 26B-A4B plan on v5e-8 with nf4 (2026-12-02): an AttributeError deep in the compile.
        raise ValueError(
            f"QLoRA ({quantize}) on {p.name}: its {p.num_experts} experts per layer run through "
            "ragged_dot, which Qwix's quantization does not reach, so most of its weights would stay "
            "bf16. Train it in bf16 on a slice where it fits (`cookbook plan --preset "
            f"{p.name} --cheapest`), or QLoRA a dense size"
        )
    if tile is None:
        if quantize == "nf4":
            raise ValueError(
                f"nf4 needs a tile size (QLoRA uses 64, Tunix 128); {p.name} takes "
                f"{', '.join(map(str, working_tiles(p)))}"
            )
        return
    if not isinstance(tile, int) or tile < 1:
        raise ValueError(f"quantization tile {tile!r}: use a positive integer such as {DEFAULT_QUANT_TILE}")
    bad = [w for w in quantized_weights(p) if w.tiled_dim % tile]
    if bad:
        names = sorted(
            {re.sub(r"layers/\d+/", "layers/*/", w.path) + f" (axis {w.tiled_axis} = {w.tiled_dim})" for w in bad}
        )
        raise ValueError(
            f"quantization tile {tile} does not divide the contracting axis Qwix tiles in "
            f"{len(bad)} weights of {p.name}: {'; '.join(names)}. Use a tile that divides them "
            f"all: {', '.join(map(str, working_tiles(p))) or 'none of 32-512; use tile None'}"
        )


def quantized_bytes(
    preset: str | models.ModelPreset, quantize: str, tile: int | None, scale_bytes: int = 4
) -> dict[str, int]:
    """Bytes of the quantized decoder projections: ``{"values", "scales", "bf16"}`` (bf16 = before).

    Values packed at their bit width (as in TPU HBM; a CPU array of ``uint4`` takes a byte per
    element). Qwix keeps one scale per output channel per tile: the tiled axis contributes
    ``size / tile`` scales, the other contracting axes one. A planning figure; the compiled
    plan measures what the step really holds.
    """
    bits = QUANT_BITS[quantize]
    values = scales = bf16 = 0
    for w in quantized_weights(preset):
        n = math.prod(w.shape)
        bf16 += 2 * n
        values += n * bits // 8
        channels = math.prod(d for i, d in enumerate(w.shape) if i not in w.contracting_axes)
        scales += scale_bytes * channels * (w.tiled_dim // tile if tile else 1)
    return {"values": values, "scales": scales, "bf16": bf16}


def quantized_memory_table(
    presets: Sequence[str | models.ModelPreset], *, tile: int | None = None
) -> list[dict[str, Any]]:
    """The decoder projections' memory under each of :data:`QUANT_TYPES`, per preset (repeats
    dropped): ``{"preset", "quantize", "tile", "bf16 GiB", "quantized GiB", "ratio"}`` rows, the
    quantized size being values plus scales (:func:`quantized_bytes`).

    ``tile`` is the first preset's (the run's; None: :func:`default_quant_tile`); every other
    preset, shown for comparison, takes its default tile.
    """
    rows = []
    names = list(dict.fromkeys(models.get_preset(p).name for p in presets))
    for i, name in enumerate(names):
        t = tile if i == 0 and tile else default_quant_tile(name)
        for kind in QUANT_TYPES:
            b = quantized_bytes(name, kind, t)
            q = b["values"] + b["scales"]
            rows.append(
                {
                    "preset": name,
                    "quantize": kind,
                    "tile": t,
                    "bf16 GiB": b["bf16"] / 2**30,
                    "quantized GiB": q / 2**30,
                    "ratio": q / b["bf16"],
                }
            )
    return rows


def format_quantized_memory(rows: Sequence[dict[str, Any]]) -> str:
    """One line per :func:`quantized_memory_table` row."""
    return "\n".join(
        f"{m['preset']:>11} {m['quantize']:>4} tile {m['tile']:>3}: decoder projections {m['bf16 GiB']:8.3f} GiB "
        f"bf16 -> {m['quantized GiB']:8.3f} GiB ({m['ratio']:.1%})"
        for m in rows
    )


def lora_rules(
    lora: LoraConfig,
    module_path: str,
    preset: models.ModelPreset,
    *,
    quantize: str | None,
    tile: int | None,
    dropout: float | None = None,
) -> list:
    """Qwix rules for LoRA on ``module_path`` and, with ``quantize``, a quantized base.

    The adapted projections come first (a ``LoraRule`` carrying the quantized type); the
    remaining decoder projections get a plain quantization rule, so the whole base is
    quantized whatever the LoRA targets.
    """
    import qwix

    dropout = lora.dropout if dropout is None else dropout
    quant = {} if quantize is None else {"weight_qtype": qwix_qtype(quantize), "tile_size": tile}
    rules = [
        qwix.LoraRule(module_path=module_path, rank=lora.rank, alpha=float(lora.alpha), dropout=float(dropout), **quant)
    ]
    if quantize is not None:
        from cookbook.lora._targets import qwix_module_path

        rules.append(qwix.QuantizationRule(module_path=qwix_module_path(ALL_LINEAR, preset), **quant))
    return rules


# What the cookbook itself changes in a QLoRA step's program (:func:`lora_provider`); part of the
# planner's cache key for quantized configs only, so a compile made before a change is redone.
QLORA_STEP = "dequantization tied to its activation (optimization_barrier), 2026-12"


def lora_provider(rules: list, *, quantize: str | None):
    """Qwix's ``LoraProvider`` for ``rules``; for QLoRA, each dequantization tied to its activation.

    Qwix multiplies bf16 activations by a quantized weight by dequantizing the weight first.
    That dequantization depends on the parameters alone, so the TPU compiler is free to compute
    it early and hold the bf16 copies: a 31B QLoRA step compiled to more HBM than bf16 LoRA
    (v6e-4, per-decoder remat: int8 6.36 and nf4 7.88 GiB per chip at 12 layers against 6.83).
    ``jax.lax.optimization_barrier((x, w))`` before each quantized matmul makes the weight wait
    for its activation: at 12 layers int8 5.84 and nf4 6.46 GiB (at 6: 4.37 and 5.04, against
    4.36 and 5.43 untied), about 17.6 and 17.8 GiB at 60 layers against bf16's 21.5. The values
    computed are Qwix's own (tests/lora/test_quant.py); the tiny nf4 recipe still reaches 99%
    held-out exact match. Qwix has no option for this.
    """
    import qwix

    provider = qwix.LoraProvider(rules)
    return provider if quantize is None else core.compat.qwix_tie_dequantization(provider)
