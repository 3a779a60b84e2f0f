"""cookbook.lora QLoRA: which weights Qwix quantizes, the tile check, and their bytes.

The counts and bytes are read from a real Qwix-quantized tiny model, not from the
functions under test.
"""

import math

import numpy as np
import pytest

from cookbook import lora, models
from cookbook.lora import _quant

pytestmark = pytest.mark.jax_only


@pytest.fixture(scope="module")
def qlora_tiny():
    """Tiny, nf4 tile 32, LoRA on q_proj only (the rest of the base must be quantized too)."""
    from flax import nnx
    from tunix.models.gemma4 import model as gemma4

    p = models.get_preset("tiny")
    base = gemma4.Gemma4(p.tunix_config(param_dtype="float32"), rngs=nnx.Rngs(0))
    cfg = lora.LoraConfig(rank=4, alpha=8.0, targets=("q_proj",))
    return base, lora.apply_lora(base, cfg, preset=p, quantize="nf4", quant_tile=32)


def _quantized(model) -> dict[str, object]:
    from flax import nnx
    from qwix._src.providers import ptq

    out = {}
    for path, mod in model.iter_modules():
        w = mod.kernel if isinstance(mod, nnx.Linear) else getattr(mod, "w", None)
        if isinstance(w, ptq.WithAux):
            out["/".join(map(str, path))] = w.array
    return out


def test_every_decoder_projection_is_quantized_whatever_the_targets(qlora_tiny):
    base, model = qlora_tiny
    quantized = _quantized(model)
    assert sorted(quantized) == sorted(w.path for w in _quant.quantized_weights("tiny"))
    assert not _quantized(base)  # the base model is left as it was
    assert {str(a.qvalue.dtype) for a in quantized.values()} == {"uint4"}
    from flax import nnx

    adapted = {"/".join(map(str, p[:-1])) for p, _ in nnx.state(model, nnx.LoRAParam).flat_state()}
    assert adapted and all(p.endswith("q_einsum") for p in adapted)


def test_quantized_bytes_are_what_qwix_stores(qlora_tiny):
    _, model = qlora_tiny
    arrays = _quantized(model).values()
    got = _quant.quantized_bytes("tiny", "nf4", 32)
    assert got["scales"] == sum(a.scale.size * a.scale.dtype.itemsize for a in arrays)
    assert got["values"] * 2 == sum(a.qvalue.size for a in arrays)  # 4 bits each, packed two per byte
    assert got["bf16"] == 2 * sum(math.prod(w.shape) for w in _quant.quantized_weights("tiny"))


def test_31b_nf4_base_weighs_a_quarter_plus_scales():
    got = _quant.quantized_bytes("gemma4_31b", "nf4", 128)
    assert got["values"] * 4 == got["bf16"]
    assert 0 < got["scales"] < got["values"] / 10  # fp32 scale per 128 weights: 1/16 of 4-bit values


def test_a_tile_that_does_not_divide_is_refused_before_anything_is_built():
    with pytest.raises(
        ValueError, match=r"tile 512 does not divide .*attn_vec_einsum.*Use a tile .*: 32, 64, 128, 256"
    ):
        lora.check_quant_tile("gemma4_31b", "nf4", 512)
    with pytest.raises(ValueError, match=r"tile 128 .* tiny.*: 32"):
        lora.check_quant_tile("tiny", "nf4", 128)
    with pytest.raises(ValueError, match="nf4 needs a tile size"):
        lora.check_quant_tile("tiny", "nf4", None)
    with pytest.raises(ValueError, match="unknown quantization 'int4'.*nf4, int8, fp8"):
        lora.check_quant_tile("tiny", "int4", 32)
    lora.check_quant_tile("tiny", "int8", None)  # per channel: fine
    assert _quant.working_tiles("gemma4_31b") == [32, 64, 128, 256]


def test_qlora_on_the_moe_is_refused_in_one_line_before_anything_is_built(capsys):
    """The experts run through ragged_dot, which Qwix's PTQ does not reach: refused by name, from
    the tile check, the train config, the CLI and the planner alike (it used to die in the compile
    with an AttributeError on the MoE block). bf16 on the same twin is not refused."""
    from cookbook import fit, harness, train

    for preset in ("tiny_26b_a4b", "gemma4_26b_a4b"):
        for q in ("nf4", "int8"):
            with pytest.raises(ValueError, match=rf"QLoRA \({q}\) on {preset}: its \d+ experts .*ragged_dot"):
                lora.check_quant_tile(preset, q, 32)
    with pytest.raises(ValueError, match="experts"):
        train.train_preset("tiny_26b_a4b").replace(quantize="nf4", quant_tile=32)
    lora.check_quant_tile("tiny_26b_a4b", None, 32)
    lora.check_quant_tile("tiny_e2b", "nf4", 32)  # per-layer inputs and KV sharing: no experts
    assert harness.main(["train", "--preset", "tiny_26b_a4b", "--quantize", "nf4", "--out", "unused"]) != 0
    err = capsys.readouterr().err.strip()
    assert "ragged_dot" in err and len(err.splitlines()) == 1, err
    with pytest.raises(ValueError, match="experts"):  # before any compile (the planner's check)
        fit.plan(
            fit.PlanConfig(model_preset="gemma4_26b_a4b", slice_name="v5e-8", batch_size=4, quantize="nf4"),
            use_cache=False,
        )


@pytest.mark.slow  # over ~30 s in the profile (tests/profile.json): make test only
def test_qlora_on_the_e2b_twin_scales_the_quantized_per_layer_projection_as_tunix_does():
    """E2B/E4B's model-level ``per_layer_model_projection`` is an Einsum whose weight Tunix scales
    (``w_scale`` = embed_dim ** -0.5) before the einsum. Quantized, the scale goes into the
    quantization scales (it used to raise NotImplementedError, so no QLoRA model of E2B/E4B could be
    built): the nf4 model's logits are those of the same model with every quantized weight replaced
    by Qwix's dequantization of it; the control drops that one scale and lands far away."""
    from flax import nnx
    from qwix._src.core import qarray
    from qwix._src.providers import ptq
    from tunix.models.gemma4 import model as gemma4

    p = models.get_preset("tiny_e2b")
    cfg = lora.LoraConfig(rank=4, alpha=8.0)

    def build(quantize):
        base = gemma4.Gemma4(p.tunix_config(param_dtype="float32"), rngs=nnx.Rngs(0))
        return lora.apply_lora(base, cfg, preset=p, quantize=quantize, quant_tile=32)

    qmodel, dense = build("nf4"), build(None)
    modules = dict(dense.iter_modules())
    replaced = 0
    for path, mod in qmodel.iter_modules():
        w = mod.kernel if isinstance(mod, nnx.Linear) else getattr(mod, "w", None)
        if isinstance(w, ptq.WithAux):
            target = modules[path]
            param = target.kernel if isinstance(target, nnx.Linear) else target.w
            param.value = qarray.dequantize(w.array).astype(param.value.dtype)
            replaced += 1
    projection = dense.embedder.per_layer_model_projection
    assert replaced > 1 and isinstance(qmodel.embedder.per_layer_model_projection.w, ptq.WithAux)
    tokens = np.arange(1, 9, dtype=np.int32)[None]
    got, want = models.tunix_logits(qmodel, tokens), models.tunix_logits(dense, tokens)
    scale = float(np.abs(want).max())
    # Measured 2.8e-6 of the largest logit (float32 rounding: Qwix dequantizes inside the einsum);
    # the bound is ~35 x that, the control below is 0.96.
    assert np.abs(got - want).max() < 1e-4 * scale
    projection.w_scale = None  # the control: the same weights without Tunix's scale
    assert np.abs(models.tunix_logits(dense, tokens) - want).max() > 1e-2 * scale


def test_the_train_config_refuses_a_bad_tile_and_the_cli_flags_reach_it():
    from cookbook import train

    with pytest.raises(ValueError, match="tile 128"):
        train.TrainConfig(quantize="nf4", quant_tile=128)
    cfg = train.TrainConfig(quantize="fp8", quant_tile=32)
    assert train.TrainConfig.from_dict(cfg.to_dict()) == cfg
    assert "--quantize fp8" in train.cli_command(cfg, out="r") and "--quant-tile 32" in train.cli_command(cfg, out="r")


def test_lora_on_an_nf4_base_has_gradients_and_moves_off_the_base(qlora_tiny):
    import jax
    import jax.numpy as jnp
    from flax import nnx

    base, model = qlora_tiny
    tokens = np.arange(1, 9, dtype=np.int32)[None]
    gap = np.abs(models.tunix_logits(model, tokens) - models.tunix_logits(base, tokens)).max()
    assert gap > 0  # the quantization error (B = 0: the adapters add nothing yet)
    graphdef, lora_state, rest = nnx.split(model, nnx.LoRAParam, ...)

    def loss(lo):
        m = nnx.merge(graphdef, lo, rest)
        out, _ = m(jnp.asarray(tokens), jnp.arange(8)[None], None, jnp.tril(jnp.ones((1, 8, 8), bool)))
        return jnp.mean(out.astype(jnp.float32) ** 2)

    grads = jax.jit(jax.grad(loss))(lora_state)
    norms = [float(jnp.linalg.norm(g)) for g in jax.tree.leaves(grads)]
    assert norms and all(np.isfinite(norms)) and max(norms) > 0


def test_each_dequantization_waits_for_its_activation_and_values_are_qwixs(qlora_tiny):
    """``cookbook.lora.lora_provider`` ties every quantized weight to its activation with an
    ``optimization_barrier`` (so the compiler cannot dequantize early and hold bf16 copies);
    the logits and LoRA gradients are those of Qwix's plain provider (the control)."""
    import jax
    import jax.numpy as jnp
    import qwix
    from flax import nnx
    from tunix.models.gemma4 import model as gemma4

    from cookbook.lora import _apply

    _, model = qlora_tiny
    p = models.get_preset("tiny")
    cfg = lora.LoraConfig(rank=4, alpha=8.0, targets=("q_proj",))
    plain = pytest.MonkeyPatch()
    plain.setattr(_apply, "lora_provider", lambda rules, quantize: qwix.LoraProvider(rules))
    try:
        control = lora.apply_lora(
            gemma4.Gemma4(p.tunix_config(param_dtype="float32"), rngs=nnx.Rngs(0)),
            cfg,
            preset=p,
            quantize="nf4",
            quant_tile=32,
        )
    finally:
        plain.undo()
    tokens = np.arange(1, 9, dtype=np.int32)[None]

    def parts(m):
        graphdef, lora_state, rest = nnx.split(m, nnx.LoRAParam, ...)

        def loss(lo):
            out, _ = nnx.merge(graphdef, lo, rest)(
                jnp.asarray(tokens), jnp.arange(8)[None], None, jnp.tril(jnp.ones((1, 8, 8), bool))
            )
            return jnp.mean(out.astype(jnp.float32) ** 2)

        barriers = str(jax.make_jaxpr(loss)(lora_state)).count("optimization_barrier")
        return barriers, jax.jit(jax.grad(loss))(lora_state)

    tied, grads = parts(model)
    untied, control_grads = parts(control)
    assert untied == 0 and tied >= len(_quantized(model))  # every quantized matmul, in this forward
    np.testing.assert_array_equal(models.tunix_logits(model, tokens), models.tunix_logits(control, tokens))
    pairs = [
        (np.asarray(a), np.asarray(b))
        for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(control_grads), strict=True)
    ]
    scale = max(float(np.abs(b).max()) for _, b in pairs)
    worst = max(float(np.abs(a - b).max()) for a, b in pairs) / scale
    print(f"LoRA gradients, tied vs Qwix's provider: largest difference {worst:.2e} of the largest gradient")
    # Jitted, the barrier changes how XLA fuses, so float32 sums round differently: measured
    # 1e-5 x the largest gradient here (eager logits are identical); 2e-4 allows 20x that.
    assert scale > 0 and worst < 2e-4


def test_quantized_memory_table_per_preset_and_kind():
    """Notebook 06's QLoRA memory table: the run's preset at its tile, the others at their default,
    each preset once. Independent of how it is summed: int8 and fp8 store a byte per value and nf4
    half a byte, with the same scales, so int8's ratio is nf4's plus exactly 0.25 (of bf16's 2
    bytes); a 4-byte scale per ``tile`` values adds at most 2 / tile to nf4's 0.25."""
    rows = lora.quantized_memory_table(["tiny", "gemma4_31b", "tiny"], tile=32)
    assert [(r["preset"], r["quantize"], r["tile"]) for r in rows] == [
        (p, k, t) for p, t in (("tiny", 32), ("gemma4_31b", 128)) for k in lora.QUANT_TYPES
    ]
    for preset in ("tiny", "gemma4_31b"):
        by = {r["quantize"]: r for r in rows if r["preset"] == preset}
        assert by["int8"]["ratio"] == pytest.approx(by["nf4"]["ratio"] + 0.25) == pytest.approx(by["fp8"]["ratio"])
        assert 0.25 < by["nf4"]["ratio"] <= 0.25 + 2 / by["nf4"]["tile"]
        assert by["nf4"]["quantized GiB"] == pytest.approx(by["nf4"]["ratio"] * by["nf4"]["bf16 GiB"])
    assert [r["tile"] for r in lora.quantized_memory_table(["tiny"])] == [lora.default_quant_tile("tiny")] * 3
    assert len(lora.format_quantized_memory(rows).splitlines()) == len(rows)


def test_a_quantized_base_on_a_mesh_stays_sharded_like_its_weights(tiny_12b_base):
    """QLoRA on fsdp = 8: Qwix creates the quantized weights inside the initialising jit, which
    returned them replicated (every device held the whole quantized base). Now each ``qvalue`` is
    sharded as its bf16 weight was, and a scale whose tiles the mesh does not divide (12B's
    ``kv_einsum``: 128 / tile 32 = 4 tiles, fsdp 8) is replicated on that axis only."""
    import jax
    from flax import nnx

    from cookbook import core, mesh

    m = mesh.make_mesh(8, 1)
    p = models.get_preset("tiny_12b")
    base = models.load_tunix_model(tiny_12b_base, p, mesh=m)
    weights = {
        "/".join(map(str, path)): var.get_value().sharding for path, var in nnx.state(base, nnx.Param).flat_state()
    }
    model = lora.apply_lora(base, lora.LoraConfig(rank=4, alpha=8.0), preset=p, mesh=m, quantize="nf4", quant_tile=32)
    codes, scales, uneven = 0, 0, 0
    for path, var in nnx.state(model, nnx.Param).flat_state():
        if path[-2:-1] != ("array",):
            continue
        x, weight = var.get_value(), "/".join(map(str, path[:-2]))
        want = core.divisible_spec(core.variable_spec(var), x.shape, m)
        assert x.sharding.is_equivalent_to(jax.sharding.NamedSharding(m, jax.sharding.PartitionSpec(*want)), x.ndim)
        if path[-1] == "qvalue":  # the codes: exactly the bf16 weight's sharding, never whole on a device
            codes += 1
            assert x.sharding.is_equivalent_to(weights[weight], x.ndim) and not x.sharding.is_fully_replicated, weight
        else:
            scales += 1
            uneven += want != core.variable_spec(var)
    assert codes == scales > 0 and 0 < uneven < scales  # only the scales 8 does not divide are replicated
