"""The Helm chart's own parameters, read from helm/specwatch/values.yaml: each key's value and the
description written above it, helm-docs style. values.yaml is the one home of both; the README's
parameter table and the descriptions of values.schema.json are generated from them.

A description starts with a `# -- ` comment line and goes on over the `#` lines below it, up to the
key. `# @default -- TEXT` as its last line shows TEXT instead of the value (a long mapping). A key
with a description is one parameter, its whole value the default; a mapping without one is a group
whose keys are the parameters. Any other key without a description is an error: every parameter
has a row.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

VALUES = Path(__file__).resolve().parent.parent / "helm" / "specwatch" / "values.yaml"
#: values documented elsewhere: `config` (the exporter's config, from config/result.py).
ELSEWHERE = ("config",)

_KEY = re.compile(r"^(?P<indent> *)(?P<name>[A-Za-z_][A-Za-z0-9_.-]*):(?: |$)")
_COMMENT = re.compile(r"^ *#(?: (?P<text>.*))?$")
_DEFAULT = re.compile(r"^@default -- (?P<text>.+)$")


@dataclass(frozen=True)
class Parameter:
    """One documented value: its dotted path, its default as written in the table, its description."""

    path: str
    default: str
    doc: str


class UndocumentedValue(ValueError):
    pass


@dataclass(frozen=True)
class _Comment:
    doc: str
    default: str | None


def _comments(text: str) -> dict[str, _Comment]:
    """The `# --` description above each key, by dotted path."""
    found: dict[str, _Comment] = {}
    stack: list[tuple[int, str]] = []
    block: list[str] | None = None  # the lines of a `# --` description being read
    for line in text.splitlines():
        comment = _COMMENT.match(line)
        if comment:
            body = (comment.group("text") or "").strip()
            if body.startswith("-- "):
                block = [body[3:]]
            elif block is not None:
                block.append(body)
            continue
        key = _KEY.match(line)
        if key is None:
            block = None  # a blank line or a list item ends a description
            continue
        indent = len(key.group("indent"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key.group("name")))
        if block is not None:
            default = _DEFAULT.match(block[-1])
            lines = block[:-1] if default else block
            doc = " ".join(" ".join(part.split()) for part in lines if part)
            path = ".".join(name for _, name in stack)
            found[path] = _Comment(doc, default.group("text") if default else None)
        block = None
    return found


def default_text(value: object) -> str:
    """A value as the table shows it: YAML flow style, `""` for an empty or non-plain string."""
    if isinstance(value, str):
        plain = value and yaml.safe_load(value) == value and value.strip() == value
        return value if plain else json.dumps(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {default_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(default_text(v) for v in value) + "]"
    raise TypeError(f"unexpected value {value!r}")


def parameters(text: str, skip: tuple[str, ...] = ELSEWHERE) -> Iterator[Parameter]:
    """Every parameter of a values.yaml text, in file order; UndocumentedValue names a key that is
    neither described nor a group of described keys."""
    values = yaml.safe_load(text)
    comments = _comments(text)

    def walk(node: dict[str, Any], prefix: str) -> Iterator[Parameter]:
        for name, value in node.items():
            path = f"{prefix}{name}"
            if path in skip:
                continue
            comment = comments.get(path)
            if comment is not None:
                default = comment.default if comment.default is not None else default_text(value)
                yield Parameter(path, default, comment.doc)
            elif isinstance(value, dict) and value:
                yield from walk(value, f"{path}.")
            else:
                raise UndocumentedValue(f"values.yaml: {path} has no `# --` description")

    return walk(values, "")


def described(text: str) -> dict[str, str]:
    """The description of every parameter, by dotted path (config's keys included)."""
    return {path: comment.doc for path, comment in _comments(text).items()}
