"""Problem sets in verilog-eval's layout, and the sample task's problems and testbenches."""

import pytest

from cookbook import data, evaluate
from cookbook.data import _sample_task

# A problem written the way verilog-eval writes them (spec prompt, RefModule, a clocked
# testbench with a stimulus module, counts printed from a `final` block), by hand.
VE_PROMPT = """I would like you to implement a module named TopModule with the following
interface. All input and output ports are one bit unless otherwise specified.

 - input  in (4 bits)
 - output out

The module should output the parity (XOR of all bits) of in.
"""
VE_REF = "module RefModule (\n  input [3:0] in,\n  output out\n);\n  assign out = ^in;\nendmodule\n"
VE_TEST = """`timescale 1 ps/1 ps
module stimulus_gen (input clk, output reg [3:0] in);
  initial begin
    repeat (40) @(posedge clk) in <= $random;
    #1 $finish;
  end
endmodule

module tb();
  reg clk = 0;
  initial forever #5 clk = ~clk;
  wire [3:0] in;
  wire out_ref, out_dut;
  int errors = 0, clocks = 0;
  stimulus_gen stim1 (.clk, .in);
  RefModule good1 (.in, .out(out_ref));
  TopModule top_module1 (.in, .out(out_dut));
  always @(posedge clk, negedge clk) begin
    clocks++;
    if (out_ref !== out_dut) errors++;
  end
  final $display("Mismatches: %1d in %1d samples", errors, clocks);
  initial begin
    #1000000 $display("TIMEOUT");
    $finish();
  end
endmodule
"""


@pytest.fixture
def ve_dir(tmp_path):
    d = tmp_path / "dataset_spec-to-rtl"
    d.mkdir()
    (d / "Prob007_parity4_prompt.txt").write_text(VE_PROMPT)
    (d / "Prob007_parity4_ref.sv").write_text(VE_REF)
    (d / "Prob007_parity4_test.sv").write_text(VE_TEST)
    (d / "README.md").write_text("not a problem file")
    return d


def test_a_verilog_eval_directory_loads_and_scores(ve_dir, iverilog):
    (problem,) = evaluate.load_problems(ve_dir)
    assert (problem.name, problem.module, problem.prompt, problem.answer) == (
        "Prob007_parity4",
        "TopModule",
        VE_PROMPT,
        None,
    )
    assert problem.messages() == [{"role": "user", "content": VE_PROMPT}]
    good = (
        "```verilog\nmodule TopModule(input [3:0] in, output out);\n  assign out = in[0] ^ in[1] ^ in[2] ^ in[3];\n"
        "endmodule\n```"
    )
    r = evaluate.simulate(problem, good)
    assert r.passed and r.samples > 40, r
    assert evaluate.simulate(problem, good.replace("^ in[3]", "| in[3]")).outcome == "mismatch"
    assert evaluate.simulate(problem, good.replace("TopModule", "Top")).outcome == "compile_error"


def test_loading_errors_name_the_fix(ve_dir, tmp_path):
    with pytest.raises(evaluate.ProblemError, match="does not exist; pass a directory of ProbNNN_name"):
        evaluate.load_problems(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(evaluate.ProblemError, match="holds no ProbNNN_name_prompt.txt"):
        evaluate.load_problems(tmp_path / "empty")
    (ve_dir / "Prob008_half_prompt.txt").write_text("x")
    (ve_dir / "Prob008_half_ref.sv").write_text("x")
    with pytest.raises(evaluate.ProblemError, match="Prob008_half has no Prob008_half_test.sv"):
        evaluate.load_problems(ve_dir)
    (ve_dir / "Prob008_half_prompt.txt").unlink()
    (ve_dir / "Prob008_half_ref.sv").unlink()
    with pytest.raises(evaluate.ProblemError, match="no problem 'Prob009_x'"):
        evaluate.load_problems(ve_dir, names=["Prob009_x"])


def test_sample_task_problems_round_trip_through_the_layout(tmp_path):
    rows = data.generate_rows("eval", n=12)
    problems = evaluate.sample_task_problems(rows)
    assert [p.name for p in problems][:2] == ["Prob001_" + problems[0].module, "Prob002_" + problems[1].module]
    assert problems[0].prompt == data.prompt_of(rows[0]) and problems[0].answer == data.answer_of(rows[0])
    loaded = evaluate.load_problems(evaluate.write_problems(tmp_path / "p", problems))
    assert [(p.name, p.prompt, p.ref, p.test, p.module) for p in loaded] == [
        (p.name, p.prompt, p.ref, p.test, p.module) for p in sorted(problems, key=lambda p: p.name)
    ]
    assert sorted(f.name for f in (tmp_path / "p").iterdir())[:3] == [
        f"{problems[0].name}_prompt.txt",
        f"{problems[0].name}_ref.sv",
        f"{problems[0].name}_test.sv",
    ]
    with pytest.raises(evaluate.ProblemError, match="not a sample-task row"):
        evaluate.sample_task_problems(
            [
                {
                    "messages": [
                        {"role": "user", "content": "hi"},
                        {"role": "assistant", "content": "module m(input a); endmodule"},
                    ]
                }
            ]
        )


@pytest.mark.parametrize("width", [2, 12, 64])
def test_the_testbench_passes_the_reference_and_fails_every_other_operator(width, iverilog):
    cases, jobs = [], []
    for verb, op in _sample_task.OPERATIONS.items():
        (p,) = evaluate.sample_task_problems([_sample_task.make_row("alu_sum", verb, width)])
        for other in _sample_task.OPERATIONS.values():
            cases.append((op, other))
            jobs.append((p, p.answer.replace(f"a {op} b", f"a {other} b")))
    for (op, other), result in zip(cases, evaluate.simulate_many(jobs), strict=True):
        assert result.outcome == ("pass" if other == op else "mismatch"), (width, op, other, result)


def test_rewrites_show_what_exact_match_misses(iverilog):
    row = _sample_task.make_row("data_mux", "multiplies", 16)
    (problem,) = evaluate.sample_task_problems([row])
    got = {
        label: (data.exact_match(c, row), evaluate.simulate(problem, c).outcome)
        for label, c in evaluate.rewrites(problem).items()
    }
    assert got == {
        "the reference answer": (True, "pass"),
        "written differently (ports, operands, comment)": (False, "pass"),
        "wrong operator": (False, "mismatch"),
        "syntax error (a semicolon missing)": (False, "compile_error"),
        "another module name": (False, "compile_error"),
    }
