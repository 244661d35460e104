"""The configuration schema: every key of the config file, written once. This module holds the
table's root (SCHEMA) and its small sections (decision, log, alerting); the sections of where vLLM
is read (targets, routes, prometheus) are in config/schema_sources.py, those of the cost model
(hardware, model, draft, learning) in config/schema_costmodel.py.

Each key states its kind (type, bounds, choices), its description, an example, whether YAML null
means "not set", and its environment variable. From this one table come:

- validation (config/parse.py walks it; errors name the dotted key, the CLI exits 2),
- the environment overrides (config/env.py: SPECWATCH_<KEY>, nested with a double underscore),
- the `config` schema of the Helm chart (config/chart.py writes it into values.schema.json;
  `--check` fails on drift).

Defaults live in the result dataclasses (config/result.py), whose field names equal the key names.

How to add a key: add a typed field with its default to the dataclass in result.py, and one `Key`
line to its section (here or in one of the two modules above); regenerate the chart schema
(`python -m specwatch.config.chart`) and the README example (`python -m specwatch.config.docs`). A new
section is a dataclass plus a `Section(...)` entry (and a field of that type in `Config`); a rule
that spans keys goes into config/parse.py (`_build`).

Why a table and not pydantic: docs/design-notes.md ("The config schema is a table").
"""

from __future__ import annotations

from collections.abc import Callable

from specwatch.config import result
from specwatch.config.file_kinds import StepTimeProfile
from specwatch.config.kinds import Choice, Duration, DurationList, HoldTime, Listen, Number
from specwatch.config.nodes import Items, Key, Section
from specwatch.config.schema_costmodel import DRAFT, ENGINE, HARDWARE, LEARNING, MODEL
from specwatch.config.schema_sources import PROMETHEUS, READBACK, ROUTE, TARGET


def _fixed(*values: str) -> Callable[[], tuple[str, ...]]:
    return lambda: values


DECISION = Section(
    "decision",
    result.DecisionConfig,
    doc="when a verdict is given and changed",
    keys=(
        Key(
            "min_drafts",
            Number(minimum=1, integer=True),
            "fewer drafts in a window: insufficient_data, ratio gauges absent",
            example=1000,
        ),
        Key("margin", Number(minimum=0, maximum=0.5), "hysteresis band around the break-even", example=0.05),
        Key(
            "confidence",
            Number(minimum=0.5, maximum=0.999, exclusive_minimum=True),
            "confidence level of the predicted speedup's interval; keep, shorten and disable are given "
            "only when it is clear of 1, otherwise the verdict is undecided",
            example=0.95,
        ),
        Key(
            "hold",
            HoldTime(),
            "how long a new verdict must stay the candidate before it takes effect; "
            "a bare integer counts polls (N polls = (N-1) x poll_interval)",
            example="1m",
        ),
    ),
)


LOG = Section(
    "log",
    result.LogConfig,
    doc="structured logs on stderr",
    keys=(
        Key("format", Choice(_fixed("json", "console")), "log format", example="console"),
        Key("level", Choice(_fixed("debug", "info", "warning", "error")), "lowest level logged", example="debug"),
    ),
)

ALERTING = Section(
    "alerting",
    result.AlertingConfig,
    doc="what the alert rules (rules/, the chart's PrometheusRule) expect of the sidecar",
    keys=(
        Key(
            "window",
            Duration(),
            'the window the alert rules read (window="5m"); warned at start when not among windows; '
            "env also SPECWATCH_ALERT_WINDOW",
            example="15m",
            env_aliases=("SPECWATCH_ALERT_WINDOW",),
        ),
    ),
)


SCHEMA = Section(
    "",
    result.Config,
    doc="specwatch config file",
    keys=(
        Key("listen", Listen(), "exporter HTTP address [host]:port", example="127.0.0.1:9100", chart=False),
        Key("poll_interval", Duration(), "time between polls of each target", example="2s"),
        Key(
            "windows",
            DurationList(),
            "rolling windows, each at least 2 x poll_interval; env: comma-separated",
            example=["30s", "2m"],
        ),
        Items(
            "targets",
            TARGET,
            "vLLM /metrics endpoints",
            min_items=1,
            default_doc="one target vllm at http://127.0.0.1:8000/metrics",
        ),
        Items(
            "routes",
            ROUTE,
            "named traffic classes",
            default_doc="one route per (target, model_name), named after model_name",
        ),
        HARDWARE,
        Key("tensor_parallel", Number(minimum=1, maximum=64, integer=True), "GPUs per model replica", example=4),
        MODEL,
        DRAFT,
        ENGINE,
        Key(
            "profile",
            StepTimeProfile(),
            "measured step-time profile (YAML path or inline) replacing the roofline (docs/costmodel.md)",
            example="profile.yaml",
            nullable=True,
            fields=("profile", "profile_path"),
        ),
        DECISION,
        LEARNING,
        LOG,
        ALERTING,
        Key(
            "route_ttl_polls",
            Number(minimum=1, integer=True),
            "routes unseen for this many polls are dropped",
            example=120,
        ),
        Key(
            "shutdown_drain",
            Duration(allow_zero=True),
            "sidecar mode: after SIGTERM keep polling (every 0.5s) and serving while vLLM still answers with "
            "metrics; exit at every target's first refused connection or non-metrics answer, or after this "
            "long, whichever comes first; keep it 5s below the pod's terminationGracePeriodSeconds (the chart "
            "derives it); 0s exits at once",
            example="20s",
        ),
        PROMETHEUS,
        READBACK,
    ),
)
