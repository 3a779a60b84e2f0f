"""benchmarks/results/runtimes.json: which size trains on which runtime, as committed, checked.

Each row is recomputed where it can be: a cell read from the layout search against that search's
best layout (today's ranking of its own reports), the fit against today's usable HBM and margin,
the price, tokens and hours arithmetic against the price table. ``cookbook plan --recommended``
answers one-chip slices from it, and notebook 06's advice names the largest size that fits.
"""

import json

import pytest

from cookbook import core, fit, mesh
from cookbook.fit import _runtimes
from cookbook.mesh import _runtime

pytestmark = pytest.mark.jax_only

DATA = _runtimes.load_runtimes()
ROWS = DATA["rows"]


def test_every_row_is_a_known_cell_decided_by_a_compile_against_todays_table():
    assert ROWS and set(ROWS) <= {f"{p}/{s}" for p in fit.SIZES_BY_PARAMS for s in fit.RUNTIME_SLICES}
    for key, r in ROWS.items():
        s = core.get_slice(r["slice"])
        assert key == f"{r['preset']}/{r['slice']}" and r["devices"] == s.num_devices
        assert r["hbm_gib_per_device"] == s.chip.device_hbm_bytes / 2**30, key
        if r["fits"] is None:  # not compiled: the row says why (this host's RAM, named)
            assert not r["compiled"] and r["why"], key
            continue
        # A base left uncompiled: the lowered step's arguments alone are over the device's HBM.
        assert all(gib > r["hbm_gib_per_device"] for gib in r.get("argument_floor_gib", {}).values()), key
        if not r["compiled"]:  # so for every base: decided by the lowered step, nothing compiled
            assert r["fits"] is False and r["decided_by"] == "argument floor", key
            assert len(r["argument_floor_gib"]) == len(r["bases_tried"]) >= 1, key  # one layout per base
            continue
        assert r["compiled"], key
        margin = DATA["margin"] * r["hbm_gib_per_device"]
        if r["fits"]:
            assert 0 < r["gib_per_chip"] <= margin, key
            assert r["hbm_fraction"] == pytest.approx(r["gib_per_chip"] / r["hbm_gib_per_device"])
            price = core.get_price(core.platform_of_slice(r["slice"])).usd_per_hour
            assert r["usd_per_hour"] == price
            assert r["usd_per_million_tokens"] == pytest.approx(price / 3600 / r["tokens_per_s"] * 1e6)
            hours = DATA["paper_train_tokens"] / r["tokens_per_s"] / 3600
            assert r["paper_run_hours"] == pytest.approx(hours) and r["paper_run_usd"] == pytest.approx(hours * price)
            assert r["estimate_bound"] and r["estimated_step_s"] > 0
            # The mesh spans the slice's devices, as the planner picks it for this size.
            assert r["mesh_fsdp"] * r["mesh_tp"] == s.num_devices, key
        elif "gib_per_chip" in r:  # compiled, nothing under the margin: its smallest layout is over it
            assert r["gib_per_chip"] > margin, key


def test_cells_read_from_the_layout_search_are_its_best_layout():
    searched = 0
    for key, r in ROWS.items():
        if not r["source"].startswith("plan_search"):
            continue
        searched += 1
        data = fit.load_plan_results(r["preset"])
        (res,) = [x for x in fit.load_search(data) if x.slice_name == r["slice"]]
        # The committed reports at today's capacity (benchmarks/plan_search.py --refresh-hardware).
        assert r.get("layout") == res.best(), key
    assert searched


def test_one_chip_slices_are_answered_by_plan_recommended(capsys):
    """`cookbook plan --preset gemma4_e2b --slice v5e-1 --recommended` (and v6e-1): a layout and its
    GiB per chip, from the table (the layout search never covered one chip)."""
    from cookbook import harness

    for slice_name in ("v5e-1", "v6e-1"):
        row = ROWS[f"gemma4_e2b/{slice_name}"]
        assert row["fits"], row
        code = harness.main(["plan", "--preset", "gemma4_e2b", "--slice", slice_name, "--recommended"])
        out = json.loads(capsys.readouterr().out)
        assert code == 0 and out == fit.recommended_training("gemma4_e2b", slice_name)
        assert (out["slice"], out["mesh_fsdp"], out["mesh_tp"]) == (slice_name, 1, 1)
        assert out["gib_per_chip"] == row["gib_per_chip"] and out["quantize"] == row["quantize"]
    # The searched slices still come from the layout search.
    assert fit.recommended_training("gemma4_e2b", "v6e-4")["from"].startswith("v6e-4/")


def test_a_cell_that_does_not_fit_or_was_not_compiled_is_refused_with_the_command():
    misfit = next((r for r in ROWS.values() if r["fits"] is False), None)
    if misfit is not None:
        with pytest.raises(ValueError, match=r"does not train with LoRA on .*(GiB per device|ran out of its)"):
            fit.recommended_training(misfit["preset"], misfit["slice"])

    def searched(p):  # the slices the layout search covered (12B: none; it has no search file)
        return set() if p == "gemma4_12b" else set(fit.load_plan_results(p).get("spaces", {}))

    missing = [
        (p, s)
        for p in fit.SIZES_BY_PARAMS
        for s in fit.RUNTIME_SLICES
        if f"{p}/{s}" not in ROWS and s not in searched(p)
    ]
    for p, s in missing[:1]:
        with pytest.raises(ValueError, match=rf"benchmarks/runtimes.py --cells {p}/{s}"):
            fit.recommended_training(p, s)
    table = fit.runtimes_table(DATA)
    assert len(table) == len(fit.SIZES_BY_PARAMS) * len(fit.RUNTIME_SLICES)
    assert sum(row["fits"] == "not compiled yet" for row in table) == (
        len(table) - len(ROWS)
    )  # every gap is shown as one


def test_the_advice_names_the_largest_size_that_fits_the_detected_chip():
    one_chip = core.get_slice("v5e-1")
    tpu = _runtime.Runtime(
        platform="tpu",
        device_kind=one_chip.chip.device_kind,
        num_devices=1,
        num_local_devices=1,
        process_count=1,
        process_index=0,
        chip="v5e",
        slice=one_chip,
        fake_cpu_devices=False,
    )
    best = _runtimes.largest_fitting("v5e-1")
    assert best is not None and best["fits"]
    bigger = fit.SIZES_BY_PARAMS[fit.SIZES_BY_PARAMS.index(best["preset"]) + 1 :]
    assert not any(ROWS.get(f"{p}/v5e-1", {}).get("fits") for p in bigger)
    advice = fit.size_advice(tpu)
    assert best["preset"] in advice and "free" in advice and f"{best['gib_per_chip']:.1f} GiB" in advice
    assert "tiny" in fit.size_advice(mesh.detect_runtime())  # this CPU host: the tiny default


def test_the_answers_scale_hours_by_the_papers_measured_efficiency():
    """The estimate is a lower bound (the compiler's, or every FLOP at peak); the paper's 31B run
    on v5p-8 measured 763 tokens/s, a fraction of its layout's floor, and the answers also give
    hours at that fraction."""
    mfu = _runtimes.paper_mfu(DATA)
    v5p = ROWS["gemma4_31b/v5p-8"]
    assert mfu == pytest.approx(763.0 / v5p["floor_tokens_per_s"]) and 0 < mfu < 0.2
    answers = fit.runtime_answers(DATA)
    assert set(answers) == {"31b_qlora_v6e1", "largest_on_free_v5e1", "paper_run_on_kaggle_v5e8", "paper_run_on_v6e1"}
    kaggle = ROWS["gemma4_31b/v5e-8"]
    real_h = DATA["paper_train_tokens"] / (kaggle["floor_tokens_per_s"] * mfu) / 3600
    assert f"{real_h:.1f} h at the paper's measured efficiency" in answers["paper_run_on_kaggle_v5e8"]
    assert answers["paper_run_on_kaggle_v5e8"].startswith("yes" if real_h <= 9 else "no")


def test_a_searched_slice_the_search_could_not_compile_is_answered_from_the_table():
    """E2B's layout search covered v5e-8 but could not compile it on this host (its RAM); the
    table's cell (KV-shared probes) answers `cookbook plan --recommended` there, and a cell decided
    by the argument floor is refused with that reason."""
    searched = set(fit.load_plan_results("gemma4_e2b").get("spaces", {}))
    row = ROWS["gemma4_e2b/v5e-8"]
    assert "v5e-8" in searched and row["fits"] and row["extrapolated_from"]
    rec = fit.recommended_training("gemma4_e2b", "v5e-8")
    assert rec["from"].endswith(row["layout"]) and rec["gib_per_chip"] == row["gib_per_chip"]
    floored = next(r for r in ROWS.values() if r.get("decided_by") == "argument floor")
    with pytest.raises(ValueError, match=r"arguments alone need [\d.]+ GiB per device"):
        fit.recommended_training(floored["preset"], floored["slice"])
