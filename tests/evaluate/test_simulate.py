"""cookbook.evaluate's scorer on hand-made completions: real iverilog, every outcome told apart."""

import time

import pytest

from cookbook import data, evaluate

ROW = {
    "messages": [
        {"role": "user", "content": "Write a Verilog module named add8 that adds two 8-bit inputs."},
        {
            "role": "assistant",
            "content": "module add8(input [7:0] a, b, output [7:0] y);\n  assign y = a + b;\nendmodule",
        },
    ]
}

REWRITTEN = """module add8(
  input  [7:0] b,   // the other port order
  input  [7:0] a,
  output reg [7:0] y
);
  always @* y = b + a;  /* operands swapped, a procedural block */
endmodule"""


def test_correct_module_passes_over_all_samples(adder8):
    r = evaluate.simulate(adder8, adder8.answer)
    assert r.outcome == "pass" and r.passed
    assert r.mismatches == 0 and r.samples == 36 + 200  # 6 x 6 edge-case pairs, then the random ones


def test_the_same_module_written_differently_passes_where_exact_match_fails(adder8):
    assert not data.exact_match(REWRITTEN, ROW)
    assert evaluate.simulate(adder8, REWRITTEN).outcome == "pass"
    spaced = adder8.answer.replace("a + b", "a+b").replace("endmodule", "// done\nendmodule")
    assert not data.exact_match(spaced, ROW) and evaluate.simulate(adder8, spaced).passed


@pytest.mark.parametrize(
    "completion, outcome, detail",
    [
        (
            "module add8(input [7:0] a, b, output [7:0] y);\n  assign y = a - b;\nendmodule",
            "mismatch",
            "mismatches in 236",
        ),
        ("module add8(input [7:0] a, b, output [7:0] y);\n  assign y = a | b;\nendmodule", "mismatch", "mismatches"),
        ("module add8(input [3:0] a, b, output [3:0] y);\n  assign y = a + b;\nendmodule", "mismatch", "mismatches"),
        (
            "module add8(input [7:0] a, b, output [7:0] y)\n  assign y = a + b;\nendmodule",
            "compile_error",
            "syntax error",
        ),
        (
            "module add_8(input [7:0] a, b, output [7:0] y);\n  assign y = a + b;\nendmodule",
            "compile_error",
            "Unknown module type: add8",
        ),
        (
            "module add8(input [7:0] x, z, output [7:0] y);\n  assign y = x + z;\nendmodule",
            "compile_error",
            "is not a port",
        ),
        (
            "module add8(input [7:0] a, b, output [7:0] y);\n  assign y = a + b;\n  initial $finish;\nendmodule",
            "no_samples",
            "0 mismatches in 0 samples",
        ),
        (
            "module add8(input [7:0] a, b, output [7:0] y);\n  assign y = a + b;\n"
            '  initial repeat (100000) $display("spam spam spam spam spam spam spam spam spam spam");\nendmodule',
            "runtime_error",
            "output over the limit",
        ),
        (
            "module add8(input [7:0] a, b, output [7:0] y);\n  assign y = a + b;\n"
            '  initial $display("Mismatches: 0 in 5 samples");\nendmodule',
            "runtime_error",
            "want exactly one",
        ),
        ("I cannot write Verilog, but here is an adder: y = a + b.", "no_module", "no `module"),
    ],
)
def test_each_failure_has_its_own_outcome(adder8, completion, outcome, detail):
    r = evaluate.simulate(adder8, completion, evaluate.SimConfig(max_output_bytes=64 << 10))
    assert (r.outcome, r.passed) == (outcome, False), r
    assert detail in r.detail, r


def test_infinite_loop_times_out_without_hanging(adder8):
    looping = "module add8(input [7:0] a, b, output [7:0] y);\n  initial while (1) ;\n  assign y = a + b;\nendmodule"
    t0 = time.perf_counter()
    r = evaluate.simulate(adder8, looping, evaluate.SimConfig(timeout_s=1.5))
    elapsed = time.perf_counter() - t0
    assert r.outcome == "timeout" and "ran over 1.5 s" in r.detail
    assert 1.5 <= elapsed < 6, elapsed  # killed at the limit, process group and all


def test_a_pool_keeps_order_and_outcomes(adder8):
    wrong = adder8.answer.replace("a + b", "a ^ b")
    jobs = [(adder8, c) for c in [adder8.answer, wrong, "no code", REWRITTEN] * 3]
    seen = []
    results = evaluate.simulate_many(jobs, workers=2, on_done=lambda i, r: seen.append(i))
    assert [r.outcome for r in results] == ["pass", "mismatch", "no_module", "pass"] * 3
    assert sorted(seen) == list(range(12))


@pytest.mark.parametrize(
    "completion",
    [
        "```verilog\nmodule add8(input [7:0] a, b, output [7:0] y);\n  assign y = a + b;\nendmodule\n```\nDone.",
        "Here it is:\n```systemverilog\nmodule add8(input [7:0] a, b, output [7:0] y);\n  assign y = a + b;\nendmodule",
        "Sure, the module:\nmodule add8(input [7:0] a, b, output [7:0] y);\n  assign y = a + b;\nendmodule\nHope it helps",
        "module add8(input [7:0] a, b, output [7:0] y);\n  assign y = a + b;\nendmodule<turn|>module junk(",
        "```\nnot code\n```\n```sv\nmodule add8(input [7:0] a, b, output [7:0] y);\n  assign y = a + b;\nendmodule\n```",
    ],
)
def test_module_is_extracted_from_fences_prose_and_truncated_fences(adder8, completion):
    code = evaluate.extract_module(completion)
    assert code == adder8.answer + "\n"
    assert evaluate.simulate(adder8, completion).passed


def test_extraction_keeps_helper_modules_and_unfinished_code():
    two = (
        "module half(input a, output y); assign y = a; endmodule\nmodule top(input a, output y);\n"
        "  half h(.a(a), .y(y));\nendmodule\nThat is all."
    )
    assert evaluate.extract_module(two) == two.removesuffix("\nThat is all.") + "\n"
    cut = "```verilog\nmodule top(input a, output y);\n  assign y ="
    assert evaluate.extract_module(cut) == "module top(input a, output y);\n  assign y =\n"
    assert evaluate.extract_module("the word module alone, in prose") is None


def test_missing_simulator_is_one_line_naming_the_package(adder8, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(evaluate.SimulatorMissing, match="apt-get install iverilog") as e:
        evaluate.simulate(adder8, adder8.answer)
    assert "\n" not in str(e.value)


def test_a_wide_bus_testbench_that_dumps_waves_passes_a_correct_module(iverilog):
    """verilog-eval's testbenches dump waveforms; on a 1024-bit bus over many samples the dump is
    megabytes, past the cap on what a run may write, and killed a correct module (vvp exit 153,
    SIGXFSZ) that the benchmark's harness passes. The dump is suppressed; the cap still holds for
    what a candidate itself writes."""
    answer = (
        "module mux256(input [1023:0] in, input [7:0] sel, output [3:0] out);\n"
        "  assign out = in[sel * 4 +: 4];\nendmodule"
    )
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
        name="Prob999_mux256",
        prompt="Write a 256-to-1 4-bit multiplexer.",
        ref=answer.replace("module mux256(", "module RefModule("),
        module="TopModule",
        answer=answer.replace("module mux256(", "module TopModule("),
        test=test,
    )
    small_cap = evaluate.SimConfig(max_output_bytes=256 << 10)  # the dump would be ~4 MB
    r = evaluate.simulate(problem, problem.answer, small_cap)
    assert r.outcome == "pass" and r.samples == 4000, r
    wrong = problem.answer.replace("sel * 4 +: 4", "sel * 4 + 1 +: 4")
    assert evaluate.simulate(problem, wrong, small_cap).outcome == "mismatch"
    flood = problem.answer.replace("endmodule", '  initial repeat (100000) $display("%0128h", in);\nendmodule')
    r = evaluate.simulate(problem, flood, small_cap)
    assert r.outcome == "runtime_error" and "output over the limit" in r.detail, r  # the cap still holds


def test_a_process_with_no_sensitivities_fails_as_in_verilog_eval(iverilog):
    """`always_comb y = 0;` simulates correctly (always_comb runs once at time 0) and iverilog only
    warns, but verilog-eval's harness fails it (code "n"): a pass here must be a pass there."""
    zero = "module zero8(input [7:0] a, b, output [7:0] y);\n  assign y = 8'd0;\nendmodule"
    problem = evaluate.Problem(
        name="Prob998_zero8",
        prompt="Write a module whose 8-bit output is always zero.",
        ref=zero.replace("module zero8(", "module RefModule("),
        module="zero8",
        answer=zero,
        test=evaluate.two_input_testbench("zero8", 8),
    )
    assert evaluate.simulate(problem, zero).passed
    sensitive = zero.replace("output [7:0] y", "output reg [7:0] y").replace(
        "assign y = 8'd0;", "always_comb y = a & 8'd0;"
    )
    assert evaluate.simulate(problem, sensitive).passed  # it reads a: it has a sensitivity
    for body in ("always_comb y = 8'd0;", "always @(*) y = 8'd0;"):
        module = zero.replace("output [7:0] y", "output reg [7:0] y").replace("assign y = 8'd0;", body)
        r = evaluate.simulate(problem, module)
        assert r.outcome == "compile_error" and "no sensitivities" in r.detail and "verilog-eval" in r.detail, (body, r)
