"""What the planner compiles (``PlanConfig``) and what the TPU compiler said (``PlanReport``).

``PlanConfig`` speaks the training config's language: the same field names as
``cookbook.train.TrainConfig`` (``model_preset``, ``mesh_fsdp``, ``mesh_tp``, ``remat``,
``flash_attention``, ``flash_block``, ``learning_rate``, ``weight_decay``, ``param_dtype``)
and a nested ``lora`` (``cookbook.lora.LoraConfig``), so a training run and its fit check
are the same numbers. Reports written before these names (``benchmarks/results`` holds
some) are read through :func:`PlanConfig.from_dict`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cookbook import lora as lora_lib
from cookbook.fit._layouts import DEFAULT_MFU, SAFETY_MARGIN

# The planner's first field names (still in committed results): old name -> new name.
LEGACY_NAMES = {
    "preset": "model_preset",
    "fsdp": "mesh_fsdp",
    "tp": "mesh_tp",
    "batch": "batch_size",
    "flash": "flash_attention",
    "block": "flash_block",
    "dtype": "param_dtype",
}
_LEGACY_LORA = {"lora_rank": "rank", "lora_alpha": "alpha", "lora_targets": "targets"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanConfig:
    """One training configuration to compile for a TPU slice.

    It copies the fields it shares with ``cookbook.train.TrainConfig`` rather than holding one
    (:meth:`from_train_config` makes the copy): ``fit`` is an earlier stage than ``data`` and
    ``train`` (``train`` checks its own fit through the planner), and most plans are of sizes and
    slices nothing here trains (31B on v5p-8, every cell of the runtime table), for which a
    TrainConfig's data, output and checkpoint fields mean nothing. Its flat fields are also the
    plan cache's key and the committed searches' format. ``tests/fit/test_plan.py`` fails when a
    field the two share is not carried.
    """

    model_preset: str = "tiny"
    slice_name: str = "v5p-8"
    mesh_fsdp: int | None = None  # None (both): cookbook.mesh chooses
    mesh_tp: int | None = None
    batch_size: int = 1  # per optimizer micro-step, global (all chips)
    seq_len: int = 4096
    remat: str = "decoder"  # a cookbook.models.REMAT_CHOICES name
    flash_attention: bool = False  # splash attention (TPU Pallas kernel)
    flash_block: int = 512  # splash block size (Tunix's default 1024 overflows VMEM on 31B v5p)
    lora: lora_lib.LoraConfig = lora_lib.LoraConfig(rank=64, alpha=64.0, dropout=0.0, targets="all-linear")
    learning_rate: float = 1e-4
    weight_decay: float = 0.001
    param_dtype: str | None = None  # default: bfloat16 (TPU)
    quantize: str | None = None  # QLoRA: the frozen base quantized (cookbook.lora.QUANT_TYPES)
    quant_tile: int | None = lora_lib.DEFAULT_QUANT_TILE  # its tile (checked by cookbook.lora.check_quant_tile)
    num_layers: int | None = None  # override the preset's depth (layer-slice probes)
    num_kv_shared_layers: int | None = None  # override its KV-shared layers (E2B/E4B probes)
    mfu: float = DEFAULT_MFU
    patch_activation_sharding: bool = True  # docs/traps.md trap 3: Tunix's shard() on the TPU mesh
    # The step compiled: "sft" (Tunix's PeftTrainer); an RL actor update, "dapo" or "grpo" (Tunix's
    # learners), whose batch_size sequences are groups of rollouts: seq_len - completion_len prompt
    # tokens, then completion_len sampled ones; or "decode", one token of a rollout for each of
    # batch_size sequences against a KV cache of seq_len (Tunix's sampler).
    objective: str = "sft"
    completion_len: int = 0

    def replace(self, **changes: Any) -> PlanConfig:
        if isinstance(changes.get("lora"), dict):
            changes["lora"] = dataclasses.replace(self.lora, **changes["lora"])
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if isinstance(d["lora"]["targets"], tuple):
            d["lora"]["targets"] = list(d["lora"]["targets"])
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PlanConfig:
        """From :meth:`to_dict`'s form, or from a report written with the legacy names."""
        d = {LEGACY_NAMES.get(k, k): v for k, v in d.items()}
        lora = dict(d.pop("lora", None) or {})
        for old, new in _LEGACY_LORA.items():
            if old in d:
                lora[new] = d.pop(old)
        if isinstance(lora.get("targets"), list):
            lora["targets"] = tuple(lora["targets"])
        lora.setdefault("dropout", 0.0)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown PlanConfig fields {sorted(unknown)}; known: {sorted(names)}")
        base = cls().lora
        return cls(lora=dataclasses.replace(base, **lora), **d)

    @classmethod
    def from_train_config(cls, train, slice_name: str, **changes: Any) -> PlanConfig:
        """The fit check of a ``cookbook.train.TrainConfig`` on ``slice_name``."""
        return cls(
            model_preset=train.model_preset,
            slice_name=slice_name,
            mesh_fsdp=train.mesh_fsdp,
            mesh_tp=train.mesh_tp,
            batch_size=train.data.batch_size,
            seq_len=train.data.seq_len,
            remat=train.remat,
            flash_attention=train.flash_attention,
            flash_block=train.flash_block,
            lora=dataclasses.replace(train.lora, dropout=0.0),
            learning_rate=train.learning_rate,
            weight_decay=train.weight_decay,
            param_dtype=train.param_dtype,
            quantize=train.quantize,
            quant_tile=train.quant_tile,
            **changes,
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanReport:
    """What the TPU compiler said about one configuration (per chip unless named)."""

    config: dict[str, Any]  # PlanConfig.to_dict()
    compiles: bool
    error: str | None = None
    fsdp: int = 0
    tp: int = 0
    chips: int = 0
    hbm_bytes: float = 0.0
    peak_flops: float = 0.0
    argument_bytes: int = 0
    output_bytes: int = 0
    alias_bytes: int = 0
    temp_bytes: int = 0
    code_bytes: int = 0
    total_bytes: int = 0
    flops_per_chip: float = 0.0
    tokens_per_step: int = 0
    flops_per_token: float = 0.0  # all chips together
    predicted_step_s: float = 0.0
    predicted_tokens_per_s: float = 0.0
    mfu: float = DEFAULT_MFU
    lora_params: int = 0
    activation_constraints: int = 0  # sharding constraints in the lowered step (docs/traps.md trap 3)
    compile_s: float = 0.0
    host_peak_rss_bytes: int = 0
    bytes_accessed: float = 0.0  # per chip per step, the compiler's cost_analysis()
    # cost_analysis()'s "optimal_seconds"; 0: not given (older reports). libtpu's deviceless cost
    # model sometimes answers a negative figure (every 31B layout compiled for v5e and v6e, the
    # tiny no-remat step on v6e-8, E2B on v6e-4; on v5p only the 26B-A4B probes so far): no
    # estimate then, the floor alone.
    compiler_step_s: float = 0.0
    # (la, lb): extrapolated to full depth from compiles at la and lb layers (cookbook.fit search);
    # ((own, shared), x3): a KV-shared preset's three probes (cookbook.fit._search.shared_probes)
    extrapolated_from: tuple | None = None

    @property
    def kernel_flops_per_chip(self) -> float:
        """FLOPs inside the splash-attention kernels, which ``cost_analysis()`` does not count
        (``cookbook.fit._kernels``); 0 with dense attention."""
        from cookbook.fit._kernels import splash_kernel_flops_per_chip

        return splash_kernel_flops_per_chip(self.plan_config) if self.compiles else 0.0

    @property
    def step_flops_per_chip(self) -> float:
        """All the step's FLOPs per chip: the compiler's count plus the kernels'."""
        return self.flops_per_chip + self.kernel_flops_per_chip

    @property
    def flop_floor_s(self) -> float:
        """The step at the chip's peak bf16 FLOP/s, kernels included: no step can be faster."""
        return self.step_flops_per_chip / self.peak_flops if self.peak_flops else 0.0

    @property
    def has_compiler_estimate(self) -> bool:
        """Whether the compiler gave a usable step time (positive ``optimal_seconds``)."""
        return self.compiler_step_s > 0

    @property
    def estimated_step_s(self) -> float:
        """The compiler's own step estimate plus the kernels' work at peak, never below the FLOP
        floor; the floor alone where the compiler gave none. Still a lower bound: it assumes the
        kernels run at peak and does not model how collectives overlap with compute."""
        kernel_s = self.kernel_flops_per_chip / self.peak_flops if self.peak_flops else 0.0
        return max(self.compiler_step_s + kernel_s if self.has_compiler_estimate else 0.0, self.flop_floor_s)

    @property
    def estimate_bound(self) -> str:
        """Which of the two sets :attr:`estimated_step_s` ("no compiler estimate": the floor alone)."""
        if not self.has_compiler_estimate:
            return "FLOP floor (no compiler estimate)"
        return "compiler" if self.estimated_step_s > self.flop_floor_s else "FLOP floor"

    @property
    def estimated_tokens_per_s(self) -> float:
        return self.tokens_per_step / self.estimated_step_s if self.estimated_step_s else 0.0

    def usd_per_million_tokens(
        self, pricing: str = "on_demand", overrides: dict[str, float] | None = None
    ) -> float | None:
        """Cost of a million trained tokens at :attr:`estimated_tokens_per_s` on this slice's
        price (``cookbook.core`` price table, with ``overrides``); None where the price is unknown."""
        from cookbook import core

        if not self.estimated_tokens_per_s:
            return None
        try:
            price = core.get_price(core.platform_of_slice(self.plan_config.slice_name), pricing, overrides)
        except core.UnknownPriceError:
            return None
        return price.usd_per_hour / 3600 / self.estimated_tokens_per_s * 1e6

    @property
    def plan_config(self) -> PlanConfig:
        return PlanConfig.from_dict(self.config)

    @property
    def fits(self) -> bool:
        return self.compiles and self.total_bytes <= self.hbm_bytes

    @property
    def fits_with_margin(self) -> bool:
        return self.compiles and self.total_bytes <= SAFETY_MARGIN * self.hbm_bytes

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["fits"] = self.fits
        d["fits_with_margin"] = self.fits_with_margin
        d.update(
            kernel_flops_per_chip=self.kernel_flops_per_chip,
            flop_floor_s=self.flop_floor_s,
            estimated_step_s=self.estimated_step_s,
            estimate_bound=self.estimate_bound,
            estimated_tokens_per_s=self.estimated_tokens_per_s,
            usd_per_million_tokens=self.usd_per_million_tokens(),
        )
        return d

    def summary(self) -> str:
        c = self.plan_config
        head = (
            f"{c.model_preset} on {c.slice_name} (fsdp {self.fsdp} x tp {self.tp}), "
            f"batch {c.batch_size} x {c.seq_len}, remat {c.remat}, "
            f"{'splash block ' + str(c.flash_block) if c.flash_attention else 'dense attention'}"
        )
        if c.objective == "decode":
            head += f"; one decoding step (Tunix's sampler): {c.batch_size} sequences, a KV cache of {c.seq_len}"
        elif c.objective != "sft":
            head += (
                f"; RL actor step ({c.objective.upper()}, Tunix's policy loss): {c.batch_size} rollouts of "
                f"{c.seq_len - c.completion_len} prompt + {c.completion_len} sampled tokens"
            )
        if not self.compiles:
            return f"{head}\n  does not compile for this slice: {self.error}"
        gib = 2**30
        return (
            f"{head}\n"
            f"  per chip: args {self.argument_bytes / gib:.3g} GiB, temp {self.temp_bytes / gib:.3g} GiB, "
            f"total {self.total_bytes / gib:.3g} GiB of {self.hbm_bytes / gib:.1f} GiB HBM "
            f"({100 * self.total_bytes / self.hbm_bytes:.1f}%) -> "
            f"{'fits' if self.fits else 'DOES NOT FIT'}\n"
            f"  {_si(self.flops_per_chip)}FLOP per chip per step, "
            f"{_si(self.flops_per_token)}FLOP per trained token"
            + (
                f" (+ {_si(self.kernel_flops_per_chip)}FLOP per chip in splash kernels the compiler does not count)"
                if self.kernel_flops_per_chip
                else ""
            )
            + f"; at {self.mfu:.0%} MFU: "
            f"{self.predicted_step_s:.4g} s/step, {self.predicted_tokens_per_s:,.0f} tokens/s "
            f"(a prediction: real speed is measured only on a TPU)\n"
            f"  compiler's estimate: {self.estimated_step_s:.4g} s/step, {self.estimated_tokens_per_s:,.0f} tokens/s "
            f"(set by the {self.estimate_bound}; {_si(self.bytes_accessed)}B accessed per chip)"
            + (f", ${cost:.3g} per 1M tokens on demand\n" if (cost := self.usd_per_million_tokens()) else "\n")
            + f"  LoRA parameters {self.lora_params:,}; activation sharding constraints applied: "
            f"{self.activation_constraints}; compiled in {self.compile_s:.1f} s"
        )


def report_from_dict(d: dict[str, Any]) -> PlanReport:
    """A ``PlanReport`` from its ``to_dict()`` form (derived keys dropped; legacy config names read)."""
    names = {f.name for f in dataclasses.fields(PlanReport)}
    report = {k: v for k, v in d.items() if k in names}
    report["config"] = PlanConfig.from_dict(report["config"]).to_dict()
    return PlanReport(**report)


def _si(x: float) -> str:
    for unit, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g} "
