"""Builders of the values many tests start from: a window's stats whose counters agree with each
other, one route-window's evaluation of it, one poll's route snapshot, a cost model on the plain
roofline, the sidecar config of a simulated scenario, and the scenario mappings of a chat route and
of one pod whose shorter draft pays."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from specwatch import costmodel as cmod
from specwatch.config import Config, from_mapping
from specwatch.engines.series import RouteSnapshot, SeriesKey
from specwatch.sim.scenario import Scenario, load_scenario
from specwatch.sim.sidecar_config import sidecar_config_for
from specwatch.verdict.decide import Assessment
from specwatch.verdict.evaluation import RouteEvaluation
from specwatch.windows.derive import WindowStats

#: A target URL nothing listens on: the test feeds the pipeline itself.
OFFLINE_URL = "http://127.0.0.1:1/metrics"


def window_stats(
    alpha: float | None = 0.6,
    k: int = 3,
    batch: float | None = 8.0,
    drafts: float | None = 2000.0,
    *,
    rates: Sequence[float] | None = None,
    configured_k: int | None = None,
    spec_present: bool = True,
    **changes: object,
) -> WindowStats:
    """A 1m window of route `chat` whose counters are consistent: Σp_i = K·alpha, tau = 1 + K·alpha;
    `changes` set any other field."""
    if rates is None and alpha is not None:
        rates = cmod.position_rates_from_alpha(alpha, k)
    stats = WindowStats(
        route="chat",
        window="1m",
        t=100.0,
        samples=13,
        span_seconds=60.0,
        spec_present=spec_present,
        drafts=drafts,
        draft_tokens=None if drafts is None else drafts * k,
        accepted_tokens=None if drafts is None or alpha is None else drafts * k * alpha,
        acceptance_rate=alpha,
        mean_acceptance_length=None if alpha is None else 1 + k * alpha,
        draft_length=float(k),
        configured_k=configured_k or k,
        position_rates=None if rates is None else tuple(rates),
        batch_size=batch,
    )
    return dataclasses.replace(stats, **changes)  # type: ignore[arg-type]


def route_evaluation(stats: WindowStats | None = None, verdict: str = "keep", guard: bool = True) -> RouteEvaluation:
    """An evaluation that passed the guard, with an assessment that pays and recommends no change."""
    assessment = Assessment(
        verdict,
        breakeven_acceptance_rate=0.4,
        acceptance_margin=0.2,
        expected_speedup=1.5,
        recommended_draft_length=3,
        max_speculative_batch_size=64,
        action="no_change",
    )
    return RouteEvaluation(stats or window_stats(), assessment, verdict, guard, advice=assessment)


def roofline_cost_model() -> cmod.CostModel:
    """Llama-3.1-8B on an H100 with EAGLE-3 and 1,024 tokens of context, on the plain roofline: no
    fixed costs of speculation or of verification, so a decision is read off the roofline alone."""
    model = cmod.MODEL_PRESETS["llama-3.1-8b"]
    return cmod.CostModel(
        cmod.HARDWARE_PRESETS["h100-sxm"],
        model,
        context_tokens=1024,
        draft=dataclasses.replace(cmod.draft_cost_for("eagle3", model), fixed_seconds=0.0),
        verify_overhead_seconds=0.0,
        verify_seconds_per_request=0.0,
    )


def route_snapshot(
    t: float,
    counters: Mapping[SeriesKey, float],
    created: Mapping[SeriesKey, float] | None = None,
    schema: str = "v1",
    **changes: Any,
) -> RouteSnapshot:
    """One poll of route `r` (model `m`) of target `vllm` on engine 0, with these counter values;
    `changes` set any other field."""
    fields: dict[str, Any] = {
        "target": "vllm",
        "route": "r",
        "model_name": "m",
        "spec_present": True,
        "engines": ("0",),
        "configured_k": None,
    }
    return RouteSnapshot(t=t, schema=schema, counters=counters, created=created or {}, **{**fields, **changes})


def scenario_raw_config(
    scenario: Scenario | str,
    *,
    poll_interval: float = 5.0,
    windows: tuple[str, ...] = ("1m", "5m"),
    url: str = OFFLINE_URL,
    **options: int,
) -> dict[str, Any]:
    """The sidecar config a user would write for a simulated scenario's deployment, as a mapping."""
    if isinstance(scenario, str):
        scenario = load_scenario(scenario)
    return sidecar_config_for(
        scenario, target_url=url, listen="127.0.0.1:0", poll_interval=poll_interval, windows=windows, **options
    )


def scenario_config(scenario: Scenario | str, **options: Any) -> Config:
    """That config loaded, without the environment."""
    return from_mapping(scenario_raw_config(scenario, **options), environ={})


def chat_scenario(name: str, k: int, phases: Sequence[Mapping[str, Any]], **more: Any) -> dict[str, Any]:
    """A scenario mapping: Llama-3.1-8B on an H100 with EAGLE-3, started at draft length k, requests
    of 512 prompt and 256 output tokens on route `chat`, through `phases`; `more` adds top-level keys
    (events, ...)."""
    return {
        "name": name,
        "hardware": "h100-sxm",
        "model": "llama-3.1-8b",
        "method": "eagle3",
        "num_speculative_tokens": k,
        "prompt_tokens": 512,
        "output_tokens": 256,
        "routes": [{"model_name": "chat"}],
        "phases": list(phases),
        **more,
    }


#: The pods' acceptance by draft position: sure of two tokens, weak after, so a shorter draft pays at batch 64.
POD_ACCEPTANCE = (0.9, 0.7, 0.25, 0.15)


def pod_scenario(k: int, duration: str) -> dict[str, Any]:
    """One pod's life, as a scenario mapping: the chat scenario at draft length k, 64 requests for
    `duration`."""
    phase = {"name": "run", "duration": duration, "concurrency": 64, "k": k, "acceptance": list(POD_ACCEPTANCE[:k])}
    return chat_scenario(f"pod-k{k}", k, [phase])
