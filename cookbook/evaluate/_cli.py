"""``cookbook eval``: functional pass@k of a problem set, from an endpoint, a training run, or a file.

    cookbook eval --problems DIR --endpoint http://127.0.0.1:8000/v1 [--model NAME]
    cookbook eval --problems DIR --run RUN_DIR [--base]
    cookbook eval --problems DIR --hf-model DIR [--adapter PEFT_DIR]   # transformers generate
    cookbook eval --problems DIR --completions samples.jsonl      # no model: score only
    cookbook eval --write-sample-task DIR                         # the sample task's problems

A progress bar goes to stderr, one JSON result per problem to stdout (or ``--out``), and the
summary (pass@k, outcome counts, simulation speed) last, to stderr and ``--summary``.

A training run's model (``--run``) is ``cookbook.train``'s, a later stage than this one: the
command is put together in ``cookbook.harness``, which passes :func:`add_eval_parser` the two
functions that check a run's base and load its model.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cookbook.evaluate import _generate as gen_lib
from cookbook.evaluate import _problems as problems_lib
from cookbook.evaluate import _score as score_lib
from cookbook.evaluate import _simulate as sim_lib


def add_eval_parser(
    sub,
    *,
    check_run: Callable[[Path], Any] | None = None,
    run_model: Callable[[Path, bool], tuple[Any, Any, bool]] | None = None,
):
    """Add ``cookbook eval`` to ``sub`` (an ``argparse`` subparsers action) and return its parser.

    ``check_run(run_dir)`` raises where a training run's recorded base no longer holds its
    weights; ``run_model(run_dir, base)`` returns the run's Tunix model (its base with LoRA off
    when ``base``), its tokenizer and whether it was trained to think. Without them ``--run``
    is refused with a message.
    """
    p = sub.add_parser(
        "eval",
        help="functional pass@k with Icarus Verilog: an endpoint, a training run, or completions",
        description="Sample completions of verilog-eval style problems (ProbNNN_name_prompt.txt / _ref.sv / "
        "_test.sv) from an OpenAI-compatible endpoint (--endpoint), the Tunix model of a training "
        "run (--run), transformers generate (--hf-model), or read them from a file (--completions); "
        "compile and simulate each with "
        "Icarus Verilog against the problem's testbench; report unbiased pass@k.",
    )
    p.add_argument("--problems", help="directory of ProbNNN_name_{prompt.txt,ref.sv,test.sv} files")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--endpoint", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")
    src.add_argument("--run", help="a cookbook training run directory (Tunix sampler on its JAX model)")
    src.add_argument(
        "--hf-model",
        help="a Hugging Face checkpoint dir, sampled with transformers generate "
        "(the GPU recipe's model; with --adapter for its PEFT output)",
    )
    src.add_argument("--completions", help='JSONL rows {"problem": NAME, "completion": TEXT}, one per sample')
    src.add_argument("--write-sample-task", metavar="DIR", help="write the sample task's held-out problems and exit")
    p.add_argument("--model", default=None, help="served model name (--endpoint; default: the first listed)")
    p.add_argument("--api-key-env", default=None, help="env var holding the endpoint's API key")
    p.add_argument(
        "--tokenizer",
        default=None,
        help="tokenizer dir; --endpoint: send token ids to /v1/completions (default: messages to /v1/chat/completions)",
    )
    p.add_argument("--base", action="store_true", help="with --run: the run's base model (LoRA off)")
    p.add_argument("--adapter", default=None, help="with --hf-model: a PEFT adapter dir on top of it")
    d = gen_lib.PAPER_SAMPLING
    p.add_argument("--n", type=int, default=d.n, help=f"samples per problem (default {d.n}, as the paper)")
    p.add_argument("--temperature", type=float, default=d.temperature, help=f"default {d.temperature}")
    p.add_argument("--top-p", type=float, default=d.top_p, help=f"default {d.top_p}")
    p.add_argument(
        "--max-tokens", type=int, default=d.max_tokens, help=f"new tokens per sample (default {d.max_tokens})"
    )
    p.add_argument("--seed", type=int, default=d.seed, help="first seed (problem i: seed + i)")
    p.add_argument("--greedy", action="store_true", help="one greedy sample per problem (pass@1)")
    p.add_argument("--k", type=int, nargs="+", default=None, help="pass@k to report (default: 1 and 5 where n >= 5)")
    p.add_argument("--system", default=None, help="a system turn before each prompt")
    p.add_argument(
        "--thinking",
        action="store_true",
        help="prompt with Gemma 4's thinking on (what a model trained on thoughts expects); only the answer "
        "after the thought is scored "
        "(on by itself for a --run trained with --sample-task thinking)",
    )
    p.add_argument("--limit", type=int, default=None, help="only the first N problems")
    p.add_argument("--workers", type=int, default=None, help="parallel simulations (default: one per CPU)")
    p.add_argument("--timeout-s", type=float, default=sim_lib.SimConfig.timeout_s, help="per compile / simulation")
    p.add_argument("--out", default=None, help="write the per-problem JSON lines here instead of stdout")
    p.add_argument("--summary", default=None, help="also write the summary JSON here")
    p.add_argument("--save-completions", default=None, help="write the sampled completions as JSONL here")
    p.set_defaults(func=_cli, check_run=check_run, run_model=run_model)
    return p


def _fail(message: str) -> int:
    print(f"cookbook eval: {message}", file=sys.stderr)
    return 1


def _cli(args) -> int:
    try:
        return _run(args)
    except (
        problems_lib.ProblemError,
        score_lib.CompletionsError,
        sim_lib.SimulatorMissing,
        ValueError,
        FileNotFoundError,
    ) as e:
        return _fail(str(e).splitlines()[0])


def _run(args) -> int:
    from tqdm.auto import tqdm

    if args.write_sample_task:
        from cookbook import data

        problems = problems_lib.sample_task_problems(data.generate_rows("eval", n=args.limit))
        print(problems_lib.write_problems(args.write_sample_task, problems))
        return 0
    if not args.problems:
        return _fail("--problems DIR is required (or --write-sample-task DIR)")
    if not (args.endpoint or args.run or args.hf_model or args.completions):
        return _fail(
            "say where completions come from: --endpoint URL, --run RUN_DIR, --hf-model DIR or --completions FILE.jsonl"
        )
    if args.run:
        if not (Path(args.run) / "recipe.json").is_file():
            raise FileNotFoundError(
                f"{args.run} is not a training run (no recipe.json); pass a `cookbook train --out` dir"
            )
        if args.check_run is None or args.run_model is None:
            return _fail("--run needs the training stage: run it as `cookbook eval` (cookbook.harness.main)")
        args.check_run(Path(args.run))  # the weights at the recorded base path are still the ones it trained on
    every = problems_lib.load_problems(args.problems)
    problems = every[: args.limit]
    sim_lib.simulator()  # before sampling for minutes
    sampling = (
        gen_lib.GREEDY.replace(max_tokens=args.max_tokens, seed=args.seed)
        if args.greedy
        else gen_lib.SamplingConfig(
            n=args.n, temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens, seed=args.seed
        )
    )
    seeds = None
    if args.completions:
        kept = {p.name for p in problems}
        completions = {k: v for k, v in score_lib.read_completions(args.completions, every).items() if k in kept}
        n = min((len(v) for v in completions.values()), default=0)
        generation = None
    else:
        with tqdm(total=len(problems) * sampling.n, desc="sampling", file=sys.stderr, unit="sample") as bar:
            generation = _sample(args, problems, sampling, bar.update)
        completions, seeds, n = generation.completions, generation.seeds, sampling.n
    ks = args.k or [k for k in (1, 5) if k <= max(n, 1)]
    score_lib.check_completions(problems, completions, ks)  # before the progress bar
    if args.save_completions:
        score_lib.write_completions(args.save_completions, completions)
    total = sum(len(v) for v in completions.values())
    with tqdm(total=total, desc="simulating", file=sys.stderr, unit="sample") as bar:
        scores = score_lib.score(
            problems,
            completions,
            ks=ks,
            seeds=seeds,
            workers=args.workers,
            config=sim_lib.SimConfig(timeout_s=args.timeout_s),
            on_done=lambda _i, _result: bar.update(1),
        )
    out = open(args.out, "w", encoding="utf-8") if args.out else sys.stdout  # noqa: SIM115
    try:
        for row in scores.per_problem():
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    finally:
        if args.out:
            out.close()
    summary = {
        **scores.summary(),
        **({"sampling": generation.describe()} if generation else {}),
        "network_isolated": sim_lib.network_isolated(),
        "problems_dir": str(args.problems),
    }
    if args.summary:
        Path(args.summary).write_text(json.dumps(summary, indent=2))
    print("summary: " + json.dumps(summary), file=sys.stderr)
    return 0


def _sample(args, problems, sampling, tick):
    if args.endpoint:
        import os

        from openai import OpenAI

        key = (os.environ.get(args.api_key_env) if args.api_key_env else None) or "EMPTY"
        client = OpenAI(base_url=args.endpoint, api_key=key)
        model = args.model or client.models.list().data[0].id
        tokenizer = None
        if args.tokenizer:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
        return gen_lib.endpoint_samples(
            client,
            model,
            problems,
            sampling,
            tokenizer=tokenizer,
            system=args.system,
            thinking=args.thinking,
            on_done=tick,
        )
    if args.hf_model:
        from transformers import AutoTokenizer

        model = gen_lib.load_transformers_model(args.hf_model, args.adapter)
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or args.hf_model)
        return gen_lib.transformers_samples(
            model, tokenizer, problems, sampling, system=args.system, thinking=args.thinking, on_done=tick
        )
    model, tokenizer, trained_thinking = args.run_model(Path(args.run), args.base)
    thinking = args.thinking or trained_thinking  # prompted as it was trained
    generation, _ = gen_lib.tunix_samples(
        model,
        tokenizer,
        problems,
        sampling,
        system=args.system,
        thinking=thinking,
        on_done=tick,
    )
    return generation
