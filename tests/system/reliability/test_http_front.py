"""The HTTP front under hostile clients on the pod network (http_server.py's event loop).

- 16 fat-header and 200 reconnecting slowloris connections, then 64 keep-alive holders (with 64
  slowloris): a legitimate scraper's /metrics and the kubelet's /healthz still answer ≥ 95 % of
  fresh-connection probes within 2 s, and the bytes buffered for any one connection stay under the
  head limit;
- a head is bounded in total bytes and in time from accept (not per line, not per recv);
- when every slot is taken a new connection evicts the longest waiter;
- a pipelining client that never reads holds one response at most, and is cut at the write deadline;
- what the old front did is kept: routes, content types, query strings, HEAD, pipelining in order,
  405/501, HTTP/1.0 closing.

The attacker is its own process (bench/http_attack.py: loopback only, bounded in count and time);
the server is the harness's real Service and handler in this process, so its counters can be read.
"""

from __future__ import annotations

import contextlib
import re
import select
import socket
import threading
import time

import pytest

from bench.http_attack import attack_process, attack_result, probe, probe_for
from specwatch.serve import http_server
from specwatch.serve.http_server import MAX_HEAD_BYTES, CappedHTTPServer, handler_for

from .harness import new_pair

ATTACK_SECONDS = 8.0


@pytest.fixture
def car():
    server, car = new_pair()
    car.poll(3)  # a real /metrics body (tens of KiB)
    try:
        yield car
    finally:
        car.close()
        server.stop()


def port_of(car) -> int:
    return car.httpd.server_address[1]


def raw(port: int, data: bytes, *, timeout: float = 5.0) -> bytes:
    """Send `data`, read until the server closes (or `timeout`)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            out += chunk
        return out


def _attack_and_probe(car, fat: int, slowloris: int, keepalive: int) -> tuple[dict, dict]:
    port = port_of(car)
    attacker = attack_process(port, fat, slowloris, keepalive, ATTACK_SECONDS)
    try:
        time.sleep(1.5)  # every attacking client connected
        probes = probe_for("127.0.0.1", port, ATTACK_SECONDS - 2.5, ("/metrics", "/healthz"))
        stats = attack_result(attacker, timeout=ATTACK_SECONDS + 30)
    finally:
        if attacker.poll() is None:
            attacker.kill()
            attacker.wait()
    return probes, stats


def _ok(results) -> float:
    return sum(r is not None for r in results) / len(results)


def test_fat_headers_and_reconnecting_slowloris_leave_metrics_and_healthz_answering(car):
    probes, stats = _attack_and_probe(car, fat=16, slowloris=200, keepalive=0)
    httpd = car.httpd
    print(
        f"\n16 fat + 200 slowloris: /metrics {_ok(probes['/metrics']):.0%} of {len(probes['/metrics'])}, "
        f"/healthz {_ok(probes['/healthz']):.0%} of {len(probes['/healthz'])}; attacker {stats}; server "
        f"peak {httpd.peak_connections} connections, peak head buffer {httpd.peak_buffered} B, "
        f"{httpd.refused_heads} heads refused, {httpd.timed_out} timed out, {httpd.evicted} evicted"
    )
    assert len(probes["/metrics"]) >= 5
    assert _ok(probes["/metrics"]) >= 0.95, probes["/metrics"]
    assert _ok(probes["/healthz"]) >= 0.95, probes["/healthz"]
    # Memory: no connection ever had more than one head's worth of bytes buffered (the legacy front
    # held 98 × 65,000 B per fat connection), and the fat heads were refused, not kept.
    assert httpd.peak_buffered <= MAX_HEAD_BYTES + 1
    assert httpd.refused_heads >= 16
    assert stats["connects"] >= 216
    assert httpd.peak_connections <= httpd.max_connections


def test_64_keep_alive_holders_and_slowloris_cannot_lock_out_a_scraper(car):
    probes, stats = _attack_and_probe(car, fat=0, slowloris=64, keepalive=64)
    httpd = car.httpd
    print(
        f"\n64 keep-alive + 64 slowloris: /metrics {_ok(probes['/metrics']):.0%}, /healthz "
        f"{_ok(probes['/healthz']):.0%}; attacker {stats}; server peak {httpd.peak_connections} connections"
    )
    assert _ok(probes["/metrics"]) >= 0.95, probes["/metrics"]
    assert _ok(probes["/healthz"]) >= 0.95, probes["/healthz"]
    assert stats["responses"] > 64  # the keep-alive clients were served too, on their held connections
    assert httpd.peak_buffered <= MAX_HEAD_BYTES + 1


@pytest.fixture
def small(car):
    """A front of 8 slots serving the same service."""
    server = CappedHTTPServer(("127.0.0.1", 0), handler_for(car.service), max_connections=8)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_when_every_slot_is_taken_a_new_connection_evicts_the_longest_waiter(small):
    port = small.server_address[1]
    holders = []
    try:
        for _ in range(20):  # far more idle and half-sent connections than slots
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /metrics HTTP/1.1\r\n")
            holders.append(s)
        time.sleep(0.3)
        results = [probe("127.0.0.1", port, "/healthz") for _ in range(10)]
        assert all(r is not None for r in results), results
        assert small.open_connections <= 8
        assert small.evicted >= 12
    finally:
        for s in holders:
            s.close()


def test_idle_connections_get_a_shorter_wait_when_slots_are_scarce(small, monkeypatch):
    monkeypatch.setattr(http_server, "HEAD_TIMEOUT", 60.0)
    monkeypatch.setattr(http_server, "SCARCE_HEAD_TIMEOUT", 0.5)
    port = small.server_address[1]
    holders = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(7)]  # 7 of 8 slots
    try:
        # Past 3/4 of the slots (6 of 8) waiting connections get 0.5 s instead of 60 s, until the
        # slots are no longer scarce: at least 2 of the 7 are closed long before the 60 s deadline.
        closed: set[socket.socket] = set()
        deadline = time.monotonic() + 10
        while len(closed) < 2 and time.monotonic() < deadline:
            readable, _, _ = select.select([s for s in holders if s not in closed], [], [], 0.5)
            closed.update(s for s in readable if s.recv(1) == b"")
        assert len(closed) >= 2
        assert small.open_connections < 6
    finally:
        for s in holders:
            s.close()


def test_the_head_deadline_is_from_accept_not_per_recv(car, monkeypatch):
    monkeypatch.setattr(http_server, "HEAD_TIMEOUT", 1.0)
    with socket.create_connection(("127.0.0.1", port_of(car)), timeout=5) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nX-Drip: ")
        start = time.monotonic()
        closed = False
        while time.monotonic() - start < 15:  # a byte every 0.2 s: a per-recv timeout never fires
            try:
                s.sendall(b"a")
                s.settimeout(0.2)
                if s.recv(1) == b"":
                    closed = True
                    break
            except TimeoutError:
                continue
            except OSError:
                closed = True
                break
        assert closed, "a dripping head was never cut"
    assert car.httpd.timed_out >= 1


def test_an_idle_keep_alive_connection_is_closed_at_the_head_deadline(car, monkeypatch):
    # 2 s, not 1: under two seconds no whole second can be advertised and the response closes.
    monkeypatch.setattr(http_server, "HEAD_TIMEOUT", 2.0)
    with socket.create_connection(("127.0.0.1", port_of(car)), timeout=10) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = s.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200")
        assert b"\r\nKeep-Alive: timeout=1\r\n" in answer  # told, then held to it
        start = time.monotonic()
        assert s.recv(1) == b""  # closed by the server while idle
        assert time.monotonic() - start < 8


def test_head_size_is_bounded_in_total_not_per_line(car):
    port = port_of(car)
    many_small = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"".join(
        b"X-%02d: %s\r\n" % (i, b"v" * 900) for i in range(20)
    )  # 20 lines of ~900 B: each line and the count are fine for http.server, 18 KB in total is not
    answer = raw(port, many_small + b"\r\n")
    assert answer.startswith(b"HTTP/1.1 431"), answer[:100]
    assert b"Connection: close" in answer
    answer = raw(port, b"GET /" + b"a" * (MAX_HEAD_BYTES + 10) + b" HTTP/1.1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 414"), answer[:100]
    ok = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + b"X-Big: " + b"b" * 8000 + b"\r\n\r\n"
    assert raw(port, ok).startswith(b"HTTP/1.1 200")
    too_many = b"GET /healthz HTTP/1.1\r\n" + b"X: y\r\n" * 120 + b"\r\n"  # http.server's 100-header cap
    assert raw(port, too_many).startswith(b"HTTP/1.1 431")


def test_a_pipelining_client_that_never_reads_holds_one_answer_and_is_cut(car, monkeypatch):
    monkeypatch.setattr(http_server, "WRITE_TIMEOUT", 1.0)
    port = port_of(car)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        burst = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 400
        s.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            s.send(burst)
        time.sleep(0.5)
        assert probe("127.0.0.1", port, "/metrics") is not None  # others are served meanwhile
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and car.httpd.open_connections > 0:
            time.sleep(0.1)
        assert car.httpd.open_connections == 0  # cut at the write deadline
    assert car.httpd.peak_buffered <= MAX_HEAD_BYTES + 1


def test_routes_content_types_query_strings_and_head_are_unchanged(car):
    expected = {
        "/metrics": (200, "text/plain; version="),
        "/metrics?target=http://169.254.169.254/": (200, "text/plain; version="),
        "/api/v1/status": (200, "application/json"),
        "/healthz": (200, "text/plain"),
        "/readyz": (200, "text/plain"),
        "/": (200, "text/html; charset=utf-8"),
        "/nope": (404, "text/plain"),
    }
    for path, (status, content_type) in expected.items():
        response = car.http.get(car.base + path, timeout=5)
        assert response.status_code == status, path
        assert response.headers["Content-Type"].startswith(content_type), path
        assert response.headers["Cache-Control"] == "no-store"
        assert int(response.headers["Content-Length"]) == len(response.content)
    head = car.http.head(car.base + "/metrics", timeout=5)
    assert head.status_code == 200 and head.content == b"" and int(head.headers["Content-Length"]) > 1000
    assert car.http.post(car.base + "/metrics", timeout=5).status_code == 405
    for path in (b"/metrics/../metrics", b"/../../../etc/passwd", b"//127.0.0.1/metrics", b"/%2e%2e/metrics"):
        answer = raw(port_of(car), b"GET " + path + b" HTTP/1.1\r\nConnection: close\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 404"), path  # no normalisation, no file is ever read
    assert raw(port_of(car), b"BREW /metrics HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 501")


def test_pipelined_requests_are_answered_in_order_and_http10_closes(car):
    port = port_of(car)
    answer = raw(
        port,
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /healthz HTTP/1.1\r\n\r\n",
    )
    statuses = re.findall(rb"HTTP/1.1 (\d{3}) ", answer)
    assert statuses == [b"200", b"404", b"200"]  # nothing after Connection: close is answered
    assert answer.endswith(b"ready\n")
    answer = raw(port, b"GET /healthz HTTP/1.0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok\n")
    # The same keep-alive connection serves request after request.
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        for _ in range(5):
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            got = b""
            while not got.endswith(b"ok\n"):
                got += s.recv(4096)
            assert got.startswith(b"HTTP/1.1 200")
