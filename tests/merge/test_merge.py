"""cookbook.merge / peft_export / shards: streamed LoRA merge, PEFT export, safety checks."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from cookbook import merge, models
from cookbook.merge import _merge, _merge_cli, _outdir, _safetensors, _verify
from cookbook.models import _loader

REPO = Path(__file__).resolve().parents[2]
RANK, ALPHA = 8, 16.0
SHARD = 2 * 2**20  # tiny is ~7.8 MB: several output shards


@pytest.fixture(scope="module")
def lora_run(tiny_base) -> Path:
    """A Tunix LoRA run with random non-zero A and B (cached; notebook 07's test shares it)."""
    return _verify.ensure_random_lora_run("tiny", rank=RANK, alpha=ALPHA)


@pytest.fixture(scope="module")
def outputs(tiny_base, lora_run, tmp_path_factory) -> dict[str, Path]:
    """The merged model (released layout, via the API), text-only + PEFT (via the CLI)."""
    from cookbook import harness

    d = tmp_path_factory.mktemp("out")
    merge.merge_lora(tiny_base, lora_run, d / "merged", max_shard_bytes=SHARD, progress=False)
    rc = harness.main(
        ["merge", "--lora", str(lora_run), "--out", str(d / "text"), "--text-only", "--peft-out", str(d / "peft_text")]
    )
    assert rc == 0
    _merge.export_peft(lora_run, d / "peft_mm", layout="multimodal")
    return {
        "merged": d / "merged",
        "text": d / "text",
        "peft_text": d / "peft_text",
        "peft_mm": d / "peft_mm",
        "text_base": merge.ensure_text_only_base(tiny_base, "tiny"),
    }


# Logit parity (merged, text-only, PEFT on both bases vs Tunix + LoRA, in a fresh process)
# is asserted by tests/notebooks/test_nb_07_merge.py on what notebook 07 records, on this same run.


def test_untouched_tensors_are_byte_identical(tiny_base, outputs):
    from safetensors import safe_open

    from cookbook import models

    def tensors(d):
        out = {}
        for shard in set(models.read_checkpoint_index(d).values()):
            with safe_open(str(d / shard), framework="numpy") as f:
                out.update({k: f.get_tensor(k) for k in f.keys()})
        return out

    base, merged = tensors(tiny_base), tensors(outputs["merged"])
    assert set(base) == set(merged)
    changed = {k for k in base if not np.array_equal(base[k], merged[k])}
    lora_keys = {k for k in base if k.endswith(("_proj.weight",)) and ".layers." in k}
    assert changed == lora_keys  # every projection updated, nothing else touched
    assert all(merged[k].dtype == base[k].dtype for k in base)
    text = tensors(outputs["text"])
    assert set(text) == {k.replace("model.language_model.", "model.") for k in base}
    assert np.array_equal(
        text["model.layers.5.self_attn.k_proj.weight"], merged["model.language_model.layers.5.self_attn.k_proj.weight"]
    )


def test_output_shards_index_and_side_files(tiny_base, outputs):
    out = outputs["merged"]
    index = json.loads((out / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert len(files) >= 3 and files == sorted(p.name for p in out.glob("*.safetensors"))
    total = 0
    for name in files:
        refs, meta = merge.read_header(out / name)
        assert meta == {"format": "pt"}
        assert {k for k, v in index["weight_map"].items() if v == name} == set(refs)
        data = sum(r.nbytes for r in refs.values())
        assert data <= SHARD or len(refs) == 1
        total += data
    assert index["metadata"]["total_size"] == total
    for f in (
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
    ):
        assert (out / f).read_bytes() == (tiny_base / f).read_bytes(), f
    cfg = json.loads((outputs["text"] / "config.json").read_text())
    assert cfg["architectures"] == ["Gemma4ForCausalLM"] and cfg["model_type"] == "gemma4_text"
    assert cfg["num_hidden_layers"] == 6 and cfg["attention_k_eq_v"] is True
    assert not list(out.parent.glob(".merged.tmp-*"))


def test_peft_adapter_config_and_vllm_v_copy(outputs):
    from safetensors.numpy import load_file

    cfg = json.loads((outputs["peft_text"] / "adapter_config.json").read_text())
    assert (cfg["r"], cfg["lora_alpha"], cfg["peft_type"]) == (RANK, ALPHA, "LORA")
    assert sorted(cfg["target_modules"]) == sorted(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    t = load_file(str(outputs["peft_text"] / "adapter_model.safetensors"))
    g = "base_model.model.model.layers.5.self_attn."
    # Layer 5 is the K = V global layer: vLLM takes V's LoRA from v_proj, so it copies k_proj.
    for ab in "AB":
        assert np.array_equal(t[f"{g}v_proj.lora_{ab}.weight"], t[f"{g}k_proj.lora_{ab}.weight"])
    assert t[f"{g}k_proj.lora_B.weight"].shape == (2 * 64, RANK)
    assert t["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"].shape == (RANK, 128)
    mm = json.loads((outputs["peft_mm"] / "adapter_config.json").read_text())
    assert isinstance(mm["target_modules"], str) and "language_model" in mm["target_modules"]


def test_reads_recipe_without_building_the_model(lora_run):
    ckpt = merge.open_lora_checkpoint(lora_run)
    assert (ckpt.rank, ckpt.alpha, ckpt.preset, ckpt.step) == (RANK, ALPHA, "tiny", 1)
    assert ckpt.layers == tuple(range(6))
    assert {p.module for p in ckpt.pairs if p.layer == 5} >= {"attn.k_einsum"}
    assert "attn.kv_einsum" not in {p.module for p in ckpt.pairs if p.layer == 5}


def _edit_metadata(run: Path, **changes) -> None:
    meta_file = run / "checkpoints" / "1" / "_CHECKPOINT_METADATA"
    meta = json.loads(meta_file.read_text())
    meta["custom_metadata"]["recipe"].update(changes)
    meta_file.write_text(json.dumps(meta))
    recipe = json.loads((run / "recipe.json").read_text())
    recipe.update(changes)
    (run / "recipe.json").write_text(json.dumps(recipe))


def test_refuses_other_preset_or_rank_before_writing(tiny_base, lora_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(lora_run, run)
    _edit_metadata(run, model_preset="small")
    with pytest.raises(ValueError, match="does not fit preset 'small'"):
        merge.merge_lora(tiny_base, run, tmp_path / "out", progress=False)
    _edit_metadata(run, model_preset="tiny", lora={"rank": 16, "alpha": 32.0})
    with pytest.raises(ValueError, match="rank-8 LoRA tensors but its recipe rank 16"):
        merge.merge_lora(tiny_base, run, tmp_path / "out", progress=False)
    with pytest.raises(ValueError, match="rank-8 LoRA tensors but you asked for rank 4"):
        merge.open_lora_checkpoint(lora_run, rank=4)
    assert sorted(os.listdir(tmp_path)) == ["run"]  # nothing written


def test_refuses_lora_from_a_wider_model(tiny_base, tmp_path):
    import orbax.checkpoint as ocp

    step = tmp_path / "run" / "checkpoints" / "1"
    tree = {
        "layers": {
            "0": {
                "attn": {
                    "q_einsum": {
                        "w_lora_a": {"value": np.zeros((256, 4), np.float32)},
                        "w_lora_b": {"value": np.zeros((4, 8, 32), np.float32)},
                    }
                }
            }
        }
    }
    ocp.PyTreeCheckpointer().save(step / "model_params", tree)
    (step / "_CHECKPOINT_METADATA").write_text(
        json.dumps({"custom_metadata": {"recipe": {"model_preset": "tiny", "lora": {"rank": 4, "alpha": 8.0}}}})
    )
    with pytest.raises(ValueError, match=r"layers\.0\.attn\.q_einsum: lora_a/lora_b shapes \(256, 4\)"):
        merge.merge_lora(tiny_base, tmp_path / "run", tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_refuses_overwrite_and_escaping_shard_names(tiny_base, lora_run, outputs, tmp_path):
    with pytest.raises(FileExistsError, match="--overwrite"):
        merge.merge_lora(tiny_base, lora_run, outputs["merged"], progress=False)
    bad = tmp_path / "bad_base"
    shutil.copytree(tiny_base, bad)
    index = json.loads((bad / "model.safetensors.index.json").read_text())
    key = next(iter(index["weight_map"]))
    index["weight_map"][key] = "../" + index["weight_map"][key]
    (bad / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match="points outside"):
        merge.merge_lora(bad, lora_run, tmp_path / "out", progress=False)


def test_overwrite_replaces_atomically(tiny_base, lora_run, tmp_path):
    out = tmp_path / "m"
    merge.merge_lora(tiny_base, None, out, preset="tiny", text_only=True, progress=False)  # plain conversion
    r = merge.merge_lora(tiny_base, lora_run, out, overwrite=True, max_shard_bytes=SHARD, progress=False)
    assert r.merged_tensors == 41 and r.num_shards >= 3
    assert json.loads((out / ".cookbook-complete.json").read_text())["rank"] == RANK
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def _linked_copy(src: Path, dst: Path) -> Path:
    """``src``'s files hard-linked into ``dst`` (no dot files: its fingerprint memo is rewritten in place)."""
    return Path(shutil.copytree(src, dst, copy_function=os.link, ignore=shutil.ignore_patterns(".*")))


def test_out_over_an_input_or_a_foreign_dir_is_refused_and_nothing_deleted(tiny_base, lora_run, tmp_path, capsys):
    """`cookbook merge --lora runs/x --out runs/x --overwrite` deleted the training run."""
    from cookbook import harness

    run = Path(shutil.copytree(lora_run, tmp_path / "runs" / "x"))
    base = _linked_copy(tiny_base, tmp_path / "base")  # the suite's shared base is never at stake
    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    cases = [
        (run, "is or holds the LoRA run"),
        (tmp_path / "runs", "is or holds the LoRA run"),
        (run / "checkpoints", "lies inside the LoRA run"),
        (base, "is or holds the base checkpoint"),
        (base / "sub", "lies inside the base checkpoint"),
        (foreign, "not an earlier output of cookbook merge"),
    ]
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    for out, message in cases:
        rc = harness.main(["merge", "--lora", str(run), "--base", str(base), "--out", str(out), "--overwrite"])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 1 and len(err) == 1 and message in err[0] and "--out" in err[0], (out, err)
    # --peft-out is checked before the merge starts: no merged --out is left behind either.
    rc = harness.main(
        [
            "merge",
            "--lora",
            str(run),
            "--base",
            str(base),
            "--out",
            str(tmp_path / "new"),
            "--peft-out",
            str(run),
            "--overwrite",
        ]
    )
    assert rc == 1 and "--peft-out" in capsys.readouterr().err
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before  # nothing deleted or added
    assert merge.open_lora_checkpoint(run).step == 1 and (foreign / "keep.txt").read_text() == "mine"
    # What may be replaced: an empty directory, an earlier output (also one recorded before outputs
    # named their kind); what may be written inside a run: its merged/ cache.
    inputs = {"base checkpoint": base, "LoRA run": run}
    (tmp_path / "empty").mkdir()
    old = tmp_path / "old-merge"
    old.mkdir()
    (old / ".cookbook-complete.json").write_text(json.dumps({"version": 1, "text_only": True, "max_shard_bytes": 1}))
    for out in (tmp_path / "empty", old, run / "merged" / "step1-text"):
        assert _outdir.check_out_dir(out, inputs=inputs, overwrite=True) == out
    (old / ".cookbook-complete.json").write_text(json.dumps({"preset": "tiny", "seed": 0}))  # a base's record
    with pytest.raises(FileExistsError, match="not an earlier output"):
        _outdir.check_out_dir(old, inputs=inputs, overwrite=True)


def test_base_with_other_weights_is_refused_by_content(tiny_base, lora_run, tmp_path):
    run = Path(shutil.copytree(lora_run, tmp_path / "run"))
    copy = _linked_copy(tiny_base, tmp_path / "copy")  # the same bytes at another path
    _edit_metadata(run, base_fingerprint="0" * 20)
    with pytest.raises(
        models.BaseMismatchError, match=rf"fingerprint {'0' * 20}\).*{models.fingerprint(tiny_base)}.*--base"
    ):
        merge.merge_lora(tiny_base, run, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()
    _edit_metadata(run, base_fingerprint=models.fingerprint(tiny_base))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _merge.plan_merge(copy, merge.open_lora_checkpoint(run))  # a copy of the same base: no word
    _edit_metadata(run, base_fingerprint=None)  # recorded before fingerprints: the path, as before
    with pytest.warns(UserWarning, match="make sure they hold the same weights"):
        _merge.plan_merge(copy, merge.open_lora_checkpoint(run))


@pytest.mark.parametrize("which", ["merged", "peft", "text_only_base"])
def test_cold_cache_is_filled_once_while_a_second_caller_waits(which, tiny_base, lora_run, tmp_path, monkeypatch):
    """Two callers on a cold cache: the second waits on the lock and reuses the first's directory
    (unlocked, both filled it and the second replaced the first's finished one)."""
    import threading

    from cookbook.merge import _cache

    monkeypatch.setenv("COOKBOOK_CACHE", str(tmp_path / "cache"))  # a cold text-only cache
    run = Path(shutil.copytree(lora_run, tmp_path / "run"))
    second_filled = threading.Event()
    fills, results, second = [], [], []

    def fill(*args, **kwargs):
        out = Path(args[1] if which == "peft" else args[2])
        fills.append(out)
        if len(fills) == 1:  # the first filler lets a second caller in and gives it time to fill too
            second.append(threading.Thread(target=call))
            second[0].start()
            second_filled.wait(timeout=0.5)
        else:
            second_filled.set()
        out.mkdir(parents=True, exist_ok=True)
        (out / ".cookbook-complete.json").write_text(json.dumps({"kind": "cookbook merge output"}))

    def call():
        if which == "merged":
            results.append(merge.ensure_merged(run, text_only=True, progress=False))
        elif which == "peft":
            results.append(merge.ensure_peft(run))
        else:
            results.append(merge.ensure_text_only_base(tiny_base, "tiny"))

    monkeypatch.setattr(_cache, "export_peft" if which == "peft" else "merge_lora", fill)
    call()
    second[0].join(timeout=30)
    assert len(fills) == 1 and len(results) == 2 and results[0] == results[1] == fills[0]


@pytest.mark.slow
def test_sigkill_leaves_out_absent_then_rerun_succeeds(tiny_base, lora_run, tmp_path):
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "cookbook",
        "merge",
        "--lora",
        str(lora_run),
        "--base",
        str(tiny_base),
        "--out",
        str(out),
        "--max-shard-size",
        "256KiB",
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            if list(tmp_path.glob(".out.tmp-*/model-*.safetensors")):
                break  # the first output shard is being written: part-way
            time.sleep(0.001)
        assert proc.poll() is None, "merge finished before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert not out.exists()
    assert list(tmp_path.glob(".out.tmp-*"))  # the partial work is in the hidden temporary
    r = merge.merge_lora(tiny_base, lora_run, out, max_shard_bytes=256 * 2**10, progress=False)
    assert r.num_shards > 10 and models.is_complete(out)
    assert not list(tmp_path.glob(".out.tmp-*"))  # the dead run's temporary was cleaned up


def test_ensure_merged_is_cached(lora_run, tmp_path):
    lora_run = Path(shutil.copytree(lora_run, tmp_path / "run"))
    a = merge.ensure_merged(lora_run, text_only=True, progress=False)
    mtime = (a / ".cookbook-complete.json").stat().st_mtime_ns
    assert merge.ensure_merged(lora_run, text_only=True, progress=False) == a
    assert (a / ".cookbook-complete.json").stat().st_mtime_ns == mtime
    assert a.parent == lora_run / "merged"
    assert merge.ensure_merged(lora_run, text_only=False, progress=False) != a


def test_plan_shards_and_sizes():
    ref = lambda n: merge.TensorRef(name="x", path=Path("f"), dtype="U8", shape=(n,), offset=0, nbytes=n)  # noqa: E731
    groups = _safetensors.plan_shards([merge.OutTensor(name=str(i), src=ref(n)) for i, n in enumerate([3, 3, 9, 1])], 6)
    assert [[t.name for t in g] for g in groups] == [["0", "1"], ["2"], ["3"]]
    assert _safetensors.shard_names(2) == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert _merge_cli.parse_size("5GB") == 5 * 10**9 and _merge_cli.parse_size("256KiB") == 256 * 1024


@pytest.mark.slow
def test_mapping_covers_every_projection_at_31b_shapes(preset="gemma4_31b"):
    """Qwix's LoRA shapes on the (abstract, weightless) 31B Tunix model map onto exactly the
    transformers weights (tiny is covered by the logit test): K = V global layers included."""
    from flax import nnx

    from cookbook import lora, models

    p = models.get_preset(preset)
    model = lora.abstract_lora_model(p, lora.LoraConfig(rank=64, alpha=64.0))
    pairs = lora.lora_pairs(nnx.state(model, nnx.LoRAParam))
    lora.check_pairs_fit_preset(pairs, p, 64)
    expected = _loader.expected_hf_shapes(p, "model.")
    covered = {}
    for pair in pairs:
        for hf in lora.TUNIX_TO_HF_MODULES[pair.module]:
            if pair.module == "attn.k_einsum" and hf.endswith("v_proj"):
                continue
            covered[f"model.layers.{pair.layer}.{hf}.weight"] = _merge.hf_module_shape(pair, hf)
    projections = {k: v for k, v in expected.items() if k.endswith("_proj.weight")}
    assert covered == projections
    assert sum(k.endswith("v_proj.weight") for k in covered) == len(p.sliding_layers)


@pytest.mark.jax_only
def test_a_run_named_by_a_relative_path_opens_like_its_absolute_one(lora_run, monkeypatch):
    """`cookbook merge --lora runs/x` from the project directory: Orbax reads metadata from
    absolute paths only (a relative one came back as None and the export failed)."""
    absolute = merge.open_lora_checkpoint(lora_run)
    monkeypatch.chdir(lora_run.parent)
    relative = merge.open_lora_checkpoint(lora_run.name)
    assert relative.step_dir.is_absolute() and relative == absolute


def test_generation_config_stops_on_every_gemma4_stop_token(tiny_base, tmp_path):
    """Google's releases stop on [<eos>, <turn|>, <|tool_response>] = [1, 106, 50]; a base whose
    generation_config.json lists fewer (config.json says [1, 106]) or has none gets the rest."""
    from cookbook.models import _tokenizer

    want = [_tokenizer.SPECIAL_TOKEN_IDS[t] for t in _merge.STOP_TOKENS]
    assert want == _tokenizer.stop_token_ids()
    base = Path(shutil.copytree(tiny_base, tmp_path / "base", ignore=shutil.ignore_patterns(".*")))
    gen = base / "generation_config.json"
    cfg = json.loads(gen.read_text())
    assert cfg["eos_token_id"] == want  # the twins' base: kept byte for byte (test above)
    cfg["eos_token_id"] = want[:2]
    gen.write_text(json.dumps(cfg))
    merge.merge_lora(base, None, tmp_path / "fewer", preset="tiny", progress=False)
    out = json.loads((tmp_path / "fewer" / "generation_config.json").read_text())
    assert out["eos_token_id"] == want and out["bos_token_id"] == cfg["bos_token_id"]
    record = json.loads((tmp_path / "fewer" / ".cookbook-complete.json").read_text())
    assert record["generation_config_added_eos"] == want[2:]
    gen.unlink()
    merge.merge_lora(base, None, tmp_path / "none", preset="tiny", progress=False)
    assert json.loads((tmp_path / "none" / "generation_config.json").read_text()) == {"eos_token_id": want}


def test_the_31b_extrapolation_summary_in_readable_units():
    """Notebook 07's table of the committed 31B-width benchmark: bf16 bytes of 31B's parameters,
    minutes from seconds, and NaN, not a KeyError, for a figure the benchmark did not measure."""
    from cookbook import merge, models
    from cookbook.merge import _verify

    bench = json.loads((Path(__file__).resolve().parents[2] / "benchmarks/results/merge_bench.json").read_text())
    extrap = _verify.extrapolate_merge(bench, "gemma4_31b")
    summary = merge.extrapolation_summary(extrap)
    assert summary["model GB"] == pytest.approx(2 * models.get_preset("gemma4_31b").num_params() / 1e9)
    assert summary["merge minutes (extrapolated)"] * 60 == pytest.approx(extrap["merge_seconds"])
    assert summary["merge peak RSS GiB"] < summary["Tunix saver peak RSS GiB (extrapolated)"]  # streamed vs in RAM
    partial = {k: v for k, v in extrap.items() if k not in ("merge_cpu_seconds", "tunix_peak_rss_bytes")}
    assert np.isnan(merge.extrapolation_summary(partial)["merge CPU minutes (extrapolated)"])
    assert list(merge.BENCH_COLUMNS)[:2] == ["layers", "base_bytes"] and set(merge.BENCH_COLUMNS) <= set(
        bench["runs"][0]
    )
