"""cookbook.serve._served: the refusals before start-up, and what stopping the merged server records."""

from cookbook import merge, serve
from cookbook.serve import _served


def test_clear_errors_refuses_each_bad_server_before_vllm_starts(tiny_base):
    text_base = merge.ensure_text_only_base(tiny_base, "tiny")
    refusals = serve.clear_errors(text_base, multimodal_dir=tiny_base)
    what = [w for w, _ in refusals.refused]
    assert what[0].startswith("port ") and what[1:] == ["a missing directory", "the multimodal layout"]
    messages = [m for _, m in refusals.refused]
    assert "in use" in messages[0] or "already" in messages[0], messages[0]
    assert "does not exist" in messages[1] and "ensure_text_only_base" in messages[2]
    assert refusals.describe().count("ServeError: ") == 3


def test_server_stop_records_the_processes_left():
    assert _served.ServerStop(left=()).results() == {"processes_left_after_stop": 0}
    stop = _served.ServerStop(left=(11, 12))
    assert stop.results() == {"processes_left_after_stop": 2} and stop.describe() == "stopped: 2 server processes left"
