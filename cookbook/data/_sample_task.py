"""The cookbook's sample task: generated, deterministic Verilog instructions in chat format.

The paper fine-tuned Gemma 4 31B on Verilog code generation (CodeV-R1). The cookbook keeps
that spirit with a data set that ships inside the package and needs no download: each row
asks for a small combinational module and the answer is the module.

    user:  Write a Verilog module named alu_sum that xors two 8-bit inputs.
    model: module alu_sum(input [7:0] a, b, output [7:0] y);
             assign y = a ^ b;
           endmodule

Why it looks like this. The tiny CPU preset is a *random* base model, so LoRA has to learn
the whole task from scratch in a couple of CPU minutes, and the result must be judged on
prompts it never saw. Every choice below serves that:

* Held-out module names. Eval rows use module names that never occur in training, so
  exact match measures *copying the name from the prompt* (what a real model does), not
  memorising rows. A name is ``<prefix>_<suffix>`` with both pieces from fixed lists of
  16 words that the cookbook tokenizer encodes as ONE token each: copying a name is then
  copying two tokens, which a 6-layer model learns much faster than copying a
  variable-length sequence of sub-word pieces (the earlier trial task in ``docs/results.md``
  used 1-3 pieces of arbitrary split and spent most of its 1,000 steps there).
  Held-out names are a Latin-square slice of the 16 x 16 grid (2 per prefix, 2 per
  suffix), so every piece is seen in training in its position; only the pairing is new.
* Few, clean knobs: 6 operators x 8 widths, one prompt template. The width appears as
  ``N-bit`` in the prompt and ``[N-1:0]`` in the answer (a lookup the MLP learns fast).
* Short: prompt and answer render to ~60 tokens with the Gemma 4 chat template, so one
  example fits the tiny preset's 64-token sliding window (as a real 31B prompt fits its
  1,024 window) and a batch of 16 x 64 tokens trains quickly on CPU. Packing several
  examples per row is the data pipeline's job (``cookbook.data``).
* Exact match is the metric: the answer is fully determined by the prompt, so a
  completion is right or wrong with no judge; the untrained base scores ~0%.

Measured while designing it (a throwaway loop: Tunix + Qwix LoRA rank 32 / alpha 64 on all
seven projections of the random tiny base, AdamW lr 3e-3 with 50 warm-up steps then cosine,
batches of 16 padded 64-token rows): held-out exact match 62% after only 100 steps, training
loss 0.11 at step 150; the earlier trial task (``docs/results.md``) needed ~500 steps for 66%. The
training recipe itself belongs to ``cookbook.train``.

The thinking variant (``generate_rows(..., thinking=True)``) gives each answer a short thought
first, in ``reasoning_content`` (what Gemma 4's template renders in its thought channel,
``<|channel>thought\n...\n<channel|>``, with ``<|think|>`` in a system turn), then the same
module. The thought is one sentence derived from the row's own spec (name, width, operation),
so it is deterministic and checkable::

    model: <|channel>thought
           alu_sum: 8-bit xor, so [7:0] and y = a ^ b.
           <channel|>module alu_sum(...

A completion is judged on its answer only: :func:`clean_completion` drops the thought
(Gemma 4's channel, or a ``<think>...</think>`` prefix), so a module written inside the thought
never counts.

Everything is a pure function of ``(split, n, seed, thinking)``: no files, no randomness from
the environment, so notebooks, tests and servers all see the same rows.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# One-token words (in the cookbook tokenizer, with a leading space) for module names.
NAME_PREFIXES: tuple[str, ...] = (
    "alu", "top", "core", "unit", "block", "data", "addr", "valid",
    "ready", "enable", "load", "store", "read", "write", "value", "state",
)  # fmt: skip
NAME_SUFFIXES: tuple[str, ...] = (
    "sum", "diff", "prod", "counter", "adder", "register", "mux", "decoder",
    "encoder", "shifter", "comparator", "parity", "gray", "binary", "fsm", "reg",
)  # fmt: skip
# verb in the prompt -> Verilog operator in the answer
OPERATIONS: dict[str, str] = {
    "adds": "+",
    "subtracts": "-",
    "multiplies": "*",
    "ands": "&",
    "ors": "|",
    "xors": "^",
}
WIDTHS: tuple[int, ...] = (2, 4, 8, 12, 16, 24, 32, 64)

PROMPT_TEMPLATE = "Write a Verilog module named {name} that {verb} two {width}-bit inputs."
ANSWER_TEMPLATE = "module {name}(input [{msb}:0] a, b, output [{msb}:0] y);\n  assign y = a {op} b;\nendmodule"

# The thinking variant's thought: the width and the operation, spelled out before the module.
THOUGHT_TEMPLATE = "{name}: {width}-bit {noun}, so [{msb}:0] and y = a {op} b."
OPERATION_NOUNS: dict[str, str] = {
    "adds": "sum",
    "subtracts": "difference",
    "multiplies": "product",
    "ands": "and",
    "ors": "or",
    "xors": "xor",
}

SPLITS = ("train", "eval")
DEFAULT_SIZES = {"train": 3000, "eval": 200}
# Markers a completion may end with, depending on how it was decoded (raw ids, vLLM with
# or without skip_special_tokens): everything from the first one on is not the answer.
_END_MARKERS = ("<turn|>", "<eos>", "<|turn>")
# A thought before the answer: Gemma 4's thought channel, or DeepSeek-R1's tags (CodeV-R1).
_THOUGHT_SPANS = (("<|channel>", "<channel|>"), ("<think>", "</think>"))


def is_eval_name(prefix_index: int, suffix_index: int) -> bool:
    """Whether the name (prefix, suffix) is held out for evaluation.

    A Latin-square slice: 32 of the 256 names, two per prefix and two per suffix, so the
    model sees every piece in training but never these pairings.
    """
    return (prefix_index + 3 * suffix_index) % 8 == 0


def module_names(split: str) -> list[str]:
    """All module names of a split, in a fixed order."""
    _check_split(split)
    want_eval = split == "eval"
    return [
        f"{p}_{s}"
        for i, p in enumerate(NAME_PREFIXES)
        for j, s in enumerate(NAME_SUFFIXES)
        if is_eval_name(i, j) == want_eval
    ]


def make_row(name: str, verb: str, width: int, *, thinking: bool = False) -> dict[str, Any]:
    """One chat row: the instruction and its reference module (after a thought, with ``thinking``)."""
    if verb not in OPERATIONS:
        raise ValueError(f"unknown operation {verb!r}; choose one of {sorted(OPERATIONS)}")
    if width < 1:
        raise ValueError(f"width must be >= 1 bit, got {width}")
    prompt = PROMPT_TEMPLATE.format(name=name, verb=verb, width=width)
    answer: dict[str, Any] = {
        "role": "assistant",
        "content": ANSWER_TEMPLATE.format(name=name, msb=width - 1, op=OPERATIONS[verb]),
    }
    if thinking:
        answer["reasoning_content"] = thought_for(name, verb, width)
    return {"messages": [{"role": "user", "content": prompt}, answer]}


def thought_for(name: str, verb: str, width: int) -> str:
    """The thinking variant's thought for a module's spec (one sentence)."""
    return THOUGHT_TEMPLATE.format(
        name=name, width=width, msb=width - 1, noun=OPERATION_NOUNS[verb], op=OPERATIONS[verb]
    )


def generate_rows(split: str = "train", *, n: int | None = None, seed: int = 0, thinking: bool = False) -> list[dict]:
    """Deterministic rows of the sample task in chat ``messages`` format.

    Args:
      split: ``"train"`` (names from the training grid) or ``"eval"`` (held-out names).
      n: how many rows (default 3,000 train, 200 eval). Rows are distinct while ``n`` is at
        most the number of (name, operation, width) combinations (10,752 train, 1,536 eval);
        beyond that they repeat in a new shuffled order.
      seed: shuffles which combinations are drawn and their order.
      thinking: the thinking variant: each answer carries a thought (:func:`thought_for`) in
        ``reasoning_content``; the same prompts and modules, in the same order.

    Returns:
      ``[{"messages": [{"role": "user", ...}, {"role": "assistant", ...}]}, ...]``.
    """
    _check_split(split)
    n = DEFAULT_SIZES[split] if n is None else n
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    combos = [(name, verb, w) for name in module_names(split) for verb in OPERATIONS for w in WIDTHS]
    # A split-specific stream, so eval rows do not change when the train size changes.
    rng = random.Random(f"{seed}:{split}")
    rows: list[dict] = []
    while len(rows) < n:
        order = list(combos)
        rng.shuffle(order)
        rows.extend(make_row(*c, thinking=thinking) for c in order[: n - len(rows)])
    return rows


def prompt_of(row: dict) -> str:
    """The user instruction of a sample-task row."""
    return _turn(row, "user")


def answer_of(row: dict) -> str:
    """The reference answer (assistant turn) of a sample-task row, without its thought."""
    return _turn(row, "assistant")


def thought_of(row: dict) -> str | None:
    """The thought of a thinking row's answer (``reasoning_content``), None for a plain row."""
    for message in row.get("messages", []):
        if message.get("role") == "assistant":
            return message.get("reasoning_content")
    raise KeyError(f"row has no 'assistant' turn: {row!r}")


def show_completions(rows: Sequence[dict], completions: Sequence[str], n: int = 3) -> str:
    """The first ``n`` rows' prompts and cleaned completions marked ``[OK ]`` / ``[BAD]`` by exact
    match, then the first miss among all rows (if any)."""
    pairs = list(zip(rows, completions, strict=True))
    lines = [f"[{'OK ' if exact_match(c, r) else 'BAD'}] {prompt_of(r)}\n{clean_completion(c)}\n" for r, c in pairs[:n]]
    miss = next(((r, c) for r, c in pairs if not exact_match(c, r)), None)
    if miss:
        lines.append(f"one miss: {prompt_of(miss[0])} -> {clean_completion(miss[1])!r}")
    return "\n".join(lines)


def answer_budget(tokenizer, items: Sequence, *, slack: int = 16) -> int:
    """New tokens to allow for an answer: the longest reference answer of ``items`` plus ``slack``.

    ``items``: sample-task rows (their assistant turn, :func:`answer_of`) or evaluation problems
    (``Problem.answer``, else its reference RTL). The budget ``cookbook.evaluate``'s generators and
    ``cookbook.serve``'s served check are given. Add :func:`thought_budget` for a thinking run.
    """
    answers = [answer_of(x) if isinstance(x, dict) else (x.answer or x.ref) for x in items]
    return max(len(tokenizer(a, add_special_tokens=False)["input_ids"]) for a in answers) + slack


def thought_budget(tokenizer, rows: Sequence[dict]) -> int:
    """New tokens the longest thought of ``rows`` takes in Gemma 4's thought channel
    (``<|channel>thought\\n...\\n<channel|>``); 0 for plain rows. Add it to
    :func:`answer_budget` when sampling a thinking run."""
    thoughts = [t for t in map(thought_of, rows) if t]
    return max(
        (
            len(tokenizer(f"<|channel>thought\n{t}\n<channel|>", add_special_tokens=False)["input_ids"])
            for t in thoughts
        ),
        default=0,
    )


def clean_completion(completion: str) -> str:
    """The answer of a model completion: cut at its first end-of-turn marker, its thought
    dropped, whitespace trimmed.

    A thought is Gemma 4's channel (``<|channel>thought ... <channel|>``, every such span, as
    the chat template's own ``strip_thinking`` does) or a ``<think>...</think>`` prefix (a
    ``</think>`` without its opening tag ends one too). A thought never closed (the token
    budget ran out while thinking) leaves no answer. The markers are special tokens: decode
    with them kept (Tunix does; vLLM with ``skip_special_tokens=False``), or the thought
    cannot be told from the answer.
    """
    for marker in _END_MARKERS:
        completion = completion.split(marker, 1)[0]
    for start, end in _THOUGHT_SPANS:
        head, closed, tail = completion.partition(end)
        if closed and start not in head:  # a closing tag without its opening one ends a thought too
            completion = tail
        while start in completion:
            before, _, rest = completion.partition(start)
            _, closed, after = rest.partition(end)
            completion = before + (after if closed else "")
    return completion.strip()


def exact_match(completion: str, row: dict) -> bool:
    """Whether ``completion``'s answer is exactly the row's reference answer.

    Trailing ``<turn|>`` / ``<eos>`` (and anything after them), a thought before the answer
    (:func:`clean_completion`) and surrounding whitespace are ignored, so raw decoded ids and
    vLLM outputs with special tokens skipped compare alike. Everything else, including
    spaces inside the module, must match; the thought is not judged.
    """
    return clean_completion(completion) == answer_of(row).strip()


def exact_match_rate(completions: list[str], rows: list[dict]) -> float:
    """Fraction of completions that exactly match their rows (0.0 for no rows)."""
    if len(completions) != len(rows):
        raise ValueError(f"{len(completions)} completions for {len(rows)} rows; pass one per row")
    if not rows:
        return 0.0
    return sum(exact_match(c, r) for c, r in zip(completions, rows, strict=True)) / len(rows)


def write_jsonl(rows: list[dict], path: str | Path) -> Path:
    """Write rows as JSON lines (what ``cookbook train --data`` and notebook 05 read)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def write_messy_jsonl(path: str | Path, good_rows: list[dict]) -> dict[int, str]:
    """Write ``good_rows`` as JSONL with one broken row of every kind mixed in.

    For showing (notebook 05) and testing what the data pipeline does with bad input.
    Returns ``{line number: a fragment of the reason the pipeline must give}``; the
    over-long row is too long for ``seq_len`` 64.
    """
    long_answer = " ".join(["assign y = a + b;"] * 40)

    def user_answer(user: str, answer: str) -> str:
        return json.dumps({"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]})

    bad: dict[int, tuple[bytes, str]] = {
        3: (b'{"messages": [', "invalid JSON"),
        5: (b'{"text": "hello"}', "no known layout"),
        7: (json.dumps({"messages": "hi"}).encode(), "must be a list"),
        9: (
            json.dumps({"messages": [{"role": "user", "content": 5}, {"role": "assistant", "content": "x"}]}).encode(),
            "must be a string",
        ),
        11: (
            json.dumps(
                {"messages": [{"role": "robot", "content": "a"}, {"role": "assistant", "content": "b"}]}
            ).encode(),
            "unknown role 'robot'",
        ),
        13: (user_answer("a", "  ").encode(), "empty answer"),
        15: (b'{"prompt": "caf\xe9", "completion": "x"}', "not UTF-8"),
        17: (json.dumps({"prompt": "write it", "completion": long_answer}).encode(), "tokens > seq_len=64"),
        19: (json.dumps({"prompt": "only a prompt"}).encode(), "without a 'completion'"),
        21: (json.dumps({"messages": [{"role": "user", "content": "a"}]}).encode(), "must end with an assistant"),
    }
    lines: list[bytes] = []
    good = iter(good_rows)
    while True:
        number = len(lines) + 1
        if number in bad:
            lines.append(bad[number][0])
            continue
        row = next(good, None)
        if row is None:
            break
        lines.append(json.dumps(row, ensure_ascii=False).encode("utf-8"))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\n".join(lines) + b"\n")
    return {n: reason for n, (_, reason) in bad.items() if n <= len(lines)}


def _turn(row: dict, role: str) -> str:
    for message in row.get("messages", []):
        if message.get("role") == role:
            return message["content"]
    raise KeyError(f"row has no {role!r} turn: {row!r}")


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split={split!r}; choose one of {SPLITS}")
