"""Before and after RL: held-out functional pass@k of several runs, sampled the same way.

Every run is sampled on the same held-out rows with the same sampling (the paper's: n = 5,
T = 0.8, top-p 0.95, the same seeds) by Tunix's sampler (compiled once, its weights swapped per
run), and scored by Icarus Verilog; pass@k is the unbiased estimator (``evaluate._score.pass_at_k``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from cookbook import data as data_lib
from cookbook import evaluate
from cookbook import train as train_lib


@dataclasses.dataclass(frozen=True)
class HeldOutPass:
    """One run's held-out functional pass@1 and pass@k."""

    label: str
    run_dir: Path
    step: int | None  # the checkpoint sampled (None: the latest)
    pass1: float
    pass_k: float
    k: int
    rows: int
    samples: int


def held_out_pass(
    runs: Mapping[str, str | Path | tuple[str | Path, int]],
    *,
    rows: int = 48,
    n: int = 5,
    temperature: float = 0.8,
    top_p: float = 0.95,
    seed: int = 0,
    batch_size: int = 80,
) -> list[HeldOutPass]:
    """Each run's held-out pass@1 and pass@``n``: label -> a run directory (SFT or RL runs of one
    task; their latest checkpoint) or (run directory, checkpoint step)."""
    if not runs:
        raise ValueError("give at least one run to sample")
    where = {label: (r, None) if isinstance(r, (str, Path)) else r for label, r in runs.items()}
    first = next(iter(where.values()))[0]
    config = train_lib.config_of_run(first)
    thinking = config.sample_task == "thinking"
    held_out = train_lib.eval_rows(config)[:rows]
    problems = evaluate.sample_task_problems(held_out)
    tokenizer = data_lib.load_tokenizer(base_dir=train_lib.resolve_base_dir(config))
    budget = evaluate.greedy_sampling(tokenizer, held_out, thinking=thinking).max_tokens
    sampling = evaluate.PAPER_SAMPLING.replace(n=n, temperature=temperature, top_p=top_p, seed=seed, max_tokens=budget)
    out, sampler = [], None
    for label, (run_dir, step) in where.items():
        if train_lib.config_of_run(run_dir).sample_task != config.sample_task:
            raise ValueError(f"{run_dir} trained another task than {first}: compare runs of one task")
        model = train_lib.restore_lora_model(run_dir, step=step)
        generation, sampler = evaluate.tunix_samples(
            model, tokenizer, problems, sampling, batch_size=batch_size, sampler=sampler, thinking=thinking
        )
        scores = evaluate.score_generation(problems, generation)
        out.append(
            HeldOutPass(
                label=label,
                run_dir=Path(run_dir),
                step=step,
                pass1=scores.pass_at(1),
                pass_k=scores.pass_at(n),
                k=n,
                rows=len(problems),
                samples=n * len(problems),
            )
        )
    return out


def format_held_out(results: list[HeldOutPass]) -> str:
    """A Markdown table of :func:`held_out_pass`'s results, with each run's change against the first."""
    if not results:
        return "(no runs)"
    first = results[0]
    k = first.k
    lines = [
        f"| run | held-out pass@1 | change | pass@{k} |",
        "| --- | ---: | ---: | ---: |",
    ]
    for r in results:
        change = "" if r is first else f"{r.pass1 - first.pass1:+.1%}"
        lines.append(f"| {r.label} | {r.pass1:.1%} | {change} | {r.pass_k:.1%} |")
    lines.append(
        f"\n{first.rows} held-out rows x {first.samples // first.rows} samples each (T and seeds as given), "
        "scored by Icarus Verilog."
    )
    return "\n".join(lines)
