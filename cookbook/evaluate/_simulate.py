"""The functional scorer: a completion's module compiled with Icarus Verilog against the problem's
reference and testbench, simulated, and judged by the testbench's own mismatch count.

As verilog-eval scores a sample: ``iverilog -Wall -Winfloop -Wno-timescale -g2012 -s tb``
over the candidate, the testbench and the reference, then ``vvp -n`` under a 30 s timeout, and a
pass is the line ``Mismatches: 0 in N samples`` with no compile warning that the benchmark's
harness fails (:data:`HARNESS_FAILING_WARNINGS`); here N must also be more than zero (a candidate
that stops the simulation before any sample would otherwise pass), and the verdict line must be the
only one. ``benchmarks/harness_agreement.py`` measures how often this verdict equals the harness's. Each simulation runs in its own
temporary directory, under a wall-clock timeout (its process group is killed), with its
output going to a file capped by ``ulimit -f`` and its memory by ``ulimit -v``, inside an
empty network namespace where the host allows one (``unshare -rn``; Icarus itself has no
network primitives). Many run at once in a thread pool: the work is in the subprocesses.

verilog-eval's testbenches dump waveforms (``$dumpfile``/``$dumpvars``); on a wide bus (a
1024-bit mux input, a 512-cell automaton) the dump alone runs past any sane cap on what a run may
write, and a correct module was killed ("vvp exited with 153": SIGXFSZ) where the benchmark's own
harness, which caps nothing, passes it. ``vvp``'s ``-none`` suppresses the dump (nothing in a
waveform decides the verdict), so the cap only stops a candidate that floods stdout or a file.

Every outcome is recorded by name (:data:`OUTCOMES`), so a syntax error, a wrong module name,
a hang and a wrong answer are told apart. Written by hand: no Python library wraps this.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from cookbook import data as data_lib
from cookbook.evaluate._problems import TESTBENCH_TOP, Problem

# pass: zero mismatches over N > 0 samples; mismatch: the testbench counted differences;
# no_samples: it counted none (the candidate ended the run first); compile_error: iverilog
# rejected it (syntax, unknown module, wrong ports); timeout: the wall-clock limit (or the
# testbench's own TIMEOUT); runtime_error: vvp failed, wrote too much, or printed no single
# verdict; no_module: the completion holds no `module ... ` at all.
OUTCOMES = ("pass", "mismatch", "no_samples", "compile_error", "timeout", "runtime_error", "no_module")
IVERILOG_FLAGS = ("-Wall", "-Winfloop", "-Wno-timescale", "-g2012")
# Compile warnings that verilog-eval's harness (scripts/sv-iv-analyze) scores as a failure, code "n":
# a process with no sensitivities. `always_comb y = 0;` simulates correctly (always_comb runs once
# at time 0) and iverilog exits 0, but the benchmark fails it, so a pass here must too.
HARNESS_FAILING_WARNINGS = (
    "always_comb process has no sensitivities",
    "found no sensitivities so it will never trigger",
)
INSTALL_HINT = (
    "Icarus Verilog is not installed: apt-get install iverilog (Debian/Ubuntu; brew install icarus-verilog on macOS)"
)
_VERDICT = re.compile(r"^Mismatches: (\d+) in (\d+) samples\s*$", re.M)
_MODULE_START = re.compile(r"(?m)^[ \t]*(?:\(\*.*?\*\)\s*)?(?:module|macromodule)\s+[A-Za-z_]\w*")
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n?")


class SimulatorMissing(RuntimeError):
    """iverilog / vvp are not on PATH."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class SimConfig:
    """How one simulation is confined."""

    timeout_s: float = 30.0  # wall clock for compile and for simulation, each (verilog-eval's 30 s)
    max_output_bytes: int = 1 << 20  # what the simulation may write (stdout, dumps)
    max_memory_mib: int = 2048  # virtual memory per process
    isolate_network: bool = True  # unshare -rn where the host allows it


@dataclasses.dataclass(frozen=True, kw_only=True)
class SimResult:
    """The verdict on one completion."""

    outcome: str  # one of OUTCOMES
    mismatches: int | None = None
    samples: int | None = None
    detail: str = ""  # the first error line, or why it did not pass
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.outcome == "pass"

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def simulator() -> tuple[str, str]:
    """Paths of ``iverilog`` and ``vvp``; :class:`SimulatorMissing` with the install line if absent."""
    iverilog, vvp = shutil.which("iverilog"), shutil.which("vvp")
    if not (iverilog and vvp):
        raise SimulatorMissing(INSTALL_HINT)
    return iverilog, vvp


def check_simulator() -> str:
    """The Icarus Verilog version line (raises :class:`SimulatorMissing` when it is absent)."""
    iverilog, _ = simulator()
    out = subprocess.run([iverilog, "-V"], capture_output=True, text=True, timeout=30).stdout
    return out.splitlines()[0] if out else "iverilog (version unknown)"


@functools.cache
def _netns_prefix() -> tuple[str, ...]:
    """``unshare -rn`` when this host lets an unprivileged process make a network namespace."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return ()
    try:
        ok = subprocess.run([unshare, "-rn", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return (unshare, "-rn") if ok else ()


def network_isolated() -> bool:
    """Whether simulations here run in an empty network namespace."""
    return bool(_netns_prefix())


# ------------------------------------------------------------------------------------------
# The module out of a completion
def extract_module(completion: str) -> str | None:
    """The Verilog a completion contains, from its first ``module`` to its last ``endmodule``.

    A Markdown fence (```` ```verilog ````, ```` ```systemverilog ````, plain ```` ``` ````) is
    preferred when one holds a module; an opened fence that never closes (the budget ran
    out) counts to the end. Text after ``<turn|>`` / ``<eos>`` is dropped first. Returns None
    when there is no module; a module without ``endmodule`` is returned as it is (the
    compiler then says what is wrong).
    """
    text = data_lib.clean_completion(completion)
    for block in _fenced_blocks(text):
        code = _module_span(block)
        if code is not None:
            return code
    return _module_span(text)


def _fenced_blocks(text: str) -> list[str]:
    blocks, pos = [], 0
    while True:
        m = _FENCE.search(text, pos)
        if m is None:
            return blocks
        end = text.find("```", m.end())
        blocks.append(text[m.end() : end if end >= 0 else len(text)])
        if end < 0:
            return blocks
        pos = end + 3


def _module_span(text: str) -> str | None:
    m = _MODULE_START.search(text)
    if m is None:
        return None
    end = text.rfind("endmodule")
    body = text[m.start() : end + len("endmodule")] if end > m.start() else text[m.start() :]
    return body.strip() + "\n"


# ------------------------------------------------------------------------------------------
# One simulation
def _run(argv: Sequence[str], cwd: Path, log: Path, cfg: SimConfig) -> tuple[int | None, float]:
    """Run ``argv`` confined; returns (exit code or None on timeout, seconds)."""
    blocks = max(1, cfg.max_output_bytes // 512)  # dash's ulimit -f counts 512-byte blocks
    limits = f'ulimit -f {blocks} 2>/dev/null; ulimit -v {cfg.max_memory_mib * 1024} 2>/dev/null; exec "$@"'
    prefix = _netns_prefix() if cfg.isolate_network else ()
    t0 = time.perf_counter()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*prefix, "/bin/sh", "-c", limits, "sh", *argv],
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"},
        )
        try:
            code = proc.wait(timeout=cfg.timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
    return code, time.perf_counter() - t0


def _read(log: Path, limit: int) -> str:
    with open(log, "rb") as f:
        return f.read(limit).decode("utf-8", errors="replace")


def _first_error(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for line in lines:
        if "error" in line.lower() or "syntax" in line.lower():
            return line[:300]
    return (lines[0] if lines else "")[:300]


def simulate(problem: Problem, completion: str, config: SimConfig | None = None) -> SimResult:
    """Compile and run one completion against ``problem``'s reference and testbench."""
    config = config or SimConfig()
    iverilog, vvp = simulator()
    code = extract_module(completion)
    if code is None:
        return SimResult(outcome="no_module", detail="no `module NAME` in the completion")
    with tempfile.TemporaryDirectory(prefix="cookbook-sim-") as tmp:
        work = Path(tmp)
        (work / "candidate.sv").write_text(code)
        (work / "test.sv").write_text(problem.test)
        (work / "ref.sv").write_text(problem.ref)
        rc, t_compile = _run(
            [iverilog, *IVERILOG_FLAGS, "-s", TESTBENCH_TOP, "-o", "sim.vvp", "candidate.sv", "test.sv", "ref.sv"],
            work,
            work / "compile.log",
            config,
        )
        log = _read(work / "compile.log", 64 << 10)
        if rc is None:
            return SimResult(outcome="timeout", detail=f"compile ran over {config.timeout_s:g} s", seconds=t_compile)
        if rc != 0:
            return SimResult(outcome="compile_error", detail=_first_error(log), seconds=t_compile)
        failed = [line.strip() for line in log.splitlines() if any(w in line for w in HARNESS_FAILING_WARNINGS)]
        if failed:  # iverilog only warns; verilog-eval's harness fails the sample (its code "n")
            detail = f"verilog-eval fails this warning: {failed[0]}"[:300]
            return SimResult(outcome="compile_error", detail=detail, seconds=t_compile)
        # -none: waveform dumps suppressed (they decide nothing, and a wide bus's outgrows the cap)
        rc, t_sim = _run([vvp, "-n", "sim.vvp", "-none"], work, work / "sim.log", config)
        seconds = t_compile + t_sim
        out = _read(work / "sim.log", min(config.max_output_bytes, 4 << 20))
    if rc is None:
        return SimResult(outcome="timeout", detail=f"simulation ran over {config.timeout_s:g} s", seconds=seconds)
    if "TIMEOUT" in out:  # verilog-eval testbenches stop themselves after a simulated-time limit
        return SimResult(outcome="timeout", detail="the testbench's own TIMEOUT", seconds=seconds)
    verdicts = _VERDICT.findall(out)
    if rc != 0 or len(verdicts) != 1:
        why = (
            f"vvp exited with {rc}" + (" (output over the limit)" if rc in (153, -signal.SIGXFSZ) else "")
            if rc != 0
            else f"{len(verdicts)} 'Mismatches:' lines in the output (want exactly one)"
        )
        return SimResult(outcome="runtime_error", detail=f"{why}: {_first_error(out)}"[:300], seconds=seconds)
    mismatches, samples = map(int, verdicts[0])
    outcome = "no_samples" if samples == 0 else "mismatch" if mismatches else "pass"
    return SimResult(
        outcome=outcome,
        mismatches=mismatches,
        samples=samples,
        seconds=seconds,
        detail="" if outcome == "pass" else f"{mismatches} mismatches in {samples} samples",
    )


def default_workers() -> int:
    """One simulation per CPU this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def simulate_many(
    jobs: Sequence[tuple[Problem, str]],
    config: SimConfig | None = None,
    *,
    workers: int | None = None,
    on_done: Callable[[int, SimResult], None] | None = None,
) -> list[SimResult]:
    """:func:`simulate` over ``(problem, completion)`` pairs in a pool; results in input order.

    ``on_done(index, result)`` is called as each finishes (a progress bar, say).
    """
    simulator()  # fail once, up front, with the install line
    results: list[SimResult | None] = [None] * len(jobs)
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers or default_workers()) as pool:
        futures = {pool.submit(simulate, p, c, config): i for i, (p, c) in enumerate(jobs)}
        for fut in concurrent.futures.as_completed(futures):
            i = futures[fut]
            results[i] = fut.result()
            if on_done is not None:
                on_done(i, results[i])
    return results  # type: ignore[return-value]
