"""The loopback server serves vLLM's /metrics in accelerated time and applies faults."""

import gzip
import socket
import time

import pytest
import requests

from specwatch.sim import serve
from specwatch.sim.scenario import parse_scenario

SC = parse_scenario(
    {
        "name": "t",
        "model": "llama-3.1-8b",
        "prompt_tokens": 256,
        "output_tokens": 128,
        "routes": [{"model_name": "m"}],
        "phases": [{"name": "p", "duration": "10m", "concurrency": 8, "acceptance_rate": 0.6}],
    }
)
FAULTY = parse_scenario(
    {
        "name": "f",
        "model": "llama-3.1-8b",
        "prompt_tokens": 256,
        "output_tokens": 128,
        "routes": [{"model_name": "m"}],
        "phases": [{"name": "p", "duration": "10m", "concurrency": 8, "acceptance_rate": 0.6}],
        "faults": [{"at": "100s", "duration": "100s", "kind": "http_500"}],
    }
)


@pytest.fixture(scope="module")
def srv():
    h = serve(SC, port=0, speed=50.0)
    yield h
    h.stop()


def session():
    s = requests.Session()
    s.trust_env = False
    return s


def test_serves_metrics_on_loopback_and_time_runs_accelerated(srv):
    assert srv.url.startswith("http://127.0.0.1:") and srv.url.endswith("/metrics")
    s = session()
    r1 = s.get(srv.url, timeout=5)
    assert r1.status_code == 200 and r1.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    t1 = srv.sim_time()
    time.sleep(0.3)
    assert srv.sim_time() - t1 > 10.0  # 50x speed
    assert "vllm:spec_decode_num_drafts_total" in s.get(srv.url, timeout=5).text


def test_gzip_is_served_when_asked(srv):
    raw = session().get(srv.url, headers={"Accept-Encoding": "gzip"}, stream=True, timeout=5).raw.read()
    assert gzip.decompress(raw).startswith(b"# HELP python_gc_objects_collected_total")


def test_version_endpoint_and_404(srv):
    s = session()
    assert s.get(srv.url.replace("/metrics", "/version"), timeout=5).json() == {"version": "0.33.0"}
    assert s.get(srv.url.replace("/metrics", "/nope"), timeout=5).status_code == 404


@pytest.mark.parametrize(
    "kind,check",
    [
        ("http_500", lambda r: r.status_code == 500),
        ("empty", lambda r: r.status_code == 200 and r.content == b""),
        ("garbage", lambda r: r.status_code == 200 and b"\x00" in r.content),
        ("huge_labels", lambda r: r.text.count('="v') >= 10000),
        ("oversized", lambda r: len(r.content) >= 1_000_000),
    ],
)
def test_injected_faults_change_the_http_answer(srv, kind, check):
    srv.inject(kind, **({"bytes": 1_000_000} if kind == "oversized" else {}))
    try:
        assert check(session().get(srv.url, timeout=5))
    finally:
        srv.clear_faults()
    assert session().get(srv.url, timeout=5).status_code == 200


def test_drop_and_truncated_faults_break_the_response(srv):
    for kind, exc in (("drop", requests.ConnectionError), ("truncated", requests.exceptions.ChunkedEncodingError)):
        srv.inject(kind)
        try:
            with pytest.raises(exc):
                session().get(srv.url, timeout=5)
        finally:
            srv.clear_faults()


def test_slow_drip_holds_the_client_longer_than_a_per_read_timeout(srv):
    srv.inject("slow_drip", chunk=8, interval=0.2)
    try:
        t = time.monotonic()
        with socket.create_connection((srv.host, srv.port), timeout=1.0) as c:
            c.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            got = b""
            while time.monotonic() - t < 1.5:
                got += c.recv(4096)
        assert got.startswith(b"HTTP/1.1 200") and len(got) < 2000  # bytes trickle in, no timeout fires
    finally:
        srv.clear_faults()


def test_scenario_faults_apply_by_sim_time():
    # A hand-stepped clock: the fault window (100-200 s) is entered and left whatever the load.
    now = [0.0]
    h = serve(FAULTY, port=0, clock=lambda: now[0])
    try:
        assert session().get(h.url, timeout=30).status_code == 200
        now[0] = 130.0
        assert session().get(h.url, timeout=30).status_code == 500
        now[0] = 210.0
        assert session().get(h.url, timeout=30).status_code == 200
    finally:
        h.stop()
