"""Which Gemma 4 size trains with LoRA on which TPU runtime: the committed table, read.

``benchmarks/runtimes.py`` writes ``benchmarks/results/runtimes.json``: one row per (size, slice)
over the runtimes users have (Colab's one chip, Kaggle's v5e-8, the paper's slices, Ironwood),
each decided by a deviceless compile of the real train step. This module reads it: the table
for notebooks and the README, the layout of a cell for ``cookbook plan --recommended`` where the
layout search did not cover the slice, and the largest size that fits a chip.
"""

from __future__ import annotations

import json
from typing import Any

from cookbook import core

RUNTIMES_FILE = "runtimes.json"
# Released sizes, smallest first (parameters: E2B 5.1B with its per-layer embeddings, E4B 8B,
# 12B, 26B-A4B, 31B).
SIZES_BY_PARAMS = ("gemma4_e2b", "gemma4_e4b", "gemma4_12b", "gemma4_26b_a4b", "gemma4_31b")
# The runtimes of the table: Colab's free and paid chip, Kaggle's free v5e-8, the paper's serving
# and training slices, Ironwood.
RUNTIME_SLICES = ("v5e-1", "v6e-1", "v5e-8", "v6e-8", "v5p-8", "tpu7x-8")


def load_runtimes() -> dict[str, Any]:
    """The committed table (``{"rows": {"PRESET/SLICE": row}}``); FileNotFoundError if missing."""
    path = core.RESULTS_DIR / RUNTIMES_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: it is committed with the repository; regenerate it with benchmarks/runtimes.py"
        )
    return json.loads(path.read_text())


def runtime_cell(preset: str, slice_name: str) -> dict[str, Any] | None:
    """The row of one (size, slice) cell, or None where the table has none."""
    return load_runtimes()["rows"].get(f"{preset}/{slice_name}")


def largest_fitting(slice_name: str) -> dict[str, Any] | None:
    """The largest released size whose LoRA step fits ``slice_name`` (its row), or None."""
    rows = load_runtimes()["rows"]
    fitting = [rows[f"{p}/{slice_name}"] for p in SIZES_BY_PARAMS if rows.get(f"{p}/{slice_name}", {}).get("fits")]
    return fitting[-1] if fitting else None


def runtimes_table(data: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One display row per cell: fits, base, GiB per device of the usable HBM, tokens/s, $."""
    data = data or load_runtimes()
    mfu = paper_mfu(data)
    out = []
    for preset in SIZES_BY_PARAMS:
        for slice_name in RUNTIME_SLICES:
            r = data["rows"].get(f"{preset}/{slice_name}")
            if r is None:
                out.append({"size": preset.removeprefix("gemma4_"), "slice": slice_name, "fits": "not compiled yet"})
            else:
                out.append(_display(r, mfu, data.get("paper_train_tokens", 9.2e6)))
    return out


def _display(r: dict[str, Any], mfu: float | None = None, tokens: float = 9.2e6) -> dict[str, Any]:
    row = {
        "size": r["preset"].removeprefix("gemma4_"),
        "slice": r["slice"],
        "runtime": r["runtime"],
        "fits": {True: "yes", False: "no", None: "not compiled"}[r["fits"]]
        + (
            f" ({'/'.join(r.get('bases_tried') or [])} at {', '.join(map(str, r['seq_lens_tried']))} tokens)"
            if r["fits"] is False and r.get("seq_lens_tried")
            else ""
        ),
        "base": (r.get("quantize") or "bf16") if r.get("gib_per_chip") is not None else "-",
        "GiB/device": f"{r['gib_per_chip']:.1f} of {r['hbm_gib_per_device']:.2f}"
        if "gib_per_chip" in r
        # decided by the lowered step's arguments alone (benchmarks/runtimes.py floor_row)
        else (
            f">= {min(r['argument_floor_gib'].values()):.1f} of {r['hbm_gib_per_device']:.2f} (arguments alone)"
            if "argument_floor_gib" in r
            else "-"
        ),
    }
    if r["fits"]:
        row.update(
            {
                "layout": f"{r['mesh_fsdp']}x{r['mesh_tp']}/b{r['batch_size']}/{r['remat']}",
                "tokens/s": round(r["tokens_per_s"]),
                "$/1M tokens": round(r["usd_per_million_tokens"], 3),
                "paper run h": round(r["paper_run_hours"], 2),
                "paper run $": round(r["paper_run_usd"], 2),
            }
        )
        if mfu and "floor_tokens_per_s" in r:  # at the paper's measured fraction of peak (paper_mfu)
            hours = tokens / (r["floor_tokens_per_s"] * mfu) / 3600
            row.update({"h at paper's MFU": round(hours, 1), "$ at paper's MFU": round(hours * r["usd_per_hour"], 2)})
    return row


def size_advice(runtime=None) -> str:
    """On a TPU runtime: the largest size whose LoRA step fits it, and why; on CPU: the tiny default.

    ``runtime``: what ``cookbook.mesh.detect_runtime()`` returns (default: detected, which starts JAX's backend).
    """
    if runtime is None:
        from cookbook import mesh

        runtime = mesh.detect_runtime()
    if runtime.platform != "tpu":
        return (
            f"{runtime.describe()}: the default is the random tiny model (MODEL_PRESET = 'tiny'). On a TPU "
            "runtime this cell names the largest Gemma 4 size that trains there."
        )
    s = runtime.slice
    if s is None or s.name not in RUNTIME_SLICES:
        where = s.name if s else f"{runtime.num_devices} x {runtime.device_kind}"
        return (
            f"{where}: not a runtime of the committed table ({', '.join(RUNTIME_SLICES)}); check a size "
            f"with `cookbook plan --preset gemma4_e4b --slice SLICE`"
        )
    best = largest_fitting(s.name)
    if best is None:
        return f"{s.name}: no released size's LoRA step fits here (benchmarks/results/{RUNTIMES_FILE})"
    return (
        f"{s.name}{' (' + s.runtime + ')' if s.runtime else ''}: the largest size whose LoRA step fits is "
        f"{best['preset']} ({best.get('quantize') or 'bf16'} base, mesh {best['mesh_fsdp']} x {best['mesh_tp']}, "
        f"{best['seq_len']} tokens: {best['gib_per_chip']:.1f} GiB per device of {best['hbm_gib_per_device']:.2f} "
        f"usable, under the 80% margin; a deviceless compile of the real step, {RUNTIMES_FILE}). Larger sizes do "
        f"not fit. Set MODEL_PRESET = {best['preset']!r} to train it (it downloads the release: HF_TOKEN)."
    )


KAGGLE_SESSION_HOURS = 9.0  # Kaggle's free TPU: a v5e-8 for 9-hour sessions (about 20 TPU-hours a week)
PAPER_TRAIN_USD_V5P8 = 56.11  # the paper's 31B run on v5p-8 (3.34 h x $16.80)


def paper_mfu(data: dict[str, Any] | None = None) -> float | None:
    """The paper's measured 31B speed on v5p-8 (763 tokens/s) over the FLOP floor of the layout
    the table has there: the fraction of peak the paper's run reached, to scale other cells by."""
    row = (data or load_runtimes())["rows"].get("gemma4_31b/v5p-8")
    if not row or not row.get("fits") or "floor_tokens_per_s" not in row:
        return None
    return core.PAPER_TRAINING_RUNS["tpu-v5p-8"]["train_tokens_per_s"] / row["floor_tokens_per_s"]


def runtime_answers(data: dict[str, Any] | None = None) -> dict[str, str]:
    """The three questions a user with a free or one-chip TPU asks, answered from the table.

    Hours are given twice: at the table's estimate (the compiler's, or the FLOP floor: a lower
    bound) and at the paper's measured efficiency (:func:`paper_mfu`: the paper's 31B run on
    v5p-8 reached ~6% of this layout's floor), which is what a real run should expect first.
    """
    data = data or load_runtimes()
    rows = data["rows"]
    mfu = paper_mfu(data)
    tokens = data.get("paper_train_tokens", 9.2e6)

    def fitted(r):
        return (
            f"{r.get('quantize') or 'bf16'} base, {r['seq_len']} tokens, "
            f"{r['gib_per_chip']:.1f} GiB of {r['hbm_gib_per_device']:.2f} per device"
        )

    def at_paper_mfu(r):
        if mfu is None or "floor_tokens_per_s" not in r:
            return None
        return tokens / (r["floor_tokens_per_s"] * mfu) / 3600

    out = {}
    r = rows.get("gemma4_31b/v6e-1")
    if r is None or r["fits"] is None:
        out["31b_qlora_v6e1"] = "31B on one v6e-1: not compiled yet"
    elif r["fits"] and r["seq_len"] == 4096:
        out["31b_qlora_v6e1"] = f"yes: 31B LoRA fits one v6e-1 at 4,096 tokens ({fitted(r)})"
    elif r["fits"]:
        out["31b_qlora_v6e1"] = f"not at 4,096 tokens; at {r['seq_len']} it fits ({fitted(r)})"
    else:
        tried = ", ".join(map(str, r.get("seq_lens_tried") or []))
        out["31b_qlora_v6e1"] = (
            f"no layout compiled so far fits one v6e-1 ({' and '.join(r.get('bases_tried') or [])} base at {tried} "
            f"tokens: {r.get('gib_per_chip', float('nan')):.1f} GiB per device of {r['hbm_gib_per_device']:.2f} at the "
            "least)" + ("" if "nf4" in (r.get("bases_tried") or []) else "; QLoRA (nf4) not compiled yet")
        )
    best = largest_fitting("v5e-1") if rows else None
    bigger = SIZES_BY_PARAMS[SIZES_BY_PARAMS.index(best["preset"]) + 1 :] if best else SIZES_BY_PARAMS
    status = []
    for p in bigger:
        row = rows.get(f"{p}/v5e-1")
        if row is None or row["fits"] is None:
            status.append(f"{p} not compiled yet")
        else:
            tried = ", ".join(map(str, row.get("seq_lens_tried") or [])) or "?"
            status.append(f"{p} does not fit (at {tried} tokens)")
    out["largest_on_free_v5e1"] = (
        f"{best['preset']} ({fitted(best)})" if best else "none of the sizes compiled for it fits one v5e chip"
    ) + (f"; {'; '.join(status)}" if status else "")
    k = rows.get("gemma4_31b/v5e-8")
    if k and k["fits"]:
        real = at_paper_mfu(k)
        verdict = "yes" if (real or k["paper_run_hours"]) <= KAGGLE_SESSION_HOURS else "no"
        out["paper_run_on_kaggle_v5e8"] = (
            f"{verdict}: the paper's 9.2M-token 31B run on a v5e-8 ({fitted(k)}) takes "
            f"{k['paper_run_hours']:.1f} h at the estimate"
            + (f", {real:.1f} h at the paper's measured efficiency" if real else "")
            + f"; a Kaggle session is {KAGGLE_SESSION_HOURS:.0f} h"
        )
    else:
        out["paper_run_on_kaggle_v5e8"] = "31B does not fit a v5e-8 (or is not compiled)"
    if r and r["fits"]:
        real = at_paper_mfu(r)
        out["paper_run_on_v6e1"] = (
            f"${r['paper_run_usd']:.2f} ({r['paper_run_hours']:.1f} h) on one v6e-1 at the estimate"
            + (f", ${real * r['usd_per_hour']:.2f} ({real:.1f} h) at the paper's measured efficiency" if real else "")
            + f"; the paper paid ${PAPER_TRAIN_USD_V5P8:.2f} on v5p-8"
        )
    elif r is None or r["fits"] is None:
        out["paper_run_on_v6e1"] = "31B on one v6e-1 not compiled yet, so the paper's run is not priced there"
    else:
        out["paper_run_on_v6e1"] = "31B does not train on one v6e-1, so the paper's run cannot be priced there"
    return out
