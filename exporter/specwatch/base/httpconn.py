"""One kept-alive HTTP connection with a whole-request deadline, for both sources: the sidecar's
scraper (scrape.py, vLLM's /metrics) and fleet mode's query client (fleet/client.py, Prometheus).

- plain `http.client` on a connection opened and owned here: no proxy from the environment can
  capture a request, and no redirect is followed (the callers refuse a 3xx);
- a whole-request deadline: a socket timeout bounds each read, not the request, so a server
  dripping a byte every 0.1 s would hold a request forever. One watchdog thread for the process
  (WATCHDOG, started on first use; no thread per request) shuts the socket down at the deadline,
  so whatever read is blocked (connect, headers, body) returns at once; the body loop also
  checks the deadline per chunk and shrinks the socket timeout to the time left. Only public
  interfaces of the standard library are used (`socket.shutdown`, `HTTPConnection.sock`,
  `HTTPResponse.read1`), so an upgrade cannot silently disable the guard
  (tests/unit/sidecar/test_scrape.py, tests/system/reliability/test_fault_matrix.py and
  tests/system/fleet/test_faults.py prove it);
- a connection cut, expired or left mid-answer is closed, never reused; an idle kept-alive one
  the server closed is noticed before it is used.

Failures are raised as the caller's own error class (a TransferError with a reason): `timeout`,
`connect`, `tls` (the TLS handshake or session failed: an untrusted or expired certificate, a
name mismatch, no common protocol; a certificate problem is not a network one), or `invalid` (a
request that cannot be sent).
"""

from __future__ import annotations

import base64
import contextlib
import heapq
import http.client
import itertools
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from urllib.parse import unquote, urlsplit

CHUNK = 64 * 1024


def tls_failure(exc: ssl.SSLError) -> str:
    """A short, credential-free description of a TLS failure (the certificate check's own words)."""
    detail = getattr(exc, "verify_message", None) or getattr(exc, "reason", None) or type(exc).__name__
    return f"TLS failed: {type(exc).__name__}: {str(detail)[:200]}"


class TransferError(Exception):
    """A failed request; `reason` names the failure for the caller's counters."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def tls_context() -> ssl.SSLContext:
    """Certificate checks as requests did: the certifi bundle when installed, else the system store."""
    try:
        import certifi
    except ImportError:
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())


def basic_auth(username: str | None, password: str | None) -> dict[str, str]:
    """Credentials in the URL become an Authorization header, as HTTP clients conventionally do."""
    if username is None:
        return {}
    token = f"{unquote(username)}:{unquote(password or '')}".encode("latin-1")
    return {"Authorization": "Basic " + base64.b64encode(token).decode("ascii")}


def set_timeout(conn: http.client.HTTPConnection, deadline: float) -> None:
    """Shrink the socket timeout to the time left, so one slow read cannot outlive the deadline."""
    if conn.sock is not None:
        with contextlib.suppress(OSError):
            conn.sock.settimeout(max(deadline - time.monotonic(), 0.001))


def dropped(sock: socket.socket) -> bool:
    """An idle kept-alive socket that is readable was closed by the server (or sent garbage)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class Watchdog:
    """One daemon thread that calls each armed function at its deadline unless it was disarmed
    first: the whole-request deadline of every connection of the process, without a thread (or a
    threading.Timer) per request. Disarmed entries are dropped when they come due. The functions
    must be quick and must not arm or disarm (a socket shutdown: DeadlineConnection._cut)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: list[tuple[float, int, list[Callable[[], None] | None]]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, when: float, fn: Callable[[], None]) -> list[Callable[[], None] | None]:
        """Call fn at monotonic time `when`; the returned token disarms it (disarm)."""
        token: list[Callable[[], None] | None] = [fn]
        with self._cond:
            heapq.heappush(self._due, (when, next(self._seq), token))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="specwatch-deadlines", daemon=True)
                self._thread.start()
            self._cond.notify()
        return token

    def disarm(self, token: list[Callable[[], None] | None]) -> None:
        """After this returns the function has run or never will (it runs under the same lock)."""
        with self._cond:
            token[0] = None

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._due and self._due[0][2][0] is None:
                    heapq.heappop(self._due)  # disarmed
                if not self._due:
                    self._cond.wait()
                    continue
                when, _, token = self._due[0]
                left = when - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                heapq.heappop(self._due)
                fn, token[0] = token[0], None
                if fn is not None:  # under the lock: a disarm never races a late call
                    with contextlib.suppress(Exception):
                        fn()


WATCHDOG = Watchdog()


class DeadlineConnection:
    """One connection to the host of `url`, kept alive between requests, one request at a time.
    `error` is the caller's TransferError subclass, raised for every failure here."""

    def __init__(self, url: str, *, connect_timeout: float, error: type[TransferError]):
        parts = urlsplit(url)
        self._scheme = parts.scheme
        self._host = parts.hostname or ""
        self._port = parts.port
        self.auth = basic_auth(parts.username, parts.password)
        self._connect_timeout = connect_timeout
        self._error = error
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()  # the watchdog and the request both touch the connection
        self._expired = False

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

    @contextlib.contextmanager
    def deadline(self, timeout: float) -> Iterator[float]:
        """One request's whole-request deadline (yielded, monotonic seconds). A failure after the
        watchdog fired is a timeout whatever broke; the connection is closed unless the request
        completed in time."""
        with self._lock:
            self._expired = False
        deadline = time.monotonic() + timeout
        watchdog = WATCHDOG.arm(deadline, self._cut)
        completed = False
        try:
            yield deadline
            completed = True
        except TransferError as exc:
            if self._expired and exc.reason != "timeout":
                raise type(exc)("timeout", f"whole-request deadline of {timeout:g}s passed") from None
            raise
        finally:
            WATCHDOG.disarm(watchdog)
            if not completed or self._expired:
                self.close()  # a connection in an unknown state is never reused

    def _connection(self, deadline: float) -> http.client.HTTPConnection:
        """The kept-alive connection if the server has not closed it, else a new one."""
        conn = self._conn
        if conn is not None and conn.sock is not None and not dropped(conn.sock):
            return conn
        self.close()
        timeout = max(min(self._connect_timeout, deadline - time.monotonic()), 0.001)
        if self._scheme == "https":
            conn = http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=tls_context())
        elif self._scheme == "http":
            conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        else:
            raise self._error("invalid", f"unsupported URL scheme {self._scheme[:10]!r}")
        with self._lock:
            self._conn = conn
        try:
            conn.connect()
        except TimeoutError:
            raise self._error("timeout", "connect timed out") from None
        except ssl.SSLError as exc:  # an OSError too: caught first, a certificate is not the network
            raise self._error("tls", tls_failure(exc)) from None
        except OSError as exc:
            raise self._error("connect", f"cannot connect: {type(exc).__name__}") from None
        with self._lock:
            if self._expired:  # the watchdog fired before the socket existed
                raise self._error("timeout", "connect outlived the deadline")
        return conn

    def request(
        self, method: str, target: str, headers: Mapping[str, str], deadline: float, body: bytes | None = None
    ) -> http.client.HTTPResponse:
        """Send the request and read the status line and headers, within the deadline."""
        conn = self._connection(deadline)
        try:
            set_timeout(conn, deadline)
            conn.request(method, target, body=body, headers=dict(headers))
            return conn.getresponse()
        except TimeoutError:
            raise self._error("timeout", "no answer in time") from None
        except ssl.SSLError as exc:
            raise self._error("tls", tls_failure(exc)) from None
        except (http.client.HTTPException, OSError) as exc:
            raise self._error("connect", f"connection failed: {type(exc).__name__}") from None
        except ValueError as exc:  # e.g. a header value with a line break
            raise self._error("invalid", f"request failed: {type(exc).__name__}") from None

    def chunks(self, response: http.client.HTTPResponse, deadline: float, size: int = CHUNK) -> Iterator[bytes]:
        """The body as it arrives, each read bounded by the time left; ends at the body's end."""
        while True:
            if time.monotonic() >= deadline:
                raise self._error("timeout", "deadline passed while reading the body")
            conn = self._conn
            if conn is not None:
                set_timeout(conn, deadline)
            try:
                chunk = response.read1(size)
            except TimeoutError as exc:
                raise self._error("timeout", f"read timed out: {type(exc).__name__}") from None
            except ssl.SSLError as exc:
                raise self._error("tls", tls_failure(exc)) from None
            except (http.client.HTTPException, OSError, ValueError) as exc:
                raise self._error("connect", f"connection broken while reading: {type(exc).__name__}") from None
            if not chunk:
                return
            yield chunk
