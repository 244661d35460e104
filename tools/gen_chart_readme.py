"""Write the Helm chart README's two parameter tables: the chart's own values from values.yaml (each
key's `# --` description and value, tools/_chart_values.py) and the `config.*` keys from the config
declarations (config/result.py), one row per key the chart passes to the exporter, its default and
its rule.

Only the lines between `<!-- values-parameters:begin -->` and `<!-- values-parameters:end -->`, and
between `<!-- config-parameters:begin -->` and `<!-- config-parameters:end -->`, are replaced. A
values.yaml key without a description fails the run (one line naming it).

    python tools/gen_chart_readme.py           # rewrite helm/specwatch/README.md
    python tools/gen_chart_readme.py --check   # exit 1 on drift (CI)
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from dataclasses import replace

from _chart_values import VALUES, UndocumentedValue, parameters
from _generated import between, regenerate
from gen_config_docs import rule_text, value_text

from specwatch.config.nodes import FROM_RESULT, Items, Key, Section, default_of
from specwatch.config.result import SCHEMA

BEGIN, END = "<!-- config-parameters:begin -->", "<!-- config-parameters:end -->"
VALUES_BEGIN, VALUES_END = "<!-- values-parameters:begin -->", "<!-- values-parameters:end -->"
HEADER = ("| Key | Default | Description |", "| --- | --- | --- |")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _pipe(text: str) -> str:
    return text.replace("|", "\\|")


def _row(path: str, default: str, doc: str) -> str:
    return f"| `{path}` | {f'`{_cell(default)}`' if default else ''} | {_cell(doc)} |"


def _key_row(section: Section, key: Key, path: str) -> str:
    rule = rule_text(key)
    doc = f"{key.doc}; {'one of ' + rule.replace(' | ', ', ') if '|' in rule else 'in ' + rule}" if rule else key.doc
    if key.required:
        return _row(path, "", f"{doc}; required")
    if key.default_doc:
        return _row(path, "", f"{doc}; default {key.default_doc}")
    # The value of a chart left empty: the section's own default (hardware: its preset).
    default = default_of(section, replace(key, default=FROM_RESULT))
    return _row(path, value_text(key, default), doc)


def _rows(section: Section, prefix: str) -> Iterator[str]:
    for node in section.keys:
        path = f"{prefix}.{node.name}"
        if isinstance(node, Key):
            if node.chart:
                yield _key_row(section, node, path)
        elif isinstance(node, Items):
            doc = f"{node.doc}, each {node.item.doc}" + (f"; default {node.default_doc}" if node.default_doc else "")
            yield _row(path, "[]", doc)
            yield from _rows(node.item, f"{path}[]")
        else:
            if node.nullable:
                yield _row(path, "{}", f"{node.doc}; off unless given")
            elif node.shorthand:
                yield _row(path, "", f"{node.doc}; a bare string is its {node.shorthand}")
            yield from _rows(node, path)


def parameter_table() -> str:
    return "\n".join([*HEADER, *_rows(SCHEMA, "config")])


def values_table(values: str) -> str:
    """The chart's own parameters, from a values.yaml text (its `config` is the table below)."""
    # The description is Markdown already (backticks, <placeholders> in code): only the table's own
    # separator is escaped.
    rows = (f"| `{_pipe(p.path)}` | `{_pipe(p.default)}` | {_pipe(p.doc)} |" for p in parameters(values))
    return "\n".join([*HEADER, *rows])


def render(text: str, values: str | None = None) -> str:
    chart = values_table(VALUES.read_text(encoding="utf-8") if values is None else values)
    return between(between(text, VALUES_BEGIN, VALUES_END, chart), BEGIN, END, parameter_table())


def main(argv: Sequence[str] | None = None) -> int:
    try:
        values_table(VALUES.read_text(encoding="utf-8"))
    except UndocumentedValue as error:
        print(error, file=sys.stderr)
        return 2
    return regenerate(
        argv,
        script="gen_chart_readme.py",
        default="helm/specwatch/README.md",
        what="parameter table",
        render=render,
    )


if __name__ == "__main__":
    sys.exit(main())
