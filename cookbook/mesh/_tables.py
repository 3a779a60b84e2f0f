"""Notebook 01's view of the hardware table: one row per slice, and a chart of slice HBM and peak."""

from __future__ import annotations

from typing import Any

from cookbook import core


def slice_table() -> list[dict[str, Any]]:
    """One row per TPU slice the cookbook plans for, with its on-demand price where sourced."""
    rows = []
    for s in core.SLICES.values():
        price = next(
            (
                p.usd_per_hour
                for p in core.PRICES
                if p.platform == core.platform_of_slice(s) and p.pricing == "on_demand"
            ),
            None,
        )
        rows.append(
            {
                "slice": s.name,
                "chips": s.num_chips,
                "hosts": s.num_hosts,
                "topology": s.topology,
                "HBM/chip GB": s.chip.hbm_bytes / 1e9,
                "bf16 TFLOP/s/chip": s.chip.bf16_flops / 1e12,
                "HBM GB/s/chip": s.chip.hbm_bytes_per_s / 1e9,
                "slice HBM GB": s.hbm_bytes / 1e9,
                "slice PFLOP/s": s.bf16_flops / 1e15,
                "$/h": price,
            }
        )
    return rows


def plot_slices(rows: list[dict[str, Any]], max_chips: int = 16):
    """Bar charts of HBM and bf16 peak per slice, for the slices of up to ``max_chips`` chips."""
    import matplotlib.pyplot as plt

    small = [r for r in rows if r["chips"] <= max_chips]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.2))
    axes[0].bar([r["slice"] for r in small], [r["slice HBM GB"] for r in small], color="tab:blue")
    axes[0].set_ylabel("HBM per slice (GB)")
    axes[1].bar([r["slice"] for r in small], [r["slice PFLOP/s"] for r in small], color="tab:orange")
    axes[1].set_ylabel("bf16 peak per slice (PFLOP/s)")
    for ax in axes:
        ax.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    return fig


def slice_meshes(preset, slices: list[str], batch: int) -> list[dict[str, Any]]:
    """The mesh ``choose_mesh`` picks for ``preset`` on each slice, and how the hosts share it.

    On a multi-host slice every host runs the same program and feeds its rows of each global
    batch: ``rows_per_host`` = batch / hosts (the batch must divide by fsdp, hence by hosts).
    """
    from cookbook.mesh._mesh import MeshError, choose_mesh

    rows = []
    for name in slices:
        s = core.get_slice(name)
        row = {
            "slice": s.name,
            "hosts": s.num_hosts,
            "chips": s.num_chips,
            "chips/host": s.chips_per_host,
            "batch": batch,
        }
        try:
            c = choose_mesh(preset, s, batch)
            row.update(mesh=f"{c.fsdp} x {c.tp}", rows_per_host=batch // s.num_hosts)
        except MeshError as e:
            row.update(mesh="-", rows_per_host=None, note=str(e).split(": ", 1)[-1][:120])
        rows.append(row)
    return rows
