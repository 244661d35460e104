"""HTTP/1.1 on a connection owned by the caller (httpconn.DeadlineConnection): a request written
as bytes, a response read through the connection's `recv`. What both sources need and nothing
more: no proxy, no redirect, no cookies, no content decoding (the callers decode gzip).

The response is read as `http.client` reads it (tests/unit/base/test_http1.py holds the two side
by side): the status line, then the header lines, then the body with `read1(n)` semantics, sized
by `Transfer-Encoding: chunked` (which wins over Content-Length; chunk extensions ignored,
trailers read and dropped), by Content-Length, or by the end of the connection (HTTP/1.0, or no
length); a `100 Continue` is skipped and any other status is the answer. The connection may carry
the next request when the answer is HTTP/1.1 without `Connection: close` (HTTP/1.0 only with
keep-alive), its body was read to the end and nothing followed it.

A hostile server meets the bounds of `http.client`: a line of at most MAX_LINE bytes, at most
MAX_HEADERS header lines (and as many trailer lines), and every read sized by what the framing
allows, never "until the end" of a length-delimited body. Where `http.client` tolerates a broken
frame this refuses it (ProtocolError), so whatever is read here http.client reads the same: a
Content-Length that is not digits, Content-Lengths that disagree, a chunk size that is not hex (a
sign, `0x`, `_`), a chunk not followed by CRLF, a Transfer-Encoding other than chunked, a header
line without a name and a colon or with a CR or a NUL inside, more trailer lines than header
lines, a body that ends before its Content-Length.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

MAX_LINE = 65536  # bytes in a status, header, chunk-size or trailer line, its line end included
MAX_HEADERS = 100  # header lines, the blank line that ends them included (as http.client counts)
RECV = 64 * 1024  # bytes asked of the socket at once for the head, chunk-size and trailer lines
_MAX_LENGTH_DIGITS = 18  # a Content-Length or chunk size beyond 10**18 bytes is not a real body
_HEX = frozenset(b"0123456789abcdefABCDEF")
_METHODS_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})  # Content-Length: 0 when sent without one
# Printable ASCII except the colon: what may come before the colon of a header line.
_NAME_BYTES = frozenset(range(0x21, 0x7F)) - {ord(":")}


class ProtocolError(Exception):
    """The answer breaks HTTP/1.1 or a bound: the connection is unusable and must be closed."""


def authority(host: str, port: int | None, default_port: int) -> str:
    """The Host header for `host` (as urlsplit's `hostname` gives it) and `port`, as http.client
    writes it: an IPv6 address in brackets without its zone, the port only when not the default.
    A non-ASCII name goes in its IDNA form (UnicodeError if it has none)."""
    try:
        name = host.encode("ascii").decode("ascii")
    except UnicodeEncodeError:
        name = host.encode("idna").decode("ascii")
    if ":" in name:
        name = "[" + name.split("%", 1)[0] + "]"
    return name if port is None or port == default_port else f"{name}:{port}"


def encode_request(method: str, target: str, host: str, headers: Mapping[str, str], body: bytes | None) -> bytes:
    """The request's bytes, the header lines in http.client's order: Host (unless given),
    Accept-Encoding: identity (unless given), Content-Length (for a body, and 0 for a POST, PUT or
    PATCH without one), then `headers`. ValueError for what cannot be sent as given: a method or a
    target with a space or a control character, a header name that is not one, a header value
    with a line break or a NUL or outside Latin-1."""
    if not method or not method.isascii() or any(c <= " " or c == "\x7f" for c in method):
        raise ValueError("method is not a token")
    if not target.isascii() or any(c <= " " or c == "\x7f" for c in target):
        raise ValueError("request target has a space or a control character")
    names = {name.lower() for name in headers}
    lines = [f"{method} {target} HTTP/1.1".encode("ascii")]
    if "host" not in names:
        lines.append(b"Host: " + host.encode("ascii"))
    if "accept-encoding" not in names:
        lines.append(b"Accept-Encoding: identity")
    if "content-length" not in names and "transfer-encoding" not in names:
        if body is not None:
            lines.append(b"Content-Length: %d" % len(body))
        elif method.upper() in _METHODS_WITH_BODY:
            lines.append(b"Content-Length: 0")
    lines.extend(_header_line(name, value) for name, value in headers.items())
    return b"\r\n".join(lines) + b"\r\n\r\n" + (body or b"")


def _header_line(name: str, value: str) -> bytes:
    raw_name = name.encode("ascii")
    if not raw_name or not _NAME_BYTES.issuperset(raw_name):
        raise ValueError("invalid header name")
    raw_value = value.encode("latin-1")
    if b"\r" in raw_value or b"\n" in raw_value or b"\0" in raw_value:
        raise ValueError("header value with a line break or a NUL")
    return raw_name + b": " + raw_value


class _Reader:
    """Bytes from `recv`, buffered: lines for the head and the chunked frame, blocks for bodies."""

    __slots__ = ("_buf", "_pos", "_recv", "eof")

    def __init__(self, recv: Callable[[int], bytes]):
        self._recv = recv
        self._buf = b""
        self._pos = 0
        self.eof = False

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._pos

    def readline(self, what: str) -> bytes:
        """One line, its line end included; at the end of the stream what is left (maybe b"")."""
        start = self._pos
        while True:
            end = self._buf.find(b"\n", start)
            if end >= 0:
                if end + 1 - self._pos > MAX_LINE:
                    raise ProtocolError(f"{what} line over {MAX_LINE} bytes")
                line = self._buf[self._pos : end + 1]
                self._pos = end + 1
                return line
            scanned = len(self._buf) - self._pos
            if scanned > MAX_LINE:
                raise ProtocolError(f"{what} line over {MAX_LINE} bytes")
            if not self._fill(RECV):
                line = self._buf[self._pos :]
                self._buf, self._pos = b"", 0
                return line
            start = self._pos + scanned  # (the fill moved what was left to the front)

    def read1(self, n: int) -> bytes:
        """At most n bytes: what is buffered, else one recv (b"" only at the end of the stream)."""
        if self._pos < len(self._buf):
            data = self._buf[self._pos : self._pos + n]
            self._pos += len(data)
            return data
        if self.eof:
            return b""
        data = self._recv(n)
        if not data:
            self.eof = True
        return data

    def _fill(self, n: int) -> bool:
        if self.eof:
            return False
        data = self._recv(n)
        if not data:
            self.eof = True
            return False
        self._buf = self._buf[self._pos :] + data
        self._pos = 0
        return True


def _is_blank(line: bytes) -> bool:
    return line in (b"\r\n", b"\n", b"")


def _read_head_lines(reader: _Reader, what: str) -> list[bytes]:
    """Header (or trailer) lines up to the blank line, bounded as http.client bounds them."""
    lines: list[bytes] = []
    while True:
        line = reader.readline(what)
        if len(lines) + 1 > MAX_HEADERS:
            raise ProtocolError(f"more than {MAX_HEADERS} {what} lines")
        if _is_blank(line):
            return lines
        lines.append(line)


def _parse_fields(lines: list[bytes]) -> list[tuple[str, str]]:
    """(name, value) pairs; an obsolete folded line is joined to its field by a space."""
    fields: list[tuple[str, str]] = []
    for raw in lines:
        line = raw.decode("latin-1").removesuffix("\n").removesuffix("\r")
        if "\r" in line or "\0" in line:  # email's parser would cut the line there
            raise ProtocolError("a CR or a NUL inside a header line")
        if line[:1] in (" ", "\t"):
            if not fields:
                raise ProtocolError("header continuation without a header")
            name, value = fields[-1]
            fields[-1] = (name, f"{value} {line.strip()}".strip())
            continue
        name, colon, value = line.partition(":")
        if not colon or not name or not _NAME_BYTES.issuperset(name.encode("latin-1")):
            raise ProtocolError("malformed header line")
        fields.append((name, value.strip(" \t")))
    return fields


def _length(values: list[str]) -> int:
    """The one Content-Length that all the header's values agree on."""
    found = {part.strip(" \t") for value in values for part in value.split(",")}
    if len(found) != 1:
        raise ProtocolError("Content-Lengths disagree")
    text = found.pop()
    if not text.isascii() or not text.isdigit() or len(text) > _MAX_LENGTH_DIGITS:
        raise ProtocolError("Content-Length is not a length")
    return int(text)


class Response:
    """One answer: status, reason, version (10 or 11), headers, and the body through `read1`."""

    def __init__(self, reader: _Reader, method: str):
        self._reader = reader
        while True:
            version, self.status, self.reason = self._status_line()
            if self.status != 100:
                break
            _read_head_lines(reader, "header")  # 100 Continue: its headers are dropped
        if version in ("HTTP/1.0", "HTTP/0.9"):
            self.version = 10
        elif version.startswith("HTTP/1."):
            self.version = 11
        else:
            raise ProtocolError("not an HTTP/1 answer")
        self.headers = _parse_fields(_read_head_lines(reader, "header"))
        self._by_name: dict[str, list[str]] = {}
        for name, value in self.headers:
            self._by_name.setdefault(name.lower(), []).append(value)
        # An interim answer other than 100 Continue (103 Early Hints, 102) is taken as the answer,
        # as http.client takes it; its final answer may still follow on this connection, and the
        # next request would read it as its own: never reuse the connection after one.
        self.keep_alive = self._keep_alive() and not 100 <= self.status < 200
        self.chunked = False
        length: int | None = 0  # no body whatever the headers say
        if not (self.status in (204, 304) or 100 <= self.status < 200 or method == "HEAD"):
            encoding = self.getheader("Transfer-Encoding")
            self.chunked = encoding is not None
            if encoding is not None and encoding.lower() != "chunked":
                raise ProtocolError("Transfer-Encoding other than chunked")
            lengths = self._by_name.get("content-length")
            length = _length(lengths) if lengths and not self.chunked else None
        if length is None and not self.chunked:
            self.keep_alive = False  # read to the end of the connection
        self._left = length  # body bytes left; None: to the end of the connection (or chunked)
        self._chunk_left = -1  # bytes left of the current chunk; -1 before the first, 0 at its end
        self.done = length == 0
        self.closed = False

    def _status_line(self) -> tuple[str, int, str]:
        line = self._reader.readline("status").decode("latin-1")
        if not line:
            raise ProtocolError("connection closed without an answer")
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise ProtocolError("not an HTTP status line")
        code = parts[1]
        if len(code) != 3 or not code.isascii() or not code.isdigit() or code[0] == "0":
            raise ProtocolError("not an HTTP status code")
        return parts[0], int(code), parts[2].strip() if len(parts) > 2 else ""

    def _keep_alive(self) -> bool:
        """As http.client decides from the first value of each header."""
        connection = (self._first("connection") or "").lower()
        if self.version == 11:
            return "close" not in connection
        return bool(
            self._first("keep-alive")
            or "keep-alive" in connection
            or "keep-alive" in (self._first("proxy-connection") or "").lower()
        )

    def _first(self, lower_name: str) -> str | None:
        values = self._by_name.get(lower_name)
        return values[0] if values else None

    def getheader(self, name: str, default: str | None = None) -> str | None:
        """All the values of the header `name` (any case) joined by ", ", as http.client does."""
        values = self._by_name.get(name.lower())
        return ", ".join(values) if values else default

    @property
    def reusable(self) -> bool:
        """The connection may carry the next request: kept alive, the body read to its end and
        nothing sent after it."""
        return self.done and self.keep_alive and not self._reader.eof and not self._reader.buffered

    def read1(self, n: int) -> bytes:
        """At most n bytes of the body with at most one recv beyond the chunked frame's lines;
        b"" once the body ended."""
        if self.done or n <= 0:
            return b""
        if self.chunked:
            return self._read1_chunked(n)
        left = self._left
        data = self._reader.read1(n if left is None else min(n, left))
        if left is None:
            self.done = not data
            return data
        if not data:
            raise ProtocolError(f"body ended {left} bytes short of its Content-Length")
        self._left = left - len(data)
        self.done = self._left == 0
        return data

    def _read1_chunked(self, n: int) -> bytes:
        reader = self._reader
        if self._chunk_left <= 0:
            if self._chunk_left == 0 and reader.readline("chunk end") != b"\r\n":
                raise ProtocolError("chunk not followed by its line end")
            size = self._chunk_size(reader.readline("chunk size"))
            if size == 0:
                _read_head_lines(reader, "trailer")  # dropped; the end of the stream ends them too
                self.done = True
                return b""
            self._chunk_left = size
        data = reader.read1(min(n, self._chunk_left))
        if not data:
            raise ProtocolError("chunked body cut inside a chunk")
        self._chunk_left -= len(data)
        return data

    @staticmethod
    def _chunk_size(line: bytes) -> int:
        text = line.split(b";", 1)[0].strip(b" \t\r\n")
        if not text or len(text) > _MAX_LENGTH_DIGITS or not _HEX.issuperset(text):
            raise ProtocolError("not a chunk size")
        return int(text, 16)

    def close(self) -> None:
        """The caller is done with the answer (the connection decides on reuse from `reusable`)."""
        self.closed = True


def read_response(recv: Callable[[int], bytes], method: str) -> Response:
    """The answer to a request sent with `method`, read through `recv` (socket.recv) up to the end
    of its headers; ProtocolError if it breaks HTTP/1.1, OSError (TimeoutError) as recv raises."""
    return Response(_Reader(recv), method)
