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

from cookbook.data._batching import (
    host_headroom,
    packing_efficiency,
    plot_batch_layout,
    resume_replays,
    sharded_batch,
)
from cookbook.data._cli import marked_tokens, plot_lengths
from cookbook.data._cli import register_cli as register_data_cli
from cookbook.data._config import DataConfig
from cookbook.data._examples import long_thought_rows
from cookbook.data._formats import FORMATS
from cookbook.data._pipeline import (
    make_train_iter,
    measure_throughput,
    model_inputs,
    segment_attention_mask,
    shard_batch,
)
from cookbook.data._rows import DataError, RowError, read_rows
from cookbook.data._sample_task import (
    THOUGHT_TEMPLATE,
    answer_budget,
    answer_of,
    clean_completion,
    exact_match,
    exact_match_rate,
    generate_rows,
    prompt_of,
    show_completions,
    thought_budget,
    thought_of,
    write_jsonl,
)
from cookbook.data._sections import (
    check_messy_rows,
    compare_sources,
    compare_too_long_policies,
    describe_loss_mask,
    inspect_formats,
    sample_task,
)
from cookbook.data._tokenize import (
    as_served,
    load_tokenizer,
    lost_content,
    prepare_examples,
    prompt_ids,
    prompt_text,
    split_turns,
    template_revision,
    tokenize_chat,
)

__all__ = [
    # the config
    "DataConfig",
    # notebook 05's steps, each a typed result
    "sample_task",
    "describe_loss_mask",
    "compare_sources",
    "check_messy_rows",
    "inspect_formats",
    "compare_too_long_policies",
    "packing_efficiency",
    "sharded_batch",
    "resume_replays",
    "host_headroom",
    "plot_batch_layout",
    "plot_lengths",
    "long_thought_rows",
    # reading rows in any common layout
    "FORMATS",
    "read_rows",
    # the chat template: tokens with answer-only loss masks, prompts as served
    "load_tokenizer",
    "tokenize_chat",
    "prepare_examples",
    "prompt_ids",
    "prompt_text",
    "as_served",
    "lost_content",
    "split_turns",
    "template_revision",
    "marked_tokens",
    # batches: sharded global arrays, Tunix's loss inputs, throughput
    "make_train_iter",
    "shard_batch",
    "model_inputs",
    "segment_attention_mask",
    "measure_throughput",
    # the built-in Verilog sample task and its scoring
    "THOUGHT_TEMPLATE",
    "generate_rows",
    "write_jsonl",
    "prompt_of",
    "answer_of",
    "thought_of",
    "answer_budget",
    "thought_budget",
    "clean_completion",
    "exact_match",
    "exact_match_rate",
    "show_completions",
    # the command line (cookbook data)
    "register_data_cli",
    # errors: too many bad rows to train on (the run stops), one row the template cannot train on
    "DataError",
    "RowError",
]
