"""What fine-tuning and serving Gemma 4 costs on TPU against the 2 x H100 GPU baseline.

Prices are data (:data:`PRICES`): each has the date it was quoted and its source, and a
user overrides any of them (``--price tpu-v5p-8=14.2``) instead of editing code. A price
this project could not source is ``None`` ("unknown"), never a guess.

The arithmetic is deliberately small and checked against the paper's own table (arXiv
2605.25645): training cost = hours x price; serving cost = hours x price; the total for
training plus ``H`` hours of serving, and its ratio between platforms as a curve over
``H`` (the paper quoted one point of it, 1.82x at one hour). Beside the paper's measured
row, :func:`predict_training` gives this cookbook's *predicted* row for 31B on a v5p-8:
FLOPs per step from the deviceless compile of ``cookbook plan``, divided by the chips'
peak at an assumed MFU. It is labelled predicted until someone runs it on a TPU.
Nothing here comes from a library: it is a few multiplications, written out so each
assumption is visible.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from cookbook import core, fit
from cookbook.core import (
    PLATFORMS,
    get_price,
    price_table,
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Side:
    """One platform's side of the comparison: where it trains, where it serves, how fast.

    ``serve_throughput_rel`` is its serving throughput relative to the other side's: a side
    that serves 3% slower needs 1/0.97 hours for the same traffic. The paper measured the
    two within 3% and costed them as equal (1.0).
    """

    name: str
    train_platform: str
    serve_platform: str
    train_hours: float
    train_tokens_per_s: float | None = None
    train_tokens_millions: float | None = None
    serve_throughput_rel: float = 1.0
    label: str = ""


# The paper's measured runs. Training token totals (9.2M / 9.4M, as its per-million
# figures imply, to 0.1M) agree with tokens/s x hours to 0.3%; the two differ because
# the runs used different chat templates and loss masks (docs/traps.md: the paper's weakness 6, trap 41).
PAPER_TPU = Side(
    name="TPU",
    train_platform="tpu-v5p-8",
    serve_platform="tpu-v6e-8",
    **core.PAPER_TRAINING_RUNS["tpu-v5p-8"],
    label="paper, measured: v5p-8 train, v6e-8 serve",
)
PAPER_GPU = Side(
    name="GPU",
    train_platform="gpu-2xh100",
    serve_platform="gpu-2xh100",
    **core.PAPER_TRAINING_RUNS["gpu-2xh100"],
    label="paper, measured: 2 x H100 train and serve",
)


def training_cost_usd(side: Side, pricing: str = "on_demand", overrides: Mapping[str, float] | None = None) -> float:
    """Training cost = training hours x the training machine's hourly price."""
    return side.train_hours * get_price(side.train_platform, pricing, overrides).usd_per_hour


def serving_cost_usd(
    side: Side, hours: float | np.ndarray, pricing: str = "on_demand", overrides: Mapping[str, float] | None = None
) -> float | np.ndarray:
    """Serving cost of ``hours`` of traffic (at the reference throughput) on this side."""
    rate = get_price(side.serve_platform, pricing, overrides).usd_per_hour
    return np.asarray(hours, dtype=float) / side.serve_throughput_rel * rate


def total_cost_usd(
    side: Side,
    serving_hours: float | np.ndarray,
    pricing: str = "on_demand",
    overrides: Mapping[str, float] | None = None,
) -> float | np.ndarray:
    """Training once plus ``serving_hours`` of serving."""
    return training_cost_usd(side, pricing, overrides) + serving_cost_usd(side, serving_hours, pricing, overrides)


def cost_per_million_tokens(
    side: Side, pricing: str = "on_demand", overrides: Mapping[str, float] | None = None
) -> float:
    """Training dollars per million training tokens (needs ``train_tokens_millions``)."""
    if not side.train_tokens_millions:
        raise ValueError(f"{side.name}: train_tokens_millions is not set; cannot price per token")
    return training_cost_usd(side, pricing, overrides) / side.train_tokens_millions


def break_even_hours(
    cheap: Side, other: Side, pricing: str = "on_demand", overrides: Mapping[str, float] | None = None
) -> float | None:
    """Serving hours after which ``other`` becomes the cheaper platform overall, or None.

    None means never: ``cheap`` is cheaper to train and no dearer per serving hour.
    """
    train_gap = training_cost_usd(other, pricing, overrides) - training_cost_usd(cheap, pricing, overrides)
    rate_gap = float(
        serving_cost_usd(cheap, 1.0, pricing, overrides) - serving_cost_usd(other, 1.0, pricing, overrides)
    )
    if train_gap < 0:
        return 0.0
    if rate_gap <= 0:
        return None
    return train_gap / rate_gap


@dataclasses.dataclass(frozen=True, kw_only=True)
class CostCurve:
    """Total cost of both sides over serving hours, and the ratio other / cheap."""

    hours: np.ndarray
    tpu_usd: np.ndarray
    gpu_usd: np.ndarray
    pricing: str
    break_even_hours: float | None
    asymptotic_ratio: float

    @property
    def ratio(self) -> np.ndarray:
        return self.gpu_usd / self.tpu_usd

    def ratio_at(self, hours: float) -> float:
        return float(np.interp(hours, self.hours, self.ratio))

    def to_dict(self) -> dict[str, Any]:
        return {
            "hours": self.hours.tolist(),
            "tpu_usd": self.tpu_usd.tolist(),
            "gpu_usd": self.gpu_usd.tolist(),
            "ratio": self.ratio.tolist(),
            "pricing": self.pricing,
            "break_even_hours": self.break_even_hours,
            "asymptotic_ratio": self.asymptotic_ratio,
        }

    def describe(self) -> str:
        """Where the GPU path catches up (if it does), and what the ratio tends to with serving."""
        be = self.break_even_hours
        return (
            "break-even: "
            + ("never" if be is None else f"after {be:,.1f} h of serving")
            + f"; the ratio tends to {self.asymptotic_ratio:.4f}x"
        )

    def results(self) -> dict[str, Any]:
        """What notebook 09 records of the curve."""
        return {
            "cost_curve": self.to_dict(),
            "break_even_hours": self.break_even_hours,
            "asymptotic_ratio": self.asymptotic_ratio,
        }


def cost_curve(
    tpu: Side = PAPER_TPU,
    gpu: Side = PAPER_GPU,
    *,
    max_hours: float = 168.0,
    points: int = 673,
    pricing: str = "on_demand",
    overrides: Mapping[str, float] | None = None,
) -> CostCurve:
    """Training + H hours of serving for H in [0, max_hours] on both sides."""
    hours = np.linspace(0.0, max_hours, points)
    tpu_rate = float(serving_cost_usd(tpu, 1.0, pricing, overrides))
    gpu_rate = float(serving_cost_usd(gpu, 1.0, pricing, overrides))
    return CostCurve(
        hours=hours,
        tpu_usd=np.asarray(total_cost_usd(tpu, hours, pricing, overrides)),
        gpu_usd=np.asarray(total_cost_usd(gpu, hours, pricing, overrides)),
        pricing=pricing,
        break_even_hours=break_even_hours(tpu, gpu, pricing, overrides),
        asymptotic_ratio=gpu_rate / tpu_rate,
    )


def comparison_table(
    tpu: Side = PAPER_TPU,
    gpu: Side = PAPER_GPU,
    *,
    serving_hours: Sequence[float] = (1, 8, 24),
    pricing: str = "on_demand",
    overrides: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The paper's cost table recomputed from its inputs (unrounded; round for display)."""
    t_cost = training_cost_usd(tpu, pricing, overrides)
    g_cost = training_cost_usd(gpu, pricing, overrides)
    table: dict[str, Any] = {
        "pricing": pricing,
        "tpu": {
            "train_hours": tpu.train_hours,
            "train_tokens_per_s": tpu.train_tokens_per_s,
            "train_usd": t_cost,
            "usd_per_million_tokens": cost_per_million_tokens(tpu, pricing, overrides),
            "train_price_per_hour": get_price(tpu.train_platform, pricing, overrides).usd_per_hour,
            "serve_price_per_hour": get_price(tpu.serve_platform, pricing, overrides).usd_per_hour,
        },
        "gpu": {
            "train_hours": gpu.train_hours,
            "train_tokens_per_s": gpu.train_tokens_per_s,
            "train_usd": g_cost,
            "usd_per_million_tokens": cost_per_million_tokens(gpu, pricing, overrides),
            "train_price_per_hour": get_price(gpu.train_platform, pricing, overrides).usd_per_hour,
            "serve_price_per_hour": get_price(gpu.serve_platform, pricing, overrides).usd_per_hour,
        },
        "speedup": gpu.train_hours / tpu.train_hours,
        "train_cost_ratio": g_cost / t_cost,
        "total_cost_ratio": {
            float(h): float(total_cost_usd(gpu, h, pricing, overrides) / total_cost_usd(tpu, h, pricing, overrides))
            for h in serving_hours
        },
    }
    return table


# --- the cookbook's predicted row -------------------------------------------------------


def predict_training(
    plan: fit.PlanFigures | None,
    *,
    train_tokens_millions: float = PAPER_TPU.train_tokens_millions,
    mfu: float = fit.DEFAULT_MFU,
    real_token_fraction: float = 1.0,
    pricing: str = "on_demand",
    overrides: Mapping[str, float] | None = None,
    estimate: str | None = None,
) -> dict[str, Any]:
    """This cookbook's predicted training row for the plan's slice: tokens/s, hours, dollars.

    Tokens/s is :func:`cookbook.fit.predicted_speed`: with ``estimate="compiler"`` (the
    default where the plan has it) the TPU compiler's own step estimate, else (``"mfu"``)
    compiled FLOPs per step at an assumed MFU; labelled as such. Hours = tokens / tokens/s;
    dollars = hours x the slice's price. Without a plan the row falls back to the paper's
    measured 763 tokens/s and says so.
    """
    if plan is None:
        if not 0 < mfu <= 1 or not 0 < real_token_fraction <= 1:
            raise ValueError(f"mfu={mfu} and real_token_fraction={real_token_fraction} must lie in (0, 1]")
        speed = {
            "tokens_per_s": PAPER_TPU.train_tokens_per_s,
            "platform": PAPER_TPU.train_platform,
            "basis": "paper's measured tokens/s (planner output not found)",
            "paper_implied_mfu": None,
            "assumptions": ["no planner output found: tokens/s is the paper's measured 763 (not a prediction)"],
        }
    else:
        estimate = estimate or ("compiler" if plan.compiler_step_s else "mfu")
        speed = fit.predicted_speed(
            plan,
            mfu=mfu,
            real_token_fraction=real_token_fraction,
            paper_tokens_per_s=PAPER_TPU.train_tokens_per_s,
            estimate=estimate,
        )
    tps, platform, assumptions = speed["tokens_per_s"], speed["platform"], list(speed["assumptions"])
    hours = train_tokens_millions * 1e6 / tps / 3600
    price_obj = get_price(platform, pricing, overrides)
    price = price_obj.usd_per_hour
    assumptions.append(f"{train_tokens_millions:g}M training tokens (the paper's data set)")
    assumptions.append(f"{platform} {pricing} ${price:.2f}/h (as of {price_obj.as_of}: {price_obj.source})")
    label = (
        "the TPU compiler's estimate, until run on a TPU"
        if speed.get("estimate") == "compiler"
        else "predicted until run on a TPU"
    )
    return {
        "label": label,
        "estimate": speed.get("estimate"),
        "basis": speed["basis"],
        "platform": platform,
        "tokens_per_s": float(tps),
        "train_hours": float(hours),
        "train_usd": float(hours * price),
        "usd_per_million_tokens": float(hours * price / train_tokens_millions),
        "mfu_assumed": mfu,
        "paper_implied_mfu": speed["paper_implied_mfu"],
        "assumptions": assumptions,
    }


# --- display ----------------------------------------------------------------------------


def format_table(table: Mapping[str, Any], predicted: Mapping[str, Any] | None = None) -> str:
    """A Markdown table: the paper's two rows, the cookbook's predicted row, the ratios."""
    t, g = table["tpu"], table["gpu"]
    lines = [
        "| row | train hours | tokens/s | training $ | $ per M tokens |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| TPU v5p-8 (paper, measured) | {t['train_hours']:.2f} | {t['train_tokens_per_s']:.0f} | "
        f"${t['train_usd']:.2f} | ${t['usd_per_million_tokens']:.2f} |",
        f"| 2 x H100 (paper, measured) | {g['train_hours']:.2f} | {g['train_tokens_per_s']:.0f} | "
        f"${g['train_usd']:.2f} | ${g['usd_per_million_tokens']:.2f} |",
    ]
    if predicted:
        lines.append(
            f"| {PLATFORMS[predicted['platform']].description} (cookbook, **{predicted['label']}**) | {predicted['train_hours']:.2f} | "
            f"{predicted['tokens_per_s']:.0f} | ${predicted['train_usd']:.2f} | "
            f"${predicted['usd_per_million_tokens']:.2f} |"
        )
    lines.append("")
    lines.append(
        f"Training: TPU {table['speedup']:.2f}x faster, {table['train_cost_ratio']:.2f}x cheaper "
        f"({table['pricing']} prices)."
    )
    for h, r in sorted(table["total_cost_ratio"].items(), key=lambda kv: float(kv[0])):
        lines.append(f"Training + {float(h):g} h of serving: GPU / TPU cost = {r:.3f}x.")
    if predicted:
        lines.append("")
        lines.append("Predicted row assumptions: " + "; ".join(predicted["assumptions"]) + ".")
    return "\n".join(lines)


def format_prices(overrides: Mapping[str, float] | None = None) -> str:
    lines = ["| platform | pricing | USD / hour | as of | source |", "| --- | --- | ---: | --- | --- |"]
    for p in price_table(overrides):
        usd = f"${p.usd_per_hour:.2f}" if p.known else "unknown"
        lines.append(f"| {PLATFORMS[p.platform].description} | {p.pricing} | {usd} | {p.as_of} | {p.source} |")
    return "\n".join(lines)


def plot_cost_curve(curve: CostCurve | Mapping[str, Any], marks: Sequence[float] = (1, 8, 24), ax=None):
    """Two panels: total dollars over serving hours, and the GPU / TPU ratio with marks."""
    import matplotlib.pyplot as plt

    c = curve.to_dict() if isinstance(curve, CostCurve) else dict(curve)
    hours, ratio = np.asarray(c["hours"]), np.asarray(c["ratio"])
    if ax is None:
        fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    else:
        fig = ax[0].figure
    ax[0].plot(hours, c["tpu_usd"], label="TPU (v5p-8 train, v6e-8 serve)")
    ax[0].plot(hours, c["gpu_usd"], label="GPU (2 x H100 train and serve)")
    ax[0].set_xlabel("hours of serving after training")
    ax[0].set_ylabel("total cost, USD")
    ax[0].legend()
    ax[0].set_title(f"Training + serving ({c['pricing']} prices)")
    ax[1].plot(hours, ratio, color="C2")
    ax[1].axhline(1.0, color="grey", lw=0.8, ls="--")
    ax[1].axhline(
        c["asymptotic_ratio"], color="C2", lw=0.8, ls=":", label=f"serving-only limit {c['asymptotic_ratio']:.3f}x"
    )
    for h in marks:
        r = float(np.interp(h, hours, ratio))
        ax[1].plot([h], [r], "o", color="C3")
        ax[1].annotate(f"{r:.3f}x at {h:g} h", (h, r), textcoords="offset points", xytext=(6, 4))
    ax[1].set_xscale("symlog", linthresh=1.0)
    ax[1].set_xlabel("hours of serving after training")
    ax[1].set_ylabel("GPU cost / TPU cost")
    ax[1].legend()
    ax[1].set_title("How much cheaper the TPU path is")
    fig.tight_layout()
    return fig
