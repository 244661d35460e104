"""One kept-alive HTTP connection with a whole-request deadline, for both sources: the sidecar's
scraper (scrape.py, vLLM's /metrics) and fleet mode's query client (fleet/client.py, Prometheus).

- HTTP/1.1 of our own (http1.py) on a socket opened and owned here: no proxy from the
  environment can capture a request, and no redirect is followed (the callers refuse a 3xx).
  What a poll does not need is not imported: `ssl` (and certifi) only for an https target,
  `base64` only for a URL with credentials, and the host is resolved as ASCII bytes so the
  socket module never loads the IDNA codec (a non-ASCII name is encoded with it, then only);
- a whole-request deadline: a socket timeout bounds each read, not the request, so a server
  dripping a byte every 0.1 s would hold a request forever. Over plain HTTP the socket is
  non-blocking and every send and read waits in poll() for no longer than the time left, checked
  before each: no thread, no signal, two system calls per read. Over TLS one read of the
  ssl module can wait on several records, so one watchdog thread for the process (WATCHDOG, started
  on first https use; no thread per request) shuts the socket down at the deadline, and whatever
  read is blocked (TLS handshake, headers, body) returns at once; each read also shrinks the socket
  timeout to the time left. Connecting is bounded by its own timeout, never past the deadline
  (tests/unit/sidecar/test_scrape.py, tests/unit/base/test_httpconn.py,
  tests/system/reliability/test_fault_matrix.py and tests/system/fleet/test_faults.py prove it);
- a connection cut, expired, left mid-answer, or whose answer said it closes, is closed, never
  reused; an idle kept-alive one the server closed is noticed before it is used.

Failures are raised as the caller's own error class (a TransferError with a reason): `timeout`,
`connect` (no connection, or it broke, or the answer broke HTTP/1.1), `tls` (the TLS handshake or
session failed: an untrusted or expired certificate, a name mismatch, no common protocol; a
certificate problem is not a network one), or `invalid` (a request that cannot be sent).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from specwatch.base.http1 import ProtocolError, Response, authority, encode_request, read_response

if TYPE_CHECKING:
    import ssl

CHUNK = 64 * 1024
_DEFAULT_PORTS = {"http": 80, "https": 443}


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
    import ssl

    try:
        import certifi
    except ImportError:
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())


def basic_auth(username: str | None, password: str | None) -> dict[str, str]:
    """Credentials in the URL become an Authorization header, as HTTP clients conventionally do."""
    if username is None:
        return {}
    import base64  # only for a URL with credentials

    token = f"{unquote(username)}:{unquote(password or '')}".encode("latin-1")
    return {"Authorization": "Basic " + base64.b64encode(token).decode("ascii")}


def set_timeout(sock: socket.socket | None, deadline: float) -> None:
    """Shrink the socket timeout to the time left, so one slow read cannot outlive the deadline."""
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.settimeout(max(deadline - time.monotonic(), 0.001))


def _milliseconds(seconds: float) -> int:
    """poll()'s timeout for `seconds` left: rounded up, so a wait never ends before the deadline."""
    return max(int(seconds * 1000.0) + 1, 1)


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
            entry = (when, next(self._seq), token)
            heapq.heappush(self._due, entry)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="specwatch-deadlines", daemon=True)
                self._thread.start()
            elif self._due[0] is entry:
                # Only a new earliest deadline needs the thread awake: otherwise it already sleeps
                # until an earlier one (usually the previous poll's, disarmed), and looks again then.
                # A poll wakes it once, not twice.
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
        # ssl.SSLError once a TLS connection is made (an empty tuple catches nothing).
        self._tls_errors: tuple[type[Exception], ...] = ()
        self._sock: socket.socket | None = None
        self._response: Response | None = None  # the last answer on _sock
        self._lock = threading.Lock()  # the watchdog and the request both touch the socket
        self._expired = False
        self._deadline = 0.0  # the request in flight's (monotonic seconds)
        self._ready: select.poll | None = None  # plain HTTP: the non-blocking socket's readiness
        # The last request's (method, target, headers, body) and its bytes.
        self._encoded: tuple[tuple[str, str, tuple[tuple[str, str], ...], bytes | None], bytes] | None = None

    def close(self) -> None:
        with self._lock:
            sock, self._sock = self._sock, None
            self._response = None
            self._ready = None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def _cut(self) -> None:
        """Watchdog at the deadline: shut the socket down so any blocked read returns at once."""
        with self._lock:
            self._expired = True
            sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    @contextlib.contextmanager
    def deadline(self, timeout: float) -> Iterator[float]:
        """One request's whole-request deadline (yielded, monotonic seconds). A failure after the
        watchdog fired is a timeout whatever broke, and so is a success (a close-delimited body
        ends when the socket is shut down); the connection is closed unless the request completed
        in time and its answer leaves it reusable."""
        with self._lock:
            self._expired = False
        deadline = self._deadline = time.monotonic() + timeout
        # Plain HTTP waits in poll() with the time left (_recv, _send_all): no watchdog to wake.
        watchdog = WATCHDOG.arm(deadline, self._cut) if self._scheme == "https" else None
        completed = False
        try:
            yield deadline
            if self._expired:  # the cut ended a body read to the end of the connection: not the end
                raise self._error("timeout", f"whole-request deadline of {timeout:g}s passed")
            completed = True
        except TransferError as exc:
            if self._expired and exc.reason != "timeout":
                raise type(exc)("timeout", f"whole-request deadline of {timeout:g}s passed") from None
            raise
        finally:
            if watchdog is not None:
                WATCHDOG.disarm(watchdog)
            response = self._response
            if not completed or self._expired or response is None or not response.reusable:
                self.close()  # a connection in an unknown state is never reused

    def _address(self) -> bytes:
        """The host as getaddrinfo takes it without the IDNA codec: ASCII bytes (IDNA only for a
        non-ASCII name)."""
        try:
            return self._host.encode("ascii")
        except UnicodeEncodeError:
            pass
        try:
            return self._host.encode("idna")
        except UnicodeError:
            raise self._error("invalid", "host name has no IDNA form") from None

    def _connection(self, deadline: float) -> socket.socket:
        """The kept-alive socket if its last answer allows reuse and the server has not closed it,
        else a new connection."""
        sock, response = self._sock, self._response
        if sock is not None and response is not None and response.reusable:
            ready = self._ready
            # Plain HTTP asks the socket's own poll object (no fd set built per request), TLS select().
            if not (ready.poll(0) if ready is not None else dropped(sock)):
                return sock
        self.close()
        if self._scheme not in _DEFAULT_PORTS:
            raise self._error("invalid", f"unsupported URL scheme {self._scheme[:10]!r}")
        address = (self._address(), self._port or _DEFAULT_PORTS[self._scheme])
        timeout = max(min(self._connect_timeout, deadline - time.monotonic()), 0.001)
        try:
            sock = socket.create_connection(address, timeout)  # type: ignore[arg-type]  # bytes host: no IDNA codec
            with self._lock:
                self._sock = sock  # the watchdog can cut the TLS handshake from here on
                expired = self._expired
            if expired:  # the watchdog fired while the name resolved or the socket connected
                sock.close()
                raise self._error("timeout", "connect outlived the deadline")
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._scheme == "https":
                import ssl  # only for an https target

                self._tls_errors = (ssl.SSLError,)
                sock = tls_context().wrap_socket(sock, server_hostname=self._host)
                with self._lock:
                    self._sock = sock
            else:
                sock.setblocking(False)  # once per connection: reads and sends wait in poll()
                ready = select.poll()
                ready.register(sock, select.POLLIN)
                self._ready = ready
        except TimeoutError:
            raise self._error("timeout", "connect timed out") from None
        except self._tls_errors as exc:  # an OSError too: caught first, a certificate is not the network
            raise self._error("tls", tls_failure(exc)) from None  # type: ignore[arg-type]
        except OSError as exc:
            raise self._error("connect", f"cannot connect: {type(exc).__name__}") from None
        with self._lock:
            if self._expired:  # the watchdog fired before the socket existed
                raise self._error("timeout", "connect outlived the deadline")
        return sock

    def request(
        self, method: str, target: str, headers: Mapping[str, str], deadline: float, body: bytes | None = None
    ) -> Response:
        """Send the request and read the status line and headers, within the deadline."""
        # A poller sends the same request every poll: its bytes are encoded once and kept.
        key = (method, target, tuple(headers.items()), body)
        encoded = self._encoded
        if encoded is not None and encoded[0] == key:
            data = encoded[1]
        else:
            try:
                host = authority(self._host, self._port, _DEFAULT_PORTS.get(self._scheme, 0))
                data = encode_request(method, target, host, headers, body)
            except ValueError as exc:  # e.g. a header value with a line break (UnicodeError included)
                raise self._error("invalid", f"request failed: {type(exc).__name__}") from None
            self._encoded = (key, data)
        sock = self._connection(deadline)
        self._response = None
        try:
            if self._ready is None:
                set_timeout(sock, deadline)
                sock.sendall(data)
            else:
                self._send_all(sock, data)
            response = read_response(self._recv, method)
        except TimeoutError:
            raise self._error("timeout", "no answer in time") from None
        except self._tls_errors as exc:
            raise self._error("tls", tls_failure(exc)) from None  # type: ignore[arg-type]
        except (ProtocolError, OSError, ValueError) as exc:
            raise self._error("connect", f"connection failed: {type(exc).__name__}") from None
        self._response = response
        return response

    def _recv(self, n: int) -> bytes:
        """One read of the answer, bounded by the time left to the request's deadline (checked
        before each read, so bytes dripped one at a time end there too). TimeoutError past it."""
        sock, ready = self._sock, self._ready
        if sock is None:
            raise OSError("connection closed")
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("whole-request deadline passed")
        if ready is None:  # TLS: the socket's own timeout, and the watchdog past the deadline
            set_timeout(sock, self._deadline)
            return sock.recv(n)
        while True:
            if not ready.poll(_milliseconds(left)):
                raise TimeoutError("no answer before the whole-request deadline")
            try:
                return sock.recv(n)
            except (BlockingIOError, InterruptedError):
                left = self._deadline - time.monotonic()  # readable, then not (a spurious wake-up)
                if left <= 0:
                    raise TimeoutError("whole-request deadline passed") from None

    def _send_all(self, sock: socket.socket, data: bytes) -> None:
        """sendall on the non-blocking socket: what the buffer does not take waits for room in
        poll(), no longer than the time left."""
        view = memoryview(data)
        while view:
            with contextlib.suppress(BlockingIOError, InterruptedError):
                view = view[sock.send(view) :]
            if view:
                left = self._deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("whole-request deadline passed while sending")
                writable = select.poll()
                writable.register(sock, select.POLLOUT)
                if not writable.poll(_milliseconds(left)):
                    raise TimeoutError("no room to send before the whole-request deadline")

    def chunks(self, response: Response, deadline: float, size: int = CHUNK) -> Iterator[bytes]:
        """The body as it arrives, each read bounded by the time left; ends at the body's end."""
        while True:
            if time.monotonic() >= deadline:
                raise self._error("timeout", "deadline passed while reading the body")
            try:
                chunk = response.read1(size)  # each recv bounded by the time left (_recv)
            except TimeoutError as exc:
                raise self._error("timeout", f"read timed out: {type(exc).__name__}") from None
            except self._tls_errors as exc:
                raise self._error("tls", tls_failure(exc)) from None  # type: ignore[arg-type]
            except (ProtocolError, OSError, ValueError) as exc:
                raise self._error("connect", f"connection broken while reading: {type(exc).__name__}") from None
            if not chunk:
                return
            yield chunk
