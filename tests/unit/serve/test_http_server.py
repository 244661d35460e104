"""The HTTP front tells a keep-alive client how long its connection may stay idle, and keeps its word.

A client that reuses its connection on the head deadline's own cadence would otherwise send a
request just as the server closes it. Each test talks to a real CappedHTTPServer over loopback,
serving a real (unpolled) Service.
"""

from __future__ import annotations

import re
import select
import socket
import threading

import pytest

from specwatch.serve import http_server
from specwatch.serve.http_server import (
    HEAD_TIMEOUT,
    SCARCE_HEAD_TIMEOUT,
    CappedHTTPServer,
    advertised_idle_timeout,
    handler_for,
)
from specwatch.serve.service import Service
from support.builders import scenario_config

KEEP_ALIVE_GET = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


def start_front(max_connections: int = http_server.MAX_CONNECTIONS):
    server = CappedHTTPServer(
        ("127.0.0.1", 0), handler_for(Service(scenario_config("steady"))), max_connections=max_connections
    )
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    return server


@pytest.fixture
def front():
    server = start_front()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def small():
    """A front of 8 slots: 6 connections make them scarce."""
    server = start_front(max_connections=8)
    yield server
    server.shutdown()
    server.server_close()


def connect(server: CappedHTTPServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=10)


def exchange(sock: socket.socket, request: bytes) -> tuple[bytes, dict[str, str]]:
    """Send `request`, read one whole response: its status line and headers (names lower-cased)."""
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, value in (line.split(":", 1) for line in lines)}
    while len(body) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "closed inside a body"
        body += chunk
    return status.encode(), headers


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed `sock` (waits for it up to the socket's timeout)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_the_advertised_idle_timeout_is_whole_seconds_at_least_one_under_the_deadline():
    assert advertised_idle_timeout(5.0) == 4
    assert advertised_idle_timeout(4.5) == 3  # 4 would leave the client half a second
    assert advertised_idle_timeout(2.0) == 1
    assert advertised_idle_timeout(HEAD_TIMEOUT) < HEAD_TIMEOUT
    # No whole second fits under these: the response closes instead of advertising timeout=0.
    assert advertised_idle_timeout(1.9) is None
    assert advertised_idle_timeout(SCARCE_HEAD_TIMEOUT) is None


def test_a_keep_alive_response_advertises_an_idle_timeout_under_the_head_deadline(front):
    with connect(front) as s:
        for _ in range(2):  # and the connection is kept for the next request
            status, headers = exchange(s, KEEP_ALIVE_GET)
            assert status.startswith(b"HTTP/1.1 200")
            assert headers["connection"] == "keep-alive"
            seconds = int(re.fullmatch(r"timeout=(\d+)", headers["keep-alive"]).group(1))
            assert 1 <= seconds < HEAD_TIMEOUT


def test_a_response_that_closes_the_connection_carries_no_keep_alive(front):
    closing_requests = (
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"GET /healthz HTTP/1.0\r\n\r\n",
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi",  # an unread body closes
    )
    for request in closing_requests:
        with connect(front) as s:
            _, headers = exchange(s, request)
            assert headers["connection"] == "close", request
            assert "keep-alive" not in headers, request
            assert closed_by_server(s), request


def test_a_head_deadline_under_two_seconds_closes_instead_of_advertising_one(front, monkeypatch):
    monkeypatch.setattr(http_server, "HEAD_TIMEOUT", 1.5)
    with connect(front) as s:
        _, headers = exchange(s, KEEP_ALIVE_GET)
        assert headers["connection"] == "close"
        assert "keep-alive" not in headers
        assert closed_by_server(s)


def test_while_slots_are_scarce_a_keep_alive_request_is_answered_with_connection_close(small, monkeypatch):
    monkeypatch.setattr(http_server, "HEAD_TIMEOUT", 60.0)  # the holders' waits outlast the test
    holders = [connect(small) for _ in range(5)]
    try:
        for s in holders:  # 5 of 8 slots: not scarce yet
            _, headers = exchange(s, KEEP_ALIVE_GET)
            assert headers["keep-alive"] == "timeout=59"
        with connect(small) as sixth:  # 6 of 8: past 3/4, waits are SCARCE_HEAD_TIMEOUT (1 s)
            _, headers = exchange(sixth, KEEP_ALIVE_GET)
            assert headers["connection"] == "close"
            assert "keep-alive" not in headers
            assert closed_by_server(sixth)
    finally:
        for s in holders:
            s.close()


def test_a_kept_alive_connection_keeps_its_advertised_wait_when_slots_turn_scarce(small, monkeypatch):
    monkeypatch.setattr(http_server, "HEAD_TIMEOUT", 60.0)
    holders = [connect(small) for _ in range(5)]
    try:
        for s in holders:
            _, headers = exchange(s, KEEP_ALIVE_GET)
            assert headers["keep-alive"] == "timeout=59"
        # A sixth connection that sends nothing makes the slots scarce until the server cuts it at
        # the scarce deadline. The holders have waited longer than it, but were promised 59 s.
        with connect(small) as silent:
            assert closed_by_server(silent)
        assert small.timed_out == 1
        for s in holders:
            readable, _, _ = select.select([s], [], [], 0)
            assert not readable, "a holder was closed"
            status, _ = exchange(s, KEEP_ALIVE_GET)
            assert status.startswith(b"HTTP/1.1 200")
    finally:
        for s in holders:
            s.close()


# ---- security headers: sent by the server, not only as the page's meta tags -------------------------


@pytest.mark.parametrize(
    "request_line",
    [
        b"GET / HTTP/1.1",
        b"HEAD / HTTP/1.1",
        b"GET /api/v1/status HTTP/1.1",
        b"GET /metrics HTTP/1.1",
        b"GET /healthz HTTP/1.1",
        b"GET /readyz HTTP/1.1",
        b"GET /nowhere HTTP/1.1",
        b"POST / HTTP/1.1",
    ],
)
def test_every_response_carries_the_content_security_policy_and_nosniff_as_http_headers(front, request_line):
    with connect(front) as s:
        s.sendall(request_line + b"\r\nHost: x\r\nConnection: close\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(65536)
            assert chunk, head
            head += chunk
    lines = head.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")[1:]
    headers = {name.lower(): value.strip() for name, value in (line.split(":", 1) for line in lines)}
    csp = headers["content-security-policy"]
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp and "script-src" not in csp
    assert headers["x-content-type-options"] == "nosniff"


def test_an_oversized_request_head_is_refused_with_the_security_headers_too(front):
    with connect(front) as s:
        # One byte past the limit, all of which the server reads: it closes with nothing unread (no RST).
        s.sendall(b"GET /" + b"a" * (http_server.MAX_HEAD_BYTES + 1 - 5))
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    assert head.startswith("HTTP/1.1 414")
    assert "\r\nX-Content-Type-Options: nosniff\r\n" in head
    assert "\r\nContent-Security-Policy: default-src 'none';" in head


def test_openmetrics_is_served_when_the_accept_header_asks_for_it(front):
    from specwatch.serve.http_server import wants_openmetrics

    prometheus = "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
    assert wants_openmetrics(prometheus) and wants_openmetrics("application/OpenMetrics-Text")
    assert not wants_openmetrics("") and not wants_openmetrics("text/plain;version=0.0.4")
    assert not wants_openmetrics("application/openmetrics-text;q=0")
    with connect(front) as sock:
        status, headers = exchange(
            sock, b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: " + prometheus.encode() + b"\r\n\r\n"
        )
        assert status.endswith(b"200 OK") and headers["content-type"].startswith("application/openmetrics-text")
        status, headers = exchange(sock, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert headers["content-type"].startswith("text/plain")


def test_a_ticked_publication_is_the_same_publication_at_the_new_tick():
    import dataclasses

    service = Service(scenario_config("steady"))
    try:
        published = service.published
        ticked = published.ticked(published.last_tick + 7.0)
        assert ticked == dataclasses.replace(published, last_tick=published.last_tick + 7.0)
        assert [f.name for f in dataclasses.fields(ticked)] == [f.name for f in dataclasses.fields(published)]
        assert all(
            getattr(ticked, f.name) is getattr(published, f.name)
            for f in dataclasses.fields(published)
            if f.name != "last_tick"
        )
    finally:
        service.stop()
