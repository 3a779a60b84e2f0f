"""Merge a Tunix LoRA checkpoint (Orbax) into Hugging Face safetensors, streamed and atomic.

Tunix's ``save_lora_merged_model_as_safetensors`` reads one ``model.safetensors`` into
RAM and has no Gemma 4 mapping; at 31B that is 62.5 GB of host memory and a single file
over the Hub's 50 GB limit. Here:

* the LoRA tensors (and rank, alpha, preset recorded with them) are read straight from
  the Orbax checkpoint, one decoder layer at a time, without building the model
  (``cookbook.merge``);
* the base is streamed through ``model.safetensors.index.json``: untouched tensors are
  copied byte for byte, touched ones are updated in row blocks with
  ``W + (A @ B) * alpha / rank`` in float32 and cast back (``cookbook.merge``), so memory
  stays flat whatever the model size; output shards have a maximum size and an index;
* everything is checked against the base (its content, by the fingerprint training
  recorded) before a byte is written, and written to a temporary directory beside OUT that
  is renamed into place only when complete; OUT is never an input, nor anything but an
  earlier output of this module when replaced (``check_out_dir``);
* a text-only ``Gemma4ForCausalLM`` layout (what vLLM on CPU serves) and a PEFT adapter
  (``cookbook.lora``) are offered besides the released multimodal layout.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from cookbook import lora as lora_lib
from cookbook import models
from cookbook.merge import _safetensors as shards
from cookbook.merge._checkpoint import (
    LoraCheckpoint,
    find_step_dir,
    open_lora_checkpoint,
    read_lora,
)
from cookbook.merge._outdir import (
    _COMPLETE,
    _OUTPUT_KINDS,
    _clean_stale_tmp,
    _inputs,
    _move_into_place,
    check_out_dir,
)

__all__ = [
    "LoraCheckpoint",
    "find_step_dir",
    "open_lora_checkpoint",
    "read_lora",
    "merge_lora",
    "plan_merge",
    "export_peft",
    "check_out_dir",
    "MergeResult",
]

MERGE_FORMAT_VERSION = 1
DEFAULT_MAX_SHARD_BYTES = 5 * 2**30  # like the released shards; the Hub's limit is 50 GB
# Files of the multimodal processor that a text-only export must not advertise.
_PROCESSOR_FILES = {"processor_config.json", "preprocessor_config.json", "video_preprocessor_config.json"}


# --------------------------------------------------------------------------------------
# Planning: every check happens here, before anything is written
@dataclasses.dataclass(frozen=True, kw_only=True)
class MergePlan:
    preset: models.ModelPreset
    prefix: str  # text decoder prefix in the base
    tensors: list[shards.OutTensor]  # in output order, updates attached
    touched: dict[str, tuple[int, str]]  # base key -> (layer, HF module)
    metadata: dict[str, str]


def hf_module_shape(pair: lora_lib.LoraPair, hf: str) -> tuple[int, int]:
    a_in = int(np.prod(pair.a.shape[:-1]))
    b_shape = tuple(pair.b.shape)
    out = int(np.prod(b_shape[2:] if pair.module == "attn.kv_einsum" else b_shape[1:]))
    return (out, a_in)


def _output_name(key: str, prefix: str, text_only: bool) -> str | None:
    if not text_only:
        return key
    if key.startswith(prefix):
        return "model." + key[len(prefix) :]
    if key == "lm_head.weight":
        return key
    return None  # vision / audio towers and their embedders


def _order_key(name: str) -> tuple:
    m = re.search(r"layers\.(\d+)\.", name)
    return (1, int(m.group(1)), name) if m else ((0, 0, name) if "embed" in name else (2, 0, name))


def plan_merge(
    base_dir: str | Path,
    ckpt: LoraCheckpoint | None,
    *,
    preset: str | models.ModelPreset | None = None,
    text_only: bool = False,
) -> MergePlan:
    """Check the checkpoint against the base and list the output tensors. Writes nothing.

    ``ckpt=None`` plans a plain conversion (e.g. the text-only layout of the base itself).
    """
    name = preset or (ckpt.preset if ckpt is not None else None)
    if name is None:
        raise ValueError("Which preset is the base? The LoRA checkpoint records none; pass preset=/--preset")
    p = models.get_preset(name)
    prefix = models.check_checkpoint_matches(base_dir, p)  # shapes and layer count
    pairs = list(ckpt.pairs) if ckpt is not None else []
    if ckpt is not None:
        lora_lib.check_pairs_fit_preset(pairs, p, ckpt.rank)
    base_dir = Path(base_dir)
    refs: dict[str, shards.TensorRef] = {}
    metadata: dict[str, str] = {}
    for shard in sorted(set(models.read_checkpoint_index(base_dir).values())):
        tensors, metadata = shards.read_header(base_dir / shard)
        refs.update(tensors)
    touched: dict[str, tuple[int | None, str]] = {}
    first_shared = p.num_layers - p.num_kv_shared_layers
    for pair in pairs:
        for hf in lora_lib.TUNIX_TO_HF_MODULES[pair.module]:
            if pair.module == "attn.k_einsum" and hf.endswith("v_proj"):
                continue
            # A model-level weight (E2B/E4B's per_layer_model_projection) is a plain Linear under
            # the text model in transformers: merged like a layer's, from the PEFT factors.
            key = f"{prefix}{hf}.weight" if pair.layer is None else f"{prefix}layers.{pair.layer}.{hf}.weight"
            ref = refs.get(key)
            if ref is None:
                if pair.layer is not None and pair.layer >= first_shared and hf.endswith(("k_proj", "v_proj")):
                    continue  # KV-shared layer: transformers has no K/V weights there
                raise ValueError(f"LoRA {pair.where} updates {key}, which {base_dir} lacks")
            want = hf_module_shape(pair, hf)
            if ref.shape != want:
                raise ValueError(
                    f"LoRA {pair.where} gives a {want} update but {key} in "
                    f"{base_dir} is {ref.shape}: the checkpoint was trained on another model"
                )
            if ref.dtype not in shards.FLOAT_CODES:
                raise ValueError(f"{key} has dtype {ref.dtype}; only float weights can take a LoRA update")
            touched[key] = (pair.layer, hf)
    dtypes = {refs[k].dtype for k in touched}
    if len(dtypes) > 1:
        raise ValueError(f"{base_dir}: the weights LoRA updates mix dtypes {sorted(dtypes)}; expected one")
    cfg = json.loads((base_dir / "config.json").read_text()) if (base_dir / "config.json").is_file() else {}
    declared = (cfg.get("text_config") or cfg).get("dtype") or cfg.get("torch_dtype")
    names = {"F32": "float32", "BF16": "bfloat16", "F16": "float16", "F64": "float64"}
    if declared and dtypes and names[next(iter(dtypes))] != declared:
        raise ValueError(
            f"{base_dir}: config.json declares dtype {declared!r} but the weights are "
            f"{names[next(iter(dtypes))]}; the checkpoint and its config disagree"
        )
    if ckpt is not None and ckpt.base_fingerprint:  # by content: a copy elsewhere is fine, other weights are not
        models.check_same_base(
            base_dir,
            {"base_dir": ckpt.base_dir, "base_fingerprint": ckpt.base_fingerprint},
            what=f"the LoRA in {ckpt.run_dir or ckpt.step_dir}",
            fix="pass --base with the checkpoint it was trained on",
        )
    elif ckpt is not None and ckpt.base_dir and Path(ckpt.base_dir).resolve() != base_dir.resolve():
        # A run recorded before fingerprints: only the path can be compared.
        warnings.warn(
            f"merging into {base_dir}, but the LoRA was trained on {ckpt.base_dir}; make sure "
            "they hold the same weights (shapes alone cannot tell)",
            stacklevel=3,
        )
    out = []
    for key, ref in refs.items():
        name = _output_name(key, prefix, text_only)
        if name is not None:
            out.append(shards.OutTensor(name=name, src=ref))
    out.sort(key=lambda t: _order_key(t.name))
    return MergePlan(preset=p, prefix=prefix, tensors=out, touched=touched, metadata=metadata or {"format": "pt"})


# --------------------------------------------------------------------------------------
# Writing
@dataclasses.dataclass(frozen=True, kw_only=True)
class MergeResult:
    out_dir: Path
    num_shards: int
    merged_tensors: int
    copied_tensors: int
    bytes_written: int
    seconds: float


class _LayerLoRA:
    """Row-block updates for touched tensors; holds one decoder layer's LoRA at a time."""

    def __init__(self, ckpt: LoraCheckpoint):
        self.ckpt = ckpt
        self.scale = np.float32(ckpt.alpha / ckpt.rank)
        self.layer: int | None = -1  # none read yet (None is the model level)
        self.factors: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def update_fn(self, layer: int | None, hf: str) -> shards.RowFn:
        def update(block: np.ndarray, start: int, scratch: np.ndarray) -> None:
            if self.layer != layer:
                self.factors = {}
                # layer None: the model-level LoRA alone (no decoder layer's)
                for pair in read_lora(self.ckpt, [] if layer is None else [layer], model_level=layer is None):
                    for name, lora_a, lora_b in pair.peft_factors():
                        # alpha / rank folded into B once: (B * s) @ A == (A @ B).T * s
                        self.factors[name] = (lora_a.astype(np.float32), lora_b.astype(np.float32) * self.scale)
                self.layer = layer
            lora_a, lora_b = self.factors[hf]
            delta = scratch.reshape(block.shape[0], -1)
            np.matmul(lora_b[start : start + block.shape[0]], lora_a, out=delta)
            np.add(block, delta.reshape(block.shape), out=block)

        return update


def _copy_side_files(base_dir: Path, tmp: Path, text_only: bool) -> None:
    for src in sorted(base_dir.iterdir()):
        name = src.name
        if (
            not src.is_file()
            or name.startswith(".")
            or name.endswith(".safetensors")
            or name == "model.safetensors.index.json"
            or (text_only and name in _PROCESSOR_FILES)
        ):
            continue
        if text_only and name == "config.json":
            cfg = json.loads(src.read_text())
            text = dict(cfg.get("text_config") or cfg)  # already text-only: keep it
            if text.get("model_type") == "gemma4_unified_text":
                # 12B's unified text config leaves out the fields it has no use for, and
                # Gemma4TextConfig's defaults for two of them are not neutral: per-layer inputs of
                # 256 (E2B's) and bidirectional attention (for vision tokens a text-only model has
                # none of).
                text.setdefault("hidden_size_per_layer_input", 0)
                text.setdefault("enable_moe_block", False)
                text["use_bidirectional_attention"] = None
            text["architectures"] = ["Gemma4ForCausalLM"]
            text["model_type"] = "gemma4_text"
            for k in ("tie_word_embeddings", "transformers_version"):
                if k in cfg:
                    text.setdefault(k, cfg[k])
            (tmp / name).write_text(json.dumps(text, indent=2, sort_keys=True) + "\n")
        else:
            shutil.copyfile(src, tmp / name)


# What ends a Gemma 4 generation: the end of text, the end of a turn, and the opener of a tool
# response (a turn whose last act is a tool call stops there and waits). Google's releases'
# generation_config.json lists all three ([1, 106, 50]); their config.json only the first two.
STOP_TOKENS = ("<eos>", "<turn|>", "<|tool_response>")


def _stop_ids(base_dir: Path) -> list[int]:
    """The ids of :data:`STOP_TOKENS` in the base's ``tokenizer.json`` (its added tokens), in
    that order; those it does not have are left out."""
    path = base_dir / "tokenizer.json"
    if not path.is_file():
        return []
    added = {t["content"]: int(t["id"]) for t in json.loads(path.read_text()).get("added_tokens", [])}
    return [added[t] for t in STOP_TOKENS if t in added]


def _complete_generation_config(base_dir: Path, tmp: Path) -> list[int]:
    """Make the merged checkpoint's ``generation_config.json`` stop on every Gemma 4 stop token
    the base's tokenizer has: vLLM and transformers stop on its ``eos_token_id`` list, and a base
    whose list lacks ``<|tool_response>`` (a config.json-derived one) runs past a tool call.

    The base's file is kept as copied when it already lists them all; otherwise the missing
    ids are appended (a base without the file gets one). Returns the ids added."""
    stops = _stop_ids(base_dir)
    path = tmp / "generation_config.json"
    cfg = json.loads(path.read_text()) if path.is_file() else {}
    eos = cfg.get("eos_token_id")
    have = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    added = [i for i in stops if i not in have]
    if added:
        cfg["eos_token_id"] = have + added
        path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return added


def merge_lora(
    base_dir: str | Path,
    lora: str | Path | LoraCheckpoint | None,
    out_dir: str | Path,
    *,
    text_only: bool = False,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    overwrite: bool = False,
    preset: str | models.ModelPreset | None = None,
    progress: bool = True,
    record: dict | None = None,
    workers: int = 2,
) -> MergeResult:
    """Merge ``lora`` into ``base_dir``'s weights and write Hugging Face safetensors to ``out_dir``.

    Args:
      base_dir: the base checkpoint (released multimodal or text-only layout).
      lora: a training run dir, its ``checkpoints`` dir, a step dir, or an opened checkpoint;
        ``None`` converts the base alone (e.g. to the text-only layout vLLM on CPU needs
        for serving the base with ``--enable-lora``).
      out_dir: where the merged checkpoint goes; must not exist unless ``overwrite``, and then be
        empty or an earlier output of this module; never an input or inside one (:func:`check_out_dir`).
      text_only: write ``Gemma4ForCausalLM`` (keys ``model.layers.*``, text config).
      max_shard_bytes: largest output shard (a larger single tensor gets its own shard).
      preset: architecture name if the checkpoint did not record it.
      record: extra fields for the completion record (cache keys).
      workers: output shards written at once (memory: about 200 MB each).
    """
    t0 = time.perf_counter()
    if lora is None or isinstance(lora, LoraCheckpoint):
        ckpt = lora
    else:
        ckpt = open_lora_checkpoint(lora, preset=preset)
    base_dir = Path(base_dir)
    out = check_out_dir(out_dir, inputs=_inputs(base_dir, ckpt), overwrite=overwrite)
    plan = plan_merge(base_dir, ckpt, preset=preset, text_only=text_only)
    groups = shards.plan_shards(plan.tensors, max_shard_bytes)
    names = shards.shard_names(len(groups))
    out.parent.mkdir(parents=True, exist_ok=True)
    _clean_stale_tmp(out)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        (tmp / ".pid").write_text(str(os.getpid()))
        from concurrent.futures import ThreadPoolExecutor

        from tqdm.auto import tqdm

        total = sum(t.src.nbytes for t in plan.tensors)
        with tqdm(total=total, unit="B", unit_scale=True, desc="merge", disable=not progress) as bar:

            def write(name: str, group: list[shards.OutTensor]) -> None:
                # Each shard has its own one-layer LoRA cache: shards are written in parallel.
                if ckpt is not None:
                    lora_cache = _LayerLoRA(ckpt)
                    group = [
                        dataclasses.replace(t, update=lora_cache.update_fn(*plan.touched[t.src.name]))
                        if t.src.name in plan.touched
                        else t
                        for t in group
                    ]
                shards.write_shard(tmp / name, group, plan.metadata, progress=bar.update)

            # Two shards at a time: one copying (disk-bound) while another computes (CPU-bound).
            with ThreadPoolExecutor(max(1, workers)) as pool:
                for f in [pool.submit(write, n, g) for n, g in zip(names, groups, strict=True)]:
                    f.result()
        index = {
            "metadata": {"total_size": total},
            "weight_map": {t.name: n for n, g in zip(names, groups, strict=True) for t in g},
        }
        (tmp / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
        _copy_side_files(base_dir, tmp, text_only)
        added_stops = _complete_generation_config(base_dir, tmp)
        if added_stops and progress:
            print(
                f"merge: generation_config.json: the base's eos_token_id lacked {added_stops} "
                f"({', '.join(STOP_TOKENS)} are Gemma 4's stops); added",
                file=sys.stderr,
            )
        done = {
            "kind": _OUTPUT_KINDS[0],
            "version": MERGE_FORMAT_VERSION,
            "preset": plan.preset.name,
            "base_dir": str(base_dir),
            "text_only": text_only,
            "max_shard_bytes": max_shard_bytes,
            "generation_config_added_eos": added_stops,  # said, not silently changed
            **(record or {}),
        }
        if ckpt is not None:
            done.update(lora_step_dir=str(ckpt.step_dir), step=ckpt.step, rank=ckpt.rank, alpha=ckpt.alpha)
        (tmp / _COMPLETE).write_text(json.dumps(done, sort_keys=True))
        (tmp / ".pid").unlink()
        _move_into_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    merged = len(plan.touched)
    return MergeResult(
        out_dir=out,
        num_shards=len(groups),
        merged_tensors=merged,
        copied_tensors=len(plan.tensors) - merged,
        bytes_written=total,
        seconds=time.perf_counter() - t0,
    )


def export_peft(
    lora: str | Path | LoraCheckpoint,
    out_dir: str | Path,
    *,
    layout: str = "text",
    preset: str | None = None,
    base_model: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Write the unmerged adapter in PEFT format (float32), atomically, for peft and vLLM."""
    ckpt = lora if isinstance(lora, LoraCheckpoint) else open_lora_checkpoint(lora, preset=preset)
    out = check_out_dir(out_dir, inputs=_inputs(None, ckpt), overwrite=overwrite, flag="--peft-out")
    tensors = lora_lib.tunix_lora_to_peft(
        read_lora(ckpt), preset or ckpt.preset or "", {"rank": ckpt.rank}, layout=layout, dtype=np.float32
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        lora_lib.write_peft_adapter(
            tmp,
            tensors,
            rank=ckpt.rank,
            alpha=ckpt.alpha,
            dropout=ckpt.dropout,
            layout=layout,
            base_model=base_model or ckpt.base_dir,
        )
        (tmp / _COMPLETE).write_text(
            json.dumps({"kind": _OUTPUT_KINDS[1], "lora_step_dir": str(ckpt.step_dir), "layout": layout})
        )
        _move_into_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
