"""The grouped PromQL that fleet mode evaluates: a constant number of queries per poll.

One query per window returns, for every replica at once, each counter's increase over the window
grouped by the replica labels + model_name + engine (+ position, + le), tagged with a
`specwatch_family` label; one more query returns each replica's newest sample time. The count is
len(windows) + 1 whatever the number of replicas, models or engines.

Counter increase. The sidecar's window increase is the plain difference between the first and the
last sample inside [now - w, now] (reset-aware). `increase()` is not that: it extrapolates the
difference to the window edges (by up to 1.1 average scrape intervals on each side, or half an
interval past a gap), so at w = 5m and a 30s scrape it reports ~10/9 of the counted tokens, and
its "do not extrapolate below zero" clamp differs per series right after a counter starts. The
factor cancels in alpha, tau, K, p_i, the batch and the ITL quantiles (ratios of counters scraped
together), but not in the min_drafts guard or the exported window draft count. So a series with
no reset in the window is read exactly as the sidecar reads it, max_over_time − min_over_time of a
monotonic counter; only a series that reset inside the window falls back to increase()
(Prometheus's reset rule: a drop restarts from 0). Lookback: `timestamp()` of the running gauge
is the newest sample at or before `now` within the query lookback (5m by default) and disappears
at once when Prometheus wrote a staleness marker (a failed scrape, a vanished target).
Step alignment: a range query evaluates exactly at start + n·step, so backtest windows are the
same closed intervals the sidecar uses. Prometheus 2.x range selectors are closed at both ends,
as the sidecar's window; Prometheus 3.x excludes a sample exactly at now − w (with aligned
timestamps, one sample fewer than the sidecar).
"""

from __future__ import annotations

from dataclasses import dataclass

from specwatch.config import format_duration
from specwatch.engines import vllm

FAMILY_LABEL = "specwatch_family"
SCHEMA_LABEL = "specwatch_schema"

# Canonical family -> vLLM series (V1 wire names; counters are always exposed with _total).
DRAFTS = "drafts"
DRAFT_TOKENS = "draft_tokens"
ACCEPTED = "accepted"
ACCEPTED_PER_POS = "accepted_per_pos"
GENERATION = "generation"
ITL_BUCKET = "itl_bucket"
ITL_SUM = "itl_sum"
ITL_COUNT = "itl_count"
STEPS = "steps"
RUNNING_MEAN = "running_mean"
SAMPLES = "samples"
LAST_SAMPLE = "last_sample"

# The vLLM series behind each family: vllm.py's names (the sidecar's), as stored by Prometheus.
COUNTER_SERIES: dict[str, str] = {
    family: f"{name}_total"
    for family, name in (
        (DRAFTS, vllm.DRAFTS),
        (DRAFT_TOKENS, vllm.DRAFT_TOKENS),
        (ACCEPTED, vllm.ACCEPTED),
        (ACCEPTED_PER_POS, vllm.ACCEPTED_PER_POS),
        (GENERATION, vllm.GENERATION),
    )
}
# A histogram despite the name: one observation per engine step.
COUNTER_SERIES[STEPS] = f"{vllm.ITERATION_TOKENS}_count"
# The per-step ITL histogram; vLLM <= 0.14 also (or only, <= 0.10.1) exports the same observations
# as time_per_output_token_seconds. The new name wins where both exist.
ITL_SERIES = vllm.ITL
ITL_LEGACY_SERIES = vllm.ITL_LEGACY
RUNNING_SERIES = vllm.RUNNING


@dataclass(frozen=True)
class QuerySet:
    """The queries of one evaluation: one per window label, plus the freshness query."""

    windows: tuple[tuple[str, float, str], ...]  # (label, seconds, PromQL)
    freshness: str

    @property
    def count(self) -> int:
        return len(self.windows) + 1


def _selector(name: str, matchers: str) -> str:
    return f"{name}{{{matchers}}}" if matchers else name


def _exact_increase(series: str, window: str) -> str:
    """last − first sample of a counter inside the window; increase() only across a reset."""
    ranged = f"{series}[{window}]"
    return f"(max_over_time({ranged}) - min_over_time({ranged}) unless resets({ranged}) > 0) or increase({ranged})"


def _tag(expr: str, family: str) -> str:
    return f'label_replace({expr}, "{FAMILY_LABEL}", "{family}", "", "")'


def window_query(window_seconds: float, matchers: str, replica_labels: tuple[str, ...]) -> str:
    """Every family's window increase (and the running gauge's mean and sample count), one query."""
    window = format_duration(window_seconds)
    group = ", ".join((*replica_labels, "model_name", "engine"))

    def summed(expr: str, extra: str = "") -> str:
        return f"sum by ({group}{extra}) ({expr})"

    parts = []
    for family, name in COUNTER_SERIES.items():
        extra = ", position" if family == ACCEPTED_PER_POS else ""
        parts.append(_tag(summed(_exact_increase(_selector(name, matchers), window), extra), family))
    for family, suffix, extra in ((ITL_BUCKET, "_bucket", ", le"), (ITL_SUM, "_sum", ""), (ITL_COUNT, "_count", "")):
        current = summed(_exact_increase(_selector(ITL_SERIES + suffix, matchers), window), extra)
        legacy = summed(_exact_increase(_selector(ITL_LEGACY_SERIES + suffix, matchers), window), extra)
        legacy = f'label_replace({legacy}, "{SCHEMA_LABEL}", "legacy", "", "")'
        parts.append(_tag(f"({current} or ignoring({SCHEMA_LABEL}) {legacy})", family))
    running = _selector(RUNNING_SERIES, matchers)
    parts.append(_tag(summed(f"avg_over_time({running}[{window}])"), RUNNING_MEAN))
    parts.append(_tag(summed(f"count_over_time({running}[{window}])"), SAMPLES))
    return "\n or ".join(parts)


def freshness_query(matchers: str, replica_labels: tuple[str, ...]) -> str:
    """Each replica's newest sample time (absent once Prometheus marked the replica stale)."""
    group = ", ".join(replica_labels)
    return f"max by ({group}) (timestamp({_selector(RUNNING_SERIES, matchers)}))"


def query_set(
    windows: tuple[float, ...], labels: tuple[str, ...], matchers: str, replica_labels: tuple[str, ...]
) -> QuerySet:
    return QuerySet(
        tuple(
            (label, seconds, window_query(seconds, matchers, replica_labels))
            for label, seconds in zip(labels, windows, strict=False)
        ),
        freshness_query(matchers, replica_labels),
    )
