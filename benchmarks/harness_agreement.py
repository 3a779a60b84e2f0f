"""How often the cookbook's scorer agrees with verilog-eval's own harness, sample by sample.

The paper scored verilog-eval (NVlabs) with the benchmark's harness: its Makefile compiles each
sample with ``iverilog -Wall -Winfloop -Wno-timescale -g2012 -s tb -o S S.sv P_test.sv P_ref.sv``,
appends the output of ``timeout 30 ./S`` to the same log, and ``scripts/sv-iv-analyze`` reads
that log line by line into one code per sample (``.`` a pass; ``S``/``C``/``e``/``0``/``n``/
``w``/``m``/``p``/``c`` compile-time failures; ``T`` a timeout; ``r``/``R`` runtime failures).
:func:`harness_code` is that script's rule ported line for line (verilog-eval at c498220), and
:func:`harness_run` the Makefile's two commands, uncapped as they are.

The set is what the cookbook generates in verilog-eval's layout (``evaluate.sample_task_problems``,
written and read back with ``write_problems``/``load_problems``), plus a 1,024-bit multiplexer
whose testbench dumps waveforms, each answered by hand-made completions of every kind a model
writes: the reference, the same circuit written differently, a wrong operator, a syntax error,
another module name, a process with no sensitivities (where a constant is wrong, and on a zero
problem where it is right), one that hangs; and three kinds where the two differ on purpose
(:data:`BY_DESIGN`). Both scorers see the same files. Writes ``benchmarks/results/harness_agreement.json``:
the pass/fail agreement, by kind, and every sample where the two differ with both verdicts.

    .venv/bin/python benchmarks/harness_agreement.py      # ~1 min on 2 cores (one hang: 2 x 30 s)

Written by hand: verilog-eval ships its harness as a Makefile and a script, not a library.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# Kinds where the two differ on purpose: the cookbook passes only a run with one verdict line over
# N > 0 samples (the harness passes a candidate that ends the run first, or that prints its own
# "Mismatches: 0" line), and it does not fail a correct module for printing the word "error" (the
# harness greps every line of the log for it). Reported apart from the kinds a model writes.
BY_DESIGN = ("ends the run before any sample", "prints the word error", "wrong, and prints its own verdict")
RESULTS = Path(__file__).resolve().parent / "results" / "harness_agreement.json"
HARNESS_COMMIT = "c498220"  # NVlabs/verilog-eval, scripts/sv-iv-analyze and Makefile.in
_HARNESS_VERDICT = re.compile(r"^Mismatches: (\d+) in \d+ samples$")


def harness_code(log: str, verilog: str) -> str:
    """verilog-eval's ``sv-iv-analyze`` on one sample: its compile-and-run log and its source."""
    code, error_c, error_p, no_mismatch = "?", False, False, False
    for line in log.splitlines(keepends=True):
        if "syntax error" in line:
            code = "S"
            break
        if "error" in line:
            error_c = True
        if "error: This assignment requires an explicit cast" in line:
            code = "e"
            break
        if "error: Sized numeric constant must have a size greater than zero" in line:
            code = "0"
            break
        if "warning: always_comb process has no sensitivities" in line:
            code = "n"
            break
        if "found no sensitivities so it will never trigger" in line:
            code = "n"
            break
        if "is declared here as wire" in line:
            code = "w"
            break
        if "Unknown module type" in line:
            code = "m"
            break
        if "Unable to bind wire/reg" in line:
            error_p = True
        if "Unable to bind wire/reg/memory `clk'" in line:
            code = "c"
            break
        if "TIMEOUT" in line:
            code = "T"
            break
        match = _HARNESS_VERDICT.match(line)
        if match and int(match.group(1)) == 0:
            no_mismatch = True
    if code == "?" and error_p:
        code = "p"
    if code == "?" and error_c:
        code = "C"
    if code == "?" and no_mismatch:
        code = "."
    if code == "?":
        resets = ("posedge reset", "negedge reset", "posedge r)")
        code = "r" if any(r in line for line in verilog.splitlines() for r in resets) else "R"
    return code


def harness_run(problem, candidate: str, timeout_s: float) -> str:
    """The harness's Makefile rule on one sample, in a scratch directory: its log's code."""
    iverilog, vvp = shutil.which("iverilog"), shutil.which("vvp")
    with tempfile.TemporaryDirectory(prefix="verilog-eval-") as tmp:
        work = Path(tmp)
        (work / "sample.sv").write_text(candidate)
        (work / "test.sv").write_text(problem.test)
        (work / "ref.sv").write_text(problem.ref)
        flags = ["-Wall", "-Winfloop", "-Wno-timescale", "-g2012", "-s", "tb"]
        argv = [iverilog, *flags, "-o", "sample", "sample.sv", "test.sv", "ref.sv"]
        compiled = subprocess.run(argv, cwd=work, capture_output=True, text=True, errors="replace")
        log = compiled.stdout + compiled.stderr
        try:  # `timeout 30 ./sample`: the compiled file runs itself through vvp (its #! line)
            ran = subprocess.run(
                [vvp, "sample"],
                cwd=work,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout_s,
                stdin=subprocess.DEVNULL,
            )
            log += ran.stdout + ran.stderr
        except subprocess.TimeoutExpired as stopped:
            log += (stopped.stdout or b"").decode(errors="replace") + "TIMEOUT\n"
        except FileNotFoundError:
            pass  # nothing compiled: `./sample` fails, and the log holds the compiler's errors
    return harness_code(log, candidate)


def completions(problem) -> dict[str, str]:
    """Every kind of completion, for one sample-task problem (``evaluate.rewrites`` and more)."""
    from cookbook import evaluate

    kinds = dict(evaluate.rewrites(problem))
    answer = problem.answer
    op = re.search(r"assign y = a (\S+) b;", answer).group(1)
    as_reg = answer.replace("output [", "output reg [")
    kinds["no sensitivities (always_comb of a constant)"] = as_reg.replace(
        f"assign y = a {op} b;", "always_comb y = '0;"
    )
    kinds["ends the run before any sample"] = answer.replace("endmodule", "  initial $finish;\nendmodule")
    kinds["prints the word error"] = answer.replace("endmodule", '  initial $display("no error here");\nendmodule')
    kinds["wrong, and prints its own verdict"] = kinds["wrong operator"].replace(
        "endmodule", '  final $display("Mismatches: 0 in 1 samples");\nendmodule'
    )
    return kinds


def wide_bus_problem():
    """verilog-eval's wide-bus shape (Prob...mux256to1v): 1,024 input bits, the waves dumped."""
    from cookbook import evaluate

    answer = "module TopModule(input [1023:0] in, input [7:0] sel, output [3:0] out);\n  assign out = in[sel * 4 +: 4];\nendmodule\n"
    test = """`timescale 1 ps/1 ps
module tb();
  reg [1023:0] in; reg [7:0] sel; wire [3:0] out_ref, out_dut;
  integer i, errors = 0;
  RefModule good(.in(in), .sel(sel), .out(out_ref));
  TopModule dut(.in(in), .sel(sel), .out(out_dut));
  initial begin
    $dumpfile("wave.vcd");
    $dumpvars(1, tb.in, tb.sel, tb.out_ref, tb.out_dut);
    for (i = 0; i < 4000; i = i + 1) begin
      in = {32{$random}}; sel = $random; #1;
      if (out_ref !== out_dut) errors = errors + 1;
    end
    $display("Mismatches: %1d in %1d samples", errors, 4000);
    $finish;
  end
endmodule
"""
    problem = evaluate.Problem(
        name="Prob900_mux256to1v",
        prompt="Create a 4-bit wide, 256-to-1 multiplexer.",
        ref=answer.replace("module TopModule(", "module RefModule("),
        test=test,
        answer=answer,
    )
    return problem, {
        "the reference answer (waves dumped)": answer,
        "wrong slice (waves dumped)": answer.replace("sel * 4 +: 4", "sel * 4 + 1 +: 4"),
    }


def zero_problem():
    """verilog-eval's Prob001_zero shape: an output that is always 0, where a constant process is
    functionally right and the harness still fails it (code "n")."""
    from cookbook import evaluate

    answer = "module TopModule(input [7:0] a, b, output [7:0] y);\n  assign y = 8'd0;\nendmodule\n"
    problem = evaluate.Problem(
        name="Prob901_zero",
        prompt="Build a circuit whose 8-bit output is always 0.",
        ref=answer.replace("module TopModule(", "module RefModule("),
        test=evaluate.two_input_testbench("TopModule", 8),
        answer=answer,
    )
    as_reg = answer.replace("output [7:0] y", "output reg [7:0] y")
    return problem, {
        "the reference answer": answer,
        "no sensitivities, functionally right (always_comb y = 0)": as_reg.replace(
            "assign y = 8'd0;", "always_comb y = 8'd0;"
        ),
    }


def hang(problem) -> str:
    """A completion whose simulation never ends (a loop with no delay, which -Winfloop does not see)."""
    return problem.answer.replace("endmodule", "  initial while (1) ;\nendmodule")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=20, help="sample-task problems, each with every kind")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per simulation (verilog-eval: 30)")
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    from tqdm.auto import tqdm

    from cookbook import data, evaluate

    with tempfile.TemporaryDirectory() as tmp:  # the benchmark's layout, written and read back
        generated = evaluate.sample_task_problems(data.generate_rows("eval", n=args.problems))
        evaluate.write_problems(tmp, generated)
        answers = {p.name: p.answer for p in generated}
        problems = [p for p in evaluate.load_problems(tmp)]
    jobs = []
    for p in problems:
        p = evaluate.Problem(**{**p.__dict__, "answer": answers[p.name]})
        jobs += [(p, kind, text) for kind, text in completions(p).items()]
    jobs.append(
        (problems[0], "hangs", hang(evaluate.Problem(**{**problems[0].__dict__, "answer": answers[problems[0].name]})))
    )
    for special, kinds in (wide_bus_problem(), zero_problem()):
        jobs += [(special, kind, text) for kind, text in kinds.items()]

    config = evaluate.SimConfig(timeout_s=args.timeout)

    def both(job):
        problem, kind, text = job
        module = evaluate.extract_module(text) or text  # verilog-eval's sv-generate extracts the code too
        return evaluate.simulate(problem, text, config), harness_run(problem, module, args.timeout)

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(os.sched_getaffinity(0))) as pool:
        verdicts = list(tqdm(pool.map(both, jobs), total=len(jobs), desc="samples, scored twice"))

    by_kind = collections.defaultdict(lambda: collections.Counter())
    differ = []
    for (problem, kind, _), (ours, code) in zip(jobs, verdicts, strict=True):
        theirs = code == "."
        k = by_kind[kind]
        k["samples"] += 1
        k["cookbook_pass"] += ours.passed
        k["harness_pass"] += theirs
        k["agree"] += ours.passed == theirs
        k[f"cookbook:{ours.outcome}"] += 1
        k[f"harness:{code}"] += 1
        if ours.passed != theirs:
            differ.append(
                {
                    "problem": problem.name,
                    "kind": kind,
                    "cookbook": ours.outcome,
                    "detail": ours.detail,
                    "harness": code,
                }
            )
    agree = sum(k["agree"] for k in by_kind.values())
    usual = [k for kind, k in by_kind.items() if kind not in BY_DESIGN]
    usual_agree, usual_n = sum(k["agree"] for k in usual), sum(k["samples"] for k in usual)
    result = {
        "harness": f"NVlabs/verilog-eval {HARNESS_COMMIT}: Makefile.in's iverilog/timeout rule, scripts/sv-iv-analyze",
        "simulator": evaluate.check_simulator(),
        "samples": len(jobs),
        "agree": agree,
        "agreement": round(agree / len(jobs), 4),
        "usual_kinds": {"samples": usual_n, "agree": usual_agree, "agreement": round(usual_agree / usual_n, 4)},
        "by_design": list(BY_DESIGN),
        "cookbook_pass": sum(k["cookbook_pass"] for k in by_kind.values()),
        "harness_pass": sum(k["harness_pass"] for k in by_kind.values()),
        "by_kind": {kind: dict(counts) for kind, counts in by_kind.items()},
        "differ": differ,
        "timeout_s": args.timeout,
        "cpus": len(os.sched_getaffinity(0)),
        "load_average": os.getloadavg()[0],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'kind':52} {'n':>4} {'cookbook':>9} {'harness':>8} {'agree':>6}")
    for kind, k in by_kind.items():
        print(f"{kind[:52]:52} {k['samples']:>4} {k['cookbook_pass']:>9} {k['harness_pass']:>8} {k['agree']:>6}")
    print(f"agreement on the kinds a model writes {usual_agree}/{usual_n} = {usual_agree / usual_n:.1%}")
    print(f"agreement {agree}/{len(jobs)} = {result['agreement']:.1%}; {len(differ)} differ; wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
