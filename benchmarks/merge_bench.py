"""Merge at Gemma 4 31B widths: our streamed merge vs a plain copy vs Tunix's merged saver.

Builds a base checkpoint with 31B's real tensors (the full 262,144 x 5,376 embedding and
decoder layers of 31B size, bf16, layer 0 a K = V global layer, the rest sliding; keys in
the released multimodal layout, one shard per layer plus one for the embedding, with an
index), a rank-64 LoRA on all seven projections as an Orbax checkpoint in Tunix's layout,
then measures, each in a fresh child process on the same disk:

* a plain copy of the base's bytes (``shutil.copyfile`` + fsync: the floor for any merge);
* ``cookbook.merge.merge_lora`` (streamed, fsync'd, atomic rename), for several layer counts
  (peak RSS should stay flat as layers are added);
* Tunix's ``save_lora_merged_model_as_safetensors`` on a single-file copy of the smallest
  base (it reads only ``model.safetensors`` and holds the model in RAM).

Peak RSS is the child's ``VmHWM``; CPU seconds (user + system) are recorded too, because
on a shared 2-core machine a CPU-bound step is slowed by other load and a disk-bound one
much less (``load_avg_*`` in the JSON says how busy the machine was). Writes ``benchmarks/results/merge_bench.json``.

    .venv/bin/python benchmarks/merge_bench.py --layers 1,2,4 --tunix-layers 1 --work /work/e_bench_tmp
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from cookbook import merge, models  # noqa: E402

PREFIX = "model.language_model."
RANK, ALPHA = 64, 64.0


def bench_preset(num_layers: int) -> models.ModelPreset:
    """31B widths, ``num_layers`` layers, layer 0 global (K = V), the others sliding."""
    return models.gemma4_31b().with_overrides(
        name=f"gemma4_31b_widths_{num_layers}l",
        hf_checkpoint=None,
        num_layers=num_layers,
        attention_pattern=("global",) + ("sliding",) * (num_layers - 1) if num_layers > 1 else ("global",),
    )


def layer_tensors(p: models.ModelPreset, i: int) -> dict[str, tuple[int, ...]]:
    kind = p.layer_kinds[i]
    hd = p.global_head_dim if kind == "global" else p.head_dim
    kv = p.effective_global_kv_heads if kind == "global" else p.num_kv_heads
    d, f, L = p.embed_dim, p.hidden_dim, f"{PREFIX}layers.{i}."
    t = {
        L + "self_attn.q_proj.weight": (p.num_heads * hd, d),
        L + "self_attn.k_proj.weight": (kv * hd, d),
        L + "self_attn.o_proj.weight": (d, p.num_heads * hd),
        L + "self_attn.q_norm.weight": (hd,),
        L + "self_attn.k_norm.weight": (hd,),
        L + "mlp.gate_proj.weight": (f, d),
        L + "mlp.up_proj.weight": (f, d),
        L + "mlp.down_proj.weight": (d, f),
        L + "layer_scalar": (1,),
    }
    if kind != "global":
        t[L + "self_attn.v_proj.weight"] = (kv * hd, d)
    for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"):
        t[L + n + ".weight"] = (d,)
    return t


_BLOCK: np.ndarray | None = None


def _write_file(path: Path, tensors: dict[str, tuple[int, ...]]) -> None:
    """A bf16 safetensors file of random-looking values, written block by block."""
    global _BLOCK
    import ml_dtypes

    if _BLOCK is None:
        _BLOCK = np.random.default_rng(0).normal(0, 0.02, 16 * 2**20).astype(ml_dtypes.bfloat16)
    refs = [
        merge.OutTensor(
            name=k, src=merge.TensorRef(name=k, path=path, dtype="BF16", shape=s, offset=0, nbytes=int(np.prod(s)) * 2)
        )
        for k, s in tensors.items()
    ]
    with open(path, "wb") as f:
        f.write(merge.header_bytes(refs, {"format": "pt"}))
        for r in refs:
            left = r.src.nbytes // 2
            while left:
                n = min(left, _BLOCK.size)
                f.write(_BLOCK[:n].tobytes())
                left -= n


def build_parts(work: Path, max_layers: int) -> None:
    p = bench_preset(max_layers)
    parts = work / "parts"
    parts.mkdir(parents=True, exist_ok=True)
    if not (parts / "embed.safetensors").is_file():
        _write_file(
            parts / "embed.safetensors",
            {PREFIX + "embed_tokens.weight": (p.vocab_size, p.embed_dim), PREFIX + "norm.weight": (p.embed_dim,)},
        )
    for i in range(max_layers):
        if not (parts / f"layer-{i:03d}.safetensors").is_file():
            _write_file(parts / f"layer-{i:03d}.safetensors", layer_tensors(p, i))


def make_base(work: Path, num_layers: int) -> Path:
    """Base dir for ``num_layers``: hard links to the shared parts, its own index and config."""
    p = bench_preset(num_layers)
    d = work / f"base-{num_layers}l"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    names = ["embed.safetensors"] + [f"layer-{i:03d}.safetensors" for i in range(num_layers)]
    weight_map = {}
    for i, n in enumerate(names):
        out = f"model-{i + 1:05d}-of-{len(names):05d}.safetensors"
        os.link(work / "parts" / n, d / out)
        weight_map.update({k: out for k in merge.read_header(d / out)[0]})
    total = sum((d / n).stat().st_size for n in set(weight_map.values()))
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map})
    )
    p.hf_config().to_json_file(str(d / "config.json"))
    return d


def make_lora(work: Path, num_layers: int) -> Path:
    """A rank-64 LoRA on all seven projections, saved as Tunix's CheckpointManager lays it out."""
    import orbax.checkpoint as ocp

    p = bench_preset(num_layers)
    rng = np.random.default_rng(1)
    r, d, f = RANK, p.embed_dim, p.hidden_dim

    def arr(*shape):
        return {"value": rng.normal(0, 0.01, shape).astype(np.float32)}

    layers = {}
    for i, kind in enumerate(p.layer_kinds):
        hd = p.global_head_dim if kind == "global" else p.head_dim
        kv = p.effective_global_kv_heads if kind == "global" else p.num_kv_heads
        attn = {
            "q_einsum": {"w_lora_a": arr(d, r), "w_lora_b": arr(r, p.num_heads, hd)},
            "attn_vec_einsum": {"w_lora_a": arr(p.num_heads, hd, r), "w_lora_b": arr(r, d)},
        }
        if kind == "global":
            attn["k_einsum"] = {"w_lora_a": arr(d, r), "w_lora_b": arr(r, kv, hd)}
        else:
            attn["kv_einsum"] = {"w_lora_a": arr(d, r), "w_lora_b": arr(r, 2, kv, hd)}
        mlp = {
            "gate_proj": {"kernel_lora_a": arr(d, r), "kernel_lora_b": arr(r, f)},
            "up_proj": {"kernel_lora_a": arr(d, r), "kernel_lora_b": arr(r, f)},
            "down_proj": {"kernel_lora_a": arr(f, r), "kernel_lora_b": arr(r, d)},
        }
        layers[str(i)] = {"attn": attn, "mlp": mlp}
    run = work / f"lora-{num_layers}l"
    shutil.rmtree(run, ignore_errors=True)
    step = run / "checkpoints" / "1"
    ocp.PyTreeCheckpointer().save(step / "model_params", {"layers": layers})
    recipe = {"model_preset": p.name, "lora": {"rank": RANK, "alpha": ALPHA, "dropout": 0.05}}
    (step / "_CHECKPOINT_METADATA").write_text(json.dumps({"custom_metadata": {"recipe": recipe}}))
    return run


# --------------------------------------------------------------------------------------
# Children: one measured action each
def child_copy(base: str, out: str) -> dict:
    t, cpu = time.perf_counter(), time.process_time()
    Path(out).mkdir()
    for src in sorted(Path(base).glob("*.safetensors")):
        shutil.copyfile(src, Path(out) / src.name)
        with open(Path(out) / src.name, "rb+") as f:
            os.fsync(f.fileno())
    return {"seconds": time.perf_counter() - t, "cpu_seconds": time.process_time() - cpu}


def child_merge(base: str, lora: str, out: str, layers: str) -> dict:
    from cookbook import merge

    # 2 GiB shards: every layer count gets >= 2 output shards, so both shard writers run
    # (the default is 5 GiB; memory does not depend on the shard size).
    cpu = time.process_time()  # user + system, all threads
    r = merge.merge_lora(base, lora, out, preset=bench_preset(int(layers)), progress=False, max_shard_bytes=2 * 2**30)
    cpu = time.process_time() - cpu
    sizes = [p.stat().st_size for p in Path(out).glob("*.safetensors")]
    return {"seconds": r.seconds, "cpu_seconds": cpu, "num_shards": r.num_shards, "largest_shard_bytes": max(sizes)}


def child_tunix(base: str, lora: str, out: str, layers: str) -> dict:
    """Tunix's saver, given what it needs for Gemma 4 (it ships no Gemma 4 wrapper)."""
    import jax.numpy as jnp
    from flax import nnx
    from tunix.models import safetensors_saver

    from cookbook import lora, merge

    t, cpu = time.perf_counter(), time.process_time()
    ckpt = merge.open_lora_checkpoint(lora, preset=bench_preset(int(layers)))

    class Node(nnx.Module):
        pass

    root = Node()
    root.layers = nnx.List([Node() for _ in range(int(layers))])
    for pair in merge.read_lora(ckpt):
        parent, name = pair.module.split(".")
        holder = root.layers[pair.layer]
        if not hasattr(holder, parent):
            setattr(holder, parent, Node())
        mod = Node()
        setattr(getattr(holder, parent), name, mod)
        w = "kernel" if parent == "mlp" else "w"
        setattr(mod, f"{w}_lora_a", nnx.LoRAParam(jnp.asarray(pair.a)))
        setattr(mod, f"{w}_lora_b", nnx.LoRAParam(jnp.asarray(pair.b)))

    def split_kv(layers_: dict) -> dict:
        out_ = {}
        for path, (a, b) in layers_.items():
            if path.endswith("kv_einsum"):
                out_[path + ".k"] = [a, jnp.asarray(b.value)[:, 0]]
                out_[path + ".v"] = [a, jnp.asarray(b.value)[:, 1]]
            else:
                out_[path] = [a, b]
        return out_

    def key_fn(path: str) -> str:
        parts = path.split(".")
        module = ".".join(parts[2:4])
        hf = lora.TUNIX_TO_HF[module]
        if module == "attn.kv_einsum":
            hf = ("self_attn.k_proj",) if parts[-1] == "k" else ("self_attn.v_proj",)
        return f"{PREFIX}layers.{parts[1]}.{hf[0]}.weight"

    safetensors_saver.save_lora_merged_model_as_safetensors(
        base,
        out,
        root,
        rank=ckpt.rank,
        alpha=ckpt.alpha,
        state_key_transform_fn=key_fn,
        custom_layer_extractor_fn=split_kv,
        transpose_rules={"_proj": (1, 0)},
    )
    with open(Path(out) / "model.safetensors", "rb+") as f:
        os.fsync(f.fileno())
    return {"seconds": time.perf_counter() - t, "cpu_seconds": time.process_time() - cpu}


def peak_rss_bytes() -> int:
    """This process's RSS high-water mark (VmHWM; unlike ru_maxrss it does not carry the
    parent's RSS over fork + exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def run_child(*args: str) -> dict:
    """Run ``merge_bench.py _child ARGS`` in a fresh process; return what it measured."""
    out_file = Path(args[-1] if args[0] == "copy" else args[3]).with_suffix(".result.json")
    subprocess.run([sys.executable, __file__, "_child", *args, str(out_file)], cwd=REPO, check=True)
    res = json.loads(out_file.read_text())
    out_file.unlink()
    return res


def dir_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.glob("*.safetensors"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", default="1,2,4", help="layer counts to merge (peak RSS must stay flat)")
    ap.add_argument("--tunix-layers", type=int, default=1, help="layer count for Tunix's in-RAM saver (0: skip)")
    ap.add_argument("--work", default="/work/e_bench_tmp", help="scratch dir on the disk to measure (deleted)")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "merge_bench.json"))
    ap.add_argument("--keep", action="store_true", help="keep the scratch dir")
    a = ap.parse_args()
    counts = sorted(int(x) for x in a.layers.split(","))
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    results: dict = {
        "rank": RANK,
        "dtype": "bfloat16",
        "runs": [],
        "machine": {
            "cpus": os.cpu_count(),
            "load_avg_start": os.getloadavg()[0],
            "disk_free_gb": shutil.disk_usage(work).free / 1e9,
        },
    }
    try:
        t = time.perf_counter()
        build_parts(work, max(counts))
        results["build_seconds"] = time.perf_counter() - t
        for n in counts:
            base, lora = make_base(work, n), make_lora(work, n)
            row = {
                "layers": n,
                "base_bytes": dir_bytes(base),
                "lora_bytes": sum(p.stat().st_size for p in (lora / "checkpoints").rglob("*") if p.is_file()),
            }
            copy = run_child("copy", str(base), str(work / "copy"))
            shutil.rmtree(work / "copy")
            ours = run_child("merge", str(base), str(lora), str(work / "merged"), str(n))
            shutil.rmtree(work / "merged")
            row.update(
                copy_seconds=copy["seconds"],
                copy_peak_rss_bytes=copy["peak_rss_bytes"],
                copy_cpu_seconds=copy["cpu_seconds"],
                merge_cpu_seconds=ours["cpu_seconds"],
                merge_seconds=ours["seconds"],
                merge_peak_rss_bytes=ours["peak_rss_bytes"],
                merge_num_shards=ours["num_shards"],
                largest_output_shard_bytes=ours["largest_shard_bytes"],
                merge_over_copy=ours["seconds"] / copy["seconds"],
            )
            if n == a.tunix_layers:
                single = work / "single"
                single.mkdir(exist_ok=True)
                refs = {}
                for f in base.glob("*.safetensors"):
                    refs.update(merge.read_header(f)[0])
                merge.write_shard(
                    single / "model.safetensors",
                    [merge.OutTensor(name=k, src=r) for k, r in refs.items()],
                    {"format": "pt"},
                )
                shutil.copy(base / "config.json", single / "config.json")
                tunix = run_child("tunix", str(single), str(lora), str(work / "tunix_out"), str(n))
                shutil.rmtree(work / "tunix_out", ignore_errors=True)
                shutil.rmtree(single)
                row.update(
                    tunix_seconds=tunix["seconds"],
                    tunix_peak_rss_bytes=tunix["peak_rss_bytes"],
                    tunix_cpu_seconds=tunix["cpu_seconds"],
                    tunix_over_ours_seconds=tunix["seconds"] / ours["seconds"],
                    tunix_over_ours_rss=tunix["peak_rss_bytes"] / ours["peak_rss_bytes"],
                )
            results["runs"].append(row)
            shutil.rmtree(base)
            shutil.rmtree(lora)
            print(json.dumps(row), flush=True)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    results["machine"]["load_avg_end"] = os.getloadavg()[0]
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(results, indent=2) + "\n")
    print(
        f"{'layers':>6} {'GB':>6} {'copy s':>7} {'merge s':>8} {'ratio':>6} {'RSS GB':>7} {'Tunix s':>8} {'Tunix RSS':>9}"
    )
    for r in results["runs"]:
        print(
            f"{r['layers']:>6} {r['base_bytes'] / 1e9:>6.2f} {r['copy_seconds']:>7.1f} {r['merge_seconds']:>8.1f} "
            f"{r['merge_over_copy']:>6.2f} {r['merge_peak_rss_bytes'] / 2**30:>7.2f} "
            f"{r.get('tunix_seconds', float('nan')):>8.1f} {r.get('tunix_peak_rss_bytes', float('nan')) / 2**30:>9.2f}"
        )
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_child":
        action, *args, result = sys.argv[2:]
        fn = {"copy": child_copy, "merge": child_merge, "tunix": child_tunix}[action]
        Path(result).write_text(json.dumps({**fn(*args), "peak_rss_bytes": peak_rss_bytes()}))
        sys.exit(0)
    sys.exit(main())
