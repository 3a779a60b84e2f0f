"""The base checkpoint: the released Gemma 4 weights on a TPU host, or a random one offline.

``ensure_base(preset)`` returns a directory in the layout of a released Gemma 4
checkpoint (``Gemma4ForConditionalGeneration``, keys under ``model.language_model.``,
sharded safetensors with ``model.safetensors.index.json``, config, generation config,
tokenizer with chat template). For the real presets it is the Hugging Face snapshot
(token from ``HF_TOKEN`` or Colab secrets); for the random CPU presets it is built here,
deterministically from a seed, initialised through transformers (Tunix zero-initialises
MLP kernels, which would make a useless base), and cached.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from cookbook import core
from cookbook.models import _presets as models
from cookbook.models import _tokenizer as tokenizer

# Bump when the random checkpoint's recipe changes, so caches rebuild.
BASE_FORMAT_VERSION = 1
_COMPLETE = ".cookbook-complete.json"


def default_base_dir(preset: str | models.ModelPreset = "tiny", seed: int = 0) -> Path:
    p = models.get_preset(preset)
    return core.cache_root() / "base" / f"{p.name}-seed{seed}-v{BASE_FORMAT_VERSION}"


def is_complete(path: str | Path) -> bool:
    return (Path(path) / _COMPLETE).is_file()


def ensure_base(
    preset: str | models.ModelPreset = "tiny",
    *,
    seed: int = 0,
    out: str | Path | None = None,
    num_shards: int = 2,
) -> Path:
    """Return a base checkpoint directory for ``preset``, building or downloading it once.

    Args:
      preset: preset name or object. Presets with ``hf_checkpoint`` are downloaded from
        the Hub (a TPU host's job; needs network and, for gated weights, ``HF_TOKEN``).
      seed: seed of the random weights (random presets only).
      out: directory to use instead of the cache.
      num_shards: how many safetensors shards to split a random checkpoint into (at least
        2, so every sharded-checkpoint path in the cookbook runs on every run).
    """
    p = models.get_preset(preset)
    if p.hf_checkpoint is not None:
        return _download(p, out)
    target = Path(out) if out is not None else default_base_dir(p, seed)

    def build() -> None:
        if target.exists() and any(target.iterdir()):
            raise FileExistsError(
                f"{target} exists, is not empty and is not a finished cookbook base checkpoint; "
                "refusing to overwrite it. Choose another --out or remove it."
            )
        build_random_base(p, target, seed=seed, num_shards=num_shards)

    # Several processes may ask at once (the hosts of a local multi-process job, two
    # notebooks): one builds, the others wait and find it complete.
    core.fill_once(target, is_complete, build)
    recorded = json.loads((target / _COMPLETE).read_text())
    wanted = _build_record(p, seed, num_shards)
    if recorded != wanted:
        raise FileExistsError(
            f"{target} holds a different base checkpoint ({recorded}); asked for {wanted}. "
            "Pick another --out or delete that directory."
        )
    return target


# Bases up to this size are hashed whole; larger ones (a 62 GB release) by their headers,
# sizes and first and last MiB per file: whole-file hashing would take minutes per run.
_FULL_HASH_BYTES = 2 << 30


def fingerprint(base_dir: str | Path, *, full_hash_bytes: int = _FULL_HASH_BYTES) -> str:
    """A content hash of a base checkpoint: the same bytes anywhere give the same value.

    What a training run's cache key uses for its base, instead of the directory's path: a
    copy of the same checkpoint reuses the run, a different checkpoint at the same path
    does not. Cached beside the files (``.cookbook-fingerprint.json``, keyed by sizes and
    modification times) so a 62 GB base is read once.
    """
    import hashlib

    base_dir = Path(base_dir)
    files = sorted(f for f in base_dir.iterdir() if f.is_file() and not f.name.startswith("."))
    if not any(f.suffix == ".safetensors" for f in files):
        raise FileNotFoundError(f"{base_dir} holds no .safetensors files: not a checkpoint directory")
    stat = [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in files]
    memo = base_dir / ".cookbook-fingerprint.json"
    if memo.is_file():
        with contextlib.suppress(ValueError, KeyError):
            cached = json.loads(memo.read_text())
            if cached["stat"] == stat and cached["whole_file_hash"] == (sum(s for _, s, _ in stat) <= full_hash_bytes):
                return cached["fingerprint"]
    whole = sum(s for _, s, _ in stat) <= full_hash_bytes
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.name}\0{f.stat().st_size}\0".encode())
        with f.open("rb") as fh:
            if whole:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
            else:
                h.update(fh.read(1 << 20))
                fh.seek(max(f.stat().st_size - (1 << 20), 0))
                h.update(fh.read())
    value = h.hexdigest()[:20]
    with contextlib.suppress(OSError):  # a read-only checkout still fingerprints
        memo.write_text(json.dumps({"stat": stat, "fingerprint": value, "whole_file_hash": whole}))
    return value


class BaseMismatchError(ValueError):
    """A run's LoRA meets a base checkpoint with other contents than the one it was trained on."""


def check_same_base(base_dir: str | Path, recorded: dict, *, what: str, fix: str) -> None:
    """Refuse ``base_dir`` unless its content is the base a run recorded it trained on.

    ``recorded`` is the run's recipe (``base_dir`` and ``base_fingerprint``). Compared by
    :func:`fingerprint`, so a copy of the same checkpoint elsewhere is accepted and other weights
    at the same path are not. A run recorded before fingerprints existed has only the path: that
    is left to the caller, as before.
    """
    want = recorded.get("base_fingerprint")
    if not want:
        return
    got = fingerprint(base_dir)
    if got != want:
        raise BaseMismatchError(
            f"{what} was trained on the base {recorded.get('base_dir')} (fingerprint {want}), but {base_dir} "
            f"holds other weights (fingerprint {got}); {fix}"
        )


def _build_record(p: models.ModelPreset, seed: int, num_shards: int) -> dict:
    return {"preset": p.name, "seed": seed, "num_shards": num_shards, "version": BASE_FORMAT_VERSION}


def build_random_base(preset: str | models.ModelPreset, out: str | Path, *, seed: int = 0, num_shards: int = 2) -> Path:
    """Build a random base checkpoint in the released layout, atomically.

    Written to a temporary sibling directory and renamed into place when complete, so an
    interrupted build never leaves a directory that looks finished.
    """
    import torch
    import transformers
    from transformers import GenerationConfig

    p = models.get_preset(preset)
    if num_shards < 2:
        raise ValueError(f"num_shards={num_shards}: use at least 2 so the sharded path is exercised")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        torch.manual_seed(seed)
        config = p.hf_config()
        with torch.device("cpu"):
            model = getattr(transformers, p.hf_architecture)(config).to(getattr(torch, p.dtype))
        _perturb_ones(model, seed)
        model.eval()
        total_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
        # transformers' size-based sharding; a little under total/num_shards per shard.
        shard_bytes = max(total_bytes // num_shards - 1, 1)
        model.save_pretrained(str(tmp), max_shard_size=shard_bytes, safe_serialization=True)
        GenerationConfig(
            bos_token_id=tokenizer.SPECIAL_TOKEN_IDS["<bos>"],
            eos_token_id=tokenizer.stop_token_ids(),
            pad_token_id=tokenizer.SPECIAL_TOKEN_IDS["<pad>"],
            do_sample=False,
        ).save_pretrained(str(tmp))
        tokenizer.save_tokenizer(tmp, vocab_size=p.vocab_size)
        if not (tmp / "model.safetensors.index.json").is_file():
            raise RuntimeError(f"expected a sharded checkpoint in {tmp}; transformers wrote one file")
        (tmp / _COMPLETE).write_text(json.dumps(_build_record(p, seed, num_shards)))
        if out.exists():
            out.rmdir()  # empty (checked by the caller); rename needs it gone
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _perturb_ones(model, seed: int) -> None:
    """Randomise norm scales, layer scalars and MoE router scales around their initial value.

    transformers initialises them to constants; a loader that mapped two norms onto each
    other (or dropped the router's input scale or per-expert scale) would then still agree
    with transformers. Small noise makes parity tests see it. The router scales exist on MoE
    presets only, so the dense presets' bases are unchanged.
    """
    import torch

    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
            if tensor.ndim <= 1 and tensor.is_floating_point() and _perturbed(name):
                tensor.add_(0.1 * torch.randn(tensor.shape, generator=gen, dtype=tensor.dtype))


def _perturbed(name: str) -> bool:
    return "norm" in name or "layer_scalar" in name or name.endswith(("router.scale", "router.per_expert_scale"))


class BaseDownloadError(RuntimeError):
    """A released checkpoint could not be downloaded; the message says what to do."""


def _download(p: models.ModelPreset, out: str | Path | None) -> Path:
    """Snapshot-download a released checkpoint (safetensors, configs, tokenizer only)."""
    try:
        from huggingface_hub import errors as hub_errors
        from huggingface_hub import snapshot_download
    except ImportError as e:  # pragma: no cover - transformers depends on it
        raise RuntimeError("huggingface_hub is needed to download real checkpoints") from e
    token = os.environ.get("HF_TOKEN") or _colab_secret("HF_TOKEN")
    try:
        path = snapshot_download(
            p.hf_checkpoint,
            local_dir=str(out) if out else None,
            allow_patterns=["*.safetensors", "*.json", "*.jinja", "tokenizer*"],
            token=token,
        )
    except hub_errors.GatedRepoError:
        raise BaseDownloadError(
            _download_advice(p, token, "the Hub refused this token access to the gated weights")
        ) from None
    except (hub_errors.RepositoryNotFoundError, hub_errors.RevisionNotFoundError):
        raise BaseDownloadError(
            _download_advice(
                p, token, "the Hub did not find it for this token (a missing or wrong token reads the same)"
            )
        ) from None
    except hub_errors.LocalEntryNotFoundError:
        raise BaseDownloadError(
            _download_advice(p, token, "this host cannot reach the Hub and has no downloaded copy")
        ) from None
    except (hub_errors.HfHubHTTPError, OSError) as e:
        raise BaseDownloadError(_download_advice(p, token, f"{type(e).__name__}")) from None
    return Path(path)


def _download_advice(p: models.ModelPreset, token: str | None, why: str) -> str:
    """What to do when a download failed. Names ``HF_TOKEN``, never its value."""
    has_token = "set" if token else "not set"
    return (
        f"cannot download {p.hf_checkpoint} for preset {p.name}: {why}. The Gemma weights are gated: "
        f"accept the Gemma licence at https://huggingface.co/{p.hf_checkpoint} with your Hugging Face "
        f"account, set HF_TOKEN to a read token of that account (HF_TOKEN is {has_token} here) and run "
        "this on a host that reaches huggingface.co; or, with a local copy of the checkpoint, skip "
        "this step and pass its directory as --base DIR (cookbook train / cookbook merge)"
    )


def _colab_secret(name: str) -> str | None:
    try:
        from google.colab import userdata  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        return userdata.get(name)
    except Exception:
        return None


def register_cli(sub) -> None:
    parser = sub.add_parser(
        "base",
        help="build (random presets) or download (real presets) a base checkpoint",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("--preset", default="tiny", choices=list(models.PRESETS))
    parser.add_argument("--out", default=None, help="directory (default: the cache)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-shards", type=int, default=2)
    parser.set_defaults(func=_cli)


@core.user_errors("base", BaseDownloadError)
def _cli(args) -> int:
    path = ensure_base(args.preset, seed=args.seed, out=args.out, num_shards=args.num_shards)
    print(path)
    return 0
