"""Fleet-mode source: a bounded client for a Prometheus-compatible query API.

Any Prometheus-compatible query API (Prometheus, Thanos, Mimir/Cortex, VictoriaMetrics) answers
`POST /api/v1/query` and `POST /api/v1/query_range` with the same JSON. Queries are sent as form
bodies, not URL parameters: a fleet query is a few KiB and proxies cap URL lengths. The section
that configures it is `prometheus:` (specwatch.config.PrometheusConfig).

The connection is httpconn.DeadlineConnection, the sidecar scraper's: plain `http.client`, kept
alive between queries, a watchdog thread that shuts the socket down at the whole-request deadline,
so whatever read is blocked (connect, headers, a dripping body) returns at once, and a connection
cut or left mid-answer is never reused. No proxy from the environment applies and no redirect is
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
by the standard library's json, as before, so every answer gives what json.loads gave.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import re
import time
from array import array
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import urlencode, urlsplit

from specwatch.base.httpconn import DeadlineConnection, TransferError
from specwatch.config import PrometheusConfig

QUERY_ERROR_REASONS = ("timeout", "connect", "tls", "http_4xx", "http_5xx", "too_large", "warnings", "limit", "invalid")

#: Prometheus refuses a range query of more than 11,000 points per series.
MAX_POINTS_PER_SERIES = 11_000

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


class Sample(NamedTuple):  # a tuple: a 1,000-replica answer holds ~30,000 of them per window
    labels: Mapping[str, str]
    value: float


class Series(NamedTuple):
    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]  # (unix seconds, value)


class Vector:
    """A vector answer, read lazily: fleet grouping reads each series' labels and value in its own
    pass instead of a Sample being built per series first (a 1,000-replica window answer holds
    ~32,000). A malformed series raises PromQueryError("invalid") when read: iterating gives
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
        except (KeyError, IndexError, TypeError):
            raise PromQueryError("invalid", "malformed vector sample") from None


def label_set(key: bytes) -> dict[str, str]:
    """A packed series' labels from its label set's JSON text (PromQueryError "invalid" if it is
    not a JSON object: the decoder checks a label set's text when it is first read)."""
    try:
        labels = json.loads(key)
    except ValueError:
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
_ODD_AFTER = 256 * 1024  # an unmatched item this long is read by json (one of Prometheus's is ~200 B)
# Stands for the streamed result when the rest of the envelope is decoded: a random string, so an
# answer cannot forge it (an answer that overrides "data" or "result" is read as json.loads reads it).
_STREAMED = "specwatch-streamed-" + os.urandom(8).hex()  # (secrets would load OpenSSL: +4 MiB RSS)
_PREFIX_STATE, _ITEM_STATE, _SEP_STATE, _ODD_STATE, _TAIL_STATE, _WHOLE_STATE = range(6)


class VectorDecoder:
    """Decodes one instant query's answer chunk by chunk (feed, then finish), into a packed
    Vector when the answer has Prometheus's own shape; what does not is read by json: an item of
    another shape and the rest after it with json.JSONDecoder.raw_decode, an answer whose first
    bytes differ (an error, another key order) whole with json.loads, as before. The vector, the
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
            if not buf.startswith(_PREFIX):  # an error, another writer: read whole, as before
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
            except ValueError:
                raise PromQueryError("invalid", "not a query API answer") from None
            except (KeyError, IndexError, TypeError):
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
    except (TypeError, ValueError):
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

    def query_range(self, expr: str, start: float, end: float, step: float) -> RangeAnswer:
        if (end - start) / step + 1 > MAX_POINTS_PER_SERIES:
            raise PromQueryError("limit", f"more than {MAX_POINTS_PER_SERIES} points per series: split the range")
        data, duration, size = self._post(
            "/api/v1/query_range", {"query": expr, "start": _ts(start), "end": _ts(end), "step": _ts(step)}
        )
        if data is None or data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
            raise PromQueryError("invalid", "expected a matrix result")
        series = []
        for item in data["result"]:
            try:
                points = tuple((float(t), _float(v)) for t, v in item["values"])
                series.append(Series(_labels(item["metric"]), points))
            except (KeyError, TypeError, ValueError):
                raise PromQueryError("invalid", "malformed matrix series") from None
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
        self, response: http.client.HTTPResponse, deadline: float, sink: Callable[[bytes], None] | None = None
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
        except ValueError:
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


def _ts(seconds: float) -> str:
    if not math.isfinite(seconds):
        raise PromQueryError("invalid", "time is not finite")
    return f"{seconds:.3f}"
