"""HTTP/1.x request heads parsed and response heads written, for the HTTP front (http_server.py).

The parser answers what http.server's BaseHTTPRequestHandler (and the http.client and email
parsers under it) answered the same head, without importing them: they bring socketserver,
html, mimetypes, http.client and the email package to a sidecar's start-up. Kept as it was,
because a client could see it:

- the request line is split on whitespace (str.split of its Latin-1 text): three words, or two;
  a version is `HTTP/<major>.<minor>` of at most ten digits each (else 400), 2.0 and above are
  505, any 0.x or 1.x is served. A request line over MAX_LINE bytes is 414;
- header lines are counted and bounded as http.client reads them (lines ending in LF: at most
  MAX_HEADERS of them with the blank line, each at most MAX_LINE bytes, else 431), then read as
  the email parser reads them: split at CR, LF or CRLF; the first line that is neither
  `name:` (name of visible characters but `:`), nor a continuation (a leading space or tab),
  nor a `From ` line ends the headers, and what follows is ignored; a continuation is joined to
  the value with its line break kept; a continuation with no header before it, a `From ` line
  and a line with an empty name are dropped; the value is the rest of its first line with
  leading spaces and tabs removed, and trailing CR and LF;
- a header is looked up case-insensitively, first occurrence; a target starting with `//` is
  reduced to one `/`;
- keep-alive: HTTP/1.1 and above by default, below only with `Connection: keep-alive`;
  `Connection: close` closes (each compared whole, ignoring case); `Expect: 100-continue` from
  an HTTP/1.1 client gets an interim 100 response first, unless the connection closes after the
  answer (a request with a body: the body is never read, so it is not asked for).

Changed on purpose: a two-word (HTTP/0.9) request line is answered 400 (http.server sent a
GET's body alone, without a status line or headers); a three-word one naming HTTP/0.9 as its
version gets a whole response (http.server sent the body alone); every error has a status line
and headers (http.server sent a bad version's error page bare) with the standard reason phrase,
never text from the request, and a short plain-text body.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from specwatch import __version__
from specwatch.base.http1 import MAX_HEADERS, MAX_LINE  # http.client's limits, held by both sides

__all__ = [
    "MAX_HEADERS",
    "MAX_LINE",
    "REASONS",
    "SERVER",
    "Refusal",
    "Request",
    "http_date",
    "parse_head",
    "response_head",
]

SERVER = f"specwatch/{__version__}"

REASONS = {
    100: "Continue",
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    414: "URI Too Long",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}

_VERSION = re.compile(r"HTTP/([0-9]{1,10})\.([0-9]{1,10})")
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")  # the email parser's lines: CR, LF or CRLF
_HEADER_LINE = re.compile(r"From |[\041-\071\073-\176]*:|[\t ]")  # the email parser's headerRE

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


@dataclass(frozen=True, slots=True)
class Request:
    """A parsed request head. `headers`: (name lower-cased, value) in the order sent."""

    method: str
    target: str
    version: tuple[int, int]
    headers: tuple[tuple[str, str], ...]

    def header(self, name: str, default: str = "") -> str:
        """The first header called `name` (any case), else `default`."""
        name = name.lower()
        for key, value in self.headers:
            if key == name:
                return value
        return default

    @property
    def keep_alive(self) -> bool:
        """Whether the client asks to keep the connection after the response."""
        connection = self.header("connection").lower()
        if connection == "close":
            return False
        return connection == "keep-alive" or self.version >= (1, 1)

    @property
    def expects_continue(self) -> bool:
        return self.version >= (1, 1) and self.header("expect").lower() == "100-continue"

    @property
    def carries_body(self) -> bool:
        """Whether a body may follow the head. Bodies are never read: one left on a keep-alive
        connection would be parsed as the next request (request desync), so it closes. Every
        Content-Length counts, not the first: `0` then `50` is a body to a proxy that reads the
        last one (RFC 9112 6.3 makes differing ones an error), and so is any Transfer-Encoding with a
        value."""
        for key, value in self.headers:
            if (key == "transfer-encoding" and value) or (key == "content-length" and value.strip() not in ("", "0")):
                return True
        return False


@dataclass(frozen=True, slots=True)
class Refusal:
    """A head that is not a request. `status`: the error to answer, or None to close without one
    (an empty request line). `method`: the request line's first word (HEAD gets no body)."""

    status: int | None
    method: str = ""


def parse_head(head: bytes) -> Request | Refusal:
    """A complete request head (request line, header lines, blank line) as http.server read it."""
    line, newline, rest = head.partition(b"\n")
    if len(line) + len(newline) > MAX_LINE:
        return Refusal(414)
    words = line.decode("latin-1").split()
    if not words:
        return Refusal(None)
    method = words[0]
    version = (0, 9)
    if len(words) >= 3:
        match = _VERSION.fullmatch(words[-1])
        if match is None:
            return Refusal(400, method)
        version = (int(match[1]), int(match[2]))
        if version >= (2, 0):
            return Refusal(505, method)
    if len(words) != 3:
        return Refusal(400, method)
    target = words[1]
    if target.startswith("//"):
        target = "/" + target.lstrip("/")
    headers = _headers(rest)
    if headers is None:
        return Refusal(431, method)
    return Request(method, target, version, headers)


def _headers(data: bytes) -> tuple[tuple[str, str], ...] | None:
    """The header lines after the request line, or None past MAX_LINE or MAX_HEADERS."""
    end = _header_block_end(data)
    return None if end < 0 else _fields(data[:end].decode("latin-1"))


def _header_block_end(data: bytes) -> int:
    """Where the header lines end as http.client reads them (LF-ended lines, up to a blank one or
    the end), or -1 when a line is over MAX_LINE bytes or there are over MAX_HEADERS lines."""
    count = start = 0
    while True:
        newline = data.find(b"\n", start)
        end = len(data) if newline < 0 else newline + 1
        count += 1
        if end - start > MAX_LINE or count > MAX_HEADERS:
            return -1
        if data[start:end] in (b"\r\n", b"\n", b""):
            return end
        start = end


def _fields(text: str) -> tuple[tuple[str, str], ...]:
    """The headers of `text` as the email parser (compat32) reads them (see the module docstring)."""
    headers: list[tuple[str, str]] = []
    current: list[str] = []  # the lines of the header being read

    def flush() -> None:
        if current:
            name, value = current[0].split(":", 1)
            value = value.lstrip(" \t") + "".join(current[1:])
            headers.append((name.lower(), value.rstrip("\r\n")))
            current.clear()

    for line in _LINE.findall(text):
        if not _HEADER_LINE.match(line):
            break  # the blank line, or a line that starts the (ignored) body
        if line[0] in " \t":
            if current:
                current.append(line)
            continue
        flush()
        if not line.startswith(("From ", ":")):  # an mbox envelope line, a header without a name: dropped
            current.append(line)
    flush()
    return tuple(headers)


def http_date(seconds: float) -> str:
    """The IMF-fixdate of an instant (`Sun, 06 Nov 1994 08:49:37 GMT`), in English whatever the locale."""
    t = time.gmtime(seconds)
    return (
        f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year:04d} "
        f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT"
    )


def response_head(status: int, fields: str) -> bytes:
    """A response's status line, Server and Date, then `fields` (header lines, each ending in CRLF)
    and the blank line."""
    return (
        f"HTTP/1.1 {status} {REASONS.get(status, '')}\r\nServer: {SERVER}\r\nDate: {http_date(time.time())}\r\n"
        f"{fields}\r\n"
    ).encode("latin-1")
