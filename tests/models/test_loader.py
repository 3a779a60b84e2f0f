"""Loading HF Gemma 4 checkpoints into Tunix on a 4 x 2 fake-CPU mesh: logit parity."""

import json
import shutil

import numpy as np
import pytest

from cookbook import core, models
from cookbook.models import _loader, _presets


def _logits_both(ckpt, mesh, tokens):
    import jax
    import jax.numpy as jnp
    import torch
    from transformers import AutoModelForCausalLM, Gemma4ForConditionalGeneration
    from tunix.sft import utils as sft_utils

    model = models.load_tunix_model(ckpt, "tiny", mesh=mesh)
    b, t = tokens.shape
    pos = jnp.broadcast_to(jnp.arange(t), (b, t))
    mask = sft_utils.make_causal_attn_mask(jnp.ones((b, t), bool))
    with mesh:
        ours = np.asarray(jax.jit(lambda x, p, m: model(x, p, None, m)[0])(jnp.asarray(tokens), pos, mask))
    config = json.loads((ckpt / "config.json").read_text())
    cls = Gemma4ForConditionalGeneration if "text_config" in config else AutoModelForCausalLM
    hf = cls.from_pretrained(ckpt, dtype=torch.float32).eval()
    with torch.no_grad(), core.torch_threads():  # a reference that is the same in every process
        ref = hf(input_ids=torch.tensor(tokens)).logits.numpy()
        ref64 = hf.double()(input_ids=torch.tensor(tokens)).logits.numpy()
    return model, ours, ref, core.float32_floor(ref, ref64)


def test_tunix_matches_transformers_on_4x2_mesh(tiny_base, mesh_4x2):
    """Same logits from both frameworks, on sequences twice the sliding window (64)."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(22, 1024, size=(4, 128))  # ids < 22 are special/multimodal markers
    model, ours, ref, floor = _logits_both(tiny_base, mesh_4x2, tokens)
    # Both are float32 (~1e-4 from float64 at this length): the bound is 4x transformers' own
    # float32 error on these tokens, measured here (cookbook.core), not a fixed number.
    check = core.compare(ours, ref, floor)
    assert check["ok"], check
    # A sliding-window bug would show after position 64: logits there must depend on it.
    assert np.abs(ref[:, 100:]).max() > 1.0
    # Parameters really are sharded over the mesh (not replicated).
    emb = model.embedder.input_embedding.value
    assert emb.sharding.shard_shape(emb.shape) == (1024 // 2, 128 // 4)


def test_text_only_layout_loads_too(tiny_base, mesh_4x2, tmp_path):
    """A Gemma4ForCausalLM checkpoint (keys model.layers.*) loads with the same weights."""
    import torch
    from transformers import Gemma4ForCausalLM, Gemma4ForConditionalGeneration

    mm = Gemma4ForConditionalGeneration.from_pretrained(tiny_base, dtype=torch.float32)
    text = Gemma4ForCausalLM(_presets.tiny().hf_text_config())
    missing = text.model.load_state_dict(mm.model.language_model.state_dict(), strict=True)
    assert not missing.missing_keys
    out = tmp_path / "text"
    text.save_pretrained(out, max_shard_size=4_000_000)
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(tiny_base / f, out / f)
    assert _loader.text_prefix(models.read_checkpoint_index(out)) == "model."
    tokens = np.random.default_rng(1).integers(22, 1024, size=(2, 40))
    _, ours, ref, floor = _logits_both(out, mesh_4x2, tokens)
    assert core.compare(ours, ref, floor)["ok"]


def test_wrong_preset_is_refused_before_loading(tiny_base):
    with pytest.raises(ValueError, match="does not fit preset 'small'"):
        models.load_tunix_model(tiny_base, "small")


def test_index_pointing_outside_is_refused(tiny_base, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(tiny_base, bad)
    index = json.loads((bad / "model.safetensors.index.json").read_text())
    first = next(iter(index["weight_map"]))
    index["weight_map"][first] = "../../etc/passwd"
    (bad / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match="outside the checkpoint directory"):
        models.read_checkpoint_index(bad)


def test_the_sampling_loop_keeps_order_pads_the_last_batch_and_seeds_per_batch(tiny_base):
    """models.sample_prompts, the one loop train.evaluate and evaluate.tunix_samples share: five
    prompts in batches of two run as three calls of one shape (the last padded), come back in
    order, and batch b draws with seed + b."""
    from transformers import AutoTokenizer

    model = models.load_tunix_model(tiny_base, "tiny")
    tok = AutoTokenizer.from_pretrained(tiny_base)
    a, b = (
        tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        for q in ("Write a module named add8.", "Write an inverter.")
    )
    sampler = models.make_sampler(model, tok, cache_size=64)
    done = []
    greedy, seeds = models.sample_prompts(sampler, [a, b, a, b, a], max_tokens=12, batch_size=2, max_prompt=32,
                                          on_done=done.append)  # fmt: skip
    assert done == [2, 2, 1] and seeds == [None] * 5
    assert greedy[0] == greedy[2] and greedy[1] == greedy[3]  # the same batch, the same greedy text
    assert greedy[0] != greedy[1]  # and in order: the two prompts differ
    sampled, seeds = models.sample_prompts(sampler, [a, b, a, b], max_tokens=12, batch_size=2, max_prompt=32,
                                           temperature=1.0, top_p=1.0, seed=7)  # fmt: skip
    assert seeds == [7, 7, 8, 8]
    again, _ = models.sample_prompts(sampler, [a, b], max_tokens=12, batch_size=2, max_prompt=32,
                                     temperature=1.0, top_p=1.0, seed=8)  # fmt: skip
    assert again == sampled[2:] and sampled[:2] != sampled[2:]  # batch 1 drew with seed 8, batch 0 did not
