"""Write the generated parts of helm/specwatch/values.schema.json: the `config` JSON schema from the
config declarations (config/result.py), and the description of every other chart value from its
`# --` comment in values.yaml (tools/_chart_values.py), their one home.

The rest (types, bounds, patterns, the shared definitions) is written by hand in the file and kept.

    python tools/gen_chart_schema.py           # rewrite helm/specwatch/values.schema.json
    python tools/gen_chart_schema.py --check   # exit 1 on drift (CI)

Chart-specific: `listen` is left out (the chart sets it from containerPort), and top-level empty
values ("" / [] / {}) are accepted because the chart's template omits them so the exporter's
defaults apply.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from _chart_values import ELSEWHERE, VALUES, described
from _generated import regenerate, unit_text

from specwatch.config.kinds import JsonSchema
from specwatch.config.nodes import Items, Key, Node, Section, default_of
from specwatch.config.result import SCHEMA

DESCRIPTION = (
    "specwatch config file; listen comes from containerPort. Generated from "
    "exporter/specwatch/config/result.py by `python tools/gen_chart_schema.py`: do not edit."
)


def _nullable(schema: JsonSchema) -> JsonSchema:
    kind = schema.get("type")
    if isinstance(kind, list):
        schema["type"] = [*kind, "null"]
    elif kind is not None:
        schema["type"] = [kind, "null"]
    enum = schema.get("enum")
    if isinstance(enum, list):
        schema["enum"] = [*enum, None]
    return schema


def _default_text(key: Key, value: object) -> str:
    if key.default_doc:
        return key.default_doc
    if value is None or value == {}:
        return ""
    if (text := unit_text(key.kind, value)) is not None:
        return text
    if isinstance(value, tuple):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _describe(doc: str, default: str) -> str:
    return f"{doc} (default: {default})" if default else doc


def node_schema(section: Section, node: Node) -> JsonSchema:
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


def section_schema(section: Section, *, chart: bool = False) -> JsonSchema:
    members = [node for node in section.keys if not (isinstance(node, Key) and chart and not node.chart)]
    schema: JsonSchema = {
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


def _accept_empty(schema: JsonSchema) -> JsonSchema:
    """The chart template drops empty top-level values: let the schema accept them too."""
    schema.pop("minItems", None)
    options = schema.get("anyOf")
    for option in options if isinstance(options, list) else ():
        enum = option.get("enum") if isinstance(option, dict) else None
        if isinstance(enum, list):
            option["enum"] = [*enum, ""]
    if "required" in schema:  # an optional section given as {} is left out, so it stays off
        description = schema.pop("description")
        return {"description": description, "anyOf": [{"type": "object", "maxProperties": 0}, schema]}
    return schema


def chart_config_schema() -> JsonSchema:
    schema = section_schema(SCHEMA, chart=True)
    schema["description"] = DESCRIPTION
    properties = schema["properties"]
    assert isinstance(properties, dict)  # section_schema always writes it
    schema["properties"] = {name: _accept_empty(value) for name, value in properties.items()}
    return schema


def describe_values(document: JsonSchema, docs: dict[str, str]) -> None:
    """Each chart value's description in `document` set from `docs` (values.yaml's, by dotted path),
    removed where values.yaml has none; ValueError names a described value the schema lacks."""

    def walk(node: JsonSchema, prefix: str) -> None:
        members = node.get("properties")
        for name, member in members.items() if isinstance(members, dict) else ():
            path = f"{prefix}{name}"
            if path in ELSEWHERE or not isinstance(member, dict):
                continue
            if path in docs:
                member["description"] = docs[path]
            else:
                member.pop("description", None)
            walk(member, f"{path}.")

    walk(document, "")
    for path in docs:
        node: object = document
        for name in path.split("."):
            members = node.get("properties") if isinstance(node, dict) else None
            node = members.get(name) if isinstance(members, dict) else None
        if node is None and path.split(".")[0] not in ELSEWHERE:
            raise ValueError(f"values.schema.json has no property {path}, which values.yaml describes")


def render(text: str, values: str | None = None) -> str:
    """text (a values.schema.json) with its generated parts replaced."""
    document = json.loads(text)
    document["properties"]["config"] = chart_config_schema()
    describe_values(document, described(VALUES.read_text(encoding="utf-8") if values is None else values))
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    return regenerate(
        argv,
        script="gen_chart_schema.py",
        default="helm/specwatch/values.schema.json",
        what="generated schema (config, descriptions)",
        render=render,
    )


if __name__ == "__main__":
    sys.exit(main())
