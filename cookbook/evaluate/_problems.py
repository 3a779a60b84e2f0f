"""Problem sets in verilog-eval's layout, and the sample task's held-out problems written in it.

verilog-eval (NVlabs, the benchmark the paper scored) keeps one problem as three files in a
directory: ``ProbNNN_name_prompt.txt`` (the specification the model reads),
``ProbNNN_name_ref.sv`` (a reference implementation, module ``RefModule``) and
``ProbNNN_name_test.sv`` (a testbench, top module ``tb``, that drives the reference and the
candidate with the same stimulus and ends by printing ``Mismatches: M in N samples``).
:func:`load_problems` reads such a directory, so a user with the real benchmark points the
cookbook at it. :func:`sample_task_problems` writes the cookbook's own held-out Verilog rows in
the same layout (prompt, reference, a self-checking testbench with edge-case and random
vectors), so CI exercises the very path the benchmark takes.

Written by hand: verilog-eval ships no library for this (its scripts are a Makefile flow),
and the sample task's testbench generator is the cookbook's own.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from cookbook import data as data_lib

_FILE = re.compile(r"^(Prob\d+_.+?)_(prompt\.txt|ref\.sv|test\.sv)$")
_PARTS = ("prompt.txt", "ref.sv", "test.sv")
REF_MODULE = "RefModule"  # verilog-eval's name for the reference implementation
TESTBENCH_TOP = "tb"  # verilog-eval's testbench top module
RANDOM_VECTORS = 200  # random stimulus per sample-task problem, after the edge cases


class ProblemError(ValueError):
    """A problem set could not be read (the message names the file and the fix)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Problem:
    """One spec-to-RTL problem: what the model is asked, and how its answer is checked."""

    name: str  # "Prob001_zero"
    prompt: str  # the specification, sent to the model as the user turn
    ref: str  # reference implementation (module RefModule)
    test: str  # testbench (top module tb) printing "Mismatches: M in N samples"
    module: str = "TopModule"  # the module name the testbench instantiates
    answer: str | None = None  # the exact-match reference answer, where there is one (sample task)

    def messages(self, system: str | None = None) -> list[dict[str, str]]:
        """The chat the model sees: the prompt as the user turn (after an optional system turn)."""
        turns = [{"role": "system", "content": system}] if system else []
        return [*turns, {"role": "user", "content": self.prompt}]


def load_problems(directory: str | Path, *, names: list[str] | None = None) -> list[Problem]:
    """Every complete problem in a verilog-eval style directory, sorted by name.

    Args:
      directory: holds ``ProbNNN_name_{prompt.txt,ref.sv,test.sv}`` files (verilog-eval's
        ``dataset_spec-to-rtl/``, or what :func:`write_problems` wrote).
      names: keep only these problems (all must exist).

    Raises:
      ProblemError: the directory is missing, holds no problem, or a problem lacks one of
        its three files.
    """
    root = Path(directory)
    if not root.is_dir():
        raise ProblemError(
            f"problems directory {str(root)!r} does not exist; pass a directory of "
            "ProbNNN_name_prompt.txt / _ref.sv / _test.sv files (verilog-eval's "
            "dataset_spec-to-rtl, or cookbook.evaluate.write_problems)"
        )
    parts: dict[str, dict[str, Path]] = {}
    for path in root.iterdir():
        m = _FILE.match(path.name)
        if m and path.is_file():
            parts.setdefault(m.group(1), {})[m.group(2)] = path
    if not parts:
        raise ProblemError(f"{root} holds no ProbNNN_name_prompt.txt / _ref.sv / _test.sv files")
    incomplete = {n: sorted(set(_PARTS) - set(p)) for n, p in parts.items() if set(p) != set(_PARTS)}
    if incomplete:
        name, missing = sorted(incomplete.items())[0]
        raise ProblemError(
            f"{root}: problem {name} has no {', '.join(f'{name}_{m}' for m in missing)}"
            f" ({len(incomplete)} incomplete problem(s)); every problem needs all three files"
        )
    wanted = sorted(parts) if names is None else list(names)
    unknown = [n for n in wanted if n not in parts]
    if unknown:
        raise ProblemError(f"{root} has no problem {unknown[0]!r} ({len(parts)} problems there)")
    problems = []
    for name in wanted:
        p = parts[name]
        test = p["test.sv"].read_text()
        problems.append(
            Problem(
                name=name,
                prompt=p["prompt.txt"].read_text(),
                ref=p["ref.sv"].read_text(),
                test=test,
                module=_dut_module(test),
            )
        )
    return problems


def write_problems(directory: str | Path, problems: list[Problem]) -> Path:
    """Write problems as verilog-eval files (``ProbNNN_name_prompt.txt``, ``_ref.sv``, ``_test.sv``)."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    for p in problems:
        if not re.fullmatch(r"Prob\d+_\w+", p.name):
            raise ProblemError(f"problem name {p.name!r} is not verilog-eval's ProbNNN_name")
        (root / f"{p.name}_prompt.txt").write_text(p.prompt)
        (root / f"{p.name}_ref.sv").write_text(p.ref)
        (root / f"{p.name}_test.sv").write_text(p.test)
    return root


def _dut_module(test: str) -> str:
    """The module the testbench instantiates besides the reference (verilog-eval: TopModule)."""
    declared = set(re.findall(r"(?m)^\s*module\s+(\w+)", test)) | {REF_MODULE} | _KEYWORDS
    for name, _instance in re.findall(r"(?m)^\s*(\w+)\s+(\w+)\s*\(", test):
        if name not in declared:
            return name
    return "TopModule"


_KEYWORDS = {
    "module",
    "task",
    "function",
    "if",
    "else",
    "for",
    "while",
    "case",
    "repeat",
    "begin",
    "end",
    "initial",
    "always",
    "final",
    "assign",
    "wire",
    "reg",
    "logic",
    "bit",
    "int",
    "integer",
    "input",
    "output",
    "inout",
    "forever",
    "fork",
}


# ------------------------------------------------------------------------------------------
# The sample task, as verilog-eval problems
_ANSWER = re.compile(r"module\s+(\w+)\s*\(input\s*\[(\d+):0\]\s*a,\s*b,\s*output\s*\[(\d+):0\]\s*y\);")


def sample_task_problems(rows: list[dict], *, random_vectors: int = RANDOM_VECTORS) -> list[Problem]:
    """The sample task's rows (``cookbook.data.generate_rows("eval")``) as verilog-eval problems.

    Problem ``i`` is ``Prob{i+1:03d}_<module name>``; its prompt is the row's instruction (what
    the model was trained to answer), its reference the row's answer renamed ``RefModule``, its
    testbench drives both with edge cases (zeros, all ones, one, the top bit alone, alternating
    bits, each against each) and then ``random_vectors`` random pairs, and counts outputs that
    differ (``!==``: an X or Z from the candidate is a mismatch).
    """
    problems = []
    for i, row in enumerate(rows):
        answer = data_lib.answer_of(row).strip()
        m = _ANSWER.match(answer)
        if m is None or m.group(2) != m.group(3):
            raise ProblemError(f"row {i + 1} is not a sample-task row (answer {answer[:60]!r}...)")
        module, width = m.group(1), int(m.group(2)) + 1
        problems.append(
            Problem(
                name=f"Prob{i + 1:03d}_{module}",
                prompt=data_lib.prompt_of(row),
                module=module,
                answer=answer,
                ref=answer.replace(f"module {module}(", f"module {REF_MODULE}(", 1) + "\n",
                test=two_input_testbench(module, width, random_vectors=random_vectors, seed=i + 1),
            )
        )
    return problems


def rewrites(problem: Problem) -> dict[str, str]:
    """Hand-made answers to a sample-task problem, to show what each metric sees (notebook 06).

    ``{label: completion}``: the reference itself; the same circuit written differently
    (ports in another order, the operands of a commutative operator swapped or a procedural
    block, a comment: exact match fails it, the simulator passes it); a wrong operator; a
    missing semicolon; a module under another name.
    """
    if problem.answer is None:
        raise ProblemError(f"{problem.name} has no reference answer to rewrite (not a sample-task problem)")
    m = _ANSWER.match(problem.answer)
    if m is None:
        raise ProblemError(f"{problem.name}'s answer is not a sample-task module: {problem.answer[:60]!r}")
    module, msb = m.group(1), m.group(2)
    op = re.search(r"assign y = a (\S+) b;", problem.answer).group(1)
    swapped = f"b {op} a" if op in "+*&|^" else f"a {op} b"
    wrong = "^" if op != "^" else "|"
    return {
        "the reference answer": problem.answer,
        "written differently (ports, operands, comment)": (
            f"module {module}(\n  input [{msb}:0] b,  // ports in another order\n  input [{msb}:0] a,\n"
            f"  output reg [{msb}:0] y\n);\n  always @* y = {swapped};\nendmodule"
        ),
        "wrong operator": problem.answer.replace(f"a {op} b", f"a {wrong} b"),
        "syntax error (a semicolon missing)": problem.answer.replace(f"a {op} b;", f"a {op} b"),
        "another module name": problem.answer.replace(f"module {module}(", f"module {module}_v2(", 1),
    }


def _edge_values(width: int) -> list[int]:
    top = (1 << width) - 1
    alt = int("01" * width, 2) & top
    return sorted({0, 1, top, 1 << (width - 1), alt, alt ^ top})


def two_input_testbench(module: str, width: int, *, random_vectors: int = RANDOM_VECTORS, seed: int = 1) -> str:
    """A self-checking testbench for ``module(input [W-1:0] a, b, output [W-1:0] y)``.

    Ports are connected by name, so a candidate that declares them in another order still
    passes. The counts are printed from a ``final`` block in verilog-eval's words, so a
    candidate that ends the simulation early reports the samples it did get through.
    """
    msb = width - 1
    edges = _edge_values(width)
    lit = [f"{width}'h{v:x}" for v in edges]
    pairs = "\n".join(f"    a = {x}; b = {y}; check();" for x in lit for y in lit)
    words = (width + 31) // 32  # $random gives 32 bits: concatenate enough of them
    draw = "{" + ", ".join(["$random(seed)"] * words) + "}"
    return f"""`timescale 1 ps/1 ps
// Self-checking testbench: {module} against {REF_MODULE}, {len(edges) ** 2} edge-case pairs
// then {random_vectors} random pairs. Generated by cookbook.evaluate.two_input_testbench.
module {TESTBENCH_TOP};
  reg [{msb}:0] a, b;
  wire [{msb}:0] y_ref, y_dut;
  integer errors = 0, samples = 0, i, seed = {seed};

  {REF_MODULE} good1 (.a(a), .b(b), .y(y_ref));
  {module} top_module1 (.a(a), .b(b), .y(y_dut));

  task check();
    begin
      #1;
      samples = samples + 1;
      if (y_dut !== y_ref) errors = errors + 1;
    end
  endtask

  initial begin
{pairs}
    for (i = 0; i < {random_vectors}; i = i + 1) begin
      a = {draw}; b = {draw}; check();
    end
    $finish;
  end

  final begin
    $display("Hint: Total mismatched samples is %1d out of %1d samples", errors, samples);
    $display("Mismatches: %1d in %1d samples", errors, samples);
  end
endmodule
"""
