"""The main job, as a new user runs it: ``make demo`` from this checkout, on a fresh clone's empty cache.

Every notebook with its committed defaults (this is the suite's run of the notebooks as
committed), in a user's environment (the ``fresh_demo`` fixture, tests/harness/conftest.py), so
a check that only holds on the tests' own run fails here. Its console is what a newcomer reads:
no line in it may look like an error. Budget: ~6 minutes on a quiet
2-core machine.
"""

import json
import re
from pathlib import Path

import pytest
from userenv import outcome_bound

REPO = Path(__file__).resolve().parents[2]
_LOOKS_LIKE_AN_ERROR = re.compile(
    r"(?i)\b(error|errors|warning|warn|traceback|exception|failed|invalid)\b|^[EWF]\d{4} "
)


@pytest.mark.slow
def test_make_demo_on_a_fresh_cache(fresh_demo):
    if fresh_demo.reused:
        pytest.skip("COOKBOOK_TEST_DEMO_RUN names an existing run: make demo itself was not run")
    assert fresh_demo.returncode == 0, fresh_demo.stderr[-4000:]
    assert "all notebooks ran" in fresh_demo.stdout
    # libtpu's no-chips messages from the deviceless compiles (E0000 ... INVALID_ARGUMENT) and the
    # kernels' "running over TCP without encryption" warning used to be here, once per notebook.
    alarming = [
        line for line in (fresh_demo.stdout + fresh_demo.stderr).splitlines() if _LOOKS_LIKE_AN_ERROR.search(line)
    ]
    assert not alarming, "\n".join(alarming[:20])
    run = fresh_demo.run_dir
    log = json.loads((run / "demo.json").read_text())
    notebooks = sorted(p.stem for p in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert sorted(log["notebooks"]) == notebooks
    assert {n: v["status"] for n, v in log["notebooks"].items()} == {n: "ok" for n in notebooks}
    assert log["parameters"] == {}  # the committed defaults
    md = (run / "report.md").read_text()
    glance = md.split("## At a glance", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in glance.splitlines() if re.match(r"\| \d\d_", line)]
    assert [r.split("|")[1].strip() for r in rows] == notebooks
    assert all("| ok |" in r for r in rows)
    assert (run / "report.html").stat().st_size > 10_000
    for n in notebooks:
        assert (run / f"{n}.ipynb").is_file() and json.loads((run / f"{n}.json").read_text())
    # The thinking model, as committed: trained in 06 (section 11), served by vLLM with the gemma4
    # reasoning parser in 08 (section 6b); the answers, apart from the thoughts, score as Tunix's.
    nb05, nb06, nb08 = (
        json.loads((run / f"{n}.json").read_text()) for n in ("05_data_pipeline", "06_train", "08_serving")
    )
    assert nb05["thought_trained"] and nb05["tool_call_trained"] and nb05["tool_response_untrained"]
    # Bounds: the worst of several seeds less their spread (benchmarks/outcome_spread.py); 06 scores
    # 200 rows, 08's thinking section PASS_K_ROWS = 100.
    assert nb06["thinking_pass1"] >= outcome_bound("thinking", "pass1", 200)
    assert nb06["thinking_thoughts_right"] >= outcome_bound("thinking", "thoughts_right", 200)
    assert nb08["thinking_served_pass1"] == nb08["thinking_tunix_pass1"] >= outcome_bound("thinking", "pass1", 100)
    assert nb08["thinking_same_outcomes"] and nb08["thinking_content_has_no_thought"]
    # Notebook 10: a DAPO run of its RL_STEPS from 06's run, every step rewarded by the simulator; the
    # reward scores the answer only (a reference inside a thought earns nothing) plus the format term.
    nb10 = json.loads((run / "10_rl.json").read_text())
    assert nb10["rl_steps"] == len(nb10["rl_curve"]) == 50 and nb10["sft_step"] == 100
    assert all(r["completions"] == 8 and 0 <= r["pass_rate"] <= 1 for r in nb10["rl_curve"])
    judged = nb10["reward_judged"]
    assert judged["the reference answer"] == judged["written differently (ports, operands, comment)"] == 1.1
    assert judged["the reference only inside a thought"] == 0.0 and judged["wrong operator"] == 0.1
    assert all(0 <= nb10[k] <= 1 for k in ("sft_pass1", "rl_pass1", "control_pass1"))
    print(
        f"make demo: {fresh_demo.wall_s:.0f} s wall; per notebook (s): "
        + ", ".join(f"{n[:2]} {v['seconds']:.0f}" for n, v in log["notebooks"].items())
    )
