"""cookbook.core numerics: float32 floors, bounds from them, controls, and the summation bound.

The "exact" values are float64 results; the float32 ones carry rounding error of known size
(or a perturbation injected on purpose), so each test knows what the check must answer.
"""

import math

import numpy as np
import pytest

from cookbook import core
from cookbook.core import _numerics

# Needs the JAX stack only: also runs in the TPU-host environment (scripts/run_tests.sh).
pytestmark = pytest.mark.jax_only


def _matmuls(seed=0):
    """One function, x @ w, three ways: exact (float64), reference and candidate (float32,
    different summation orders), and a wrong candidate (one weight off by 1 %)."""
    rng = np.random.default_rng(seed)
    x, w = rng.normal(size=(16, 256)), rng.normal(size=(256, 64))
    x32, w32 = x.astype(np.float32), w.astype(np.float32)
    exact = x32.astype(np.float64) @ w32.astype(np.float64)
    ref32 = x32 @ w32  # BLAS order
    cand32 = np.zeros((16, 64), np.float32)
    for k in reversed(range(256)):  # the same sum, added the other way round
        cand32 += x32[:, k : k + 1] * w32[k]
    bad_w = w32.copy()
    bad_w[3] *= np.float32(1.01)
    return exact, ref32, cand32, x32 @ bad_w


def test_float32_floor_measures_a_known_perturbation():
    exact = np.linspace(-3.0, 5.0, 40).reshape(4, 10)
    delta = np.zeros_like(exact)
    delta[1, 2], delta[3, 9] = 3e-4, -1e-4
    floor = core.float32_floor(exact + delta, exact)
    assert floor.max_abs == pytest.approx(3e-4, rel=1e-9)
    assert floor.mean_abs == pytest.approx(4e-4 / 40, rel=1e-9)
    assert floor.scale == 5.0
    assert floor.max_bound == pytest.approx(_numerics.PARITY_FACTOR * 3e-4)
    assert floor.mean_bound == pytest.approx(_numerics.PARITY_FACTOR * 1e-5)
    d = floor.as_dict()
    assert d["floor_max_abs"] == floor.max_abs and d["bound_mean_abs"] == floor.mean_bound
    assert set(d) == {"floor_max_abs", "floor_mean_abs", "scale", "bound_max_abs", "bound_mean_abs"}


def test_float32_floor_of_a_float32_cast_is_within_half_an_ulp():
    exact = np.random.default_rng(1).normal(size=1000)
    floor = core.float32_floor(exact.astype(np.float32), exact)
    assert 0 < floor.max_abs <= np.finfo(np.float32).eps / 2 * np.abs(exact).max()
    assert floor.mean_abs < floor.max_abs


def test_float32_floor_refuses_mismatched_or_empty_inputs():
    with pytest.raises(ValueError, match="one non-empty shape"):
        core.float32_floor(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="one non-empty shape"):
        core.float32_floor(np.zeros(0), np.zeros(0))


def test_merge_floors_takes_each_largest_field():
    a = _numerics.Float32Floor(max_abs=1.0, mean_abs=0.5, scale=2.0)
    b = _numerics.Float32Floor(max_abs=3.0, mean_abs=0.1, scale=1.0)
    c = _numerics.Float32Floor(max_abs=0.2, mean_abs=0.2, scale=7.0)
    merged = core.merge_floors(a, b, c)
    assert (merged.max_abs, merged.mean_abs, merged.scale) == (3.0, 0.5, 7.0)


def test_compare_passes_two_float32_orders_and_fails_a_wrong_candidate():
    exact, ref32, cand32, bad32 = _matmuls()
    floor = core.float32_floor(ref32, exact)
    assert floor.max_abs > 0  # float32 rounding really is there
    assert not np.array_equal(cand32, ref32)  # the two orders really differ
    good = core.compare(cand32, ref32, floor)
    assert good["ok"] and good["max_over_bound"] < 1
    assert good["max_abs_diff"] == pytest.approx(float(np.abs(cand32.astype(np.float64) - ref32).max()))
    assert (good["bound_max_abs"], good["bound_mean_abs"]) == (floor.max_bound, floor.mean_bound)
    bad = core.compare(bad32, ref32, floor)
    assert not bad["ok"] and bad["max_over_bound"] > 1
    _numerics.check_separated(bad, "one weight off by 1 %")  # far enough to prove the check works


def test_compare_ok_flips_exactly_at_the_bounds():
    ref = np.zeros(100)
    floor = _numerics.Float32Floor(max_abs=1e-3, mean_abs=1e-4, scale=1.0)  # bounds 4e-3 and 4e-4
    one = np.zeros(100)
    one[7] = 0.9 * floor.max_bound  # under the max bound; mean 3.6e-5, under its bound
    assert core.compare(one, ref, floor)["ok"]
    one[7] = 1.1 * floor.max_bound
    r = core.compare(one, ref, floor)
    assert not r["ok"] and r["max_over_bound"] == pytest.approx(1.1)
    # Every element a little off: the max is fine, the mean is not; both must hold.
    spread = np.full(100, 0.5 * floor.max_bound)
    r = core.compare(spread, ref, floor)
    assert r["max_abs_diff"] < floor.max_bound and r["mean_abs_diff"] > floor.mean_bound and not r["ok"]
    with pytest.raises(ValueError, match="shape"):
        core.compare(np.zeros(3), np.zeros((3, 1)), floor)


def test_compare_against_a_zero_floor():
    zero = _numerics.Float32Floor(max_abs=0.0, mean_abs=0.0, scale=0.0)
    assert core.compare(np.ones(3), np.ones(3), zero)["ok"]
    r = core.compare(np.ones(3) + 1e-12, np.ones(3), zero)
    assert not r["ok"] and r["max_over_bound"] == math.inf


def test_check_separated_refuses_a_control_that_is_too_close():
    ref = np.zeros(10)
    floor = _numerics.Float32Floor(max_abs=1e-3, mean_abs=1e-3, scale=1.0)
    near = core.compare(np.full(10, 10 * floor.max_bound), ref, floor)
    with pytest.raises(AssertionError, match=r"base without LoRA .* only 10 x the bound"):
        _numerics.check_separated(near, "base without LoRA")
    far = core.compare(np.full(10, 1.01 * core.CONTROL_SEPARATION * floor.max_bound), ref, floor)
    _numerics.check_separated(far)  # just past CONTROL_SEPARATION bounds away is enough
    just_under = core.compare(np.full(10, 0.99 * core.CONTROL_SEPARATION * floor.max_bound), ref, floor)
    with pytest.raises(AssertionError, match="needs >= 100"):
        _numerics.check_separated(just_under)


def _exact_sum(values) -> float:
    return math.fsum(np.asarray(values, np.float64).tolist())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_summation_bound_holds_for_float32_sums_in_any_order(seed):
    rng = np.random.default_rng(seed)
    n = 1000
    x = rng.normal(size=n).astype(np.float32)
    exact = _exact_sum(x)  # float32 values are exact in float64; fsum rounds once
    bound = core.summation_bound(n, float(np.abs(x.astype(np.float64)).sum()))
    orders = [x, np.sort(x), np.sort(x)[::-1], *(x[rng.permutation(n)] for _ in range(5))]
    for xs in orders:
        sequential = float(np.cumsum(xs, dtype=np.float32)[-1])  # one running float32 sum
        pairwise = float(np.sum(xs, dtype=np.float32))
        assert abs(sequential - exact) <= bound
        assert abs(pairwise - exact) <= bound
    # Products rounded once each too (a dot product, e.g. a sum of squares).
    y = rng.normal(size=n).astype(np.float32)
    prods = x * y  # each product rounded to float32
    exact_dot = _exact_sum(x.astype(np.float64) * y.astype(np.float64))  # exact products
    dot_bound = core.summation_bound(n, float(np.abs(x.astype(np.float64) * y).sum()))
    assert abs(float(np.cumsum(prods, dtype=np.float32)[-1]) - exact_dot) <= dot_bound
    assert abs(float(np.dot(x, y)) - exact_dot) <= dot_bound


def test_summation_bound_is_exceeded_by_a_real_error():
    rng = np.random.default_rng(3)
    n = 1000
    x = rng.uniform(0.5, 1.5, size=n).astype(np.float32)
    exact = _exact_sum(x)
    bound = core.summation_bound(n, float(np.abs(x.astype(np.float64)).sum()))
    assert bound == pytest.approx(n * np.finfo(np.float32).eps * float(x.astype(np.float64).sum()))
    dropped = float(np.cumsum(x[:-1], dtype=np.float32)[-1])  # an off-by-one: one term missing
    assert abs(dropped - exact) > bound
    doubled = float(np.sum(np.concatenate([x, x[:1]]), dtype=np.float32))  # one term counted twice
    assert abs(doubled - exact) > bound


def test_summation_bound_scales_with_the_dtype():
    x = np.random.default_rng(4).uniform(0.0, 1.0, size=1000).astype(np.float32)
    sum_abs = float(x.astype(np.float64).sum())
    b32, b64 = core.summation_bound(1000, sum_abs), core.summation_bound(1000, sum_abs, np.float64)
    assert b32 / b64 == pytest.approx(np.finfo(np.float32).eps / np.finfo(np.float64).eps)
    exact = _exact_sum(x)
    err32 = abs(float(np.cumsum(x, dtype=np.float32)[-1]) - exact)
    err64 = abs(float(np.cumsum(x.astype(np.float64))[-1]) - exact)
    assert err64 <= b64 and err32 <= b32
    assert err32 > b64  # float32 arithmetic is not within float64's bound


def test_summation_bound_is_computed_in_float64_for_any_dtype():
    import numpy as np

    from cookbook import core

    # float16's own arithmetic would overflow to inf here; the bound is a float64 quantity.
    assert core.summation_bound(10**4, 1e4, np.float16) == pytest.approx(10**4 * 2.0**-10 * 1e4)


@pytest.mark.torch  # the TPU-host environment has no torch
def test_torch_threads_holds_the_count_inside_and_restores_it_after_an_error():
    import torch

    before = torch.get_num_threads()
    other = 2 if before == 1 else 1
    seen = []
    with pytest.raises(RuntimeError, match="inside"):
        with core.torch_threads(other):
            seen.append(torch.get_num_threads())
            raise RuntimeError("inside")
    assert seen == [other] and torch.get_num_threads() == before
    with core.torch_threads(None):  # None leaves torch as it is
        assert torch.get_num_threads() == before


@pytest.mark.torch  # the TPU-host environment has no torch
def test_transformers_reference_runs_on_the_reference_thread_count(monkeypatch):
    """The reference logits are computed on core.REFERENCE_TORCH_THREADS threads, whatever the
    process had: with two, transformers' float32 logits of tiny_e2b differed between processes
    by up to 1.8e-2 (core.torch_threads), and a floor measured from them moved with it."""
    import torch

    from cookbook import models
    from cookbook.models import _parity as parity

    counts = []
    forward = torch.nn.Module.__call__

    def counting_call(self, *args, **kwargs):
        if not counts or counts[-1] != torch.get_num_threads():
            counts.append(torch.get_num_threads())
        return forward(self, *args, **kwargs)

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        monkeypatch.setattr(torch.nn.Module, "__call__", counting_call)
        ckpt = models.ensure_base("tiny", seed=0)
        tokens = parity.random_text_tokens(models.get_preset("tiny"), 1, 8)
        parity.transformers_logits(ckpt, tokens)
        monkeypatch.undo()
        assert counts == [core.REFERENCE_TORCH_THREADS] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
