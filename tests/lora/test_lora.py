"""cookbook.lora: PEFT <-> Qwix names, coverage checks, LoRA application and parameter counts."""

from __future__ import annotations

import re

import numpy as np
import pytest

from cookbook import lora as L
from cookbook import models
from cookbook.lora import _apply, _config, _targets

ALL7 = L.LoraConfig(rank=4, alpha=8.0)


# ------------------------------------------------------------------------------------
# Name translation (pure Python, instant)


@pytest.mark.jax_only
def test_default_targets_cover_every_weight_including_k_eq_v():
    path = L.qwix_module_path(ALL7, "gemma4_31b")
    got = {pr.tunix_path for pr in _targets.matched_projections(path, "gemma4_31b")}
    assert got == {pr.tunix_path for pr in _targets.projections("gemma4_31b")}
    assert len(got) == 60 * 6
    # the 10 global layers' K (= V) weight is attn/k_einsum and is selected
    assert all(f"layers/{i}/attn/k_einsum" in got for i in models.get_preset("gemma4_31b").global_layers)
    assert L.hf_target_modules(path, "gemma4_31b") == list(L.HF_PROJECTIONS)


@pytest.mark.parametrize(
    "targets, leaves",
    [
        (("q_proj", "o_proj"), {"attn/q_einsum", "attn/attn_vec_einsum"}),
        (("k_proj", "v_proj"), {"attn/kv_einsum", "attn/k_einsum"}),
        (("gate_proj", "up_proj", "down_proj"), {"mlp/gate_proj", "mlp/up_proj", "mlp/down_proj"}),
        ("all-linear", set(L.TUNIX_TO_HF)),
        (r".*\.(q_proj|down_proj)", {"attn/q_einsum", "mlp/down_proj"}),
    ],
)
@pytest.mark.jax_only
def test_peft_targets_translate_and_round_trip(targets, leaves):
    p = models.get_preset("tiny")
    path = L.qwix_module_path(targets, p)
    got = _targets.matched_projections(path, p)
    assert {pr.tunix_path.split("/", 2)[2] for pr in got} == leaves
    assert {pr.layer for pr in got} == set(range(p.num_layers))
    back = L.hf_target_modules(path, p)
    assert L.qwix_module_path(tuple(back), p) == path


@pytest.mark.jax_only
def test_kv_einsum_regex_on_31b_is_caught_and_explained():
    with pytest.raises(_config.LoraCoverageError, match=r"k_proj is adapted on 50 of 60 layers.*k_einsum"):
        _targets.check_module_path(".*kv_einsum", "gemma4_31b")
    with pytest.raises(_config.LoraCoverageError, match="global layers, where K = V"):
        L.hf_target_modules(".*(q_einsum|kv_einsum|attn_vec_einsum)", "gemma4_31b")
    # the fix suggested by the message works
    _targets.check_module_path(".*(kv_einsum|k_einsum)", "gemma4_31b")


@pytest.mark.jax_only
def test_targets_that_match_nothing_or_split_kv_fail_loudly():
    with pytest.raises(_config.LoraCoverageError, match="match no projection"):
        L.qwix_module_path(("qkv_proj",), "tiny")
    with pytest.raises(_config.LoraCoverageError, match="matches no projection"):
        L.qwix_module_path(r".*\.lm_head", "tiny")
    with pytest.raises(_config.LoraCoverageError, match="matches no projection"):
        _targets.check_module_path(".*kv_proj", "tiny")
    with pytest.raises(_config.LoraCoverageError, match="k_proj and v_proj together"):
        L.qwix_module_path(("k_proj",), "tiny")


@pytest.mark.jax_only
def test_partial_layers_need_explicit_consent():
    targets = r".*layers\.[0-2]\.self_attn\.q_proj"
    with pytest.raises(_config.LoraCoverageError, match="q_proj is adapted on 3 of 6 layers"):
        L.qwix_module_path(targets, "tiny")
    path = L.qwix_module_path(targets, "tiny", allow_partial=True)
    assert [pr.tunix_path for pr in _targets.matched_projections(path, "tiny")] == [
        f"layers/{i}/attn/q_einsum" for i in range(3)
    ]
    assert L.hf_target_modules(path, "tiny", allow_partial=True) == [f"layers.{i}.self_attn.q_proj" for i in range(3)]


@pytest.mark.jax_only
def test_coverage_rows_show_absent_v_on_global_layers():
    rows = _targets.lora_targets_by_layer("gemma4_31b", ALL7)
    assert len(rows) == 60
    by_kind = _targets.coverage_by_kind(rows)
    assert by_kind["global"]["v_proj"] == "absent" and by_kind["global"]["k_proj"] == "10/10"
    assert by_kind["sliding"]["v_proj"] == "50/50"
    assert rows[5]["tunix"][1] == "attn/k_einsum" and rows[0]["tunix"][1] == "attn/kv_einsum"
    table = _targets.format_coverage(rows)
    assert len(table.splitlines()) == 61


@pytest.mark.jax_only
def test_counts_differ_from_peft_only_by_the_shared_kv_a():
    p = models.get_preset("gemma4_31b")
    cfg = L.LoraConfig(rank=64, alpha=64.0)
    # PEFT's count for the paper's configuration, computed from the shapes by hand
    d, f, r = p.embed_dim, p.hidden_dim, 64
    sliding = r * ((d + 32 * 256) + 2 * (d + 16 * 256) + (32 * 256 + d) + 2 * (d + f) + (f + d))
    glob = r * ((d + 32 * 512) + (d + 4 * 512) + (32 * 512 + d) + 2 * (d + f) + (f + d))
    assert _apply.peft_lora_params(p, cfg) == 50 * sliding + 10 * glob == 489_717_760
    assert _apply.kv_shared_a_params(p, cfg) == 50 * d * r
    assert L.expected_lora_params(p, cfg) == _apply.peft_lora_params(p, cfg) - 50 * d * r


@pytest.mark.jax_only
def test_projections_match_the_abstract_tunix_model():
    for name in ("tiny", "gemma4_31b"):
        p = models.get_preset(name)
        shapes = dict(_apply.tunix_weight_paths(name))
        assert set(shapes) == {pr.tunix_path for pr in _targets.projections(p)}
        for pr in _targets.projections(p):
            size = int(np.prod(shapes[pr.tunix_path]))
            assert size == pr.in_features * pr.out_features * len(pr.hf_names), pr


# ------------------------------------------------------------------------------------
# Applying LoRA with Qwix, against PEFT on the same checkpoint


@pytest.fixture(scope="module")
def tiny_tunix(tiny_base):
    from cookbook import models

    return models.load_tunix_model(tiny_base, "tiny")


def test_apply_lora_count_equals_peft_on_the_same_checkpoint(tiny_base, tiny_tunix):
    import peft
    import transformers

    cfg = L.LoraConfig(rank=4, alpha=8.0, targets="all-linear")
    lora_model = L.apply_lora(tiny_tunix, cfg, preset="tiny")
    qwix_count = L.count_lora_params(lora_model)
    assert qwix_count == L.expected_lora_params("tiny", cfg) > 0
    assert L.count_lora_params(tiny_tunix) == 0  # the base model is left alone

    hf = transformers.Gemma4ForConditionalGeneration.from_pretrained(tiny_base)
    pm = peft.get_peft_model(
        hf,
        peft.LoraConfig(
            r=4,
            lora_alpha=8,
            target_modules=L.hf_target_modules(L.qwix_module_path(cfg, "tiny"), "tiny"),
        ),
    )
    peft_count, _ = pm.get_nb_trainable_parameters()
    # PEFT has a separate A for k_proj and v_proj; Tunix stacks K and V, Qwix shares A.
    assert peft_count == _apply.peft_lora_params("tiny", cfg)
    assert peft_count - qwix_count == _apply.kv_shared_a_params("tiny", cfg) == 5 * 128 * 4
    assert not any(".v_proj" in n and "layers.5." in n for n in pm.targeted_module_names)

    # Every LoRA parameter sits on a targeted weight, with the Qwix shapes expected.
    shapes = _apply.lora_param_shapes(lora_model)
    assert shapes["layers/5/attn/k_einsum/w_lora_a"] == (128, 4)
    assert shapes["layers/5/attn/k_einsum/w_lora_b"] == (4, 2, 64)
    assert shapes["layers/0/attn/kv_einsum/w_lora_b"] == (4, 2, 4, 32)
    assert {re.sub(r"/(w|kernel)_lora_[ab]$", "", k) for k in shapes} == {
        pr.tunix_path for pr in _targets.projections("tiny")
    }


def test_lora_starts_as_identity_and_dropout_is_live(tiny_tunix):
    import jax.numpy as jnp
    from flax import nnx

    inputs = L.dummy_inputs(seq_len=8)
    tokens = jnp.arange(16, dtype=jnp.int32).reshape(2, 8) + 30
    inputs = {
        **inputs,
        "tokens": tokens,
        "positions": jnp.broadcast_to(jnp.arange(8), (2, 8)),
        "attention_mask": jnp.broadcast_to(jnp.tril(jnp.ones((8, 8), bool)), (2, 8, 8)),
    }
    base_logits, _ = tiny_tunix(**inputs)
    lm = L.apply_lora(tiny_tunix, L.LoraConfig(rank=4, alpha=8.0, targets=("q_proj", "o_proj")), preset="tiny")
    lora_logits, _ = lm(**inputs)
    # B = 0 at the start: the same logits up to float32 rounding of the logits' own scale
    scale = float(np.abs(base_logits).max())
    np.testing.assert_allclose(lora_logits, base_logits, rtol=0, atol=1e-6 * scale)
    # a non-zero B changes the output
    for _, v in nnx.state(lm, nnx.LoRAParam).flat_state():
        v.set_value(jnp.full(v.get_value().shape, 0.05, v.get_value().dtype))
    assert float(jnp.abs(lm(**inputs)[0] - base_logits).max()) > 1e-3

    drop = L.apply_lora(tiny_tunix, L.LoraConfig(rank=4, alpha=8.0, dropout=0.5), preset="tiny")
    for _, v in nnx.state(drop, nnx.LoRAParam).flat_state():
        v.set_value(jnp.full(v.get_value().shape, 0.05, v.get_value().dtype))
    a, b = drop(**inputs)[0], drop(**inputs)[0]
    assert float(jnp.abs(a - b).max()) > 1e-4  # Qwix's LoRA dropout draws new masks per call

    # the evaluation view: same LoRA weights, no dropout, deterministic
    view = _apply.without_lora_dropout(drop, L.LoraConfig(rank=4, alpha=8.0, dropout=0.5), preset="tiny")
    c, d = view(**inputs)[0], view(**inputs)[0]
    np.testing.assert_array_equal(c, d)
    no_drop = L.apply_lora(tiny_tunix, L.LoraConfig(rank=4, alpha=8.0), preset="tiny")
    nnx.update(no_drop, nnx.state(drop, nnx.LoRAParam))
    np.testing.assert_allclose(c, no_drop(**inputs)[0], rtol=0, atol=1e-6 * scale)  # same weights, same ops
    assert float(jnp.abs(c - base_logits).max()) > 1e-3


@pytest.mark.jax_only
def test_apply_lora_is_immune_to_the_remat_trap():
    """Qwix inside a remat-wrapped call creates no adapters; apply_lora turns remat off first.

    Abstract (nnx.eval_shape) models: the same code path, no weights, no op compilation.
    """
    import qwix
    from flax import nnx
    from tunix.models.gemma4 import model as gemma4

    p = models.get_preset("tiny")
    cfg = L.LoraConfig(rank=4, alpha=8.0)
    provider = qwix.LoraProvider(module_path=L.qwix_module_path(cfg, p), rank=4, alpha=8.0)

    def raw_qwix():
        base = gemma4.Gemma4(p.tunix_config(remat="decoder"), rngs=nnx.Rngs(0))
        return qwix.apply_lora_to_model(base, provider, rngs=nnx.Rngs(0), **L.dummy_inputs())

    def cookbook_way():
        base = gemma4.Gemma4(p.tunix_config(remat="decoder"), rngs=nnx.Rngs(0))
        lm = L.apply_lora(base, cfg, preset=p, remat="block")
        return base, lm

    assert L.count_lora_params(nnx.eval_shape(raw_qwix)) == 0  # the trap itself
    base, lm = nnx.eval_shape(cookbook_way)
    assert L.count_lora_params(lm) == L.expected_lora_params(p, cfg) > 0
    assert lm.config.remat_config.name == "BLOCK"
    assert base.config.remat_config.name == "DECODER"  # the caller's model keeps its setting


@pytest.mark.jax_only
def test_apply_lora_refuses_a_wrong_count():
    from flax import nnx
    from tunix.models.gemma4 import model as gemma4

    small_cfg = models.get_preset("tiny").with_overrides(num_layers=5)  # no global layer
    with pytest.raises(_config.LoraApplicationError, match="need"):
        nnx.eval_shape(
            lambda: L.apply_lora(gemma4.Gemma4(small_cfg.tunix_config(), rngs=nnx.Rngs(0)), ALL7, preset="tiny")
        )


@pytest.mark.jax_only
def test_apply_lora_on_mesh_shards_adapters_like_their_weights(tiny_base, mesh_4x2):
    from cookbook import models

    model = models.load_tunix_model(tiny_base, "tiny", mesh=mesh_4x2)
    lm = L.apply_lora(model, L.LoraConfig(rank=4, alpha=8.0, targets=("q_proj",)), preset="tiny", mesh=mesh_4x2)
    from flax import nnx

    state = dict(nnx.state(lm, nnx.LoRAParam).flat_state())
    a = state[("layers", 0, "attn", "q_einsum", "w_lora_a")].get_value()
    # q_einsum.w is (N, D, H) sharded ("tp", "fsdp", None): A (D, r) follows D onto fsdp
    assert a.shape == (128, 4)
    assert a.sharding.spec[0] == "fsdp"
    assert {s.data.shape for s in a.addressable_shards} == {(32, 4)}


@pytest.mark.jax_only
def test_parse_targets_reads_names_all_linear_and_regexes():
    assert L.parse_targets("q_proj, v_proj") == ("q_proj", "v_proj")
    assert L.parse_targets("all-linear") == "all-linear"
    assert L.parse_targets(r".*\.(q_proj|v_proj)") == r".*\.(q_proj|v_proj)"
    assert L.parse_targets("layers.5.self_attn.k_proj") == ("layers.5.self_attn.k_proj",)
    with pytest.raises(ValueError, match="no LoRA targets"):
        L.parse_targets(" , ")


@pytest.mark.parametrize("module_path", [".*kv_einsum", ".*(q_einsum|k_einsum)", r"layers/[0-2]/mlp/.*"])
@pytest.mark.jax_only
def test_regex_coverage_is_what_qwix_really_creates(module_path):
    """coverage_rows evaluates the regex on our layer list; coverage_of_model reads Qwix's result."""
    model = _apply.abstract_qwix_model("tiny", module_path, rank=4, alpha=8.0)
    assert _apply.coverage_of_model(model, "tiny") == _targets.coverage_rows(module_path, "tiny")
    matrix = _targets.coverage_matrix(_apply.coverage_of_model(model, "tiny"))
    assert matrix.shape == (6, 7) and matrix[5, 2] == -1  # no v_proj on the K = V layer


def test_peft_count_on_the_meta_device_matches_the_formula():
    for targets in (L.HF_PROJECTIONS, ("q_proj", "o_proj"), "all-linear"):
        cfg = L.LoraConfig(rank=8, alpha=16.0, targets=targets)
        assert _apply.peft_trainable_params("tiny", cfg) == _apply.peft_lora_params("tiny", cfg)
