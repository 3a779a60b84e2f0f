"""Notebook 01 through papermill, planning Gemma 4 31B for v5p-8 on this CPU host."""

from nbutil import run_notebook


def test_mesh_setup_plans_31b_on_v5p8(tmp_path):
    results = run_notebook(
        "01_mesh_setup",
        tmp_path,
        MODEL_PRESET="gemma4_31b",
        SLICE="v5p-8",
        BATCH=1,
        MULTIHOST_PROCESSES=2,
        DEVICES_PER_PROCESS=2,
    )
    assert results["platform"] == "cpu" and results["num_devices"] == 8
    assert results["mesh"] == [1, 4]  # the paper's mesh, chosen, not hard-coded
    assert results["candidates"] == [[1, 4]]
    assert results["max_tp"] == 4 and results["tp_bound"] == "global KV heads"
    assert results["gemma4_31b_meshes"] == {"v5p-8": [1, 4], "v6e-8": [2, 4]}
    err = results["invalid_mesh_error"]
    assert "tp=8 does not divide global KV heads = 4" in err and "valid (fsdp, tp)" in err
    local = results["local_check"]
    assert local["global_devices"] == 4 and abs(local["sum_sq"] - local["expected"]) <= local["bound"]
    hosts = results["multihost"]
    assert [h["process_index"] for h in hosts] == [0, 1]
    assert all(h["global_devices"] == 4 and h["local_devices"] == 2 for h in hosts)
    assert results["multihost_agree"] is True
    # The float32 reductions may add in any order: within the worst-case summation bound.
    assert abs(hosts[0]["trace"] - hosts[0]["expected"]) <= hosts[0]["bound"]
    pods = {r["slice"]: r for r in results["pod_meshes"]}
    assert (pods["v5p-16"]["hosts"], pods["v5p-16"]["mesh"], pods["v5p-16"]["rows_per_host"]) == (2, "2 x 4", 2)
    assert (pods["v6e-16"]["hosts"], pods["v6e-16"]["mesh"]) == (4, "4 x 4")


def test_mesh_setup_as_committed_on_one_device(tmp_path):
    """One device, as a one-chip runtime looks to the code: the mesh of the devices present is
    1 x 1, and the simulated hosts (their own processes) still build one global mesh."""
    results = run_notebook("01_mesh_setup", tmp_path, env={"XLA_FLAGS": "--xla_force_host_platform_device_count=1"})
    assert results["num_devices"] == 1 and results["mesh"] == [1, 1] and results["candidates"] == [[1, 1]]
    assert results["multihost_agree"] is True
