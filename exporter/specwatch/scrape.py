"""HTTP GET of one target's /metrics, bounded in time and in decoded bytes.

- plain `http.client` on a connection this module opens and owns (kept alive between polls): no
  proxy from the environment can capture a loopback poll, and no redirect is followed (a 3xx to a
  metadata address is counted as `http_status`);
- a whole-request deadline: a socket timeout bounds each read, not the request, so a server dripping
  a byte every 0.1 s would hold a poll forever. A watchdog thread shuts the socket down at the
  deadline, so whatever read is blocked (connect, headers, body) returns at once; the body loop also
  checks the deadline per chunk and shrinks the socket timeout to the time left. Only public
  interfaces of the standard library are used (`socket.shutdown`, `HTTPConnection.sock`,
  `HTTPResponse.read1`), no private attribute of any library, so an upgrade cannot silently
  disable the guard (tests/test_scrape.py and tests/reliability/test_fault_matrix.py prove it);
- gzip is decoded here, with a cap on *decoded* bytes, so a 200 MiB gzip bomb never reaches memory.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import select
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit

CHUNK = 64 * 1024
CONNECT_TIMEOUT = 1.0  # seconds, at most (and never beyond the deadline)


def redact_url(url: str) -> str:
    """The URL without credentials or query: safe to log and to serve on /api/v1/status."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def steady_clock() -> Callable[[], float]:
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


def _tls_context() -> ssl.SSLContext:
    """Certificate checks as before: the certifi bundle when installed (what requests used), else the
    system store."""
    try:
        import certifi
    except ImportError:
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())


def _basic_auth(username: str | None, password: str | None) -> dict[str, str]:
    """Credentials in the URL become an Authorization header, as HTTP clients conventionally do."""
    if username is None:
        return {}
    token = f"{unquote(username)}:{unquote(password or '')}".encode("latin-1")
    return {"Authorization": "Basic " + base64.b64encode(token).decode("ascii")}


class Scraper:
    def __init__(self, url: str, *, timeout: float, max_bytes: int, headers: Mapping[str, str] | None = None):
        self.url = url
        self.timeout = timeout
        self.max_bytes = max_bytes
        parts = urlsplit(url)
        self._scheme = parts.scheme
        self._host = parts.hostname or ""
        self._port = parts.port
        self._request_target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()  # the watchdog and the poll both touch the connection
        self._expired = False
        self.headers = {
            "Accept": "text/plain;version=0.0.4;q=1,*/*;q=0.1",
            "Accept-Encoding": "gzip",
            "User-Agent": "specwatch",
            **dict(headers or {}),
            **_basic_auth(parts.username, parts.password),
        }

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _cut(self) -> None:
        """Watchdog at the deadline: shut the socket down so any blocked read returns at once."""
        with self._lock:
            self._expired = True
            sock = self._conn.sock if self._conn is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def fetch(self) -> ScrapeResult:
        with self._lock:
            self._expired = False
        watchdog = threading.Timer(self.timeout, self._cut)
        watchdog.daemon = True
        watchdog.start()
        reusable = False
        try:
            result, reusable = self._fetch()
            return result
        except ScrapeError as exc:
            if self._expired and exc.reason != "timeout":
                raise ScrapeError("timeout", f"whole-request deadline of {self.timeout:g}s passed") from None
            raise
        finally:
            watchdog.cancel()
            if not reusable or self._expired:
                self.close()  # a connection in an unknown state is never reused

    def _connection(self, deadline: float) -> http.client.HTTPConnection:
        """The kept-alive connection if the server has not closed it, else a new one."""
        conn = self._conn
        if conn is not None and conn.sock is not None and not _dropped(conn.sock):
            return conn
        self.close()
        timeout = max(min(CONNECT_TIMEOUT, deadline - time.monotonic()), 0.001)
        if self._scheme == "https":
            conn = http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=_tls_context())
        elif self._scheme == "http":
            conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        else:
            raise ScrapeError("invalid", f"unsupported URL scheme {self._scheme[:10]!r}")
        with self._lock:
            self._conn = conn
        try:
            conn.connect()
        except TimeoutError:
            raise ScrapeError("timeout", "connect timed out") from None
        except OSError as exc:
            raise ScrapeError("connect", f"cannot connect: {type(exc).__name__}") from None
        with self._lock:
            if self._expired:  # the watchdog fired before the socket existed
                raise ScrapeError("timeout", "connect outlived the deadline")
        return conn

    def _fetch(self) -> tuple[ScrapeResult, bool]:
        start = time.monotonic()
        deadline = start + self.timeout
        conn = self._connection(deadline)
        try:
            _set_timeout(conn, deadline)
            conn.request("GET", self._request_target, headers=self.headers)
            response = conn.getresponse()
        except TimeoutError:
            raise ScrapeError("timeout", "no response in time") from None
        except (http.client.HTTPException, OSError) as exc:
            raise ScrapeError("connect", f"connection failed: {type(exc).__name__}") from None
        except ValueError as exc:  # e.g. a header value with a line break
            raise ScrapeError("invalid", f"request failed: {type(exc).__name__}") from None
        try:
            if 300 <= response.status < 400:
                raise ScrapeError("http_status", "HTTP 3xx redirect (not followed)")
            if response.status != 200:
                raise ScrapeError("http_status", f"HTTP {response.status}")
            body = self._read_body(response, conn, deadline)
        finally:
            response.close()
        duration = time.monotonic() - start
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise ScrapeError("invalid", "body is not UTF-8") from None
        # Reusable: http.client drops conn.sock itself when the server asked to close.
        return ScrapeResult(text, duration, len(body)), True

    def _read_body(
        self, response: http.client.HTTPResponse, conn: http.client.HTTPConnection, deadline: float
    ) -> bytes:
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
            while True:
                if deadline - time.monotonic() <= 0:
                    raise ScrapeError("timeout", "deadline passed while reading the body")
                _set_timeout(conn, deadline)
                chunk = response.read1(CHUNK)
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
        except TimeoutError as exc:
            raise ScrapeError("timeout", f"read timed out: {type(exc).__name__}") from None
        except (http.client.HTTPException, OSError, ValueError) as exc:
            raise ScrapeError("connect", f"connection broken while reading: {type(exc).__name__}") from None
        body = b"".join(parts)
        if declared and declared.isdigit() and decoder is None and len(body) != int(declared):
            raise ScrapeError("connect", f"body truncated: {len(body)} of {declared} bytes")
        return body


def _set_timeout(conn: http.client.HTTPConnection, deadline: float) -> None:
    """Shrink the socket timeout to the time left, so one slow read cannot outlive the deadline."""
    if conn.sock is not None:
        with contextlib.suppress(OSError):
            conn.sock.settimeout(max(deadline - time.monotonic(), 0.001))


def _dropped(sock: socket.socket) -> bool:
    """An idle kept-alive socket that is readable was closed by the server (or sent garbage)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)
