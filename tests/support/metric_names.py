"""The sample names specwatch exports, for every test that checks a reader of them (rules/,
dashboards/, the metric contract, the reliability harness), all from the exporter's own table
(specwatch/export/contract.py). Sample names: counters with _total, the ITL histogram as
_bucket/_sum/_count.
"""

from __future__ import annotations

from specwatch.export import contract


def _samples(*families: contract.Family) -> frozenset[str]:
    return frozenset(name for family in families for name in family.sample_names())


def _named(*names: str) -> frozenset[str]:
    return _samples(*(contract.BY_NAME[name] for name in names))


#: Every name the sidecar may export; FLEET_EXPORTED, fleet mode's.
EXPORTED = _samples(*contract.exported("sidecar"))
FLEET_EXPORTED = _samples(*contract.exported("fleet"))
#: Mirrored from vLLM's counters per {target, route} (the recording rules aggregate these).
MIRRORED = _samples(
    *(f for f in contract.exported("sidecar") if f.key == contract.ROUTE and f.type in ("counter", "histogram"))
)
#: Derived per {route, window}: every reader must pin window.
WINDOW_DERIVED = _samples(*contract.WINDOW_FAMILIES)
#: Config reloads, under the names Prometheus uses for its own (reload.ReloadCollector).
RELOAD = _named("specwatch_config_last_reload_successful", "specwatch_config_last_reload_success_timestamp_seconds")
#: Exported only once a change of draft length or method was seen.
GRADING = _named("specwatch_advice_predicted_gain_ratio", "specwatch_advice_measured_gain_ratio")
#: The window a change would be graded against: what a restarted sidecar reads back (docs/rollouts.md).
BEFORE_WINDOW = _named(*contract.BEFORE_WINDOW.values(), contract.BEFORE_POSITIONS)
#: The read-back's own outcome, only with `readback:` configured.
READBACK = _named("specwatch_readback_errors", "specwatch_readback_restored_routes")
#: How well the learned step-time curve fits: exported once a route's curve has points.
STEP_TIME_FIT = _named(
    "specwatch_step_time_fit_points",
    "specwatch_step_time_fit_residual_ratio",
    "specwatch_step_time_predicted_seconds",
    "specwatch_step_time_observed_seconds",
    "specwatch_step_time_curve_seconds",
)
#: Per {route, window}, only where the engine moves K itself (a stated adaptive controller or schedule).
CONTROLLER_GAIN = _named(
    "specwatch_controller_gain_ratio",
    "specwatch_controller_gain_ratio_lower",
    "specwatch_controller_gain_ratio_upper",
    "specwatch_controller_loss_probability",
    "specwatch_controller_best_fixed_k_gain_ratio",
)
#: Per {route, window}, only for an engine whose acceptance is gauges only (SGLang): what the values are.
GAUGE_BASIS = _named("specwatch_acceptance_basis_info")
#: Exported only while the target is up and read: nothing of them may outlive a failed poll.
TARGET_DERIVED = WINDOW_DERIVED | MIRRORED | GAUGE_BASIS
