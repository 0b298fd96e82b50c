"""`assay local-model serve` says it is ready only after a first completion answered
(`assay.interop.local_model._check`), and says what went wrong when the server dies first:
real child processes and a fake OpenAI server on 127.0.0.1 stand in for llama.cpp."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from assay.interop.local_model import PORTABLE_BUILD, ServerFailed, _check, _free_port
from tests.fakes import fault, reply
from tests.fakes.openai_server import FakeOpenAIServer


@pytest.fixture
def alive() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def child(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code])


def test_a_server_that_segfaults_is_named_with_the_portable_reinstall() -> None:
    """What a native llama.cpp build with AMX buffers did at its first completion."""
    proc = child("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    with pytest.raises(ServerFailed) as e:
        _check(proc, f"http://127.0.0.1:{_free_port('127.0.0.1')}/v1", "m", time.monotonic() + 30)
    assert "killed by SIGSEGV before it was ready" in str(e.value) and PORTABLE_BUILD in str(e.value)


def test_a_server_that_exits_is_reported_with_its_code() -> None:
    proc = child("import sys; sys.exit(3)")
    with pytest.raises(ServerFailed, match="exited with code 3 before it was ready"):
        _check(proc, f"http://127.0.0.1:{_free_port('127.0.0.1')}/v1", "m", time.monotonic() + 30)


def test_ready_after_one_completion(alive: subprocess.Popen[bytes]) -> None:
    srv = FakeOpenAIServer(default=reply("OK")).start()
    try:
        seconds = _check(alive, srv.url, "smollm2", time.monotonic() + 30)
    finally:
        srv.stop()
    (req,) = srv.requests
    assert req.json["model"] == "smollm2" and req.json["max_tokens"] == 2 and seconds >= 0


def test_a_failing_completion_is_not_ready(alive: subprocess.Popen[bytes]) -> None:
    srv = FakeOpenAIServer(default=fault(500, message="model failed to load")).start()
    try:
        with pytest.raises(ServerFailed, match="the self-check completion failed: HTTP 500"):
            _check(alive, srv.url, "m", time.monotonic() + 30)
    finally:
        srv.stop()


def test_a_server_that_never_listens_runs_out_of_time(alive: subprocess.Popen[bytes]) -> None:
    with pytest.raises(ServerFailed, match="did not answer a completion within"):
        _check(alive, f"http://127.0.0.1:{_free_port('127.0.0.1')}/v1", "m", time.monotonic() + 1)
