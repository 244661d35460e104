"""The names the sidecar exports, defined once for every test that checks a reader of them (rules/,
dashboards/, the metric contract, the reliability harness).

The per-window families and the reload gauges come from the exporter's own definitions, so a new
one is known here the moment the exporter defines it; the others are listed by hand, grouped as
docs/architecture.md ("Metric contract") documents them. tests/test_metric_contract.py proves the
union is exactly what a real /metrics carries, so a name added to the exporter and forgotten here
fails there. Sample names: counters with _total, the ITL histogram as _bucket/_sum/_count.
"""

from __future__ import annotations

from specwatch.export.collector import WindowFamilies
from specwatch.serve.reload import ReloadCollector, ReloadStatus

#: Mirrored from vLLM's counters per {target, route} (the recording rules aggregate these).
MIRRORED = frozenset(
    {
        "specwatch_drafts_total",
        "specwatch_draft_tokens_total",
        "specwatch_accepted_tokens_total",
        "specwatch_accepted_tokens_by_position_total",
        "specwatch_generation_tokens_total",
        "specwatch_itl_seconds_bucket",
        "specwatch_itl_seconds_sum",
        "specwatch_itl_seconds_count",
    }
)
#: Derived per {route, window}: every reader must pin window (the collector's window families).
WINDOW_DERIVED = frozenset(family.name for family in WindowFamilies(["route", "window"], "").families())
#: Per route, no window: the alerts' routing and baseline.
ROUTE_GAUGES = frozenset({"specwatch_baseline_itl_p99_seconds", "specwatch_route_expects_speculation"})
#: The sidecar's own health and identity. (The first contract said specwatch_counter_resets_total; it is
#: specwatch_target_restarts_total because `promtool check metrics` rejects a type word in a name.)
HEALTH = frozenset(
    {
        "specwatch_target_up",
        "specwatch_scrape_duration_seconds",
        "specwatch_scrape_errors_total",
        "specwatch_payload_dropped_total",
        "specwatch_target_restarts_total",
        "specwatch_target_dips_total",
        "specwatch_last_scrape_success_timestamp_seconds",
        "specwatch_build_info",
        "specwatch_route_info",
        "specwatch_poll_errors_total",
    }
)
#: Config reloads, under the names Prometheus uses for its own (reload.ReloadCollector).
RELOAD = frozenset(family.name for family in ReloadCollector(lambda: ReloadStatus(None, 0.0)).collect())
#: Exported only once a change of draft length or method was seen.
GRADING = frozenset({"specwatch_advice_predicted_gain_ratio", "specwatch_advice_measured_gain_ratio"})
#: The window a change would be graded against: what a restarted sidecar reads back (docs/rollouts.md).
BEFORE_WINDOW = frozenset({"specwatch_advice_before_window", "specwatch_advice_before_position_acceptance_rate"})
#: The read-back's own outcome, only with `readback:` configured.
READBACK = frozenset({"specwatch_readback_errors_total", "specwatch_readback_restored_routes"})
#: How well the learned step-time curve fits: exported once a route's curve has points.
STEP_TIME_FIT = frozenset(
    {
        "specwatch_step_time_fit_points",
        "specwatch_step_time_fit_residual_ratio",
        "specwatch_step_time_predicted_seconds",
        "specwatch_step_time_observed_seconds",
        "specwatch_step_time_curve_seconds",
    }
)
#: What the verdict rests on (docs/costmodel.md) and how well the learned curve fits.
LEARNING = frozenset({"specwatch_cost_model_info"}) | STEP_TIME_FIT

#: Per {route, window}, only for an engine whose acceptance is gauges only (SGLang): what the values are.
GAUGE_BASIS = frozenset({"specwatch_acceptance_basis_info"})

#: Every name the sidecar may export.
EXPORTED = (
    MIRRORED
    | WINDOW_DERIVED
    | ROUTE_GAUGES
    | HEALTH
    | RELOAD
    | GRADING
    | BEFORE_WINDOW
    | READBACK
    | LEARNING
    | GAUGE_BASIS
)
#: Exported only while the target is up and read: nothing of them may outlive a failed poll.
TARGET_DERIVED = WINDOW_DERIVED | MIRRORED | GAUGE_BASIS
