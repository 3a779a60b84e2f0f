"""train_gpu.py: LoRA SFT of Gemma 4 on GPUs with TRL + PEFT + accelerate FSDP, same objective as the TPU run.

This file is copied verbatim next to ``sft_config.json``, ``lora_config.json``, ``recipe.json`` and
``fsdp_config.yaml`` by ``cookbook.gpu.write_gpu_recipe``. It imports nothing from the cookbook (a GPU host
needs only torch, transformers, trl, peft, accelerate and datasets), so the configs next to it are the whole recipe:

    accelerate launch --config_file fsdp_config.yaml train_gpu.py \\
        --model google/gemma-4-31B-it --data train.jsonl --eval-data eval.jsonl --out run/

What makes the objective the TPU run's (Tunix ``PeftTrainer`` + Qwix LoRA), not TRL's defaults, and why:

* Loss on what the model writes, with the checkpoint's own Gemma 4 chat template (its
  tools declared, thinking on when a turn has a thought). A token is trained on when it
  lies in a model turn: the thought channel, the answer, tool calls and its closing
  ``<turn|>``; never a tool response's body, a user or a system turn; the newline the
  template writes after ``<turn|>`` is not (TRL's prompt-completion path would train on
  it). Rows in every layout the TPU pipeline reads are normalised as it normalises them (``<think>...</think>``
  answers become the thought channel). TRL 1.x's ``assistant_only_loss`` needs ``{% generation %}`` markers,
  which Gemma 4's template lacks, so rows are tokenised here: ``input_ids`` + ``completion_mask`` and
  ``completion_only_loss=True``.
* Loss normalisation across gradient accumulation (``recipe.json``): Tunix accumulates
  with ``optax.MultiSteps`` (the mean of micro-batch token means); transformers weighs
  every answer token of the step equally. ``per_micro_batch`` switches transformers to
  the former (each GPU micro-batch then holds exactly one TPU micro-batch).
* LoRA parameterisation: Qwix puts ONE LoRA on Tunix's stacked ``kv_einsum``, so K and V share ``lora_A``;
  PEFT gives ``k_proj`` and ``v_proj`` one each. ``tie_kv_lora_a`` makes them one parameter. On K = V
  global layers there is no ``v_proj``: the ``k_proj`` LoRA adapts V too, in transformers as in Tunix.
* LoRA A initialisation: Qwix draws A with He-uniform (bound sqrt(6 / fan_in)); PEFT's default is Kaiming-uniform with a = sqrt(5) (2.45x narrower). Redrawn here.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ANSWER_ROLES = ("assistant", "model")


def load_recipe(recipe_dir: str | Path = HERE) -> dict[str, Any]:
    """The recipe written next to this script: ``{"sft", "lora", "recipe"}`` dicts."""
    d = Path(recipe_dir)
    missing = [n for n in ("sft_config.json", "lora_config.json", "recipe.json") if not (d / n).is_file()]
    if missing:
        raise FileNotFoundError(f"{d} lacks {missing}; write the recipe with cookbook.gpu.write_gpu_recipe(DIR)")
    return {
        "sft": json.loads((d / "sft_config.json").read_text()),
        "lora": json.loads((d / "lora_config.json").read_text()),
        "recipe": json.loads((d / "recipe.json").read_text()),
    }


# ----------------------------------------------------------------------------------------
# Data: the TPU pipeline's tokenisation and loss mask (cookbook.data.tokenize_chat), restated


THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
MODEL_TURN, TURN_END = "<|turn>model\n", "<turn|>"
TOOL_RESPONSE_START, TOOL_RESPONSE_END = "<|tool_response>", "<tool_response|>"
SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "model": "assistant",
    "system": "system",
}


def split_think(text: str) -> tuple[str | None, str]:
    """A ``<think>...</think>`` prefix (DeepSeek-R1's layout) -> ``(thought, answer)``."""
    stripped = text.lstrip()
    if stripped.startswith(THINK_OPEN):
        if THINK_CLOSE not in stripped:
            raise ValueError(f"the answer opens {THINK_OPEN} but never closes it")
        thought, _, answer = stripped[len(THINK_OPEN) :].partition(THINK_CLOSE)
    elif THINK_CLOSE in stripped and THINK_OPEN not in stripped:
        thought, _, answer = stripped.partition(THINK_CLOSE)
    else:
        return None, text
    return thought.strip() or None, answer.strip()


def _raw_messages(row: dict, columns: dict[str, str] | None) -> list[dict]:
    if columns or ("prompt" in row and "response" in row) or ("instruction" in row and "output" in row):
        if columns is None and "instruction" in row:
            prompt = row["instruction"] + (f"\n\n{row['input']}" if row.get("input") else "")
            cols, row = {"system": "system", "prompt": "_p", "response": "output"}, {**row, "_p": prompt}
        else:
            cols = columns or {"system": "system", "prompt": "prompt", "response": "response"}
        system = row.get(cols.get("system", ""))
        head = [{"role": "system", "content": system}] if system else []
        return [
            *head,
            {"role": "user", "content": row[cols["prompt"]]},
            {"role": "assistant", "content": row[cols["response"]]},
        ]
    if "messages" in row:
        return row["messages"]
    if "conversations" in row:
        head = [{"role": "system", "content": row["system"]}] if row.get("system") else []
        return head + [{"role": SHAREGPT_ROLES[t["from"].lower()], "content": t["value"]} for t in row["conversations"]]
    prompt, completion = row.get("prompt"), row.get("completion")
    if isinstance(prompt, str) and isinstance(completion, str):
        return [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}]
    if isinstance(prompt, list) and isinstance(completion, list):
        return [*prompt, *completion]
    raise ValueError(
        f"needs 'messages', 'conversations', 'prompt' + 'completion'/'response' or "
        f"'instruction' + 'output' (has {sorted(row)})"
    )


def row_conversation(row: dict, row_number: int, columns: dict[str, str] | None = None) -> dict[str, Any]:
    """``{"messages", "tools"}`` of a row in any layout the TPU pipeline reads (OpenAI/TRL
    messages with thinking and tools, prompt/completion, CodeV-R1 or named columns, alpaca,
    ShareGPT), normalised as it normalises them; raises naming the row."""
    try:
        messages, calls, answered = [], [], 0
        for m in _raw_messages(row, columns):
            role = {"model": "assistant", "developer": "system"}.get(m["role"], m["role"])
            msg = {"role": role, "content": m.get("content") if m.get("content") is not None else ""}
            if role == "tool":
                if not isinstance(msg["content"], str):
                    msg["content"] = json.dumps(msg["content"], ensure_ascii=False)
                if m.get("tool_call_id") is not None:
                    msg["tool_call_id"] = str(m["tool_call_id"])
                    msg["name"] = next(c["function"]["name"] for c in calls if c.get("id") == msg["tool_call_id"])
                else:
                    msg["name"] = m.get("name") or calls[answered]["function"]["name"]
                answered += 1
            elif role == "assistant":
                thought = m.get("reasoning_content", m.get("reasoning"))
                if thought is None:
                    thought, answer = split_think(msg["content"])
                    msg["content"] = answer if thought is not None else msg["content"]
                if thought and thought.strip():
                    msg["reasoning_content"] = thought
                if m.get("tool_calls"):
                    calls, answered = [], 0
                    for c in m["tool_calls"]:
                        f = c.get("function", c)
                        args = f.get("arguments")
                        args = (json.loads(args) if args.strip() else {}) if isinstance(args, str) else args
                        calls.append(
                            {
                                "type": "function",
                                "function": {"name": f["name"], "arguments": args or {}},
                                **({"id": str(c["id"])} if c.get("id") is not None else {}),
                            }
                        )
                    msg["tool_calls"] = calls
            messages.append(msg)
        tools = row.get("tools")
        tools = json.loads(tools) if isinstance(tools, str) and tools.strip() else tools
        tools = [{"type": "function", "function": t.get("function", t)} for t in tools] if tools else None
    except (KeyError, TypeError, AttributeError, StopIteration, ValueError, IndexError) as e:
        raise ValueError(
            f"row {row_number}: cannot be read ({type(e).__name__}: {e}); `cookbook data --data FILE` names the problem"
        ) from None
    if not messages or messages[-1]["role"] not in ANSWER_ROLES:
        raise ValueError(f"row {row_number}: the conversation must end with an assistant answer")
    return {"messages": messages, "tools": tools}


def trained_spans(text: str) -> list[tuple[int, int]]:
    """Characters the loss covers: each model turn after ``<|turn>model\\n`` through its
    ``<turn|>`` (thought, answer, tool calls and the ``<|tool_response>`` that ends a call),
    never a tool response's body, a user or a system turn."""
    spans, pos = [], 0
    while (start := text.find(MODEL_TURN, pos)) >= 0:
        start += len(MODEL_TURN)
        close = text.find(TURN_END, start)
        end = len(text) if close < 0 else close + len(TURN_END)
        cursor = start
        while (resp := text.find(TOOL_RESPONSE_START, cursor, end)) >= 0:
            spans.append((cursor, resp + len(TOOL_RESPONSE_START)))
            body_end = text.find(TOOL_RESPONSE_END, resp, end)
            cursor = end if body_end < 0 else body_end + len(TOOL_RESPONSE_END)
        if cursor < end:
            spans.append((cursor, end))
        pos = end
    return [(a, b) for a, b in spans if b > a]


def lost_content(messages: list[dict[str, Any]], text: str) -> list[str]:
    """What of the conversation its rendering does not hold (texts, thoughts, tool-call names and
    string arguments, tool responses), as ``cookbook.data.lost_content`` finds it: Gemma 4's
    template revisions 1-4 render no thought, revision 5 none before the last user turn."""

    def strings(v: Any) -> list[str]:
        if isinstance(v, str):
            return [v]
        if isinstance(v, dict):
            return [s for x in v.values() for s in strings(x)]
        return [s for x in v for s in strings(x)] if isinstance(v, list) else []

    lost = []
    for i, m in enumerate(messages):
        parts = [("text", s) for s in strings(m.get("content"))]
        parts += [("thought", m["reasoning_content"])] if m.get("reasoning_content") else []
        for c in m.get("tool_calls") or ():
            parts += [("tool call", c["function"]["name"])]
            parts += [("tool call argument", s) for s in strings(c["function"].get("arguments"))]
        lost += [f"message {i} ({m['role']}) {what}" for what, s in parts if s.strip() and s.strip() not in text]
    return list(dict.fromkeys(lost))


def tokenize_row(tokenizer, conversation: dict[str, Any]) -> dict[str, list[int]]:
    """Token ids of the rendered conversation (its tools declared, thinking on when a turn
    has a thought) and a 0/1 mask of the tokens trained on. A conversation the checkpoint's
    template renders without some of its content is refused (ValueError), as the TPU pipeline
    refuses it: training would drop that part in silence."""
    messages = conversation["messages"]
    thinking = any(m.get("reasoning_content") for m in messages)
    kwargs = {"tools": conversation.get("tools"), "enable_thinking": thinking, "tokenize": False}
    full = tokenizer.apply_chat_template(messages, add_generation_prompt=False, **kwargs)
    lost = lost_content(messages, full)
    if lost:
        raise ValueError(
            f"the chat template renders no {'; '.join(lost)}: it would be lost in silence "
            "(`cookbook data --data FILE` names the row and the fix)"
        )
    spans = trained_spans(full)
    # The last answer follows the whole generation prompt a server sends: 12B/26B/31B templates
    # add an empty thought block to it with thinking off, untrained (cookbook.data.as_served).
    last_prompt = max((i for i, m in enumerate(messages) if m["role"] != "assistant"), default=-1)
    if 0 <= last_prompt < len(messages) - 1 and messages[last_prompt]["role"] != "tool":
        served = tokenizer.apply_chat_template(messages[: last_prompt + 1], add_generation_prompt=True, **kwargs)
        at = served.rfind(MODEL_TURN) + len(MODEL_TURN)
        if not full.startswith(served):
            if at < len(MODEL_TURN) or not full.startswith(served[:at]):
                raise ValueError("the chat template's generation prompt is not where the row's answer starts")
            full = full[:at] + served[at:] + full[at:]
            spans = [(a + len(served) - at, b + len(served) - at) if a >= at else (a, b) for a, b in spans]
    enc = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    mask = [int(any(s < end and e > start for start, end in spans)) for s, e in enc["offset_mapping"]]
    return {"input_ids": list(enc["input_ids"]), "completion_mask": mask}


def read_rows(path: str | Path) -> list[dict]:
    """Rows of a JSONL or Parquet file."""
    path = Path(path)
    if path.suffix == ".parquet":
        import datasets

        return list(datasets.Dataset.from_parquet(str(path)))
    rows = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path} line {n}: invalid JSON ({e.msg})") from None
    return rows


def build_dataset(tokenizer, rows: list[dict], max_length: int | None, too_long: str = "drop"):
    """A tokenised ``datasets.Dataset``. Rows longer than ``max_length`` are dropped (and
    counted) or cut to their first ``max_length`` tokens, per the TPU pipeline's policy."""
    import datasets

    if too_long not in ("drop", "truncate"):
        raise ValueError(f"too_long={too_long!r}: use 'drop' or 'truncate'")
    out, over = [], 0
    for n, row in enumerate(rows, 1):
        ex = tokenize_row(tokenizer, row_conversation(row, n))
        if max_length is not None and len(ex["input_ids"]) > max_length:
            over += 1
            if too_long == "drop":
                continue
            ex = {k: v[:max_length] for k, v in ex.items()}
        out.append(ex)
    if over:
        what = "dropped" if too_long == "drop" else "truncated"
        print(f"train_gpu: {what} {over} of {len(rows)} rows longer than {max_length} tokens")
    if not out:
        raise ValueError(f"no usable rows (of {len(rows)}); is max_length={max_length} too short?")
    return datasets.Dataset.from_list(out)


# ----------------------------------------------------------------------------------------
# LoRA: Qwix's parameterisation and initialisation in PEFT


def _lora_modules(model) -> dict[str, Any]:
    return {n: m for n, m in model.named_modules() if hasattr(m, "lora_A") and "default" in m.lora_A}


def init_lora_a_he_uniform(model, seed: int) -> None:
    """Redraw every ``lora_A`` from He-uniform over its fan-in, as Qwix does (B stays 0)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, module in sorted(_lora_modules(model).items()):
            w = module.lora_A["default"].weight
            bound = math.sqrt(6.0 / w.shape[1])
            w.copy_((torch.rand(w.shape, generator=gen, dtype=torch.float32) * 2 - 1) * bound)


def tie_kv_lora_a(model) -> int:
    """Make ``v_proj``'s ``lora_A`` the very parameter of ``k_proj``'s in each layer that has
    both (Tunix's ``kv_einsum`` LoRA has one A for K and V). Returns the number tied."""
    modules = _lora_modules(model)
    tied = 0
    for name, module in modules.items():
        if not name.endswith("self_attn.k_proj"):
            continue
        v = modules.get(name[: -len("k_proj")] + "v_proj")
        if v is not None:
            v.lora_A["default"].weight = module.lora_A["default"].weight
            tied += 1
    return tied


def apply_lora(model, lora_kwargs: dict, recipe: dict, seed: int):
    """PEFT LoRA on ``model`` with Qwix's A initialisation and K/V sharing."""
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(model, LoraConfig(**lora_kwargs))
    n = len(_lora_modules(peft_model))
    if n == 0:
        raise ValueError(f"target_modules {lora_kwargs['target_modules']!r} matched no module of the model")
    if recipe.get("lora_a_init") == "he_uniform":
        init_lora_a_he_uniform(peft_model, seed)
    if recipe.get("tie_kv_lora_a", True):
        tie_kv_lora_a(peft_model)
    return peft_model


# ----------------------------------------------------------------------------------------
# Trainer


def load_base_model(model_path: str, recipe: dict[str, Any]):
    """The base checkpoint in the recipe's dtype, quantized by bitsandbytes for a QLoRA recipe."""
    import torch
    from transformers import AutoModelForCausalLM

    dtype = getattr(torch, recipe.get("model_dtype", "bfloat16"))
    extra = {}
    if recipe.get("quantization"):  # QLoRA: the base loaded quantized by bitsandbytes
        try:
            import bitsandbytes  # noqa: F401
        except ImportError:
            raise SystemExit(
                "this recipe is QLoRA (recipe.json 'quantization'): pip install bitsandbytes on the GPU host"
            ) from None
        from transformers import BitsAndBytesConfig

        q = dict(recipe["quantization"])
        for key in ("bnb_4bit_compute_dtype", "bnb_4bit_quant_storage"):
            if key in q:
                q[key] = getattr(torch, q[key])
        extra["quantization_config"] = BitsAndBytesConfig(**q)
    return AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype, **extra)


def build_trainer(
    *,
    model_path: str,
    train_rows: list[dict],
    output_dir: str | Path,
    eval_rows: list[dict] | None = None,
    recipe_dir: str | Path = HERE,
    sft_overrides: dict[str, Any] | None = None,
    model=None,
):
    """An ``SFTTrainer`` set up with the recipe's objective.

    Args:
      model_path: Hub id or local directory of the base checkpoint (and its tokenizer).
      train_rows / eval_rows: chat rows (``messages``) or prompt/completion rows.
      output_dir: where TRL writes checkpoints, logs and the adapter.
      sft_overrides: changes to ``sft_config.json`` (e.g. ``{"bf16": False}`` on CPU).
      model: an already-loaded base model (otherwise loaded from ``model_path``).
    """
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    cfg = load_recipe(recipe_dir)
    recipe = cfg["recipe"]
    sft = {**cfg["sft"], **(sft_overrides or {}), "output_dir": str(output_dir)}
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if model is None:
        model = load_base_model(model_path, recipe)
    model = apply_lora(model, cfg["lora"], recipe, seed=int(sft.get("seed", 0)))
    max_length, too_long = sft.get("max_length"), recipe.get("too_long", "drop")
    if not eval_rows:
        sft["eval_strategy"] = "no"
    args = SFTConfig(**sft)
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=build_dataset(tokenizer, train_rows, max_length, too_long),
        eval_dataset=build_dataset(tokenizer, eval_rows, max_length, too_long) if eval_rows else None,
        processing_class=tokenizer,
    )
    if recipe["loss_normalisation"] == "per_micro_batch":
        # Each micro-batch's loss is its own token mean, averaged over the accumulation
        # steps and ranks: optax.MultiSteps' objective. (transformers otherwise divides by
        # the answer tokens of the whole step.)
        trainer.model_accepts_loss_kwargs = False
    elif recipe["loss_normalisation"] != "tokens_in_step":
        raise ValueError(f"unknown loss_normalisation {recipe['loss_normalisation']!r}")
    return trainer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="base checkpoint (default: recipe.json base_model)")
    parser.add_argument("--data", required=True, help="training rows, JSONL or Parquet")
    parser.add_argument("--eval-data", default=None, help="held-out rows for the eval loss")
    parser.add_argument("--out", default=None, help="output directory (default: sft_config.json output_dir)")
    parser.add_argument("--recipe-dir", default=str(HERE), help="directory holding the recipe JSON files")
    args = parser.parse_args(argv)
    cfg = load_recipe(args.recipe_dir)
    model_path = args.model or cfg["recipe"].get("base_model")
    if not model_path:
        parser.error("--model is required (recipe.json names no base_model)")
    trainer = build_trainer(
        model_path=model_path,
        train_rows=read_rows(args.data),
        eval_rows=read_rows(args.eval_data) if args.eval_data else None,
        output_dir=args.out or cfg["sft"].get("output_dir", "gemma4-lora-gpu"),
        recipe_dir=args.recipe_dir,
    )
    trainer.train()
    trainer.save_model()
    return 0


if __name__ == "__main__":
    sys.exit(main())


# fmt: off
__all__ = [
    "apply_lora", "build_dataset", "build_trainer", "init_lora_a_he_uniform", "load_base_model", "load_recipe", "lost_content",
    "read_rows", "row_conversation", "split_think", "trained_spans", "tie_kv_lora_a", "tokenize_row",
]
# fmt: on
