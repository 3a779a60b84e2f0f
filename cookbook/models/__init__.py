"""Stage 00: Gemma 4 presets, the tokenizer, base checkpoints, the Tunix loader and parity checks.

``_architecture`` holds one decoder's architecture (:class:`ModelPreset`) and both frameworks'
configs from it; ``_presets`` names the released checkpoints and the CPU-sized random models;
``_base`` fetches or builds a base checkpoint and fingerprints it; ``_loader`` loads it into
Tunix's Gemma 4 on a mesh; ``_knobs`` switches remat and flash attention on a built model;
``_parity`` compares Tunix's logits with transformers' and samples; ``_tokenizer`` is the small
offline tokenizer with Gemma 4's special tokens and chat template; ``_quickstart`` holds notebook
00's steps as typed results.
"""

from cookbook.models._architecture import HF_ARCHITECTURES, ModelPreset
from cookbook.models._base import (
    BaseDownloadError,
    BaseMismatchError,
    check_same_base,
    ensure_base,
    fingerprint,
    is_complete,
)
from cookbook.models._base import register_cli as register_base_cli
from cookbook.models._knobs import (
    REMAT_CHOICES,
    get_remat_choice,
    remat_policy,
    set_flash_attention,
    set_remat,
    tunix_configs,
)
from cookbook.models._loader import (
    abstract_model,
    check_checkpoint_matches,
    load_tunix_model,
    map_checkpoint_shapes,
    read_checkpoint_index,
)
from cookbook.models._parity import logit_parity, make_sampler, sample_prompts, tunix_logits
from cookbook.models._presets import PRESETS, gemma4_31b, get_preset
from cookbook.models._quickstart import ParityError, check_parity, checkpoint_files, compare_presets, sample_chat
from cookbook.models._tokenizer import CHAT_TEMPLATE_FILE, SPECIAL_TOKEN_IDS, SPECIAL_TOKENS, stop_token_ids

__all__ = [
    # the presets: the released checkpoints and the CPU-sized random models, by name
    "PRESETS",
    "get_preset",
    "gemma4_31b",
    "ModelPreset",
    "HF_ARCHITECTURES",
    "tunix_configs",
    # notebook 00's steps, each a typed result
    "checkpoint_files",
    "compare_presets",
    "check_parity",
    "sample_chat",
    # the base checkpoint: fetched or built once, fingerprinted, checked against a run's
    "ensure_base",
    "is_complete",
    "fingerprint",
    "check_same_base",
    # a Hugging Face checkpoint loaded into Tunix's Gemma 4, sharded on a mesh
    "load_tunix_model",
    "abstract_model",
    "read_checkpoint_index",
    "map_checkpoint_shapes",
    "check_checkpoint_matches",
    # switches on a built model: rematerialisation and flash attention
    "REMAT_CHOICES",
    "set_remat",
    "get_remat_choice",
    "remat_policy",
    "set_flash_attention",
    # logits against transformers' and greedy sampling
    "logit_parity",
    "tunix_logits",
    "make_sampler",
    "sample_prompts",
    # the tokenizer: Gemma 4's chat template (the file data's errors point to), the special tokens
    "CHAT_TEMPLATE_FILE",
    "SPECIAL_TOKENS",
    "SPECIAL_TOKEN_IDS",
    "stop_token_ids",
    # the command line (cookbook base)
    "register_base_cli",
    # errors: a base that is not the run's, a download that failed, logits outside the bound
    "BaseMismatchError",
    "BaseDownloadError",
    "ParityError",
]
