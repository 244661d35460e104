"""The poll's whole-request deadline holds in every phase of the request, headers included."""

import socket
import threading
import time

import pytest

from specwatch.sidecar.scrape import ScrapeError, Scraper


@pytest.fixture
def header_drip():
    """A server that answers with a status line, then one header line every 0.4 s, forever."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    stop = threading.Event()

    def handle(conn):
        try:
            conn.recv(4096)
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            for i in range(50):
                if stop.wait(0.4):
                    break
                conn.sendall(f"X-Drip-{i}: x\r\n".encode())
        except OSError:
            pass
        finally:
            conn.close()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}/metrics"
    stop.set()
    srv.close()


def test_a_server_dripping_its_headers_is_cut_off_at_the_whole_request_deadline(header_drip):
    scraper = Scraper(header_drip, timeout=1.0, max_bytes=1 << 20)
    start = time.monotonic()
    with pytest.raises(ScrapeError) as info:
        scraper.fetch()
    assert info.value.reason == "timeout"
    assert time.monotonic() - start < 1.8  # every read would have succeeded within requests' timeout
    # The next poll on the same scraper starts clean (a new connection, a new deadline).
    start = time.monotonic()
    with pytest.raises(ScrapeError):
        scraper.fetch()
    assert time.monotonic() - start < 1.8
    scraper.close()


def test_urls_are_served_and_logged_without_credentials_or_query():
    from specwatch.base.urls import redact_url

    assert redact_url("http://user:s3cret@10.0.0.1:8000/metrics?token=abc") == "http://10.0.0.1:8000/metrics"
    assert redact_url("https://[::1]:9/m") == "https://[::1]:9/m"


def test_reordered_labels_are_the_same_series():
    from specwatch.exposition import ExpositionError, Selector

    selector = Selector({"a": "counter"})
    with pytest.raises(ExpositionError):  # the same series twice, labels in another order
        selector.parse('# TYPE a_total counter\na_total{x="1",y="2"} 1\na_total{y="2",x="1"} 2\n')


@pytest.fixture
def keepalive_server():
    """An HTTP/1.1 server that keeps connections open and records each request's connection and headers."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[tuple[tuple[str, int], dict[str, str]]] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            seen.append((self.client_address, dict(self.headers)))
            body = b"# TYPE x counter\nx_total 1\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            # Idle keep-alive timeout of a real server: close without saying so in the response.
            self.close_connection = httpd.close_silently

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.close_silently = False
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd, seen
    httpd.shutdown()
    httpd.server_close()


def test_polls_reuse_one_kept_alive_connection_send_url_credentials_as_basic_auth_and_ask_for_no_compression(
    keepalive_server,
):
    httpd, seen = keepalive_server
    port = httpd.server_address[1]
    scraper = Scraper(f"http://user:p%40ss@127.0.0.1:{port}/metrics", timeout=1.0, max_bytes=1 << 20)
    for _ in range(3):
        assert scraper.fetch().text.startswith("# TYPE x counter")
    scraper.close()
    assert len({address for address, _ in seen}) == 1  # one TCP connection for three polls
    assert all(headers["Authorization"] == "Basic dXNlcjpwQHNz" for _, headers in seen)  # user:p@ss
    # Uncompressed: compressing costs the target's CPU, and a sidecar's bytes travel over loopback.
    assert all(headers["Accept-Encoding"] == "identity" for _, headers in seen)


def test_a_kept_alive_connection_the_server_closed_is_replaced_without_a_failed_poll(keepalive_server):
    httpd, seen = keepalive_server
    httpd.close_silently = True
    scraper = Scraper(f"http://127.0.0.1:{httpd.server_address[1]}/metrics", timeout=1.0, max_bytes=1 << 20)
    for _ in range(3):
        assert scraper.fetch().text  # each on a new connection, never a `connect` error
        time.sleep(0.05)  # the server's close reaches the client
    scraper.close()
    assert len({address for address, _ in seen}) == 3


def test_plain_http_scrapes_start_no_thread_and_never_wake_the_deadline_thread(keepalive_server, monkeypatch):
    from specwatch.base import httpconn

    armed = []
    real_arm = httpconn.WATCHDOG.arm
    monkeypatch.setattr(httpconn.WATCHDOG, "arm", lambda when, fn: armed.append(when) or real_arm(when, fn))
    httpd, _ = keepalive_server
    scraper = Scraper(f"http://127.0.0.1:{httpd.server_address[1]}/metrics", timeout=2, max_bytes=1 << 20)
    try:
        scraper.fetch()  # the server starts its thread for the connection
        before = {t.ident for t in threading.enumerate()}
        for _ in range(20):
            scraper.fetch()
        assert {t.name for t in threading.enumerate() if t.ident not in before} == set()
        assert armed == []  # each read waits in poll() with the time left: no watchdog at all
    finally:
        scraper.close()


def test_the_watchdog_calls_what_is_due_and_never_what_was_disarmed():
    from specwatch.base.httpconn import Watchdog

    watchdog, called = Watchdog(), []
    kept = watchdog.arm(time.monotonic() + 0.05, lambda: called.append("due"))
    dropped = watchdog.arm(time.monotonic() + 0.02, lambda: called.append("disarmed"))
    watchdog.disarm(dropped)
    deadline = time.monotonic() + 5
    while not called and time.monotonic() < deadline:
        time.sleep(0.01)
    watchdog.disarm(kept)  # after it ran: nothing happens
    time.sleep(0.05)
    assert called == ["due"]


def test_the_watchdog_is_woken_only_by_a_new_earliest_deadline():
    from specwatch.base.httpconn import Watchdog

    watchdog, called = Watchdog(), []
    first = watchdog.arm(time.monotonic() + 100, lambda: called.append("first"))  # starts the thread
    notified = []
    real_notify = watchdog._cond.notify
    watchdog._cond.notify = lambda n=1: (notified.append(n), real_notify(n))  # type: ignore[method-assign]
    later = watchdog.arm(time.monotonic() + 200, lambda: called.append("later"))
    assert notified == []  # the thread already sleeps until an earlier deadline
    soon = watchdog.arm(time.monotonic() + 0.02, lambda: called.append("soon"))
    assert notified == [1]
    deadline = time.monotonic() + 5
    while not called and time.monotonic() < deadline:
        time.sleep(0.01)
    for token in (first, later, soon):
        watchdog.disarm(token)
    assert called == ["soon"]  # the earlier deadline was not slept through


def _answer_once(raw: bytes) -> tuple[str, threading.Thread]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def serve():
        conn, _ = srv.accept()
        try:
            conn.recv(4096)
            conn.sendall(raw)
        except OSError:
            pass
        finally:
            conn.close()
            srv.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return f"http://127.0.0.1:{srv.getsockname()[1]}/metrics", thread


def test_bytes_after_the_end_of_a_gzip_body_are_refused_not_kept():
    import gzip

    body = gzip.compress(b"# TYPE x counter\nx_total 1\n") + b"junk after the stream" * 1000
    head = f"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    url, thread = _answer_once(head + body)
    scraper = Scraper(url, timeout=2.0, max_bytes=1 << 20)
    with pytest.raises(ScrapeError) as info:
        scraper.fetch()
    assert info.value.reason == "invalid"
    scraper.close()
    thread.join(5)


def test_an_honest_gzip_body_is_still_read():
    import gzip

    text = b"# TYPE x counter\nx_total 1\n"
    body = gzip.compress(text)
    head = f"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    url, thread = _answer_once(head + body)
    scraper = Scraper(url, timeout=2.0, max_bytes=1 << 20)
    assert scraper.fetch().text == text.decode()
    scraper.close()
    thread.join(5)
