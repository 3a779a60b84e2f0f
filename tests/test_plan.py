"""cookbook.fit: the tiny LoRA train step compiled for TPU v5p-8 and v6e-8, with no TPU."""

import dataclasses
import json

import pytest

from cookbook import fit

# Same values the CLI test and notebook 04's defaults use, so they reuse the cached compiles.
TINY = dict(preset="tiny", batch=4, seq_len=1024, lora_rank=8, lora_alpha=16.0)


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
    from cookbook import lora

    none, dec, v6e = plans[("v5p-8", "none")], plans[("v5p-8", "decoder")], plans[("v6e-8", "decoder")]
    expected = lora.expected_lora_params("tiny", lora.LoraConfig(rank=8, alpha=16.0, targets="all-linear"))
    for r in (none, dec, v6e):
        assert r.compiles and r.fits and r.fits_with_margin, r.summary()
        assert r.lora_params == expected
        assert r.activation_constraints > 0  # trap 3: Tunix's shard() really applied
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


def test_activation_sharding_needs_the_patch():
    from cookbook import mesh as mesh_lib
    from cookbook import models

    preset = models.get_preset("tiny").with_overrides(dtype="bfloat16")
    mesh = mesh_lib.make_mesh(2, 2, devices=fit.tpu_devices("v5p-8"))
    counts = {}
    for patch in (False, True):
        config = fit.PlanConfig(slice_name="v5p-8", remat="none", patch_activation_sharding=patch, **TINY)
        lowered, _ = fit.lower_train_step(config, mesh, preset)
        counts[patch] = fit.count_sharding_constraints(lowered)
    assert counts[False] == 0  # Tunix skips shard() in a process whose devices are CPUs
    assert counts[True] > 6  # at least one per layer


def test_wrong_layouts_are_refused_before_compiling():
    with pytest.raises(ValueError, match="fsdp=4 does not divide batch = 2"):
        fit.plan(fit.PlanConfig(preset="tiny", slice_name="v6e-8", fsdp=4, tp=2, batch=2, seq_len=64))
    with pytest.raises(ValueError, match="tp=8 does not divide global KV heads = 4"):
        fit.plan(fit.PlanConfig(preset="gemma4_31b", slice_name="v6e-8", fsdp=1, tp=8, batch=1))
    with pytest.raises(ValueError, match="multiple of block"):
        fit.plan(fit.PlanConfig(preset="tiny", slice_name="v5p-8", flash=True, block=512, seq_len=768, batch=2))
    with pytest.raises(ValueError, match="unknown TPU slice"):
        fit.tpu_devices("v9-8")


def test_compile_failure_is_a_sentence_not_a_traceback():
    report = fit.PlanReport(config=dataclasses.asdict(fit.PlanConfig()), compiles=False, error="CompileTimeScopedVmemOom: x")
    assert "does not compile for this slice: CompileTimeScopedVmemOom" in report.summary()
    assert not report.fits
    err = RuntimeError("INTERNAL: Mosaic failed\nRESOURCE_EXHAUSTED: Ran out of memory in memory space vmem\n  at ...")
    assert fit._compiler_reason(err).startswith("RESOURCE_EXHAUSTED: Ran out of memory")


@pytest.mark.slow
def test_cli_prints_the_plan(plans, capsys):
    from cookbook import harness

    rc = harness.main(
        ["plan", "--preset", "tiny", "--slice", "v5p-8", "--seq-len", "1024", "--batch", "4", "--remat", "decoder",
         "--rank", "8", "--alpha", "16"]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "tiny on v5p-8 (fsdp 2 x tp 2)" in out and "-> fits" in out
    assert f"{plans[('v5p-8', 'decoder')].temp_bytes / 2**30:.3g} GiB" in out


def test_recommended_training_matches_the_committed_31b_plans():
    rec = fit.recommended_training("gemma4_31b")
    assert set(rec) >= {"fsdp", "tp", "batch", "seq_len", "remat", "flash", "block"}
    results = json.loads(fit.RESULTS_31B.read_text())
    chosen = results["recommended"][rec["slice"]]
    for key in ("fsdp", "tp", "batch", "seq_len", "remat", "flash", "block"):
        assert rec[key] == chosen[key], key
    assert chosen["hbm_fraction"] <= results["margin"]
    tiny = fit.recommended_training("tiny")
    assert tiny["fsdp"] * tiny["tp"] == 1
