"""rules/*.yaml as the tests read them: the files, their groups and rules, the names they record and
alert on, and the metric selectors of a PromQL expression (promql_parser is imported when first
needed, so a test module can still skip without it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from support.paths import REPO

RULES_DIR = REPO / "rules"


def rule_files() -> list[Path]:
    return sorted(RULES_DIR.glob("*.yaml"))


def rule_groups() -> list[tuple[Path, dict[str, Any]]]:
    """(file, group) for every rule group of every rule file."""
    return [
        (path, group)
        for path in rule_files()
        for group in (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("groups", [])
    ]


def all_rules() -> list[dict[str, Any]]:
    return [rule for _, group in rule_groups() for rule in group.get("rules", [])]


def recorded_names() -> set[str]:
    return {rule["record"] for rule in all_rules() if "record" in rule}


def alert_names() -> set[str]:
    return {rule["alert"] for rule in all_rules() if "alert" in rule}


def selectors(expr: str) -> list[Any]:
    """Every vector selector (metric name and matchers) of a PromQL expression, in order."""
    import promql_parser

    found: list[Any] = []

    def visit(node: object) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            found.append(node)
        return True

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found
