"""Configuration: YAML file + SPECWATCH_* environment + flags -> one frozen Config.

- result.py  the typed, frozen dataclasses the rest of specwatch reads, each key declared once as a
             field: kind, bounds, default, description, example, environment variable; SCHEMA
- nodes.py   setting / section / items (the declarations), and Key, Section, Items: the tree that
             schema_of reads from the dataclasses and the walkers below use
- kinds.py   how each kind of value is parsed and described as JSON schema: the base Kind,
             ConfigError, and the scalar kinds (durations, sizes, numbers, names, URLs, ...)
- mapping_kinds.py, file_kinds.py, label_kinds.py  the mapping kinds (string maps, HTTP headers,
             --speculative-config), the kinds naming a file, the Prometheus label kinds (fleet mode)
- env.py     the SPECWATCH_* overrides, derived from the declarations
- parse.py   load / from_mapping: the schema walk plus the rules that span keys
- yamlread.py  the config and profile files' YAML: the plain subset they are written in read
             without PyYAML, anything else by yaml.safe_load

The files generated from the declarations (the Helm chart's schema and README table,
docs/configuration.md) are written by tools/gen_*.py, outside the runtime package.

Every error is a ConfigError whose message starts with the dotted key at fault
(`targets[0].timeout: ...`), so the CLI can print one line and exit 2.
"""

from __future__ import annotations

from specwatch.base.units import format_duration
from specwatch.config.kinds import ConfigError, parse_duration, parse_size
from specwatch.config.parse import from_mapping, load, parse_prometheus
from specwatch.config.result import (
    AlertingConfig,
    Config,
    DecisionConfig,
    DraftConfig,
    HardwareConfig,
    LearningConfig,
    LogConfig,
    ModelConfig,
    PrometheusConfig,
    ReadbackConfig,
    RouteConfig,
    TargetConfig,
)

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
    "ReadbackConfig",
    "RouteConfig",
    "TargetConfig",
    "format_duration",
    "from_mapping",
    "load",
    "parse_duration",
    "parse_prometheus",
    "parse_size",
]
