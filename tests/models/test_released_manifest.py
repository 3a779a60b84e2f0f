"""Google's released E2B-it checkpoint, tensor by tensor, against the preset and Tunix's model.

The fixture (tests/fixtures/real-gemma4/gemma-4-E2B-it/model.safetensors.header-manifest.json,
its SOURCE says where from) is the header of Google's model.safetensors: the name, dtype and
shape of all 2,011 tensors, language model, vision and audio towers. No weights are needed:
:func:`cookbook.models.map_checkpoint_shapes` runs Tunix's name map, transforms and the loader's
preprocessing on zero-stride arrays, and the full-size Tunix model is abstract.
"""

import collections
import json
import re
from pathlib import Path

import pytest

from cookbook import models
from cookbook.models import _loader

pytestmark = pytest.mark.jax_only

MANIFEST = (
    Path(__file__).resolve().parent.parent
    / "fixtures"
    / "real-gemma4"
    / "gemma-4-E2B-it"
    / "model.safetensors.header-manifest.json"
)
LM = "model.language_model."


@pytest.fixture(scope="module")
def manifest() -> dict[str, dict]:
    doc = json.loads(MANIFEST.read_text())
    assert doc["total_tensors"] == len(doc["tensors"]) == 2011
    return doc["tensors"]


@pytest.fixture(scope="module")
def shapes(manifest) -> dict[str, tuple[int, ...]]:
    return {name: tuple(t["shape"]) for name, t in manifest.items()}


def test_every_expected_tensor_is_released_with_its_shape_and_the_extras_are_redundant_kv(shapes, manifest):
    p = models.get_preset("gemma4_e2b")
    expected = _loader.expected_hf_shapes(p)
    released = {k: v for k, v in shapes.items() if k.startswith(LM)}
    assert len(released) == 600
    wrong = {k: (released.get(k), v) for k, v in expected.items() if released.get(k) != v}
    assert not wrong
    # What the release has beyond the preset's layout: K/V projections and K norms on exactly
    # the KV-shared layers (15-34), which transformers neither builds nor writes.
    extra = sorted(set(released) - set(expected))
    pattern = re.compile(re.escape(LM) + r"layers\.(\d+)\.self_attn\.(k_proj|v_proj|k_norm)\.weight")
    assert all(pattern.fullmatch(k) for k in extra), extra
    layers = collections.Counter(int(pattern.fullmatch(k).group(1)) for k in extra)
    assert sorted(layers) == list(range(p.first_kv_shared_layer, p.num_layers)) == list(range(15, 35))
    assert set(layers.values()) == {3}
    # The language model is released in bf16 throughout, the preset's dtype.
    assert {manifest[k]["dtype"] for k in released} == {"BF16"} and p.dtype == "bfloat16"


def test_every_language_model_tensor_fills_a_tunix_parameter_of_its_shape(shapes):
    """Every tensor of the language model maps to a Tunix parameter of the same shape (after
    Tunix's transforms and K/V stacking), every parameter of the full-size model is filled,
    and what no parameter takes is the vision and audio towers and their embedders, counted."""
    params, skipped = models.map_checkpoint_shapes(shapes, "gemma4_e2b")
    want = _loader.tunix_param_shapes("gemma4_e2b")
    assert len(want) == 565
    assert set(params) == set(want), (sorted(set(want) - set(params))[:5], sorted(set(params) - set(want))[:5])
    mismatched = {k: (params[k], want[k]) for k in want if params[k] != want[k]}
    assert not mismatched
    towers = collections.Counter(name.split(".")[1] for name in skipped)
    assert towers == {"audio_tower": 751, "vision_tower": 658, "embed_audio": 1, "embed_vision": 1}
    assert not any(name.startswith(LM) for name in skipped)
    # The redundant K/V fill the KV-shared layers' unused parameters (zeros when they are absent).
    for name in _loader.unused_kv_params(models.get_preset("gemma4_e2b")):
        assert name in params


def test_a_missing_or_misshapen_language_model_tensor_shows(shapes):
    """The same map on a header that lacks a tensor, or holds one of another shape, leaves that
    parameter unfilled or misshapen, and no other: the check is not vacuous."""
    want = _loader.tunix_param_shapes("gemma4_e2b")
    name, param = LM + "layers.3.mlp.down_proj.weight", "layers.3.mlp.down_proj.kernel"
    params, _ = models.map_checkpoint_shapes({k: v for k, v in shapes.items() if k != name}, "gemma4_e2b")
    assert set(want) - set(params) == {param}
    params, _ = models.map_checkpoint_shapes({**shapes, name: (1536, 12288)}, "gemma4_e2b")
    assert [k for k in want if params[k] != want[k]] == [param] and params[param] == (12288, 1536)
