"""Functional pass@k of the served model (notebook 08, section 4), as the paper scores it.

Greedy first: the completions the merged server and the JAX model gave for the held-out rows
(:func:`prove_fine_tuned`), compiled and simulated against each problem's testbench, so the
served model's functional pass@1 can be put beside Tunix's. Then sampling as the paper sampled
(n samples per problem at a temperature and top-p): the served fine-tune through the OpenAI API,
the base through Tunix's sampler with the same sampling, and the quality table with the GPU
recipe's committed row where it has been trained.

Written by hand: these put ``cookbook.evaluate``'s problems, generators and scorer (which comes
before this stage) together with the servers and checkpoints of this one; no library has them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cookbook import data, evaluate

if TYPE_CHECKING:
    from cookbook.serve._check import FineTunedProof
    from cookbook.serve._served import ServedCheckpoints, ServingServers


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServedGreedyPass:
    """:func:`served_greedy_pass`' result: the same greedy completions, served and JAX, simulated."""

    problems: list[evaluate.Problem]
    served: Any  # evaluate's Scores of the merged server's completions
    jax: Any  # and of the JAX (Tunix) model's

    def describe(self) -> str:
        return (
            f"greedy functional pass@1 of {len(self.problems)} problems: vLLM {self.served.pass_at(1):.1%}, "
            f"JAX (Tunix) {self.jax.pass_at(1):.1%}; exact match {self.served.exact_match:.1%}"
        )

    def results(self) -> dict[str, Any]:
        return {
            "functional_pass1_greedy_served": self.served.pass_at(1),
            "functional_pass1_greedy_jax": self.jax.pass_at(1),
            "num_pass_k_problems": len(self.problems),
        }


def served_greedy_pass(proof: FineTunedProof, *, num_problems: int) -> ServedGreedyPass:
    """The first ``num_problems`` held-out rows of ``proof`` as verilog-eval problems, and the
    greedy completions the server and the JAX model gave them, each scored by the simulator."""
    problems = evaluate.sample_task_problems(proof.rows[:num_problems])
    return ServedGreedyPass(
        problems=problems,
        served=evaluate.score_greedy(problems, proof.served_completions[: len(problems)]),
        jax=evaluate.score_greedy(problems, proof.jax_completions[: len(problems)]),
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServedPassAtK:
    """:func:`served_pass_at_k`'s result: the fine-tune's and the base's sampled pass@k, the quality table."""

    sampling: Any  # evaluate's SamplingConfig: the paper's, with the answer budget
    served: Any  # evaluate's Scores of the served fine-tune's samples
    base: Any  # and of the base's, through Tunix's sampler
    quality: list[dict[str, Any]]  # base, base + LoRA, and the GPU recipe's row where it was trained
    per_problem_path: Path  # every sample, outcome and seed, one JSON line per problem

    def describe(self) -> str:
        return "\n".join(
            [*evaluate.quality_table(self.quality), f"outcomes of the fine-tuned samples: {self.served.outcome_counts}"]
        )

    def results(self) -> dict[str, Any]:
        return {
            "pass_at_k": self.served.summary(),
            "base_pass_at_k": self.base.summary(),
            "sampling": self.sampling.as_dict(),
            "quality": self.quality,
        }


def served_pass_at_k(
    servers: ServingServers,
    served: ServedCheckpoints,
    greedy: ServedGreedyPass,
    *,
    n: int,
    temperature: float,
    top_p: float,
    gpu_recipe_json: str | Path,
    per_problem_path: str | Path,
) -> ServedPassAtK:
    """``greedy``'s problems sampled as the paper sampled (``n`` per problem at ``temperature`` and
    ``top_p``; one request of ``n`` samples per problem, seeded), the served fine-tune through the
    merged server, the base (LoRA B = 0) through Tunix's sampler; new tokens: the longest reference
    answer plus 16. The quality table gets the GPU recipe's row from ``gpu_recipe_json`` where
    ``benchmarks/gpu_recipe_e2e.py`` wrote one; every sample goes to ``per_problem_path``."""
    problems, tokenizer = greedy.problems, served.tokenizer
    sampling = evaluate.PAPER_SAMPLING.replace(
        n=n, temperature=temperature, top_p=top_p, max_tokens=data.answer_budget(tokenizer, problems)
    )
    tuned = evaluate.score_generation(
        problems, evaluate.endpoint_samples(servers.client, servers.model, problems, sampling, tokenizer=tokenizer)
    )
    base = evaluate.score_generation(
        problems, evaluate.tunix_samples(served.base_model(), tokenizer, problems, sampling)[0]
    )
    preset = served.preset
    quality = [
        evaluate.quality_row(f"{preset} base", "-", "Tunix sampler", sampled=base),
        evaluate.quality_row(
            f"{preset} + LoRA", "TPU recipe (Tunix), merged", "vLLM", greedy=greedy.served, sampled=tuned
        ),
    ]
    gpu_row = evaluate.committed_quality_row(gpu_recipe_json)  # None where the GPU recipe was not trained
    return ServedPassAtK(
        sampling=sampling,
        served=tuned,
        base=base,
        quality=quality + ([gpu_row] if gpu_row else []),
        per_problem_path=tuned.write_per_problem(per_problem_path),
    )
