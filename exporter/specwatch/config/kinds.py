"""Value kinds of the config schema: how one value is parsed, read from the environment, and
described as JSON schema. Each kind is the single place its rules are written.

This module holds the base (Kind, Context, ConfigError, error_from) and the scalar kinds:
durations, hold times, sizes, numbers, choices, names, listen addresses, URLs, flags, text. The
mapping kinds are in mapping_kinds.py, the kinds that name a file in file_kinds.py, the Prometheus
label kinds of fleet mode in label_kinds.py.

Every parse error is a ConfigError naming the dotted key (`targets[0].timeout: ...`), so the CLI can
print one line and exit 2.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from specwatch.base import units

#: A JSON schema as json_schema() builds it (written out with json.dumps).
JsonSchema = dict[str, object]
_N = TypeVar("_N", int, float)


class ConfigError(ValueError):
    """A bad configuration value; `key` is the dotted key at fault, `reason` the rest of the line."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key = key
        self.reason = reason


@dataclass(frozen=True)
class Context:
    """What parsing needs besides the value: where relative paths start, and ${ENV} values."""

    base_dir: str = "."
    environ: Mapping[str, str] | None = None


class Kind:
    """Base of all kinds. `parse` validates and converts; `json_schema` describes the same rule."""

    # Each kind returns its own type (see the overrides); the base says Any only because the schema
    # walk in parse.py unpacks the tuples of two-field kinds (JsonFile, StepTimeProfile) without a check.
    def parse(self, value: object, key: str, ctx: Context) -> Any:
        """`value` as YAML or the environment gave it -> the typed value the Config holds."""
        raise NotImplementedError

    def json_schema(self) -> JsonSchema:
        raise NotImplementedError

    def from_env(self, text: str) -> object:
        """An environment variable's text as the value the file would hold."""
        return text


_KEY_PREFIX = re.compile(r"^([a-z_]+(?:\[[0-9]+\])?(?:\.[a-z_]+(?:\[[0-9]+\])?)*):\s*(.*)$", re.DOTALL)


def error_from(exc: Exception, fallback_key: str) -> ConfigError:
    """A ConfigError for an error raised outside config (the cost model), naming the right key.

    The key comes from the exception's `key` attribute (and `detail`, the message without it);
    errors that do not carry one yet are read as "<key>: <reason>" text, else get fallback_key."""
    key = getattr(exc, "key", None)
    # str(KeyError("x")) is "'x'": take the message itself.
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    if isinstance(key, str) and key:
        detail = getattr(exc, "detail", None)
        if isinstance(detail, str):
            return ConfigError(key, detail)
        return ConfigError(key, text[len(key) + 1 :].strip() if text.startswith(key + ":") else text)
    match = _KEY_PREFIX.match(text)
    if match:
        return ConfigError(match.group(1), match.group(2))
    return ConfigError(fallback_key, text)


def _unit(parse: Callable[[], _N]) -> _N:
    try:
        return parse()
    except units.UnitError as exc:
        raise ConfigError(exc.key, exc.reason) from None


def parse_duration(value: object, key: str) -> float:
    """units.parse_duration for config values and CLI flags: a bad value is a ConfigError (exit 2)."""
    return _unit(lambda: units.parse_duration(value, key))


def parse_size(value: object, key: str) -> int:
    """units.parse_size, raising ConfigError."""
    return _unit(lambda: units.parse_size(value, key))


def comma_list(text: str) -> list[str]:
    """A list value given in the environment: comma-separated, blanks dropped."""
    return [item.strip() for item in text.split(",") if item.strip()]


@dataclass(frozen=True)
class Duration(Kind):
    allow_zero: bool = False  # 0s means "off" (shutdown_drain)

    def parse(self, value: object, key: str, ctx: Context) -> float:
        return float(_unit(lambda: units.parse_duration(value, key, allow_zero=self.allow_zero)))

    def json_schema(self) -> JsonSchema:
        # pattern applies to strings only, the minimum to numbers only (bare seconds).
        bound = {"minimum": 0} if self.allow_zero else {"exclusiveMinimum": 0}
        return {"type": ["string", "number"], "pattern": units.DURATION_PATTERN, **bound}


@dataclass(frozen=True)
class HoldTime(Kind):
    """How long something must persist: a duration ("30s") -> float seconds; a bare integer (as
    before durations were accepted) -> int, a count of evaluations, converted by the reader."""

    max_count: int = 100

    def parse(self, value: object, key: str, ctx: Context) -> int | float:
        text = str(value).strip()
        if not isinstance(value, (bool, float)) and re.fullmatch(r"[+-]?\d+", text):
            count = int(text)
            if not 1 <= count <= self.max_count:
                raise ConfigError(
                    key, f"must be >= 1, got {count}" if count < 1 else f"must be <= {self.max_count}, got {count}"
                )
            return count
        if isinstance(value, (bool, int, float)):
            raise ConfigError(key, f"expected a duration like 30s (or a whole number of polls), got {value!r}")
        return float(parse_duration(text, key))

    def json_schema(self) -> JsonSchema:
        return {
            "type": ["string", "integer"],
            "pattern": units.DURATION_PATTERN,
            "minimum": 1,
            "maximum": self.max_count,
        }


@dataclass(frozen=True)
class DurationList(Kind):
    """A non-empty list of distinct durations; the environment gives it comma-separated."""

    def parse(self, value: object, key: str, ctx: Context) -> tuple[float, ...]:
        if not isinstance(value, list) or not value:
            raise ConfigError(key, "expected a non-empty list of durations such as [1m, 5m]")
        durations = tuple(Duration().parse(item, f"{key}[{i}]", ctx) for i, item in enumerate(value))
        if len(set(durations)) != len(durations):
            raise ConfigError(key, "durations must be distinct")
        return durations

    def json_schema(self) -> JsonSchema:
        return {"type": "array", "items": Duration().json_schema(), "uniqueItems": True, "minItems": 1}

    def from_env(self, text: str) -> object:
        return comma_list(text)


@dataclass(frozen=True)
class Size(Kind):
    def parse(self, value: object, key: str, ctx: Context) -> int:
        return int(parse_size(value, key))

    def json_schema(self) -> JsonSchema:
        return {"type": ["string", "integer"], "pattern": units.SIZE_PATTERN, "minimum": 1}


@dataclass(frozen=True)
class Number(Kind):
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    exclusive_maximum: bool = False
    integer: bool = False
    # YAML 1.1 reads 8e9 as a string: let the chart accept numeric strings where that is natural.
    numeric_strings: bool = False

    def parse(self, value: object, key: str, ctx: Context) -> int | float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            # Environment overrides arrive as strings: accept numeric strings.
            try:
                value = int(str(value)) if self.integer else _float(value)
            except (TypeError, ValueError, OverflowError):
                raise ConfigError(
                    key, f"expected {'an integer' if self.integer else 'a number'}, got {value!r}"
                ) from None
        if not math.isfinite(value):
            raise ConfigError(key, f"must be a finite number, got {value!r}")
        if self.integer and float(value) != int(value):
            raise ConfigError(key, f"expected an integer, got {value!r}")
        if self.minimum is not None and (value < self.minimum or (self.exclusive_minimum and value == self.minimum)):
            raise ConfigError(key, f"must be {'>' if self.exclusive_minimum else '>='} {self.minimum}, got {value!r}")
        if self.maximum is not None and (value > self.maximum or (self.exclusive_maximum and value == self.maximum)):
            raise ConfigError(key, f"must be {'<' if self.exclusive_maximum else '<='} {self.maximum}, got {value!r}")
        return int(value) if self.integer else float(value)

    def json_schema(self) -> JsonSchema:
        kind = "integer" if self.integer else "number"
        schema: JsonSchema = {"type": [kind, "string"] if self.numeric_strings else kind}
        if self.minimum is not None:
            schema["exclusiveMinimum" if self.exclusive_minimum else "minimum"] = self.minimum
        if self.maximum is not None:
            schema["exclusiveMaximum" if self.exclusive_maximum else "maximum"] = self.maximum
        return schema


#: A number > 0, and a fraction in (0, 1]: the bounds most keys share.
POSITIVE = Number(minimum=0, exclusive_minimum=True)
FRACTION = Number(minimum=0, maximum=1, exclusive_minimum=True)


def _float(value: object) -> float:
    """float() of a YAML value; TypeError for a value that is neither a number nor a string."""
    if isinstance(value, (int, float, str)):
        return float(value)
    raise TypeError(f"not a number: {type(value).__name__}")


@dataclass(frozen=True)
class Choice(Kind):
    """One of a fixed set of lower-case names; `values` is called lazily (cost-model presets)."""

    values: Callable[[], Sequence[str]]
    noun: str | None = None  # "preset": unknown preset 'x' (known: ...)

    def parse(self, value: object, key: str, ctx: Context) -> str:
        choices = tuple(self.values())
        text = str(value).lower()
        if isinstance(value, (bool, int, float)) or text not in choices:
            if self.noun:
                raise ConfigError(key, f"unknown {self.noun} {value!r} (known: {', '.join(sorted(choices))})")
            raise ConfigError(key, f"expected one of {', '.join(choices)}, got {value!r}")
        return text

    def json_schema(self) -> JsonSchema:
        return {"type": "string", "enum": list(self.values())}


NAME_PATTERN = r"^[A-Za-z0-9_.:/-]{1,128}$"
_NAME_RE = re.compile(NAME_PATTERN)


@dataclass(frozen=True)
class Name(Kind):
    """A target or route name: it becomes a Prometheus label value."""

    def parse(self, value: object, key: str, ctx: Context) -> str:
        if not isinstance(value, str) or not _NAME_RE.match(value):
            raise ConfigError(key, f"expected a name of letters, digits and _.:/- (1-128 chars), got {value!r}")
        return value

    def json_schema(self) -> JsonSchema:
        return {"type": "string", "pattern": NAME_PATTERN}


@dataclass(frozen=True)
class Listen(Kind):
    def parse(self, value: object, key: str, ctx: Context) -> str:
        text = str(value)
        _host, sep, port = text.rpartition(":")
        if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ConfigError(key, f"expected [host]:port such as :9474 or 127.0.0.1:9474, got {value!r}")
        return text

    def json_schema(self) -> JsonSchema:
        return {"type": "string", "pattern": r"^[^\s]*:[0-9]{1,5}$"}


@dataclass(frozen=True)
class Url(Kind):
    # A base URL that API paths are appended to: no query or fragment, a trailing / dropped.
    base: bool = False

    def parse(self, value: object, key: str, ctx: Context) -> str:
        url = str(value)
        parts = urlsplit(url)
        # Only http(s): a sidecar must never be turned into a file:// or gopher:// reader.
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(key, f"expected an http:// or https:// URL, got {url!r}")
        if self.base:
            if parts.query or parts.fragment or "?" in url or "#" in url:
                raise ConfigError(key, f"expected a base URL without ?query or #fragment, got {url!r}")
            return url.rstrip("/")
        return url

    def json_schema(self) -> JsonSchema:
        if self.base:
            return {"type": "string", "pattern": "^https?://[^/?#][^?#]*$"}
        return {"type": "string", "pattern": "^https?://[^/?#]"}


@dataclass(frozen=True)
class Flag(Kind):
    def parse(self, value: object, key: str, ctx: Context) -> bool:
        if not isinstance(value, bool):
            raise ConfigError(key, "expected true or false")
        return value

    def json_schema(self) -> JsonSchema:
        return {"type": "boolean"}

    def from_env(self, text: str) -> object:
        lowered = text.strip().lower()
        return {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}.get(lowered, text)


@dataclass(frozen=True)
class Text(Kind):
    """A plain string (a reference checked by a rule that spans keys, e.g. a route's target)."""

    def parse(self, value: object, key: str, ctx: Context) -> str:
        if not isinstance(value, str):
            raise ConfigError(key, f"expected a string, got {value!r}")
        return value

    def json_schema(self) -> JsonSchema:
        return {"type": "string"}
