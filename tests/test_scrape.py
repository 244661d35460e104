"""The poll's whole-request deadline holds in every phase of the request, headers included."""

import socket
import threading
import time

import pytest

from specwatch.scrape import Scraper, ScrapeError


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
    from specwatch.scrape import redact_url
    assert redact_url("http://user:s3cret@10.0.0.1:8000/metrics?token=abc") == "http://10.0.0.1:8000/metrics"
    assert redact_url("https://[::1]:9/m") == "https://[::1]:9/m"


def test_reordered_labels_are_the_same_series():
    from specwatch.exposition import ExpositionError, Selector
    selector = Selector({"a": "counter"})
    with pytest.raises(ExpositionError):  # the same series twice, labels in another order
        selector.parse('# TYPE a_total counter\na_total{x="1",y="2"} 1\na_total{y="2",x="1"} 2\n')
