"""prometheus_client Collector for fleet mode: the sidecar's metric contract per replica, plus
fleet rows per route and the query source's health.

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

from collections.abc import Callable, Iterable

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from specwatch import __version__
from specwatch.export import contract
from specwatch.export.collector import add_evaluation
from specwatch.fleet.client import QUERY_ERROR_REASONS
from specwatch.fleet.grouping import replica_name
from specwatch.fleet.state import FleetState


class FleetCollector(Collector):
    """Families built fresh from one immutable FleetState per collect(), as SpecwatchCollector does."""

    def __init__(self, get_state: Callable[[], FleetState | None]):
        self._get_state = get_state

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        state = self._get_state()
        if state is None:  # not in fleet mode
            return
        with_instance = "instance" not in state.replica_labels
        replica = [*state.replica_labels, *(["instance"] if with_instance else [])]
        families = contract.Families("fleet", replica, state.deployment_labels)
        families.add("specwatch_build_info", [__version__], 1)
        self._health(state, families)
        if state.up:
            self._replicas(state, families, with_instance)
        self._fleet(state, families)
        yield from families

    def _health(self, state: FleetState, families: contract.Families) -> None:
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

    def _replicas(self, state: FleetState, families: contract.Families, with_instance: bool) -> None:
        for route in state.routes:
            if route.stale or not route.evaluations:
                continue
            target = replica_name(route.replica)
            values = [*(value for _, value in route.replica), *([target] if with_instance else [])]
            stats = route.evaluations[0].stats
            info = [route.route, target, *values, route.model_name, route.method, stats.schema, stats.engine]
            families.add("specwatch_route_info", info, 1)
            if route.route in state.baselines:
                families.add(
                    "specwatch_baseline_itl_p99_seconds", [route.route, target, *values], state.baselines[route.route]
                )
            for evaluation in route.evaluations:
                add_evaluation(families, [route.route, target, evaluation.stats.window, *values], evaluation)

    def _fleet(self, state: FleetState, families: contract.Families) -> None:
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
