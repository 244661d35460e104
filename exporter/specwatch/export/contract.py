"""The metric contract, declared once: every family specwatch exports, with its type, HELP, labels
and the modes that export it. The collectors (sidecar, fleet, the service's own) build their
families from this table and only fill in samples; the metric list of docs/metrics.md is generated from it
and the tests check the docs against it.

One row per family, in export order: its name without `specwatch_`; its type; its stability
(stable: renaming it, changing its type or its labels is a breaking change, held by
tests/golden/stable_metrics.txt; experimental: free to change); the modes that export
it (sidecar, fleet or both); its labels, the row's key before `/` and the family's own after it (in
fleet mode the replica's labels go between, on the families keyed by `target`; `{deployment}` in a
key stands for prometheus.deployment_labels, none unless configured); for a per-window
gauge filled from an evaluation, the RouteEvaluation value it exports; its HELP after `|`, where
{window}, {mirrored}, {fleet} and {query_reasons} stand for the notes below. A family whose labels
differ between the modes has a row per mode. Adding a family is one
row here (and, unless it is such a derived gauge, the line in its collector that fills it).

`python tools/gen_metrics_doc.py [--check]` writes (or checks) the metric list of docs/metrics.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, cast

from specwatch.export.families import Metric
from specwatch.verdict.evaluation import NUMERIC_VALUES, NumericValue
from specwatch.view.fleet import QUERY_ERROR_REASONS

Mode = Literal["sidecar", "fleet"]
Type = Literal["gauge", "counter", "histogram"]
Stability = Literal["stable", "experimental"]
STABILITIES: tuple[Stability, ...] = ("stable", "experimental")
MODES: dict[str, frozenset[Mode]] = {
    "sidecar": frozenset({"sidecar"}),
    "fleet": frozenset({"fleet"}),
    "both": frozenset({"sidecar", "fleet"}),
}
#: In a row's key: the configured deployment labels (fleet mode's prometheus.deployment_labels).
DEPLOYMENT = "{deployment}"
ROUTE = ("route", "target")
WINDOW = ("route", "target", "window")
NOTES = {
    "window": " Computed by specwatch at its last poll (cached between polls).",
    "mirrored": ", mirrored monotonic across vLLM restarts."
    " Computed by specwatch from its own polls of vLLM (cached between polls).",
    "fleet": " Computed by specwatch from Prometheus (fleet mode).",
    "query_reasons": ", ".join(QUERY_ERROR_REASONS),
}
_TYPES = ("gauge", "counter", "histogram")

_ROWS = """
name                                         type      stability    modes   labels                                         value                      | help
build_info                                   gauge     stable       both    version                                        -                          | specwatch build information.
cost_model_info                              gauge     experimental sidecar source,hardware,model,dtype,tp,method,baseline -                          | What the verdicts rest on: source default (nothing configured), preset, profile, learned (the step-time curve fitted from vLLM's own metrics) or restored (the previous pod's curve, read back and confirmed by the first live window), with the hardware, model, dtype, tensor parallel size and draft method assumed; baseline history when the learned curve has measured spec-off step times of the route (before speculation was switched on, or after it was off), none when its split between target and speculation cost is the prior's.
step_time_fit_points                         gauge     experimental sidecar route,target                                   -                          | Windows behind the route's learned step-time curve (exponentially forgotten).
step_time_fit_residual_ratio                 gauge     experimental sidecar route,target                                   -                          | Spread of the measured step times around the route's learned curve: exp(weighted RMS of log(measured/fitted)) - 1, over the forgotten points.
step_time_predicted_seconds                  gauge     experimental sidecar route,target                                   -                          | Engine step time the cost model in use predicts at the route's last measured load.
step_time_observed_seconds                   gauge     experimental sidecar route,target                                   -                          | Mean engine step time measured at that load (ITL sum / ITL count).
step_time_curve_seconds                      gauge     experimental sidecar route,target/tokens                            -                          | The route's learned step-time curve: the plain engine step time over `tokens` query tokens, one sample per knot.
target_up                                    gauge     stable       sidecar target                                         -                          | 1 if the last poll of the vLLM target succeeded and parsed, else 0.
scrape_duration_seconds                      gauge     stable       sidecar target                                         -                          | Duration of the last poll of the target.
scrape_errors                                counter   stable       sidecar target/reason                                  -                          | Failed polls of the target by reason (timeout, connect, tls, http_status, too_large, parse, invalid, engine_mismatch: the payload is another engine than the target's pinned engine).
payload_dropped                              counter   experimental sidecar target/limit                                   -                          | Routes and engines the target's payloads carried past specwatch's bounds, dropped, summed over polls (limit: routes = routes per target, engines = engines per route).
target_restarts                              counter   stable       sidecar target                                         -                          | Polls in which the target's counters were seen to restart (value drop or new _created), i.e. vLLM restarts.
target_dips                                  counter   experimental sidecar target                                         -                          | Polls in which a counter of the target read below its highest value without a restart (same _created, or a drop within noise without _created): clamped, not a restart.
last_scrape_success_timestamp_seconds        gauge     stable       sidecar target                                         -                          | Unix time of the last successful poll of the target.
prometheus_up                                gauge     stable       fleet   -                                              -                          | 1 if the last poll's queries all succeeded, else 0.
prometheus_queries                           counter   experimental fleet   -                                              -                          | Queries sent to the Prometheus query API.
prometheus_queries_per_poll                  gauge     experimental fleet   -                                              -                          | Queries per evaluation (windows + 1; independent of the number of replicas).
prometheus_query_errors                      counter   stable       fleet   -/reason                                       -                          | Failed polls of the query API by reason ({query_reasons}).
prometheus_query_duration_seconds            gauge     experimental fleet   -                                              -                          | Duration of the last poll's queries.
prometheus_last_success_timestamp_seconds    gauge     stable       fleet   -                                              -                          | Unix time (evaluation time) of the last successful poll.
prometheus_answer_series                     gauge     experimental fleet   -                                              -                          | Series in the last successful poll's window answers (0: the selector matches nothing).
stale_replicas                               gauge     stable       fleet   -                                              -                          | Replica routes whose newest sample is older than two scrape intervals (values not served).
stale_replica_evaluations                    counter   experimental fleet   -                                              -                          | Evaluations skipped because the replica was stale.
route_info                                   gauge     stable       both    route,target/model_name,method,schema,engine   -                          | Route metadata: model, speculative method as configured, the metric schema and the serving engine spoken.
route_expects_speculation                    gauge     stable       sidecar route,target                                   -                          | 1 if the route is configured to run speculative decoding.
baseline_itl_p99_seconds                     gauge     stable       both    route,target                                   -                          | Configured spec-off P99 ITL baseline of the route.
drafts                                       counter   stable       sidecar route,target                                   -                          | vLLM speculative drafts{mirrored}
draft_tokens                                 counter   stable       sidecar route,target                                   -                          | Proposed draft tokens{mirrored}
accepted_tokens                              counter   stable       sidecar route,target                                   -                          | Accepted draft tokens{mirrored}
generation_tokens                            counter   stable       sidecar route,target                                   -                          | Generated output tokens{mirrored}
accepted_tokens_by_position                  counter   stable       sidecar route,target/position                          -                          | Drafts whose token at this position was accepted{mirrored}
itl_seconds                                  histogram stable       sidecar route,target                                   -                          | vLLM's per-step inter-token latency histogram (its buckets){mirrored}
acceptance_ratio                             gauge     stable       both    route,target,window                            acceptance_rate            | Accepted / proposed draft tokens over the window (alpha).{window}
mean_acceptance_length_tokens                gauge     stable       both    route,target,window                            mean_acceptance_length     | Tokens emitted per speculative step over the window, bonus token included (tau).{window}
draft_length_tokens                          gauge     stable       both    route,target,window                            draft_length               | Mean proposed draft length K over the window (draft tokens / drafts).{window}
batch_size_requests                          gauge     stable       both    route,target,window                            batch_size                 | Live batch size per engine over the window (requests decoded per engine step).{window}
itl_p50_seconds                              gauge     stable       both    route,target,window                            itl_p50_seconds            | P50 of vLLM's per-step inter-token latency over the window (histogram_quantile semantics).{window}
itl_p99_seconds                              gauge     stable       both    route,target,window                            itl_p99_seconds            | P99 of vLLM's per-step inter-token latency over the window (histogram_quantile semantics).{window}
itl_per_token_mean_seconds                   gauge     stable       both    route,target,window                            itl_per_token_mean_seconds | Mean inter-token latency per generated token over the window (ITL sum / generation tokens).{window}
breakeven_acceptance_ratio                   gauge     stable       both    route,target,window                            breakeven_acceptance_rate  | Acceptance rate at which speculation exactly pays at the live batch size and K (cost model), capped at 1: at 1 no acceptance rate pays (see specwatch_speculation_cannot_pay; the uncapped value is in /api/v1/status).{window}
acceptance_margin                            gauge     stable       both    route,target,window                            acceptance_margin          | Acceptance rate minus the break-even acceptance rate.{window}
expected_speedup                             gauge     stable       both    route,target,window                            expected_speedup           | Expected decode speedup of speculation at the live batch size (cost model; 1 = break-even).{window}
expected_speedup_lower                       gauge     stable       both    route,target,window                            expected_speedup_lower     | Lower bound of the expected speedup's interval at decision.confidence (the model's calibration error or learned residual, and alpha's sampling noise).{window}
expected_speedup_upper                       gauge     stable       both    route,target,window                            expected_speedup_upper     | Upper bound of the expected speedup's interval at decision.confidence; disable is given only when it is below 1.{window}
loss_probability                             gauge     stable       both    route,target,window                            loss_probability           | Probability that speculation loses at the live batch size (true speedup < 1), from the same interval as specwatch_expected_speedup_lower/_upper: a warning while the verdict still needs the interval clear of 1 (SpecDecodeProbablyLosing fires at 0.8).{window}
recommended_draft_length_tokens              gauge     stable       both    route,target,window                            recommended_draft_length   | Draft length the recommendation gives at the live batch size: the current K for keep and undecided, 0 for disable.{window}
max_speculative_batch_size_requests          gauge     stable       both    route,target,window                            max_speculative_batch_size | Largest batch size at which the current acceptance rate still pays.{window}
speculation_cannot_pay                       gauge     stable       both    route,target,window                            -                          | 1 when no acceptance rate pays at the live batch size and K (break-even >= 1), else 0.{window}
position_acceptance_ratio                    gauge     stable       both    route,target,window/position                   -                          | Share of drafts whose token at this position was accepted, over the window (p_i).{window}
window_drafts                                gauge     stable       both    route,target,window                            -                          | Speculative drafts in the window (the sample behind the ratios).{window}
verdict                                      gauge     stable       both    route,target,window/verdict                    -                          | 1 for the route's current verdict (spec_off, insufficient_data, undecided, keep, shorten, disable), 0 for the others; undecided: the speedup's interval spans 1, see the status JSON's measurement.
recommended_config_info                      gauge     stable       both    route,target,window/config,action              -                          | What to do with --speculative-config (value always 1): action apply = paste config (complete), merge = merge config's keys into yours (drafter's model path unknown), remove_speculative_config, no_change, measure = undecided, run the measurement in the status JSON (config: the --speculative-config to restart with when it is a shorter K, else the measurement's kind, spec_off_canary or near_breakeven).
speculative_config_mismatch                  gauge     stable       both    route,target,window                            -                          | 1 when the observed draft length is not what the stated draft.config (its num_speculative_tokens_per_batch_size schedule) gives at the live batch, else 0; absent without draft.config or enough drafts.{window}
configured_draft_length_tokens               gauge     stable       both    route,target,window                            -                          | Draft length K the stated draft.config gives at the live batch size.{window}
speculation_controller_info                  gauge     experimental both    route,target/mode,stated,reason                -                          | The controller of the draft length K the engine runs (value always 1): mode fixed, schedule (a stated batch schedule), adaptive (stated: vLLM's enable_adaptive_verification, SGLang's speculative_adaptive; or observed: K moves at one batch size), gated (TensorRT-LLM's acceptance_rate_threshold stated, not fired) or stopped (speculation configured but not drafting as configured; reason gate_fired, schedule_dropped, schedule_at_zero, acceptance_collapsed or not_drafting, empty otherwise); stated: what draft.config says (none without one). The evidence is in /api/v1/status (routes[].controller). Never stopped without the engine's spec-decode counters (that is specwatch_route_expects_speculation without specwatch_drafts_total).
controller_gain_ratio                        gauge     experimental both    route,target,window                            controller_gain_ratio      | Decode speed per request that the engine's own controller of K delivers (vLLM's adaptive verification or batch schedule, SGLang's speculative_adaptive, stated in draft.config) over the same steps without speculation: tokens per request-step times the spec-off step (learned curve, else the prior, with the prefill riding along) over the measured step. Replaces expected_speedup's reading of one fixed K's break-even for these routes: a falling acceptance rate with faster decoding is no loss. Absent for a fixed K.{window}
controller_gain_ratio_lower                  gauge     experimental both    route,target,window                            controller_gain_ratio_lower | Lower bound of specwatch_controller_gain_ratio's interval at decision.confidence (the plain step's model error and the noise of the window's mean step).{window}
controller_gain_ratio_upper                  gauge     experimental both    route,target,window                            controller_gain_ratio_upper | Upper bound of specwatch_controller_gain_ratio's interval at decision.confidence: below 1 the controller clearly loses to no speculation (SpecDecodeControllerLosing, critical).{window}
controller_loss_probability                  gauge     experimental both    route,target,window                            controller_loss_probability | Probability that the engine's controller of K decodes slower than no speculation (true gain < 1), from the same interval as specwatch_controller_gain_ratio_lower/_upper (SpecDecodeControllerLosing, warning, at 0.8).{window}
controller_best_fixed_k_gain_ratio           gauge     experimental both    route,target,window                            controller_best_fixed_k_gain_ratio | specwatch_controller_gain_ratio over the speedup of the best fixed K at the live batch (cost model, from the window's per-position acceptance; 1 when no K pays): above 1 the controller beats any K a user could fix there.{window}
acceptance_basis_info                        gauge     experimental both    route,target,window/basis                      -                          | 1 for a window whose acceptance rate, acceptance length and draft length are not ratios of its counters: basis engine_gauge_mean = the mean of the engine's own gauge estimate over the window's active polls (an engine exporting only gauges, docs/engines.md).{window}
advice_predicted_gain_ratio                  gauge     stable       sidecar route,target                                   -                          | After the latest change of draft length or method: decode speed per request the cost model predicted for the new config over the old one, from the window before the change.
advice_measured_gain_ratio                   gauge     stable       sidecar route,target                                   -                          | After the latest change of draft length or method: measured decode speed per request after over before (ITL per token before / after).
advice_before_span_seconds                   gauge     experimental sidecar route,target/method                            -                          | Span of the route's latest longest window at the current draft length and method (label method): the before-window a change would be graded against, whose values are the specwatch_advice_before_* families.
advice_before_draft_length_tokens            gauge     experimental sidecar route,target/method                            -                          | Mean proposed draft length K over that before-window.
advice_before_acceptance_ratio               gauge     experimental sidecar route,target/method                            -                          | Accepted / proposed draft tokens over that before-window (alpha); absent when unknown.
advice_before_batch_size_requests            gauge     experimental sidecar route,target/method                            -                          | Live batch size per engine over that before-window (requests decoded per engine step).
advice_before_mean_acceptance_length_tokens  gauge     experimental sidecar route,target/method                            -                          | Tokens emitted per speculative step over that before-window, bonus token included (tau).
advice_before_itl_p99_seconds                gauge     experimental sidecar route,target/method                            -                          | P99 of vLLM's per-step inter-token latency over that before-window; absent when unknown.
advice_before_itl_per_token_mean_seconds     gauge     experimental sidecar route,target/method                            -                          | Mean inter-token latency per generated token over that before-window.
advice_before_drafts                         gauge     experimental sidecar route,target/method                            -                          | Speculative drafts in that before-window (the sample behind its ratios).
advice_before_position_acceptance_ratio      gauge     experimental sidecar route,target/position                          -                          | Share of drafts whose token at this position was accepted over that before-window (p_i; see specwatch_advice_before_span_seconds).
fleet_acceptance_ratio                       gauge     stable       fleet   route,window                                   -                          | Token-weighted acceptance rate of the route over its replicas (sum accepted / sum proposed).{fleet}
fleet_losing_tokens_ratio                    gauge     stable       fleet   route,window                                   -                          | Share of the route's decode tokens served by replicas where speculation loses (expected speedup < 1).{fleet}
fleet_replicas                               gauge     stable       fleet   route,window/verdict                           -                          | Replicas of the route per current verdict.{fleet}
advice_predicted_gain_ratio                  gauge     stable       fleet   route,{deployment}                             -                          | After the latest change of draft length or method: decode speed per request the cost model predicted for the new config over the old one, from the window before the change.
advice_measured_gain_ratio                   gauge     stable       fleet   route,{deployment}                             -                          | After the latest change of draft length or method: measured decode speed per request after over before (ITL per token before / after).
fleet_cost_model_info                        gauge     experimental fleet   route/source,baseline                          -                          | What the route's verdicts rest on: source default, preset, profile or learned (the step-time curve fitted from its replicas' metrics); baseline canary (spec-off replicas of the route measure the target's own step time), history (its spec-off windows from before speculation was switched on, or after it was off) or none (the split between target and speculation cost is the prior's).{fleet}
poll_errors                                  counter   experimental both    -                                              -                          | Poll-loop failures that were not target faults (a bug): each is logged and the loop recovers in process, restarting its windows from the running config (exported counters continue).
config_last_reload_successful                gauge     stable       both    -                                              -                          | 1 if the last config load (start, SIGHUP or file change) succeeded, 0 if it was refused (the previous config, or none in sidecar mode, keeps running).
config_last_reload_success_timestamp_seconds gauge     stable       both    -                                              -                          | Unix time of the last successful config load.
readback_errors                              counter   experimental sidecar -/reason                                       -                          | Failed read-backs of the previous pod's series, by reason; implausible and disagrees: restored state dropped (out of the lookback or of a server's magnitudes; disagreeing with the first live windows).
readback_restored_routes                     gauge     experimental sidecar -                                              -                          | Routes whose before-window was read back from the previous pod at start.
history_steps                                gauge     experimental fleet   -                                              -                          | Steps of the history before the start (prometheus.history_lookback, on backtest's grid) replayed into the learners, verdicts and rollout grader when the fleet evaluator was built; none of them is served.
history_errors                               counter   experimental fleet   -/reason                                       -                          | History reads at start that failed or were cut short (timeout: past their time budget; budget: past their query cap), by reason ({query_reasons}, budget); the fleet then polls live with what was read.
"""


@dataclass(frozen=True)
class Family:
    name: str
    type: Type
    help: str
    modes: frozenset[Mode]
    key: tuple[str, ...] = ()
    own: tuple[str, ...] = ()
    value: NumericValue | None = None
    stability: Stability = "experimental"

    def labels(self, replica: Sequence[str] = (), deployment: Sequence[str] = ()) -> list[str]:
        # Replica labels belong to what a replica exports, the rows keyed by target; deployment
        # labels to what is kept per deployment, the rows whose key names DEPLOYMENT.
        key = [label for name in self.key for label in (deployment if name == DEPLOYMENT else (name,))]
        return [*key, *(replica if "target" in self.key else ()), *self.own]

    def new(self, replica: Sequence[str] = (), deployment: Sequence[str] = ()) -> Metric:
        return Metric(self.name, self.help, self.type, self.labels(replica, deployment))

    def sample_names(self) -> tuple[str, ...]:
        if self.type == "counter":
            return (self.name + "_total",)
        if self.type == "histogram":
            return tuple(f"{self.name}_{suffix}" for suffix in ("bucket", "sum", "count"))
        return (self.name,)


def _family(row: str) -> Family:
    head, text = row.split(" | ", 1)
    name, kind, stability, modes, labels, value = head.split()
    key, _, own = labels.partition("/")
    if kind not in _TYPES or stability not in STABILITIES or modes not in MODES or value not in (*NUMERIC_VALUES, "-"):
        raise ValueError(f"metric contract row {name}: unknown type, stability, modes or value")
    return Family(
        "specwatch_" + name,
        cast(Type, kind),
        text.format(**NOTES),
        MODES[modes],
        tuple(key.split(",")) if key != "-" else (),
        tuple(own.split(",")) if own else (),
        None if value == "-" else cast(NumericValue, value),
        stability,
    )


FAMILIES = tuple(_family(row) for row in _ROWS.strip().splitlines()[1:])
#: A name with a row per mode (its labels differ between them) maps to its first row.
BY_NAME = {family.name: family for family in reversed(FAMILIES)}
#: The families filled from one evaluation of a route's window, in both modes.
WINDOW_FAMILIES = tuple(family for family in FAMILIES if family.key == WINDOW)
#: Filled by the service's own collectors; the sidecar's and the fleet's fill the others of their mode.
SERVICE_FAMILIES = frozenset(
    {
        "specwatch_poll_errors",
        "specwatch_config_last_reload_successful",
        "specwatch_config_last_reload_success_timestamp_seconds",
        "specwatch_readback_errors",
        "specwatch_readback_restored_routes",
        "specwatch_history_steps",
        "specwatch_history_errors",
    }
)
#: The before-window a change would be graded against (verdict.grading's SUMMARY_QUANTITIES), one
#: family per quantity so that each family has one unit: what the sidecar exports and reads back.
BEFORE_WINDOW: dict[str, str] = {
    "span_seconds": "specwatch_advice_before_span_seconds",
    "draft_length": "specwatch_advice_before_draft_length_tokens",
    "acceptance_rate": "specwatch_advice_before_acceptance_ratio",
    "batch_size": "specwatch_advice_before_batch_size_requests",
    "tokens_per_step": "specwatch_advice_before_mean_acceptance_length_tokens",
    "itl_p99_seconds": "specwatch_advice_before_itl_p99_seconds",
    "itl_per_token_seconds": "specwatch_advice_before_itl_per_token_mean_seconds",
    "drafts": "specwatch_advice_before_drafts",
}
BEFORE_POSITIONS = "specwatch_advice_before_position_acceptance_ratio"
#: Yielded only with a sample: vLLM's payload (every window a ratio of counters) keeps its families as
#: they were.
ONLY_WITH_SAMPLES = frozenset({"specwatch_acceptance_basis_info"})


class Families:
    """Fresh families of one mode's collector, in table order, to be filled and then all yielded."""

    def __init__(self, mode: Mode, replica: Sequence[str] = (), deployment: Sequence[str] = ()):
        self._families = {
            family.name: family.new(replica, deployment)
            for family in FAMILIES
            if mode in family.modes and family.name not in SERVICE_FAMILIES
        }

    def add(self, name: str, labels: Sequence[str], value: float | None) -> None:
        """One sample; none while the value is unknown (absent, never 0)."""
        if value is None:
            return
        family = self._families[name]
        assert family.type != "histogram", name
        family.add_metric(labels, value)

    def add_histogram(
        self, name: str, labels: Sequence[str], buckets: Sequence[tuple[str, float]], total: float
    ) -> None:
        family = self._families[name]
        assert family.type == "histogram", name
        family.add_histogram(labels, buckets, total)

    def __iter__(self) -> Iterator[Metric]:
        return iter(f for f in self._families.values() if f.samples or f.name not in ONLY_WITH_SAMPLES)


def single(name: str, value: float) -> Metric:
    """An unlabelled family of the contract with its one sample."""
    family = BY_NAME[name].new()
    assert family.type != "histogram", name
    family.add_metric([], value)
    return family


def filled(name: str, samples: Iterable[tuple[Sequence[str], float]]) -> Metric:
    """A family of the contract (a service's own, keyed by its own labels only) with these samples."""
    family = BY_NAME[name].new()
    assert family.type != "histogram", name
    for labels, value in samples:
        family.add_metric(labels, value)
    return family


def exported(mode: Mode) -> tuple[Family, ...]:
    return tuple(family for family in FAMILIES if mode in family.modes)


def stable_list(families: Iterable[Family] = FAMILIES) -> str:
    """The stable families, one `name type modes labels` line per row, as tests/golden/stable_metrics.txt
    holds them (a family whose labels differ between the modes has a line per mode)."""
    lines = []
    for family in families:
        if family.stability == "stable":
            modes = ",".join(mode for mode in ("sidecar", "fleet") if mode in family.modes)
            labels = ",".join(family.labels(deployment=(DEPLOYMENT,))) or "-"
            name = family.name + ("_total" if family.type == "counter" else "")  # as /metrics's TYPE line names it
            lines.append(f"{name} {family.type} {modes} {labels}")
    return "\n".join(lines) + "\n"
