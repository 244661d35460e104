"""The parsed configuration: frozen, typed dataclasses that the rest of specwatch reads.

Field names equal the schema's key names (config/schema.py); a test proves that every field has a
key and every key a field. Defaults live here, once; the schema reads them for docs and the chart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..units import format_duration


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
    # The parsed config.json (read from config_json at load time).
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
class LearningConfig:
    # Learn the step-time curve from the server's own metrics (costmodel/learned.py); a
    # configured profile overrides it. None (auto): learn when neither hardware nor model is
    # configured, i.e. when the verdict would otherwise rest on assumed defaults.
    enabled: bool | None = None
    min_points: int = 6
    half_life: float = 6 * 3600.0
    point_seconds: float = 10.0


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
    # The cost model's Profile (parsed by specwatch.costmodel.parse_profile) and the file it came from.
    profile: Any = None
    profile_path: str | None = None
    decision: DecisionConfig = DecisionConfig()
    learning: LearningConfig = LearningConfig()
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
