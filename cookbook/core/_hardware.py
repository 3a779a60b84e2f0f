"""The hardware table: chips, TPU slices, rentable platforms and their prices, in one place.

Chip figures are public datasheet numbers (Cloud TPU's per-chip specifications, NVIDIA's H100
and H200 datasheets); where Cloud TPU states less HBM usable than the datasheet (v5e, v6e), the
planner fits against the usable figure. TPU7x (Ironwood) shows JAX two devices per chip, each
with half the chip's HBM and compute: meshes, plans and fits count devices, prices count chips.
Prices are data: each has the date it was quoted and its source; one this project could
not source is ``None`` ("unknown"), never a guess, and a user overrides any of them
(``--price tpu-v5p-8=14.2``) instead of editing code. The mesh stage reads the slices, the
planner the chips, the cost stage the prices; nothing else keeps a copy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

PAPER = "arXiv 2605.25645 (May 2026), Table of costs, on-demand list prices it used"
PAPER_DATE = "2026-05"
# The paper's measured training runs (Gemma 4 31B LoRA, 1,244 steps), per platform: hours,
# tokens/s and millions of training tokens (9.2M / 9.4M, as its per-million figures imply;
# they agree with tokens/s x hours to 0.3%).
PAPER_TRAINING_RUNS: dict[str, dict[str, float]] = {
    "tpu-v5p-8": {"train_hours": 3.34, "train_tokens_per_s": 763.0, "train_tokens_millions": 9.2},
    "gpu-2xh100": {"train_hours": 5.39, "train_tokens_per_s": 486.0, "train_tokens_millions": 9.4},
}


# --------------------------------------------------------------------------------------
# Hardware as data


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChipSpec:
    """One accelerator chip (public datasheet figures)."""

    name: str
    device_kind: str  # what jax.Device.device_kind reports
    bf16_flops: float  # peak dense bf16 FLOP/s
    hbm_bytes: int  # datasheet
    hbm_bytes_per_s: float
    # What a program can allocate, where Cloud TPU states it (v5e ~15.75 GiB of 16, v6e ~31.25 of
    # 32); None: the datasheet figure.
    hbm_usable_bytes: int | None = None
    devices_per_chip: int = 1  # JAX devices per chip (TPU7x: 2, one per TensorCore)

    @property
    def usable_hbm_bytes(self) -> int:
        return self.hbm_usable_bytes if self.hbm_usable_bytes is not None else self.hbm_bytes

    @property
    def device_hbm_bytes(self) -> float:
        """HBM one JAX device can allocate (what a per-device memory analysis is compared with)."""
        return self.usable_hbm_bytes / self.devices_per_chip

    @property
    def device_bf16_flops(self) -> float:
        return self.bf16_flops / self.devices_per_chip

    @property
    def device_hbm_bytes_per_s(self) -> float:
        return self.hbm_bytes_per_s / self.devices_per_chip


CHIPS: dict[str, ChipSpec] = {
    "v5p": ChipSpec(
        name="v5p",
        device_kind="TPU v5",
        bf16_flops=459e12,
        hbm_bytes=95 * 10**9,
        hbm_bytes_per_s=2765e9,
    ),
    "v6e": ChipSpec(
        name="v6e",
        device_kind="TPU v6 lite",
        bf16_flops=918e12,
        hbm_bytes=32 * 10**9,
        hbm_bytes_per_s=1640e9,
        hbm_usable_bytes=int(31.25 * 2**30),
    ),
    "v5e": ChipSpec(
        name="v5e",
        device_kind="TPU v5 lite",
        bf16_flops=197e12,
        hbm_bytes=16 * 10**9,
        hbm_bytes_per_s=819e9,
        hbm_usable_bytes=int(15.75 * 2**30),
    ),
    # Ironwood: 192 GiB of HBM at 7.37 TB/s and 2,307 dense bf16 TFLOP/s per chip, two TensorCores
    # that JAX shows as two devices (libtpu's "tpu7x:2x2x1" topology holds 8 devices, 4 chips).
    "tpu7x": ChipSpec(
        name="tpu7x",
        device_kind="TPU7x",
        bf16_flops=2307e12,
        hbm_bytes=192 * 2**30,
        hbm_bytes_per_s=7380e9,
        devices_per_chip=2,
    ),
    "h100": ChipSpec(
        name="h100",
        device_kind="NVIDIA H100 80GB HBM3",
        bf16_flops=989e12,
        hbm_bytes=80 * 10**9,
        hbm_bytes_per_s=3350e9,
    ),
    # H200 SXM: the H100's Hopper compute (same dense bf16 peak) with 141 GB of HBM3e at
    # 4.8 TB/s (vendor datasheet); the GPU benchmarks' MFU denominator where one is lent.
    # Matched by its exact device kind only: the H200 NVL has lower clocks.
    "h200": ChipSpec(
        name="h200",
        device_kind="NVIDIA H200",
        bf16_flops=989e12,
        hbm_bytes=141 * 10**9,
        hbm_bytes_per_s=4800e9,
    ),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class SliceSpec:
    """A Cloud TPU slice: its chips, how they are wired, and how many hosts drive them."""

    name: str  # Cloud TPU accelerator type, e.g. "v5p-8" (v5p counts TensorCores: 2 per chip)
    chip: ChipSpec
    num_chips: int
    topology: str  # for jax.experimental.topologies.get_topology_desc, e.g. "v5p:2x2x1"
    num_hosts: int
    # libtpu assumes a host drives 2 x 2 x 1 chips; a topology that this does not divide (one
    # chip: "v5e:1x1", "v6e:1x1") is refused ("not divisible by the given (or default)
    # chips_per_host_bounds 2x2x1") unless the bounds are given (libtpu 0.0.42.1).
    chips_per_host_bounds: tuple[int, int, int] | None = None
    runtime: str = ""  # where a user gets this slice besides Cloud TPU (Colab, Kaggle), if anywhere

    @property
    def num_devices(self) -> int:
        """JAX devices of the slice: chips x devices per chip (TPU7x: 2). What a mesh spans."""
        return self.num_chips * self.chip.devices_per_chip

    @property
    def hbm_bytes(self) -> int:
        return self.chip.hbm_bytes * self.num_chips

    @property
    def bf16_flops(self) -> float:
        return self.chip.bf16_flops * self.num_chips

    @property
    def chips_per_host(self) -> int:
        return self.num_chips // self.num_hosts

    def topology_desc_kwargs(self) -> dict:
        """Keyword arguments of ``jax.experimental.topologies.get_topology_desc`` for this slice."""
        kwargs: dict = {"platform": "tpu", "topology_name": self.topology}
        if self.chips_per_host_bounds is not None:
            kwargs["chips_per_host_bounds"] = self.chips_per_host_bounds
        return kwargs

    def describe(self) -> str:
        c = self.chip
        devices = f", {self.num_devices} JAX devices" if c.devices_per_chip > 1 else ""
        return (
            f"{self.name}: {self.num_chips} x TPU {c.name} ({self.topology}{devices}, {self.num_hosts} host"
            f"{'s' if self.num_hosts > 1 else ''}); per chip {c.hbm_bytes / 1e9:.0f} GB HBM at "
            f"{c.hbm_bytes_per_s / 1e9:,.0f} GB/s, {c.bf16_flops / 1e12:.0f} TFLOP/s bf16; slice "
            f"{self.hbm_bytes / 1e9:,.0f} GB, {self.bf16_flops / 1e15:.2f} PFLOP/s"
            + (f"; {self.runtime}" if self.runtime else "")
        )


def _slice(name: str, chip: str, chips: int, topology: str, hosts: int, **extra) -> SliceSpec:
    return SliceSpec(name=name, chip=CHIPS[chip], num_chips=chips, topology=topology, num_hosts=hosts, **extra)


ONE_CHIP = (1, 1, 1)  # chips_per_host_bounds of a one-chip host


SLICES: dict[str, SliceSpec] = {
    s.name: s
    for s in (
        _slice("v5p-8", "v5p", 4, "v5p:2x2x1", 1),
        _slice("v5p-16", "v5p", 8, "v5p:2x2x2", 2),
        _slice("v5p-32", "v5p", 16, "v5p:2x2x4", 4),
        _slice("v5p-64", "v5p", 32, "v5p:2x4x4", 8),
        _slice("v5p-128", "v5p", 64, "v5p:4x4x4", 16),
        _slice("v6e-4", "v6e", 4, "v6e:2x2", 1),
        _slice("v6e-8", "v6e", 8, "v6e:2x4", 1),
        _slice("v6e-16", "v6e", 16, "v6e:4x4", 4),
        _slice("v6e-32", "v6e", 32, "v6e:4x8", 8),
        _slice("v6e-64", "v6e", 64, "v6e:8x8", 16),
        _slice("v6e-256", "v6e", 256, "v6e:16x16", 64),
        # The single chips Colab rents (2026): v5e-1 on the free tier, v6e-1 paid.
        _slice("v5e-1", "v5e", 1, "v5e:1x1", 1, chips_per_host_bounds=ONE_CHIP, runtime="Colab's free TPU runtime"),
        _slice("v6e-1", "v6e", 1, "v6e:1x1", 1, chips_per_host_bounds=ONE_CHIP, runtime="Colab's paid TPU runtime"),
        _slice("v5e-4", "v5e", 4, "v5e:2x2", 1),
        _slice("v5e-8", "v5e", 8, "v5e:2x4", 1, runtime="Kaggle's free TPU (9-hour sessions)"),
        _slice("v5e-16", "v5e", 16, "v5e:4x4", 4),
        # Ironwood: Cloud names count TensorCores (2 per chip), as on v5p.
        _slice("tpu7x-8", "tpu7x", 4, "tpu7x:2x2x1", 1),
    )
}


def get_slice(name: str | SliceSpec) -> SliceSpec:
    """A known slice by name (``"v5p-8"``), or the spec itself."""
    if isinstance(name, SliceSpec):
        return name
    if name not in SLICES:
        raise ValueError(f"unknown TPU slice {name!r}; known: {', '.join(SLICES)}")
    return SLICES[name]


def cpu_slice(num_devices: int) -> SliceSpec:
    """This machine's (fake) CPU devices, described like a slice so the same code plans for it."""
    return SliceSpec(
        name=f"cpu-{num_devices}",
        chip=ChipSpec(name="cpu", device_kind="cpu", bf16_flops=0.0, hbm_bytes=0, hbm_bytes_per_s=0.0),
        num_chips=num_devices,
        topology=f"cpu:{num_devices}",
        num_hosts=1,
    )


def chip_of(device_kind: str) -> str | None:
    """``"TPU v6 lite"`` -> ``"v6e"``; None when the kind is not a known chip."""
    kind = device_kind.lower()
    for name, chip in CHIPS.items():
        if kind == chip.device_kind.lower():
            return name
    for token, name in (("v6e", "v6e"), ("v5e", "v5e"), ("v5p", "v5p"), ("7x", "tpu7x"), ("h100", "h100")):
        if token in kind:
            return name
    return None


# Pricing kinds, in the order a table shows them.
PRICING_KINDS = ("on_demand", "spot", "cud_1y", "cud_3y")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Platform:
    """A machine rented by the hour: a TPU slice (``tpu-<slice>``) or a GPU VM."""

    name: str
    description: str
    chip: ChipSpec
    chips: int

    @property
    def peak_bf16_tflops_per_chip(self) -> float:
        return self.chip.bf16_flops / 1e12

    @property
    def hbm_gb_per_chip(self) -> float:
        return self.chip.hbm_bytes / 1e9


def platform_of_slice(slice_name: str | SliceSpec) -> str:
    """The price-table name of a TPU slice: ``"v5p-8"`` -> ``"tpu-v5p-8"``."""
    return f"tpu-{get_slice(slice_name).name}"


PLATFORMS: dict[str, Platform] = {
    **{
        platform_of_slice(s): Platform(
            name=platform_of_slice(s), chip=s.chip, chips=s.num_chips, description=f"TPU {s.name} ({s.num_chips} chips)"
        )
        for s in SLICES.values()
    },
    "gpu-2xh100": Platform(name="gpu-2xh100", description="2 x H100 80GB (a3-highgpu-2g)", chip=CHIPS["h100"], chips=2),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Price:
    """One hourly price for a whole machine, with where and when it was quoted."""

    platform: str
    pricing: str  # one of PRICING_KINDS
    usd_per_hour: float | None  # None: not sourced here ("unknown")
    as_of: str
    source: str

    @property
    def known(self) -> bool:
        return self.usd_per_hour is not None


_UNSOURCED_TPU = "unknown here (no browsing); see https://cloud.google.com/tpu/pricing"
_UNSOURCED_GPU = "unknown here (no browsing); see https://cloud.google.com/compute/gpus-pricing"

# Cloud TPU's on-demand list prices per chip-hour, us-central1 (Cloud TPU pricing page, 2026).
# TPU7x is sold through GKE only, by request. The paper's v5p-8 ($16.80/h) is 4 x v5p's; its v6e-8
# ($21.52/h, $2.69 per chip-hour) is 0.4% under the 2026 list.
CHIP_HOUR_PRICES: dict[str, float] = {"v5e": 1.20, "v6e": 2.70, "v5p": 4.20, "tpu7x": 12.00}
CHIP_HOUR_PRICES_AS_OF = "2026"
CHIP_HOUR_PRICES_SOURCE = (
    "Cloud TPU on-demand list price per chip-hour, us-central1 (https://cloud.google.com/tpu/pricing)"
)

_PAPER_PRICED: tuple[Price, ...] = (
    Price(platform="tpu-v5p-8", pricing="on_demand", usd_per_hour=16.80, as_of=PAPER_DATE, source=PAPER),
    Price(platform="tpu-v6e-8", pricing="on_demand", usd_per_hour=21.52, as_of=PAPER_DATE, source=PAPER),
    Price(platform="gpu-2xh100", pricing="on_demand", usd_per_hour=22.12, as_of=PAPER_DATE, source=PAPER),
)
# Every other slice: the list price per chip-hour x its chips (Cloud TPU bills per chip-hour). The
# paper's machines keep the paper's prices, so the paper's cost table is reproduced as it was.
_SOURCED: tuple[Price, ...] = _PAPER_PRICED + tuple(
    Price(
        platform=platform_of_slice(s),
        pricing="on_demand",
        usd_per_hour=round(CHIP_HOUR_PRICES[s.chip.name] * s.num_chips, 2),
        as_of=CHIP_HOUR_PRICES_AS_OF,
        source=f"derived: {CHIP_HOUR_PRICES_SOURCE}, ${CHIP_HOUR_PRICES[s.chip.name]:.2f} x {s.num_chips} chips",
    )
    for s in SLICES.values()
    if s.chip.name in CHIP_HOUR_PRICES and not any(p.platform == platform_of_slice(s) for p in _PAPER_PRICED)
)
# Every platform and pricing kind has a row: the sourced ones, the rest "unknown" (None).
PRICES: tuple[Price, ...] = _SOURCED + tuple(
    Price(
        platform=p,
        pricing=k,
        usd_per_hour=None,
        as_of="-",
        source=_UNSOURCED_GPU if p.startswith("gpu") else _UNSOURCED_TPU,
    )
    for p in PLATFORMS
    for k in PRICING_KINDS
    if not any(s.platform == p and s.pricing == k for s in _SOURCED)
)


class UnknownPriceError(ValueError):
    """A price this project does not know and the user did not give."""


def parse_price_overrides(items: Sequence[str]) -> dict[str, float]:
    """``["tpu-v5p-8=14.2", "gpu-2xh100:spot=9.1"]`` -> ``{"tpu-v5p-8:on_demand": 14.2, ...}``."""
    out: dict[str, float] = {}
    for item in items:
        key, sep, value = item.partition("=")
        platform, _, pricing = key.strip().partition(":")
        pricing = pricing or "on_demand"
        if not sep or platform not in PLATFORMS or pricing not in PRICING_KINDS:
            raise ValueError(
                f"bad price override {item!r}: write PLATFORM[:PRICING]=USD_PER_HOUR with PLATFORM "
                f"one of {', '.join(PLATFORMS)} and PRICING one of {', '.join(PRICING_KINDS)}"
            )
        try:
            out[f"{platform}:{pricing}"] = float(value)
        except ValueError:
            raise ValueError(f"bad price override {item!r}: {value!r} is not a number of USD per hour") from None
    return out


def price_table(overrides: Mapping[str, float] | None = None) -> list[Price]:
    """All prices, with the user's ``{"platform:pricing": usd}`` overrides applied and marked."""
    overrides = dict(overrides or {})
    for key in overrides:
        platform, _, pricing = key.partition(":")
        if platform not in PLATFORMS or (pricing or "on_demand") not in PRICING_KINDS:
            raise ValueError(f"price override for unknown {key!r}; platforms: {', '.join(PLATFORMS)}")
    overrides = {k if ":" in k else f"{k}:on_demand": v for k, v in overrides.items()}
    table = []
    for price in PRICES:
        key = f"{price.platform}:{price.pricing}"
        if key in overrides:
            price = dataclasses.replace(
                price, usd_per_hour=float(overrides[key]), as_of="user", source="given by the user"
            )
        table.append(price)
    return table


def get_price(platform: str, pricing: str = "on_demand", overrides: Mapping[str, float] | None = None) -> Price:
    """The price of ``platform`` under ``pricing``; raises when it is unknown and not given."""
    for price in price_table(overrides):
        if price.platform == platform and price.pricing == pricing:
            if not price.known:
                raise UnknownPriceError(
                    f"the {pricing} price of {platform} is unknown here ({price.source}); "
                    f"give it: --price {platform}:{pricing}=USD_PER_HOUR (CLI) or "
                    f"overrides={{'{platform}:{pricing}': USD}} (Python)"
                )
            return price
    raise ValueError(f"unknown platform {platform!r}; choose one of {', '.join(PLATFORMS)}")
