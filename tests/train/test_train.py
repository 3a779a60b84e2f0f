"""Tests of cookbook/train.py: recipes, optimizer, run layout, resume after SIGKILL, NaN stop, QLoRA."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import userenv

from cookbook import data, fit, train
from cookbook.train import _cli as train_cli
from cookbook.train import _config, _run, _runs, _trainer

REPO = Path(__file__).resolve().parents[2]


def small_config(**changes) -> train.TrainConfig:
    """The tiny recipe shrunk to a few steps (same code path, smaller numbers)."""
    base = train.train_preset("tiny").replace(
        max_steps=6,
        warmup_steps=2,
        num_train_rows=200,
        num_eval_rows=16,
        eval_every_steps=3,
        eval_batches=1,
        checkpoint_every_steps=3,
        max_checkpoints=5,
        data={"batch_size": 4},
    )
    return base.replace(**changes)


@pytest.mark.jax_only
def test_presets_carry_the_papers_hyperparameters():
    big = train.train_preset("gemma4_31b")
    assert (big.lora.rank, big.lora.alpha, big.lora.dropout) == (64, 64.0, 0.05)
    assert (big.learning_rate, big.warmup_steps) == (1e-4, 100)
    # The paper's 8 sequences per optimizer step on the searched layout's micro-batch.
    layout = fit.recommended_training("gemma4_31b")
    assert big.data.batch_size * big.grad_accum_steps == 8 and big.data.batch_size == layout["batch_size"]
    assert (big.weight_decay, big.max_grad_norm, big.data.seq_len) == (0.001, None, 4096)
    assert (big.mesh_fsdp, big.mesh_tp, big.remat, big.flash_attention) == (
        layout["mesh_fsdp"],
        layout["mesh_tp"],
        layout["remat"],
        layout["flash_attention"],
    )
    assert set(big.lora.targets) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    tiny = train.train_preset("tiny")
    assert tiny.model_preset == "tiny" and tiny.mesh_fsdp * tiny.mesh_tp == 1
    with pytest.raises(ValueError, match="gemma4_31b"):
        train.train_preset("huge")
    with pytest.raises(ValueError, match="warmup_steps"):
        tiny.replace(warmup_steps=tiny.max_steps)
    with pytest.raises(ValueError, match="Unknown model preset"):
        tiny.replace(model_preset="gemma5")


@pytest.mark.jax_only
def test_the_random_twins_train_with_the_cpu_recipe_on_their_own_structure():
    from cookbook import models
    from cookbook.harness import _cli

    tiny = train.train_preset("tiny")
    for twin in ("tiny_e2b", "tiny_26b_a4b"):
        assert models.get_preset(twin).twin_of and _config.recipe_of(twin) == "tiny"
        config = train.train_preset(twin)
        assert config.model_preset == twin and config.replace(model_preset="tiny") == tiny
        args = _cli.build_parser("train").parse_args(["train", "--preset", twin])
        assert train_cli.config_from_args(args) == config
    # A preset with no recipe of its own (every released size has one: tests/fit/test_search.py)
    # is refused, naming the way out.
    assert _config.recipe_of("small") is None
    with pytest.raises(ValueError, match="--recipe tiny"):
        train_cli.config_from_args(_cli.build_parser("train").parse_args(["train", "--preset", "small"]))


@pytest.mark.jax_only
def test_the_data_layout_flags_reach_the_config_and_come_back_in_the_command(tmp_path):
    from cookbook.harness import _cli

    data_file = tmp_path / "rows.jsonl"
    data_file.write_text('{"q": "a", "a": "b"}\n')
    argv = [
        "train",
        "--preset",
        "tiny",
        "--data",
        str(data_file),
        "--format",
        "columns",
        "--columns",
        "prompt=q,response=a",
    ]
    config = train_cli.config_from_args(_cli.build_parser("train").parse_args(argv))
    assert (config.data.data_format, config.data.columns) == ("columns", {"prompt": "q", "response": "a"})
    command = train.cli_command(config, out="runs/x")
    assert "--format columns --columns prompt=q,response=a" in command
    again = train_cli.config_from_args(_cli.build_parser("train").parse_args(command.split()[1:]))
    assert again == config and train.TrainConfig.from_dict(config.to_dict()) == config
    assert _run.cache_key(config) != _run.cache_key(
        config.replace(data=dataclasses.replace(config.data, columns="prompt=a,response=q"))
    )


@pytest.mark.jax_only
def test_config_round_trip_and_cache_key(tiny_base):
    c = train.train_preset("tiny")
    assert train.TrainConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    key = _run.cache_key(c)
    assert key == _run.cache_key(train.train_preset("tiny"))
    assert _run.cache_key(c.replace(learning_rate=c.learning_rate * 2)) != key
    assert _run.cache_key(c.replace(lora={"rank": 8})) != key
    assert _run.cache_key(c.replace(data={"seed": 1})) != key
    # The base is keyed by content: the same bytes at another path reuse the cached run.
    import shutil

    copy = tiny_base.parent / f"{tiny_base.name}-copy-for-key"
    shutil.copytree(tiny_base, copy, dirs_exist_ok=True)
    try:
        assert _run.cache_key(c.replace(base_dir=str(copy))) == key
    finally:
        shutil.rmtree(copy)
    # The device count decides float32 rounding (and so the weights): it keys the cache.
    assert train.result_determinants()["devices"] == 8
    # A QLoRA run is keyed by the quantized step too (a run of an older step is not reused); bf16 is not.
    from cookbook import lora

    q = c.replace(quantize="nf4", quant_tile=32)
    q_key = _run.cache_key(q)
    assert q_key != key
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lora, "QLORA_STEP", lora.QLORA_STEP + " (changed)")
        assert _run.cache_key(q) != q_key
        assert _run.cache_key(c) == key


@pytest.mark.jax_only
def test_the_thinking_sample_task_is_an_option_the_plain_run_never_sees(tiny_base):
    from cookbook.harness import _cli

    plain, thinking = train.train_preset("tiny"), train.train_preset("tiny", sample_task="thinking")
    # The plain recipe is what it was: no new field in its recipe.json or its cache key.
    assert "sample_task" not in plain.to_dict() and train.TrainConfig.from_dict(plain.to_dict()) == plain
    assert train.train_rows(plain) == data.generate_rows("train", n=plain.num_train_rows)
    # The thinking recipe: the same, on thinking rows packed two to a 200-token row, for 300 steps.
    assert (thinking.sample_task, thinking.data.seq_len, thinking.max_steps) == ("thinking", 200, 300)
    assert (
        thinking.replace(sample_task="plain", data={"seq_len": plain.data.seq_len}, max_steps=plain.max_steps) == plain
    )
    assert train.TrainConfig.from_dict(json.loads(json.dumps(thinking.to_dict()))) == thinking
    rows = train.train_rows(thinking)
    assert [data.answer_of(r) for r in rows[:50]] == [data.answer_of(r) for r in train.train_rows(plain)[:50]]
    assert all(data.thought_of(r) for r in rows) and all(data.thought_of(r) for r in train.eval_rows(thinking))
    # The command line: --sample-task thinking is that recipe, and a config writes itself back as it.
    parse = _cli.build_parser("train").parse_args
    assert train_cli.config_from_args(parse(["train", "--preset", "tiny"])) == plain
    assert train_cli.config_from_args(parse(["train", "--preset", "tiny", "--sample-task", "thinking"])) == thinking
    command = train.cli_command(thinking, out="runs/t")
    assert "--sample-task thinking" in command and "--seq-len" not in command
    assert train_cli.config_from_args(parse(command.split()[1:])) == thinking
    with pytest.raises(ValueError, match="carry their own thoughts"):
        plain.replace(train_data="rows.jsonl", sample_task="thinking")
    # The keys: the thinking run has its own, which the thoughts' wording enters; the plain key does not.
    key, thinking_key = _run.cache_key(plain), _run.cache_key(thinking)
    assert thinking_key != key
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(data, "THOUGHT_TEMPLATE", data.THOUGHT_TEMPLATE + " (reworded)")
        assert _run.cache_key(thinking) != thinking_key and _run.cache_key(plain) == key


@pytest.mark.jax_only
def test_with_overrides_keeps_the_recipe_where_a_parameter_is_zero():
    tiny = train.train_preset("tiny")
    assert tiny.with_overrides() is tiny  # every notebook parameter at 0: the recipe itself
    changed = tiny.with_overrides(max_steps=tiny.warmup_steps + 7, lora_rank=2 * tiny.lora.rank)
    assert (changed.max_steps, changed.learning_rate) == (tiny.warmup_steps + 7, tiny.learning_rate)
    assert changed.lora.rank == 2 * tiny.lora.rank and changed.lora.scale == tiny.lora.scale  # alpha / rank kept
    assert changed.lora.targets == tiny.lora.targets


@pytest.mark.jax_only
def test_optimizer_warms_up_then_decays():
    import jax.numpy as jnp

    c = small_config(max_steps=100, warmup_steps=10, learning_rate=1e-2, end_lr_fraction=0.1, max_grad_norm=1.0)
    tx = train.make_optimizer(c)
    params = {"w": jnp.ones(3)}
    state = tx.init(params)
    used = []  # the learning rate each update used (Tunix logs the same hyperparameter)
    for _ in range(102):
        _, state = tx.update({"w": jnp.full(3, 100.0)}, state, params)
        used.append(float(state.hyperparams["learning_rate"]))
    lrs = used
    assert lrs[0] == 0.0
    assert lrs[10] == pytest.approx(1e-2)
    assert lrs[5] == pytest.approx(5e-3)
    assert lrs[100] == pytest.approx(1e-3, rel=1e-4)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:], strict=False))


@pytest.mark.jax_only
@pytest.mark.slow
def test_short_run_layout_resume_and_refusal(tmp_path, tiny_base):
    # With LoRA dropout (31B's recipe has 0.05; here 0.5): trained with it, scored without it.
    c = small_config(grad_accum_steps=2, lora={"dropout": 0.5})
    run = tmp_path / "run"
    result = _trainer.train(c, run, progress=False)
    assert result.final_step == 6 and result.resumed_from == 0
    # Layout promised to cookbook.merge.
    rec = json.loads((run / "recipe.json").read_text())
    assert set(rec) == {"recipe_version", "base_dir", "base_fingerprint", "train"}  # each field once
    assert rec["train"]["model_preset"] == "tiny" and Path(rec["base_dir"]) == tiny_base.resolve()
    assert rec["train"]["lora"]["rank"] == c.lora.rank and rec["train"]["grad_accum_steps"] == 2
    assert train.TrainConfig.from_dict(rec["train"]) == c
    steps = train.checkpoint_steps(run)
    assert {3, 6} <= set(steps)
    ckpt = run / "checkpoints" / "6"
    assert {"model_params", "optimizer_state"} <= {p.name for p in ckpt.iterdir()}
    meta = json.loads((ckpt / "_CHECKPOINT_METADATA").read_text())
    assert meta["custom_metadata"]["recipe"] == rec
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    metrics = train.read_metrics(run)
    assert [s for s, _ in metrics["train/loss"]] == [1, 2, 3, 4, 5, 6]
    assert {s for s, _ in metrics["eval/loss"]} == {0, 3, 6}
    assert all(np.isfinite(v) for _, v in metrics["train/loss"])
    assert metrics["train/loss"][-1][1] < metrics["train/loss"][0][1]
    assert (run / "summary.json").is_file()

    # The checkpoint holds trained LoRA weights; the base weights are untouched.
    model = train.restore_lora_model(run)
    arrays = _runs.lora_arrays(model)
    assert arrays and any("lora_b" in k and np.abs(v).max() > 0 for k, v in arrays.items())
    from safetensors import safe_open

    from cookbook import models

    key = "model.language_model.layers.0.self_attn.q_proj.weight"
    with safe_open(str(tiny_base / models.read_checkpoint_index(tiny_base)[key]), "numpy") as f:
        q_proj = f.get_tensor(key)  # (heads * head_dim, embed)
    p = model.config
    want = q_proj.reshape(p.num_heads, p.head_dim, p.embed_dim).transpose(0, 2, 1)
    np.testing.assert_array_equal(np.asarray(model.layers[0].attn.q_einsum.w.value), want)
    # The restored model is evaluated without the recipe's dropout: two calls, the same logits.
    tokens = np.arange(1, 17, dtype=np.int32)[None]
    assert np.array_equal(models.tunix_logits(model, tokens), models.tunix_logits(model, tokens))

    # Rerunning a finished run resumes at its last step and trains nothing more.
    again = _trainer.train(c, run, progress=False)
    assert again.resumed_from == 6 and again.final_step == 6
    # Another config in the same run directory is refused, naming what changed.
    with pytest.raises(FileExistsError, match="learning_rate"):
        _trainer.train(c.replace(learning_rate=1e-3), run, progress=False)


@pytest.mark.slow
def test_nan_loss_stops_and_keeps_only_good_checkpoints(tmp_path, tiny_base):
    # Warm-up from lr 0 gives one sane step, then an absurd learning rate blows the
    # weights up: the loss turns Inf/NaN a step or two later.
    c = small_config(learning_rate=1e30, warmup_steps=1, checkpoint_every_steps=1, max_checkpoints=10, max_steps=6)
    run = tmp_path / "nan"
    with pytest.raises(train.NonFiniteLossError, match="last good checkpoint") as err:
        _trainer.train(c, run, progress=False)
    steps = train.checkpoint_steps(run)
    assert steps and steps[-1] < 6, steps
    assert f"step {steps[-1]}" in str(err.value)
    assert not (run / "summary.json").exists()
    model = train.restore_lora_model(run)
    assert all(np.isfinite(v).all() for v in _runs.lora_arrays(model).values())
    losses = train.read_metrics(run)["train/loss"]
    assert all(np.isfinite(v) for s, v in losses if s <= steps[-1])


def _cli_command(out: Path) -> list[str]:
    return [
        sys.executable, "-m", "cookbook", "train", "--preset", "tiny", "--out", str(out),
        "--max-steps", "12", "--warmup-steps", "4", "--checkpoint-every", "4", "--eval-every", "100",
        "--batch-size", "4", "--seed", "3",
    ]  # fmt: skip


@pytest.mark.slow
def test_sigkill_then_rerun_resumes_and_matches_uninterrupted_run(tmp_path, tiny_base):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    killed = tmp_path / "killed"
    before = userenv.kill_after_checkpoint(_cli_command(killed), killed, 4, env)
    assert not (killed / "summary.json").exists()
    assert 4 in before and max(before) < 12

    rerun = subprocess.run(_cli_command(killed), cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"Resuming {killed} from checkpoint step {max(before)}" in rerun.stdout
    assert json.loads(rerun.stdout.strip().splitlines()[-1])["final_step"] == 12

    # The same command, uninterrupted (in this process: the same code path as the CLI).
    from cookbook.harness import _cli

    straight = tmp_path / "straight"
    args = _cli.build_parser("train").parse_args(_cli_command(straight)[3:])
    _trainer.train(train_cli.config_from_args(args), straight, progress=False)

    got = _runs.lora_arrays(train.restore_lora_model(killed))
    want = _runs.lora_arrays(train.restore_lora_model(straight))
    assert got.keys() == want.keys()
    # Same config, same devices and threads (train.result_determinants): a resumed run is
    # the uninterrupted run to the last bit, weights and losses.
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    # (Tunix writes a step's loss one step late, so the loss of the step just before the
    # kill may be missing from the log.)
    a, b = dict(train.read_metrics(killed)["train/loss"]), dict(train.read_metrics(straight)["train/loss"])
    assert set(range(max(before) + 1, 13)) <= set(a)
    assert [a[s] for s in sorted(a)] == [b[s] for s in sorted(a)]


@pytest.mark.jax_only
def test_cli_rejects_a_bad_mesh_and_reports_bad_data(tmp_path, tiny_base, capsys):
    from cookbook import harness
    from cookbook.harness import _cli

    with pytest.raises(ValueError, match="FSDPxTP"):
        args = _cli.build_parser("train").parse_args(["train", "--out", str(tmp_path), "--mesh", "four"])
        train_cli.config_from_args(args)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n" * 5 + json.dumps({"prompt": "a", "completion": "b"}) + "\n")
    rc = harness.main(["train", "--out", str(tmp_path / "run"), "--data", str(bad), "--max-steps", "2",
                   "--warmup-steps", "0"])  # fmt: skip
    assert rc == 1
    err = capsys.readouterr().err
    assert "refusing to train" in err and "row 1" in err


@pytest.mark.slow
def _step_compiles(caplog, run) -> dict[str, int]:
    """How many times ``run()`` had Tunix's train and eval steps compiled (cache hits included:
    JAX logs each compile it asks for, before it looks in its persistent cache)."""
    import jax

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="jax._src.interpreters.pxla"), jax.log_compiles(True):
        run()
    said = [r.getMessage() for r in caplog.records]
    return {f: sum(m.startswith(f"Compiling jit({f})") for m in said) for f in ("_train_step", "_eval_step")}


def test_sharded_training_on_a_mesh_matches_one_device(tmp_path, tiny_base, caplog):
    # The 31B recipe trains on a fsdp x tp mesh; here 2 x 2 of the 8 fake CPU devices. The
    # same two steps on one device must give the same losses and LoRA weights.
    c = small_config(max_steps=2, warmup_steps=1, eval_every_steps=2, checkpoint_every_steps=2)
    # Each step is compiled once per run, on a mesh and on one device. On one device Tunix had
    # compiled both twice: first for the fresh adapters' and optax counts' uncommitted arrays, then
    # for the committed ones a step returns (core.commit_arrays).
    mesh_run = _step_compiles(
        caplog, lambda: _trainer.train(c.replace(mesh_fsdp=2, mesh_tp=2), tmp_path / "mesh", progress=False)
    )
    one_run = _step_compiles(caplog, lambda: _trainer.train(c, tmp_path / "one", progress=False))
    assert mesh_run == one_run == {"_train_step": 1, "_eval_step": 1}, (mesh_run, one_run)
    a, b = train.read_metrics(tmp_path / "mesh"), train.read_metrics(tmp_path / "one")
    np.testing.assert_allclose([v for _, v in a["train/loss"]], [v for _, v in b["train/loss"]], rtol=1e-4)
    np.testing.assert_allclose([v for _, v in a["eval/loss"]], [v for _, v in b["eval/loss"]], rtol=1e-4)
    model = train.restore_lora_model(tmp_path / "mesh")
    leaf = model.layers[0].attn.q_einsum.w_lora_a.value
    assert len(leaf.sharding.device_set) == 4
    got = _runs.lora_arrays(model)
    want = _runs.lora_arrays(train.restore_lora_model(tmp_path / "one"))
    # Step 1 has lr 0; step 2 is Adam's first update, ~lr * sign(grad) per element, so lr is the
    # scale of what training moved. A gradient within float noise of 0 may move an element by a
    # different amount, so a loose bound per element (2.5% of lr) and a tight one on the mean
    # (2.5e-4 of lr); a sign flip on every element would differ by 2 * lr.
    lr = c.learning_rate
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-3, atol=0.025 * lr, err_msg=k)
        assert np.abs(got[k] - want[k]).mean() < 2.5e-4 * lr, k


def test_a_run_recorded_before_a_config_field_existed_still_resumes(tmp_path, tiny_base):
    """A recipe.json without fields added since (here QLoRA's, at their defaults) is the same
    config; a real change is still refused."""
    from cookbook.train._trainer import _shared_recipe

    config = train.train_preset("tiny")
    rec = _run.recipe(config, tiny_base)
    old = json.loads(json.dumps(rec))
    for field in ("quantize", "quant_tile"):
        del old["train"][field]
    (tmp_path / "recipe.json").write_text(json.dumps(old))
    _shared_recipe(tmp_path, rec)  # resumes
    with pytest.raises(FileExistsError, match="quantize"):
        _shared_recipe(tmp_path, _run.recipe(config.replace(quantize="nf4", quant_tile=32), tiny_base))


def test_a_run_is_refused_on_a_base_with_other_weights(tmp_path, tiny_base):
    """The recorded content fingerprint decides, at resume and at restore (and `cookbook eval
    --run`, tests/evaluate/test_cli.py); a run recorded before fingerprints compares paths."""
    from cookbook import models
    from cookbook.train._trainer import _shared_recipe

    config = train.train_preset("tiny")
    rec = _run.recipe(config, tiny_base)
    other = {**rec, "base_fingerprint": "0" * 20}
    (tmp_path / "recipe.json").write_text(json.dumps(other))
    fingerprints = rf"fingerprint {'0' * 20}\).*fingerprint {rec['base_fingerprint']}"
    with pytest.raises(models.BaseMismatchError, match=fingerprints + ".*--base"):
        _shared_recipe(tmp_path, rec)  # resume
    with pytest.raises(models.BaseMismatchError, match=rf"{'0' * 20}.*{rec['base_fingerprint']}"):
        train.restore_lora_model(tmp_path)  # before a model is built
    legacy = {k: v for k, v in rec.items() if k != "base_fingerprint"}
    (tmp_path / "recipe.json").write_text(json.dumps(legacy))
    _shared_recipe(tmp_path, rec)  # the same path: resumes, as before fingerprints
    assert train.check_run_base(tmp_path) == tiny_base.resolve()
    (tmp_path / "recipe.json").write_text(json.dumps({**legacy, "base_dir": str(tmp_path / "elsewhere")}))
    with pytest.raises(models.BaseMismatchError, match="elsewhere"):
        _shared_recipe(tmp_path, rec)


def test_a_torn_metrics_line_is_skipped_and_the_next_record_lands_whole(tmp_path):
    """A run killed mid-write leaves a torn last line in metrics.jsonl; every later train() read
    it back after training and failed on it."""
    from cookbook.train._trainer import _JsonlBackend

    path = tmp_path / "metrics.jsonl"
    path.write_text(
        '{"step": 1, "name": "train/loss", "value": 2.5}\n{"step": 2, "name": "train/loss", "value": 2.0}\n'
        '{"step": 3, "name": "train/lo'
    )
    with pytest.warns(UserWarning, match=r"metrics\.jsonl:3: skipped"):
        assert train.read_metrics(tmp_path) == {"train/loss": [(1, 2.5), (2, 2.0)]}
    backend = _JsonlBackend(path)  # a resumed run appends
    backend.log_scalar("train/loss", np.float32(1.5), step=3)
    backend.log_scalar("jax/compile_time", 1.0, step=3)  # not a metric of the run
    backend.close()
    with pytest.warns(UserWarning, match=r"metrics\.jsonl:3: skipped") as caught:
        assert train.read_metrics(tmp_path) == {"train/loss": [(1, 2.5), (2, 2.0), (3, 1.5)]}
    lines = path.read_text().splitlines(keepends=True)
    assert len(caught) == 1 and len(lines) == 4 and lines[3].endswith("\n") and json.loads(lines[3])["value"] == 1.5


# --- QLoRA: it resumes like LoRA, and it learns the sample task (issue 14's bar) ---


def _is_quantized(model) -> bool:
    """Whether the frozen base of ``model`` is Qwix-quantized (its projections hold ``qvalue``s)."""
    from flax import nnx

    return any("qvalue" in map(str, path) for path, _ in nnx.to_flat_state(nnx.state(model)))


@pytest.mark.slow
def test_qlora_nf4_learns_the_sample_task_and_resumes_like_lora(tmp_path, tiny_base):
    """The tiny recipe on an nf4 base (tile 32): held-out
    exact match at least 80%, and the untrained base's (the control) at most 5%; and a copy of
    the run with its last checkpoint removed resumes from the one before to the same weights
    (checkpointed 2 steps before the end, so that the resume retrains 2 nf4 steps, not 50).
    The bf16 run's own accuracy is tests/evaluate/test_generators.py's."""
    import shutil

    config = train.train_preset("tiny").replace(quantize="nf4", quant_tile=32)
    config = config.replace(checkpoint_every_steps=config.max_steps - 2)
    q_run = train.ensure_trained(config, progress=False)
    steps = train.checkpoint_steps(q_run)
    cut = tmp_path / "cut"
    shutil.copytree(q_run, cut)
    shutil.rmtree(cut / "checkpoints" / str(steps[-1]))
    again = _trainer.train(config, cut, progress=False)
    assert (again.resumed_from, again.final_step) == (steps[-2], config.max_steps)
    whole, resumed = (
        _runs.lora_arrays(train.restore_lora_model(q_run)),
        _runs.lora_arrays(train.restore_lora_model(cut)),
    )
    assert whole.keys() == resumed.keys() and whole
    for k in whole:
        np.testing.assert_array_equal(whole[k], resumed[k], err_msg=k)  # one process: bit-identical

    base_dir = train.resolve_base_dir(config)
    tokenizer = data.load_tokenizer(base_dir=base_dir)
    rows = train.eval_rows(config)[:100]
    assert _is_quantized(train.restore_lora_model(q_run))
    assert not _is_quantized(train.restore_lora_model(q_run, dense_base=True))
    # Notebook 06's section 10: the same run (found in the cache), scored as trained and on the dense base.
    twin = train.qlora_twin(
        config.replace(quantize=None), "nf4", tile=32, tokenizer=tokenizer, rows=rows, compare_with=()
    )
    assert (twin.quantize, twin.tile, [m["preset"] for m in twin.memory]) == ("nf4", 32, ["tiny"] * 3)
    assert twin.run_dir == q_run  # the cached run, not a new one
    # The quantized base (a LoRA of zeros on it) shares the QLoRA model's sampler.
    base = train.evaluate(
        train.build_lora_model(config, base_dir), tokenizer, rows, batch_size=50, sampler=twin.sampler
    )
    print(f"exact match on {len(rows)} held-out rows: QLoRA nf4 {twin.as_trained:.1%} (on the dense base "
          f"{twin.on_dense_base:.1%}), base {base['accuracy']:.1%}")  # fmt: skip
    # The bound: the worst of benchmarks/outcome_spread.py's nf4 runs over seeds, less their spread.
    assert twin.as_trained >= userenv.outcome_bound("qlora", "exact_match", len(rows))
    assert base["accuracy"] <= 0.05  # the control: what it learned, the base does not know


def test_qlora_on_the_default_preset_takes_a_tile_that_fits_it_and_says_so(capsys):
    """`cookbook train --preset tiny --quantize nf4` (and `cookbook plan`) on their own defaults: the
    tile is the largest up to 128 that divides every quantized weight (tiny: 32; 128 does not
    divide its widths and used to be refused), printed on stderr so --show-config stays JSON."""
    from cookbook import fit, harness, lora
    from cookbook.lora import _quant

    assert lora.default_quant_tile("tiny") == 32 and lora.default_quant_tile("gemma4_31b") == 128
    assert 128 not in _quant.working_tiles("tiny")
    assert harness.main(["train", "--preset", "tiny", "--quantize", "nf4", "--show-config"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["quant_tile"] == 32 and "QLoRA tile 32" in err
    assert harness.main(["train", "--preset", "tiny", "--quantize", "nf4", "--quant-tile", "32", "--show-config"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["quant_tile"] == 32 and "QLoRA tile" not in err  # given: taken as given
    assert harness.main(["train", "--preset", "tiny", "--quantize", "nf4", "--quant-tile", "128", "--show-config"]) == 1
    assert "does not divide" in capsys.readouterr().err
    from cookbook.fit._plan_cli import config_from_args

    parser = __import__("argparse").ArgumentParser()
    fit.register_plan_cli(parser.add_subparsers())
    args = parser.parse_args(["plan", "--preset", "tiny", "--quantize", "nf4", "--slice", "v5e-1"])
    assert config_from_args(args).quant_tile == 32
