"""cookbook.core's fill_once / sibling_lock: two processes on a cold cache directory fill it once."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# A process that calls fill_once on DIR; its fill logs the call, waits until both processes have
# arrived (so that, unlocked, both would fill), then completes the directory.
_RACER = """
import sys, time
from pathlib import Path
from cookbook import core
target, name = Path(sys.argv[1]), sys.argv[2]
(target.parent / f"arrived-{name}").touch()

def fill():
    with open(target.parent / "fills.log", "a") as log:
        log.write(name + "\\n")
    deadline = time.time() + 5
    while len(list(target.parent.glob("arrived-*"))) < 2 and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # the other is now past its arrival: in the lock, or (unlocked) filling too
    target.mkdir()
    (target / "done").write_text(name)

print(core.fill_once(target, lambda d: (d / "done").is_file(), fill))
"""


def test_two_processes_on_a_cold_directory_fill_it_once(tmp_path):
    target = tmp_path / "artefact"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(target), name],
            cwd=REPO,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for name in ("a", "b")
    ]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert [o.strip() for o, _ in outs] == [str(target)] * 2
    fills = (tmp_path / "fills.log").read_text().split()
    assert len(fills) == 1 and (target / "done").read_text() == fills[0]  # the waiter reused it
    assert (tmp_path / ".artefact.lock").is_file()  # the lock beside it, as ensure_base's
