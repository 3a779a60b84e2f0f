"""cookbook.mesh._plan: notebook 01's steps (the tp bound, the plan, the refusal, the checks) as typed results."""

from __future__ import annotations

import dataclasses

import pytest

from cookbook import core
from cookbook import mesh as M
from cookbook.mesh import _distributed, _mesh
from cookbook.mesh._plan import HostsCheck

# Needs the JAX stack only: also runs in the TPU-host environment (scripts/run_tests.sh).
pytestmark = pytest.mark.jax_only


def test_mesh_rules_put_the_global_kv_heads_and_the_batch_where_tunix_shards_them():
    rules = {(r.axis, r.dimension): r.size for r in _mesh.mesh_rules("gemma4_31b", batch=6)}
    assert rules[("tp", "global KV heads")] == 4 and rules[("tp", "query heads")] == 32
    assert rules[("fsdp", "batch")] == 6 and ("fsdp", "embed") in rules
    assert ("fsdp", "batch") not in {(r.axis, r.dimension) for r in _mesh.mesh_rules("gemma4_31b")}


def test_tp_limit_names_the_bound_and_lists_every_rule():
    limit = M.tp_limit("gemma4_31b", 2)
    assert (limit.preset, limit.max_tp, limit.bound) == ("gemma4_31b", 4, "global KV heads")
    assert limit.describe() == "gemma4_31b: tp <= 4, bounded by global KV heads"
    assert limit.results() == {"max_tp": 4, "tp_bound": "global KV heads"}
    rows = limit.table()
    assert len(rows) == len(limit.rules) and set(rows[0]) == {"axis", "dimension", "size", "where"}
    assert {"axis": "fsdp", "dimension": "batch", "size": 2, "where": "activations (B on fsdp)"} in rows
    assert M.tp_limit("tiny").max_tp == 2  # tiny's 2 global KV heads


def test_plan_for_a_named_slice_is_the_papers_mesh():
    plan = M.plan_mesh("gemma4_31b", "v5p-8", 1)
    assert (plan.fsdp, plan.tp) == (1, 4)
    assert plan.reference_meshes == {"v5p-8": (1, 4), "v6e-8": (2, 4)}
    r = plan.results()
    assert (r["preset"], r["slice"], r["batch"], r["mesh"], r["candidates"]) == (
        "gemma4_31b",
        "v5p-8",
        1,
        [1, 4],
        [[1, 4]],
    )
    assert r["gemma4_31b_meshes"] == {"v5p-8": [1, 4], "v6e-8": [2, 4]}
    assert r["reason"] == plan.choice.reason and "global KV heads = 4" in r["reason"]
    lines = plan.describe().splitlines()
    assert lines[0] == "gemma4_31b on v5p-8, batch 1: fsdp=1 x tp=4"
    assert lines[-1] == "gemma4_31b: {'v5p-8': (1, 4), 'v6e-8': (2, 4)}"


def test_plan_without_a_slice_uses_the_devices_of_this_process():
    runtime = M.detect_runtime()  # 8 fake CPU devices
    plan = M.plan_mesh("tiny", "", 4, runtime)
    assert (plan.fsdp, plan.tp) == (4, 2)
    assert plan.choice.slice == runtime.slice.name
    # A TPU VM of a known slice plans for that slice by name, whatever its device count says.
    tpu = dataclasses.replace(runtime, platform="tpu", slice=core.get_slice("v6e-8"))
    assert M.plan_mesh("gemma4_31b", "", 2, tpu).choice.slice == "v6e-8"


def test_a_mesh_twice_as_wide_as_the_bound_is_refused_with_the_dimension():
    refused = M.refuse_too_wide_mesh(M.plan_mesh("gemma4_31b", "v5p-8", 1))
    assert (refused.fsdp, refused.tp) == (1, 8)
    assert "tp=8 does not divide global KV heads = 4" in refused.error and "valid (fsdp, tp)" in refused.error
    assert refused.results() == {"invalid_mesh_error": refused.error}


def test_sharded_checksum_is_the_closed_form(mesh_4x2):
    check = _distributed.sharded_checksum(mesh_4x2)
    assert (check["global_devices"], check["local_devices"], check["process_count"]) == (8, 8, 1)
    assert abs(check["sum_sq"] - check["expected"]) <= check["bound"]
    assert abs(check["trace"] - check["expected"]) <= check["bound"]  # trace(x.T @ x) = sum of squares


def test_check_on_devices_builds_the_plan_or_says_it_cannot():
    runtime = M.detect_runtime()
    here = M.check_on_devices(M.plan_mesh("tiny", "", 4, runtime), runtime)
    assert dict(here.mesh.shape) == {"fsdp": 4, "tp": 2}
    c = here.results()["local_check"]
    assert c["global_devices"] == 8 and abs(c["sum_sq"] - c["expected"]) <= c["bound"]
    assert here.describe().splitlines()[-1] == str(c)
    # v5p-32 (16 chips) at batch 4: fsdp 4 x tp 4, more than the 8 devices here.
    there = M.check_on_devices(M.plan_mesh("gemma4_31b", "v5p-32", 4), runtime)
    assert there.mesh is None and there.results() == {}
    assert there.describe() == "planned for v5p-32; this process has only 8 devices"


def test_hosts_check_agrees_only_when_every_process_computed_the_same():
    same = {"sum_sq": 1.5, "trace": 2.5}
    ok = HostsCheck(processes=2, hosts=({**same, "process_index": 0}, {**same, "process_index": 1}))
    assert ok.agree and ok.describe() == "all processes agree: True"
    assert ok.results()["multihost_agree"] is True
    assert [h["process_index"] for h in ok.results()["multihost"]] == [0, 1]
    off = HostsCheck(processes=2, hosts=(same, {**same, "trace": 2.5000002}))
    assert not off.agree and off.results()["multihost_agree"] is False


def test_no_simulated_hosts_records_nothing():
    skipped = M.simulate_hosts(0, 4, "tiny")
    assert skipped.results() == {} and skipped.table() == [] and "0 processes" in skipped.describe()
    with pytest.raises(ValueError, match="processes=-1"):
        M.simulate_hosts(-1, 4, "tiny")


def test_runtime_results_are_what_notebook_01_records():
    assert M.detect_runtime().results() == {
        "platform": "cpu",
        "device_kind": "cpu",
        "num_devices": 8,
        "process_count": 1,
    }
