"""Fleet-mode source: a bounded client for a Prometheus-compatible query API.

Any Prometheus-compatible query API (Prometheus, Thanos, Mimir/Cortex, VictoriaMetrics) answers
`POST /api/v1/query` and `POST /api/v1/query_range` with the same JSON. Queries are sent as form
bodies, not URL parameters: a fleet query is a few KiB and proxies cap URL lengths. The section
that configures it is `prometheus:` (specwatch.config.PrometheusConfig).

The connection is httpconn.DeadlineConnection, the sidecar scraper's: HTTP/1.1 of our own
(base/http1.py, read as `http.client` reads it), kept alive between queries, a watchdog thread
that shuts the socket down at the whole-request deadline, so whatever read is blocked (connect,
headers, a dripping body) returns at once, and a connection cut or left mid-answer is never
reused. No proxy from the environment applies and no redirect is
followed.

Every failure is a PromQueryError with one reason from QUERY_ERROR_REASONS, so the caller can count
it, log it once, keep its last good state and never serve a number from a partial answer:
- timeout: the whole-request deadline passed (connect, server evaluation, or a dripping body);
- connect: no connection, or the connection broke;
- tls: the TLS handshake failed (an untrusted or expired certificate, a name mismatch);
- http_4xx / http_5xx: the API refused (a bad query, a tenant limit, a redirect) or failed;
- too_large: the decoded answer is over `max_bytes`;
- warnings: the answer is partial (Thanos/Mimir `warnings`, e.g. a store was unreachable);
- limit: the server's own limits refused it (too many samples, too many points per series);
- invalid: not the query API's JSON.

Memory. A vector answer is decoded as it arrives (VectorDecoder), not built whole as Python
objects: each series of Prometheus's own shape is matched in the bytes and kept as its label
set's JSON text (one bytes object per label set, interned in the client between answers, so the
same label set poll after poll is the same object) and its value (one double); anything else in
the answer (other key orders, whitespace, escapes in a value, duplicate keys, an error) is read
by the standard library's json, so every answer gives what json.loads would give.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, overload
from urllib.parse import urlencode, urlsplit

from specwatch.base.http1 import Response
from specwatch.base.httpconn import DeadlineConnection, TransferError
from specwatch.config import PrometheusConfig

#: Prometheus refuses a range query of more than 11,000 points per series.
MAX_POINTS_PER_SERIES = 11_000
#: Series of one range answer at most (more is "too_large"): room for a history chunk of 1,000
#: replicas while its labels stay bounded (docs/benchmarks.md, "Chart defaults and constants").
MAX_RANGE_SERIES = 100_000

# Errors that mean "the server's limits refused this query" (Prometheus, Thanos, Mimir wording).
_LIMIT_MARKERS = (
    "too many samples",
    "exceeded maximum resolution",
    "query processing would load too many samples",
    "max samples",
    "the query hit the max number of",
    "exceeded the limit",
    "limit of",
)
_CONNECT_TIMEOUT = 2.0  # seconds, at most (and never beyond the deadline)


class PromQueryError(TransferError):
    """A failed query; `reason` is one of QUERY_ERROR_REASONS."""


class Sample(NamedTuple):  # a tuple: an answer holds one per series, tens of thousands per window
    labels: Mapping[str, str]
    value: float


class Series(NamedTuple):
    labels: Mapping[str, str]
    points: Sequence[tuple[float, float]]  # (unix seconds, value): a tuple, or Points


class Points(Sequence[tuple[float, float]]):
    """A series' points packed in one array of doubles (t0, v0, t1, v1, ...): 16 bytes a point,
    several times less than a tuple of float pairs, for histories of many points."""

    __slots__ = ("packed",)

    def __init__(self, packed: array[float] | None = None) -> None:
        self.packed: array[float] = packed if packed is not None else array("d")

    def __len__(self) -> int:
        return len(self.packed) // 2

    @overload
    def __getitem__(self, index: int) -> tuple[float, float]: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[tuple[float, float]]: ...
    def __getitem__(self, index: int | slice) -> tuple[float, float] | Sequence[tuple[float, float]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(index)
        return self.packed[2 * index], self.packed[2 * index + 1]

    def __iter__(self) -> Iterator[tuple[float, float]]:
        packed = self.packed
        for i in range(0, len(packed), 2):
            yield packed[i], packed[i + 1]


class Vector:
    """A vector answer, read lazily: fleet grouping reads each series' labels and value in its own
    pass instead of a Sample being built per series first (a large fleet's window answer holds
    tens of thousands). A malformed series raises PromQueryError("invalid") when read: iterating gives
    Samples; fleet_windows.WindowGrouper reads the storage itself. Two storages:
    - `items`: as json.loads decodes them, {"metric": {...}, "value": [t, "v"]}, checked when read;
    - packed (`keys` not None, `items` empty): what VectorDecoder streamed, each series' label set
      as its JSON object text (`keys`, interned: equal texts are one object) and its value
      (`values`, doubles), 16 bytes per series besides the label sets themselves."""

    __slots__ = ("items", "keys", "values")

    def __init__(
        self, items: list[object], keys: list[bytes] | None = None, values: array[float] | None = None
    ) -> None:
        self.items = items
        self.keys = keys
        self.values = values

    def __len__(self) -> int:
        return len(self.keys) if self.keys is not None else len(self.items)

    def __iter__(self) -> Iterator[Sample]:
        if self.keys is not None and self.values is not None:
            for key, value in zip(self.keys, self.values, strict=True):
                yield Sample(label_set(key), value)
            return
        try:
            for item in self.items:
                yield Sample(_labels(item["metric"]), _float(item["value"][1]))  # type: ignore[index]
        except (KeyError, IndexError, TypeError, OverflowError):
            raise PromQueryError("invalid", "malformed vector sample") from None


def label_set(key: bytes) -> dict[str, str]:
    """A packed series' labels from its label set's JSON text (PromQueryError "invalid" if it is
    not a JSON object: the decoder checks a label set's text when it is first read)."""
    try:
        labels = json.loads(key)
    except (ValueError, RecursionError):
        raise PromQueryError("invalid", "series labels are not JSON") from None
    return _labels(labels)


# -- streaming decode of a vector answer --------------------------------------------------------
# Prometheus writes a vector answer as exactly
#   {"status":"success","data":{"resultType":"vector","result":[ITEM,ITEM,...]}[,"warnings":[...]]...}
# with ITEM = {"metric":{"name":"value",...},"value":[1700000000.123,"42"]}. An ITEM of that shape
# is matched in the bytes: a label set without braces in it, a JSON number, a value string of
# printable ASCII without escapes (which float() reads as it reads the decoded str). A label
# set's text is checked to be a JSON object by json.loads when first seen (it is then interned):
# a JSON parse is deterministic, so a text that is a whole object is where the item's parse ends it.
_HEAD = b'{"status":"success","data":{"resultType":"vector","result":'
_PREFIX = _HEAD + b"["
_ITEM = re.compile(
    rb'\{"metric":(\{[^{}]*\}),"value":\[-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?,"([ !#-\[\]-~]*)"\]\}'
)
_ITEM_END = b'"]}'  # where a fast-shape item may end: without one, the item has not all arrived
_ODD_AFTER = 256 * 1024  # an unmatched item this long, far longer than a real one, is read by json
# Stands for the streamed result when the rest of the envelope is decoded: a random string, so an
# answer cannot forge it (an answer that overrides "data" or "result" is read as json.loads reads it).
_STREAMED = "specwatch-streamed-" + os.urandom(8).hex()  # (os.urandom: secrets would load OpenSSL)
_PREFIX_STATE, _ITEM_STATE, _SEP_STATE, _ODD_STATE, _TAIL_STATE, _WHOLE_STATE = range(6)


class VectorDecoder:
    """Decodes one instant query's answer chunk by chunk (feed, then finish), into a packed
    Vector when the answer has Prometheus's own shape; what does not is read by json: an item of
    another shape and the rest after it with json.JSONDecoder.raw_decode, an answer whose first
    bytes differ (an error, another key order) whole with json.loads. The vector, the
    PromQueryErrors and their reasons are those of json.loads and the checks on the whole answer.

    `intern` maps label-set texts to themselves: equal label sets across answers are then one
    object, and nothing per series outlives the answer but 16 bytes (the client keeps one)."""

    def __init__(self, intern: dict[bytes, bytes] | None = None) -> None:
        self.intern: dict[bytes, bytes] = intern if intern is not None else {}
        self.keys: list[bytes] = []
        self.values: array[float] = array("d")
        self._state = _PREFIX_STATE
        self._buf = b""
        self._parts: list[bytes] = []  # the rest, kept whole (an odd item on, the tail, or all)
        self._after_item = False  # in _ODD_STATE: the rest starts after an item (a "," or "]" next)
        self._waiting: list[bytes] = []  # an item begun, its end not arrived: its chunks so far
        self._waited = 0
        self._last = b""  # the last two bytes waiting

    def feed(self, chunk: bytes) -> None:
        if self._state >= _ODD_STATE:
            self._parts.append(chunk)
            return
        if self._waiting:  # an item's start without its end: scan again only once an end may be here
            tail = self._last + chunk
            self._last = tail[-2:]
            self._waiting.append(chunk)
            self._waited += len(chunk)
            if tail.find(_ITEM_END) < 0 and self._waited < _ODD_AFTER:
                return  # (so a long item dripping in small chunks costs one scan, not one per chunk)
            chunk, self._waiting, self._waited = b"".join(self._waiting), [], 0
        buf = self._buf + chunk if self._buf else chunk
        pos = 0
        if self._state == _PREFIX_STATE:
            if len(buf) < len(_PREFIX) and _PREFIX.startswith(buf):
                self._buf = buf
                return
            if not buf.startswith(_PREFIX):  # an error, another writer: read whole by json.loads
                self._state, self._buf, self._parts = _WHOLE_STATE, b"", [buf]
                return
            pos = len(_PREFIX)
            if buf[pos : pos + 1] == b"]":  # an empty result
                self._state, self._buf, self._parts = _TAIL_STATE, b"", [buf[pos + 1 :]]
                return
            self._state = _ITEM_STATE
        self._buf = self._scan(buf, pos)

    def _scan(self, buf: bytes, pos: int) -> bytes:
        """Items from `pos` on; returns what is left to complete with the next chunk."""
        match = _ITEM.match
        keys, values, intern = self.keys, self.values, self.intern
        append_key, append_value = keys.append, values.append
        end = len(buf)
        state = self._state
        while pos < end:
            if state == _SEP_STATE:
                sep = buf[pos]
                if sep == 44:  # ","
                    pos += 1
                    state = _ITEM_STATE
                    continue
                if sep == 93:  # "]": the result's end; the envelope's rest is small
                    self._state, self._parts = _TAIL_STATE, [buf[pos + 1 :]]
                    return b""
                self._state, self._parts, self._after_item = _ODD_STATE, [buf[pos:]], True
                return b""
            m = match(buf, pos)
            if m is None:
                if buf.find(_ITEM_END, pos) < 0 and end - pos < _ODD_AFTER:
                    self._state, self._waiting, self._waited = state, [buf[pos:]], end - pos
                    self._last = buf[-2:]
                    return b""  # not all here yet
                self._state, self._parts, self._after_item = _ODD_STATE, [buf[pos:]], False
                return b""
            try:
                value = float(m.group(2))  # Prometheus writes "NaN", "+Inf", "-Inf"
            except ValueError:  # json decides (at finish, once the whole answer is read)
                self._state, self._parts, self._after_item = _ODD_STATE, [buf[pos:]], False
                return b""
            key = m.group(1)
            known = intern.get(key)
            if known is None:
                if not _is_label_set(key):  # not what it seems (a brace in a string): json reads it
                    self._state, self._parts, self._after_item = _ODD_STATE, [buf[pos:]], False
                    return b""
                known = intern[key] = key
            append_key(known)
            append_value(value)
            pos = m.end()
            state = _SEP_STATE
        self._state = state
        return buf[pos:] if pos < end else b""

    def finish(self) -> Vector:
        """The answer's vector once the whole body is fed (PromQueryError as _decode raises)."""
        state = self._state
        if state in (_WHOLE_STATE, _PREFIX_STATE):
            return _vector(PromClient._decode(200, b"".join(self._parts) or self._buf))
        if state == _ODD_STATE:
            self._read_odd(b"".join(self._parts))
        elif state != _TAIL_STATE:  # the body ended inside the result (or " ]"): json decides
            self._after_item = state == _SEP_STATE
            self._read_odd(b"".join(self._waiting) or self._buf)
        # The envelope without the streamed result: the same checks as on the whole answer.
        data = PromClient._decode(200, _HEAD + json.dumps(_STREAMED).encode() + b"".join(self._parts))
        if data.get("resultType") == "vector" and data.get("result") == _STREAMED:
            return Vector([], self.keys, self.values)
        return _vector(data)  # "data" or "result" given again: json.loads keeps the last, so do we

    def _read_odd(self, rest: bytes) -> None:
        """An item not of Prometheus's shape and the rest of the result, read by json; the tail
        after the result's "]" is left in _parts."""
        try:
            text = rest.decode("utf-8")
        except UnicodeDecodeError:
            raise PromQueryError("invalid", "not a query API answer") from None
        decode = _JSON.raw_decode
        pos = 0
        after_item = self._after_item
        while True:
            pos = _skip_ws(text, pos)
            if after_item or not self.keys:  # after an item, or just after the result's "["
                sep = text[pos : pos + 1]
                if sep == "]":
                    break
                if after_item:
                    if sep != ",":
                        raise PromQueryError("invalid", "not a query API answer")
                    pos = _skip_ws(text, pos + 1)
            try:
                item, pos = decode(text, pos)
                labels = item["metric"]
                value = float(item["value"][1])  # as WindowGrouper reads a decoded item
                if not isinstance(labels, dict):
                    raise TypeError
            except (ValueError, RecursionError):
                raise PromQueryError("invalid", "not a query API answer") from None
            except (KeyError, IndexError, TypeError, OverflowError):
                raise PromQueryError("invalid", "malformed vector sample") from None
            key = json.dumps(labels, separators=(",", ":")).encode("ascii")
            self.keys.append(self.intern.setdefault(key, key))
            self.values.append(value)
            after_item = True
        self._parts = [text[pos + 1 :].encode("utf-8")]


_JSON = json.JSONDecoder()


def _is_label_set(text: bytes) -> bool:
    """Whether a matched label set's text is a JSON object (checked once per label set: the
    interned ones are known): then it is also where json's parse of the item ends it."""
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        return False


def _skip_ws(text: str, pos: int) -> int:
    while text[pos : pos + 1] in (" ", "\t", "\n", "\r"):
        pos += 1
    return pos


def _vector(data: dict[str, Any]) -> Vector:
    if data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        raise PromQueryError("invalid", "expected a vector result")
    result: list[object] = data["result"]
    return Vector(result)


@dataclass(frozen=True)
class QueryAnswer:
    samples: tuple[Sample, ...]
    duration: float
    bytes: int


@dataclass(frozen=True)
class RangeAnswer:
    series: tuple[Series, ...]
    duration: float
    bytes: int


def _float(text: Any) -> float:
    try:
        return float(text)  # Prometheus writes "NaN", "+Inf", "-Inf"
    except (TypeError, ValueError, OverflowError):  # OverflowError: a 400-digit JSON integer
        raise PromQueryError("invalid", f"not a sample value: {str(text)[:40]!r}") from None


class PromClient:
    """One kept-alive connection to the query API; queries are sent one at a time."""

    def __init__(self, config: PrometheusConfig):
        self.config = config
        self._base_path = urlsplit(config.url).path.rstrip("/")  # e.g. Thanos or Mimir behind /prometheus
        self._http = DeadlineConnection(config.url, connect_timeout=_CONNECT_TIMEOUT, error=PromQueryError)
        self.queries = 0  # queries sent, for the benchmark and the exported counter
        self.last_duration = 0.0  # of the last answer, seconds
        self.last_bytes = 0
        # Label-set texts of recent vector answers (VectorDecoder.intern), and those answers' sizes.
        self.label_sets: dict[bytes, bytes] = {}
        self._recent: tuple[int, ...] = (0, 0, 0, 0)
        self.last_out_of_range = 0  # points of the last range answer outside its [start, end]

    def close(self) -> None:
        self._http.close()

    def _headers(self) -> dict[str, str]:
        headers = {
            "Accept": "application/json",
            "Accept-Encoding": "identity",
            "User-Agent": "specwatch",
            "Content-Type": "application/x-www-form-urlencoded",
            **self._http.auth,
            **dict(self.config.headers),
        }
        if self.config.bearer_token_file:
            try:
                with open(self.config.bearer_token_file, encoding="utf-8") as handle:
                    token = handle.read().strip()  # re-read each time: projected tokens rotate
            except OSError:
                raise PromQueryError("connect", "cannot read bearer_token_file") from None
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def query(self, expr: str, at: float) -> QueryAnswer:
        vector = self.query_vector(expr, at)
        return QueryAnswer(tuple(vector), self.last_duration, self.last_bytes)

    def query_vector(self, expr: str, at: float) -> Vector:
        """An instant query's vector, decoded as it arrives (VectorDecoder); duration and size of
        the answer in last_duration and last_bytes."""
        decoder = VectorDecoder(self.label_sets)
        data, _, _ = self._post("/api/v1/query", {"query": expr, "time": _ts(at)}, decoder.feed)
        vector = decoder.finish() if data is None else _vector(data)
        # Replicas come and go: forget label sets gone for good (a poll's answers hold ~the same).
        self._recent = (*self._recent[1:], len(vector))
        if len(self.label_sets) > 2 * sum(self._recent) + 1024:
            self.label_sets.clear()
        return vector

    def query_range(
        self,
        expr: str,
        start: float,
        end: float,
        step: float,
        *,
        last_only: bool = False,
        max_series: int = MAX_RANGE_SERIES,
    ) -> RangeAnswer:
        """A range query's series, decoded by MatrixDecoder: points packed (Points), only those in
        [start, end] (a sample stamped in the future, at +Inf or before the range is dropped and
        counted in `last_out_of_range`), with ``last_only`` only the newest of each series; more
        than ``max_series`` series is "too_large". Memory: the body (at most max_bytes) while it is
        scanned, then 16 bytes a kept point and each series' labels, never a Python object a point."""
        if not (step > 0) or (end - start) / step + 1 > MAX_POINTS_PER_SERIES:
            raise PromQueryError("limit", f"more than {MAX_POINTS_PER_SERIES} points per series: split the range")
        body = bytearray()
        _, duration, size = self._post(
            "/api/v1/query_range",
            {"query": expr, "start": _ts(start), "end": _ts(end), "step": _ts(step)},
            body.extend,
        )
        decoder = MatrixDecoder(start, end, last_only=last_only, max_series=max_series)
        series = decoder.decode(body)
        del body
        self.last_out_of_range = decoder.out_of_range
        return RangeAnswer(tuple(series), duration, size)

    def _post(
        self, path: str, form: dict[str, str], sink: Callable[[bytes], None] | None = None
    ) -> tuple[dict[str, Any] | None, float, int]:
        """One query; its answer's data, duration and size. With `sink`, a 200 answer's body goes
        to it chunk by chunk instead (the data returned is then None: the sink decodes)."""
        timeout = self.config.timeout
        # Ask the server to give up first, so a slow query frees Prometheus too.
        body = urlencode({**form, "timeout": f"{max(int(timeout * 900), 1)}ms"}).encode("ascii")
        headers = self._headers()
        self.queries += 1
        start = time.monotonic()
        with self._http.deadline(timeout) as deadline:
            response = self._http.request("POST", self._base_path + path, headers, deadline, body)
            try:
                if 300 <= response.status < 400:
                    raise PromQueryError("http_4xx", "HTTP 3xx redirect (not followed)")
                status = response.status
                streamed = sink if status == 200 else None
                answer, size = self._read(response, deadline, streamed)
            finally:
                response.close()
        self.last_duration = duration = time.monotonic() - start
        self.last_bytes = size
        return (None if streamed else self._decode(status, answer)), duration, size

    def _read(
        self, response: Response, deadline: float, sink: Callable[[bytes], None] | None = None
    ) -> tuple[bytes, int]:
        """The body (b"" if each chunk went to `sink`) and its size."""
        declared = response.getheader("Content-Length")
        if declared and declared.isdigit() and int(declared) > self.config.max_bytes:
            raise PromQueryError("too_large", f"Content-Length {declared} over max_bytes {self.config.max_bytes}")
        encoding = (response.getheader("Content-Encoding") or "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise PromQueryError("invalid", f"unasked-for Content-Encoding {encoding[:40]!r}")
        parts: list[bytes] = []
        size = 0
        for chunk in self._http.chunks(response, deadline):
            size += len(chunk)
            if size > self.config.max_bytes:
                raise PromQueryError("too_large", f"answer over max_bytes {self.config.max_bytes}")
            if sink is None:
                parts.append(chunk)
            else:
                sink(chunk)
        if declared and declared.isdigit() and size != int(declared):
            raise PromQueryError("connect", f"answer truncated: {size} of {declared} bytes")
        return b"".join(parts), size

    @staticmethod
    def _decode(status: int, body: bytes) -> dict[str, Any]:
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError):  # RecursionError: JSON nested 100,000 deep
            payload = None
        error = str(payload.get("error", "")) if isinstance(payload, dict) else ""
        if status != 200 or (isinstance(payload, dict) and payload.get("status") == "error"):
            if any(marker in error.lower() for marker in _LIMIT_MARKERS):
                raise PromQueryError("limit", f"HTTP {status}: {error[:200]}")
            if 400 <= status < 500:
                raise PromQueryError("http_4xx", f"HTTP {status}: {error[:200]}")
            if status >= 500:
                raise PromQueryError("http_5xx", f"HTTP {status}: {error[:200]}")
            raise PromQueryError("invalid", f"status error: {error[:200]}")
        if (
            not isinstance(payload, dict)
            or payload.get("status") != "success"
            or not isinstance(payload.get("data"), dict)
        ):
            raise PromQueryError("invalid", "not a query API answer")
        warnings = payload.get("warnings")
        if warnings:
            # A partial answer (a store or querier missing) would bias ratios: never use it.
            raise PromQueryError("warnings", f"partial answer: {str(warnings[0])[:200]}")
        data: dict[str, Any] = payload["data"]
        return data


def _labels(metric: Any) -> dict[str, str]:
    # Not copied or checked value by value: answers are large, and a non-string value can only
    # fail a label's conversion downstream, where it is skipped.
    if not isinstance(metric, dict):
        raise PromQueryError("invalid", "series labels are not an object")
    return metric


# -- bounded decode of a range (matrix) answer --------------------------------------------------
# The body (at most max_bytes) is scanned in place, never built as Python objects: a point
# [t,"v"] is matched by one regex and kept as two doubles (or, with last_only, only the newest);
# a series' labels (a flat object: label values are strings) are read by json one series at a
# time; any other member (stats, histograms, infos) is skipped with a depth-bounded scan. Whatever
# the bytes (a 400-digit number, JSON nested 100,000 deep, a value that is no number), the outcome
# is the series or a PromQueryError, never another exception, and memory is the body plus what is kept.
_WS = re.compile(rb"[ \t\n\r]*")
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_SCALAR = re.compile(rb'"(?:[^"\\]|\\.)*"|-?[0-9][0-9.eE+-]*|true|false|null')
_FLAT_OBJECT = re.compile(rb'\{(?:[^{}\[\]"]|"(?:[^"\\]|\\.)*")*\}')
_NUMBER = rb"(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)"
_POINT = re.compile(rb"\[[ \t\n\r]*" + _NUMBER + rb'[ \t\n\r]*,[ \t\n\r]*"([^"\\]*)"[ \t\n\r]*\]')
#: Nesting a skipped member may have (Prometheus's deepest, a native histogram, is 4).
MAX_DEPTH = 32


#: The query API's times are written and read to the millisecond (`_ts`; Prometheus rounds each
#: step's time it answers): a point of a range can sit one rounding of the range's end and one of
#: its own outside the [start, end] asked for, so bounds checks allow this much and no more.
TIME_SLACK = 0.002


class MatrixDecoder:
    """One range answer's series: (labels, Points), the points inside [start, end] (give or take
    TIME_SLACK) only."""

    def __init__(self, start: float, end: float, *, last_only: bool = False, max_series: int = MAX_RANGE_SERIES):
        self.start, self.end = start - TIME_SLACK, end + TIME_SLACK
        self.last_only = last_only
        self.max_series = max_series
        self.out_of_range = 0
        self._buf: bytes | bytearray = b""
        self._pos = 0

    def decode(self, body: bytes | bytearray) -> list[Series]:
        self._buf, self._pos = body, 0
        try:
            return self._answer()
        except PromQueryError:
            raise
        except (ValueError, TypeError, OverflowError, RecursionError, IndexError, KeyError, UnicodeDecodeError):
            raise PromQueryError("invalid", "not a query API answer") from None
        finally:
            self._buf = b""

    # -- the envelope ----------------------------------------------------------------------------
    def _answer(self) -> list[Series]:
        status: object = None
        series: list[Series] | None = None
        result_type: object = None
        warnings = False
        for key in self._members():
            if key == "status":
                status = self._scalar()
            elif key == "data":
                if series is not None:
                    raise PromQueryError("invalid", "data given twice")
                result_type, series = self._data()
            elif key == "warnings":
                warnings = self._non_empty()
            else:
                self._skip()
        if _WS.match(self._buf, self._pos).end() != len(self._buf):  # type: ignore[union-attr]
            raise PromQueryError("invalid", "not a query API answer")
        if status == "error":
            PromClient._decode(200, bytes(self._buf))  # raises with the answer's own reason
        if status != "success" or series is None or result_type != "matrix":
            raise PromQueryError("invalid", "expected a matrix result")
        if warnings:
            raise PromQueryError("warnings", "partial answer")
        return series

    def _data(self) -> tuple[object, list[Series] | None]:
        result_type: object = None
        series: list[Series] | None = None
        for key in self._members():
            if key == "resultType":
                result_type = self._scalar()
            elif key == "result" and series is None:
                series = self._result()
            else:
                self._skip()
        return result_type, series

    def _result(self) -> list[Series]:
        out: list[Series] = []
        self._expect(b"[")
        if self._peek() == b"]":
            self._pos += 1
            return out
        while True:
            if len(out) >= self.max_series:
                raise PromQueryError("too_large", f"more than {self.max_series} series")
            item = self._series()
            if item is not None:
                out.append(item)
            if self._separator(b"]"):
                return out

    def _series(self) -> Series | None:
        labels: dict[str, str] | None = None
        points: Points | None = None
        for key in self._members():
            if key == "metric":
                self._ws()
                m = _FLAT_OBJECT.match(self._buf, self._pos)
                if m is None:
                    raise PromQueryError("invalid", "series labels are not a flat object")
                self._pos = m.end()
                decoded = json.loads(m.group())
                if not isinstance(decoded, dict) or not all(isinstance(v, str) for v in decoded.values()):
                    raise PromQueryError("invalid", "series labels are not strings")
                labels = decoded
            elif key == "values":
                if points is not None:
                    raise PromQueryError("invalid", "values given twice")
                points = self._points()
            else:
                self._skip()
        if labels is None:
            raise PromQueryError("invalid", "malformed matrix series")
        return Series(labels, points if points is not None else Points())

    def _points(self) -> Points:
        packed: array[float] = array("d")
        self._expect(b"[")
        if self._peek() == b"]":
            self._pos += 1
            return Points(packed)
        buf, match, start, end = self._buf, _POINT.match, self.start, self.end
        last_only = self.last_only
        newest = -math.inf
        while True:
            self._ws()
            m = match(buf, self._pos)
            if m is None:
                raise PromQueryError("invalid", "malformed matrix point")
            self._pos = m.end()
            t = float(m.group(1))  # a 400-digit integer is inf: outside any range
            value = float(m.group(2))  # ValueError: not a sample value (decode turns it "invalid")
            if not start <= t <= end:
                self.out_of_range += 1
            elif not last_only:
                packed.append(t)
                packed.append(value)
            elif t >= newest:
                newest = t
                packed = array("d", (t, value))
            if self._separator(b"]"):
                return Points(packed)

    # -- tokens ----------------------------------------------------------------------------------
    def _ws(self) -> None:
        self._pos = _WS.match(self._buf, self._pos).end()  # type: ignore[union-attr]

    def _peek(self) -> bytes:
        self._ws()
        return bytes(self._buf[self._pos : self._pos + 1])

    def _expect(self, char: bytes) -> None:
        if self._peek() != char:
            raise PromQueryError("invalid", "not a query API answer")
        self._pos += 1

    def _separator(self, close: bytes) -> bool:
        """After a member or an element: True at ``close`` (consumed), False at a comma."""
        char = self._peek()
        self._pos += 1
        if char == close:
            return True
        if char != b",":
            raise PromQueryError("invalid", "not a query API answer")
        return False

    def _members(self) -> Iterator[str]:
        """An object's keys, each positioned at its value (the caller reads or skips it)."""
        self._expect(b"{")
        if self._peek() == b"}":
            self._pos += 1
            return
        while True:
            self._ws()
            m = _STRING.match(self._buf, self._pos)
            if m is None:
                raise PromQueryError("invalid", "not a query API answer")
            self._pos = m.end()
            key = json.loads(m.group())
            self._expect(b":")
            yield key
            if self._separator(b"}"):
                return

    def _scalar(self) -> object:
        self._ws()
        m = _SCALAR.match(self._buf, self._pos)
        if m is None:
            self._skip()
            return None
        self._pos = m.end()
        return json.loads(m.group())

    def _non_empty(self) -> bool:
        """Skips a value; whether it is anything but null, an empty array or an empty string."""
        begin = _WS.match(self._buf, self._pos).end()  # type: ignore[union-attr]
        self._skip()
        text = bytes(self._buf[begin : self._pos]).replace(b" ", b"")
        return text not in (b"null", b"[]", b'""', b"false", b"{}")

    def _skip(self) -> None:
        """One value, whatever it holds, without building it (at most MAX_DEPTH deep)."""
        depth = 0
        buf = self._buf
        while True:
            self._ws()
            char = buf[self._pos : self._pos + 1]
            if char in (b"{", b"["):
                depth += 1
                if depth > MAX_DEPTH:
                    raise PromQueryError("invalid", f"nested deeper than {MAX_DEPTH}")
                self._pos += 1
                continue
            if char in (b"}", b"]"):
                depth -= 1
                self._pos += 1
            elif char in (b",", b":"):
                if depth == 0:
                    raise PromQueryError("invalid", "not a query API answer")
                self._pos += 1
                continue
            else:
                m = _SCALAR.match(buf, self._pos)
                if m is None:
                    raise PromQueryError("invalid", "not a query API answer")
                self._pos = m.end()
            if depth <= 0:
                if depth < 0:
                    raise PromQueryError("invalid", "not a query API answer")
                return


def _ts(seconds: float) -> str:
    if not math.isfinite(seconds):
        raise PromQueryError("invalid", "time is not finite")
    return f"{seconds:.3f}"
