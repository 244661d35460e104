"""Config loading: YAML file, then SPECWATCH_* environment, then flag overrides -> one frozen Config.

Each value is checked by walking the schema (declared in config/result.py); the rules that span keys (windows
against poll_interval, target timeouts, route targets, unique names, the cost model) follow here.
Every error is a ConfigError naming the dotted key, so the CLI prints one line and exits 2.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from specwatch.base.units import format_duration
from specwatch.config import yamlread
from specwatch.config.cost_model import cost_model_from_config
from specwatch.config.env import apply_env, named_by_environment
from specwatch.config.kinds import ConfigError, Context, error_from
from specwatch.config.nodes import FROM_RESULT, Items, Key, Section, result_fields
from specwatch.config.result import (
    SCHEMA,
    Config,
    PrometheusConfig,
    ReadbackConfig,
    RouteConfig,
    TargetConfig,
)


def _where(parent: str, name: str) -> str:
    return f"{parent}.{name}" if parent else name


def _check_keys(raw: Mapping[str, Any], section: Section, where: str) -> None:
    allowed = {node.name for node in section.keys}
    for key in raw:
        if key not in allowed:
            import difflib  # only to name a near key in the error

            near = difflib.get_close_matches(str(key), sorted(allowed), n=1, cutoff=0.75)
            hint = f"did you mean {near[0]}? " if near else ""
            raise ConfigError(_where(where, str(key)), f"unknown key ({hint}allowed: {', '.join(sorted(allowed))})")


def parse_section(section: Section, raw: Any, where: str, ctx: Context) -> dict[str, Any]:
    """Validate one mapping against its section: the parsed values by result field name.

    Absent keys (and null for nullable keys) are left out, so the dataclass default applies,
    unless the key states its own default. Nested sections come back as dataclasses; lists as
    lists of dicts and optional sections as dicts (their defaults depend on other keys; _build
    finishes them)."""
    shorthand_key = None
    if raw is None:
        raw = {}
    elif isinstance(raw, str) and section.shorthand:
        raw, shorthand_key = {section.shorthand: raw}, where
    if not isinstance(raw, Mapping):
        raise ConfigError(where or "config", f"expected a mapping, got {type(raw).__name__}")
    _check_keys(raw, section, where)
    values: dict[str, Any] = {}
    for node in section.keys:
        key = shorthand_key or _where(where, node.name)
        value = raw.get(node.name)
        if value is None and (node.name not in raw or getattr(node, "nullable", False)):
            if getattr(node, "required", False):
                raise ConfigError(key, "required")
            if isinstance(node, Key) and node.default is not FROM_RESULT:
                values[node.name] = node.default
            continue
        if isinstance(node, Key):
            parsed = node.kind.parse(value, key, ctx)
            names = result_fields(node)
            values.update(zip(names, parsed, strict=False) if len(names) > 1 else ((node.name, parsed),))
        elif isinstance(node, Section):
            parsed_section = parse_section(node, value, key, ctx)
            values[node.name] = parsed_section if node.nullable else node.result(**parsed_section)
        else:
            values[node.name] = _parse_items(node, value, key, ctx)
    return values


def _parse_items(node: Items, raw: Any, key: str, ctx: Context) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or len(raw) < node.min_items:
        raise ConfigError(key, "expected a non-empty list" if node.min_items else "expected a list")
    return [parse_section(node.item, item, f"{key}[{i}]", ctx) for i, item in enumerate(raw)]


def from_mapping(
    raw: Mapping[str, Any] | None,
    *,
    base_dir: str = ".",
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Build a validated Config from a parsed YAML mapping, SPECWATCH_* variables and flag overrides
    (flags win over the environment, which wins over the file)."""
    environ = os.environ if environ is None else environ
    if raw is not None and not isinstance(raw, Mapping):
        raise ConfigError("config", f"expected a mapping, got {type(raw).__name__}")
    raw = dict(raw or {})
    _check_keys(raw, SCHEMA, "")
    raw = apply_env(raw, environ)
    for key, value in (overrides or {}).items():
        if value is not None:
            raw[key] = value
    try:
        values = parse_section(SCHEMA, raw, "", Context(base_dir=base_dir, environ=environ))
        _check_model_source(values.get("model"))
        config = _build({**values, "stated": stated_keys(raw)})
        _check_cost_model(config)
    except ConfigError as exc:
        # A value the user set in the environment is reported under the variable's name.
        raise named_by_environment(exc, environ, overrides or {}) from None
    return config


def _check_model_source(model: object) -> None:
    """One source of the target's size: a preset, a config.json or a parameter count, not several
    (the cost model would silently prefer one)."""
    given = [name for name in ("preset", "config_json", "params") if getattr(model, name, None) is not None]
    if len(given) > 1:
        raise ConfigError(
            "model", f"give one of model.preset, model.config_json or model.params, not {' and '.join(given)}"
        )


def stated_keys(raw: Mapping[str, Any]) -> frozenset[str]:
    """The top-level keys given a value and, in a section, its keys (a bare string: the shorthand's)."""
    shorthands = {n.name: n.shorthand for n in SCHEMA.keys if isinstance(n, Section) and n.shorthand}
    out = set()
    for key, value in raw.items():
        if value is None:
            continue
        out.add(key)
        if isinstance(value, Mapping):
            out.update(f"{key}.{sub}" for sub, v in value.items() if v is not None)
        elif isinstance(value, str) and key in shorthands:
            out.add(f"{key}.{shorthands[key]}")
    return frozenset(out)


def parse_prometheus(raw: Any, *, environ: Mapping[str, str] | None = None, base_dir: str = ".") -> PrometheusConfig:
    """The `prometheus:` section alone (tests, tools): the rules that span keys, such as the
    timeout's default below poll_interval, apply only through load / from_mapping."""
    if raw is None:
        raise ConfigError("prometheus", "expected a mapping with at least url")
    ctx = Context(base_dir=base_dir, environ=os.environ if environ is None else environ)
    section = next(node for node in SCHEMA.keys if isinstance(node, Section) and node.name == "prometheus")
    values = parse_section(section, raw, "prometheus", ctx)
    _check_authorization(values)
    _check_canary(values)
    _check_deployment(values)
    return PrometheusConfig(**values)


def _check_canary(values: Mapping[str, Any]) -> None:
    """The canary is picked among replicas: by their labels and the model they serve."""
    allowed = (*values.get("replica_labels", PrometheusConfig.replica_labels), "model_name")
    for name in values.get("canary") or {}:
        if name not in allowed:
            raise ConfigError(f"prometheus.canary.{name}", f"not a replica label; allowed: {', '.join(allowed)}")


def _check_deployment(values: Mapping[str, Any]) -> None:
    """A deployment is a set of replicas: its labels are among theirs (another label reads "")."""
    replica = values.get("replica_labels", PrometheusConfig.replica_labels)
    for i, name in enumerate(values.get("deployment_labels") or ()):
        if name not in replica:
            raise ConfigError(
                f"prometheus.deployment_labels[{i}]",
                f"{name} is not one of prometheus.replica_labels ({', '.join(replica)})",
            )


def _check_authorization(values: Mapping[str, Any], section: str = "prometheus") -> None:
    names = {name.lower() for name in values.get("headers", {})}
    if values.get("bearer_token_file") is not None and "authorization" in names:
        raise ConfigError(f"{section}.bearer_token_file", "give it or headers.Authorization, not both")


def _build_prometheus(values: dict[str, Any], poll_interval: float) -> PrometheusConfig:
    """Fleet mode: nothing is polled but Prometheus, so targets and route targets do not apply."""
    if "targets" in values:
        raise ConfigError(
            "targets", "not used with prometheus: (fleet mode reads every vLLM from Prometheus); remove one of them"
        )
    for i, route in enumerate(values.get("routes") or []):
        if "target" in route:
            raise ConfigError(
                f"routes[{i}].target", "not used with prometheus: (a route applies to every replica); remove it"
            )
    section = values["prometheus"]
    _check_authorization(section)
    _check_canary(section)
    _check_deployment(section)
    timeout = section.get("timeout")
    if timeout is None:
        # As for targets: a fifth of the interval free, so queries never overlap the next poll.
        timeout = min(PrometheusConfig.timeout, 0.8 * poll_interval)
    elif timeout >= poll_interval:
        raise ConfigError(
            "prometheus.timeout",
            f"must be shorter than poll_interval ({format_duration(poll_interval)}) so queries never overlap",
        )
    scrape_interval = section.get("scrape_interval")
    if scrape_interval is not None:
        for i, window in enumerate(values.get("windows", Config.windows)):
            # A window must hold two samples of each replica.
            if window < 2 * scrape_interval:
                raise ConfigError(
                    f"windows[{i}]",
                    f"must be at least 2 x prometheus.scrape_interval ({format_duration(2 * scrape_interval)})",
                )
    return PrometheusConfig(**{**section, "timeout": timeout})


def _check_evaluation_interval(values: dict[str, Any], poll_interval: float) -> None:
    """evaluation_interval: sidecar mode only, no shorter than a poll, and each window evaluated at
    least twice over its width."""
    evaluation_interval = values.get("evaluation_interval")
    if evaluation_interval is None:
        return
    if values.get("prometheus") is not None:
        raise ConfigError(
            "evaluation_interval", "not used with prometheus: (fleet mode evaluates at each poll); remove it"
        )
    if evaluation_interval < poll_interval:
        raise ConfigError("evaluation_interval", f"must be at least poll_interval ({format_duration(poll_interval)})")
    for i, window in enumerate(values.get("windows", Config.windows)):
        if window < 2 * evaluation_interval:
            raise ConfigError(
                f"windows[{i}]",
                f"must be at least 2 x evaluation_interval ({format_duration(2 * evaluation_interval)})",
            )


def _build(values: dict[str, Any]) -> Config:
    """The rules that span keys, then the dataclass."""
    poll_interval = values.get("poll_interval", Config.poll_interval)
    _check_evaluation_interval(values, poll_interval)
    for i, window in enumerate(values.get("windows", ())):
        # A ratio needs two snapshots, and a failed poll should not empty the window.
        if window < 2 * poll_interval:
            raise ConfigError(
                f"windows[{i}]", f"must be at least 2 x poll_interval ({format_duration(2 * poll_interval)})"
            )
    prometheus = None
    if values.get("prometheus") is not None:
        prometheus = _build_prometheus(values, poll_interval)
        targets: tuple[TargetConfig, ...] = ()
        routes = [RouteConfig(**{**route, "target": ""}) for route in values.get("routes") or []]
    else:
        targets = _build_targets(values, poll_interval)
        routes = _build_routes(values, [t.name for t in targets])
    if len({r.name for r in routes}) != len(routes):
        raise ConfigError("routes", "names must be unique")
    readback = values.get("readback")
    if readback is not None:
        if prometheus is not None:
            raise ConfigError("readback", "not used with prometheus: (fleet mode grades rollouts itself); remove it")
        _check_authorization(readback, "readback")
        values = {**values, "readback": ReadbackConfig(**readback)}

    hardware = values.get("hardware")
    if (
        hardware is not None
        and hardware.preset is None
        and (hardware.bandwidth_bytes_per_second is None or hardware.flops is None)
    ):
        raise ConfigError("hardware", "give a preset or both bandwidth_bytes_per_second and flops")
    return Config(**{**values, "targets": targets, "routes": tuple(routes), "prometheus": prometheus})


def _build_targets(values: dict[str, Any], poll_interval: float) -> tuple[TargetConfig, ...]:
    # The default deadline leaves a fifth of the interval free, so polls never overlap.
    default_timeout = min(TargetConfig.timeout, 0.8 * poll_interval)
    targets = tuple(
        TargetConfig(**{"name": "vllm" if i == 0 else f"target{i}", "timeout": default_timeout, **t})
        for i, t in enumerate(values.get("targets") or [{}])
    )
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise ConfigError("targets", "names must be unique")
    for i, target in enumerate(targets):
        if target.timeout >= poll_interval:
            raise ConfigError(
                f"targets[{i}].timeout",
                f"must be shorter than poll_interval ({format_duration(poll_interval)}) so polls never overlap",
            )
    return targets


def _build_routes(values: dict[str, Any], names: list[str]) -> list[RouteConfig]:
    routes = []
    for i, route in enumerate(values.get("routes") or []):
        target = route.get("target", names[0] if len(names) == 1 else None)
        if target not in names:
            raise ConfigError(
                f"routes[{i}].target", f"{target!r} is not a configured target ({', '.join(sorted(names))})"
            )
        routes.append(RouteConfig(**{**route, "target": target}))
    for i, route in enumerate(routes):
        # A route without match takes every series of its target: alone that is a catch-all (on
        # purpose); beside other routes of the same target it would take their series too.
        if not route.match and sum(r.target == route.target for r in routes) > 1:
            raise ConfigError(
                f"routes[{i}].match",
                "required when its target has several routes (without one a route takes every series)",
            )
    return routes


def _check_cost_model(config: Config) -> None:
    """Build the cost model once at load: a model or hardware it cannot use is a config error too."""

    try:
        cost_model_from_config(config)
    except (ValueError, KeyError, TypeError, ZeroDivisionError) as exc:
        raise error_from(exc, "model.config_json" if config.model.config_json else "model") from None


def load(
    path: str | None, *, environ: Mapping[str, str] | None = None, overrides: Mapping[str, Any] | None = None
) -> Config:
    """Load a YAML file (or only defaults when path is None), then env, then flag overrides."""
    raw: dict[str, Any] = {}
    base_dir = "."
    if path is not None:
        try:
            with open(path, encoding="utf-8") as handle:
                loaded = yamlread.read(handle)
        except FileNotFoundError:
            raise ConfigError("config", f"file not found: {path}") from None
        except yamlread.YamlError as exc:
            raise ConfigError("config", f"{path} is not valid YAML: {exc}") from None
        except OSError as exc:
            raise ConfigError("config", f"cannot read {path}: {exc}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, Mapping):
            raise ConfigError("config", f"{path} must hold a mapping at the top level")
        raw = dict(loaded)
        base_dir = os.path.dirname(os.path.abspath(path))
    return from_mapping(raw, base_dir=base_dir, environ=environ, overrides=overrides)
