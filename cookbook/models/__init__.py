"""Stage 00: Gemma 4 presets, the tokenizer, base checkpoints, the Tunix loader and parity checks."""

from cookbook.models._architecture import HF_ARCHITECTURES, ModelPreset  # noqa: F401
from cookbook.models._base import (  # noqa: F401
    BaseDownloadError,
    BaseMismatchError,
    check_same_base,
    default_base_dir,
    ensure_base,
    fingerprint,
    is_complete,
)
from cookbook.models._base import register_cli as register_base_cli  # noqa: E402, F401, I001
from cookbook.models._knobs import (  # noqa: F401
    REMAT_CHOICES,
    get_remat_choice,
    remat_policy,
    set_flash_attention,
    set_remat,
    tunix_configs,
)
from cookbook.models._loader import (  # noqa: F401
    abstract_model,
    check_checkpoint_matches,
    check_kv_sharing_matches,
    expected_hf_shapes,
    load_tunix_model,
    map_checkpoint_shapes,
    read_checkpoint_index,
    text_prefix,
    tunix_param_shapes,
    unused_kv_params,
)
from cookbook.models._parity import (  # noqa: F401
    logit_parity,
    make_sampler,
    random_text_tokens,
    sample_prompts,
    transformers_logits,
    tunix_logits,
)
from cookbook.models._presets import (  # noqa: F401
    PRESETS,
    gemma4_31b,
    get_preset,
    small,
    tiny,
    tiny_26b_a4b,
    tiny_e2b,
)
from cookbook.models._quickstart import ParityError, check_parity, checkpoint_files, compare_presets, sample_chat  # noqa: F401
from cookbook.models._tokenizer import (  # noqa: F401
    CHAT_TEMPLATE,
    CHAT_TEMPLATE_FILE,
    SPECIAL_TOKEN_IDS,
    SPECIAL_TOKENS,
    save_tokenizer,
    stop_token_ids,
)
