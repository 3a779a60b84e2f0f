"""cookbook.fit's views of the committed layout searches (notebook 04): what each call returns."""

import pytest

from cookbook import fit

pytestmark = pytest.mark.jax_only


def test_committed_search_views_match_the_committed_json():
    search = fit.committed_search("gemma4_31b")
    raw = fit.load_plan_results("gemma4_31b")
    assert set(search.searches) == set(raw["ranked"]) >= set(raw["recommended"])  # every slice searched
    assert all(search.searches[s].ranked == raw["ranked"][s] for s in raw["ranked"])
    assert raw["compiled_on"] in search.header and f"{raw['margin']:.0%}" in search.header
    rows = search.validation_rows
    assert [r["layout"] for r in rows] == [v["layout"] for v in raw["validation"]] and rows
    assert all(
        r["total_bytes"] == v["total_bytes"]["relative_error"] for r, v in zip(rows, raw["validation"], strict=True)
    )
    win = raw["cheapest"]["winner"]
    assert search.cheapest_line.startswith(f"cheapest: {win['slice']}, {win['layout']}: $")
    ranked = search.ranked_and_dropped()
    assert ranked["v5p-8"]["ranked"][0] == raw["recommended"]["v5p-8"]["from"]
    assert all(set(r) == {"ranked", "dropped"} for r in ranked.values())


def test_dropped_and_validation_lines_and_the_recommended_row():
    sizes = ("gemma4_26b_a4b", "gemma4_e4b", "gemma4_e2b")
    dropped = sum(len(d) for s in sizes for d in fit.load_plan_results(s)["dropped"].values())
    assert len(fit.dropped_lines(sizes)) == dropped
    checks = fit.load_plan_results("gemma4_26b_a4b").get("validation", [])
    assert len(fit.validation_lines("gemma4_26b_a4b")) == len(checks)
    rec = fit.recommended_training("gemma4_31b")
    assert fit.recommended_row("gemma4_31b", rec["slice"])["slice"] == rec["slice"]
    with pytest.raises(KeyError, match="no committed recommendation"):
        fit.recommended_row("gemma4_31b", "v2-8")
