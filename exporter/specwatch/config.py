"""Configuration: YAML file + SPECWATCH_* environment + flags -> one frozen Config.

Every error is a ConfigError whose message starts with the dotted key at fault
(`targets[0].timeout: ...`), so the CLI can print one line and exit 2.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field, replace
from typing import Any, Mapping
from urllib.parse import urlsplit

import yaml


class ConfigError(ValueError):
    """A bad configuration value; the message names the key."""


_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|KiB|MiB|GiB)?\s*$")
_SIZE_UNITS = {None: 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9,
               "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
_NAME_RE = re.compile(r"^[A-Za-z0-9_.:/-]{1,128}$")

DTYPES = ("bf16", "fp16", "fp8", "int8", "int4")


def parse_duration(value: Any, key: str) -> float:
    """'500ms' | '5s' | '1m' | '2h' (or a bare number of seconds) -> seconds > 0."""
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected a duration like 5s, got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        match = _DURATION_RE.match(str(value))
        if not match:
            raise ConfigError(f"{key}: expected a duration like 500ms, 5s, 1m or 2h, got {value!r}")
        seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    if not seconds > 0:
        raise ConfigError(f"{key}: must be greater than 0, got {value!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """Inverse of parse_duration for the window label: 60 -> '1m', 300 -> '5m', 30 -> '30s'."""
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size and abs(seconds / size - round(seconds / size)) < 1e-9:
            return f"{int(round(seconds / size))}{unit}"
    return f"{int(round(seconds * 1000))}ms"


def parse_size(value: Any, key: str) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected a size like 16MiB, got {value!r}")
    if isinstance(value, int):
        size = value
    else:
        match = _SIZE_RE.match(str(value))
        if not match:
            raise ConfigError(f"{key}: expected a size like 16MiB or 500KB, got {value!r}")
        size = int(float(match.group(1)) * _SIZE_UNITS[match.group(2)])
    if size <= 0:
        raise ConfigError(f"{key}: must be greater than 0, got {value!r}")
    return size


@dataclass(frozen=True)
class TargetConfig:
    name: str = "vllm"
    url: str = "http://127.0.0.1:8000/metrics"
    timeout: float = 2.0
    max_bytes: int = 16 * 2**20
    # Values may be "${ENV}"; resolved at load time and never logged.
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RouteConfig:
    name: str
    target: str
    match: Mapping[str, str] = field(default_factory=dict)
    baseline_itl_p99_seconds: float | None = None
    expect_speculation: bool = True


@dataclass(frozen=True)
class HardwareConfig:
    preset: str | None = "h100-sxm"
    bandwidth_bytes_per_second: float | None = None
    flops: float | None = None
    mbu: float | None = None
    mfu: float | None = None
    overhead_seconds: float | None = None


@dataclass(frozen=True)
class ModelConfig:
    preset: str | None = None
    config_json: str | None = None
    hf_config: Mapping[str, Any] | None = None
    params: float | None = None
    dtype: str = "bf16"
    layers: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    context_tokens: int = 2048


@dataclass(frozen=True)
class DraftConfig:
    method: str = "auto"
    cost_per_token: float | None = None
    k: int | None = None


@dataclass(frozen=True)
class DecisionConfig:
    min_drafts: int = 500
    margin: float = 0.02
    hold: int = 2


@dataclass(frozen=True)
class LogConfig:
    format: str = "json"
    level: str = "info"


@dataclass(frozen=True)
class Config:
    listen: str = ":9474"
    poll_interval: float = 5.0
    windows: tuple[float, ...] = (60.0, 300.0)
    targets: tuple[TargetConfig, ...] = (TargetConfig(),)
    routes: tuple[RouteConfig, ...] = ()
    hardware: HardwareConfig = HardwareConfig()
    tensor_parallel: int = 1
    model: ModelConfig = ModelConfig()
    draft: DraftConfig = DraftConfig()
    profile: Any = None
    profile_path: str | None = None
    decision: DecisionConfig = DecisionConfig()
    log: LogConfig = LogConfig()
    # Routes not seen for this many polls are dropped (label churn must not grow memory).
    route_ttl_polls: int = 60

    @property
    def window_labels(self) -> tuple[str, ...]:
        return tuple(format_duration(w) for w in self.windows)

    @property
    def listen_address(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        return (host or "0.0.0.0", int(port))


_TOP_KEYS = {"listen", "poll_interval", "windows", "targets", "routes", "hardware", "tensor_parallel",
             "model", "draft", "profile", "decision", "log", "route_ttl_polls"}


def _check_keys(raw: Mapping[str, Any], allowed: set[str], where: str) -> None:
    for key in raw:
        if key not in allowed:
            prefix = f"{where}." if where else ""
            hint = ", ".join(sorted(allowed))
            raise ConfigError(f"{prefix}{key}: unknown key (allowed: {hint})")


def _mapping(value: Any, key: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__}")
    return value


def _number(value: Any, key: str, *, minimum: float | None = None, maximum: float | None = None,
            integer: bool = False, exclusive_min: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        # Env overrides arrive as strings: accept numeric strings.
        try:
            value = float(value) if not integer else int(str(value))
        except (TypeError, ValueError, OverflowError):
            kind = "an integer" if integer else "a number"
            raise ConfigError(f"{key}: expected {kind}, got {value!r}") from None
    if not math.isfinite(value):
        raise ConfigError(f"{key}: must be a finite number, got {value!r}")
    if integer and (float(value) != int(value)):
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if minimum is not None and (value < minimum or (exclusive_min and value == minimum)):
        raise ConfigError(f"{key}: must be {'>' if exclusive_min else '>='} {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{key}: must be <= {maximum}, got {value!r}")
    return int(value) if integer else float(value)


def _name(value: Any, key: str) -> str:
    if not isinstance(value, str) or not _NAME_RE.match(value):
        raise ConfigError(f"{key}: expected a name of letters, digits and _.:/- (1-128 chars), got {value!r}")
    return value


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _resolve_env_refs(value: str, key: str, environ: Mapping[str, str]) -> str:
    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise ConfigError(f"{key}: environment variable {name} is not set")
        return environ[name]
    return _ENV_REF.sub(substitute, value)


def _parse_listen(value: Any) -> str:
    text = str(value)
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"listen: expected [host]:port such as :9474 or 127.0.0.1:9474, got {value!r}")
    return text


def _parse_target(raw: Any, index: int, environ: Mapping[str, str], default_timeout: float) -> TargetConfig:
    where = f"targets[{index}]"
    raw = _mapping(raw, where)
    _check_keys(raw, {"name", "url", "timeout", "max_bytes", "headers"}, where)
    defaults = TargetConfig()
    url = str(raw.get("url", defaults.url))
    parts = urlsplit(url)
    # Only http(s): a sidecar must never be turned into a file:// or gopher:// reader.
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{where}.url: expected an http:// or https:// URL, got {url!r}")
    headers_raw = _mapping(raw.get("headers"), f"{where}.headers")
    headers = {}
    for name, value in headers_raw.items():
        if not isinstance(value, str):
            raise ConfigError(f"{where}.headers.{name}: expected a string")
        headers[str(name)] = _resolve_env_refs(value, f"{where}.headers.{name}", environ)
    return TargetConfig(
        name=_name(raw.get("name", defaults.name if index == 0 else f"target{index}"), f"{where}.name"),
        url=url,
        timeout=parse_duration(raw.get("timeout", default_timeout), f"{where}.timeout"),
        max_bytes=parse_size(raw.get("max_bytes", defaults.max_bytes), f"{where}.max_bytes"),
        headers=headers,
    )


def _parse_route(raw: Any, index: int, target_names: set[str]) -> RouteConfig:
    where = f"routes[{index}]"
    raw = _mapping(raw, where)
    _check_keys(raw, {"name", "target", "match", "baseline_itl_p99_seconds", "expect_speculation"}, where)
    if "name" not in raw:
        raise ConfigError(f"{where}.name: required")
    target = raw.get("target")
    if target is None and len(target_names) == 1:
        target = next(iter(target_names))
    if target not in target_names:
        raise ConfigError(f"{where}.target: {target!r} is not a configured target ({', '.join(sorted(target_names))})")
    match = _mapping(raw.get("match"), f"{where}.match")
    for label, value in match.items():
        if label not in ("model_name", "engine"):
            raise ConfigError(f"{where}.match.{label}: only model_name and engine can be matched")
        if not isinstance(value, str):
            raise ConfigError(f"{where}.match.{label}: expected a string")
    baseline = raw.get("baseline_itl_p99_seconds")
    if baseline is not None:
        baseline = _number(baseline, f"{where}.baseline_itl_p99_seconds", minimum=0, exclusive_min=True)
    expect = raw.get("expect_speculation", True)
    if not isinstance(expect, bool):
        raise ConfigError(f"{where}.expect_speculation: expected true or false")
    return RouteConfig(name=_name(raw["name"], f"{where}.name"), target=target, match=dict(match),
                       baseline_itl_p99_seconds=baseline, expect_speculation=expect)


def _parse_hardware(raw: Any) -> HardwareConfig:
    from . import costmodel  # config validates against the cost model's presets

    if isinstance(raw, str):
        if raw.lower() not in costmodel.HARDWARE_PRESETS:
            known = ", ".join(sorted(costmodel.HARDWARE_PRESETS))
            raise ConfigError(f"hardware: unknown preset {raw!r} (known: {known})")
        return HardwareConfig(preset=raw.lower())
    raw = _mapping(raw, "hardware")
    _check_keys(raw, {"preset", "bandwidth_bytes_per_second", "flops", "mbu", "mfu", "overhead_seconds"}, "hardware")
    preset = raw.get("preset")
    if preset is not None and str(preset).lower() not in costmodel.HARDWARE_PRESETS:
        raise ConfigError(f"hardware.preset: unknown preset {preset!r}")
    values: dict[str, Any] = {"preset": str(preset).lower() if preset else None}
    for key in ("bandwidth_bytes_per_second", "flops"):
        if raw.get(key) is not None:
            values[key] = _number(raw[key], f"hardware.{key}", minimum=0, exclusive_min=True)
    for key in ("mbu", "mfu"):
        if raw.get(key) is not None:
            values[key] = _number(raw[key], f"hardware.{key}", minimum=0, maximum=1, exclusive_min=True)
    if raw.get("overhead_seconds") is not None:
        values["overhead_seconds"] = _number(raw["overhead_seconds"], "hardware.overhead_seconds", minimum=0)
    if values["preset"] is None and ("bandwidth_bytes_per_second" not in values or "flops" not in values):
        raise ConfigError("hardware: give a preset or both bandwidth_bytes_per_second and flops")
    return HardwareConfig(**values)


def _parse_model(raw: Any, base_dir: str) -> ModelConfig:
    from . import costmodel

    raw = _mapping(raw, "model")
    _check_keys(raw, {"preset", "config_json", "params", "dtype", "layers", "kv_heads", "head_dim",
                      "context_tokens"}, "model")
    values: dict[str, Any] = {}
    preset = raw.get("preset")
    if preset is not None:
        if str(preset).lower() not in costmodel.MODEL_PRESETS:
            known = ", ".join(sorted(costmodel.MODEL_PRESETS))
            raise ConfigError(f"model.preset: unknown preset {preset!r} (known: {known})")
        values["preset"] = str(preset).lower()
    if raw.get("config_json") is not None:
        path = os.path.join(base_dir, str(raw["config_json"]))
        try:
            with open(path, encoding="utf-8") as handle:
                hf_config = json.load(handle)
        except FileNotFoundError:
            raise ConfigError(f"model.config_json: file not found: {path}") from None
        except (OSError, ValueError) as exc:
            raise ConfigError(f"model.config_json: cannot read {path}: {exc}") from None
        if not isinstance(hf_config, dict):
            raise ConfigError(f"model.config_json: {path} is not a JSON object")
        values["config_json"] = path
        values["hf_config"] = hf_config
    if raw.get("params") is not None:
        values["params"] = _number(raw["params"], "model.params", minimum=0, exclusive_min=True)
    dtype = str(raw.get("dtype", "bf16")).lower()
    if dtype not in DTYPES:
        raise ConfigError(f"model.dtype: expected one of {', '.join(DTYPES)}, got {raw.get('dtype')!r}")
    values["dtype"] = dtype
    for key in ("layers", "kv_heads", "head_dim"):
        if raw.get(key) is not None:
            values[key] = _number(raw[key], f"model.{key}", minimum=1, integer=True)
    if raw.get("context_tokens") is not None:
        values["context_tokens"] = _number(raw["context_tokens"], "model.context_tokens", minimum=0, integer=True)
    return ModelConfig(**values)


def _parse_draft(raw: Any) -> DraftConfig:
    raw = _mapping(raw, "draft")
    _check_keys(raw, {"method", "cost_per_token", "k"}, "draft")
    from . import costmodel

    methods = (*costmodel.DRAFT_METHODS, *costmodel.METHOD_ALIASES)
    method = str(raw.get("method", "auto")).lower()
    if method not in methods:
        raise ConfigError(f"draft.method: expected one of {', '.join(methods)}, got {raw.get('method')!r}")
    cost = raw.get("cost_per_token")
    if cost is not None:
        cost = _number(cost, "draft.cost_per_token", minimum=0, maximum=5)
    k = raw.get("k")
    if k is not None:
        k = _number(k, "draft.k", minimum=1, maximum=64, integer=True)
    return DraftConfig(method=method, cost_per_token=cost, k=k)


def _parse_decision(raw: Any) -> DecisionConfig:
    raw = _mapping(raw, "decision")
    _check_keys(raw, {"min_drafts", "margin", "hold"}, "decision")
    defaults = DecisionConfig()
    return DecisionConfig(
        min_drafts=_number(raw.get("min_drafts", defaults.min_drafts), "decision.min_drafts", minimum=1, integer=True),
        margin=_number(raw.get("margin", defaults.margin), "decision.margin", minimum=0, maximum=0.5),
        hold=_number(raw.get("hold", defaults.hold), "decision.hold", minimum=1, maximum=100, integer=True),
    )


def _parse_log(raw: Any) -> LogConfig:
    raw = _mapping(raw, "log")
    _check_keys(raw, {"format", "level"}, "log")
    fmt = str(raw.get("format", "json"))
    if fmt not in ("json", "console"):
        raise ConfigError(f"log.format: expected json or console, got {fmt!r}")
    level = str(raw.get("level", "info")).lower()
    if level not in ("debug", "info", "warning", "error"):
        raise ConfigError(f"log.level: expected debug, info, warning or error, got {level!r}")
    return LogConfig(format=fmt, level=level)


def _parse_profile(raw: Any, base_dir: str) -> tuple[Any, str | None]:
    from . import costmodel

    if raw is None:
        return None, None
    path = None
    data = raw
    if isinstance(raw, str):
        path = os.path.join(base_dir, raw)
        try:
            with open(path, encoding="utf-8") as handle:
                data = yaml.safe_load(handle)
        except FileNotFoundError:
            raise ConfigError(f"profile: file not found: {path}") from None
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"profile: cannot read {path}: {exc}") from None
    try:
        return costmodel.parse_profile(data), path
    except ValueError as exc:
        raise ConfigError(f"profile: {exc}") from None


def from_mapping(raw: Mapping[str, Any] | None, *, base_dir: str = ".",
                 environ: Mapping[str, str] | None = None) -> Config:
    """Build a validated Config from a parsed YAML mapping (plus SPECWATCH_* env overrides)."""
    environ = os.environ if environ is None else environ
    raw = dict(_mapping(raw, "config"))
    _check_keys(raw, _TOP_KEYS, "")
    raw = _apply_env_overrides(raw, environ)
    defaults = Config()

    poll_interval = parse_duration(raw.get("poll_interval", defaults.poll_interval), "poll_interval")
    windows_raw = raw.get("windows", ["1m", "5m"])
    if not isinstance(windows_raw, list) or not windows_raw:
        raise ConfigError("windows: expected a non-empty list of durations such as [1m, 5m]")
    windows = tuple(parse_duration(w, f"windows[{i}]") for i, w in enumerate(windows_raw))
    if len(set(windows)) != len(windows):
        raise ConfigError("windows: durations must be distinct")
    for i, window in enumerate(windows):
        # A ratio needs two snapshots, and a failed poll should not empty the window.
        if window < 2 * poll_interval:
            raise ConfigError(f"windows[{i}]: must be at least 2 x poll_interval ({format_duration(2 * poll_interval)})")

    targets_raw = raw.get("targets")
    # The default deadline leaves a fifth of the interval free, so polls never overlap.
    default_timeout = min(TargetConfig().timeout, 0.8 * poll_interval)
    if targets_raw is None:
        targets = (TargetConfig(timeout=default_timeout),)
    elif not isinstance(targets_raw, list) or not targets_raw:
        raise ConfigError("targets: expected a non-empty list")
    else:
        targets = tuple(_parse_target(t, i, environ, default_timeout) for i, t in enumerate(targets_raw))
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise ConfigError("targets: names must be unique")
    for i, target in enumerate(targets):
        if target.timeout >= poll_interval:
            raise ConfigError(f"targets[{i}].timeout: must be shorter than poll_interval "
                              f"({format_duration(poll_interval)}) so polls never overlap")

    routes_raw = raw.get("routes") or []
    if not isinstance(routes_raw, list):
        raise ConfigError("routes: expected a list")
    routes = tuple(_parse_route(r, i, set(names)) for i, r in enumerate(routes_raw))
    if len({r.name for r in routes}) != len(routes):
        raise ConfigError("routes: names must be unique")

    profile, profile_path = _parse_profile(raw.get("profile"), base_dir)
    ttl = _number(raw.get("route_ttl_polls", defaults.route_ttl_polls), "route_ttl_polls", minimum=1, integer=True)

    config = Config(
        listen=_parse_listen(raw.get("listen", defaults.listen)),
        poll_interval=poll_interval,
        windows=windows,
        targets=targets,
        routes=routes,
        hardware=_parse_hardware(raw.get("hardware", "h100-sxm")),
        tensor_parallel=_number(raw.get("tensor_parallel", 1), "tensor_parallel", minimum=1, maximum=64, integer=True),
        model=_parse_model(raw.get("model"), base_dir),
        draft=_parse_draft(raw.get("draft")),
        profile=profile,
        profile_path=profile_path,
        decision=_parse_decision(raw.get("decision")),
        log=_parse_log(raw.get("log")),
        route_ttl_polls=ttl,
    )
    _check_cost_model(config)
    return config


def _check_cost_model(config: Config) -> None:
    """Build the cost model once at load: a model or hardware it cannot use is a config error too."""
    from . import costmodel

    try:
        costmodel.cost_model_from_config(config)
    except (ValueError, KeyError, TypeError, ZeroDivisionError) as exc:
        text = str(exc).strip("'\"")
        key = text.split(":", 1)[0] if re.match(r"^[a-z_]+(\.[a-z_]+)*:", text) else None
        if key is None:
            key = "model.config_json" if config.model.config_json else "model"
        else:
            text = text.split(":", 1)[1].strip()
        raise ConfigError(f"{key}: {text}") from None


# Scalar settings that an environment variable may override (SPECWATCH_POLL_INTERVAL=2s).
# Nested keys use a double underscore: SPECWATCH_DECISION__MIN_DRAFTS=1000.
_ENV_SCALARS = ("listen", "poll_interval", "tensor_parallel", "hardware", "profile", "route_ttl_polls",
                "decision__min_drafts", "decision__margin", "decision__hold", "log__format", "log__level",
                "model__preset", "model__dtype", "model__context_tokens", "model__config_json", "model__params",
                "draft__method", "draft__k", "draft__cost_per_token")


def _apply_env_overrides(raw: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    raw = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in raw.items()}
    for key in _ENV_SCALARS:
        env_name = "SPECWATCH_" + key.upper()
        if env_name not in environ:
            continue
        value: Any = environ[env_name]
        if "__" in key:
            section, sub = key.split("__", 1)
            current = raw.get(section)
            if isinstance(current, str) or current is None:
                current = {"preset": current} if (section == "hardware" and current) else {}
            current = dict(current)
            current[sub] = value
            raw[section] = current
        else:
            raw[key] = value
    if "SPECWATCH_TARGET_URL" in environ:
        # The common sidecar case: one target, URL from the pod spec.
        targets = list(raw.get("targets") or [{}])
        first = dict(targets[0]) if targets else {}
        first["url"] = environ["SPECWATCH_TARGET_URL"]
        raw["targets"] = [first, *targets[1:]]
    if "SPECWATCH_WINDOWS" in environ:
        raw["windows"] = [w.strip() for w in environ["SPECWATCH_WINDOWS"].split(",") if w.strip()]
    return raw


def load(path: str | None, *, environ: Mapping[str, str] | None = None, overrides: Mapping[str, Any] | None = None) -> Config:
    """Load a YAML file (or only defaults when path is None), then env, then flag overrides."""
    raw: dict[str, Any] = {}
    base_dir = "."
    if path is not None:
        try:
            with open(path, encoding="utf-8") as handle:
                loaded = yaml.safe_load(handle)
        except FileNotFoundError:
            raise ConfigError(f"config: file not found: {path}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"config: {path} is not valid YAML: {exc}") from None
        except OSError as exc:
            raise ConfigError(f"config: cannot read {path}: {exc}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, Mapping):
            raise ConfigError(f"config: {path} must hold a mapping at the top level")
        raw = dict(loaded)
        base_dir = os.path.dirname(os.path.abspath(path))
    for key, value in (overrides or {}).items():
        if value is not None:
            raw[key] = value
    return from_mapping(raw, base_dir=base_dir, environ=environ)


def with_overrides(config: Config, **changes: Any) -> Config:
    return replace(config, **changes)
