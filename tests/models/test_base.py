"""The tiny base checkpoint: released layout, sharded, deterministic, cached, safe."""

import json

import pytest
from safetensors import safe_open

from cookbook import models


@pytest.mark.jax_only
def test_tiny_base_has_the_released_layout(tiny_base):
    files = {p.name for p in tiny_base.iterdir()}
    assert {"config.json", "generation_config.json", "tokenizer.json", "model.safetensors.index.json"} <= files
    shards = sorted(set(models.read_checkpoint_index(tiny_base).values()))
    assert len(shards) >= 2
    config = json.loads((tiny_base / "config.json").read_text())
    assert config["architectures"] == ["Gemma4ForConditionalGeneration"]
    assert config["text_config"]["attention_k_eq_v"] is True
    keys = models.read_checkpoint_index(tiny_base)
    assert all(k.startswith("model.language_model.") for k in keys)
    # K = V global layer (5) has no v_proj, sliding layers do.
    assert "model.language_model.layers.5.self_attn.v_proj.weight" not in keys
    assert "model.language_model.layers.4.self_attn.v_proj.weight" in keys
    gen = json.loads((tiny_base / "generation_config.json").read_text())
    assert gen["eos_token_id"] == models.stop_token_ids()


def test_build_is_deterministic_and_cached(tmp_path, tiny_base):
    again = models.ensure_base("tiny", out=tmp_path / "b")
    for shard in sorted(set(models.read_checkpoint_index(tiny_base).values())):
        with safe_open(str(tiny_base / shard), "numpy") as a, safe_open(str(again / shard), "numpy") as b:
            for k in a.keys():
                assert (a.get_tensor(k) == b.get_tensor(k)).all(), k
    mtime = (again / "model.safetensors.index.json").stat().st_mtime_ns
    assert models.ensure_base("tiny", out=again) == again  # reused, not rebuilt
    assert (again / "model.safetensors.index.json").stat().st_mtime_ns == mtime


@pytest.mark.jax_only
def test_refuses_to_overwrite_foreign_or_different_dirs(tmp_path, tiny_base):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="refusing to overwrite"):
        models.ensure_base("tiny", out=foreign)
    assert (foreign / "notes.txt").read_text() == "keep me"
    with pytest.raises(FileExistsError, match="different base"):
        models.ensure_base("tiny", out=tiny_base, seed=1)


def test_cli_base_prints_the_directory(tmp_path, capsys):
    from cookbook.harness import main

    assert main(["base", "--preset", "tiny", "--out", str(tmp_path / "cli")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "cli")
    assert models.is_complete(tmp_path / "cli")


@pytest.mark.jax_only
def test_fingerprint_follows_the_bytes_not_the_path(tmp_path, tiny_base):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(tiny_base, copy, ignore=shutil.ignore_patterns(".*"))
    assert models.fingerprint(copy) == models.fingerprint(tiny_base)
    assert (copy / ".cookbook-fingerprint.json").is_file()  # read once, then memoised
    shard = sorted(copy.glob("*.safetensors"))[-1]
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1  # one bit of one weight
    shard.write_bytes(bytes(data))
    assert models.fingerprint(copy) != models.fingerprint(tiny_base)  # the memo notices the change
    # Large checkpoints are hashed by header and ends; a change there is still seen.
    sampled = models.fingerprint(copy, full_hash_bytes=0)
    data[-1] ^= 1
    shard.write_bytes(bytes(data))
    assert models.fingerprint(copy, full_hash_bytes=0) != sampled
    with pytest.raises(FileNotFoundError, match="no .safetensors"):
        models.fingerprint(tmp_path)
