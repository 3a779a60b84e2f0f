"""cookbook.fit: the tiny LoRA train step compiled for TPU v5p-8 and v6e-8, with no TPU."""

import json

import pytest

from cookbook import fit, lora
from cookbook.fit import _layouts, _plan, _plan_config, _plan_report
from cookbook.models import _base

# Same values the CLI test and notebook 04's defaults use, so they reuse the cached compiles.
TINY = dict(
    model_preset="tiny",
    batch_size=4,
    seq_len=1024,
    lora=lora.LoraConfig(rank=8, alpha=16.0, dropout=0.0, targets="all-linear"),
)


@pytest.fixture(scope="module")
def plans():
    return {
        ("v5p-8", "none"): fit.plan(fit.PlanConfig(slice_name="v5p-8", remat="none", **TINY)),
        ("v5p-8", "decoder"): fit.plan(fit.PlanConfig(slice_name="v5p-8", remat="decoder", **TINY)),
        ("v6e-8", "decoder"): fit.plan(fit.PlanConfig(slice_name="v6e-8", remat="decoder", **TINY)),
        ("v6e-8", "none"): fit.plan(fit.PlanConfig(slice_name="v6e-8", remat="none", **TINY)),
    }


@pytest.mark.slow
def test_tiny_plans_compile_and_are_consistent(plans):
    none, dec, v6e = plans[("v5p-8", "none")], plans[("v5p-8", "decoder")], plans[("v6e-8", "decoder")]
    expected = lora.expected_lora_params("tiny", lora.LoraConfig(rank=8, alpha=16.0, targets="all-linear"))
    for r in (none, dec, v6e):
        assert r.compiles and r.fits and r.fits_with_margin, r.summary()
        assert r.lora_params == expected
        assert r.activation_constraints > 0  # docs/traps.md trap 3: Tunix's shard() really applied
        assert 0 < r.argument_bytes and 0 < r.temp_bytes and r.total_bytes < r.hbm_bytes
        assert r.tokens_per_step == 4 * 1024
        assert r.predicted_tokens_per_s == pytest.approx(r.tokens_per_step / r.predicted_step_s)
    # 2 global KV heads cap tp at 2: v5p-8 (4 chips) is 2 x 2, v6e-8 (8 chips) 4 x 2.
    assert (none.fsdp, none.tp, none.chips) == (2, 2, 4)
    assert (v6e.fsdp, v6e.tp, v6e.chips) == (4, 2, 8)
    # Same state, same arguments; remat trades temp memory for recomputed FLOPs.
    assert dec.argument_bytes == none.argument_bytes
    assert dec.temp_bytes < none.temp_bytes
    assert dec.flops_per_chip > none.flops_per_chip
    # Twice the chips: each holds less and computes less; the work per token stays the same.
    assert v6e.argument_bytes < dec.argument_bytes
    assert v6e.flops_per_chip < dec.flops_per_chip
    assert v6e.flops_per_token == pytest.approx(dec.flops_per_token, rel=0.15)
    assert plans[("v6e-8", "none")].temp_bytes > v6e.temp_bytes
    # v6e's peak is twice v5p's: the same work is predicted faster.
    assert v6e.peak_flops == pytest.approx(2 * dec.peak_flops, rel=0.01)


@pytest.mark.slow
def test_the_compilers_step_estimate_and_its_cost(plans):
    """cost_analysis()'s own step estimate, never below the FLOP floor, and $ per 1M tokens from
    the price table (v5p-8's is sourced; an override replaces it)."""
    from cookbook import core

    none, dec = plans[("v5p-8", "none")], plans[("v5p-8", "decoder")]
    for r in (none, dec):
        assert r.compiler_step_s > 0 and r.bytes_accessed > 0
        assert r.flop_floor_s == pytest.approx(r.flops_per_chip / r.peak_flops)
        assert r.estimated_step_s == max(r.compiler_step_s, r.flop_floor_s) >= r.flop_floor_s
        price = core.get_price("tpu-v5p-8").usd_per_hour
        assert r.usd_per_million_tokens() == pytest.approx(price / 3600 / r.estimated_tokens_per_s * 1e6)
        assert r.usd_per_million_tokens(overrides={"tpu-v5p-8": 2 * price}) == pytest.approx(
            2 * r.usd_per_million_tokens()
        )
    # Recomputing activations costs time in the compiler's estimate too.
    assert dec.compiler_step_s > none.compiler_step_s
    # libtpu's deviceless cost model answers a negative step time for some layouts (this one, and
    # every 31B layout on v5e and v6e): the planner takes it as no estimate, the floor alone.
    bad = plans[("v6e-8", "none")]
    assert bad.compiler_step_s < 0, "libtpu now gives v6e-8 an estimate here: update the notes on negative ones"
    assert not bad.has_compiler_estimate and bad.estimate_bound == "FLOP floor (no compiler estimate)"
    assert bad.estimated_step_s == bad.flop_floor_s > 0
    assert _plan_report.report_row(bad)["compiler tokens/s"] == "-"
    assert fit.report_from_dict(json.loads(json.dumps(dec.to_dict()))) == dec


@pytest.mark.jax_only
def test_one_short_tiny_step_compiles_for_v5p_with_no_tpu():
    """One real deviceless compile (what the TPU-host pass can afford): the step compiles for
    v5p-8's 4 chips, fits, carries exactly the LoRA parameters Qwix creates, and applies
    Tunix's activation sharding on the TPU mesh."""
    cfg = fit.PlanConfig(slice_name="v5p-8", remat="none", **{**TINY, "seq_len": 128})
    r = fit.plan(cfg)
    assert r.compiles and r.fits, r.summary()
    assert (r.fsdp, r.tp, r.chips) == (2, 2, 4)
    assert r.lora_params == lora.expected_lora_params("tiny", cfg.lora)
    assert r.activation_constraints > 0
    assert 0 < r.argument_bytes and 0 < r.temp_bytes and r.total_bytes < r.hbm_bytes
    assert r.tokens_per_step == 4 * 128


def test_one_chip_as_colab_rents_it_compiles_with_no_tpu():
    """v5e-1, Colab's free runtime: libtpu describes one chip only with its host bounds given
    (core.SliceSpec.chips_per_host_bounds); the step compiles on a 1 x 1 mesh and fits its usable 15.75 GiB."""
    cfg = fit.PlanConfig(slice_name="v5e-1", remat="none", **{**TINY, "seq_len": 128})
    r = fit.plan(cfg)
    assert r.compiles and r.fits, r.summary()
    assert (r.fsdp, r.tp, r.chips) == (1, 1, 1) and r.hbm_bytes == 15.75 * 2**30  # usable, not 16e9
    assert r.lora_params == lora.expected_lora_params("tiny", cfg.lora)
    assert 0 < r.total_bytes < r.hbm_bytes and r.tokens_per_step == 4 * 128


@pytest.mark.slow  # ~35 s: an 8-device compile
def test_ironwood_compiles_on_its_eight_devices_and_is_priced_per_chip():
    """tpu7x-8: 4 chips, 2 JAX devices each. The mesh spans the 8 devices, each fits against its
    own 96 GiB and half the chip's peak, and the price counts the 4 chips ($12.00 per chip-hour)."""
    from cookbook import core

    cfg = fit.PlanConfig(slice_name="tpu7x-8", remat="none", **{**TINY, "seq_len": 128})
    r = fit.plan(cfg)
    assert r.compiles and r.fits, r.summary()
    assert (r.fsdp, r.tp, r.chips) == (4, 2, 8)  # r.chips counts the devices a mesh spans
    assert r.hbm_bytes == 96 * 2**30 and r.peak_flops == core.CHIPS["tpu7x"].bf16_flops / 2
    price = core.get_price("tpu-tpu7x-8").usd_per_hour
    assert price == 4 * 12.00
    assert r.usd_per_million_tokens() == pytest.approx(price / 3600 / r.estimated_tokens_per_s * 1e6)


@pytest.mark.jax_only
def test_activation_sharding_needs_the_patch():
    from cookbook import mesh as mesh_lib
    from cookbook import models

    preset = models.get_preset("tiny").with_overrides(dtype="bfloat16")
    mesh = mesh_lib.make_mesh(2, 2, devices=_plan.tpu_devices("v5p-8"))
    counts = {}
    for patch in (False, True):
        config = fit.PlanConfig(slice_name="v5p-8", remat="none", patch_activation_sharding=patch, **TINY)
        lowered, _ = fit.lower_train_step(config, mesh, preset)
        counts[patch] = _plan.count_sharding_constraints(lowered)
    assert counts[False] == 0  # Tunix skips shard() in a process whose devices are CPUs
    assert counts[True] > 6  # at least one per layer


@pytest.mark.jax_only
def test_wrong_layouts_are_refused_before_compiling():
    with pytest.raises(ValueError, match="fsdp=4 does not divide batch = 2"):
        fit.plan(
            fit.PlanConfig(model_preset="tiny", slice_name="v6e-8", mesh_fsdp=4, mesh_tp=2, batch_size=2, seq_len=64)
        )
    with pytest.raises(ValueError, match="tp=8 does not divide global KV heads = 4"):
        fit.plan(fit.PlanConfig(model_preset="gemma4_31b", slice_name="v6e-8", mesh_fsdp=1, mesh_tp=8, batch_size=1))
    with pytest.raises(ValueError, match="multiple of flash_block"):
        fit.plan(
            fit.PlanConfig(
                model_preset="tiny",
                slice_name="v5p-8",
                flash_attention=True,
                flash_block=512,
                seq_len=768,
                batch_size=2,
            )
        )
    with pytest.raises(ValueError, match="unknown TPU slice"):
        _plan.tpu_devices("v9-8")


@pytest.mark.jax_only
def test_compile_failure_is_a_sentence_not_a_traceback():
    report = _plan_config.PlanReport(
        config=fit.PlanConfig().to_dict(), compiles=False, error="CompileTimeScopedVmemOom: x"
    )
    assert "does not compile for this slice: CompileTimeScopedVmemOom" in report.summary()
    assert not report.fits
    err = RuntimeError("INTERNAL: Mosaic failed\nRESOURCE_EXHAUSTED: Ran out of memory in memory space vmem\n  at ...")
    assert fit.compiler_reason(err).startswith("RESOURCE_EXHAUSTED: Ran out of memory")


@pytest.mark.slow
def test_cli_prints_the_plan(plans, capsys):
    from cookbook import harness

    rc = harness.main(
        [
            "plan",
            "--preset",
            "tiny",
            "--slice",
            "v5p-8",
            "--seq-len",
            "1024",
            "--batch",
            "4",
            "--remat",
            "decoder",
            "--rank",
            "8",
            "--alpha",
            "16",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "tiny on v5p-8 (fsdp 2 x tp 2)" in out and "-> fits" in out
    assert f"{plans[('v5p-8', 'decoder')].temp_bytes / 2**30:.3g} GiB" in out


@pytest.mark.jax_only
def test_recommended_training_is_the_committed_pick_and_the_31b_train_preset_runs_it():
    from cookbook import train

    rec = fit.recommended_training("gemma4_31b")
    assert set(rec) >= {"slice", *_layouts.LAYOUT_KEYS}
    results = fit.load_plan_results("gemma4_31b")
    chosen = results["recommended"][rec["slice"]]
    picked = fit.report_from_dict(results["results"][chosen["from"]])
    assert picked.compiles and picked.total_bytes <= results["margin"] * picked.hbm_bytes
    c = picked.plan_config
    assert (rec["mesh_fsdp"], rec["mesh_tp"]) == (picked.fsdp, picked.tp)
    assert (rec["batch_size"], rec["seq_len"], rec["remat"], rec["flash_attention"], rec["flash_block"]) == (
        c.batch_size,
        c.seq_len,
        c.remat,
        c.flash_attention,
        c.flash_block,
    )
    # The drift bug: the 31B training recipe must run exactly the layout that was fit-checked.
    t = train.train_preset("gemma4_31b")
    assert fit.PlanConfig.from_train_config(t, rec["slice"]).replace(mfu=c.mfu, lora=c.lora) == c.replace(
        mesh_fsdp=picked.fsdp,
        mesh_tp=picked.tp,
        param_dtype="bfloat16",
        learning_rate=t.learning_rate,
        weight_decay=t.weight_decay,
        num_layers=None,
    )
    with pytest.raises(ValueError, match="no committed planner results for preset 'tiny'"):
        fit.recommended_training("tiny")


@pytest.mark.jax_only
def test_plan_config_reads_legacy_reports_and_round_trips():
    legacy = {
        "preset": "gemma4_31b",
        "slice_name": "v5p-8",
        "fsdp": 1,
        "tp": 4,
        "batch": 2,
        "seq_len": 4096,
        "remat": "none",
        "flash": True,
        "block": 512,
        "lora_rank": 64,
        "lora_alpha": 64.0,
        "lora_targets": "all-linear",
        "dtype": None,
        "learning_rate": 1e-4,
    }
    c = fit.PlanConfig.from_dict(legacy)
    assert (c.model_preset, c.mesh_tp, c.batch_size, c.flash_attention, c.flash_block, c.lora.rank) == (
        "gemma4_31b",
        4,
        2,
        True,
        512,
        64,
    )
    assert fit.PlanConfig.from_dict(c.to_dict()) == c
    with pytest.raises(ValueError, match="unknown PlanConfig fields"):
        fit.PlanConfig.from_dict({"presett": "tiny"})


@pytest.mark.jax_only
def test_cli_recommended_prints_the_layout_as_json(capsys):

    from cookbook import harness

    assert harness.main(["plan", "--preset", "gemma4_31b", "--recommended"]) == 0
    assert json.loads(capsys.readouterr().out) == fit.recommended_training("gemma4_31b")
    assert harness.main(["plan", "--preset", "tiny", "--recommended"]) == 2
    assert "no committed planner results" in capsys.readouterr().err


@pytest.mark.jax_only
def test_plans_are_cached_under_the_one_cache_root(monkeypatch):
    from cookbook import core
    from cookbook.core import _runtime

    monkeypatch.delenv("COOKBOOK_CACHE", raising=False)  # the default root: ~/.cache/gemma4-cookbook
    assert core.cache_root() == _runtime.DEFAULT_CACHE
    path = _plan.plan_cache_path(fit.PlanConfig(**TINY))
    assert path.is_relative_to(core.cache_root()) and _base.default_base_dir("tiny").is_relative_to(core.cache_root())


@pytest.mark.slow  # three compiles, ~35 s
def test_the_rl_actor_step_compiles_for_one_chip_with_tunixs_policy_loss():
    """An RL update (issue 36): Tunix's own DAPO / GRPO policy loss on a batch of rollouts, its LoRA
    gradients and AdamW, compiled for one v5e chip with no TPU. It is a forward and backward over the
    same tokens as an SFT step (the same FLOPs within 1%); GRPO's KL term adds the reference
    log-probs, one float per sampled token, to the step's inputs, and DAPO (no KL) has none."""
    shape = dict(model_preset="tiny", slice_name="v5e-1", seq_len=64, batch_size=4, remat="none")
    sft = fit.plan(fit.PlanConfig(**shape))
    dapo = fit.plan(fit.PlanConfig(**shape, objective="dapo", completion_len=48))
    grpo = fit.plan(fit.PlanConfig(**shape, objective="grpo", completion_len=48))
    for r in (sft, dapo, grpo):
        assert r.compiles and r.fits, r.summary()
    assert dapo.lora_params == sft.lora_params
    assert dapo.flops_per_chip == pytest.approx(sft.flops_per_chip, rel=0.01)
    # batch x completion float32 log-probs, the 48 padded to the TPU's 128 lanes
    assert grpo.argument_bytes - dapo.argument_bytes == 4 * 128 * 4
    assert "RL actor step (DAPO" in dapo.summary() and "16 prompt + 48 sampled" in dapo.summary()
    # One rollout token (Tunix's sampler, the LoRA policy against a KV cache): a forward alone, so
    # about a third of a training token's FLOPs (a backward costs about two forwards).
    decode = fit.plan(fit.PlanConfig(**shape, objective="decode"))
    assert decode.compiles and decode.tokens_per_step == 4, decode.summary()
    assert 2 < dapo.flops_per_token / decode.flops_per_token < 4
    with pytest.raises(ValueError, match="one query token"):
        fit.plan(fit.PlanConfig(**shape, objective="decode", flash_attention=True))
    with pytest.raises(ValueError, match="completion_len"):
        fit.plan(fit.PlanConfig(**shape, objective="dapo"))
    with pytest.raises(ValueError, match="objective 'ppo'"):
        fit.plan(fit.PlanConfig(**shape, objective="ppo", completion_len=8))
    # An RL step is cached apart from the SFT step of the same shape.
    assert _plan.plan_cache_path(fit.PlanConfig(**shape)) != _plan.plan_cache_path(
        fit.PlanConfig(**shape, objective="dapo", completion_len=48)
    )


@pytest.mark.slow
def test_argument_floor_is_below_what_the_compiler_places(plans):
    """The lowered step's argument bytes per device never exceed the compiled program's (the floor
    that decides a misfit this host cannot compile), on one and on several devices, bf16 and nf4."""
    from cookbook.fit import _plan

    one = fit.PlanConfig(slice_name="v5e-1", **{**TINY, "batch_size": 1})
    nf4 = one.replace(quantize="nf4", quant_tile=32)
    cases = {
        "v5p-8": (fit.PlanConfig(slice_name="v5p-8", remat="decoder", **TINY), plans[("v5p-8", "decoder")]),
        "v6e-8": (fit.PlanConfig(slice_name="v6e-8", remat="decoder", **TINY), plans[("v6e-8", "decoder")]),
        "v5e-1": (one, fit.plan(one)),
        "v5e-1 nf4": (nf4, fit.plan(nf4)),
    }
    # nf4 on fsdp = 8: tiny's embed 128 is 4 tiles of 32, which 8 does not divide; those scales are
    # replicated (core.divisible_spec, as lora.apply_lora places them), else the step does not lower.
    eight = fit.PlanConfig(
        slice_name="v5e-8", **{**TINY, "batch_size": 8}, mesh_fsdp=8, mesh_tp=1, quantize="nf4", quant_tile=32
    )
    cases["v5e-8 nf4"] = (eight, fit.plan(eight))
    floors = {}
    for name, (config, report) in cases.items():
        assert report.compiles, report.summary()
        floors[name] = _plan.argument_bytes_floor(config)
        assert 0 < floors[name] <= report.argument_bytes, (name, floors[name], report.argument_bytes)
    # nf4 codes are 4 bits. Shape arithmetic, not a timing: nf4's floor is 0.552 of bf16's here;
    # counting each uint4 code as a byte gives 0.707.
    assert floors["v5e-1 nf4"] < 0.63 * floors["v5e-1"]


def test_the_fit_check_of_a_train_config_carries_every_field_the_two_share():
    """PlanConfig copies what it shares with TrainConfig (fit precedes train in the stages, and the
    planner compiles sizes and slices no one trains; see PlanConfig's docstring). Every field the
    two share, the data section's included, is carried, from values that are no default."""
    import dataclasses

    from cookbook import lora, train

    t = train.TrainConfig(
        model_preset="tiny_12b",
        mesh_fsdp=2,
        mesh_tp=4,
        remat="block",
        flash_attention=True,
        flash_block=256,
        lora=lora.LoraConfig(rank=8, alpha=4.0, dropout=0.1, targets=("q_proj",)),
        learning_rate=3e-5,
        weight_decay=0.05,
        param_dtype="float32",
        quantize="nf4",
        quant_tile=32,
        data=dataclasses.replace(train.TrainConfig().data, batch_size=6, seq_len=384),
    )
    c = fit.PlanConfig.from_train_config(t, "v5p-8")
    shared = {f.name for f in dataclasses.fields(fit.PlanConfig)}
    on_train = shared & {f.name for f in dataclasses.fields(train.TrainConfig)}
    on_data = shared & {f.name for f in dataclasses.fields(t.data)}
    assert on_train and on_data == {"batch_size", "seq_len"}
    default = fit.PlanConfig()
    for name in on_train | on_data:
        want = getattr(t.data if name in on_data else t, name)
        if name == "lora":
            want = dataclasses.replace(want, dropout=0.0)  # the planner compiles no dropout
        assert getattr(c, name) == want != getattr(default, name), name
