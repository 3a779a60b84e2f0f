"""serve.served_adapters (cookbook.serve._adapters) without a running server: what notebook 08 records when SERVE_LORA is
off, and when vLLM refuses. The served path itself runs in `make demo`'s notebook 08 (tests/harness/
test_make_demo.py), against a real vLLM server."""

from cookbook import serve


def test_a_server_never_started_serves_nothing_and_records_nothing(tmp_path):
    server = serve.VLLMServer(serve.ServeConfig(model_dir=str(tmp_path)), log_path=tmp_path / "log")
    for unstarted in (None, server):
        result = serve.served_adapters(unstarted, tokenizer=None, rows=[])
        assert result.results() == {} and "SERVE_LORA = False" in result.describe()
        assert result.describe_thinking() == "the thinking run was not served here"
    assert server.process is None  # not started by asking


def test_a_server_that_dies_while_starting_is_reported_with_its_log(tmp_path):
    """A server process that exits while starting (as vLLM does on a model it cannot load) is reported
    as the result's error, with the server's log, not raised: the notebook says why and goes on."""
    import subprocess
    import time

    log = tmp_path / "log"
    server = serve.VLLMServer(serve.ServeConfig(model_dir=str(tmp_path)), log_path=log)
    # What VLLMServer.start(wait=False) leaves: a process in its own group, a port, a start time.
    server.process = subprocess.Popen(
        ["sh", "-c", f"echo 'ValueError: no config.json in {tmp_path}' >> {log}; exit 3"], start_new_session=True
    )
    server.port, server._t0 = 1, time.perf_counter()
    result = serve.served_adapters(server, tokenizer=None, rows=[])
    error = result.results()["lora_error"]
    assert "exited with code 3 while starting" in error and "no config.json" in error
    assert list(result.results()) == ["lora_error"] and "could not serve the adapter" in result.describe()
    assert server.process is None  # stopped
