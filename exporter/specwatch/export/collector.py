"""The sidecar's and the fleet's collector: the families (export/families.py) of the metric
contract (export/contract.py, docs/architecture.md §4), filled from one View: the scraped targets'
families, or, when the View has a fleet section, fleet mode's (below).

Families are built fresh from an immutable View on every collect(), so a route or engine that
disappears simply stops being exported (no stale children to remove), and collect() can never
fail on target data. Values that cannot be computed are omitted, never exported as 0.

Fleet mode: the same metric contract per replica, plus fleet rows per route and the query
source's health.

Per (replica, route, window) the derived gauges, verdicts and recommended config carry the same
names and labels as in sidecar mode (`route`, `target`, `window`), with `target` = the replica's
name (its replica label values joined by "/") and the replica labels themselves added, plus
`instance` = that name when `instance` is not a replica label. Scraped with `honor_labels: true`
(as Prometheus federation is), each replica then has its own (job, instance, route) like one
sidecar per pod, so the rules' joins and annotation queries on that key, and the dashboard's
namespace/pod filters, work in both modes. The mirrored counters and the ITL histogram are not
re-exported: Prometheus already holds vLLM's own (so the recording rules built on them, and the
alert that needs them, SpecDecodeMetricsMissing, are sidecar-mode only).

Never stale: nothing from a failed poll, nothing for a stale replica (both counted instead).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable

from specwatch import __version__
from specwatch.engines.advice import VLLM_ENGINES, advise
from specwatch.engines.series import Counter
from specwatch.export import contract
from specwatch.export.families import Metric, Registry
from specwatch.verdict.decide import VERDICTS, Assessment
from specwatch.verdict.evaluation import RouteEvaluation
from specwatch.view import View
from specwatch.view.fleet import QUERY_ERROR_REASONS, FleetState
from specwatch.view.routes import RouteRow
from specwatch.view.targets import RouteState, State
from specwatch.windows.derive import COUNTER_RATIO

MIRRORED_COUNTERS = {
    Counter.DRAFTS: "specwatch_drafts",
    Counter.DRAFT_TOKENS: "specwatch_draft_tokens",
    Counter.ACCEPTED: "specwatch_accepted_tokens",
    Counter.GEN: "specwatch_generation_tokens",
}


def _fmt_le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(float(bound))


def config_label(advice: Assessment, engine: str) -> tuple[str, str]:
    """specwatch_recommended_config_info's (config, action) labels for a window's advice."""
    keys = advice.recommended_config if advice.action == "apply" else advice.config_changes
    m = advice.measurement
    if m is not None:
        keys = m.speculative_config if m.speculative_config is not None else m.config_changes
    text = json.dumps(keys, separators=(",", ":"), sort_keys=True) if keys else ""
    if m is not None and not keys:  # a canary, or nothing to measure: the label says which
        text = m.kind
    action = str(advice.action)
    if engine not in VLLM_ENGINES:  # in that engine's terms
        rendered = advise(advice, engine)
        text, action = (rendered.label, rendered.export_action) if rendered is not None else ("", action)
    return text, action


def add_evaluation(families: contract.Families, wlabels: list[str], evaluation: RouteEvaluation) -> None:
    """One evaluation of a route's window into the per-window families, the same in both modes:
    absent below the guard, break-even capped, the advice's action."""
    for family in contract.WINDOW_FAMILIES:
        value = evaluation.value(family.value) if family.value is not None else None
        if value is not None and math.isfinite(value):
            if family.value == "breakeven_acceptance_rate":
                # Above 1 only says "cannot pay" (60.6 was seen): its own series says so.
                families.add("specwatch_speculation_cannot_pay", wlabels, 1 if value >= 1.0 else 0)
                value = min(value, 1.0)
            families.add(family.name, wlabels, value)
    for position, value in enumerate(evaluation.position_rates or ()):  # a guarded stat
        families.add("specwatch_position_acceptance_ratio", wlabels + [str(position)], value)
    families.add("specwatch_window_drafts", wlabels, evaluation.stats.drafts)
    if evaluation.stats.acceptance_basis != COUNTER_RATIO and evaluation.acceptance_rate is not None:
        families.add("specwatch_acceptance_basis_info", wlabels + [evaluation.stats.acceptance_basis], 1)
    if evaluation.verdict is not None:
        for name in VERDICTS:
            families.add("specwatch_verdict", wlabels + [name], 1 if name == evaluation.verdict else 0)
    if evaluation.config_check is not None:
        families.add("specwatch_speculative_config_mismatch", wlabels, 1 if evaluation.config_check.mismatch else 0)
        families.add("specwatch_configured_draft_length_tokens", wlabels, evaluation.config_check.configured_k)
    advice = evaluation.advice if evaluation.guard_passed else None
    if advice is not None and advice.action is not None:
        families.add(
            "specwatch_recommended_config_info", wlabels + list(config_label(advice, evaluation.stats.engine)), 1
        )


class SpecwatchCollector:
    """Families built fresh from one immutable View per collect()."""

    def __init__(self, get_view: Callable[[], View]):
        self._get_view = get_view

    def describe(self) -> Iterable[Metric]:
        # Families depend on what vLLM exports: nothing to pre-register in a prometheus_client registry
        # (the tests' oracle renders this collector through one).
        return []

    def collect(self) -> Iterable[Metric]:
        view = self._get_view()
        families = _fleet_families(view.fleet) if view.fleet is not None else _targets_families(view.targets)
        add_routes(families, view.route_rows())
        yield from families


def _cost_model(state: State, families: contract.Families) -> None:
    """What the verdicts rest on, and how well the learned step-time curve fits (docs/costmodel.md)."""
    cm = state.cost_model
    if cm is not None:
        families.add(
            "specwatch_cost_model_info",
            [cm.source, cm.hardware, cm.model, cm.dtype, str(cm.tensor_parallel), cm.method, cm.baseline],
            1,
        )
    served = [route for route, row in zip(state.routes, state.rows(), strict=True) if row.served]
    for route in served:
        fit = route.fit
        if fit is None:
            continue
        labels = [route.route, route.target]
        families.add("specwatch_step_time_fit_points", labels, fit.points)
        for name, value in (
            ("specwatch_step_time_fit_residual_ratio", fit.residual_ratio),
            ("specwatch_step_time_predicted_seconds", fit.predicted_seconds),
            ("specwatch_step_time_observed_seconds", fit.observed_seconds),
        ):
            if value is not None and math.isfinite(value):
                families.add(name, labels, value)
    for route in served:
        for tokens, seconds in route.curve_knots:
            families.add("specwatch_step_time_curve_seconds", [route.route, route.target, f"{tokens:.6g}"], seconds)


def _target_health(state: State, families: contract.Families) -> None:
    for target in state.targets:
        labels = [target.name]
        if target.up is not None:
            families.add("specwatch_target_up", labels, 1.0 if target.up else 0.0)
        families.add("specwatch_scrape_duration_seconds", labels, target.scrape_duration)
        for reason, count in sorted(target.errors.items()):
            families.add("specwatch_scrape_errors", [target.name, reason], count)
        for limit, count in sorted(target.dropped.items()):
            families.add("specwatch_payload_dropped", [target.name, limit], count)
        families.add("specwatch_target_restarts", labels, target.resets)
        families.add("specwatch_target_dips", labels, target.dips)
        families.add("specwatch_last_scrape_success_timestamp_seconds", labels, target.last_success)


def _target_routes(state: State, families: contract.Families) -> None:
    """What only a target's routes export: whether speculation is expected, the mirrored
    counters, the ITL histogram, the grading and the before-window."""
    expects = "specwatch_route_expects_speculation"
    for name, target, expected in state.unmatched_routes:
        families.add(expects, [name, target], 1 if expected else 0)
    for route, row in zip(state.routes, state.rows(), strict=True):
        labels = [route.route, route.target]
        families.add(expects, labels, 1 if route.expects_speculation else 0)
        if not row.served:
            continue
        _add_mirrored(route, labels, families)
        if route.itl_buckets:
            buckets = [(_fmt_le(b), v) for b, v in route.itl_buckets]
            families.add_histogram("specwatch_itl_seconds", labels, buckets, route.itl_sum)
        if route.grading is not None:
            families.add("specwatch_advice_predicted_gain_ratio", labels, route.grading.predicted_gain_ratio)
            families.add("specwatch_advice_measured_gain_ratio", labels, route.grading.measured_gain_ratio)
        before = route.before_window
        if before is not None:
            for quantity, value in before.quantities().items():
                families.add(contract.BEFORE_WINDOW[quantity], [*labels, before.method], value)
            for position, rate in enumerate(before.position_rates or ()):
                families.add(contract.BEFORE_POSITIONS, [*labels, str(position)], rate)


def _targets_families(state: State) -> contract.Families:
    """The targets section's families: what the verdicts rest on, each target's health, and what
    only a target's routes export."""
    families = contract.Families("sidecar")
    families.add("specwatch_build_info", [__version__], 1)
    _cost_model(state, families)
    _target_health(state, families)
    _target_routes(state, families)
    return families


def add_routes(families: contract.Families, rows: Iterable[RouteRow]) -> None:
    """The route rows of either section: each route's metadata and baseline, and, while its windows
    are served (absent, never stale, while its target is down: docs/architecture.md §4), every
    window's families."""
    for row in rows:
        head = [row.route, row.target]
        info = [*head, *row.replica, row.model_name, row.method, row.schema, row.engine]
        families.add("specwatch_route_info", info, 1)
        families.add("specwatch_baseline_itl_p99_seconds", [*head, *row.replica], row.baseline_itl_p99_seconds)
        if row.served:
            for evaluation in row.evaluations:
                add_evaluation(families, [*head, evaluation.stats.window, *row.replica], evaluation)
            c = row.controller
            if c is not None:
                families.add(
                    "specwatch_speculation_controller_info", [*head, *row.replica, c.mode, c.stated, c.reason], 1
                )


def _add_mirrored(route: RouteState, labels: list[str], families: contract.Families) -> None:
    """The route's mirrored counters: only those its engine counts (one it does not export is absent,
    not 0); the spec-decode ones only when the route runs speculation."""
    kinds = (
        (Counter.DRAFTS, Counter.DRAFT_TOKENS, Counter.ACCEPTED, Counter.GEN) if route.spec_present else (Counter.GEN,)
    )
    for kind in kinds:
        if kind in route.mirrored:
            families.add(MIRRORED_COUNTERS[kind], labels, route.mirrored[kind])
    if route.spec_present:
        for position, value in route.positions:
            families.add("specwatch_accepted_tokens_by_position", labels + [str(position)], value)


def registry_for(get_view: Callable[[], View]) -> Registry:
    registry = Registry()
    registry.register(SpecwatchCollector(get_view))
    return registry


def _fleet_families(state: FleetState) -> contract.Families:
    """Fleet mode's own families: the query API's health and the fleet rows (its replicas' routes
    are route rows)."""
    replica = [*state.replica_labels, *(["instance"] if "instance" not in state.replica_labels else [])]
    families = contract.Families("fleet", replica, state.deployment_labels)
    families.add("specwatch_build_info", [__version__], 1)
    _query_health(state, families)
    _fleet_rows(state, families)
    return families


def _query_health(state: FleetState, families: contract.Families) -> None:
    for name, value in (
        ("specwatch_prometheus_up", None if state.up is None else (1.0 if state.up else 0.0)),
        ("specwatch_prometheus_queries", state.queries),
        ("specwatch_prometheus_queries_per_poll", state.queries_per_poll),
        ("specwatch_prometheus_query_duration_seconds", state.query_duration),
        ("specwatch_prometheus_last_success_timestamp_seconds", state.last_success),
        ("specwatch_prometheus_answer_series", state.series),
        ("specwatch_stale_replicas", state.stale_replicas),
        ("specwatch_stale_replica_evaluations", state.stale_evaluations),
    ):
        families.add(name, [], value)
    for reason in QUERY_ERROR_REASONS:
        families.add("specwatch_prometheus_query_errors", [reason], state.errors.get(reason, 0))


def _fleet_rows(state: FleetState, families: contract.Families) -> None:
    for row in state.fleet:
        labels = [row.route, row.window]
        families.add("specwatch_fleet_acceptance_ratio", labels, row.acceptance_rate)
        families.add("specwatch_fleet_losing_tokens_ratio", labels, row.losing_token_share)
        for name, count in row.verdicts.items():
            families.add("specwatch_fleet_replicas", [*labels, name], count)
    # A rollout graded across replicas (old pods' windows vs new pods'): per route and deployment.
    for (route, deployment), grading in state.gradings.items():
        labels = [route, *(value for _, value in deployment)]
        families.add("specwatch_advice_predicted_gain_ratio", labels, grading.predicted_gain_ratio)
        families.add("specwatch_advice_measured_gain_ratio", labels, grading.measured_gain_ratio)
    if state.up:
        for cost_model in state.cost_models:
            families.add(
                "specwatch_fleet_cost_model_info", [cost_model.route, cost_model.source, cost_model.baseline], 1
            )
