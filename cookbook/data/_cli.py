"""``cookbook data``: what the pipeline makes of a data file, before any training.

The report (rows kept and dropped with row-numbered reasons, token-length percentiles and
what the too-long policy did) and N rows rendered by the preset's chat template with the
spans the loss covers marked; ``--json`` gives the same for machines.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from cookbook import core
from cookbook.data._config import DataConfig
from cookbook.data._formats import FORMATS
from cookbook.data._rows import DataError, read_rows, to_conversation
from cookbook.data._tokenize import prepare_examples, render, tokenize_chat, trained_spans

OPEN, CLOSE = "[[", "]]"  # how the text view marks what the loss covers


def register_cli(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "data",
        help="check a data file: rows kept and dropped, lengths, rendered rows with the trained spans",
        description="Read a data file as `cookbook train` would, with the preset's Gemma 4 chat template: "
        "report every dropped or truncated row with its reason, the token-length distribution "
        f"and the too-long policy, and show rows with the spans the loss covers between {OPEN} "
        f"and {CLOSE}. Exit status 1 when training would refuse the data.",
    )
    p.add_argument("--data", required=True, help="a .jsonl/.json/.parquet file of rows")
    p.add_argument(
        "--format",
        dest="data_format",
        default="auto",
        choices=list(FORMATS),
        help="the rows' layout (default: auto, per row). "
        + "; ".join(f"{k}: {v}" for k, v in FORMATS.items() if k != "auto"),
    )
    p.add_argument(
        "--columns",
        default=None,
        metavar="system=COL,prompt=COL,response=COL",
        help="with --format columns: which columns hold the system prompt, prompt and response",
    )
    p.add_argument("--preset", default="tiny", help="model preset whose tokenizer renders the rows")
    p.add_argument("--base", default=None, help="take the tokenizer from this checkpoint directory instead")
    p.add_argument(
        "--seq-len",
        type=int,
        default=None,
        help="tokens per row (default: the preset's training layout, the planner's recommended one "
        f"for a real preset, {DataConfig.seq_len} for the random CPU presets)",
    )
    p.add_argument("--too-long", choices=("drop", "truncate"), default="drop", help="what happens to longer rows")
    p.add_argument(
        "--max-bad-fraction",
        type=float,
        default=DataConfig.max_bad_fraction,
        help="training refuses the data when more rows than this fraction are dropped",
    )
    p.add_argument("--show", type=int, default=3, metavar="N", help="rows to render (default 3)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.set_defaults(func=_cli)


def default_seq_len(preset: str) -> int:
    """The sequence length ``preset`` trains at: its compiled layout's (real presets), else the
    CPU recipe's (:class:`DataConfig`'s default)."""
    from cookbook import fit, models

    if models.get_preset(preset).hf_checkpoint is None:
        return DataConfig.seq_len
    return int(fit.recommended_training(preset)["seq_len"])


def inspect(source: Any, tokenizer, config: DataConfig, show: int = 3) -> dict[str, Any]:
    """The report and the first ``show`` kept rows, rendered, as one JSON-able dict.

    Each shown row: its row number, the rendered text, the character spans the loss covers
    (``[start, end)``), its token count and trained-token count.
    """
    raw_rows, _ = read_rows(source)
    everything = dataclasses.replace(config, max_bad_fraction=1.0)  # report, never refuse here
    try:
        examples, report = prepare_examples(source, tokenizer, everything)
    except DataError as e:
        return {"error": core.one_line(e), "report": None, "rows": []}
    shown = []
    for ex in examples[: max(show, 0)]:
        text = render(tokenizer, to_conversation(raw_rows[ex.row - 1], config.data_format, config.columns))
        shown.append(
            {
                "row": ex.row,
                "text": text,
                "trained_spans": [list(s) for s in trained_spans(text)],
                "num_tokens": int(len(ex.token_ids)),
                "num_trained_tokens": int(ex.loss_mask.sum()),
            }
        )
    pct = report.length_percentiles()
    return {
        "report": {
            "num_rows": report.num_rows,
            "num_kept": report.num_kept,
            "num_dropped": report.num_dropped,
            "num_truncated": report.num_truncated,
            "num_tokens": report.num_tokens,
            "num_trained_tokens": report.num_loss_tokens,
            "seq_len": config.seq_len,
            "too_long": config.too_long,
            "num_over_seq_len": report.num_over,
            "length_percentiles": {("max" if q == 100 else f"p{q}"): n for q, n in pct.items()},
            "problems": [dataclasses.asdict(p) for p in report.problems],
            "bad_fraction": report.bad_fraction,
            "max_bad_fraction": config.max_bad_fraction,
            "trainable": report.bad_fraction <= config.max_bad_fraction,
        },
        "summary": report.summary(max_listed=20),
        "rows": shown,
    }


def plot_lengths(report, ax=None):
    """Histogram of the rendered rows' token lengths, with ``seq_len`` and the percentiles."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 2.8))
    ax.hist(report.lengths, bins=40, color="tab:blue", alpha=0.8)
    for q, n in report.length_percentiles((50, 90, 99)).items():
        ax.axvline(n, color="grey", ls=":", lw=1)
        ax.text(n, ax.get_ylim()[1] * 0.9, f" p{q}", color="grey", fontsize=8)
    if report.seq_len:
        ax.axvline(
            report.seq_len,
            color="tab:red",
            lw=1.5,
            label=f"seq_len={report.seq_len}: {report.num_over} rows over ({report.too_long})",
        )
        ax.legend(loc="upper right", fontsize=8)
    ax.set_xlabel("tokens per rendered row")
    ax.set_ylabel("rows")
    return ax


def marked(text: str, spans: list[list[int]]) -> str:
    """``text`` with each trained span between :data:`OPEN` and :data:`CLOSE`."""
    out, pos = [], 0
    for start, end in spans:
        out += [text[pos:start], OPEN, text[start:end], CLOSE]
        pos = end
    return "".join([*out, text[pos:]])


def format_view(view: dict[str, Any]) -> str:
    """:func:`inspect`'s result as ``cookbook data`` prints it: the report's summary (or why the
    data could not be read), then each shown row with its trained spans marked."""
    if view["report"] is None:
        return view["error"]
    out = [view["summary"]]
    for r in view["rows"]:
        out.append(
            f"\n--- row {r['row']}: {r['num_tokens']} tokens, {r['num_trained_tokens']} trained "
            f"(between {OPEN} and {CLOSE}) ---\n" + marked(r["text"], r["trained_spans"])
        )
    return "\n".join(out)


def marked_tokens(tokenizer, row: dict) -> str:
    """A row as the trainer tokenises it (``tokenize_chat``), each run of trained tokens between
    :data:`OPEN` and :data:`CLOSE`: the loss mask at the token level."""
    ids, mask = tokenize_chat(tokenizer, row)
    out, inside = [], False
    for token, trained in zip(ids, mask, strict=True):
        if bool(trained) != inside:
            out.append(OPEN if trained else CLOSE)
            inside = bool(trained)
        out.append(tokenizer.decode([int(token)]))
    return "".join(out + ([CLOSE] if inside else []))


@core.user_errors("data", DataError, code=1)
def _cli(args: argparse.Namespace) -> int:
    from cookbook.data._tokenize import load_tokenizer

    if args.show < 0:
        raise ValueError(f"--show {args.show}: pass 0 or more rows to render")
    config = DataConfig(
        seq_len=args.seq_len or default_seq_len(args.preset),
        too_long=args.too_long,
        max_bad_fraction=args.max_bad_fraction,
        data_format=args.data_format,
        columns=args.columns,
    )
    if not Path(args.data).is_file():  # before the tokenizer loads: a typo should cost nothing
        raise FileNotFoundError(
            f"--data {args.data}: the file does not exist; pass a .jsonl, .json or .parquet file of rows"
        )
    tokenizer = load_tokenizer(args.preset, base_dir=args.base)
    result = inspect(args.data, tokenizer, config, show=args.show)
    if args.json:
        print(json.dumps({k: v for k, v in result.items() if k != "summary"}, indent=1, ensure_ascii=False))
    elif result["report"] is None:
        print(f"cookbook data: {result['error']}", file=sys.stderr)
    else:
        print(format_view(result))
    report = result["report"]
    if report is None or not report["trainable"]:
        if report is not None and not args.json:
            print(
                f"\ncookbook data: {report['num_dropped']} of {report['num_rows']} rows are dropped "
                f"({report['bad_fraction']:.1%}), over --max-bad-fraction {args.max_bad_fraction:.1%}: "
                "`cookbook train` would refuse this data; fix the rows listed above",
                file=sys.stderr,
            )
        return 1
    return 0
