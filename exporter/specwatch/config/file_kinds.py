"""Kinds whose value names a file, relative to the config file: a JSON object (a model's
config.json), a model preset or its config.json, a step-time profile (YAML path or inline), a file
read later (a rotating token). Each read error is one ConfigError line naming the key."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO

from specwatch.config import yamlread
from specwatch.config.kinds import ConfigError, Context, JsonSchema, Kind, error_from
from specwatch.costmodel import Profile, parse_profile


def read_file(path: str, key: str, decode: Callable[[IO[str]], object], invalid: type[Exception]) -> object:
    """The decoded content of the file at `path`; a missing or unreadable file, or content `decode`
    refuses with `invalid`, is a ConfigError for `key`."""
    try:
        with open(path, encoding="utf-8") as handle:
            return decode(handle)
    except FileNotFoundError:
        raise ConfigError(key, f"file not found: {path}") from None
    except (OSError, invalid) as exc:
        raise ConfigError(key, f"cannot read {path}: {exc}") from None


@dataclass(frozen=True)
class JsonFile(Kind):
    """A path (relative to the config file) of a JSON object; parses to (path, object)."""

    def parse(self, value: object, key: str, ctx: Context) -> tuple[str, dict[str, object]]:
        path = os.path.join(ctx.base_dir, str(value))
        data = read_file(path, key, json.load, ValueError)
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
        path = None
        data = value
        if isinstance(value, str):
            path = os.path.join(ctx.base_dir, value)
            data = read_file(path, key, yamlread.read, yamlread.YamlError)
        try:
            return parse_profile(data), path
        except ValueError as exc:
            raise error_from(exc, key) from None

    def json_schema(self) -> JsonSchema:
        return {"type": ["string", "object", "array"]}


class ExistingFile(Kind):
    """A path (relative to the config file) of a regular file that is read later, e.g. a token that
    rotates; parses to the path."""

    def parse(self, value: object, key: str, ctx: Context) -> str:
        if not isinstance(value, str) or not value:
            raise ConfigError(key, f"expected a file path, got {value!r}")
        path = os.path.join(ctx.base_dir, value)
        if not os.path.isfile(path):
            raise ConfigError(key, f"file not found: {path}")
        return path

    def json_schema(self) -> JsonSchema:
        return {"type": "string", "minLength": 1}
