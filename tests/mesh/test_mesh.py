"""cookbook.mesh: slices as data, mesh choice and validation, runtime detection, multi-host."""

from __future__ import annotations

import itertools
import math
import os

import pytest

from cookbook import core
from cookbook import mesh as M
from cookbook.mesh import _distributed, _mesh

# Needs the JAX stack only: also runs in the TPU-host environment (scripts/run_tests.sh).
pytestmark = pytest.mark.jax_only


def test_make_mesh_axes_and_auto_types(mesh_4x2):
    import jax

    assert dict(mesh_4x2.shape) == {"fsdp": 4, "tp": 2}
    assert mesh_4x2.axis_types == (jax.sharding.AxisType.Auto,) * 2
    with pytest.raises(ValueError, match="needs 16 devices"):
        M.make_mesh(4, 4)


def test_known_slices_carry_the_datasheet_figures():
    v5p, v6e = core.SLICES["v5p-8"], core.SLICES["v6e-8"]
    assert (v5p.num_chips, v5p.chip.hbm_bytes, v5p.chip.bf16_flops) == (4, 95e9, 459e12)
    assert (v6e.num_chips, v6e.chip.hbm_bytes, v6e.chip.bf16_flops) == (8, 32e9, 918e12)
    assert v5p.chip.hbm_bytes_per_s == 2765e9 and v6e.chip.hbm_bytes_per_s == 1640e9
    assert v5p.hbm_bytes == 380e9 and math.isclose(v6e.bf16_flops, 8 * 918e12)
    for s in core.SLICES.values():
        assert s.num_chips % s.num_hosts == 0, s.name
        dims = [int(x) for x in s.topology.split(":")[1].split("x")]
        assert math.prod(dims) == s.num_chips, s.name
    assert "459 TFLOP/s" in v5p.describe()
    # The runtimes users get for free are named as such.
    assert "Colab's free TPU runtime" in core.SLICES["v5e-1"].describe()
    assert "Kaggle's free TPU" in core.SLICES["v5e-8"].describe()
    with pytest.raises(ValueError, match="known: v5p-8"):
        core.get_slice("v5p-7")


def test_slice_topologies_give_the_right_tpu_devices_without_a_tpu(monkeypatch):
    """libtpu (installed for AOT compilation) describes each slice; no TPU needed."""
    from jax.experimental import topologies

    # another process (a planner run) may hold libtpu's lockfile
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", os.environ.get("ALLOW_MULTIPLE_LIBTPU_LOAD", "1"))
    for name in ("v5p-8", "v6e-8", "v5e-8", "v5p-16", "v5e-4", "v5e-1", "v6e-1"):
        s = core.SLICES[name]
        devices = topologies.get_topology_desc(**s.topology_desc_kwargs()).devices
        assert len(devices) == s.num_chips, name
        assert core.chip_of(devices[0].device_kind) == s.chip.name, devices[0].device_kind
    # One chip needs its host bounds: libtpu's default (2 x 2 x 1 chips per host) refuses it.
    with pytest.raises(Exception, match="chips_per_host_bounds"):
        topologies.get_topology_desc(platform="tpu", topology_name=core.SLICES["v5e-1"].topology)


def test_choose_mesh_reproduces_the_paper_and_explains_the_kv_bound():
    c = M.choose_mesh("gemma4_31b", "v5p-8", batch=1)
    assert c.shape == (1, 4)  # the paper's mesh
    assert "global KV heads = 4" in c.reason and "query heads: 32" in c.reason
    c = M.choose_mesh("gemma4_31b", "v6e-8", batch=2)
    assert c.shape == (2, 4)
    assert M.choose_mesh("tiny", 8, batch=4).shape == (4, 2)
    assert M.max_tp("gemma4_31b") == (4, "global KV heads")
    assert M.max_tp("tiny") == (2, "global KV heads")
    with pytest.raises(_mesh.MeshError, match="multiple of 2"):
        M.choose_mesh("gemma4_31b", "v6e-8", batch=1)


@pytest.mark.parametrize(
    "preset, fsdp, tp, batch, dimension",
    [
        ("gemma4_31b", 1, 8, 1, "global KV heads = 4"),
        ("gemma4_31b", 2, 4, 1, "batch = 1"),
        ("tiny", 2, 4, 4, "global KV heads = 2"),
        ("tiny", 4, 2, 6, "batch = 6"),
        ("tiny", 1, 8, None, "KV heads (sliding layers) = 4"),
    ],
)
def test_validate_mesh_names_the_dimension_and_the_valid_choices(preset, fsdp, tp, batch, dimension):
    with pytest.raises(_mesh.MeshError) as err:
        M.validate_mesh(preset, fsdp, tp, batch)
    msg = str(err.value)
    assert dimension in msg
    assert "valid (fsdp, tp)" in msg


def test_valid_meshes():
    assert M.valid_meshes("tiny", 8, batch=4) == [(4, 2)]
    assert M.valid_meshes("tiny", 8) == [(8, 1), (4, 2)]
    assert M.valid_meshes("gemma4_31b", 4, batch=1) == [(1, 4)]
    assert M.valid_meshes("gemma4_31b", 8, batch=2) == [(2, 4)]
    M.validate_mesh("gemma4_31b", 1, 4, 1)
    M.validate_mesh("gemma4_31b", 2, 4, 2, num_devices=8)
    with pytest.raises(_mesh.MeshError, match="not the 8 available"):
        M.validate_mesh("gemma4_31b", 1, 4, 1, num_devices=8)


def _params_divide(model, fsdp: int, tp: int) -> bool:
    from flax import nnx

    sizes = {"fsdp": fsdp, "tp": tp, None: 1}
    for _, var in nnx.state(model, nnx.Param).flat_state():
        names = getattr(var, "sharding_names", None) or ()
        shape = var.get_value().shape
        for dim, axis in zip(shape, names, strict=False):
            if dim % sizes[axis]:
                return False
    return True


@pytest.mark.parametrize("name", ["tiny", "gemma4_31b"])
def test_rules_agree_with_the_tunix_parameter_shardings(name):
    """validate_mesh accepts a mesh iff every Tunix weight's sharded dims divide (abstract model)."""
    from cookbook import models

    model = models.abstract_model(name)
    for fsdp, tp in itertools.product([1, 2, 4, 8, 16], repeat=2):
        try:
            M.validate_mesh(name, fsdp, tp)
            ok = True
        except _mesh.MeshError:
            ok = False
        assert ok == _params_divide(model, fsdp, tp), (name, fsdp, tp)


def test_an_invalid_mesh_really_fails_to_load_and_a_valid_one_loads(tiny_base):
    from cookbook import models

    with pytest.raises(_mesh.MeshError, match="global KV heads"):
        M.validate_mesh("tiny", 2, 4)
    # The loader checks the heads first: a named head count, not JAX's "should evenly divide" from
    # inside Tunix's sharded load (what it raised before the check; the mesh rule equals the
    # parameters' divisibility, test above).
    with pytest.raises(ValueError, match=r"tp=4 does not divide global KV heads = 2 of preset 'tiny'"):
        models.load_tunix_model(tiny_base, "tiny", mesh=M.make_mesh(2, 4))
    model = models.load_tunix_model(tiny_base, "tiny", mesh=M.make_mesh(4, 2))
    w = model.layers[5].attn.k_einsum.w.get_value()
    assert {s.data.shape for s in w.addressable_shards} == {(1, 32, 64)}  # (K/tp, D/fsdp, H)


def test_detect_runtime_on_the_fake_cpu_host():
    rt = M.detect_runtime()
    assert rt.platform == "cpu" and rt.num_devices == 8 and rt.fake_cpu_devices
    assert rt.slice is not None and rt.slice.num_chips == 8
    assert rt.describe().startswith("CPU: 8 devices (fake")
    assert core.chip_of("TPU v6 lite") == "v6e" and core.chip_of("TPU v5") == "v5p"
    assert core.chip_of("TPU v5 lite") == "v5e"


def test_initialize_distributed_is_a_noop_on_one_host(monkeypatch):
    monkeypatch.delenv("TPU_WORKER_HOSTNAMES", raising=False)
    info = M.initialize_distributed()
    assert (info.initialized, info.mode, info.process_count) == (False, "single-host", 1)
    with pytest.raises(ValueError, match="needs coordinator"):
        M.initialize_distributed(num_processes=2)


def test_two_local_processes_build_one_global_mesh_and_agree():
    results = _distributed.run_local_multiprocess(num_processes=2, devices_per_process=4, tp=2)
    assert [r["process_index"] for r in results] == [0, 1]
    for r in results:
        assert (r["process_count"], r["global_devices"], r["local_devices"]) == (2, 8, 4)
        assert r["mode"] == "explicit"
        # Float32 reductions across two processes, in any order: within the worst-case bound.
        assert abs(r["sum_sq"] - r["expected"]) <= r["bound"]
        assert abs(r["trace"] - r["expected"]) <= r["bound"]
    assert results[0]["sum_sq"] == results[1]["sum_sq"]
    assert results[0]["trace"] == results[1]["trace"]


def test_mesh_parameters_of_0_come_from_the_devices_present():
    # This process has 8 fake CPU devices; tiny's 2 global KV heads cap tp at 2.
    assert M.mesh_for_devices("tiny").shape == (4, 2)
    assert M.mesh_for_devices("tiny", 0, 1).shape == (8, 1)
    assert M.mesh_for_devices("tiny", 2, 2).shape == (2, 2)  # as given: 4 of the 8 devices
    assert M.mesh_for_devices("tiny", 3, 1).shape == (3, 1)  # as given, even if 3 does not divide 8
    assert M.mesh_for_devices("tiny", 2, 0).shape == (2, 4)  # what fsdp 2 leaves, as asked
    with pytest.raises(_mesh.MeshError, match="fsdp=3 does not divide the 8 devices"):
        M.mesh_for_devices("tiny", 3, 0)
    with pytest.raises(_mesh.MeshError, match="needs 16 devices; 8 are present"):
        M.mesh_for_devices("tiny", 8, 2)
    # The batch must divide over fsdp: at batch 2 no mesh over all 8 devices works for tiny.
    with pytest.raises(_mesh.MeshError, match="use a batch that is a multiple of 4"):
        M.mesh_for_devices("tiny", batch=2)


def test_slice_table_prices_are_the_price_tables():
    from cookbook import core

    rows = {r["slice"]: r for r in M.slice_table()}
    assert set(rows) == set(core.SLICES)
    for name, row in rows.items():
        platform = core.platform_of_slice(name)
        price = next(p for p in core.PRICES if p.platform == platform and p.pricing == "on_demand")
        assert row["$/h"] == price.usd_per_hour, name  # None where the table has no source
        assert row["slice HBM GB"] == pytest.approx(
            core.SLICES[name].num_chips * core.SLICES[name].chip.hbm_bytes / 1e9
        )
    assert rows["v5p-8"]["$/h"] == core.get_price("tpu-v5p-8").usd_per_hour == 16.80
