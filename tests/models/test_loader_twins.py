"""The E2B/E4B-, 12B- and 26B-A4B-shaped twins load into Tunix and compute what transformers computes.

The twins (``tiny_e2b``, ``tiny_12b``, ``tiny_26b_a4b``) are random, CPU-sized and built through transformers,
like ``tiny``. Each parity check is bounded by transformers' own float32 error on its tokens
(``models.logit_parity``, ``cookbook.core``) and keeps controls beside it: the mistakes a mapping
or a model can make on these architectures (per-layer inputs fed to the wrong layers, a
KV-shared layer reading the wrong cache, Tunix's own MoE routing, a dropped expert scale) must
land at least ``core.CONTROL_SEPARATION`` bounds away.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from cookbook import core, models
from cookbook.core import _numerics
from cookbook.models import _loader, _parity


def _controls(model, tokens, ref, floor, mesh, changes):
    """compare() of each changed model against ``ref``; every change is undone afterwards."""
    out = {}
    for name, (get, put, change) in changes.items():
        saved = get()
        put(change(saved))
        try:
            out[name] = core.compare(models.tunix_logits(model, tokens, mesh), ref, floor)
        finally:
            put(saved)
    return out


def _param(variable):
    return (lambda: variable.value), (lambda v: setattr(variable, "value", v))


def _reference(base, preset):
    tokens = _parity.random_text_tokens(preset, 2, 2 * preset.sliding_window, seed=0)
    ref = _parity.transformers_logits(base, tokens)
    return tokens, ref, core.float32_floor(ref, _parity.transformers_logits(base, tokens, dtype="float64"))


def test_e2b_twin_matches_transformers_on_4x2_mesh(tiny_e2b_base, mesh_4x2):
    """Per-layer inputs, KV-shared layers with a double-wide MLP, one KV head: same logits."""
    import jax.numpy as jnp

    p = models.get_preset("tiny_e2b")
    model = models.load_tunix_model(tiny_e2b_base, p, mesh=mesh_4x2)
    parity = models.logit_parity(tiny_e2b_base, p, model=model, mesh=mesh_4x2)
    assert parity["within_bound"], parity
    assert parity["control_over_bound"] >= core.CONTROL_SEPARATION, parity
    tokens, ref, floor = _reference(tiny_e2b_base, p)
    e, last = model.embedder, model.layers[-1]
    controls = _controls(
        model,
        tokens,
        ref,
        floor,
        mesh_4x2,
        {
            # HF packs per-layer inputs as (layers x dim); a wrong reshape feeds them to other layers.
            "per-layer projection, layers reversed": (*_param(e.per_layer_model_projection.w), lambda w: w[:, ::-1]),
            "per-layer embedding, layers reversed": (*_param(e.per_layer_input_embedding), lambda w: w[:, ::-1]),
            "last layer's per-layer gate zeroed": (*_param(last.per_layer_input_gate.w), jnp.zeros_like),
        },
    )
    for name, c in controls.items():
        _numerics.check_separated(c, name)
    # KV sharing: the shared sliding layers read layer 3 (the last non-shared sliding layer);
    # pointing them at layer 2, also sliding, must show.
    assert model.kv_cache_sharing_patterns == list(p.kv_source_layers) == [0, 1, 2, 3, 4, 3, 3, 3, 3, 4]
    saved = (list(model.kv_cache_sharing_patterns), set(model.shared_layer_origins))
    model.kv_cache_sharing_patterns = [
        2 if s == 3 and i >= p.first_kv_shared_layer else s for i, s in enumerate(saved[0])
    ]
    model.shared_layer_origins = saved[1] | {2}
    try:
        _numerics.check_separated(
            core.compare(models.tunix_logits(model, tokens, mesh_4x2), ref, floor), "wrong KV source"
        )
    finally:
        model.kv_cache_sharing_patterns, model.shared_layer_origins = saved


def test_kv_shared_layers_unused_kv_params_are_zero_and_unused(tiny_e2b_base):
    """Tunix has K/V parameters on KV-shared layers that transformers does not save: the loader
    fills them with zeros, and they are never read (random values give bit-identical logits)."""
    import jax.numpy as jnp

    p = models.get_preset("tiny_e2b")
    model = models.load_tunix_model(tiny_e2b_base, p)
    unused = _loader.unused_kv_params(p)
    assert sorted({int(k.split(".")[1]) for k in unused}) == list(range(p.first_kv_shared_layer, p.num_layers))
    tokens = _parity.random_text_tokens(p, 1, 96)
    before = models.tunix_logits(model, tokens)
    rng = np.random.default_rng(0)
    for name, shape in unused.items():
        _, i, _, module, leaf = name.split(".")
        var = getattr(getattr(model.layers[int(i)].attn, module), leaf)
        assert var.value.shape == shape and not np.asarray(var.value).any(), name
        var.value = jnp.asarray(rng.normal(size=shape), var.value.dtype)
    assert np.array_equal(models.tunix_logits(model, tokens), before)


def test_26b_a4b_twin_matches_transformers_with_residual_routing(tiny_26b_a4b_base, mesh_4x2):
    """Experts beside the dense MLP, routed on the residual: same logits. Tunix 0.1.7's own
    routing (on the expert input) is the control that shows what the fix changes (~4 of ~5)."""
    import jax.numpy as jnp
    from tunix.models.gemma4 import model as gemma4
    from tunix.models.gemma4 import moe as gemma4_moe

    p = models.get_preset("tiny_26b_a4b")
    assert set(_loader.expected_hf_shapes(p)) == set(models.read_checkpoint_index(tiny_26b_a4b_base))
    model = models.load_tunix_model(tiny_26b_a4b_base, p, mesh=mesh_4x2)
    parity = models.logit_parity(tiny_26b_a4b_base, p, model=model, mesh=mesh_4x2)
    assert parity["within_bound"], parity
    assert parity["control_over_bound"] >= core.CONTROL_SEPARATION, parity
    tokens, ref, floor = _reference(tiny_26b_a4b_base, p)
    first, last = model.layers[0].moe, model.layers[-1].moe
    controls = _controls(
        model,
        tokens,
        ref,
        floor,
        mesh_4x2,
        {
            "per-expert scale dropped (last layer)": (*_param(last.per_expert_scale), jnp.ones_like),
            "router scale dropped (last layer)": (*_param(last.router_scale), jnp.ones_like),
            "gate and up swapped (last layer)": (*_param(last.gating_einsum), lambda w: w[:, ::-1]),
            "experts' down projections permuted (first layer)": (*_param(first.linear), lambda w: w[::-1]),
        },
    )
    for name, c in controls.items():
        _numerics.check_separated(c, name)
    routed = [(layer.moe.__class__, layer.moe_pre_ffw_norm.__class__) for layer in model.layers]
    for layer in model.layers:  # Tunix's own MoE, as Tunix builds it
        layer.moe.__class__, layer.moe_pre_ffw_norm.__class__ = gemma4_moe.MoERagged, gemma4.RMSNorm
    try:
        own = core.compare(models.tunix_logits(model, tokens, mesh_4x2), ref, floor)
    finally:
        for layer, (moe_cls, norm_cls) in zip(model.layers, routed, strict=True):
            layer.moe.__class__, layer.moe_pre_ffw_norm.__class__ = moe_cls, norm_cls
    _numerics.check_separated(own, "Tunix's own MoE routing")
    assert own["max_abs_diff"] > 0.1 * parity["max_abs_logit"], own


def test_12b_twin_loads_from_the_unified_layout_and_refuses_tp(tiny_12b_base, mesh_4x2):
    """12B's released ``Gemma4UnifiedForConditionalGeneration`` layout loads; its K = V global
    layers have ONE KV head, which no tp can split: a 4 x 2 mesh is refused naming that head
    count, and the model matches transformers on the 8 x 1 mesh the rule leaves."""
    import jax

    from cookbook import mesh as mesh_lib
    from cookbook.mesh import _mesh

    p = models.get_preset("tiny_12b")
    with pytest.raises(_mesh.MeshError, match=r"tp=2 does not divide global KV heads = 1.*valid .* 8x1"):
        mesh_lib.validate_mesh(p, 4, 2)
    with pytest.raises(ValueError, match=r"tp=2 does not divide global KV heads = 1 of preset 'tiny_12b'"):
        models.load_tunix_model(tiny_12b_base, p, mesh=mesh_4x2)
    mesh = mesh_lib.make_mesh(8, 1)
    model = models.load_tunix_model(tiny_12b_base, p, mesh=mesh)
    glob = model.layers[p.global_layers[0]].attn
    assert glob.k_einsum.w.value.shape == (1, p.embed_dim, p.global_head_dim)  # one head, K = V
    parity = models.logit_parity(tiny_12b_base, p, model=model, mesh=mesh)
    assert parity["within_bound"], parity
    assert parity["control_over_bound"] >= core.CONTROL_SEPARATION, parity
    tokens, ref, floor = _reference(tiny_12b_base, p)
    controls = _controls(
        model,
        tokens,
        ref,
        floor,
        mesh,
        {
            "global key norm negated": (*_param(glob._key_norm.scale), jax.numpy.negative),
            "global K = V head's dims reversed": (*_param(glob.k_einsum.w), lambda w: w[..., ::-1]),
        },
    )
    for name, c in controls.items():
        _numerics.check_separated(c, name)


def test_kv_shared_checkpoint_is_accepted_and_a_missing_tensor_refused(tiny_e2b_base, tmp_path):
    """transformers writes no k_proj/v_proj/k_norm on KV-shared layers: the check expects exactly
    that, and still names a tensor that is really missing."""
    import shutil

    from safetensors.numpy import load_file, save_file

    p = models.get_preset("tiny_e2b")
    keys = models.read_checkpoint_index(tiny_e2b_base)
    shared = [
        f"model.language_model.layers.{i}.self_attn.{n}.weight"
        for i in range(p.first_kv_shared_layer, p.num_layers)
        for n in ("k_proj", "v_proj", "k_norm")
    ]
    assert not set(shared) & set(keys)  # what transformers wrote
    assert set(_loader.expected_hf_shapes(p)) == set(keys)  # every tensor expected, nothing more
    assert models.check_checkpoint_matches(tiny_e2b_base, p) == "model.language_model."
    for missing in (
        "model.language_model.layers.3.self_attn.v_proj.weight",  # a non-shared layer's V
        "model.language_model.layers.7.per_layer_input_gate.weight",
    ):
        bad = tmp_path / missing.split(".")[3]
        shutil.copytree(tiny_e2b_base, bad)
        index = json.loads((bad / "model.safetensors.index.json").read_text())
        shard = bad / index["weight_map"].pop(missing)
        tensors = load_file(str(shard))
        del tensors[missing]
        save_file(tensors, str(shard), metadata={"format": "pt"})
        (bad / "model.safetensors.index.json").write_text(json.dumps(index))
        with pytest.raises(ValueError, match=f"tensor {missing} is missing"):
            models.load_tunix_model(bad, p)


@pytest.mark.parametrize("name", ["tiny_e2b", "tiny_12b", "tiny_26b_a4b"])
def test_greedy_decoding_with_tunix_kv_cache_follows_transformers(name, request):
    """Tunix's sampler (prefill, then one token at a time from its KV cache: the KV-shared layers
    read their source layer's cache, the MoE routes per token) picks transformers' argmax at every
    step, past the sliding window, except where transformers' own top two logits are closer than
    the float32 bound (a tie either framework may break either way). The multimodal placeholders
    are forbidden: with no pixels, transformers' Gemma 4 embeds ``<|image|>`` and its kin as
    ``<pad>`` (Gemma4Model.forward), Tunix's text model as themselves (a random model emitted one
    here, and every later logit differed by ~4; no text fine-tune emits them)."""
    from transformers import AutoTokenizer

    base = request.getfixturevalue(f"{name}_base")
    p = models.get_preset(name)
    model = models.load_tunix_model(base, p)
    tok = AutoTokenizer.from_pretrained(base)
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "Write a Verilog module named add8."}], tokenize=False, add_generation_prompt=True
    )
    steps = 2 * p.sliding_window
    forbidden = [models.SPECIAL_TOKEN_IDS[t] for t in ("<|image|>", "<|video|>", "<|audio|>")]
    out = models.make_sampler(model, tok, cache_size=256)(
        [prompt],
        max_generation_steps=steps,
        temperature=0.0,
        echo=True,
        eos_tokens=[p.vocab_size],  # an id no token has: no early stop, every step is checked
        forbidden_tokens=forbidden,
    )
    seq = np.asarray(out.tokens[0])
    n_prompt = len(tok(prompt, add_special_tokens=False)["input_ids"])
    assert len(seq) == n_prompt + steps > p.sliding_window
    ref = _parity.transformers_logits(base, seq[None])[0]
    floor = core.float32_floor(ref[None], _parity.transformers_logits(base, seq[None], dtype="float64"))
    bound = _numerics.PARITY_FACTOR * floor.max_abs
    picked = seq[n_prompt:]
    logits = ref[n_prompt - 1 : -1].copy()  # the logits each generated token was chosen from
    logits[:, forbidden] = -np.inf  # as the sampler masks them
    top2 = np.sort(logits, axis=-1)[:, -2:]
    disagree = np.flatnonzero(picked != logits.argmax(-1))
    assert all(top2[i, 1] - logits[i, picked[i]] <= 2 * bound for i in disagree), (disagree, bound)
    assert len(disagree) <= 2, disagree  # ties are rare; more means the cache path is wrong


def test_released_redundant_kv_on_shared_layers_is_accepted_and_changes_nothing(tiny_e2b_base, tmp_path):
    """Google's E2B/E4B files still carry k_proj, v_proj and k_norm on the KV-shared layers (E2B
    15-34: tests/models/test_released_manifest.py), which transformers never writes. The twin's
    checkpoint with them added (random values, in an extra shard, as a release would hold them)
    loads, its Tunix model takes them, and the logits are bit-identical to the same checkpoint
    without them: a shared layer never reads its own K/V."""
    import shutil

    from safetensors.numpy import load_file, save_file

    p = models.get_preset("tiny_e2b")
    plain = models.load_tunix_model(tiny_e2b_base, p)
    base = Path(shutil.copytree(tiny_e2b_base, tmp_path / "released-layout", ignore=shutil.ignore_patterns(".*")))
    index = json.loads((base / "model.safetensors.index.json").read_text())
    first = load_file(str(base / index["weight_map"]["model.language_model.layers.0.self_attn.k_proj.weight"]))
    dtype = first["model.language_model.layers.0.self_attn.k_proj.weight"].dtype
    rng = np.random.default_rng(7)
    extra = {}
    for i in range(p.first_kv_shared_layer, p.num_layers):
        kind = p.layer_kinds[i]
        hd = p.global_head_dim if kind == "global" else p.head_dim
        kv = p.effective_global_kv_heads if kind == "global" else p.num_kv_heads
        layer = f"model.language_model.layers.{i}.self_attn."
        extra[layer + "k_proj.weight"] = rng.normal(size=(kv * hd, p.embed_dim)).astype(dtype)
        extra[layer + "v_proj.weight"] = rng.normal(size=(kv * hd, p.embed_dim)).astype(dtype)
        extra[layer + "k_norm.weight"] = rng.normal(size=(hd,)).astype(dtype)
    save_file(extra, str(base / "model-redundant-kv.safetensors"), metadata={"format": "pt"})
    index["weight_map"].update(dict.fromkeys(extra, "model-redundant-kv.safetensors"))
    (base / "model.safetensors.index.json").write_text(json.dumps(index))

    assert models.check_checkpoint_matches(base, p) == "model.language_model."
    model = models.load_tunix_model(base, p)
    unused = _loader.unused_kv_params(p)
    taken = 0
    for name in unused:
        _, i, _, module, leaf = name.split(".")
        value = np.asarray(getattr(getattr(model.layers[int(i)].attn, module), leaf).value)
        taken += bool(value.any())  # the file's values, where the twin's own load has zeros
    assert taken == len(unused)
    tokens = _parity.random_text_tokens(p, 2, 64)
    assert np.array_equal(models.tunix_logits(model, tokens), models.tunix_logits(plain, tokens))
