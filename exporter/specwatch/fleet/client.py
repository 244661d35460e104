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
"""

from __future__ import annotations

import http.client
import json
import math
import time
from collections.abc import Iterator, Mapping
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
    """A vector answer as decoded, read lazily: fleet grouping reads each series' labels and value
    string in its own pass instead of a Sample being built per series first (a 1,000-replica
    window answer holds ~32,000). A malformed series raises PromQueryError("invalid") when read:
    iterating gives Samples; fleet_windows.WindowGrouper reads `items` itself."""

    __slots__ = ("items",)

    def __init__(self, items: list[object]) -> None:
        self.items = items  # as decoded: {"metric": {...}, "value": [t, "v"]}, checked when read

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[Sample]:
        try:
            for item in self.items:
                yield Sample(_labels(item["metric"]), _float(item["value"][1]))  # type: ignore[index]
        except (KeyError, IndexError, TypeError):
            raise PromQueryError("invalid", "malformed vector sample") from None


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
        """An instant query's vector, its series read lazily (Vector); duration and size of the
        answer in last_duration and last_bytes."""
        data, self.last_duration, self.last_bytes = self._post("/api/v1/query", {"query": expr, "time": _ts(at)})
        if data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
            raise PromQueryError("invalid", "expected a vector result")
        result: list[object] = data["result"]
        return Vector(result)

    def query_range(self, expr: str, start: float, end: float, step: float) -> RangeAnswer:
        if (end - start) / step + 1 > MAX_POINTS_PER_SERIES:
            raise PromQueryError("limit", f"more than {MAX_POINTS_PER_SERIES} points per series: split the range")
        data, duration, size = self._post(
            "/api/v1/query_range", {"query": expr, "start": _ts(start), "end": _ts(end), "step": _ts(step)}
        )
        if data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
            raise PromQueryError("invalid", "expected a matrix result")
        series = []
        for item in data["result"]:
            try:
                points = tuple((float(t), _float(v)) for t, v in item["values"])
                series.append(Series(_labels(item["metric"]), points))
            except (KeyError, TypeError, ValueError):
                raise PromQueryError("invalid", "malformed matrix series") from None
        return RangeAnswer(tuple(series), duration, size)

    def _post(self, path: str, form: dict[str, str]) -> tuple[dict[str, Any], float, int]:
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
                status, answer = response.status, self._read(response, deadline)
            finally:
                response.close()
        duration = time.monotonic() - start
        return self._decode(status, answer), duration, len(answer)

    def _read(self, response: http.client.HTTPResponse, deadline: float) -> bytes:
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
            parts.append(chunk)
        answer = b"".join(parts)
        if declared and declared.isdigit() and len(answer) != int(declared):
            raise PromQueryError("connect", f"answer truncated: {len(answer)} of {declared} bytes")
        return answer

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
