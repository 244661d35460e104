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

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from specwatch import __version__
from specwatch.export.collector import BASELINE_GAUGE, GRADING_GAUGES, ROUTE_INFO, WindowFamilies, add_grading
from specwatch.fleet.client import QUERY_ERROR_REASONS
from specwatch.fleet.grouping import replica_name
from specwatch.fleet.state import FleetState

FLEET_NOTE = " Computed by specwatch from Prometheus (fleet mode)."


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
        build = GaugeMetricFamily("specwatch_build_info", "specwatch build information.", labels=["version"])
        build.add_metric([__version__], 1)
        yield build
        yield from self._health(state)
        yield from self._replicas(state)
        yield from self._fleet(state)

    def _health(self, state: FleetState) -> Iterable[Metric]:
        yield _gauge(
            "specwatch_prometheus_up",
            "1 if the last poll's queries all succeeded, else 0.",
            None if state.up is None else (1.0 if state.up else 0.0),
        )
        queries = CounterMetricFamily("specwatch_prometheus_queries", "Queries sent to the Prometheus query API.")
        queries.add_metric([], state.queries)
        yield queries
        yield _gauge(
            "specwatch_prometheus_queries_per_poll",
            "Queries per evaluation (windows + 1; independent of the number of replicas).",
            state.queries_per_poll,
        )
        errors = CounterMetricFamily(
            "specwatch_prometheus_query_errors",
            "Failed polls of the query API by reason (" + ", ".join(QUERY_ERROR_REASONS) + ").",
            labels=["reason"],
        )
        for reason in QUERY_ERROR_REASONS:
            errors.add_metric([reason], state.errors.get(reason, 0))
        yield errors
        yield _gauge(
            "specwatch_prometheus_query_duration_seconds", "Duration of the last poll's queries.", state.query_duration
        )
        yield _gauge(
            "specwatch_prometheus_last_success_timestamp_seconds",
            "Unix time (evaluation time) of the last successful poll.",
            state.last_success,
        )
        yield _gauge(
            "specwatch_prometheus_answer_series",
            "Series in the last successful poll's window answers (0: the selector matches nothing).",
            state.series,
        )
        yield _gauge(
            "specwatch_stale_replicas",
            "Replica routes whose newest sample is older than two scrape intervals (values not served).",
            state.stale_replicas,
        )
        stale_total = CounterMetricFamily(
            "specwatch_stale_replica_evaluations", "Evaluations skipped because the replica was stale."
        )
        stale_total.add_metric([], state.stale_evaluations)
        yield stale_total

    def _replicas(self, state: FleetState) -> Iterable[Metric]:
        with_instance = "instance" not in state.replica_labels
        extra = [*state.replica_labels, *(["instance"] if with_instance else [])]
        per_window = WindowFamilies(["route", "target", "window", *extra], FLEET_NOTE)
        name, text, labels = ROUTE_INFO
        info = GaugeMetricFamily(name, text, labels=[*labels, *extra])
        baseline = GaugeMetricFamily(*BASELINE_GAUGE, labels=["route", "target", *extra])
        if state.up:
            for route in state.routes:
                if route.stale or not route.evaluations:
                    continue
                target = replica_name(route.replica)
                values = [*(value for _, value in route.replica), *([target] if with_instance else [])]
                stats = route.evaluations[0].stats
                info.add_metric(
                    [route.route, target, route.model_name, route.method, stats.schema, stats.engine, *values], 1
                )
                if route.route in state.baselines:
                    baseline.add_metric([route.route, target, *values], state.baselines[route.route])
                for evaluation in route.evaluations:
                    per_window.add([route.route, target, evaluation.stats.window, *values], evaluation)
        yield from (info, baseline, *per_window.families())

    def _fleet(self, state: FleetState) -> Iterable[Metric]:
        alpha = GaugeMetricFamily(
            "specwatch_fleet_acceptance_rate",
            "Token-weighted acceptance rate of the route over its replicas (sum accepted / sum proposed)." + FLEET_NOTE,
            labels=["route", "window"],
        )
        losing = GaugeMetricFamily(
            "specwatch_fleet_losing_token_share",
            "Share of the route's decode tokens served by replicas where speculation loses (expected speedup < 1)."
            + FLEET_NOTE,
            labels=["route", "window"],
        )
        replicas = GaugeMetricFamily(
            "specwatch_fleet_replicas",
            "Replicas of the route per current verdict." + FLEET_NOTE,
            labels=["route", "window", "verdict"],
        )
        for row in state.fleet:
            if row.acceptance_rate is not None:
                alpha.add_metric([row.route, row.window], row.acceptance_rate)
            if row.losing_token_share is not None:
                losing.add_metric([row.route, row.window], row.losing_token_share)
            for name, count in row.verdicts.items():
                replicas.add_metric([row.route, row.window, name], count)
        # A rollout graded across replicas (old pods' windows vs new pods'): per route.
        predicted, measured = (GaugeMetricFamily(name, text, labels=["route"]) for name, text in GRADING_GAUGES)
        for route, grading in state.gradings.items():
            add_grading(grading, [route], predicted, measured)
        yield from (alpha, losing, replicas, predicted, measured)


def _gauge(name: str, documentation: str, value: float | None) -> GaugeMetricFamily:
    """An unlabelled gauge, with no sample while its value is unknown."""
    family = GaugeMetricFamily(name, documentation)
    if value is not None:
        family.add_metric([], value)
    return family
