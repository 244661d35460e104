"""Configuration: YAML file + SPECWATCH_* environment + flags -> one frozen Config.

- nodes.py   Key, Section, Items: the building blocks of the table
- schema.py  every key once: kind, bounds, description, example, environment variable
- kinds.py   how each kind of value is parsed and described as JSON schema; ConfigError
- result.py  the typed, frozen dataclasses the rest of specwatch reads (defaults live here)
- env.py     the SPECWATCH_* overrides, derived from the schema
- parse.py   load / from_mapping: the schema walk plus the rules that span keys
- chart.py   writes the Helm chart's `config` JSON schema from the schema (`--check` for CI)
- docs.py    writes the README's annotated example config from the schema (`--check` for CI)
- generated.py  the rewrite / `--check` command line those two share

Every error is a ConfigError whose message starts with the dotted key at fault
(`targets[0].timeout: ...`), so the CLI can print one line and exit 2.
"""

from __future__ import annotations

from .. import units
from ..units import format_duration
from .kinds import ConfigError
from .parse import from_mapping, load, parse_prometheus
from .result import (
    AlertingConfig,
    Config,
    DecisionConfig,
    DraftConfig,
    HardwareConfig,
    LearningConfig,
    LogConfig,
    ModelConfig,
    PrometheusConfig,
    RouteConfig,
    TargetConfig,
)


def parse_duration(value: object, key: str) -> float:
    """units.parse_duration for config values and CLI flags: a bad value is a ConfigError (exit 2)."""
    try:
        return units.parse_duration(value, key)
    except units.UnitError as exc:
        raise ConfigError(exc.key, exc.reason) from None


def parse_size(value: object, key: str) -> int:
    """units.parse_size, raising ConfigError."""
    try:
        return units.parse_size(value, key)
    except units.UnitError as exc:
        raise ConfigError(exc.key, exc.reason) from None


__all__ = [
    "AlertingConfig",
    "Config",
    "ConfigError",
    "DecisionConfig",
    "DraftConfig",
    "HardwareConfig",
    "LearningConfig",
    "LogConfig",
    "ModelConfig",
    "PrometheusConfig",
    "RouteConfig",
    "TargetConfig",
    "format_duration",
    "from_mapping",
    "load",
    "parse_duration",
    "parse_prometheus",
    "parse_size",
]
