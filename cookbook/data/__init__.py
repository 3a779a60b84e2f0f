"""Stage 05: rows to chat-templated tokens with answer-only loss masks, packing, batches; the sample task.

Rows in any common layout (OpenAI/TRL messages with thinking and tools, prompt/completion,
ShareGPT, alpaca or named columns such as the paper's CodeV-R1 set: ``_formats``) are read
and checked (``_rows``), rendered with the tokenizer's own Gemma 4 chat
template with the loss on the answer only (``_tokenize``), and batched with static shapes,
padded or packed, by Grain, each JAX process reading its own slice, into global arrays
sharded on the mesh's data axis (``_pipeline``). A batch is Tunix ``TrainingInput``'s
``input_tokens`` and ``input_mask`` plus ``positions`` and ``segment_ids``;
:func:`model_inputs` turns it into the arguments of Tunix's loss. The built-in Verilog
sample task is ``_sample_task``; notebook 05's sections, one call each with a typed result, are
``_sections`` (the task, reading, bad rows, formats, the too-long policy) and ``_batching``
(padding or packing, sharded batches and resume, the host's headroom).
"""

from cookbook.data._batching import (  # noqa: F401
    host_headroom,
    packing_efficiency,
    plot_batch_layout,
    resume_replays,
    sharded_batch,
)
from cookbook.data._cli import format_view, inspect, marked, marked_tokens, plot_lengths  # noqa: F401
from cookbook.data._cli import register_cli as register_data_cli  # noqa: F401
from cookbook.data._config import BATCH_FIELDS, DataConfig  # noqa: F401
from cookbook.data._examples import format_example_checks, format_examples, long_thought_rows  # noqa: F401
from cookbook.data._formats import FORMATS, parse_columns  # noqa: F401
from cookbook.data._pipeline import (  # noqa: F401
    check_process_split,
    iter_batches,
    make_train_iter,
    measure_throughput,
    model_inputs,
    real_token_fraction,
    segment_attention_mask,
    shard_batch,
)
from cookbook.data._rows import (  # noqa: F401
    DataError,
    RowError,
    read_rows,
    to_conversation,
)
from cookbook.data._sample_task import (  # noqa: F401
    OPERATION_NOUNS,
    OPERATIONS,
    THOUGHT_TEMPLATE,
    answer_budget,
    answer_of,
    clean_completion,
    exact_match,
    exact_match_rate,
    generate_rows,
    make_row,
    module_names,
    prompt_of,
    show_completions,
    thought_budget,
    thought_of,
    write_jsonl,
    write_messy_jsonl,
)
from cookbook.data._sections import (  # noqa: F401
    check_messy_rows,
    compare_sources,
    compare_too_long_policies,
    describe_loss_mask,
    inspect_formats,
    sample_task,
)
from cookbook.data._tokenize import (  # noqa: F401
    Example,
    as_served,
    load_tokenizer,
    lost_content,
    prepare_examples,
    prompt_ids,
    prompt_text,
    render,
    split_turns,
    template_revision,
    tokenize_chat,
    trained_spans,
)
