"""Kinds of mapping values: a string map (route matchers, HTTP request headers with "${ENV}"
references) and vLLM's --speculative-config, checked as vLLM checks it."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from specwatch.config.kinds import ConfigError, Context, JsonSchema, Kind
from specwatch.engines.vllm_schedule import SpeculativeConfigError, parse_speculative_config

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

    def from_env(self, text: str) -> object:
        """A JSON object ({"X-Scope-OrgID": "tenant-a"}); anything else is refused here, where the
        error can say that JSON is expected (the variable's name is added by the caller)."""
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            raise ConfigError("", """expected a JSON object, e.g. '{"X-Scope-OrgID": "tenant-a"}'""")
        return value


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
class SpeculativeConfig(Kind):
    """vLLM's `--speculative-config`: a mapping, or the same JSON as a string; checked as vLLM
    checks it (num_speculative_tokens, the num_speculative_tokens_per_batch_size schedule)."""

    def parse(self, value: object, key: str, ctx: Context) -> JsonSchema:
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


@dataclass(frozen=True)
class Shard(Kind):
    """{index, total} of a fleet shard -> (index, total), 0 <= index < total."""

    def parse(self, value: object, key: str, ctx: Context) -> tuple[int, int]:
        if not isinstance(value, Mapping):
            raise ConfigError(key, f"expected a mapping {{index, total}}, got {type(value).__name__}")
        for name in value:
            if name not in ("index", "total"):
                raise ConfigError(f"{key}.{name}", "allowed: index, total")
        numbers: dict[str, int] = {}
        for name in ("index", "total"):
            item = value.get(name)
            if isinstance(item, str) and item.strip().isdigit():
                item = int(item)
            if isinstance(item, bool) or not isinstance(item, int):
                raise ConfigError(f"{key}.{name}", f"expected an integer, got {item!r}")
            numbers[name] = item
        if numbers["total"] < 1:
            raise ConfigError(f"{key}.total", f"must be >= 1, got {numbers['total']}")
        if not 0 <= numbers["index"] < numbers["total"]:
            raise ConfigError(f"{key}.index", f"must be in 0..{numbers['total'] - 1}, got {numbers['index']}")
        return numbers["index"], numbers["total"]

    def json_schema(self) -> JsonSchema:
        return {
            "type": "object",
            "properties": {"index": {"type": "integer", "minimum": 0}, "total": {"type": "integer", "minimum": 1}},
            "required": ["index", "total"],
            "additionalProperties": False,
        }

    def from_env(self, text: str) -> object:
        """index/total, or <StatefulSet pod name>/total (the index is the ordinal at the name's
        end, as the chart's shards set it), or a JSON object."""
        if text.strip().startswith("{"):
            try:
                return json.loads(text)
            except ValueError:
                return text
        index, _, total = text.rpartition("/")
        ordinal = re.search(r"-([0-9]+)$", index.strip())
        return {"index": ordinal.group(1) if ordinal else index.strip(), "total": total.strip()}


@dataclass(frozen=True)
class FlagOrAuto(Kind):
    """true, false, or "auto" (None: decided at run time)."""

    def parse(self, value: object, key: str, ctx: Context) -> bool | None:
        if value == "auto":
            return None
        if not isinstance(value, bool):
            raise ConfigError(key, "expected true, false or auto")
        return value

    def json_schema(self) -> JsonSchema:
        return {"enum": [True, False, "auto"]}

    def from_env(self, text: str) -> object:
        lowered = text.strip().lower()
        return {"true": True, "1": True, "false": False, "0": False, "auto": "auto"}.get(lowered, text)
