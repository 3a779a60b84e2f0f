"""cookbook.core._run_dir: a run's output directory and the work directories the stages write to."""

from cookbook import core, harness


def test_the_run_dir_is_the_environments_and_work_dirs_are_inside_it(tmp_path, monkeypatch):
    monkeypatch.setenv("COOKBOOK_RUN_DIR", str(tmp_path / "run"))
    assert core.run_dir() == tmp_path / "run" and (tmp_path / "run").is_dir()
    d = core.work_dir("rl")
    assert d == tmp_path / "run" / "work" / "rl" and d.is_dir()
    assert core.work_dir("rl") == d  # again: the same directory, no error
    assert harness.work_dir is core.work_dir  # the notebooks' and the stages' one place


def test_without_the_environment_it_is_the_interactive_run(tmp_path, monkeypatch):
    monkeypatch.delenv("COOKBOOK_RUN_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert core.run_dir().resolve() == (tmp_path / "runs" / "interactive").resolve()
