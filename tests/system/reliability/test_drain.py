"""SIGTERM in sidecar mode: the kubelet signals every container of the vLLM pod at once and vLLM
may drain a while, so specwatch keeps polling (every 0.5 s) and serving (the last windows reach
Prometheus) while vLLM answers with metrics, and exits at vLLM's first refused connection or first
non-metrics answer, within 3 s of vLLM, or when shutdown_drain passes (5 s below the pod's grace
period: never longer than the pod); a second signal exits at once. Outside sidecar mode SIGTERM
still exits at once. Every wait here is bounded."""

from __future__ import annotations

import signal
import time

import pytest

from support.paths import fixture_path

from .hostile import HostileServer, hang, respond
from .process import sidecar_process

PAYLOAD = (fixture_path("vllm-cpu-real") / "003.prom").read_bytes()
NOT_METRICS = b"<!doctype html><html><head><title>502 Bad Gateway</title></head><body>bad gateway</body></html>\n"
SIDECAR = {"SPECWATCH_MODE": "sidecar"}
GONE_WITHIN = 3.0  # seconds from vLLM's last answer to the sidecar's exit


def _config(url: str, drain: str | None = "2m", poll_interval: str = "1s") -> dict:
    config = {
        "poll_interval": poll_interval,
        "targets": [{"name": "vllm", "url": url, "timeout": "500ms"}],
    }
    if drain is not None:  # None: the exporter's default cap
        config["shutdown_drain"] = drain
    return config


def _exit_seconds(proc, timeout: float) -> float:
    """Seconds until `proc` exits (it must, within `timeout`), its exit status checked."""
    started = time.monotonic()
    assert proc.wait(timeout=timeout) == 0
    return time.monotonic() - started


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
        vllm.stop()  # vLLM has exited: its first refused connection ends the drain
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


def test_the_sidecar_is_gone_within_3_s_of_vllm_at_the_default_poll_interval_and_cap(tmp_path, vllm):
    """The chart's poll_interval (5s) and the exporter's default cap: it polls every 0.5 s after
    SIGTERM and exits at vLLM's first refused connection, not one or two poll intervals later."""
    config = _config(vllm.url, drain=None, poll_interval="5s")
    with sidecar_process(tmp_path, config, env=SIDECAR) as sidecar:
        sidecar.wait_for(lambda: vllm.count >= 1, timeout=10, what="a first poll")
        sidecar.proc.send_signal(signal.SIGTERM)
        sidecar.wait_for(lambda: "draining" in sidecar.logs(), timeout=10, what="the drain")
        polls = vllm.count
        time.sleep(2.0)  # vLLM still answers with metrics: still there, polling faster than poll_interval
        assert sidecar.proc.poll() is None
        drained_polls = vllm.count - polls
        assert sidecar.get("/metrics", timeout=5).status_code == 200
        vllm.stop()  # vLLM has exited: nothing listens on its port any more
        seconds = _exit_seconds(sidecar.proc, timeout=20)
        assert seconds < GONE_WITHIN, f"exited {seconds:.2f} s after vLLM"
        assert drained_polls >= 2, "polls every 0.5 s while draining"
        logs = sidecar.logs()
        assert '"reason": "targets gone"' in logs and '"vllm": "connect"' in logs


def test_a_200_non_metrics_answer_ends_the_drain_instead_of_keeping_the_sidecar_up(tmp_path, vllm):
    """vLLM gone and something else answering 200 on its port (a proxy's error page): the first such
    answer ends the drain; before, it held the sidecar past the pod's grace period, to SIGKILL."""
    with sidecar_process(tmp_path, _config(vllm.url, drain=None, poll_interval="5s"), env=SIDECAR) as sidecar:
        sidecar.wait_for(lambda: vllm.count >= 1, timeout=10, what="a first poll")
        sidecar.proc.send_signal(signal.SIGTERM)
        sidecar.wait_for(lambda: "draining" in sidecar.logs(), timeout=10, what="the drain")
        time.sleep(1.0)
        assert sidecar.proc.poll() is None
        vllm.set(respond(200, NOT_METRICS, {"Content-Type": "text/html"}))
        seconds = _exit_seconds(sidecar.proc, timeout=20)
        assert seconds < GONE_WITHIN, f"exited {seconds:.2f} s after the first non-metrics answer"
        logs = sidecar.logs()
        assert '"reason": "targets gone"' in logs and '"vllm": "parse"' in logs


@pytest.mark.parametrize("answer", ["metrics", "hang"])
def test_a_target_that_keeps_answering_or_hangs_holds_it_no_longer_than_the_cap(tmp_path, vllm, answer):
    """Whatever the target does, the cap (here 3s) ends the drain: never longer than the pod."""
    if answer == "hang":
        vllm.set(hang())  # a vLLM that accepts and never answers: timeouts, two of which end it
    with sidecar_process(tmp_path, _config(vllm.url, drain="3s", poll_interval="5s"), env=SIDECAR) as sidecar:
        signalled = time.monotonic()
        sidecar.proc.send_signal(signal.SIGTERM)
        assert sidecar.proc.wait(timeout=20) == 0
        seconds = time.monotonic() - signalled
        assert seconds < 3.0 + GONE_WITHIN, f"exited {seconds:.2f} s after SIGTERM with a 3s cap"
        logs = sidecar.logs()
        if answer == "metrics":
            assert seconds >= 2.5 and '"reason": "drain timeout"' in logs  # it did drain while vLLM answered
        else:
            assert '"reason": "targets gone"' in logs and '"vllm": "timeout"' in logs
