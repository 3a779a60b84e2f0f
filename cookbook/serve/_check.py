"""Prove the server serves the fine-tuned model: exact match through the API, greedy parity.

Through a running OpenAI-compatible server (the ``openai`` client), the held-out prompts of
the sample task are sent as the token ids the trainer's chat template renders, decoded
greedily, and scored with ``cookbook.data.exact_match`` - the same prompts and
metric as the JAX evaluation in notebook 06, so the two accuracies must agree. The same
prompts through transformers ``generate`` on the same checkpoint must give the same text.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cookbook import data
from cookbook import models as tok_lib

if TYPE_CHECKING:
    from cookbook.serve._served import ServedCheckpoints, ServingServers


def served_completions(
    client, model: str, prompts: list[list[int]], *, max_tokens: int, batch: int = 64
) -> list[dict[str, Any]]:
    """Greedy completions of token-id prompts (``batch`` prompts per request).

    Returns ``[{"text", "token_ids", "finish_reason"}]`` in prompt order.
    """
    out: list[dict[str, Any]] = []
    for i in range(0, len(prompts), batch):
        chunk = prompts[i : i + batch]
        resp = client.completions.create(
            model=model, prompt=chunk, max_tokens=max_tokens, temperature=0.0, extra_body={"return_token_ids": True}
        )
        choices = sorted(resp.choices, key=lambda c: c.index)
        for c in choices:
            ids = getattr(c, "token_ids", None)
            if ids is None and getattr(c, "model_extra", None):
                ids = c.model_extra.get("token_ids")
            out.append({"text": c.text, "token_ids": list(ids or []), "finish_reason": c.finish_reason})
    return out


def greedy_parity(client, model: str, model_dir: str | Path, tokenizer, rows: list[dict]) -> dict[str, Any]:
    """:func:`compare_greedy` of the server's greedy answers to ``rows``' prompts (as token ids)
    against transformers ``generate`` on ``model_dir``, both within the rows' answer budget."""
    prompts = [data.prompt_ids(tokenizer, r) for r in rows]
    budget = data.answer_budget(tokenizer, rows, slack=8)
    return compare_greedy(
        served_completions(client, model, prompts, max_tokens=budget),
        hf_greedy(model_dir, prompts, max_new_tokens=budget),
    )


def served_exact_match(
    client, model: str, tokenizer, rows: list[dict], *, max_tokens: int | None = None
) -> dict[str, Any]:
    """Exact-match accuracy of ``model`` on ``rows`` through the server (greedy)."""
    prompts = [data.prompt_ids(tokenizer, r) for r in rows]
    max_tokens = max_tokens or data.answer_budget(tokenizer, rows, slack=8)
    outs = served_completions(client, model, prompts, max_tokens=max_tokens)
    completions = [o["text"] for o in outs]
    correct = [data.exact_match(c, r) for c, r in zip(completions, rows, strict=True)]
    return {
        "accuracy": sum(correct) / len(rows),
        "correct": sum(correct),
        "n": len(rows),
        "completions": completions,
        "per_row": correct,
    }


def hf_greedy(
    model_dir: str | Path, prompts: list[list[int]], *, max_new_tokens: int, model=None
) -> list[dict[str, Any]]:
    """Greedy transformers ``generate`` of each prompt (one at a time: no padding effects).

    Stops at the tokenizer's stop ids (``<eos>``, ``<turn|>``) like the server; the text
    is decoded without special tokens, as vLLM returns it.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    if model is None:
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype="auto").eval()
    stops = tok_lib.stop_token_ids()
    out = []
    with torch.inference_mode():
        for p in prompts:
            gen = model.generate(
                torch.tensor([p]),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                eos_token_id=stops,
                pad_token_id=tok_lib.SPECIAL_TOKEN_IDS["<pad>"],
            )
            ids = gen[0, len(p) :].tolist()
            out.append({"token_ids": ids, "text": tok.decode(ids, skip_special_tokens=True)})
    return out


def compare_greedy(served: list[dict[str, Any]], reference: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-prompt equality of greedy text (and token ids, where the server returned them)."""
    stops = set(tok_lib.stop_token_ids())

    def strip(ids):
        return [t for t in ids if t not in stops]

    same_text = [s["text"] == r["text"] for s, r in zip(served, reference, strict=True)]
    same_ids = [
        strip(s["token_ids"]) == strip(r["token_ids"]) for s, r in zip(served, reference, strict=True) if s["token_ids"]
    ]
    return {
        "n": len(served),
        "same_text": sum(same_text),
        "same_token_ids": sum(same_ids),
        "all_equal": all(same_text) and all(same_ids),
        "first_difference": next(
            (
                {"served": s["text"], "reference": r["text"]}
                for s, r, ok in zip(served, reference, same_text, strict=True)
                if not ok
            ),
            None,
        ),
    }


def agreement(completions_a: list[str], completions_b: list[str]) -> float:
    """Fraction of rows whose cleaned completions are identical (JAX vs server, say)."""
    pairs = list(zip(completions_a, completions_b, strict=True))
    return sum(data.clean_completion(a) == data.clean_completion(b) for a, b in pairs) / len(pairs)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FineTunedProof:
    """The held-out rows scored through the merged server and by the JAX model (notebook 06's
    ``train.evaluate``): the two accuracies must be equal, completion for completion."""

    rows: list[dict]
    served: dict[str, Any]  # served_exact_match through the server
    jax: dict[str, Any]  # train.evaluate of the run's LoRA model (Tunix)
    agreement: float  # the share of rows whose cleaned completions are identical

    @property
    def served_completions(self) -> list[str]:
        return self.served["completions"]

    @property
    def jax_completions(self) -> list[str]:
        return self.jax["completions"]

    def describe(self) -> str:
        return (
            f"exact match through vLLM: {self.served['accuracy']:.1%}   JAX (Tunix) model: "
            f"{self.jax['accuracy']:.1%}   identical completions: {self.agreement:.1%} of {len(self.rows)}\n"
            f"{data.prompt_of(self.rows[0])}\n->\n{data.clean_completion(self.served_completions[0])}"
        )

    def results(self) -> dict[str, Any]:
        return {
            "served_accuracy": self.served["accuracy"],
            "jax_accuracy": self.jax["accuracy"],
            "served_jax_agreement": self.agreement,
            "num_eval_rows": len(self.rows),
        }


def prove_fine_tuned(servers: ServingServers, served: ServedCheckpoints, *, num_rows: int) -> FineTunedProof:
    """Score the first ``num_rows`` held-out rows of the run through the merged server (the token ids
    the trainer's chat template renders, greedy, exact match) and with the JAX model restored from
    the run's LoRA checkpoint, on the same rows with the same metric."""
    from cookbook import train

    rows = train.eval_rows(served.run_config)[:num_rows]
    through_vllm = served_exact_match(servers.client, servers.model, served.tokenizer, rows)
    jax = train.evaluate(train.restore_lora_model(served.run_dir), served.tokenizer, rows)
    same = agreement(through_vllm["completions"], jax["completions"])
    return FineTunedProof(rows=rows, served=through_vllm, jax=jax, agreement=same)


@dataclasses.dataclass(frozen=True, kw_only=True)
class GreedyParity:
    """:func:`compare_greedy`'s verdict on the server's greedy text against transformers'."""

    n: int
    same_text: int
    same_token_ids: int  # of the prompts the server returned token ids for
    all_equal: bool
    first_difference: dict[str, str] | None  # {"served", "reference"} of the first prompt that differs

    def describe(self) -> str:
        line = (
            f"greedy text identical to transformers generate on {self.same_text} of {self.n} prompts "
            f"(token ids on {self.same_token_ids}); all equal: {self.all_equal}"
        )
        return line + (f"\nfirst difference: {self.first_difference}" if self.first_difference else "")

    def results(self) -> dict[str, Any]:
        return {"greedy_parity_same_text": self.same_text, "greedy_parity_n": self.n}


def merged_greedy_parity(servers: ServingServers, rows: list[dict], *, tokenizer, num_prompts: int) -> GreedyParity:
    """:func:`greedy_parity` of the merged server against transformers ``generate`` on the same
    checkpoint directory, on the first ``num_prompts`` of ``rows``."""
    merged = servers.merged.config
    return GreedyParity(
        **greedy_parity(servers.client, merged.served_model_name, merged.model_dir, tokenizer, rows[:num_prompts])
    )
