"""cookbook.core hardware table: chips, slices, platforms, prices (sourced or unknown) and overrides."""

import math

import pytest

from cookbook import core
from cookbook.core import _hardware

# Needs the JAX stack only: also runs in the TPU-host environment (scripts/run_tests.sh).
pytestmark = pytest.mark.jax_only

# The paper's on-demand list prices (arXiv 2605.25645), USD per hour for the whole machine.
PAPER_ON_DEMAND = {"tpu-v5p-8": 16.80, "tpu-v6e-8": 21.52, "gpu-2xh100": 22.12}


def test_every_slice_has_a_platform_and_a_price_row_per_kind():
    rows = [(p.platform, p.pricing) for p in core.PRICES]
    assert len(rows) == len(set(rows)) == len(core.PLATFORMS) * len(core.PRICING_KINDS)
    for name, spec in core.SLICES.items():
        platform = core.platform_of_slice(name)
        assert platform == f"tpu-{name}" and core.platform_of_slice(spec) == platform
        assert platform in core.PLATFORMS
        assert core.PLATFORMS[platform].chips == spec.num_chips and core.PLATFORMS[platform].chip is spec.chip
        for kind in core.PRICING_KINDS:
            assert (platform, kind) in rows, (platform, kind)
    assert "gpu-2xh100" in core.PLATFORMS
    assert set(core.PLATFORMS) == {core.platform_of_slice(s) for s in core.SLICES} | {"gpu-2xh100"}


def test_slices_agree_with_their_topology_and_cloud_names():
    for name, s in core.SLICES.items():
        chip, dims = s.topology.split(":")
        assert chip == s.chip.name and math.prod(int(d) for d in dims.split("x")) == s.num_chips, name
        # Cloud TPU names count TensorCores on v5p and TPU7x (2 per chip), chips on v5e/v6e.
        cores = int(name.split("-")[1])
        assert cores == (2 * s.num_chips if s.chip.name in ("v5p", "tpu7x") else s.num_chips), name
        # JAX devices: one per chip, but TPU7x's two TensorCores are two devices.
        assert s.num_devices == s.num_chips * (2 if s.chip.name == "tpu7x" else 1), name
        assert s.chips_per_host * s.num_hosts == s.num_chips
    v5p8 = core.get_slice("v5p-8")
    assert (v5p8.num_chips, v5p8.hbm_bytes, v5p8.bf16_flops) == (4, 4 * 95 * 10**9, 4 * 459e12)
    assert core.get_slice(v5p8) is v5p8
    assert "4 x TPU v5p" in v5p8.describe() and "1 host)" in v5p8.describe()
    assert "4 hosts" in core.get_slice("v5p-32").describe()
    with pytest.raises(ValueError, match="unknown TPU slice 'v7-8'.*v5p-8"):
        core.get_slice("v7-8")
    cpu = core.cpu_slice(8)
    assert (cpu.name, cpu.num_chips, cpu.num_hosts, cpu.chip.device_kind) == ("cpu-8", 8, 1, "cpu")


# Cloud TPU's 2026 on-demand list prices per chip-hour, us-central1 (the pricing page).
LIST_PER_CHIP_HOUR = {"v5e": 1.20, "v6e": 2.70, "v5p": 4.20, "tpu7x": 12.00}


def test_the_sourced_prices_are_the_papers_and_the_rest_list_price_per_chip_hour():
    sourced = {(p.platform, p.pricing): p for p in core.PRICES if p.known and not p.source.startswith("derived")}
    assert {k: p.usd_per_hour for k, p in sourced.items()} == {
        (name, "on_demand"): usd for name, usd in PAPER_ON_DEMAND.items()
    }
    for p in sourced.values():
        assert p.source == _hardware.PAPER and p.as_of == _hardware.PAPER_DATE
    # Every other TPU slice: the list price per chip-hour times its chips (not its devices), on demand.
    derived = {p.platform: p for p in core.PRICES if p.known and p.source.startswith("derived")}
    assert set(derived) == {core.platform_of_slice(s) for s in core.SLICES} - set(PAPER_ON_DEMAND)
    for name, s in core.SLICES.items():
        p = derived.get(core.platform_of_slice(name))
        if p is not None:
            assert p.pricing == "on_demand" and p.as_of == "2026" and "cloud.google.com/tpu/pricing" in p.source
            assert p.usd_per_hour == pytest.approx(LIST_PER_CHIP_HOUR[s.chip.name] * s.num_chips)
    assert core.get_price("tpu-v5e-1").usd_per_hour == 1.20 and core.get_price("tpu-tpu7x-8").usd_per_hour == 48.0
    # The paper's v5p-8 is 4 x the list chip-hour; its v6e-8 within 0.4% of 8 x the list.
    assert PAPER_ON_DEMAND["tpu-v5p-8"] == pytest.approx(4 * LIST_PER_CHIP_HOUR["v5p"])
    assert PAPER_ON_DEMAND["tpu-v6e-8"] == pytest.approx(8 * LIST_PER_CHIP_HOUR["v6e"], rel=0.004)
    for name, usd in PAPER_ON_DEMAND.items():
        assert core.get_price(name).usd_per_hour == usd
    unknown = [p for p in core.PRICES if not p.known]
    assert unknown and all(p.usd_per_hour is None and "unknown" in p.source for p in unknown)
    assert all("gpus-pricing" in p.source for p in unknown if p.platform.startswith("gpu"))


@pytest.mark.parametrize(
    "platform,pricing", [("tpu-v5p-8", "spot"), ("tpu-v6e-16", "cud_1y"), ("gpu-2xh100", "cud_3y")]
)
def test_an_unknown_price_raises_and_says_how_to_give_it(platform, pricing):
    with pytest.raises(core.UnknownPriceError, match=rf"--price {platform}:{pricing}=USD_PER_HOUR"):
        core.get_price(platform, pricing)
    given = core.get_price(platform, pricing, overrides={f"{platform}:{pricing}": 7.5})
    assert (given.usd_per_hour, given.as_of, given.source) == (7.5, "user", "given by the user")


def test_get_price_of_an_unknown_platform_is_a_plain_value_error():
    with pytest.raises(ValueError, match="unknown platform 'tpu-v9-8'") as e:
        core.get_price("tpu-v9-8")
    assert not isinstance(e.value, core.UnknownPriceError)


def test_price_table_applies_overrides_and_keeps_everything_else():
    base = {(p.platform, p.pricing): p for p in core.price_table()}
    assert list(base.values()) == list(core.PRICES)
    table = core.price_table({"tpu-v5p-8": 14.2, "gpu-2xh100:spot": 9})
    by = {(p.platform, p.pricing): p for p in table}
    assert len(table) == len(core.PRICES)
    assert by["tpu-v5p-8", "on_demand"].usd_per_hour == 14.2  # no kind given: on demand
    assert by["gpu-2xh100", "spot"].usd_per_hour == 9.0 and isinstance(by["gpu-2xh100", "spot"].usd_per_hour, float)
    changed = {k for k in by if by[k] != base[k]}
    assert changed == {("tpu-v5p-8", "on_demand"), ("gpu-2xh100", "spot")}
    assert core.get_price("tpu-v5p-8").usd_per_hour == 16.80  # the table itself is untouched
    with pytest.raises(ValueError, match="unknown 'tpu-v9-8'"):
        core.price_table({"tpu-v9-8": 1.0})
    with pytest.raises(ValueError, match="unknown 'tpu-v5p-8:weekly'"):
        core.price_table({"tpu-v5p-8:weekly": 1.0})


def test_parse_price_overrides():
    assert core.parse_price_overrides(["tpu-v5p-8=14.2", "gpu-2xh100:spot=9.1", " tpu-v6e-8:cud_1y = 3"]) == {
        "tpu-v5p-8:on_demand": 14.2,
        "gpu-2xh100:spot": 9.1,
        "tpu-v6e-8:cud_1y": 3.0,
    }
    assert core.parse_price_overrides([]) == {}
    for bad, why in [
        ("tpu-v5p-8", "PLATFORM\\[:PRICING\\]=USD_PER_HOUR"),
        ("tpu-v9-8=1", "tpu-v5p-8"),
        ("tpu-v5p-8:weekly=1", "on_demand, spot"),
        ("tpu-v5p-8=cheap", "'cheap' is not a number"),
    ]:
        with pytest.raises(ValueError, match=why):
            core.parse_price_overrides([bad])
    parsed = core.parse_price_overrides(["tpu-v5p-8:spot=5"])
    assert core.get_price("tpu-v5p-8", "spot", parsed).usd_per_hour == 5.0  # the two fit together


def test_platform_figures_come_from_the_chip():
    v6e8 = core.PLATFORMS["tpu-v6e-8"]
    assert (v6e8.chips, v6e8.peak_bf16_tflops_per_chip, v6e8.hbm_gb_per_chip) == (8, 918.0, 32.0)
    assert v6e8.chips * v6e8.peak_bf16_tflops_per_chip == 7344.0
    v5p8 = core.PLATFORMS["tpu-v5p-8"]
    assert (v5p8.chips, v5p8.peak_bf16_tflops_per_chip, v5p8.hbm_gb_per_chip) == (4, 459.0, 95.0)
    gpu = core.PLATFORMS["gpu-2xh100"]
    assert (gpu.chips, gpu.peak_bf16_tflops_per_chip, gpu.hbm_gb_per_chip) == (2, 989.0, 80.0)
    for name, p in core.PLATFORMS.items():
        assert p.name == name and p.peak_bf16_tflops_per_chip == p.chip.bf16_flops / 1e12


@pytest.mark.parametrize(
    "kind,chip",
    [
        ("TPU v6 lite", "v6e"),
        ("TPU v5", "v5p"),
        ("TPU v5 lite", "v5e"),
        ("tpu v5 LITE", "v5e"),
        ("TPU v5p", "v5p"),
        ("TPU v6e", "v6e"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("H100 PCIe", "h100"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA H200 NVL", None),  # NVL: lower clocks, not the SXM figures
        ("cpu", None),
        ("TPU v4", None),
        ("NVIDIA A100-SXM4-40GB", None),
    ],
)
def test_chip_of_device_kind(kind, chip):
    assert core.chip_of(kind) == chip


def test_every_chip_is_found_by_its_own_device_kind():
    for name, spec in core.CHIPS.items():
        assert core.chip_of(spec.device_kind) == name


def test_paper_training_runs_are_consistent():
    assert set(core.PAPER_TRAINING_RUNS) <= set(core.PLATFORMS)
    for name, run in core.PAPER_TRAINING_RUNS.items():
        tokens = run["train_tokens_per_s"] * run["train_hours"] * 3600
        assert tokens == pytest.approx(run["train_tokens_millions"] * 1e6, rel=0.01), name


def test_usable_hbm_and_ironwoods_two_devices_per_chip():
    """The planner fits against what a program can allocate, per JAX device."""
    v5e, v6e, v5p, tpu7x = (core.CHIPS[c] for c in ("v5e", "v6e", "v5p", "tpu7x"))
    assert v5e.device_hbm_bytes == 15.75 * 2**30 < v5e.hbm_bytes * 1.1
    assert v6e.device_hbm_bytes == 31.25 * 2**30
    assert v5p.device_hbm_bytes == v5p.hbm_bytes  # no usable figure stated: the datasheet's
    assert tpu7x.devices_per_chip == 2 and tpu7x.device_hbm_bytes == 96 * 2**30
    assert tpu7x.device_bf16_flops == tpu7x.bf16_flops / 2
    ironwood = core.get_slice("tpu7x-8")
    assert (ironwood.num_chips, ironwood.num_devices, ironwood.topology) == (4, 8, "tpu7x:2x2x1")
    assert "8 JAX devices" in ironwood.describe()
    assert core.chip_of("TPU7x") == "tpu7x" and core.chip_of("TPU v6 lite") == "v6e"
    # The runtimes people get for free, named as such.
    assert "free" in core.get_slice("v5e-1").runtime and "Kaggle" in core.get_slice("v5e-8").runtime
