"""cookbook.lora PEFT tensors: Tunix/Qwix LoRA pairs <-> PEFT ``lora_A``/``lora_B``, both ways, exactly.

The Tunix state here has the ``tiny`` preset's LoRA shapes (read off the abstract Qwix
model) filled with random numbers, so every projection, the K = V global layer included,
is converted; the index order is checked against einsums written from the layouts alone.
"""

import json
import re

import numpy as np
import pytest

from cookbook import lora
from cookbook.lora import _apply
from cookbook.models import _loader, _presets

RANK, ALPHA = 8, 16.0
PRESET = _presets.tiny()


@pytest.fixture(scope="module")
def shapes() -> dict[str, tuple[int, ...]]:
    """``"layers/5/attn/k_einsum/w_lora_a" -> shape`` of every LoRA parameter of tiny."""
    model = lora.abstract_lora_model(PRESET, lora.LoraConfig(rank=RANK, alpha=ALPHA, targets="all-linear"))
    return _apply.lora_param_shapes(model)


def _random_state(shapes, seed=0, dtype=np.float32) -> dict:
    """A pure-dict Tunix LoRA state (``layers -> i -> attn -> q_einsum -> w_lora_a``)."""
    rng = np.random.default_rng(seed)
    state: dict = {}
    for path, shape in shapes.items():
        node = state
        *parents, leaf = [int(p) if p.isdigit() else p for p in path.split("/")]
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = rng.normal(size=shape).astype(dtype)
    return state


def _flat(tree, prefix="") -> dict[str, np.ndarray]:
    if isinstance(tree, dict):
        out = {}
        for k, v in tree.items():
            out.update(_flat(v, f"{prefix}/{k}" if prefix else str(k)))
        return out
    return {prefix: np.asarray(tree)}


def test_state_has_every_projection_of_tiny(shapes):
    pairs = lora.lora_pairs(_random_state(shapes))
    assert len(pairs) == 6 * 6  # 6 layers x (q, kv or k, o, gate, up, down)
    assert {p.module for p in pairs if p.layer == 5} == {
        "attn.q_einsum",
        "attn.k_einsum",
        "attn.attn_vec_einsum",
        "mlp.gate_proj",
        "mlp.up_proj",
        "mlp.down_proj",
    }
    assert all(p.rank == RANK for p in pairs)
    lora.check_pairs_fit_preset(pairs, PRESET, RANK)


@pytest.mark.parametrize("vllm_kv_copy", [False, True])
def test_tunix_to_peft_and_back_is_exact(shapes, vllm_kv_copy):
    state = _random_state(shapes)
    peft = lora.tunix_lora_to_peft(state, "tiny", {"rank": RANK}, vllm_kv_copy=vllm_kv_copy)
    back = _flat(lora.peft_to_tunix_lora(peft, "tiny"))
    want = _flat(state)
    assert set(back) == set(want) == set(shapes)
    for path, value in want.items():
        assert back[path].shape == value.shape and back[path].dtype == value.dtype, path
        assert np.array_equal(back[path], value), path
    # ... and the pure dict it returns is one lora_pairs reads again.
    again = lora.lora_pairs(lora.peft_to_tunix_lora(peft, "tiny"))
    assert [(p.layer, p.module) for p in again] == [(p.layer, p.module) for p in lora.lora_pairs(state)]


def test_peft_tensors_have_the_hugging_face_shapes(shapes):
    peft = lora.tunix_lora_to_peft(_random_state(shapes), PRESET, vllm_kv_copy=False)
    hf = _loader.expected_hf_shapes(PRESET, "model.")
    modules = {k.removeprefix("base_model.model.").split(".lora_")[0] for k in peft}
    projections = {k.removesuffix(".weight") for k in hf if k.endswith("_proj.weight")}
    assert modules == projections  # every projection, nothing else
    for key, value in peft.items():
        weight = key.removeprefix("base_model.model.").split(".lora_")[0] + ".weight"
        out, inp = hf[weight]
        assert value.shape == ((RANK, inp) if ".lora_A." in key else (out, RANK)), key
        assert value.flags.c_contiguous
    mm = lora.tunix_lora_to_peft(_random_state(shapes), PRESET, vllm_kv_copy=False, layout="multimodal")
    assert {k.replace("model.language_model.", "model.") for k in mm} == set(peft)


def _hf_delta(module: str, a: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
    """The (out, in) update of each HF weight, from the Tunix einsum layouts: transformers
    splits a projection's outputs (or o_proj's inputs) as heads x head_dim."""
    if module == "attn.q_einsum":  # x[d] A[d,r] B[r,n,h] -> q[n,h]
        d = np.einsum("dr,rnh->nhd", a, b)
        return {"self_attn.q_proj": d.reshape(-1, d.shape[-1])}
    if module == "attn.kv_einsum":  # B[r, {k,v}, kv_head, h]
        k, v = (np.einsum("dr,rnh->nhd", a, b[:, i]) for i in (0, 1))
        return {"self_attn.k_proj": k.reshape(-1, k.shape[-1]), "self_attn.v_proj": v.reshape(-1, v.shape[-1])}
    if module == "attn.k_einsum":
        k = np.einsum("dr,rnh->nhd", a, b)
        return {"self_attn.k_proj": k.reshape(-1, k.shape[-1])}
    if module == "attn.attn_vec_einsum":  # o[n,h] A[n,h,r] B[r,d] -> y[d]
        o = np.einsum("nhr,rd->dnh", a, b)
        return {"self_attn.o_proj": o.reshape(o.shape[0], -1)}
    return {module: (a @ b).T}  # MLP kernel (in, out) -> weight (out, in)


def test_lora_b_at_lora_a_is_the_tunix_update_in_hugging_face_order(shapes):
    state = _random_state(shapes, seed=1, dtype=np.float64)
    peft = lora.tunix_lora_to_peft(state, PRESET, vllm_kv_copy=False)
    prefix = "base_model.model.model.layers"
    checked = 0
    for pair in lora.lora_pairs(state):
        for hf, delta in _hf_delta(pair.module, pair.a, pair.b).items():
            key = f"{prefix}.{pair.layer}.{hf}"
            got = peft[f"{key}.lora_B.weight"] @ peft[f"{key}.lora_A.weight"]
            np.testing.assert_allclose(got, delta, rtol=1e-12, atol=1e-12, err_msg=key)
            checked += 1
    assert checked == len({k.split(".lora_")[0] for k in peft}) == 5 * 7 + 6


def test_k_eq_v_layer_gets_vllms_v_proj_copy_only_when_asked(shapes):
    state = _random_state(shapes)
    plain = lora.tunix_lora_to_peft(state, PRESET, vllm_kv_copy=False)
    copied = lora.tunix_lora_to_peft(state, PRESET, vllm_kv_copy=True)
    g = "base_model.model.model.layers.5.self_attn."
    assert set(copied) - set(plain) == {f"{g}v_proj.lora_A.weight", f"{g}v_proj.lora_B.weight"}
    for ab in "AB":
        assert np.array_equal(copied[f"{g}v_proj.lora_{ab}.weight"], copied[f"{g}k_proj.lora_{ab}.weight"])
    assert all(np.array_equal(plain[k], copied[k]) for k in plain)
    # Sliding layers have their own V (kv_einsum's second half): never a copy of K.
    s = "base_model.model.model.layers.0.self_attn."
    assert np.array_equal(plain[f"{s}v_proj.lora_A.weight"], plain[f"{s}k_proj.lora_A.weight"])  # shared A
    assert not np.array_equal(plain[f"{s}v_proj.lora_B.weight"], plain[f"{s}k_proj.lora_B.weight"])


def test_dtype_cast(shapes):
    peft = lora.tunix_lora_to_peft(_random_state(shapes), PRESET, dtype=np.float16)
    assert {v.dtype for v in peft.values()} == {np.dtype(np.float16)}


def test_lora_pairs_reads_orbax_trees_and_abstract_states(shapes):
    from flax import nnx

    a, b = np.ones((PRESET.embed_dim, 4), np.float32), np.ones((4, 8, 32), np.float32)
    orbax_tree = {
        "layers": {
            "0": {
                "attn": {
                    "q_einsum": {"w_lora_a": {"value": a}, "w_lora_b": {"value": b}},
                    "kv_einsum": {"w": {"value": np.zeros(3)}},
                }
            }
        }
    }  # base weight: ignored
    (pair,) = lora.lora_pairs(orbax_tree)
    assert (pair.layer, pair.module, pair.rank) == (0, "attn.q_einsum", 4)
    assert np.array_equal(pair.a, a) and np.array_equal(pair.b, b)
    model = lora.abstract_lora_model(PRESET, lora.LoraConfig(rank=RANK, alpha=ALPHA, targets="all-linear"))
    pairs = lora.lora_pairs(nnx.state(model, nnx.LoRAParam))  # shapes only, nothing read
    assert len(pairs) == 36 and not isinstance(pairs[0].a, np.ndarray)
    lora.check_pairs_fit_preset(pairs, PRESET, RANK)
    assert all(p is q for p, q in zip(lora.lora_pairs(pairs), pairs, strict=True))  # already pairs


def test_lora_pairs_refuses_unmapped_or_half_pairs():
    x = np.zeros((4, 4), np.float32)
    with pytest.raises(ValueError, match=r"LoRA tensor 'layers\.0\.attn\.qkv_einsum\.w_lora_a' has no Hugging Face"):
        lora.lora_pairs({"layers": {0: {"attn": {"qkv_einsum": {"w_lora_a": x, "w_lora_b": x}}}}})
    with pytest.raises(ValueError, match=r"LoRA tensor 'embedder\.input_embedding_lora_a'"):
        lora.lora_pairs({"embedder": {"input_embedding_lora_a": x}})
    with pytest.raises(ValueError, match=r"layers\.3\.mlp\.up_proj: only lora_a found"):
        lora.lora_pairs({"layers": {3: {"mlp": {"up_proj": {"kernel_lora_a": x}}}}})
    with pytest.raises(ValueError, match=r"layers\.2\.attn\.q_einsum: only lora_b found"):
        lora.lora_pairs({"layers": {2: {"attn": {"q_einsum": {"w_lora_b": x}}}}})
    with pytest.raises(ValueError, match="No LoRA tensors found"):
        lora.lora_pairs({"layers": {0: {"attn": {"q_einsum": {"w": x}}}}})


def _pair(layer, module, a_shape, b_shape):
    return lora.LoraPair(layer=layer, module=module, a=np.zeros(a_shape, np.float32), b=np.zeros(b_shape, np.float32))


def test_check_pairs_fit_preset_names_what_does_not_fit():
    d, n = PRESET.embed_dim, PRESET.num_heads
    ok = [_pair(0, "attn.q_einsum", (d, 4), (4, n, 32)), _pair(5, "attn.k_einsum", (d, 4), (4, 2, 64))]
    lora.check_pairs_fit_preset(ok, PRESET, 4)
    wider = _pair(0, "attn.q_einsum", (256, 4), (4, 8, 32))
    with pytest.raises(
        ValueError,
        match=r"layers\.0\.attn\.q_einsum: lora_a/lora_b shapes \(256, 4\)/\(4, 8, 32\) "
        r"do not fit preset 'tiny' \(needs \(128, 4\)/\(4, 8, 32\)\)",
    ):
        lora.check_pairs_fit_preset([wider], PRESET)
    wide_mlp = _pair(1, "mlp.down_proj", (1024, 4), (4, d))
    with pytest.raises(ValueError, match=r"layers\.1\.mlp\.down_proj: .*\(1024, 4\).*needs \(512, 4\)"):
        lora.check_pairs_fit_preset([wide_mlp], PRESET)
    with pytest.raises(ValueError, match="has rank 4, the recipe says rank 8"):
        lora.check_pairs_fit_preset(ok, PRESET, 8)
    with pytest.raises(ValueError, match="preset 'tiny' has only 6 layers"):
        lora.check_pairs_fit_preset([_pair(6, "attn.q_einsum", (d, 4), (4, n, 32))], PRESET)
    with pytest.raises(ValueError, match="k_einsum exists only on K = V global layers"):
        lora.check_pairs_fit_preset([_pair(0, "attn.k_einsum", (d, 4), (4, 4, 32))], PRESET)
    with pytest.raises(ValueError, match="layer 5 is a K = V global layer"):
        lora.check_pairs_fit_preset([_pair(5, "attn.kv_einsum", (d, 4), (4, 2, 2, 64))], PRESET)


def test_inconsistent_pairs_are_refused_when_converted():
    d = PRESET.embed_dim
    with pytest.raises(ValueError, match="disagree on the rank"):
        list(_pair(0, "attn.q_einsum", (d, 4), (8, 8, 32)).peft_factors())
    with pytest.raises(ValueError, match=r"is not \(r, 2, K, H\)"):
        list(_pair(0, "attn.kv_einsum", (d, 4), (4, 4, 32)).peft_factors())


def test_peft_to_tunix_refuses_what_tunix_cannot_hold(shapes):
    peft = lora.tunix_lora_to_peft(_random_state(shapes), PRESET, vllm_kv_copy=False)
    with pytest.raises(ValueError, match="'base_model.model.lm_head.lora_A.weight' is not a Gemma 4"):
        lora.peft_to_tunix_lora({**peft, "base_model.model.lm_head.lora_A.weight": np.zeros((8, 128))}, PRESET)
    v_a = "base_model.model.model.layers.2.self_attn.v_proj.lora_A.weight"
    separate = {**peft, v_a: peft[v_a] + 1}  # PEFT trained K and V with their own A
    with pytest.raises(ValueError, match="layer 2: k_proj and v_proj need one shared lora_A"):
        lora.peft_to_tunix_lora(separate, PRESET)


def test_write_peft_adapter(shapes, tmp_path):
    from safetensors.numpy import load_file

    tensors = lora.tunix_lora_to_peft(_random_state(shapes), PRESET)
    out = lora.write_peft_adapter(tmp_path / "a", tensors, rank=RANK, alpha=ALPHA, base_model="tiny-base")
    cfg = json.loads((out / "adapter_config.json").read_text())
    assert (cfg["r"], cfg["lora_alpha"], cfg["peft_type"], cfg["base_model_name_or_path"]) == (
        RANK,
        ALPHA,
        "LORA",
        "tiny-base",
    )
    assert cfg["target_modules"] == sorted(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    back = load_file(str(out / "adapter_model.safetensors"))
    assert set(back) == set(tensors) and all(np.array_equal(back[k], tensors[k]) for k in tensors)
    mm = lora.tunix_lora_to_peft(_random_state(shapes), PRESET, layout="multimodal")
    cfg = json.loads(
        (
            lora.write_peft_adapter(tmp_path / "m", mm, rank=RANK, alpha=ALPHA, layout="multimodal")
            / "adapter_config.json"
        ).read_text()
    )
    target = re.compile(cfg["target_modules"])  # PEFT full-matches a string target
    assert target.fullmatch("model.language_model.layers.3.self_attn.q_proj")
    assert target.fullmatch("model.language_model.layers.0.mlp.down_proj")
    assert not target.fullmatch("model.vision_tower.encoder.layers.0.self_attn.q_proj")


@pytest.fixture(scope="module")
def lora_run(tiny_base):
    """A Tunix LoRA run with random non-zero A and B (cached; tests/merge/test_merge.py shares it)."""
    from cookbook.merge import _verify

    return _verify.ensure_random_lora_run("tiny", rank=RANK, alpha=ALPHA)


def test_peft_round_trip(lora_run):
    from cookbook import merge

    ckpt = merge.open_lora_checkpoint(lora_run)
    pairs = merge.read_lora(ckpt)
    peft = lora.tunix_lora_to_peft(pairs, "tiny", {"rank": RANK}, vllm_kv_copy=False)
    back = lora.lora_pairs(lora.peft_to_tunix_lora(peft, "tiny"))
    assert [(p.layer, p.module) for p in back] == [(p.layer, p.module) for p in pairs]
    for p, q in zip(pairs, back, strict=True):
        assert np.array_equal(p.a, q.a) and np.array_equal(p.b, q.b), (p.layer, p.module)
