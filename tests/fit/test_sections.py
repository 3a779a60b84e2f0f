"""Notebook 03's sections (cookbook.fit._sections) on a 2 x 2 mesh of the 8 fake CPU devices: each
step's typed result, and what the notebook records from it."""

import pytest

from cookbook import fit
from cookbook.fit import _sections

# Needs the JAX stack only: also runs in the TPU-host environment (scripts/run_tests.sh).
pytestmark = pytest.mark.jax_only


@pytest.fixture(scope="module")
def steps(tiny_base):
    """The notebook's chain, once: each step works on the one before's arrays."""
    base = fit.load_sharded_base("tiny", 2, 2, batch=4)
    adapted = fit.lora_on_mesh(base, rank=4, alpha=8.0)
    replicated = fit.jit_built_optimizer(adapted, learning_rate=1e-3, min_replica_bytes=1024)
    fixed = fit.fix_shardings(replicated)
    trained = fit.check_layout_kept(fixed, batch=4, seq_len=32, steps=2)
    return base, adapted, replicated, fixed, trained


def test_the_base_sits_on_the_asked_mesh(steps):
    base = steps[0]
    assert base.results() == {"preset": "tiny", "mesh": [2, 2]}
    assert dict(base.mesh.shape) == {"fsdp": 2, "tp": 2}
    emb = base.model.embedder.input_embedding.value
    assert emb.sharding.mesh.shape == base.mesh.shape and len(emb.sharding.device_set) == 4


def test_lora_pairs_and_the_k_eq_v_spec(steps):
    adapted = steps[1]
    # q, kv (k = v on the global layer), o, gate, up, down on each of the 6 layers
    assert adapted.results() == {"lora_pairs": 36, "k_eq_v_b_spec": ["(None, 'tp', None)"]}
    assert adapted.config.rank == 4 and "36 LoRA pairs (rank 4" in adapted.describe()


def test_the_jitted_optimizer_is_replicated_and_the_fix_shards_it(steps):
    _, _, replicated, fixed, _ = steps
    before, after = replicated.results(), fixed.results()
    assert "replicated on every device" in replicated.replica_error
    assert replicated.describe().startswith("replica check: ") and len(replicated.describe()) <= 615
    assert before["opt_replicated_mib_before"] == pytest.approx(after["opt_total_mib"], rel=1e-3)
    assert before["opt_max_per_device_mib_before"] == pytest.approx(after["opt_total_mib"], rel=1e-3)
    assert after["moved"] == {"lora": 0, "optimizer": 144}  # mu and nu of 72 LoRA arrays
    assert after["opt_replicated_mib_after"] < 1e-3 * after["opt_total_mib"]  # AdamW's step counts only
    assert after["opt_max_per_device_mib_after"] == pytest.approx(2 * after["lora_max_per_device_mib"], rel=0.01)
    fit.check_no_large_replicas(fixed.model, fixed.optimizer, min_bytes=1024)
    # The table before is a snapshot: the move did not rewrite it.
    assert (
        _sections._row(replicated.table, "optimizer state")["replicated_mib"] > 100 * after["opt_replicated_mib_after"]
    )


def test_training_keeps_the_layout_and_trains(steps):
    trained = steps[4]
    assert trained.results()["shardings_changed_by_training"] == 0 and trained.changed == ()
    assert trained.arrays_compared >= 72 + 144  # every LoRA array and its mu and nu were compared
    losses = trained.results()["losses"]
    assert len(losses) == 2 and losses[1] < losses[0]


def test_a_batch_the_fsdp_axis_does_not_split_is_refused_before_loading():
    with pytest.raises(ValueError, match="batch=6 must be a multiple of fsdp=4"):
        fit.load_sharded_base("tiny", 4, 2, batch=6)


def test_a_clean_replica_check_says_so():
    one_device = _sections.JitBuiltOptimizer(
        lora=None,
        optimizer=None,
        table=({"what": "optimizer state", "replicated_mib": 0.0, "max_per_device_mib": 1.5},),
        min_replica_bytes=1024,
        replica_error="",
    )
    assert one_device.describe() == "replica check: nothing of >= 1,024 bytes is on every device whole"
    assert one_device.results() == {"opt_replicated_mib_before": 0.0, "opt_max_per_device_mib_before": 1.5}
