"""A reload's `prometheus:` keys take effect (serve/service.py, fleet/evaluator.py): a change to the
source's url, headers, bearer token file or timeout reaches the next poll's requests, against real
loopback HTTP servers; a change the evaluator survives leaves it with the reloaded source."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specwatch.config import from_mapping
from specwatch.serve.service import Service

EMPTY = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()


class Recorder:
    """A Prometheus query API that answers every query with no series and keeps each request's headers."""

    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                recorder.headers.append(dict(self.headers.items()))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(EMPTY)))
                self.end_headers()
                self.wfile.write(EMPTY)

            def log_message(self, *_args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def servers() -> Iterator[tuple[Recorder, Recorder]]:
    a, b = Recorder(), Recorder()
    yield a, b
    for s in (a, b):
        s.httpd.shutdown()
        s.httpd.server_close()


def _fleet(url: str, **prometheus: object):
    source = {"url": url, "timeout": "2s", "history_lookback": "0s", **prometheus}
    return from_mapping({"listen": "127.0.0.1:0", "prometheus": source}, environ={})


def test_a_reloaded_url_and_headers_are_what_the_next_poll_queries_with(servers):
    a, b = servers
    service = Service(_fleet(a.url, headers={"X-Scope-OrgID": "team-a"}), clock=lambda: 1e9)
    service.poll_once()
    assert a.headers and {h["X-Scope-OrgID"] for h in a.headers} == {"team-a"}
    asked_a = len(a.headers)
    service.apply(_fleet(b.url, headers={"X-Scope-OrgID": "team-b"}, timeout="3s"))
    assert service.poller.fleet is not None and service.poller.fleet.evaluator.source.url == b.url
    service.poll_once()
    assert len(a.headers) == asked_a, "the old url is asked nothing after the reload"
    assert b.headers and {h["X-Scope-OrgID"] for h in b.headers} == {"team-b"}


def test_a_reloaded_bearer_token_file_is_what_the_next_poll_sends(servers, tmp_path):
    a, _ = servers
    old, new = tmp_path / "old-token", tmp_path / "new-token"
    old.write_text("old-secret\n")
    new.write_text("new-secret\n")
    service = Service(_fleet(a.url, bearer_token_file=str(old)), clock=lambda: 1e9)
    service.poll_once()
    service.apply(_fleet(a.url, bearer_token_file=str(new)))
    asked = len(a.headers)
    service.poll_once()
    assert {h["Authorization"] for h in a.headers[:asked]} == {"Bearer old-secret"}
    assert {h["Authorization"] for h in a.headers[asked:]} == {"Bearer new-secret"}


def test_a_reload_that_keeps_the_evaluator_leaves_it_with_the_reloaded_source(servers):
    a, _ = servers
    service = Service(_fleet(a.url), clock=lambda: 1e9)
    service.poll_once()
    evaluator = service.poller.fleet.evaluator if service.poller.fleet else None
    reloaded = _fleet(a.url, history_lookback="1h")
    service.apply(reloaded)
    assert service.poller.fleet is not None and service.poller.fleet.evaluator is evaluator, (
        "the lookback alone rebuilds nothing"
    )
    assert service.poller.fleet.evaluator.source == reloaded.prometheus
