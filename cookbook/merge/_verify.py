"""Checking a merge: Tunix+LoRA logits, transformers logits in a fresh process, a random LoRA run.

The merge is only right if the merged checkpoint, loaded by transformers in a process
that never saw the LoRA, predicts what the Tunix model with the LoRA applied predicts.
These helpers compute both sides; ``make_random_lora_run`` writes a LoRA checkpoint in
the layout ``cookbook train`` writes (Tunix ``CheckpointManager``, LoRA params only,
``recipe.json``), with random non-zero ``B`` so that the merge changes the model.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from cookbook import core, models
from cookbook import lora as lora_lib
from cookbook.merge import _merge as merge


def _lora_config(ckpt: merge.LoraCheckpoint, dropout: float = 0.0) -> lora_lib.LoraConfig:
    # Every projection the checkpoint adapts, by its PEFT name (``q_proj``, ``per_layer_input_gate``,
    # ``router.proj``), in the table's order.
    names = sorted(
        {n for p in ckpt.pairs for n in lora_lib.TUNIX_TO_HF_ALL[p.module.replace(".", "/")]},
        key=lora_lib.ALL_HF_PROJECTIONS.index,
    )
    return lora_lib.LoraConfig(rank=ckpt.rank, alpha=ckpt.alpha, dropout=dropout, targets=tuple(names))


def make_random_lora_run(
    base_dir: str | Path,
    run_dir: str | Path,
    *,
    preset: str = "tiny",
    rank: int = 8,
    alpha: float = 16.0,
    targets: tuple[str, ...] | str = lora_lib.HF_PROJECTIONS,
    step: int = 1,
    b_std: float = 0.05,
    seed: int = 0,
) -> Path:
    """A LoRA training-run directory with random ``A`` and ``B``, as ``cookbook train`` lays it out."""
    import jax
    from flax import nnx
    from tunix.sft.checkpoint_manager import CheckpointManager

    from cookbook import models

    p = models.get_preset(preset)
    run_dir = Path(run_dir)
    cfg = lora_lib.LoraConfig(rank=rank, alpha=alpha, targets=targets)
    model = lora_lib.apply_lora(models.load_tunix_model(base_dir, p), cfg, preset=p, seed=seed)
    rng = np.random.default_rng(seed)
    state = nnx.state(model, nnx.LoRAParam)
    state = jax.tree.map(lambda x: x + rng.normal(0, b_std, x.shape).astype(x.dtype), state)
    nnx.update(model, state)
    # The keys `cookbook train` writes (RUN_DIR/recipe.json and the checkpoints' metadata).
    recipe = {
        "base_dir": str(Path(base_dir).resolve()),
        "base_fingerprint": models.fingerprint(base_dir),
        "train": {
            "model_preset": p.name,
            "lora": {
                "rank": rank,
                "alpha": alpha,
                "dropout": 0.0,
                "targets": targets if isinstance(targets, str) else list(targets),
            },
        },
    }
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "recipe.json").write_text(json.dumps(recipe, indent=2))
    manager = CheckpointManager(str(run_dir / "checkpoints"))
    manager.save(step, model, None, save_only_lora_params=True, force=True, custom_metadata={"recipe": recipe})
    manager.close()
    return run_dir


def ensure_random_lora_run(
    preset: str = "tiny",
    *,
    rank: int = 8,
    alpha: float = 16.0,
    seed: int = 0,
    targets: tuple[str, ...] | str = lora_lib.HF_PROJECTIONS,
) -> Path:
    """``make_random_lora_run`` on the preset's cached base, itself cached under $COOKBOOK_CACHE."""
    import hashlib

    from cookbook import models

    base_dir = models.ensure_base(preset)
    extra = [] if targets == lora_lib.HF_PROJECTIONS else [targets]  # the seven: the keys already cached
    key = hashlib.sha256(json.dumps([str(base_dir.resolve()), rank, alpha, seed, 1, *extra]).encode()).hexdigest()[:10]
    run_dir = core.cache_root() / "lora_random" / f"{preset}-r{rank}-{key}"
    if not (run_dir / ".complete").is_file():
        import shutil

        shutil.rmtree(run_dir, ignore_errors=True)
        make_random_lora_run(base_dir, run_dir, preset=preset, rank=rank, alpha=alpha, seed=seed, targets=targets)
        (run_dir / ".complete").write_text("")
    return run_dir


def tunix_lora_logits(
    base_dir: str | Path,
    lora: str | Path,
    tokens: np.ndarray,
    *,
    mesh=None,
    quantize: str | None = None,
    quant_tile: int | None = lora_lib.DEFAULT_QUANT_TILE,
) -> np.ndarray:
    """Logits ``[B, T, V]`` of the Tunix base model with the checkpoint's LoRA restored into it.

    ``quantize``: the base quantized as a QLoRA run trained it (the run's ``train.quantize``
    and ``train.quant_tile``), for the gap between the model as trained and its merge.
    """
    from tunix.sft.checkpoint_manager import CheckpointManager

    from cookbook import models

    ckpt = merge.open_lora_checkpoint(lora)
    p = models.get_preset(ckpt.preset or "")
    model = lora_lib.apply_lora(
        models.load_tunix_model(base_dir, p, mesh=mesh),
        _lora_config(ckpt),
        preset=p,
        mesh=mesh,
        quantize=quantize,
        quant_tile=quant_tile,
    )
    manager = CheckpointManager(str(ckpt.step_dir.parent))
    manager.maybe_restore(model, step=ckpt.step, restore_only_lora_params=True)
    manager.close()
    return models.tunix_logits(model, np.asarray(tokens, np.int32), mesh).astype(np.float32)


def hf_logits(
    models_: dict[str, tuple[str | Path, str | Path | None]], tokens: np.ndarray, *, dtype: str = "float32"
) -> dict[str, np.ndarray]:
    """Logits of several checkpoints from transformers (each optionally + a PEFT adapter).

    ``models_`` maps a label to ``(model_dir, adapter_dir or None)``. Computed in one fresh
    process: that proves the files on disk are all it takes; nothing from this process
    (a patched module, a cached tensor) can help. ``dtype="float32+float64"`` computes both
    and returns ``{label: float32 logits}`` plus ``{label + "@float64": float64 logits}``.
    """
    dtypes = dtype.split("+")
    with tempfile.TemporaryDirectory() as tmp:
        np.save(Path(tmp) / "tokens.npy", np.asarray(tokens, np.int64))
        spec = {k: [str(m), None if a is None else str(a)] for k, (m, a) in models_.items()}
        (Path(tmp) / "spec.json").write_text(json.dumps({"models": spec, "dtypes": dtypes}))
        cmd = [sys.executable, "-m", "cookbook.merge._verify", tmp]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"transformers failed in a fresh process:\n{done.stderr[-3000:]}")
        out = {}
        for i, k in enumerate(spec):
            for d in dtypes:
                out[k if d == dtypes[0] else f"{k}@{d}"] = np.load(Path(tmp) / f"{i}-{d}.npy")
        return out


def verify_merge(
    reference: np.ndarray,
    candidates: dict[str, tuple[str | Path, str | Path | None]],
    control: tuple[str | Path, str | Path | None],
    tokens: np.ndarray,
) -> dict:
    """Each candidate's transformers logits against ``reference`` (Tunix + LoRA), with a measured bound.

    The bound is :mod:`cookbook.core`' 4x the float32 floor: each candidate's float32
    logits against its own float64 logits, the largest over candidates. ``control`` (the
    base without the LoRA) must be :data:`numerics.CONTROL_SEPARATION` bounds away, or the
    check could not tell a merged model from an unmerged one.

    Returns ``{"floor", "bound_max_abs", "diffs": {label: max |diff|}, "checks": {label:
    numerics.compare(...)}, "control": label, "ok"}``.
    """
    control_label = "base (no LoRA)"
    logits = hf_logits({control_label: control, **candidates}, tokens, dtype="float32+float64")
    floor = core.merge_floors(*(core.float32_floor(logits[k], logits[f"{k}@float64"]) for k in candidates))
    checks = {k: core.compare(logits[k], reference, floor) for k in [control_label, *candidates]}
    return {
        "floor": floor.as_dict(),
        "bound_max_abs": floor.max_bound,
        "control": control_label,
        "diffs": {k: c["max_abs_diff"] for k, c in checks.items()},
        "checks": checks,
        "control_over_bound": checks[control_label]["max_over_bound"],
        "ok": all(c["ok"] for k, c in checks.items() if k != control_label)
        and checks[control_label]["max_over_bound"] >= core.CONTROL_SEPARATION,
    }


def _hf_logits_here(model_dir: str, tokens: np.ndarray, adapter_dir: str | None, dtype: str = "float32") -> np.ndarray:
    import torch
    import transformers

    arch = json.loads((Path(model_dir) / "config.json").read_text())["architectures"][0]
    # float64: transformers' default MoE kernel (torch grouped_mm, 26B-A4B's experts) takes no
    # float64; its eager loop over the experts computes the same function (a no-op without experts).
    kwargs = {"experts_implementation": "eager"} if dtype == "float64" else {}
    model = getattr(transformers, arch).from_pretrained(model_dir, dtype=getattr(torch, dtype), **kwargs)
    if adapter_dir is not None:
        from peft import PeftModel
        from safetensors import safe_open

        model = PeftModel.from_pretrained(model, adapter_dir)
        if dtype != "float32":
            model = model.to(getattr(torch, dtype))  # PEFT loads the adapter in float32
        # PEFT loads an adapter whose names fit no module without an error: check every
        # tensor landed (the v_proj copies on K = V layers are for vLLM; no module there).
        have = set(model.state_dict())
        with safe_open(str(Path(adapter_dir) / "adapter_model.safetensors"), framework="pt") as f:
            names = [k.replace(".weight", ".default.weight") for k in f.keys()]
        missing = [k for k in names if k not in have and ".v_proj." not in k]
        if missing or not any(k in have for k in names):
            raise ValueError(
                f"adapter {adapter_dir} does not fit {model_dir} ({arch}): e.g. {missing[:1]} "
                "has no module. Export the adapter with the layout of this base."
            )
    model.eval()
    with torch.no_grad(), core.torch_threads():  # a reproducible reference (core.torch_threads)
        ids = torch.as_tensor(tokens)
        return model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.numpy()


def sample_tokens(preset: str | models.ModelPreset, *, batch: int = 2, length: int = 48, seed: int = 0) -> np.ndarray:
    """Random text token ids: skips the 22 special ids (some are image/audio markers)."""
    p = models.get_preset(preset)
    rng = np.random.default_rng(seed)
    tokens = rng.integers(22, p.vocab_size, size=(batch, length))
    tokens[:, 0] = 2  # <bos>
    return tokens


def main(argv: list[str] | None = None) -> int:
    """``python -m cookbook.merge._verify DIR``: DIR holds spec.json and tokens.npy."""

    core.setup_runtime_env()
    work = Path((argv or sys.argv[1:])[0])
    spec = json.loads((work / "spec.json").read_text())
    tokens = np.load(work / "tokens.npy")
    for i, (model_dir, adapter_dir) in enumerate(spec["models"].values()):
        for dtype in spec["dtypes"]:
            np.save(work / f"{i}-{dtype}.npy", _hf_logits_here(model_dir, tokens, adapter_dir, dtype))
    return 0


if __name__ == "__main__":
    sys.exit(main())


# --------------------------------------------------------------------------------------
# Tables and the 31B extrapolation for notebook 07
def checkpoint_table(ckpt: merge.LoraCheckpoint) -> list[dict]:
    """One row per LoRA pair: Tunix module, shapes, and the Hugging Face weights it updates."""
    p = models.get_preset(ckpt.preset or "")
    rows = []
    for pair in ckpt.pairs:
        hf = list(lora_lib.TUNIX_TO_HF_MODULES[pair.module])
        rows.append(
            {
                "layer": pair.layer,
                "kind": "model" if pair.layer is None else p.layer_kinds[pair.layer],
                "tunix": pair.module,
                "lora_a": tuple(pair.a.shape),
                "lora_b": tuple(pair.b.shape),
                "hf": ", ".join(hf),
            }
        )
    return rows


def shard_table(out_dir: str | Path) -> list[dict]:
    """Output shards: name, tensors, bytes."""
    from cookbook.merge import _safetensors as shards

    index = json.loads((Path(out_dir) / "model.safetensors.index.json").read_text())
    rows = []
    for name in sorted(set(index["weight_map"].values())):
        refs, _ = shards.read_header(Path(out_dir) / name)
        rows.append({"shard": name, "tensors": len(refs), "bytes": sum(r.nbytes for r in refs.values())})
    return rows


def extrapolate_merge(bench: dict, preset: str | models.ModelPreset = "gemma4_31b") -> dict:
    """Time and memory of merging the full model, from ``benchmarks/results/merge_bench.json``.

    Time: seconds per byte over all measured layer counts (sum over sum: the shared machine's
    noise makes a line through three points unreliable), times the full model's bytes.
    Memory: ours is flat (the largest measured peak); Tunix's saver holds the model in RAM,
    so its measured peak per base byte is scaled to the model.
    """
    p = models.get_preset(preset)
    full_bytes = p.num_params() * np.dtype(np.float16).itemsize  # bf16 weights
    runs = bench["runs"]
    measured = sum(r["base_bytes"] for r in runs)
    out = {"preset": p.name, "model_bytes": full_bytes, "layers": p.num_layers}
    for key in ("merge_seconds", "copy_seconds", "merge_cpu_seconds"):
        if all(key in r for r in runs):
            out[key] = sum(r[key] for r in runs) / measured * full_bytes
    out["merge_over_copy"] = out["merge_seconds"] / out["copy_seconds"]
    out["merge_peak_rss_bytes"] = max(r["merge_peak_rss_bytes"] for r in runs)
    tun = [r for r in runs if "tunix_peak_rss_bytes" in r]
    if tun:
        r = tun[0]
        out["tunix_peak_rss_bytes"] = r["tunix_peak_rss_bytes"] / r["base_bytes"] * full_bytes
        out["tunix_seconds"] = r["tunix_seconds"] / r["base_bytes"] * full_bytes
    return out


def plot_bench(bench: dict, extrap: dict, axes=None):
    """Peak RSS and time against checkpoint size: measured points and the 31B extrapolation."""
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    runs = bench["runs"]
    gb = [r["base_bytes"] / 1e9 for r in runs]
    full = extrap["model_bytes"] / 1e9
    ax = axes[0]
    ax.plot(gb, [r["merge_peak_rss_bytes"] / 2**30 for r in runs], "o-", label="cookbook merge (measured)")
    ax.plot([gb[-1], full], [extrap["merge_peak_rss_bytes"] / 2**30] * 2, "--", color="C0", label="extrapolated")
    tun = [r for r in runs if "tunix_peak_rss_bytes" in r]
    if tun:
        ax.plot(
            [r["base_bytes"] / 1e9 for r in tun],
            [r["tunix_peak_rss_bytes"] / 2**30 for r in tun],
            "s",
            color="C3",
            label="Tunix saver (measured)",
        )
        ax.plot(
            [tun[0]["base_bytes"] / 1e9, full],
            [tun[0]["tunix_peak_rss_bytes"] / 2**30, extrap["tunix_peak_rss_bytes"] / 2**30],
            "--",
            color="C3",
            label="Tunix extrapolated",
        )
    ax.set(xlabel="checkpoint size (GB)", ylabel="peak RSS (GiB)", yscale="log", title="host memory")
    ax.legend(fontsize=8)
    ax = axes[1]
    ax.plot(gb, [r["merge_seconds"] for r in runs], "o-", label="cookbook merge")
    ax.plot(gb, [r["copy_seconds"] for r in runs], "^-", label="plain copy")
    ax.plot(
        [full], [extrap["merge_seconds"]], "o", mfc="none", color="C0", label=f"merge, {extrap['preset']} (extrap.)"
    )
    ax.plot([full], [extrap["copy_seconds"]], "^", mfc="none", color="C1", label=f"copy, {extrap['preset']} (extrap.)")
    ax.set(xlabel="checkpoint size (GB)", ylabel="seconds", title="wall time (same disk)")
    ax.legend(fontsize=8)
    return axes


def plot_verification(result: dict, ax=None):
    """Each candidate's max |logit difference| against the measured bound (log scale)."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 2.8))
    diffs = result["diffs"]
    ax.barh(list(diffs), list(diffs.values()), color=["C3" if k == result["control"] else "C0" for k in diffs])
    ax.axvline(
        result["bound_max_abs"],
        color="k",
        ls="--",
        lw=1,
        label=f"bound {result['bound_max_abs']:.2g} (4 x float32 floor)",
    )
    ax.set(xscale="log", xlabel="max |logit - Tunix+LoRA logit|")
    ax.legend()
    return ax
