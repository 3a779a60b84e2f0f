"""pass@k the unbiased way, per-problem results, completions files, and the quality table.

pass@k (Chen et al. 2021, "Evaluating Large Language Models Trained on Code"): with ``n``
samples of a problem of which ``c`` pass, the chance that at least one of ``k`` drawn
without replacement passes is ``1 - C(n - c, k) / C(n, k)``; the benchmark's pass@k is its
mean over problems. Taking "the first k samples" instead would be a noisier estimate of
the same number. The paper scored verilog-eval with n = 5 at temperature 0.8 / top-p 0.95
(:data:`PAPER_QUALITY` holds its figures; :mod:`cookbook.evaluate` its sampling defaults).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cookbook.evaluate._generate import Generation
from cookbook.evaluate._problems import Problem
from cookbook.evaluate._simulate import OUTCOMES, SimConfig, SimResult, simulate_many

# The paper's quality result (verilog-eval spec-to-RTL, Gemma 4 31B + LoRA, n = 5, T = 0.8,
# top-p 0.95): pass@1 only (it gives no pass@5 figure), and not through vLLM (it served only the
# base model), so the generator is not stated.
PAPER_QUALITY: tuple[dict[str, Any], ...] = (
    {
        "model": "Gemma 4 31B + LoRA (paper)",
        "recipe": "TPU v5p-8, Tunix",
        "generator": "not stated",
        "problems": "verilog-eval",
        "pass@1": 0.641,
        "n": 5,
    },
    {
        "model": "Gemma 4 31B + LoRA (paper)",
        "recipe": "2 x H100, TRL",
        "generator": "not stated",
        "problems": "verilog-eval",
        "pass@1": 0.697,
        "n": 5,
    },
)
QUALITY_COLUMNS = ("model", "recipe", "generator", "problems", "exact_match", "greedy_pass@1", "pass@1", "pass@5", "n")


class CompletionsError(ValueError):
    """A completions file or mapping does not fit the problem set (the message names the line)."""


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem: ``1 - C(n-c, k) / C(n, k)``.

    Raises:
      ValueError: ``k > n`` (pass@k needs at least k samples), or counts out of range.
    """
    if not 0 <= c <= n:
        raise ValueError(f"c={c} correct out of n={n} samples is impossible")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per problem, got n={n}; sample more or lower k")
    total = math.comb(n, k)
    # Exact integers, one correctly rounded division (Python's int / int): 1 sample in 5 is 0.2.
    return (total - math.comb(n - c, k)) / total


@dataclasses.dataclass(kw_only=True)
class ProblemScore:
    """Every sample of one problem, judged."""

    problem: str
    completions: list[str]
    results: list[SimResult]
    seeds: list[int | None] = dataclasses.field(default_factory=list)
    exact: list[bool] | None = None  # exact match against the reference answer, where there is one

    @property
    def n(self) -> int:
        return len(self.results)

    @property
    def c(self) -> int:
        return sum(r.passed for r in self.results)

    def as_dict(self, ks: Sequence[int] = (1,)) -> dict[str, Any]:
        """One JSON result (what ``cookbook eval`` prints per problem)."""
        out: dict[str, Any] = {"problem": self.problem, "n": self.n, "c": self.c}
        out.update({f"pass@{k}": pass_at_k(self.n, self.c, k) for k in ks if k <= self.n})
        if self.exact is not None:
            out["exact"] = sum(self.exact)
        out["outcomes"] = [r.outcome for r in self.results]
        out["seeds"] = list(self.seeds)
        out["samples"] = [{"completion": c, **r.as_dict()} for c, r in zip(self.completions, self.results, strict=True)]
        return out


@dataclasses.dataclass(kw_only=True)
class Scores:
    """A problem set scored: pass@k, outcome counts, exact match, and how long simulation took."""

    problems: list[ProblemScore]
    ks: tuple[int, ...]
    simulate_s: float
    workers: int

    def pass_at(self, k: int) -> float:
        """Mean pass@k over problems (ValueError, naming the problem, if one has fewer than k samples)."""
        for p in self.problems:
            if k > p.n:
                raise ValueError(f"pass@{k} needs {k} samples per problem; {p.problem} has n={p.n}")
        return sum(pass_at_k(p.n, p.c, k) for p in self.problems) / len(self.problems)

    @property
    def outcome_counts(self) -> dict[str, int]:
        counts = Counter(r.outcome for p in self.problems for r in p.results)
        return {o: counts[o] for o in OUTCOMES if counts[o]}

    @property
    def exact_match(self) -> float | None:
        """Fraction of all samples that equal the reference answer (None without answers)."""
        if any(p.exact is None for p in self.problems):
            return None
        return sum(sum(p.exact) for p in self.problems) / sum(p.n for p in self.problems)

    @property
    def samples_per_s(self) -> float:
        return sum(p.n for p in self.problems) / max(self.simulate_s, 1e-9)

    def summary(self) -> dict[str, Any]:
        n = sorted({p.n for p in self.problems})
        out: dict[str, Any] = {"problems": len(self.problems), "n": n[0] if len(n) == 1 else n}
        out.update({f"pass@{k}": self.pass_at(k) for k in self.ks})
        if self.exact_match is not None:
            out["exact_match"] = self.exact_match
        out["outcomes"] = self.outcome_counts
        out["simulate_s"] = self.simulate_s
        out["samples_per_s"] = self.samples_per_s
        out["workers"] = self.workers
        return out

    def per_problem(self) -> list[dict[str, Any]]:
        return [p.as_dict(self.ks) for p in self.problems]

    def write_per_problem(self, path: str | Path) -> Path:
        """Every problem's samples, outcomes and seeds, one JSON line per problem."""
        path = Path(path)
        path.write_text("".join(json.dumps(r) + "\n" for r in self.per_problem()))
        return path

    def same_outcomes(self, other: Scores) -> bool:
        """Whether each problem's first sample had the same outcome in ``other`` (same problems)."""
        return [p.results[0].outcome for p in self.problems] == [p.results[0].outcome for p in other.problems]


def check_completions(
    problems: Sequence[Problem], completions: Mapping[str, Sequence[str]], ks: Sequence[int] = (1,)
) -> None:
    """Raise, naming the problem, unless every problem has at least ``max(ks)`` completions and
    every completion belongs to a problem of the set."""
    if not problems:
        raise CompletionsError("no problems to score")
    names = {p.name for p in problems}
    extra = sorted(set(completions) - names)
    if extra:
        raise CompletionsError(
            f"completions for {extra[0]!r}, which is not in the problem set ({len(extra)} unknown problem name(s))"
        )
    missing = [p.name for p in problems if not completions.get(p.name)]
    if missing:
        raise CompletionsError(
            f"no completion for {missing[0]!r} ({len(missing)} of {len(problems)} problems "
            "without one); give every problem at least one sample"
        )
    for k in ks:
        short = next((p.name for p in problems if len(completions[p.name]) < k), None)
        if short is not None:
            raise ValueError(
                f"pass@{k} needs {k} samples per problem; {short} has "
                f"{len(completions[short])}: sample more (n >= {k}) or drop k={k}"
            )


def score(
    problems: Sequence[Problem],
    completions: Mapping[str, Sequence[str]],
    *,
    ks: Sequence[int] = (1,),
    seeds: Mapping[str, Sequence[int | None]] | None = None,
    config: SimConfig | None = None,
    workers: int | None = None,
    on_done: Callable[[int, SimResult], None] | None = None,
) -> Scores:
    """Simulate every completion of every problem and score the set.

    Args:
      problems: the problem set.
      completions: ``{problem name: [completion, ...]}``, at least one per problem.
      ks: the pass@k to report; every problem needs at least ``max(ks)`` samples.
      seeds: recorded with the results (``Generation.seeds``).
    """
    from cookbook import data as data_lib
    from cookbook.evaluate._simulate import default_workers

    check_completions(problems, completions, ks)
    jobs = [(p, c) for p in problems for c in completions[p.name]]
    t0 = time.perf_counter()
    results = iter(simulate_many(jobs, config, workers=workers, on_done=on_done))
    simulate_s = time.perf_counter() - t0
    scored = []
    for p in problems:
        comps = list(completions[p.name])
        exact = [data_lib.clean_completion(c) == p.answer.strip() for c in comps] if p.answer else None
        scored.append(
            ProblemScore(
                problem=p.name,
                completions=comps,
                results=[next(results) for _ in comps],
                seeds=list((seeds or {}).get(p.name, [])),
                exact=exact,
            )
        )
    return Scores(problems=scored, ks=tuple(ks), simulate_s=simulate_s, workers=workers or default_workers())


def score_generation(
    problems: Sequence[Problem], generation: Generation, *, ks: Sequence[int] | None = None, **kwargs: Any
) -> Scores:
    """:func:`score` a generator's samples (pass@1, and pass@5 where there are 5 samples)."""
    ks = ks or [k for k in (1, 5) if k <= generation.sampling.n]
    return score(problems, generation.completions, ks=ks, seeds=generation.seeds, **kwargs)


def score_greedy(problems: Sequence[Problem], completions: Sequence[str], **kwargs: Any) -> Scores:
    """:func:`score` one completion per problem, given in problem order (a greedy decode)."""
    if len(completions) != len(problems):
        raise CompletionsError(f"{len(completions)} completions for {len(problems)} problems; pass one per problem")
    return score(problems, {p.name: [c] for p, c in zip(problems, completions, strict=True)}, ks=(1,), **kwargs)


def read_completions(path: str | Path, problems: Sequence[Problem] | None = None) -> dict[str, list[str]]:
    """``{problem: [completion, ...]}`` from JSONL rows ``{"problem": NAME, "completion": TEXT}``.

    One row per problem and sample (as a TPU server's sampling loop would write them).
    Raises :class:`CompletionsError` naming the line of a bad row, or a problem name that
    is not in ``problems``.
    """
    path = Path(path)
    if not path.is_file():
        raise CompletionsError(f"completions file {str(path)!r} does not exist")
    names = {p.name for p in problems} if problems is not None else None
    out: dict[str, list[str]] = {}
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise CompletionsError(
                    f'{where}: invalid JSON ({e.msg}); each line is {{"problem": NAME, "completion": TEXT}}'
                ) from None
            if (
                not isinstance(row, dict)
                or not isinstance(row.get("problem"), str)
                or not isinstance(row.get("completion"), str)
            ):
                raise CompletionsError(
                    f"{where}: want an object with string 'problem' and 'completion', got {line.strip()[:80]}"
                )
            if names is not None and row["problem"] not in names:
                raise CompletionsError(f"{where}: problem {row['problem']!r} is not in the problem set")
            out.setdefault(row["problem"], []).append(row["completion"])
    if not out:
        raise CompletionsError(f"{path} holds no completions")
    return out


def write_completions(path: str | Path, completions: Mapping[str, Sequence[str]]) -> Path:
    """Write ``{problem: [completion, ...]}`` as the JSONL :func:`read_completions` reads."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for name, comps in completions.items():
            for c in comps:
                f.write(json.dumps({"problem": name, "completion": c}, ensure_ascii=False) + "\n")
    return path


# ------------------------------------------------------------------------------------------
# The quality table, in the paper's form
def quality_row(
    model: str,
    recipe: str,
    generator: str,
    *,
    greedy: Scores | None = None,
    sampled: Scores | None = None,
    problems: str = "sample task, held out",
) -> dict[str, Any]:
    """One row of the quality table: greedy exact match and pass@1, sampled pass@1 / pass@5."""
    row: dict[str, Any] = {"model": model, "recipe": recipe, "generator": generator}
    counts = set()
    if greedy is not None:
        row["exact_match"] = greedy.exact_match
        row["greedy_pass@1"] = greedy.pass_at(1)
        counts.add(len(greedy.problems))
    if sampled is not None:
        n = min(p.n for p in sampled.problems)
        row.update({f"pass@{k}": sampled.pass_at(k) for k in (1, 5) if k <= n})
        row["n"] = n
        counts.add(len(sampled.problems))
    row["problems"] = f"{problems} ({'/'.join(map(str, sorted(counts)))})" if counts else problems
    return row


def committed_quality_row(path: str | Path) -> dict[str, Any] | None:
    """The ``quality`` row a benchmark wrote (``benchmarks/gpu_recipe_e2e.py``), or None where it has none."""
    path = Path(path)
    if not path.is_file():
        return None
    row = json.loads(path.read_text()).get("quality")
    return {**row, "source": path.name} if isinstance(row, dict) else None


def quality_table(rows: Sequence[Mapping[str, Any]], *, paper: bool = True) -> list[str]:
    """Markdown lines: one row per model and recipe, then the paper's figures for scale.

    A ``source`` column (where the row was measured) is shown when any row has one.
    """

    def cell(v: Any) -> str:
        if v is None or v == "":
            return "-"
        return f"{v:.3f}" if isinstance(v, float) else str(v).replace("|", "\\|")

    all_rows = [*rows, *({**r, "source": "the paper"} for r in (PAPER_QUALITY if paper else ()))]
    columns = list(QUALITY_COLUMNS) + (["source"] if any("source" in r for r in rows) else [])
    header = [c.replace("_", " ") for c in columns]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in all_rows]
    return lines
