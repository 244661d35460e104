"""The /api/v1/status JSON document, built from the View the poller published.

A View of scraped targets: every target's health and every route's windows. A View with a fleet
section: the query source's health, one entry per replica and route, and the fleet rows. Both serve the same per-window record
(window_status), a `specwatch replay` line plus what only the status page shows. Non-finite floats
become null (jsonsafe) when the document is encoded.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from specwatch import __version__
from specwatch.base.jsonsafe import json_safe
from specwatch.base.urls import redact_url
from specwatch.engines.advice import VLLM_ENGINES, advise
from specwatch.export.assumptions import view_assumptions
from specwatch.verdict.decide import MERGE_NOTE, SCHEDULE_NOTES, ZERO_BAND_NOTE
from specwatch.verdict.evaluation import RouteEvaluation, evaluation_record
from specwatch.view import View
from specwatch.view.fleet import FleetState, HistoryRead, replica_name, rollout_name

#: The verdict's notes about vLLM's --speculative-config (left out for another engine's route).
VLLM_CONFIG_NOTES = frozenset({*SCHEDULE_NOTES, ZERO_BAND_NOTE, MERGE_NOTE})


def window_status(evaluation: RouteEvaluation) -> dict[str, Any]:
    """One window of one route on /api/v1/status (either mode). ``recommended_command`` and
    ``recommended_flags`` give the advice in the route's engine's terms; for vLLM the
    --speculative-config fields stay beside them, for programs that read them."""
    engine = evaluation.stats.engine
    record = evaluation_record(evaluation)
    record.pop("route"), record.pop("window")
    record.update(
        {
            "acceptance_margin": evaluation.value("acceptance_margin"),
            "max_speculative_batch_size": evaluation.value("max_speculative_batch_size"),
            "position_acceptance_rates": evaluation.position_rates,
            "itl_per_token_mean_seconds": evaluation.stats.itl_per_token_mean_seconds,
            "recommended_config": evaluation.recommended_config,
            "candidate_verdict": getattr(evaluation.assessment, "candidate", None),
            "samples": evaluation.stats.samples,
        }
    )
    if evaluation.config_check is not None:
        record["config_check"] = evaluation.config_check.as_dict()
    advice = advise(evaluation.advised, engine)
    if engine not in VLLM_ENGINES:  # --speculative-config and its notes mean nothing to another engine
        record["recommended_config"] = record["merge_into_your_speculative_config"] = None
        if advice is not None:
            record["recommended_action"] = advice.export_action
            notes = evaluation.advised.notes if evaluation.advised is not None else ()
            record["notes"] = [n for n in notes if n not in VLLM_CONFIG_NOTES] + list(advice.notes)
    elif advice is not None:  # what the engine's own controller of K can be told (engines/advice.py)
        said = evaluation.advised.notes if evaluation.advised is not None else ()
        record["notes"] = [*said, *(n for n in advice.notes if n not in said)]
    if record["recommended_config"] is not None:
        record["recommended_speculative_config_flag"] = (
            "--speculative-config '" + json.dumps(record["recommended_config"], separators=(",", ":")) + "'"
        )
    record["recommended_request"] = None if advice is None else advice.request
    record["recommended_command"] = None if advice is None else advice.command
    record["recommended_flags"] = list(advice.flags) if advice is not None and advice.flags else None
    return record


def _windows(evaluations: Iterable[RouteEvaluation]) -> dict[str, dict[str, Any]]:
    """A route's windows, keyed by window label."""
    return {e.stats.window: window_status(e) for e in evaluations}


def iso_time(t: float | None) -> str | None:
    """Unix seconds as ISO 8601 UTC (`t` fields stay Unix seconds for programs)."""
    if t is None or not math.isfinite(t):
        return None
    return datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _age(now: float | None, then: float | None) -> float | None:
    return None if now is None or then is None else round(max(now - then, 0.0), 3)


def status_document(view: View) -> dict[str, Any]:
    """The document of one View: its fleet section's when it has one, else its targets'."""
    if view.fleet is not None:
        return _fleet_document(view, view.fleet)
    state, config = view.targets, view.config
    routes = [
        {
            "route": route.route,
            "target": route.target,
            "model_name": route.model_name,
            "schema": route.schema,
            "method": route.method,
            "engine": route.engine,
            "spec_present": route.spec_present,
            "configured_k": route.configured_k,
            "expects_speculation": route.expects_speculation,
            "baseline_itl_p99_seconds": route.baseline_itl_p99_seconds,
            "windows": _windows(route.evaluations),
            "grading": route.grading.as_dict() if route.grading is not None else None,
            # The controller of K the engine runs, with its evidence (verdict/controller.py).
            "controller": route.controller.as_dict() if route.controller is not None else None,
        }
        for route in state.routes
    ]
    targets = [
        {
            "name": t.name,
            "url": redact_url(t.url),
            "up": t.up,
            "last_success": t.last_success,
            "last_success_time": iso_time(t.last_success),
            "last_success_age_seconds": _age(state.t, t.last_success),
            "scrape_duration_seconds": t.scrape_duration,
            "errors": dict(t.errors),
            "dropped": dict(t.dropped),
            "counter_resets": t.resets,
            "schema": t.schema,
            "payload_engine": t.payload_engine,  # set while the payload is another engine than the pinned one
            "polls": t.polls,
        }
        for t in state.targets
    ]
    return {
        "version": __version__,
        "t": state.t,
        "time": iso_time(state.t),
        "targets": targets,
        "routes": routes,
        "windows": list(config.window_labels),
        # The level of every window's expected_speedup_lower/_upper.
        "speedup_confidence": config.decision.confidence,
        # What the verdicts rest on: the setup and engine prior, and per route its step-time source.
        "assumptions": view_assumptions(view).as_dict(),
    }


def _fleet_document(view: View, state: FleetState) -> dict[str, Any]:
    """Fleet mode: the query source's health, one entry per replica and route (nothing from a failed
    poll or for a stale replica, as on /metrics), and the fleet rows."""
    config = view.config
    prometheus = {
        "url": redact_url(config.prometheus.url) if config.prometheus else None,
        "up": state.up,
        "last_success": state.last_success,
        "query_duration_seconds": state.query_duration,
        "queries": state.queries,
        "queries_per_poll": state.queries_per_poll,
        "errors": dict(state.errors),
        "stale_replicas": state.stale_replicas,
        "series": state.series,  # in the last good poll's window answers; 0: the selector matches nothing
    }
    routes = [
        {
            "route": r.route,
            "target": replica_name(r.replica),
            "replica": dict(r.replica),
            "model_name": r.model_name,
            "method": r.method,
            "engine": r.engine,
            "windows": _windows(r.evaluations),
        }
        for r in state.routes
        if state.up and not r.stale and r.evaluations
    ]
    fleet = [
        {
            "route": row.route,
            "window": row.window,
            "replicas": row.replicas,
            "verdicts": dict(row.verdicts),
            "acceptance_rate": row.acceptance_rate,
            "losing_token_share": row.losing_token_share,
            "generation_tokens": row.generation_tokens,
        }
        for row in state.fleet
    ]
    cost_models = [
        {
            "route": c.route,
            "source": c.source,
            "baseline": c.baseline,
            "canary_replicas": c.canaries,
            "points": c.points,
            "baseline_points": c.baseline_points,
        }
        for c in state.cost_models
    ]
    return {
        "version": __version__,
        "mode": "fleet",
        "cost_models": cost_models if state.up else [],
        "t": state.t,
        "time": iso_time(state.t),
        "prometheus": prometheus,
        "routes": routes,
        "fleet": fleet,
        # Per route (and deployment, when deployment_labels are set): the latest rollout graded
        # across replicas (old pods' windows vs new pods').
        "rollouts": _rollouts(state),
        # What was replayed of the history before the start (learning only; nothing of it served).
        "history": _history(state.history),
        "windows": list(config.window_labels),
        "speedup_confidence": config.decision.confidence,
        "assumptions": view_assumptions(view).as_dict(),
    }


def _rollouts(state: FleetState) -> dict[str, Any]:
    """Keyed by route; with deployment_labels by route and deployment (chat{namespace="team-a"}),
    each then also naming its route and deployment labels."""
    if not state.deployment_labels:
        return {route: grading.as_dict() for (route, _), grading in state.gradings.items()}
    return {
        rollout_name(key): {"route": key[0], "deployment": dict(key[1]), **grading.as_dict()}
        for key, grading in state.gradings.items()
    }


def _history(read: HistoryRead | None) -> dict[str, Any] | None:
    if read is None:
        return None
    return {
        "lookback_seconds": read.lookback,
        "start": iso_time(read.start),
        "end": iso_time(read.end),
        "steps": read.steps,
        "queries": read.queries,
        "seconds": read.seconds,
        "error": read.error,
    }


def encode_status(view: View) -> bytes:
    """The document of one View as the bytes /api/v1/status serves (NaN and inf as null)."""
    return json.dumps(json_safe(status_document(view)), allow_nan=False, default=str).encode()
