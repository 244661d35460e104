"""Value kinds of the config schema: how one value is parsed, read from the environment, and
described as JSON schema. Each kind is the single place its rules are written.

Every parse error is a ConfigError naming the dotted key (`targets[0].timeout: ...`), so the CLI can
print one line and exit 2.
"""

from __future__ import annotations

import json
import math
import os
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import yaml

from .. import units

if TYPE_CHECKING:
    from ..costmodel import Profile

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


@dataclass(frozen=True)
class Duration(Kind):
    def parse(self, value: object, key: str, ctx: Context) -> float:
        return float(_unit(lambda: units.parse_duration(value, key)))

    def json_schema(self) -> JsonSchema:
        # pattern applies to strings only, exclusiveMinimum to numbers only (bare seconds).
        return {"type": ["string", "number"], "pattern": units.DURATION_PATTERN, "exclusiveMinimum": 0}


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
        return float(_unit(lambda: units.parse_duration(text, key)))

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
        return [item.strip() for item in text.split(",") if item.strip()]


@dataclass(frozen=True)
class Size(Kind):
    def parse(self, value: object, key: str, ctx: Context) -> int:
        return int(_unit(lambda: units.parse_size(value, key)))

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


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class StringMap(Kind):
    """A mapping of strings; `keys` limits the names, `env_refs` resolves "${ENV}" in the values."""

    keys: tuple[str, ...] | None = None
    keys_hint: str = ""
    env_refs: bool = False
    # HTTP request headers: names must be tokens, and a resolved value must be sendable (an env var
    # read from a Secret file often ends in a newline, which every request would then refuse).
    http_headers: bool = False

    def parse(self, value: object, key: str, ctx: Context) -> dict[str, str]:
        if not isinstance(value, Mapping):
            raise ConfigError(key, f"expected a mapping, got {type(value).__name__}")
        environ = os.environ if ctx.environ is None else ctx.environ
        result: dict[str, str] = {}
        for name, item in value.items():
            where = f"{key}.{name}"
            if self.keys is not None and name not in self.keys:
                raise ConfigError(where, self.keys_hint or f"allowed: {', '.join(self.keys)}")
            if self.http_headers and not (isinstance(name, str) and _HEADER_NAME.fullmatch(name)):
                raise ConfigError(where, "not a valid HTTP header name")
            if not isinstance(item, str):
                raise ConfigError(where, "expected a string")
            resolved = _resolve_env_refs(item, where, environ) if self.env_refs else item
            if self.http_headers and not _HEADER_VALUE.fullmatch(resolved):
                # The value may be a secret: say what is wrong, never show it.
                raise ConfigError(
                    where, "value has a line break or leading whitespace after ${ENV} substitution (not shown)"
                )
            result[str(name)] = resolved
        return result

    def json_schema(self) -> JsonSchema:
        schema: JsonSchema = {"type": "object", "additionalProperties": {"type": "string"}}
        if self.keys is not None:
            schema["propertyNames"] = {"enum": list(self.keys)}
        elif self.http_headers:
            schema["propertyNames"] = {"pattern": _HEADER_NAME.pattern}
        return schema

    def from_env(self, text: str) -> Any:
        """A JSON object ({"X-Scope-OrgID": "tenant-a"}); other text is left for parse to refuse."""
        try:
            value = json.loads(text)
        except ValueError:
            return text
        return value if isinstance(value, dict) else text


# RFC 9110 token; a value as `requests` accepts it (no CR/LF/NUL, no leading whitespace).
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_HEADER_VALUE = re.compile(r"^(?:[^\s\x00\r\n][^\x00\r\n]*)?$")


def _resolve_env_refs(value: str, key: str, environ: Mapping[str, str]) -> str:
    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise ConfigError(key, f"environment variable {name} is not set")
        return environ[name]

    return _ENV_REF.sub(substitute, value)


@dataclass(frozen=True)
class JsonFile(Kind):
    """A path (relative to the config file) of a JSON object; parses to (path, object)."""

    def parse(self, value: object, key: str, ctx: Context) -> tuple[str, dict[str, object]]:
        path = os.path.join(ctx.base_dir, str(value))
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
        except FileNotFoundError:
            raise ConfigError(key, f"file not found: {path}") from None
        except (OSError, ValueError) as exc:
            raise ConfigError(key, f"cannot read {path}: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(key, f"{path} is not a JSON object")
        return path, data

    def json_schema(self) -> JsonSchema:
        return {"type": "string", "minLength": 1}


@dataclass(frozen=True)
class ModelRef(Kind):
    """A model preset name, or the path (relative to the config file) of a Hugging Face
    config.json; parses to (preset or path, the config object or None)."""

    presets: Callable[[], Sequence[str]]

    def parse(self, value: object, key: str, ctx: Context) -> tuple[str, dict[str, object] | None]:
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(key, f"expected a model preset or a config.json path, got {value!r}")
        if value.lower() in tuple(self.presets()):
            return value.lower(), None
        if not value.endswith(".json"):
            raise ConfigError(
                key,
                f"unknown preset {value!r} (known: {', '.join(sorted(self.presets()))}; "
                "or give the path of its config.json)",
            )
        return JsonFile().parse(value, key, ctx)

    def json_schema(self) -> JsonSchema:
        return {"type": "string", "minLength": 1}


@dataclass(frozen=True)
class StepTimeProfile(Kind):
    """A measured step-time profile, inline or as a YAML path; parses to (Profile, path or None)."""

    def parse(self, value: object, key: str, ctx: Context) -> tuple[Profile, str | None]:
        from .. import costmodel

        path = None
        data = value
        if isinstance(value, str):
            path = os.path.join(ctx.base_dir, value)
            try:
                with open(path, encoding="utf-8") as handle:
                    data = yaml.safe_load(handle)
            except FileNotFoundError:
                raise ConfigError(key, f"file not found: {path}") from None
            except (OSError, yaml.YAMLError) as exc:
                raise ConfigError(key, f"cannot read {path}: {exc}") from None
        try:
            return costmodel.parse_profile(data), path
        except ValueError as exc:
            raise error_from(exc, key) from None

    def json_schema(self) -> JsonSchema:
        return {"type": ["string", "object", "array"]}


@dataclass(frozen=True)
class Text(Kind):
    """A plain string (a reference checked by a rule that spans keys, e.g. a route's target)."""

    def parse(self, value: object, key: str, ctx: Context) -> str:
        if not isinstance(value, str):
            raise ConfigError(key, f"expected a string, got {value!r}")
        return value

    def json_schema(self) -> JsonSchema:
        return {"type": "string"}


@dataclass(frozen=True)
class SpeculativeConfig(Kind):
    """vLLM's `--speculative-config`: a mapping, or the same JSON as a string; checked as vLLM
    checks it (num_speculative_tokens, the num_speculative_tokens_per_batch_size schedule)."""

    def parse(self, value: object, key: str, ctx: Context) -> JsonSchema:
        from ..schedule_check import SpeculativeConfigError, parse_speculative_config

        data = value
        if isinstance(value, str):
            try:
                data = json.loads(value)
            except ValueError as exc:
                raise ConfigError(key, f"not valid JSON: {exc}") from None
        if not isinstance(data, Mapping):
            raise ConfigError(key, "expected a mapping or a JSON object string (the --speculative-config value)")
        try:
            parse_speculative_config(data)
        except SpeculativeConfigError as exc:
            raise ConfigError(f"{key}.{exc.key}", exc.reason) from None
        return dict(data)

    def json_schema(self) -> JsonSchema:
        return {"type": ["object", "string"]}


class ExistingFile(Kind):
    """A path (relative to the config file) of a regular file that is read later, e.g. a token that
    rotates; parses to the path."""

    def parse(self, value: Any, key: str, ctx: Context) -> str:
        if not isinstance(value, str) or not value:
            raise ConfigError(key, f"expected a file path, got {value!r}")
        path = os.path.join(ctx.base_dir, value)
        if not os.path.isfile(path):
            raise ConfigError(key, f"file not found: {path}")
        return path

    def json_schema(self) -> dict[str, Any]:
        return {"type": "string", "minLength": 1}


LABEL_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
_LABEL_NAME = re.compile(LABEL_NAME_PATTERN)


@dataclass(frozen=True)
class LabelNames(Kind):
    """A non-empty list of distinct Prometheus label names; `reserved` ones are refused with
    `reserved_hint`. The environment gives it comma-separated."""

    reserved: tuple[str, ...] = ()
    reserved_prefixes: tuple[str, ...] = ("__",)
    reserved_hint: str = ""

    def parse(self, value: Any, key: str, ctx: Context) -> tuple[str, ...]:
        if not isinstance(value, list) or not value:
            raise ConfigError(key, "expected a non-empty list of label names such as [namespace, pod]")
        for i, name in enumerate(value):
            where = f"{key}[{i}]"
            if not isinstance(name, str) or not _LABEL_NAME.fullmatch(name):
                raise ConfigError(where, f"expected a label name ([A-Za-z_][A-Za-z0-9_]*), got {name!r}")
            if name in self.reserved or name.startswith(self.reserved_prefixes):
                raise ConfigError(where, f"{name} is reserved{': ' + self.reserved_hint if self.reserved_hint else ''}")
        if len(set(value)) != len(value):
            raise ConfigError(key, "label names must be distinct")
        return tuple(value)

    def json_schema(self) -> dict[str, Any]:
        not_reserved: list[dict[str, Any]] = [{"enum": list(self.reserved)}] if self.reserved else []
        not_reserved += [{"pattern": "^" + re.escape(prefix)} for prefix in self.reserved_prefixes]
        item: dict[str, Any] = {"type": "string", "pattern": LABEL_NAME_PATTERN}
        if not_reserved:
            item["not"] = {"anyOf": not_reserved}
        return {"type": "array", "items": item, "uniqueItems": True, "minItems": 1}

    def from_env(self, text: str) -> Any:
        return [item.strip() for item in text.split(",") if item.strip()]


# One matcher: name, operator, then a PromQL string ("..." and '...' with Go escapes, `...` raw).
_MATCHER = re.compile(
    r"""\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*(?P<op>=~|!~|!=|=)\s*"""
    r"""(?P<value>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|`[^`]*`)\s*(?P<end>,|$)"""
)
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}
_NUMERIC_ESCAPE = re.compile(r"x[0-9A-Fa-f]{2}|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|[0-7]{3}")


def _promql_string(literal: str) -> str:
    """The value of a PromQL string literal; ValueError names a bad escape."""
    quote, body = literal[0], literal[1:-1]
    if quote == "`":
        return body
    out: list[str] = []
    i = 0
    while i < len(body):
        char = body[i]
        if char != "\\":
            out.append(char)
            i += 1
            continue
        following = body[i + 1]
        if following in _ESCAPES or following == quote:
            out.append(_ESCAPES.get(following, following))
            i += 2
            continue
        numeric = _NUMERIC_ESCAPE.match(body, i + 1)
        if numeric is None:
            raise ValueError(f"unknown escape sequence \\{following}")
        digits = numeric.group()
        out.append(chr(int(digits, 8) if digits[0].isdigit() else int(digits[1:], 16)))
        i = numeric.end()
    return "".join(out)


# Prometheus uses RE2: no lookaround, no backreferences. Python's re lacks \pL and \z, which RE2 has.
_RE2_UNSUPPORTED = re.compile(r"\(\?<?[=!]|\\[1-9]")
_RE2_ONLY = re.compile(r"\\[pP](?:\{[^}]*\}|[A-Za-z])|\\z|\\\\")


def _check_regex(pattern: str) -> str | None:
    """Why RE2 would refuse pattern, or None (checked with Python's re after RE2-only escapes)."""
    if _RE2_UNSUPPORTED.search(_RE2_ONLY.sub("", pattern)):
        return "lookaround and backreferences are not RE2"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # FutureWarning on RE2's [[:alpha:]] classes
            re.compile(_RE2_ONLY.sub(lambda m: "\\\\" if m.group() == "\\\\" else ".", pattern))
    except re.error as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class LabelMatchers(Kind):
    """PromQL label matchers added to every series specwatch queries, with or without braces:
    '{namespace="llm", job="vllm"}'. `__name__` is refused: specwatch names the series itself."""

    def parse(self, value: Any, key: str, ctx: Context) -> str:
        if not isinstance(value, str):
            raise ConfigError(key, f"expected label matchers such as '{{job=\"vllm\"}}', got {value!r}")
        text = value.strip()
        body = text[1:-1] if text.startswith("{") and text.endswith("}") else text
        position = 0
        while body[position:].strip():
            match = _MATCHER.match(body, position)
            if match is None or match.end() == position:
                raise ConfigError(
                    key, f'not PromQL label matchers (name="value", separated by commas) at {body[position:]!r}'
                )
            name, op = match.group("name"), match.group("op")
            if name == "__name__":
                raise ConfigError(key, "__name__ cannot be matched: specwatch chooses the vLLM series itself")
            try:
                matched = _promql_string(match.group("value"))
            except ValueError as exc:
                raise ConfigError(key, f"{exc} in the value of {name}") from None
            problem = _check_regex(matched) if op in ("=~", "!~") else None
            if problem:
                raise ConfigError(key, f"the regular expression of {name} is not valid: {problem}")
            position = match.end()
        return value

    def json_schema(self) -> dict[str, Any]:
        return {"type": "string"}
