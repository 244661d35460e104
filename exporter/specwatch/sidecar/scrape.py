"""HTTP GET of one target's /metrics, bounded in time and in decoded bytes.

- the connection, its whole-request deadline (a watchdog that shuts the socket down in whatever
  phase the request is), keep-alive, no proxy and no redirect: httpconn.DeadlineConnection with
  HTTP/1.1 of our own (base/http1.py), the same for fleet mode's query client (tests/unit/sidecar/test_scrape.py and
  tests/system/reliability/test_fault_matrix.py prove the guard here);
- a redirect is counted as `http_status` (a 3xx to a metadata address is not followed);
- the body is asked for uncompressed (`Accept-Encoding: identity`): vLLM's prometheus_client
  compresses /metrics at gzip's level 9 when asked, about 1.6 ms of the API server's CPU for each
  poll of a 56 KB payload, to save bytes on a loopback connection where they cost nothing
  (docs/benchmarks.md, "The running process against a peer poller");
- a server that compresses anyway is read: gzip is decoded here, with a cap on *decoded* bytes, so
  a 200 MiB gzip bomb never reaches memory.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from specwatch.base.http1 import Response
from specwatch.base.httpconn import DeadlineConnection, TransferError

CONNECT_TIMEOUT = 1.0  # seconds, at most (and never beyond the deadline)


def steady_clock() -> Callable[[], float]:
    """Wall-clock seconds that never step: Unix time at start plus monotonic time since. Windows are
    taken on these times, so an NTP step back cannot make new polls look older than old ones."""
    wall0, mono0 = time.time(), time.monotonic()
    return lambda: wall0 + (time.monotonic() - mono0)


class ScrapeError(TransferError):
    """A failed poll; `reason` is one of timeout, connect, tls, http_status, too_large, invalid."""


@dataclass(frozen=True)
class ScrapeResult:
    text: str
    duration: float
    bytes: int


class Scraper:
    def __init__(self, url: str, *, timeout: float, max_bytes: int, headers: Mapping[str, str] | None = None):
        self.url = url
        self.timeout = timeout
        self.max_bytes = max_bytes
        parts = urlsplit(url)
        self._request_target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._http = DeadlineConnection(url, connect_timeout=CONNECT_TIMEOUT, error=ScrapeError)
        self.headers = {
            "Accept": "text/plain;version=0.0.4;q=1,*/*;q=0.1",
            "Accept-Encoding": "identity",
            "User-Agent": "specwatch",
            **dict(headers or {}),
            **self._http.auth,
        }

    def close(self) -> None:
        self._http.close()

    def fetch(self) -> ScrapeResult:
        start = time.monotonic()
        with self._http.deadline(self.timeout) as deadline:
            response = self._http.request("GET", self._request_target, self.headers, deadline)
            try:
                if 300 <= response.status < 400:
                    raise ScrapeError("http_status", "HTTP 3xx redirect (not followed)")
                if response.status != 200:
                    raise ScrapeError("http_status", f"HTTP {response.status}")
                body = self._read_body(response, deadline)
            finally:
                response.close()
        duration = time.monotonic() - start
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise ScrapeError("invalid", "body is not UTF-8") from None
        return ScrapeResult(text, duration, len(body))

    def _read_body(self, response: Response, deadline: float) -> bytes:
        encoding = (response.getheader("Content-Encoding") or "identity").strip().lower()
        if encoding in ("", "identity"):
            decoder = None
        elif encoding in ("gzip", "x-gzip"):
            decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            decoder = zlib.decompressobj()
        else:
            raise ScrapeError("invalid", f"unsupported Content-Encoding {encoding[:40]!r}")
        declared = response.getheader("Content-Length")
        if decoder is None and declared and declared.isdigit() and int(declared) > self.max_bytes:
            raise ScrapeError("too_large", f"Content-Length {declared} over max_bytes {self.max_bytes}")
        parts: list[bytes] = []
        size = 0
        try:
            for chunk in self._http.chunks(response, deadline):
                if decoder is not None:
                    # Decompress in bounded steps: never more than the cap allows (gzip bombs).
                    data = decoder.decompress(chunk, self.max_bytes - size + 1)
                    while True:
                        size += len(data)
                        if size > self.max_bytes:
                            raise ScrapeError("too_large", f"decoded body over max_bytes {self.max_bytes}")
                        parts.append(data)
                        if not decoder.unconsumed_tail:
                            break
                        data = decoder.decompress(decoder.unconsumed_tail, self.max_bytes - size + 1)
                    if decoder.eof and decoder.unused_data:
                        # Bytes after the compressed stream's end would pile up in unused_data
                        # uncounted (a tiny gzip body, then endless junk): refused at once.
                        raise ScrapeError("invalid", "bytes after the end of the compressed body")
                else:
                    size += len(chunk)
                    if size > self.max_bytes:
                        raise ScrapeError("too_large", f"body over max_bytes {self.max_bytes}")
                    parts.append(chunk)
            if decoder is not None:
                tail = decoder.flush()
                size += len(tail)
                if size > self.max_bytes:
                    raise ScrapeError("too_large", f"decoded body over max_bytes {self.max_bytes}")
                parts.append(tail)
        except zlib.error as exc:
            raise ScrapeError("invalid", f"bad gzip body: {exc}") from None
        body = b"".join(parts)
        if declared and declared.isdigit() and decoder is None and len(body) != int(declared):
            raise ScrapeError("connect", f"body truncated: {len(body)} of {declared} bytes")
        return body
