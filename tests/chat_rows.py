"""One chat row of each kind a template must render: plain, system, thinking, multi-turn thinking,
tool call and tool response (tests/data: the template revisions and the generation prompts)."""

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
ROWS = {
    "plain": {"messages": [{"role": "user", "content": "Add two bits."}, {"role": "assistant", "content": "a ^ b"}]},
    "system": {
        "messages": [
            {"role": "system", "content": "You write Verilog."},
            {"role": "user", "content": "Add two bits."},
            {"role": "assistant", "content": "a ^ b"},
        ]
    },
    "thinking": {
        "messages": [
            {"role": "user", "content": "Add two bits."},
            {"role": "assistant", "content": "a ^ b", "reasoning_content": "The sum bit is the XOR."},
        ]
    },
    "multi-turn thinking": {
        "messages": [
            {"role": "user", "content": "Add two bits."},
            {"role": "assistant", "content": "a ^ b", "reasoning_content": "The sum bit is the XOR."},
            {"role": "user", "content": "And the carry?"},
            {"role": "assistant", "content": "a & b", "reasoning_content": "The carry is the AND."},
        ]
    },
    "tool call": {
        "tools": TOOLS,
        "messages": [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "tool_calls": [CALL]}],
    },
    "tool response": {
        "tools": TOOLS,
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "sunny, 21 C"},
            {"role": "assistant", "content": "It is sunny in Paris."},
        ],
    },
}
