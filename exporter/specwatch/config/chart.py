"""Write the Helm chart's `config` JSON schema from the config schema (config/schema.py).

Only the `properties.config` member of helm/specwatch/values.schema.json is replaced; every other
byte of the file is left as it is (the rest of the chart schema is written by hand).

    python -m specwatch.config.chart helm/specwatch/values.schema.json           # rewrite
    python -m specwatch.config.chart helm/specwatch/values.schema.json --check   # exit 1 on drift (CI)

Chart-specific: `listen` is left out (the chart sets it from containerPort), and top-level empty
values ("" / [] / {}) are accepted because the chart's template omits them so the exporter's
defaults apply.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..units import format_duration
from .kinds import Duration, DurationList, HoldTime, Size
from .nodes import Items, Key, Node, Section, default_of
from .schema import SCHEMA

DESCRIPTION = (
    "specwatch config file; listen comes from containerPort. Generated from "
    "exporter/specwatch/config/schema.py by `python -m specwatch.config.chart`: do not edit."
)


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    kind = schema.get("type")
    if isinstance(kind, list):
        schema["type"] = [*kind, "null"]
    elif kind is not None:
        schema["type"] = [kind, "null"]
    if "enum" in schema:
        schema["enum"] = [*schema["enum"], None]
    return schema


def _default_text(key: Key, value: Any) -> str:
    if key.default_doc:
        return key.default_doc
    if value is None or value == {}:
        return ""
    if isinstance(key.kind, Duration) or (isinstance(key.kind, HoldTime) and isinstance(value, float)):
        return format_duration(value)
    if isinstance(key.kind, DurationList):
        return "[" + ", ".join(format_duration(v) for v in value) + "]"
    if isinstance(key.kind, Size) and value % 2**20 == 0:
        return f"{value // 2**20}MiB"
    if isinstance(value, tuple):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _describe(doc: str, default: str) -> str:
    return f"{doc} (default: {default})" if default else doc


def node_schema(section: Section, node: Node) -> dict[str, Any]:
    if isinstance(node, Key):
        schema = node.kind.json_schema()
        if node.nullable:
            schema = _nullable(schema)
        return {**schema, "description": _describe(node.doc, _default_text(node, default_of(section, node)))}
    if isinstance(node, Items):
        schema = {"type": "array", "items": section_schema(node.item)}
        if node.min_items:
            schema["minItems"] = node.min_items
        return {**schema, "description": _describe(node.doc, node.default_doc)}
    schema = section_schema(node)
    return _nullable(schema) if node.nullable else schema


def section_schema(section: Section, *, chart: bool = False) -> dict[str, Any]:
    members = [node for node in section.keys if not (isinstance(node, Key) and chart and not node.chart)]
    schema: dict[str, Any] = {
        "description": section.doc,
        "type": "object",
        "additionalProperties": False,
        "properties": {node.name: node_schema(section, node) for node in members},
    }
    required = [node.name for node in members if isinstance(node, Key) and node.required]
    if required:
        schema["required"] = required
    if section.shorthand:
        shorthand = next(n for n in section.keys if n.name == section.shorthand)
        assert isinstance(shorthand, Key)
        short = {**shorthand.kind.json_schema(), "description": f"{shorthand.name}, as a bare string"}
        description = schema.pop("description")
        return {"description": description, "anyOf": [short, schema]}
    return schema


def _accept_empty(schema: dict[str, Any]) -> dict[str, Any]:
    """The chart template drops empty top-level values: let the schema accept them too."""
    schema.pop("minItems", None)
    for option in schema.get("anyOf", ()):
        if "enum" in option:
            option["enum"] = [*option["enum"], ""]
    if "required" in schema:  # an optional section given as {} is left out, so it stays off
        description = schema.pop("description")
        return {"description": description, "anyOf": [{"type": "object", "maxProperties": 0}, schema]}
    return schema


def chart_config_schema() -> dict[str, Any]:
    schema = section_schema(SCHEMA, chart=True)
    schema["description"] = DESCRIPTION
    schema["properties"] = {name: _accept_empty(value) for name, value in schema["properties"].items()}
    return schema


# The `config` member of the top-level `properties` (json.dumps indent=2 puts it at 4 spaces).
_MEMBER = re.compile(r'^    "config": ', re.MULTILINE)


def render(text: str) -> str:
    """text (a values.schema.json) with its properties.config replaced by the generated schema."""
    document = json.loads(text)
    matches = [m for m in _MEMBER.finditer(text)]
    decoder = json.JSONDecoder()
    for match in matches:
        value, end = decoder.raw_decode(text, match.end())
        if value == document.get("properties", {}).get("config"):
            body = json.dumps(chart_config_schema(), indent=2, ensure_ascii=False).replace("\n", "\n    ")
            return text[: match.end()] + body + text[end:]
    raise ValueError('no top-level "properties" -> "config" member found at 4-space indent')


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specwatch.config.chart", description=__doc__.splitlines()[0])
    parser.add_argument("schema", type=Path, help="the chart's values.schema.json")
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs from the generated schema")
    args = parser.parse_args(argv)
    current = args.schema.read_text(encoding="utf-8")
    wanted = render(current)
    if args.check:
        if wanted != current:
            print(
                f"{args.schema}: the config schema is out of date; run python -m specwatch.config.chart {args.schema}",
                file=sys.stderr,
            )
            return 1
        return 0
    if wanted != current:
        args.schema.write_text(wanted, encoding="utf-8")
        print(f"wrote {args.schema}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
