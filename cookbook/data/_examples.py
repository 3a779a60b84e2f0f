"""The rows notebook 05 shows the pipeline with: one per data layout Gemma 4 is fine-tuned on, and
rows with DeepSeek-R1-length thoughts; and what each must show once rendered.

Written by hand: they are the cookbook's own illustrations, not a data set.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def format_examples() -> list[dict[str, Any]]:
    """Three rows in three layouts: CodeV-R1's (a ``<think>`` thought, then the module), OpenAI
    messages with a tool call and the tool's response, and ShareGPT."""
    return [
        {
            "system": "You are a Verilog expert.",
            "prompt": "Write a module named inv1 that inverts a into y.",
            "response": "<think>\nOne NOT gate: y is the complement of a.\n</think>\n\n"
            "module inv1(input a, output y);\n  assign y = ~a;\nendmodule",
        },
        {
            "tools": [_WEATHER_TOOL],
            "messages": [
                {"role": "user", "content": "Is it warm in Paris?"},
                {
                    "role": "assistant",
                    "reasoning_content": "Ask the weather tool.",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"},
                {"role": "assistant", "content": "Mild: 18 C and sunny."},
            ],
        },
        {"conversations": [{"from": "human", "value": "Name a universal gate."}, {"from": "gpt", "value": "NAND"}]},
    ]


def format_example_checks(view: dict[str, Any]) -> dict[str, bool]:
    """On ``cookbook.data._cli.inspect``'s view of :func:`format_examples`: the thought is trained, the
    tool call is trained, the tool's response is shown but not trained."""
    rows = view["rows"]
    trained = ["".join(r["text"][a:b] for a, b in r["trained_spans"]) for r in rows]
    return {
        "thought_trained": trained[0].startswith("<|channel>thought\nOne NOT gate"),
        "tool_call_trained": "<|tool_call>call:get_weather" in trained[1],
        "tool_response_untrained": "18 C, sunny" not in trained[1] and "18 C, sunny" in rows[1]["text"],
    }


def long_thought_rows(n: int = 400, *, seed: int = 0) -> list[dict[str, str]]:
    """``n`` CodeV-R1-layout adder rows whose thoughts run to DeepSeek-R1 lengths: a word count
    drawn log-normally around 60 (a long tail past a few hundred), to show the too-long policy."""
    rng = np.random.default_rng(seed)
    words = ["carry", "sum", "bit", "wire", "gate", "width", "input", "output", "xor", "and"]
    return [
        {
            "system": "You are a Verilog expert.",
            "prompt": f"Write a {w}-bit adder.",
            "response": "<think>" + " ".join(rng.choice(words, size=int(k))) + "</think>"
            f"module add{w}(input [{w - 1}:0] a, b, output [{w}:0] y); assign y = a + b; endmodule",
        }
        for w, k in zip(rng.integers(2, 33, n), rng.lognormal(np.log(60), 0.8, n) + 1, strict=True)
    ]
