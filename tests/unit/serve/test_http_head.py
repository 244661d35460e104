"""Request heads are answered as http.server answered them, without http.server.

A table of raw heads sent to a real front (status, Connection, whether the connection is kept),
recorded from the http.server-based front it replaces, with the answers changed on purpose marked;
the parser against http.server's own (BaseHTTPRequestHandler.parse_request) on generated heads;
and garbage heads, which get a well-formed error or a close, never an exception.
"""

from __future__ import annotations

import email.utils
import io
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from specwatch.serve.http_head import MAX_HEADERS, MAX_LINE, REASONS, SERVER, Refusal, Request, http_date, parse_head
from specwatch.serve.http_server import SECURITY_HEADERS, CappedHTTPServer, handler_for
from specwatch.serve.service import Service
from support.builders import scenario_config

KEPT = "keep-alive"
CLOSED = "close"
SILENT = None  # the connection closes without an answer

# head -> (statuses answered in order, the last response's Connection header, its body's start)
# or SILENT. Every row but those marked CHANGED is what the http.server-based front answered.
TABLE: dict[bytes, tuple[tuple[int, ...], str, bytes] | None] = {
    b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n": ((200,), KEPT, b"ok"),
    b"GET /healthz HTTP/1.0\r\n\r\n": ((200,), CLOSED, b"ok"),
    b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n": ((200,), KEPT, b"ok"),
    b"GET /healthz HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n": ((200,), KEPT, b"ok"),
    b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n": ((200,), CLOSED, b"ok"),
    b"GET /healthz HTTP/1.1\r\nConnection: CLOSE\r\n\r\n": ((200,), CLOSED, b"ok"),
    b"GET /healthz HTTP/1.1\r\nConnection:\tclose\r\n\r\n": ((200,), CLOSED, b"ok"),
    b"GET /healthz HTTP/1.1\r\nConnection:close\r\n\r\n": ((200,), CLOSED, b"ok"),
    # The whole value is compared, and only the first Connection header counts.
    b"GET /healthz HTTP/1.1\r\nConnection: close \r\n\r\n": ((200,), KEPT, b"ok"),
    b"GET /healthz HTTP/1.1\r\nConnection: close, TE\r\n\r\n": ((200,), KEPT, b"ok"),
    b"GET /healthz HTTP/1.1\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n": ((200,), KEPT, b"ok"),
    # Continuations keep their line break in the value; one with no header before it is dropped.
    b"GET /healthz HTTP/1.1\r\nConnection:\r\n close\r\n\r\n": ((200,), KEPT, b"ok"),
    b"GET /healthz HTTP/1.1\r\n close: x\r\nConnection: close\r\n\r\n": ((200,), CLOSED, b"ok"),
    # A line without a colon (or with a space in its name) ends the headers: the rest is ignored.
    b"GET /healthz HTTP/1.1\r\nbogus\r\nConnection: close\r\n\r\n": ((200,), KEPT, b"ok"),
    b"GET /healthz HTTP/1.1\r\nX Y: z\r\nConnection: close\r\n\r\n": ((200,), KEPT, b"ok"),
    b"GET /healthz HTTP/1.1\r\nConnection : close\r\n\r\n": ((200,), KEPT, b"ok"),
    # A header with an empty name and a `From ` line are dropped, the headers go on.
    b"GET /healthz HTTP/1.1\r\n: x\r\nConnection: close\r\n\r\n": ((200,), CLOSED, b"ok"),
    b"GET /healthz HTTP/1.1\r\nFrom x\r\nConnection: close\r\n\r\n": ((200,), CLOSED, b"ok"),
    # Header lines break at CR, LF or CRLF (not at VT); a line of a lone CR ends the headers.
    b"GET /healthz HTTP/1.1\r\nX: a\rConnection: close\r\n\r\n": ((200,), CLOSED, b"ok"),
    b"GET /healthz HTTP/1.1\nConnection: close\n\n": ((200,), CLOSED, b"ok"),
    b"GET /healthz HTTP/1.1\r\nX: a\r\r\nConnection: close\r\n\r\n": ((200,), KEPT, b"ok"),
    b"GET /healthz HTTP/1.1\r\nX: a\x0bConnection: close\r\n\r\n": ((200,), KEPT, b"ok"),
    b"GET /healthz HTTP/1.1\r\nX: a\x00b\r\nConnection: close\r\n\r\n": ((200,), CLOSED, b"ok"),
    b"GET /h\xe9 HTTP/1.1\r\nX: \xff\r\n\r\n": ((404,), KEPT, b"not found"),
    # Versions: any 0.x or 1.x is served (1.1 and above keep alive), 2.0 and above are 505.
    b"GET /healthz HTTP/1.2\r\n\r\n": ((200,), KEPT, b"ok"),
    b"GET /healthz HTTP/1.10\r\n\r\n": ((200,), KEPT, b"ok"),
    b"GET /healthz HTTP/01.01\r\n\r\n": ((200,), KEPT, b"ok"),
    b"GET /healthz HTTP/0.5\r\n\r\n": ((200,), CLOSED, b"ok"),
    b"GET /healthz HTTP/0.9\r\n\r\n": ((200,), CLOSED, b"ok"),  # CHANGED: was the body alone
    b"GET /healthz HTTP/2.0\r\n\r\n": ((505,), CLOSED, b"HTTP version"),  # CHANGED: was an HTML page alone
    b"HEAD /healthz HTTP/9.9\r\n\r\n": ((505,), CLOSED, b""),  # CHANGED: as above
    # A malformed version or request line is 400. CHANGED: these were an HTML page without a status line.
    b"GET /healthz HTTP/2\r\n\r\n": ((400,), CLOSED, b"bad request"),
    b"GET /healthz http/1.1\r\n\r\n": ((400,), CLOSED, b"bad request"),
    b"GET /healthz HTTP/1.1.1\r\n\r\n": ((400,), CLOSED, b"bad request"),
    b"GET /healthz HTTP/1.x\r\n\r\n": ((400,), CLOSED, b"bad request"),
    b"GET /healthz HTTP/+1.1\r\n\r\n": ((400,), CLOSED, b"bad request"),
    b"GET /healthz HTTP/1.\xb2\r\n\r\n": ((400,), CLOSED, b"bad request"),
    b"GET /healthz HTTP/1.00000000001\r\n\r\n": ((400,), CLOSED, b"bad request"),
    b"GET /healthz\r\n\r\n": ((400,), CLOSED, b"bad request"),  # HTTP/0.9: was the body alone
    b"POST /healthz\r\n\r\n": ((400,), CLOSED, b"bad request"),
    b"GET\r\n\r\n": ((400,), CLOSED, b"bad request"),
    b"GET /healthz HTTP/1.1\rX: y\r\n\r\n": ((400,), CLOSED, b"bad request"),  # CR splits words
    b"GET /<script> HTTP/1.x<script>\r\n\r\n": ((400,), CLOSED, b"bad request"),
    b"GET /healthz x HTTP/1.1\r\n\r\n": ((400,), CLOSED, b"bad request"),  # CHANGED: the body was HTML
    b"GET\t/healthz\tHTTP/1.1\r\n\r\n": ((200,), KEPT, b"ok"),
    b"\r\n": SILENT,
    b"   \r\n\r\n": SILENT,
    # Methods: case-sensitive; unknown ones 501 and close (CHANGED: plain text, was HTML).
    b"get /healthz HTTP/1.1\r\n\r\n": ((501,), CLOSED, b"not implemented"),
    b"BREW /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n": ((501,), CLOSED, b"not implemented"),
    b"OPTIONS * HTTP/1.1\r\n\r\n": ((501,), CLOSED, b"not implemented"),
    b"HEAD /healthz HTTP/1.1\r\n\r\n": ((200,), KEPT, b""),
    b"HEAD /nope HTTP/1.1\r\n\r\n": ((404,), KEPT, b""),
    b"POST /metrics HTTP/1.1\r\n\r\n": ((405,), KEPT, b"method not allowed"),
    b"DELETE / HTTP/1.1\r\n\r\n": ((405,), KEPT, b"method not allowed"),
    # A body is never read: a request announcing one closes.
    b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n": ((405,), KEPT, b"method not allowed"),
    b"POST /metrics HTTP/1.1\r\nContent-Length:  \r\n\r\n": ((405,), KEPT, b"method not allowed"),
    b"POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\n": ((405,), CLOSED, b"method not allowed"),
    b"GET /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n": ((200,), CLOSED, b"ok"),
    b"GET /healthz HTTP/1.1\r\nTransfer-Encoding:\r\n\r\n": ((200,), KEPT, b"ok"),
    # CHANGED: every Content-Length counts (http.server read the first): a proxy reading the last
    # one sends a body that a kept connection would parse as the next request.
    b"GET /healthz HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 50\r\n\r\n": ((200,), CLOSED, b"ok"),
    b"GET /healthz HTTP/1.1\r\nContent-Length: 0\r\ncontent-length: 0\r\n\r\n": ((200,), KEPT, b"ok"),
    b"GET /healthz HTTP/1.1\r\nTransfer-Encoding:\r\nTransfer-Encoding: chunked\r\n\r\n": ((200,), CLOSED, b"ok"),
    # Expect: 100-continue from HTTP/1.1 gets the interim response first, on a kept connection.
    b"GET /healthz HTTP/1.1\r\nExpect: 100-continue\r\n\r\n": ((100, 200), KEPT, b"ok"),
    b"GET /healthz HTTP/1.0\r\nExpect: 100-continue\r\n\r\n": ((200,), CLOSED, b"ok"),
    # CHANGED: http.server sent 100 Continue here too, inviting a body that is never read.
    b"GET /healthz HTTP/1.1\r\nExpect: 100-Continue\r\nConnection: close\r\n\r\n": ((200,), CLOSED, b"ok"),
    b"POST /healthz HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n": ((405,), CLOSED, b"method"),
    # Targets: `//` reduced to `/`, the query ignored, nothing else normalised.
    b"GET //healthz HTTP/1.1\r\n\r\n": ((200,), KEPT, b"ok"),
    b"GET ///healthz?x HTTP/1.1\r\n\r\n": ((200,), KEPT, b"ok"),
    b"GET http://x/healthz HTTP/1.1\r\n\r\n": ((404,), KEPT, b"not found"),
    # http.client's cap: 100 lines with the blank one, so 99 headers.
    b"GET /healthz HTTP/1.1\r\n" + b"X: y\r\n" * 99 + b"\r\n": ((200,), KEPT, b"ok"),
    b"GET /healthz HTTP/1.1\r\n" + b"X: y\r\n" * 100 + b"\r\n": ((431,), CLOSED, b"request header fields"),
    b"HEAD /healthz HTTP/1.1\r\n" + b"X: y\r\n" * 120 + b"\r\n": ((431,), CLOSED, b""),
    b"BREW /healthz HTTP/1.1\r\n" + b"X: y\r\n" * 120 + b"\r\n": ((431,), CLOSED, b"request header fields"),
    b"GET /healthz HTTP/1.x\r\n" + b"X: y\r\n" * 120 + b"\r\n": ((400,), CLOSED, b"bad request"),
    # The Accept header is read whole, a continuation included.
    b"GET /metrics HTTP/1.1\r\nAccept: text/plain,\r\n application/openmetrics-text\r\n\r\n": ((200,), KEPT, b"# HELP"),
}


@pytest.fixture(scope="module")
def front():
    server = CappedHTTPServer(("127.0.0.1", 0), handler_for(Service(scenario_config("steady"))))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def read_response(
    sock: socket.socket, pending: bytes, *, head_only: bool = False
) -> tuple[int, dict[str, str], bytes, bytes] | None:
    """One response from `sock` (after `pending` bytes already read): status, headers (names
    lower-cased), body (none after HEAD), the bytes read past it; None when the server closes
    before any."""
    data = pending
    while b"\r\n\r\n" not in data:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            assert not data, f"closed inside a response head: {data!r}"
            return None
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    status_line, *lines = head.decode("latin-1").split("\r\n")
    match = re.fullmatch(r"HTTP/1\.1 (\d{3}) [A-Za-z -]+", status_line)
    assert match, status_line
    headers: dict[str, str] = {}
    for line in lines:
        name, value = line.split(": ", 1)
        assert name.lower() not in headers, f"{name} twice"
        headers[name.lower()] = value
    length = 0 if head_only else int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "closed inside a body"
        rest += chunk
    return int(match[1]), headers, rest[:length], rest[length:]


def answers(server: CappedHTTPServer, head: bytes):
    """The responses to `head` and whether the server kept the connection for a next request."""
    responses = []
    with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=10) as sock:
        sock.sendall(head)
        pending = b""
        while True:
            response = read_response(sock, pending, head_only=head.startswith(b"HEAD "))
            if response is None:
                return responses, False
            status, headers, body, pending = response
            responses.append((status, headers, body))
            if status != 100:
                break
        try:  # a kept connection answers the next request; a closed one reads as closed
            sock.sendall(b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n")
            kept = read_response(sock, pending) is not None
        except (BrokenPipeError, ConnectionResetError):
            kept = False
    return responses, kept


@pytest.mark.parametrize("head", list(TABLE), ids=[repr(h[:40]) for h in TABLE])
def test_each_head_is_answered_as_the_table_says(front, head):
    responses, kept = answers(front, head)
    expected = TABLE[head]
    if expected is SILENT:
        assert responses == [] and not kept
        return
    statuses, connection, body_start = expected
    assert tuple(status for status, _, _ in responses) == statuses
    _, headers, body = responses[-1]
    assert headers["connection"] == connection
    assert kept == (connection == KEPT)
    assert ("keep-alive" in headers) == kept  # Keep-Alive: timeout=N only on a kept connection
    assert body.startswith(body_start)
    if body_start:
        assert len(body) == int(headers["content-length"])
    assert headers["server"] == SERVER
    assert http_date_shape(headers["date"])
    for name, value in SECURITY_HEADERS:  # on every answer, errors included
        assert headers[name.lower()] == value
    if statuses[-1] >= 400:
        assert headers["content-type"] == "text/plain"


def http_date_shape(value: str) -> bool:
    return (
        re.fullmatch(r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT", value) is not None
    )


def test_an_error_body_is_plain_text_and_never_reflects_the_request(front):
    head = b"GET /<script>alert(1)</script> HTTP/9.<b>\r\nX: <img>\r\n\r\n"
    responses, _ = answers(front, head)
    [(status, headers, body)] = responses
    assert status == 400 and headers["content-type"] == "text/plain"
    assert b"<" not in body and b"script" not in body


# ---- the parser alone ---------------------------------------------------------------------------


def test_the_line_and_header_bounds_are_http_servers():
    at_limit = b"GET /" + b"a" * (MAX_LINE + 1 - len(b"GET / HTTP/1.1\r\n")) + b" HTTP/1.1\r\n"
    assert len(at_limit) == MAX_LINE + 1  # one past: http.server reads MAX_LINE + 1 and refuses
    assert parse_head(at_limit + b"\r\n") == Refusal(414)
    assert isinstance(parse_head(at_limit[1:] + b"\r\n"), Request)
    long_header = b"X: " + b"v" * (MAX_LINE - 5) + b"\r\n"
    assert isinstance(parse_head(b"GET / HTTP/1.1\r\n" + long_header + b"\r\n"), Request)
    assert parse_head(b"GET / HTTP/1.1\r\nX" + long_header + b"\r\n") == Refusal(431, "GET")
    lines = b"X: y\r\n" * (MAX_HEADERS - 1)
    assert isinstance(parse_head(b"GET / HTTP/1.1\r\n" + lines + b"\r\n"), Request)
    assert parse_head(b"GET / HTTP/1.1\r\nX: y\r\n" + lines + b"\r\n") == Refusal(431, "GET")


def test_headers_are_read_with_their_values_as_sent():
    request = parse_head(
        b"GET /a?b HTTP/1.1\r\nHost:  x \r\nX-Fold: one\r\n\ttwo\r\nAccept: a\r\naccept: b\r\nEmpty:\r\n\r\n"
    )
    assert isinstance(request, Request)
    assert (request.method, request.target, request.version) == ("GET", "/a?b", (1, 1))
    assert request.headers == (
        ("host", "x "),
        ("x-fold", "one\r\n\ttwo"),
        ("accept", "a"),
        ("accept", "b"),
        ("empty", ""),
    )
    assert request.header("ACCEPT") == "a" and request.header("missing", "d") == "d"


@pytest.mark.parametrize("seconds", [0, 1, 59, 86399, 951782400, 1_700_000_000, 1_798_761_599, 4_102_444_800])
def test_the_date_header_is_the_imf_fixdate_email_utils_writes(seconds):
    assert http_date(seconds) == email.utils.formatdate(seconds, usegmt=True)


# ---- against http.server -----------------------------------------------------------------------


class _Reference(BaseHTTPRequestHandler):
    """http.server's parsing of one head, without a socket: what the old front did with it."""

    protocol_version = "HTTP/1.1"  # the old front's: HTTP/1.1 requests keep alive

    def __init__(self, head: bytes) -> None:  # no socket, no handle()
        self.rfile = io.BytesIO(head)
        self.wfile = io.BytesIO()
        self.error: int | None = None

    def send_error(self, code, message=None, explain=None):
        self.error = int(code)

    def log_message(self, *args):
        return

    def outcome(self):
        """(error status or None, (method, target, keep-alive, headers) or None)."""
        self.raw_requestline = self.rfile.readline(MAX_LINE + 1)
        if len(self.raw_requestline) > MAX_LINE:
            return 414, None
        if not self.raw_requestline:
            return None, None
        if not self.parse_request():
            return self.error, None
        if len(self.requestline.split()) == 2:
            return 400, None  # changed on purpose: HTTP/0.9 lines are refused
        headers = tuple((name.lower(), value) for name, value in self.headers.items())
        return None, (self.command, self.path, not self.close_connection, headers)


def ours(head: bytes):
    parsed = parse_head(head)
    if isinstance(parsed, Refusal):
        return parsed.status, None
    return None, (parsed.method, parsed.target, parsed.keep_alive, parsed.headers)


_ENDS = st.sampled_from(["\r\n", "\n", "\r", "\r\r\n"])
_TEXT = st.text(st.sampled_from("aZ09-_:;, \t/.=*\x00\x0b\x0c\x1c\x85\xa0\xe9\xff"), max_size=12)
_NAMES = st.sampled_from(
    [
        "Connection",
        "connection",
        "Expect",
        "Content-Length",
        "Transfer-Encoding",
        "Accept",
        "Host",
        "X-A",
        "",
        "From",
        "X Y",
    ]
)
_VALUES = st.one_of(
    st.sampled_from(
        ["close", "keep-alive", "Keep-Alive", " close", "close ", "100-continue", "0", " 0 ", "", "chunked"]
    ),
    _TEXT,
)
_HEADER_LINE = st.one_of(
    st.builds(
        lambda n, sep, v, end: f"{n}{sep}{v}{end}",
        _NAMES,
        st.sampled_from([":", ": ", ":\t", " :", ""]),
        _VALUES,
        _ENDS,
    ),
    st.builds(lambda ws, v, end: f"{ws}{v}{end}", st.sampled_from([" ", "\t"]), _VALUES, _ENDS),  # a continuation
    st.builds(lambda v, end: f"From {v}{end}", _TEXT, _ENDS),
)
_SEPARATORS = st.sampled_from([" ", " ", "\t", "  ", "\x0b", "\x1c", "\x85", "\xa0"])
_WELL_FORMED_LINE = st.builds(
    lambda method, target, version, sep, end: f"{method}{sep}{target}{sep}{version}{end}",
    st.sampled_from(["GET", "GET", "HEAD", "POST", "get", "BREW"]),
    st.sampled_from(["/", "/metrics?a", "//x", "*", "/h\xe9"]),
    st.sampled_from(["HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/0.9", "HTTP/1.10", "HTTP/01.1", "HTTP/2.0", "HTTP/1"]),
    _SEPARATORS,
    st.sampled_from(["\r\n", "\r\n", "\n", "\r\r\n"]),
)
_GARBAGE_LINE = st.builds(
    lambda words, sep, end: sep.join(words) + end,
    st.lists(st.one_of(st.sampled_from(["GET", "/", "HTTP/1.1", "HTTP/x"]), _TEXT), max_size=5),
    _SEPARATORS,
    _ENDS,
)
_REQUEST_LINE = st.one_of(_WELL_FORMED_LINE, _WELL_FORMED_LINE, _WELL_FORMED_LINE, _GARBAGE_LINE)
HEADS = st.builds(
    lambda line, headers, blank: (line + "".join(headers) + blank).encode("latin-1"),
    _REQUEST_LINE,
    st.lists(_HEADER_LINE, min_size=1, max_size=8),
    st.sampled_from(["\r\n", "\n", ""]),
)


@hypothesis_settings(max_examples=1500, deadline=None)
@given(HEADS)
def test_a_head_parses_as_http_server_parsed_it(head):
    assert ours(head) == _Reference(head).outcome()


@hypothesis_settings(max_examples=500, deadline=None)
@given(st.one_of(HEADS, st.binary(max_size=300)))
def test_any_bytes_parse_to_a_request_or_an_error_status_or_a_silent_close(head):
    parsed = parse_head(head)
    if isinstance(parsed, Refusal):
        assert parsed.status is None or 400 <= parsed.status < 600
    else:
        assert parsed.method and parsed.target and parsed.version < (2, 0)
        assert ours(head) == _Reference(head).outcome()


_RESPONSE_HEAD = re.compile(rb"HTTP/1\.1 (\d{3}) ([^\r\n]*)\r\n((?:[^\r\n]+\r\n)*)\r\n")


@hypothesis_settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(head=st.one_of(HEADS, st.binary(max_size=200)))
def test_garbage_gets_well_formed_answers_or_a_close_never_a_failure(front, head):
    with socket.create_connection(("127.0.0.1", front.server_address[1]), timeout=10) as sock:
        sock.sendall(head + b"\r\n\r\n")
        sock.shutdown(socket.SHUT_WR)  # the server closes once it has answered what it had
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    heads = list(_RESPONSE_HEAD.finditer(data))
    assert data == b"" or (heads and heads[0].start() == 0), data[:200]
    for match in heads:
        status, reason, fields = int(match[1]), match[2].decode(), match[3].decode("latin-1")
        assert reason == REASONS[status]
        if status != 100:
            assert "\r\nX-Content-Type-Options: nosniff\r\n" in "\r\n" + fields
        if status >= 400:
            assert "Content-Type: text/plain\r\n" in fields
        if status in (400, 414, 431, 501, 505):  # the head was refused: nothing more is read
            assert fields.endswith("Connection: close\r\n")
