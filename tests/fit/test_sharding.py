"""cookbook.fit on the 4 (fsdp) x 2 (tp) fake CPU mesh: real shard shapes, real fixes."""

import pytest

from cookbook import fit
from cookbook.fit import _sharding

# Needs the JAX stack only: also runs in the TPU-host environment (scripts/run_tests.sh).
pytestmark = pytest.mark.jax_only


def test_projection_keeps_input_axes_on_a_and_output_axes_on_b():
    # q_einsum w (N, D, H) sharded (tp, fsdp, None); D is contracted.
    assert _sharding.project_lora_specs(("tp", "fsdp", None), (1,), 3) == (("fsdp", None), (None, "tp", None))
    # attn_vec_einsum w (N, H, D) sharded (tp, None, fsdp); N and H are contracted.
    assert _sharding.project_lora_specs(("tp", None, "fsdp"), (0, 1), 3) == (("tp", None, None), (None, "fsdp"))
    # a spec shorter than the weight is padded with None.
    assert _sharding.project_lora_specs(("fsdp",), (0,), 2) == (("fsdp", None), (None, None))


@pytest.fixture(scope="module")
def lora_model(tiny_base, mesh_4x2):
    from cookbook import lora, models

    model = models.load_tunix_model(tiny_base, "tiny", mesh=mesh_4x2)
    return lora.apply_lora(
        model, lora.LoraConfig(rank=8, alpha=16.0, targets="all-linear"), preset="tiny", mesh=mesh_4x2
    )


def _shard_shape(var):
    value = var.get_value()
    shapes = {tuple(s.data.shape) for s in value.addressable_shards}
    assert len(shapes) == 1
    return shapes.pop()


def test_lora_params_sit_on_projected_shardings(lora_model):
    layer0, layer5 = lora_model.layers[0], lora_model.layers[5]
    r = 8
    expected = {
        # module, weight name: (A shard shape, B shard shape) on fsdp=4, tp=2
        (layer0.attn.q_einsum, "w"): ((128 // 4, r), (r, 8 // 2, 32)),
        (layer0.attn.kv_einsum, "w"): ((128 // 4, r), (r, 2, 4 // 2, 32)),
        (layer0.attn.attn_vec_einsum, "w"): ((8 // 2, 32, r), (r, 128 // 4)),
        (layer5.attn.k_einsum, "w"): ((128 // 4, r), (r, 2 // 2, 64)),  # K = V global layer
        (layer0.mlp.gate_proj, "kernel"): ((128 // 4, r), (r, 512 // 2)),
        (layer0.mlp.down_proj, "kernel"): ((512 // 2, r), (r, 128 // 4)),
    }
    for (module, name), (a_shard, b_shard) in expected.items():
        assert _shard_shape(getattr(module, name + "_lora_a")) == a_shard, (module, name)
        assert _shard_shape(getattr(module, name + "_lora_b")) == b_shard, (module, name)
    specs = _sharding.lora_specs(lora_model)
    assert len(specs) == 6 * 6  # q, kv (or k = v), o, gate, up, down on each of the 6 layers


def test_jitted_optimizer_is_replicated_until_fixed(lora_model, mesh_4x2):
    import optax
    from flax import nnx

    # The trap: an optimizer built inside jit has zeros with no sharding to inherit.
    optimizer = nnx.jit(lambda m: nnx.Optimizer(m, optax.adamw(1e-3), wrt=nnx.LoRAParam))(lora_model)
    before = {r["what"]: r for r in _sharding.memory_table(lora_model, optimizer)}
    opt_before = before["optimizer state"]
    assert opt_before["replicated_mib"] == pytest.approx(opt_before["total_mib"], rel=1e-3)
    assert opt_before["max_per_device_mib"] == pytest.approx(opt_before["total_mib"], rel=1e-3)
    with pytest.raises(ValueError, match="replicated on every device"):
        fit.check_no_large_replicas(lora_model, optimizer)

    moved = fit.shard_train_state(lora_model, optimizer, mesh=mesh_4x2)
    assert moved["lora"] == 0  # Qwix placed eagerly-created adapters right already
    assert moved["optimizer"] == 2 * 72  # mu and nu of every LoRA A and B
    fit.check_no_large_replicas(lora_model, optimizer)
    after = {r["what"]: r for r in _sharding.memory_table(lora_model, optimizer)}
    assert after["optimizer state"]["replicated_mib"] < 0.001
    # mu/nu are laid out exactly like the LoRA params they track: twice their per-device bytes.
    assert after["optimizer state"]["max_per_device_mib"] == pytest.approx(
        2 * after["LoRA params"]["max_per_device_mib"], rel=0.01
    )
    mu = optimizer.opt_state[0].mu
    assert _shard_shape(mu["layers"][5]["attn"]["k_einsum"]["w_lora_b"]) == (8, 1, 64)
    assert fit.shard_train_state(lora_model, optimizer, mesh=mesh_4x2) == {"lora": 0, "optimizer": 0}


def test_abstract_state_gets_the_same_shardings(mesh_4x2):
    import jax
    import optax
    from flax import nnx

    from cookbook import lora

    model = lora.abstract_lora_model("tiny", lora.LoraConfig(rank=8, alpha=16.0, targets="all-linear"))
    _sharding.set_lora_specs(model)
    state = _sharding.abstract_with_shardings(nnx.state(model, nnx.LoRAParam), mesh_4x2)
    b = state["layers"][5]["attn"]["k_einsum"]["w_lora_b"].get_value()
    assert isinstance(b, jax.ShapeDtypeStruct)
    assert b.sharding.shard_shape(b.shape) == (8, 1, 64)
    opt = _sharding.abstract_optimizer_state(optax.adamw(1e-3), state, mesh_4x2)
    nu_b = opt[0].nu["layers"][5]["attn"]["k_einsum"]["w_lora_b"]
    nu_b = nu_b.get_value() if hasattr(nu_b, "get_value") else nu_b
    assert nu_b.sharding.spec == b.sharding.spec
