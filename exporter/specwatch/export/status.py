"""The /api/v1/status JSON document, built from the View the poller published.

One route list for either mode (route_status over View.route_rows: a target's routes, or every
fresh replica's), each route's windows the same per-window record (window_status), a `specwatch
replay` line plus what only the status page shows. Beside it what only one mode has: a View of
scraped targets, every target's health; a View with a fleet section, the query source's health,
the fleet rows, the rollouts and the history read at start. Non-finite floats become null
(jsonsafe) when the document is encoded.
"""

from __future__ import annotations

import json
import math
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
from specwatch.view.fleet import FleetState, HistoryRead, rollout_name
from specwatch.view.routes import RouteRow
from specwatch.view.targets import State

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


def iso_time(t: float | None) -> str | None:
    """Unix seconds as ISO 8601 UTC (`t` fields stay Unix seconds for programs)."""
    if t is None or not math.isfinite(t):
        return None
    return datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _age(now: float | None, then: float | None) -> float | None:
    return None if now is None or then is None else round(max(now - then, 0.0), 3)


def route_status(row: RouteRow) -> dict[str, Any]:
    """One route on /api/v1/status, either mode: a target's route or a replica's. A fact its mode
    does not know is null (a target's route has no replica; a replica, no grading of its own)."""
    return {
        "route": row.route,
        "target": row.target,
        "replica": dict(row.replica_labels) if row.replica_labels is not None else None,
        "model_name": row.model_name,
        "schema": row.schema,
        "method": row.method,
        "engine": row.engine,
        "spec_present": row.spec_present,
        "configured_k": row.configured_k,
        "expects_speculation": row.expects_speculation,
        "baseline_itl_p99_seconds": row.baseline_itl_p99_seconds,
        "windows": {e.stats.window: window_status(e) for e in row.evaluations},
        "grading": row.grading.as_dict() if row.grading is not None else None,
        # The controller of K the engine runs, with its evidence (verdict/controller.py).
        "controller": row.controller.as_dict() if row.controller is not None else None,
    }


def status_document(view: View) -> dict[str, Any]:
    """The document of one View: the route list of either mode (View.route_rows), beside what only
    its mode has (the targets' health; or the query source's health and the fleet rows)."""
    config = view.config
    return {
        "version": __version__,
        "mode": "fleet" if view.fleet is not None else "sidecar",
        "t": view.t,
        "time": iso_time(view.t),
        "routes": [route_status(row) for row in view.route_rows()],
        **(_fleet_sections(view, view.fleet) if view.fleet is not None else _targets_section(view.targets)),
        "windows": list(config.window_labels),
        # The level of every window's expected_speedup_lower/_upper.
        "speedup_confidence": config.decision.confidence,
        # What the verdicts rest on: the setup and engine prior, and per route its step-time source.
        "assumptions": view_assumptions(view).as_dict(),
    }


def _targets_section(state: State) -> dict[str, Any]:
    """Sidecar mode: every target's health."""
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
    return {"targets": targets}


def _fleet_sections(view: View, state: FleetState) -> dict[str, Any]:
    """Fleet mode: the query source's health, the fleet rows, the rollouts graded across replicas,
    the history read at start and each route's learned step time."""
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
        "prometheus": prometheus,
        "fleet": fleet,
        # Per route (and deployment, when deployment_labels are set): the latest rollout graded
        # across replicas (old pods' windows vs new pods').
        "rollouts": _rollouts(state),
        # What was replayed of the history before the start (learning only; nothing of it served).
        "history": _history(state.history),
        "cost_models": cost_models if state.up else [],
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
