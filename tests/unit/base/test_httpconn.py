"""DeadlineConnection over our HTTP/1.1: a kept-alive connection carries the next request only
when its last answer allows it, a broken answer is a `connect` failure, a request that cannot be
sent is `invalid`, and a plain-http poll imports neither http.client, email, ssl nor the IDNA codec
(checked in a fresh interpreter)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading

import pytest

from specwatch.sidecar.scrape import ScrapeError, Scraper

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\nx_total 1.0\n"
OK_CHUNKED = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;e=1\r\nx_tot\r\n7\r\nal 1.0\n\r\n0\r\nT: 1\r\n\r\n"
)


class RawServer:
    """Answers each request (a head without a body) with `answer`, then leaves the connection
    open, unless `close` is set; counts connections."""

    def __init__(self, answer: bytes, *, close: bool = False):
        self.answer, self.close = answer, close
        self.connections = 0
        self.heads: list[bytes] = []  # each request's head, as received
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        with conn:
            data = b""
            while True:
                try:
                    chunk = conn.recv(65536)
                except OSError:
                    return
                if not chunk:
                    return
                data += chunk
                while b"\r\n\r\n" in data:
                    head, data = data.split(b"\r\n\r\n", 1)
                    self.heads.append(head)
                    conn.sendall(self.answer)
                    if self.close:
                        return

    def url(self, host="127.0.0.1"):
        return f"http://{host}:{self.port}/metrics"

    def stop(self):
        self.sock.close()


@pytest.fixture
def serve():
    servers = []

    def start(answer, **kw):
        servers.append(RawServer(answer, **kw))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def _polls(url, n=3):
    scraper = Scraper(url, timeout=5.0, max_bytes=1 << 20)
    try:
        return [scraper.fetch().text for _ in range(n)]
    finally:
        scraper.close()


@pytest.mark.parametrize("answer", [OK, OK_CHUNKED], ids=["content-length", "chunked"])
def test_kept_alive_answers_read_to_their_end_carry_the_next_poll(serve, answer):
    server = serve(answer)
    assert _polls(server.url()) == ["x_total 1.0\n"] * 3
    assert server.connections == 1


@pytest.mark.parametrize(
    "answer",
    [
        OK.replace(b"200 OK\r\n", b"200 OK\r\nConnection: close\r\n"),
        OK.replace(b"HTTP/1.1", b"HTTP/1.0"),
        OK + b"HTTP/1.1 200 OK\r\n",  # more than the answer: the stream is out of step
    ],
    ids=["connection-close", "http-1.0", "bytes-after-the-answer"],
)
def test_a_poll_after_an_answer_that_ends_the_connection_opens_a_new_one(serve, answer):
    server = serve(answer)
    assert _polls(server.url()) == ["x_total 1.0\n"] * 3
    assert server.connections == 3


def test_a_close_delimited_body_is_read_to_the_end_of_the_connection(serve):
    server = serve(b"HTTP/1.0 200 OK\r\n\r\nx_total 1.0\n", close=True)
    assert _polls(server.url(), n=2) == ["x_total 1.0\n"] * 2
    assert server.connections == 2


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\n" + b"X: 1\r\n" * 100 + b"\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\nx_total 1.0\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-c\r\nx_total 1.0\n\r\n0\r\n\r\n",
        b"NOT HTTP\r\n\r\n",
    ],
    ids=["too-many-headers", "garbage-content-length", "negative-chunk-size", "not-http"],
)
def test_a_broken_answer_is_a_connect_failure(serve, answer):
    server = serve(answer)
    with pytest.raises(ScrapeError) as info:
        _polls(server.url(), n=1)
    assert info.value.reason == "connect"


@pytest.mark.parametrize(
    ("path", "headers"), [("/me trics", {}), ("/metrics", {"X-Euro": "€"})], ids=["space-in-path", "not-latin-1"]
)
def test_a_request_that_cannot_be_sent_is_invalid_and_never_connects(serve, path, headers):
    server = serve(OK)
    scraper = Scraper(f"http://127.0.0.1:{server.port}{path}", timeout=5.0, max_bytes=1 << 20, headers=headers)
    with pytest.raises(ScrapeError) as info:
        scraper.fetch()
    assert info.value.reason == "invalid"
    assert server.connections == 0


def test_a_request_is_sent_as_encoded_for_its_own_headers_when_an_earlier_one_was_kept(serve):
    # The request's bytes are kept between polls: a changed header must still reach the server.
    server = serve(OK)
    scraper = Scraper(server.url(), timeout=5.0, max_bytes=1 << 20, headers={"X-Poll": "1"})
    try:
        scraper.fetch()
        scraper.fetch()
        scraper.headers["X-Poll"] = "2"
        scraper.fetch()
        scraper.headers["X-Poll"] = "bad\r\nX-Injected: 1"
        with pytest.raises(ScrapeError) as info:
            scraper.fetch()
    finally:
        scraper.close()
    assert info.value.reason == "invalid"
    assert [h.split(b"\r\nX-Poll: ")[1].split(b"\r\n")[0] for h in server.heads] == [b"1", b"1", b"2"]
    assert server.heads[0] == server.heads[1]


def test_a_silent_close_delimited_body_is_cut_at_the_whole_request_deadline(serve):
    server = serve(b"HTTP/1.0 200 OK\r\n\r\nx_total")  # then nothing, the connection left open
    scraper = Scraper(server.url(), timeout=0.5, max_bytes=1 << 20)
    with pytest.raises(ScrapeError) as info:
        scraper.fetch()
    assert info.value.reason == "timeout"


_FRESH = r"""
import json, socket, sys, threading
from specwatch.sidecar.scrape import Scraper
server = socket.create_server(("127.0.0.1", 0))
def serve():
    while True:
        conn, _ = server.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\nx_total 1.0\n")
        conn.close()
threading.Thread(target=serve, daemon=True).start()
port = server.getsockname()[1]
for url in sys.argv[1:]:
    assert Scraper(url.format(port=port), timeout=5.0, max_bytes=1 << 20).fetch().text == "x_total 1.0\n"
print("MODULES " + json.dumps(sorted(sys.modules)))
"""


def _fresh_modules(*urls: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", _FRESH, *urls], capture_output=True, text=True, check=True, timeout=60)
    line = next(x for x in out.stdout.splitlines() if x.startswith("MODULES "))
    return set(json.loads(line.removeprefix("MODULES ")))


def _heavy(modules: set[str]) -> set[str]:
    return {m for m in modules if m.split(".")[0] in ("http", "email", "ssl", "certifi") or m == "encodings.idna"}


def test_a_sidecar_polling_a_plain_http_target_imports_neither_http_client_email_ssl_nor_idna():
    modules = _fresh_modules("http://127.0.0.1:{port}/metrics", "http://localhost:{port}/metrics")
    assert _heavy(modules) == set()
    assert "base64" not in modules  # no credentials in the URL


def test_credentials_in_the_url_bring_base64_and_nothing_else_heavy():
    modules = _fresh_modules("http://user:pw@127.0.0.1:{port}/metrics")
    assert "base64" in modules
    assert _heavy(modules) == set()


@pytest.fixture
def tls_server(tmp_path, serve, monkeypatch):
    """A loopback TLS server for `localhost` (a fresh self-signed certificate), trusted by the
    connection's TLS context; `serve`'s plain answers inside the TLS session."""
    import shutil
    import ssl

    from specwatch.base import httpconn

    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        + ["-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"]
        + ["-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    monkeypatch.setattr(httpconn, "tls_context", lambda: ssl.create_default_context(cafile=str(cert)))
    server = serve(OK_CHUNKED)
    plain_serve = server._serve

    def serve_tls(conn):
        try:
            conn = server_context.wrap_socket(conn, server_side=True)
        except (OSError, ssl.SSLError):
            conn.close()  # the client refused the certificate
            return
        plain_serve(conn)

    server._serve = serve_tls
    return server


def test_an_https_target_is_polled_over_one_kept_alive_tls_connection(tls_server):
    assert _polls(f"https://localhost:{tls_server.port}/metrics") == ["x_total 1.0\n"] * 3
    assert tls_server.connections == 1


def test_an_https_target_whose_certificate_names_another_host_is_tls(tls_server):
    with pytest.raises(ScrapeError) as info:
        _polls(f"https://127.0.0.1:{tls_server.port}/metrics", n=1)
    assert info.value.reason == "tls"


def test_a_connect_that_outlives_the_deadline_never_starts_a_tls_handshake(monkeypatch):
    import time

    from specwatch.base import httpconn

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    handshakes = []

    def serve():  # a TLS server that drips its answer: a handshake would run its own timeout out
        try:
            conn, _ = srv.accept()
        except OSError:
            return
        handshakes.append(conn.recv(65536))
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    real = socket.create_connection

    def slow_resolver(address, timeout):  # name resolution alone takes longer than the deadline
        time.sleep(0.6)
        return real(address, timeout)

    monkeypatch.setattr(httpconn.socket, "create_connection", slow_resolver)
    conn = httpconn.DeadlineConnection(
        f"https://localhost:{srv.getsockname()[1]}/", connect_timeout=5, error=httpconn.TransferError
    )
    with pytest.raises(httpconn.TransferError) as info, conn.deadline(0.3) as deadline:
        conn.request("GET", "/metrics", {}, deadline)
    assert info.value.reason == "timeout"
    time.sleep(0.2)
    assert handshakes == [b""]  # connected, then closed: no ClientHello was ever sent
    srv.close()


def test_a_plain_http_connect_that_outlives_the_deadline_is_a_timeout_before_any_read(monkeypatch, serve):
    import time

    from specwatch.base import httpconn

    server = serve(OK)
    real = socket.create_connection

    def slow_resolver(address, timeout):  # name resolution alone takes longer than the deadline
        time.sleep(0.5)
        return real(address, timeout)

    monkeypatch.setattr(httpconn.socket, "create_connection", slow_resolver)
    conn = httpconn.DeadlineConnection(server.url(), connect_timeout=5, error=httpconn.TransferError)
    with pytest.raises(httpconn.TransferError) as info, conn.deadline(0.3) as deadline:
        conn.request("GET", "/metrics", {}, deadline)
    assert info.value.reason == "timeout"
    conn.close()


def test_a_request_body_the_server_never_reads_is_cut_at_the_whole_request_deadline():
    import time

    from specwatch.base import httpconn

    srv = socket.create_server(("127.0.0.1", 0))
    accepted = []
    threading.Thread(target=lambda: accepted.append(srv.accept()), daemon=True).start()  # never reads
    conn = httpconn.DeadlineConnection(
        f"http://127.0.0.1:{srv.getsockname()[1]}/", connect_timeout=5, error=httpconn.TransferError
    )
    start = time.monotonic()
    with pytest.raises(httpconn.TransferError) as info, conn.deadline(0.5) as deadline:
        conn.request("POST", "/api/v1/query", {}, deadline, b"q" * (64 << 20))  # more than any socket buffer
    assert info.value.reason == "timeout"
    assert time.monotonic() - start < 5  # bounded by the deadline, not by the body's size
    conn.close()
    srv.close()


def test_an_answer_that_stops_mid_head_is_a_timeout_at_the_deadline_and_the_next_request_starts_clean(serve):
    server = serve(b"HTTP/1.1 200 OK\r\nContent-Le")  # then nothing, the connection left open
    scraper = Scraper(server.url(), timeout=0.3, max_bytes=1 << 20)
    for _ in range(2):
        with pytest.raises(ScrapeError) as info:
            scraper.fetch()
        assert info.value.reason == "timeout"
    assert server.connections == 2  # the timed-out connection is never reused
    scraper.close()
