"""Fleet-mode source: the `prometheus:` config section and a bounded client for the query API.

Any Prometheus-compatible query API (Prometheus, Thanos, Mimir/Cortex, VictoriaMetrics) answers
`POST /api/v1/query` and `POST /api/v1/query_range` with the same JSON. Queries are sent as form
bodies, not URL parameters: a fleet query is a few KiB and proxies cap URL lengths.

Every failure is a PromQueryError with one reason from QUERY_ERROR_REASONS, so the caller can count
it, log it once, keep its last good state and never serve a number from a partial answer:
- timeout: the whole-request deadline passed (connect, server evaluation, or a dripping body);
- connect: no connection, or the connection broke;
- http_4xx / http_5xx: the API refused (a bad query, a tenant limit) or failed;
- too_large: the decoded answer is over `max_bytes`;
- warnings: the answer is partial (Thanos/Mimir `warnings`, e.g. a store was unreachable);
- limit: the server's own limits refused it (too many samples, too many points per series);
- invalid: not the query API's JSON.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import requests

from .config import ConfigError, parse_duration, parse_size
from .scrape import (
    _DeadlineAdapter,  # the sidecar's connection tracking: a deadline can cut any phase
)

QUERY_ERROR_REASONS = ("timeout", "connect", "http_4xx", "http_5xx", "too_large", "warnings", "limit", "invalid")

#: Prometheus refuses a range query of more than 11,000 points per series.
MAX_POINTS_PER_SERIES = 11_000

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Errors that mean "the server's limits refused this query" (Prometheus, Thanos, Mimir wording).
_LIMIT_MARKERS = ("too many samples", "exceeded maximum resolution", "query processing would load too many samples",
                  "max samples", "the query hit the max number of", "exceeded the limit", "limit of")
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class PrometheusSourceConfig:
    """`prometheus:` in the config file. With it set, `specwatch run` polls no vLLM itself."""

    url: str
    # Label matchers added to every vLLM series, without or with braces: 'namespace="llm",job="vllm"'.
    selector: str = ""
    # Labels that together identify one vLLM replica (one /metrics endpoint).
    replica_labels: tuple[str, ...] = ("instance",)
    # Values may hold ${ENV}; resolved at load time and never logged.
    headers: Mapping[str, str] = field(default_factory=dict)
    bearer_token_file: str | None = None
    timeout: float = 10.0
    max_bytes: int = 64 * 2**20
    # Prometheus's scrape interval of the vLLM job; None infers it from each replica's samples.
    scrape_interval: float | None = None

    @property
    def matchers(self) -> str:
        """The selector's matchers without braces ('' when none)."""
        text = self.selector.strip()
        if text.startswith("{") and text.endswith("}"):
            text = text[1:-1]
        return text.strip().rstrip(",")


_KEYS = {"url", "selector", "replica_labels", "headers", "bearer_token_file", "timeout", "max_bytes",
         "scrape_interval"}


def parse_prometheus_source(raw: Any, environ: Mapping[str, str] | None = None,
                            where: str = "prometheus") -> PrometheusSourceConfig:
    """Validate the `prometheus:` mapping; every error is a ConfigError naming the key."""
    environ = os.environ if environ is None else environ
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a mapping with at least url")
    for key in raw:
        if key not in _KEYS:
            raise ConfigError(f"{where}.{key}: unknown key (allowed: {', '.join(sorted(_KEYS))})")
    if "url" not in raw:
        raise ConfigError(f"{where}.url: required")
    url = str(raw["url"]).rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{where}.url: expected an http:// or https:// URL, got {raw['url']!r}")
    selector = raw.get("selector") or ""
    if not isinstance(selector, str):
        raise ConfigError(f"{where}.selector: expected label matchers such as '{{job=\"vllm\"}}'")
    _check_selector(selector, f"{where}.selector")
    labels_raw = raw.get("replica_labels", ["instance"])
    if not isinstance(labels_raw, list) or not labels_raw:
        raise ConfigError(f"{where}.replica_labels: expected a non-empty list of label names")
    for i, name in enumerate(labels_raw):
        if not isinstance(name, str) or not _LABEL_NAME.match(name) or name.startswith("__"):
            raise ConfigError(f"{where}.replica_labels[{i}]: expected a label name, got {name!r}")
        if name in ("model_name", "engine", "position", "le"):
            raise ConfigError(f"{where}.replica_labels[{i}]: {name} is read by specwatch itself; "
                              "name the labels that identify one vLLM (e.g. namespace, pod)")
    if len(set(labels_raw)) != len(labels_raw):
        raise ConfigError(f"{where}.replica_labels: names must be unique")
    headers_raw = raw.get("headers") or {}
    if not isinstance(headers_raw, Mapping):
        raise ConfigError(f"{where}.headers: expected a mapping")
    headers: dict[str, str] = {}
    for name, value in headers_raw.items():
        if not isinstance(value, str):
            raise ConfigError(f"{where}.headers.{name}: expected a string")
        headers[str(name)] = _resolve_env(value, f"{where}.headers.{name}", environ)
    token_file = raw.get("bearer_token_file")
    if token_file is not None:
        if not isinstance(token_file, str) or not token_file:
            raise ConfigError(f"{where}.bearer_token_file: expected a file path")
        if not os.path.isfile(token_file):
            raise ConfigError(f"{where}.bearer_token_file: file not found: {token_file}")
    scrape_interval = raw.get("scrape_interval")
    return PrometheusSourceConfig(
        url=url, selector=selector, replica_labels=tuple(labels_raw), headers=headers,
        bearer_token_file=token_file,
        timeout=parse_duration(raw.get("timeout", "10s"), f"{where}.timeout"),
        max_bytes=parse_size(raw.get("max_bytes", "64MiB"), f"{where}.max_bytes"),
        scrape_interval=(None if scrape_interval is None
                         else parse_duration(scrape_interval, f"{where}.scrape_interval")),
    )


def _resolve_env(value: str, key: str, environ: Mapping[str, str]) -> str:
    def substitute(match: re.Match[str]) -> str:
        if match.group(1) not in environ:
            raise ConfigError(f"{key}: environment variable {match.group(1)} is not set")
        return environ[match.group(1)]
    return _ENV_REF.sub(substitute, value)


def _check_selector(selector: str, key: str) -> None:
    text = selector.strip()
    if not text:
        return
    body = text[1:-1] if text.startswith("{") and text.endswith("}") else text
    try:
        import promql_parser  # validates exactly as PromQL does

        promql_parser.parse("vllm:num_requests_running{" + body + "}")
    except ImportError:  # pragma: no cover - the parser is an optional dependency
        if "{" in body or "}" in body:
            raise ConfigError(f"{key}: expected label matchers such as '{{job=\"vllm\"}}', got {selector!r}") from None
    except ValueError as exc:
        raise ConfigError(f"{key}: not valid PromQL label matchers ({exc}): {selector!r}") from None


class PromQueryError(Exception):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class Sample(NamedTuple):  # a tuple: a 1,000-replica answer holds ~30,000 of them per window
    labels: Mapping[str, str]
    value: float


class Series(NamedTuple):
    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]  # (unix seconds, value)


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
    """One keep-alive session to the query API; thread-safe for sequential use per instance."""

    def __init__(self, config: PrometheusSourceConfig):
        self.config = config
        self.session = requests.Session()
        self.session.trust_env = False  # HTTP(S)_PROXY must not capture an in-cluster query
        self.session.max_redirects = 0
        adapter = _DeadlineAdapter(self._track)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self._conn: Any = None
        self.queries = 0  # queries sent, for the benchmark and the exported counter
        self._lock = threading.Lock()

    def _track(self, conn: Any) -> None:
        self._conn = conn

    def _cut(self) -> None:
        """Shut the connection in use down: a blocked read returns at once, and a connection left
        mid-answer is never reused for the next query."""
        sock = getattr(self._conn, "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self.session.close()

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "Accept-Encoding": "identity", "User-Agent": "specwatch",
                   **dict(self.config.headers)}
        if self.config.bearer_token_file:
            try:
                with open(self.config.bearer_token_file, encoding="utf-8") as handle:
                    token = handle.read().strip()  # re-read each time: projected tokens rotate
            except OSError:
                raise PromQueryError("connect", "cannot read bearer_token_file") from None
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def query(self, expr: str, at: float) -> QueryAnswer:
        data, duration, size = self._post("/api/v1/query", {"query": expr, "time": _ts(at)})
        if data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
            raise PromQueryError("invalid", "expected a vector result")
        try:
            samples = tuple(Sample(_labels(item["metric"]), _float(item["value"][1])) for item in data["result"])
        except (KeyError, IndexError, TypeError):
            raise PromQueryError("invalid", "malformed vector sample") from None
        return QueryAnswer(samples, duration, size)

    def query_range(self, expr: str, start: float, end: float, step: float) -> RangeAnswer:
        if (end - start) / step + 1 > MAX_POINTS_PER_SERIES:
            raise PromQueryError("limit", f"more than {MAX_POINTS_PER_SERIES} points per series: split the range")
        data, duration, size = self._post("/api/v1/query_range",
                                          {"query": expr, "start": _ts(start), "end": _ts(end), "step": _ts(step)})
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
        form = {**form, "timeout": f"{max(int(timeout * 900), 1)}ms"}
        with self._lock:
            self.queries += 1
        start = time.monotonic()
        deadline = start + timeout
        self._conn = None
        watchdog = threading.Timer(timeout, self._cut)
        watchdog.daemon = True
        watchdog.start()
        try:
            try:
                response = self.session.post(self.config.url + path, data=form, headers=self._headers(),
                                             stream=True, allow_redirects=False, timeout=(min(timeout, 2.0), timeout))
            except requests.exceptions.Timeout:
                raise PromQueryError("timeout", "no answer in time") from None
            except requests.exceptions.TooManyRedirects:
                raise PromQueryError("http_4xx", "HTTP 3xx redirect (not followed)") from None
            except (requests.exceptions.ConnectionError, OSError) as exc:
                raise PromQueryError("connect", f"cannot connect: {type(exc).__name__}") from None
            except requests.exceptions.RequestException as exc:
                raise PromQueryError("invalid", f"request failed: {type(exc).__name__}") from None
            try:
                body = self._read(response, deadline)
            except PromQueryError:
                self._cut()
                raise
            finally:
                response.close()
        except PromQueryError as exc:
            if time.monotonic() >= deadline and exc.reason != "timeout":
                raise PromQueryError("timeout", f"whole-request deadline of {timeout:g}s passed") from None
            raise
        finally:
            watchdog.cancel()
        duration = time.monotonic() - start
        return self._decode(response.status_code, body), duration, len(body)

    def _read(self, response: requests.Response, deadline: float) -> bytes:
        declared = response.headers.get("Content-Length")
        if declared and declared.isdigit() and int(declared) > self.config.max_bytes:
            raise PromQueryError("too_large", f"Content-Length {declared} over max_bytes {self.config.max_bytes}")
        parts: list[bytes] = []
        size = 0
        try:
            while True:
                if time.monotonic() >= deadline:
                    raise PromQueryError("timeout", "deadline passed while reading the answer")
                chunk = response.raw.read1(_CHUNK)
                if not chunk:
                    break
                size += len(chunk)
                if size > self.config.max_bytes:
                    raise PromQueryError("too_large", f"answer over max_bytes {self.config.max_bytes}")
                parts.append(chunk)
        except PromQueryError:
            raise
        except Exception as exc:  # noqa: BLE001 - urllib3 raises many types on a cut or timed-out body
            if time.monotonic() >= deadline or "timed out" in str(exc).lower():
                raise PromQueryError("timeout", "read timed out") from None
            raise PromQueryError("connect", f"connection broken while reading: {type(exc).__name__}") from None
        return b"".join(parts)

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
        if not isinstance(payload, dict) or payload.get("status") != "success" or not isinstance(payload.get("data"), dict):
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
