"""cookbook.lora on the rest of the Gemma 4 family: E2B/E4B, 12B and 26B-A4B structures.

Checked against what the libraries really do, on the random twins (``tiny_e2b``, ``tiny_12b``,
``tiny_26b_a4b``) and abstractly on the real presets: Qwix's LoRA parameters, PEFT's trainable
count and targeted modules on the transformers twin, and the logits of Tunix + Qwix LoRA against
transformers + PEFT after the Tunix -> PEFT conversion, bounded by transformers' own float32
error with controls beside it. Decisions under test (see ``cookbook/lora/_targets.py``): no
K/V LoRA on KV-shared layers; ``"all-linear"`` adapts the per-layer-input projections and the
MoE router, as PEFT's does; the experts are refused; on 12B's K = V global layers, one LoRA on
the single shared K/V head (``k_einsum``; PEFT's ``k_proj``, no ``v_proj`` module there).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from cookbook import core, models
from cookbook import lora as L
from cookbook.core import _numerics
from cookbook.lora import _apply, _config, _targets
from cookbook.models import _loader, _parity

TWINS = ("tiny_e2b", "tiny_12b", "tiny_26b_a4b")
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
RANK, ALPHA = 4, 8.0


def _cfg(targets) -> L.LoraConfig:
    return L.LoraConfig(rank=RANK, alpha=ALPHA, targets=targets)


def _shared_kv(preset, path: str) -> bool:
    m = re.match(r"layers/(\d+)/attn/kv?_einsum/", path)
    return bool(m) and int(m.group(1)) >= models.get_preset(preset).first_kv_shared_layer


# ------------------------------------------------------------------------------------
# Tables and Qwix on abstract models (no weights): the twins and the real presets


@pytest.mark.jax_only
@pytest.mark.parametrize("name", [*TWINS, "gemma4_e2b", "gemma4_e4b", "gemma4_12b", "gemma4_26b_a4b"])
def test_all_linear_is_what_qwix_creates_with_no_kv_on_shared_layers(name):
    p = models.get_preset(name)
    cfg = _cfg("all-linear")
    model = L.abstract_lora_model(p, cfg)  # apply_lora itself checks the count against the table
    shapes = _apply.lora_param_shapes(model)
    assert L.count_lora_params(model) == L.expected_lora_params(p, cfg) > 0
    assert _apply.coverage_of_model(model, p) == _targets.lora_targets_by_layer(p, cfg)
    assert not [k for k in shapes if _shared_kv(p, k)]
    adapted = {re.sub(r"/\w+_lora_[ab]$", "", k) for k in shapes}
    assert adapted == {pr.tunix_path for pr in _targets.projections(p)}
    if p.per_layer_input_dim:
        assert shapes["embedder/per_layer_model_projection/w_lora_b"] == (RANK, p.num_layers, p.per_layer_input_dim)
        assert shapes[f"layers/{p.num_layers - 1}/per_layer_input_gate/w_lora_a"] == (p.embed_dim, RANK)
        assert shapes[f"layers/{p.num_layers - 1}/mlp/down_proj/kernel_lora_a"] == (
            2 * p.hidden_dim if p.double_wide_mlp else p.hidden_dim,
            RANK,
        )
    for i in p.global_layers:  # K = V (31B, 12B, 26B-A4B): one adapter on the shared K/V projection
        if p.k_eq_v_global and i < p.first_kv_shared_layer:
            kv = p.effective_global_kv_heads
            assert shapes[f"layers/{i}/attn/k_einsum/w_lora_b"] == (RANK, kv, p.global_head_dim)
            assert f"layers/{i}/attn/kv_einsum/w_lora_b" not in shapes
    if p.is_moe:  # the router only: nothing on the experts (gating_einsum, linear)
        moe = {k for k in shapes if "/moe/" in k}
        assert moe == {f"layers/{i}/moe/router_logits_lora_{ab}" for i in range(p.num_layers) for ab in "ab"}


@pytest.mark.jax_only
def test_kv_shared_layers_are_absent_not_missed():
    p = models.get_preset("tiny_e2b")
    rows = _targets.lora_targets_by_layer(p, _cfg(ATTENTION))  # no coverage error: nothing is missed
    first = p.first_kv_shared_layer
    assert [r["k_proj"] for r in rows[:-1]] == [True] * first + [None] * (p.num_layers - first)
    assert rows[-1]["layer"] == "model" and rows[-1]["per_layer_model_projection"] is False
    by_kind = _targets.coverage_by_kind(rows)
    assert by_kind["sliding"]["v_proj"] == "4/4" and by_kind["global"]["k_proj"] == "1/1"
    path = L.qwix_module_path(_cfg(ATTENTION), p)
    assert "layers/(?:0|1|2|3|4)/attn/kv_einsum" in path  # named layers, not \d+ over unused modules
    assert L.hf_target_modules(path, p) == list(ATTENTION)
    table = _targets.format_coverage(_targets.lora_targets_by_layer(p, _cfg("all-linear")))
    assert len(table.splitlines()) == 1 + p.num_layers + 1 and "plmod" in table.splitlines()[0]


@pytest.mark.jax_only
@pytest.mark.parametrize(
    "targets",
    [
        ("experts",),
        ("q_proj", "experts.down_proj"),
        ("gate_up_proj",),
        r".*\.experts",
        r"model\.layers\.\d+\.experts\.gate_up_proj",
    ],
)
def test_expert_targets_are_refused_naming_what_is_missing(targets):
    with pytest.raises(
        _config.LoraCoverageError,
        match=r"name the MoE experts of preset 'tiny_26b_a4b'.*"
        r"target_parameters.*ragged_dot.*targets='all-linear'",
    ):
        L.qwix_module_path(targets, "tiny_26b_a4b")
    # the dense branch beside the experts and the router are ordinary targets
    path = L.qwix_module_path(("gate_proj", "up_proj", "down_proj", "router.proj"), "tiny_26b_a4b")
    assert L.hf_target_modules(path, "tiny_26b_a4b") == ["gate_proj", "up_proj", "down_proj", "router.proj"]
    with pytest.raises(_config.LoraCoverageError, match="match no projection"):
        L.qwix_module_path(("experts",), "tiny")  # a dense preset has no experts to refuse


@pytest.mark.jax_only
def test_pairs_on_kv_shared_layers_are_refused():
    p = models.get_preset("tiny_e2b")
    d = p.embed_dim
    pair = L.LoraPair(layer=7, module="attn.kv_einsum", a=np.zeros((d, 4)), b=np.zeros((4, 2, 1, 32)))
    with pytest.raises(
        ValueError,
        match=r"layers\.7\.attn\.kv_einsum: layer 7 of preset 'tiny_e2b' is KV-shared "
        r"\(it reuses layer 3's K/V",
    ):
        L.check_pairs_fit_preset([pair], p)


def _random_state(shapes, seed, dtype=np.float32, std=1.0) -> dict:
    rng = np.random.default_rng(seed)
    state: dict = {}
    for path, shape in shapes.items():
        node = state
        *parents, leaf = [int(q) if q.isdigit() else q for q in path.split("/")]
        for q in parents:
            node = node.setdefault(q, {})
        node[leaf] = (std * rng.normal(size=shape)).astype(dtype)
    return state


def _flat(tree, prefix=""):
    if isinstance(tree, dict):
        out = {}
        for k, v in tree.items():
            out.update(_flat(v, f"{prefix}/{k}" if prefix else str(k)))
        return out
    return {prefix: np.asarray(tree)}


@pytest.mark.jax_only
@pytest.mark.parametrize("name", TWINS)
def test_tunix_to_peft_and_back(name):
    p = models.get_preset(name)
    shapes = _apply.lora_param_shapes(L.abstract_lora_model(p, _cfg("all-linear")))
    state = _random_state(shapes, seed=1, dtype=np.float64)
    peft = L.tunix_lora_to_peft(state, p, {"rank": RANK}, vllm_kv_copy=False, layout="multimodal")
    hf = _loader.expected_hf_shapes(p)
    modules = {k.removeprefix("base_model.model.").split(".lora_")[0] for k in peft}
    assert modules == set(_targets.hf_module_names(p, "model.language_model."))
    for key, value in peft.items():  # every tensor has its HF weight's shape
        out, inp = hf[key.removeprefix("base_model.model.").split(".lora_")[0] + ".weight"]
        assert value.shape == ((RANK, inp) if ".lora_A." in key else (out, RANK)), key
    back, want = _flat(L.peft_to_tunix_lora(peft, p)), _flat(state)
    assert set(back) == set(want) == set(shapes)
    for path, value in want.items():
        if path.startswith("embedder/"):  # rescaled by sqrt(embed_dim) and back: one rounding
            np.testing.assert_allclose(back[path], value, rtol=4 * np.finfo(value.dtype).eps, atol=0)
        else:
            assert np.array_equal(back[path], value), path
    if p.per_layer_input_dim:  # the update PEFT applies, after transformers' output scale, is Tunix's
        key = "base_model.model.model.language_model.per_layer_model_projection"
        a, b = state["embedder"]["per_layer_model_projection"].values()
        tunix_update = np.einsum("dr,rnp->npd", a, b).reshape(-1, p.embed_dim)
        peft_update = (peft[f"{key}.lora_B.weight"] @ peft[f"{key}.lora_A.weight"]) * p.embed_dim**-0.5
        np.testing.assert_allclose(peft_update, tunix_update, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------------------
# On the twins' weights: Qwix against real PEFT, on a mesh, and logits through PEFT


@pytest.fixture(scope="module")
def twin_bases(tiny_e2b_base, tiny_12b_base, tiny_26b_a4b_base):
    return {"tiny_e2b": tiny_e2b_base, "tiny_12b": tiny_12b_base, "tiny_26b_a4b": tiny_26b_a4b_base}


def _released_class(p):
    """The transformers class the twin is released as (12B: Gemma4UnifiedForConditionalGeneration)."""
    import transformers

    return getattr(transformers, p.hf_architecture)


@pytest.mark.torch
@pytest.mark.parametrize(
    "name,targets",
    # The 12B twin on attention only: its MLP is tiny's, its K = V head with one KV head is the news.
    [(n, t) for n in TWINS for t in ("all-linear", ATTENTION) if not (n == "tiny_12b" and t == "all-linear")],
    ids=lambda v: v if isinstance(v, str) else "attention",
)
def test_qwix_count_equals_real_peft_on_the_transformers_twin(name, targets, twin_bases):
    import peft

    p, cfg = models.get_preset(name), _cfg(targets)
    lora_model = L.apply_lora(models.load_tunix_model(twin_bases[name], p), cfg, preset=p)
    qwix = L.count_lora_params(lora_model)
    assert qwix == L.expected_lora_params(p, cfg)
    hf = _released_class(p).from_pretrained(twin_bases[name])
    pm = peft.get_peft_model(
        hf,
        peft.LoraConfig(
            r=RANK, lora_alpha=ALPHA, target_modules=targets if isinstance(targets, str) else list(targets)
        ),
    )
    peft_count, _ = pm.get_nb_trainable_parameters()
    # PEFT gives K and V an A each where Tunix's stacked kv_einsum shares one: the only difference.
    assert peft_count == _apply.peft_lora_params(p, cfg) == _apply.peft_trainable_params(p, cfg)
    assert peft_count - qwix == _apply.kv_shared_a_params(p, cfg)
    # The very same modules: PEFT finds no k_proj/v_proj on KV-shared layers, and its
    # "all-linear" takes the per-layer-input projections and the router, never the experts.
    assert set(pm.targeted_module_names) == {
        n
        for n in _targets.hf_module_names(p, "model.language_model.")
        if isinstance(targets, str) or n.rsplit(".", 1)[-1] in targets
    }
    assert not any(".experts" in n for n in pm.targeted_module_names)
    # hf_target_modules of the cookbook's Qwix path selects the same in PEFT
    names = L.hf_target_modules(L.qwix_module_path(cfg, p), p)
    again = peft.get_peft_model(
        _released_class(p).from_pretrained(twin_bases[name]),
        peft.LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=names),
    )
    assert again.get_nb_trainable_parameters()[0] == peft_count


def _inputs(tokens):
    import jax.numpy as jnp

    b, t = tokens.shape
    return {
        "tokens": jnp.asarray(tokens, jnp.int32),
        "positions": jnp.broadcast_to(jnp.arange(t), (b, t)),
        "cache": None,
        "attention_mask": jnp.broadcast_to(jnp.tril(jnp.ones((t, t), bool)), (b, t, t)),
    }


@pytest.mark.slow  # over ~30 s in the profile (tests/profile.json): make test only
@pytest.mark.jax_only
# Not the 12B twin: its one global KV head allows no tp (tests/models/test_loader_twins.py loads it
# on 8 x 1), and its layers are tiny's but for that head (~35 s of CPU saved).
@pytest.mark.parametrize("name", ["tiny_e2b", "tiny_26b_a4b"])
def test_apply_lora_on_4x2_mesh_starts_as_identity(name, twin_bases, mesh_4x2):
    import jax.numpy as jnp
    from flax import nnx

    p = models.get_preset(name)
    base = models.load_tunix_model(twin_bases[name], p, mesh=mesh_4x2)
    lm = L.apply_lora(base, _cfg("all-linear"), preset=p, mesh=mesh_4x2)
    shapes = _apply.lora_param_shapes(lm)
    assert L.count_lora_params(lm) == L.expected_lora_params(p, _cfg("all-linear"))
    assert not [k for k in shapes if _shared_kv(p, k)]
    tokens = _parity.random_text_tokens(p, 4, 96)
    base_logits = models.tunix_logits(base, tokens, mesh_4x2)
    lora_logits = models.tunix_logits(lm, tokens, mesh_4x2)
    scale = float(np.abs(base_logits).max())
    # B = 0 at the start: the same logits up to float32 rounding of the logits' own scale
    np.testing.assert_allclose(lora_logits, base_logits, rtol=0, atol=1e-6 * scale)
    for _, v in nnx.state(lm, nnx.LoRAParam).flat_state():
        v.set_value(jnp.full(v.get_value().shape, 0.05, v.get_value().dtype))
    assert float(np.abs(models.tunix_logits(lm, tokens, mesh_4x2) - base_logits).max()) > 1e-3


def _peft_logits(base_dir, adapter_dir, tokens, dtype):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM  # each layout's released class

    kwargs = {"experts_implementation": "eager"} if dtype == "float64" else {}
    hf = AutoModelForCausalLM.from_pretrained(base_dir, dtype=getattr(torch, dtype), **kwargs)
    model = PeftModel.from_pretrained(hf, adapter_dir) if adapter_dir is not None else hf
    model = model.to(getattr(torch, dtype)).eval()
    with torch.no_grad(), core.torch_threads():  # a reference that is the same in every process
        return model(input_ids=torch.as_tensor(tokens)).logits.numpy()


@pytest.mark.torch
@pytest.mark.parametrize("name", TWINS)
def test_tunix_lora_through_peft_gives_the_same_logits(name, twin_bases, tmp_path):
    """Random non-zero A and B on every all-linear weight; Tunix -> PEFT adapter -> transformers.

    Bound: 4x transformers+PEFT's own float32 error (float32 vs float64 logits), as the dense
    merge/PEFT checks. Controls: the base without LoRA, and the one thing each structure's
    conversion does beyond a transpose (E2B: per_layer_model_projection's B rescaled by
    sqrt(embed_dim); 26B-A4B: the router's LoRA; 12B: the K = V global head's LoRA) left out.
    """
    import jax.numpy as jnp
    from flax import nnx

    p, cfg = models.get_preset(name), _cfg("all-linear")
    lm = L.apply_lora(models.load_tunix_model(twin_bases[name], p), cfg, preset=p)
    rng = np.random.default_rng(0)
    for _, v in nnx.state(lm, nnx.LoRAParam).flat_state():
        x = v.get_value()
        v.set_value(jnp.asarray(rng.normal(0, 0.1, x.shape), x.dtype))
    tokens = _parity.random_text_tokens(p, 2, 2 * p.sliding_window, seed=1)
    ours = models.tunix_logits(lm, tokens)
    tensors = L.tunix_lora_to_peft(nnx.state(lm, nnx.LoRAParam), p, cfg, layout="multimodal")
    adapter = L.write_peft_adapter(tmp_path / "adapter", tensors, rank=RANK, alpha=ALPHA, layout="multimodal")
    ref = _peft_logits(twin_bases[name], adapter, tokens, "float32")
    floor = core.float32_floor(ref, _peft_logits(twin_bases[name], adapter, tokens, "float64"))
    check = core.compare(ours, ref, floor)
    assert check["ok"], (check, floor.as_dict())

    broken = dict(tensors)
    for key in tensors:
        if ".per_layer_model_projection.lora_B" in key:  # B without the sqrt(embed_dim) rescale
            broken[key] = tensors[key] * p.embed_dim**-0.5
        if ".router.proj.lora_B" in key:  # the router's LoRA dropped
            broken[key] = np.zeros_like(tensors[key])
        if not (p.per_layer_input_dim or p.is_moe) and any(
            f".layers.{i}.self_attn.k_proj.lora_B" in key for i in p.global_layers
        ):  # 12B: the single K = V head's LoRA dropped (its k_einsum -> k_proj mapping)
            broken[key] = np.zeros_like(tensors[key])
    assert any(not np.array_equal(broken[k], tensors[k]) for k in tensors)
    wrong = L.write_peft_adapter(tmp_path / "wrong", broken, rank=RANK, alpha=ALPHA, layout="multimodal")
    controls = {
        "base without LoRA": _peft_logits(twin_bases[name], None, tokens, "float32"),
        "conversion step left out": _peft_logits(twin_bases[name], wrong, tokens, "float32"),
    }
    for label, logits in controls.items():
        _numerics.check_separated(core.compare(ours, logits, floor), label)
    print(
        name,
        {k: f"{v:.3g}" for k, v in check.items() if isinstance(v, float)},
        floor.as_dict(),
        {k: f"{core.compare(ours, v, floor)['max_over_bound']:.3g} bounds" for k, v in controls.items()},
    )
