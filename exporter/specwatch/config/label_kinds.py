"""Kinds for Prometheus labels in fleet mode: the label names that identify a replica, and the
PromQL label matchers added to every query (parsed as PromQL parses them, regexes checked as RE2
would accept them)."""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass

from specwatch.config.kinds import ConfigError, Context, JsonSchema, Kind, comma_list

LABEL_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
_LABEL_NAME = re.compile(LABEL_NAME_PATTERN)


@dataclass(frozen=True)
class LabelNames(Kind):
    """A list of distinct Prometheus label names, non-empty unless `allow_empty`; `reserved` ones are
    refused with `reserved_hint`. The environment gives it comma-separated."""

    reserved: tuple[str, ...] = ()
    reserved_prefixes: tuple[str, ...] = ("__",)
    reserved_hint: str = ""
    allow_empty: bool = False

    def parse(self, value: object, key: str, ctx: Context) -> tuple[str, ...]:
        if not isinstance(value, list) or not (value or self.allow_empty):
            kind = "a list" if self.allow_empty else "a non-empty list"
            raise ConfigError(key, f"expected {kind} of label names such as [namespace, pod]")
        for i, name in enumerate(value):
            where = f"{key}[{i}]"
            if not isinstance(name, str) or not _LABEL_NAME.fullmatch(name):
                raise ConfigError(where, f"expected a label name ([A-Za-z_][A-Za-z0-9_]*), got {name!r}")
            if name in self.reserved or name.startswith(self.reserved_prefixes):
                raise ConfigError(where, f"{name} is reserved{': ' + self.reserved_hint if self.reserved_hint else ''}")
        if len(set(value)) != len(value):
            raise ConfigError(key, "label names must be distinct")
        return tuple(value)

    def json_schema(self) -> JsonSchema:
        not_reserved: list[JsonSchema] = [{"enum": list(self.reserved)}] if self.reserved else []
        not_reserved += [{"pattern": "^" + re.escape(prefix)} for prefix in self.reserved_prefixes]
        item: JsonSchema = {"type": "string", "pattern": LABEL_NAME_PATTERN}
        if not_reserved:
            item["not"] = {"anyOf": not_reserved}
        return {"type": "array", "items": item, "uniqueItems": True, "minItems": 0 if self.allow_empty else 1}

    def from_env(self, text: str) -> object:
        return comma_list(text)


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

    def parse(self, value: object, key: str, ctx: Context) -> str:
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

    def json_schema(self) -> JsonSchema:
        return {"type": "string"}
