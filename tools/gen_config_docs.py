"""Write docs/configuration.md's annotated example config from the config declarations (config/result.py).

Only the lines between `<!-- config:begin -->` and `<!-- config:end -->` are replaced.

    python tools/gen_config_docs.py           # rewrite docs/configuration.md
    python tools/gen_config_docs.py --check   # exit 1 on drift (CI)
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from _generated import between, regenerate, unit_text

from specwatch.config.kinds import Choice, Number
from specwatch.config.nodes import Items, Key, Section, default_of
from specwatch.config.result import SCHEMA

BEGIN = "<!-- config:begin -->"
END = "<!-- config:end -->"
COMMENT_COLUMN = 32


def _scalar(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_scalar(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    text = str(value)
    if text[:1] in ":{[*&!|>%@`\"'" or ": " in text or " #" in text or any(c in text for c in "{}[],"):
        # Valid YAML to copy: single quotes when the text holds double quotes (a PromQL selector).
        return "'" + text.replace("'", "''") + "'" if '"' in text or "\\" in text else f'"{text}"'
    return text


def value_text(key: Key, value: object) -> str:
    if (text := unit_text(key.kind, value)) is not None:
        return text
    if isinstance(value, float):
        return f"{value:g}"
    return _scalar(value)


def rule_text(key: Key) -> str:
    kind = key.kind
    if isinstance(kind, Choice):
        return " | ".join(kind.values())
    if isinstance(kind, Number) and kind.maximum is not None and kind.minimum is not None:
        low, high = ("(" if kind.exclusive_minimum else "["), (")" if kind.exclusive_maximum else "]")
        return f"{low}{kind.minimum:g}, {kind.maximum:g}{high}"
    return ""


def _comment(key: Key, default: object, *, showing_example: bool = False) -> str:
    parts = [key.doc]
    rule = rule_text(key)
    if rule and len(rule) < 140:
        parts.append(rule)
    if key.default_doc:
        parts.append(f"default {key.default_doc}")
    elif showing_example and default not in (None, {}):
        parts.append(f"default {value_text(key, default)}")
    if not showing_example and default in (None, {}) and key.example is not None:
        parts.append(f"e.g. {value_text(key, key.example)}")
    return "; ".join(parts)


def _line(indent: str, text: str, comment: str) -> str:
    if not comment:
        return indent + text
    return f"{indent + text:<{COMMENT_COLUMN - 1}} # {comment}"


def _key_line(section: Section, key: Key, lead: str, example: bool = False, showcase: bool = False) -> str:
    default = default_of(section, key)
    if key.example is not None and (showcase or (example and default in (None, {}))):
        return _line(lead, f"{key.name}: {value_text(key, key.example)}", _comment(key, default, showing_example=True))
    return _line(lead, f"{key.name}: {value_text(key, default)}", _comment(key, default))


def _lines(section: Section, indent: str, first: str = "", example: bool = False, showcase: bool = False) -> list[str]:
    """showcase: every key shows its example (an optional section, printed commented out)."""
    out: list[str] = []
    for node in section.keys:
        lead = first if (first and not out) else indent
        if isinstance(node, Key):
            out.append(_key_line(section, node, lead, example, showcase))
        elif isinstance(node, Items):
            # A list with a default item shows that item; an empty one an example item.
            items_default = default_of(section, node)
            comment = f"{node.doc}; default {node.default_doc}" if node.default_doc else node.doc
            out.append(_line(lead, f"{node.name}:", comment))
            out.extend(_lines(node.item, indent + "    ", first=indent + "  - ", example=not items_default))
        elif node.shorthand:
            # hardware: h100-sxm, or the mapping whose keys follow as comments.
            shorthand = next(k for k in node.keys if k.name == node.shorthand)
            assert isinstance(shorthand, Key)
            value = value_text(shorthand, getattr(default_of(section, node), node.shorthand))
            out.append(_line(lead, f"{node.name}: {value}", f"{rule_text(shorthand)}; or a mapping:"))
            out.extend("# " + line for line in _lines(node, indent + "  "))
        elif node.nullable:
            # Off unless given: shown commented out (once), with an example value for every key.
            mark = "" if showcase else "# "
            out.append(mark + _line(lead, f"{node.name}:", f"{node.doc}; default null (off)"))
            out.extend(mark + line for line in _lines(node, indent + "  ", showcase=True))
        else:
            out.append(_line(lead, f"{node.name}:", node.doc))
            out.extend(_lines(node, indent + "  "))
    return out


def example_yaml() -> str:
    return "\n".join(["```yaml", *_lines(SCHEMA, ""), "```"])


def render(text: str) -> str:
    return between(text, BEGIN, END, example_yaml())


def main(argv: Sequence[str] | None = None) -> int:
    return regenerate(
        argv, script="gen_config_docs.py", default="docs/configuration.md", what="example config", render=render
    )


if __name__ == "__main__":
    sys.exit(main())
