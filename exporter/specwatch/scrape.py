"""HTTP GET of one target's /metrics, bounded in time and in decoded bytes.

- one keep-alive requests.Session per target, trust_env=False (HTTP_PROXY must never capture a
  loopback poll), no redirects (a 3xx to a metadata address is not followed);
- a whole-request deadline: requests' timeouts are per socket read, so a server dripping a byte
  every 0.8 s would hold a poll forever; the deadline is checked between reads and the
  socket timeout shrinks to the time left;
- gzip is decoded here, with a cap on *decoded* bytes, so a 200 MiB gzip bomb never reaches memory.
"""

from __future__ import annotations

import socket
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit, urlunsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

CHUNK = 64 * 1024


def redact_url(url: str) -> str:
    """The URL without credentials or query: safe to log and to serve on /api/v1/status."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def steady_clock():
    """Wall-clock seconds that never step: Unix time at start plus monotonic time since. Windows are
    taken on these times, so an NTP step back cannot make new polls look older than old ones."""
    wall0, mono0 = time.time(), time.monotonic()
    return lambda: wall0 + (time.monotonic() - mono0)


class ScrapeError(Exception):
    """A failed poll; `reason` is one of timeout, connect, http_status, too_large, invalid."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class ScrapeResult:
    text: str
    duration: float
    bytes: int


class _WatchedPool:
    """A connection pool that tells its adapter which connection a request runs on."""
    on_connection: Callable[[Any], None] | None = None

    def _get_conn(self, timeout=None):
        conn = super()._get_conn(timeout)  # type: ignore[misc]
        if self.on_connection is not None:
            self.on_connection(conn)
        return conn


class _DeadlineAdapter(HTTPAdapter):
    """requests' timeouts bound each socket read, not the request: a server that drips its headers
    one line at a time would hold a poll forever. This adapter knows the connection in use, so a
    watchdog can cut it at the deadline whatever phase the request is in."""

    def __init__(self, on_connection: Callable[[Any], None]):
        self._on_connection = on_connection
        super().__init__(max_retries=0, pool_connections=1, pool_maxsize=1)

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        hook = staticmethod(self._on_connection)
        self.poolmanager.pool_classes_by_scheme = {
            "http": type("WatchedHTTPPool", (_WatchedPool, HTTPConnectionPool), {"on_connection": hook}),
            "https": type("WatchedHTTPSPool", (_WatchedPool, HTTPSConnectionPool), {"on_connection": hook}),
        }


class Scraper:
    def __init__(self, url: str, *, timeout: float, max_bytes: int, headers: Mapping[str, str] | None = None):
        self.url = url
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.session = requests.Session()
        self.session.trust_env = False
        self.session.max_redirects = 0
        self._conn: Any = None
        self._expired = False
        adapter = _DeadlineAdapter(self._track)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.headers = {
            "Accept": "text/plain;version=0.0.4;q=1,*/*;q=0.1",
            "Accept-Encoding": "gzip",
            "User-Agent": "specwatch",
            **dict(headers or {}),
        }

    def close(self) -> None:
        self.session.close()

    def _track(self, conn: Any) -> None:
        self._conn = conn

    def _cut(self) -> None:
        """Watchdog at the deadline: shut the socket down so any blocked read returns at once."""
        self._expired = True
        sock = getattr(self._conn, "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def fetch(self) -> ScrapeResult:
        self._expired = False
        self._conn = None
        watchdog = threading.Timer(self.timeout, self._cut)
        watchdog.daemon = True
        watchdog.start()
        try:
            return self._fetch()
        except ScrapeError as exc:
            if self._expired and exc.reason != "timeout":
                raise ScrapeError("timeout", f"whole-request deadline of {self.timeout:g}s passed") from None
            raise
        finally:
            watchdog.cancel()

    def _fetch(self) -> ScrapeResult:
        start = time.monotonic()
        deadline = start + self.timeout
        try:
            response = self.session.get(self.url, headers=self.headers, stream=True, allow_redirects=False,
                                        timeout=(min(self.timeout, 1.0), self.timeout))
        except requests.exceptions.ConnectTimeout as exc:
            raise ScrapeError("timeout", "connect timed out") from None  # requests' text holds the URL
        except requests.exceptions.ReadTimeout as exc:
            raise ScrapeError("timeout", "no response in time") from None
        except requests.exceptions.TooManyRedirects:
            # max_redirects=0 makes requests raise on any 3xx even with allow_redirects=False (it
            # never sends the next request): this is the target answering with a redirect.
            raise ScrapeError("http_status", "HTTP 3xx redirect (not followed)") from None
        except (requests.exceptions.ConnectionError, OSError) as exc:
            raise ScrapeError("connect", f"cannot connect: {type(exc).__name__}") from None
        except requests.exceptions.RequestException as exc:
            raise ScrapeError("invalid", f"request failed: {type(exc).__name__}") from None
        try:
            if response.status_code != 200:
                raise ScrapeError("http_status", f"HTTP {response.status_code}")
            body = self._read_body(response, deadline)
        finally:
            response.close()
        duration = time.monotonic() - start
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise ScrapeError("invalid", "body is not UTF-8") from None
        return ScrapeResult(text, duration, len(body))

    def _read_body(self, response: requests.Response, deadline: float) -> bytes:
        encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding in ("", "identity"):
            decoder = None
        elif encoding in ("gzip", "x-gzip"):
            decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            decoder = zlib.decompressobj()
        else:
            raise ScrapeError("invalid", f"unsupported Content-Encoding {encoding[:40]!r}")
        declared = response.headers.get("Content-Length")
        if decoder is None and declared and declared.isdigit() and int(declared) > self.max_bytes:
            raise ScrapeError("too_large", f"Content-Length {declared} over max_bytes {self.max_bytes}")
        raw = response.raw
        parts: list[bytes] = []
        size = 0
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ScrapeError("timeout", "deadline passed while reading the body")
                _set_socket_timeout(raw, remaining)
                chunk = raw.read1(CHUNK, decode_content=False)
                if not chunk:
                    break
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
        except ScrapeError:
            raise
        except zlib.error as exc:
            raise ScrapeError("invalid", f"bad gzip body: {exc}") from None
        except (TimeoutError, requests.exceptions.Timeout) as exc:
            raise ScrapeError("timeout", f"read timed out: {type(exc).__name__}") from None
        except Exception as exc:  # noqa: BLE001 - urllib3/http.client raise many types on a cut body
            if "timed out" in str(exc).lower():
                raise ScrapeError("timeout", "read timed out") from None
            raise ScrapeError("connect", f"connection broken while reading: {type(exc).__name__}") from None
        body = b"".join(parts)
        if declared and declared.isdigit() and decoder is None and len(body) != int(declared):
            raise ScrapeError("connect", f"body truncated: {len(body)} of {declared} bytes")
        return body


def _set_socket_timeout(raw, seconds: float) -> None:
    """Shrink the socket timeout to the time left, so one slow read cannot outlive the deadline."""
    try:
        sock = raw._connection.sock  # urllib3 2.x HTTPResponse -> HTTPConnection -> socket
    except AttributeError:
        sock = None
    if sock is None:
        try:
            sock = raw._fp.fp.raw._sock  # http.client response file -> socket
        except AttributeError:
            return
    try:
        sock.settimeout(max(seconds, 0.001))
    except OSError:
        pass
