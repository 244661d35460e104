"""Before/after grading: when the server's speculation changes (the user applied a recommendation,
or any config change), compare what the sidecar predicted with what the server then measured.

A change is seen as a change of the observed draft length K (Δdraft_tokens / Δdrafts over the
shortest window, 0 when speculation is off or a K=0 band covers the live batch) by more than
max(0.5, 15 %), or of an explicitly configured method. Then:

- before: the summary of the last longest window that ended before the change (tokens per step,
  step time, ITL P99, tokens per engine step, decode speed per request);
- predicted gain: the cost model's speedup for the new K over its speedup for the old K, from the
  before window's per-position acceptance and batch only (the prediction the sidecar could have
  made before the change);
- after: the longest window that lies entirely after the change, once it holds `min_drafts`
  drafts (or, with speculation off, as many generated tokens);
- measured gain: decode speed per request after over before (= ITL per token before / after).

The decode speed per request is 1 / (ITL sum / generated tokens): what a user of the route sees,
and what the cost model's speedup predicts at a given batch. When the batch moved by more than
20 % between the two windows the gain mixes load and config; the record says so.

State per route lives in an AdviceGrader; everything it computes is a pure function of the
WindowStats it is fed.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from specwatch import costmodel
from specwatch.windows.derive import WindowStats

#: A change of observed K larger than this (absolute, or relative to K) is a config change.
K_CHANGE_ABSOLUTE = 0.5
K_CHANGE_RELATIVE = 0.15
#: Batch movement between before and after beyond which the measured gain is flagged.
BATCH_SHIFT_NOTE = 0.2
#: Before-window candidates kept (one per evaluation): enough to reach back one short window.
HISTORY = 64


@dataclass(frozen=True)
class WindowSummary:
    """What one window says about the server's decode speed."""

    t: float
    window: str
    span_seconds: float
    method: str
    draft_length: float  # observed K, 0 without drafts
    acceptance_rate: float | None
    position_rates: tuple[float, ...] | None
    batch_size: float
    tokens_per_step: float  # tokens one request gains per engine step (1 without speculation)
    step_time_seconds: float  # mean engine step time (ITL per step)
    itl_p99_seconds: float | None
    itl_per_token_seconds: float
    tokens_per_engine_step: float  # batch x tokens_per_step
    drafts: float

    @property
    def tokens_per_second_per_request(self) -> float:
        return 1.0 / self.itl_per_token_seconds

    def as_dict(self) -> dict[str, object]:
        return {
            "t": self.t,
            "window": self.window,
            "span_seconds": self.span_seconds,
            "method": self.method,
            "draft_length": self.draft_length,
            "acceptance_rate": self.acceptance_rate,
            "batch_size": self.batch_size,
            "tokens_per_step": self.tokens_per_step,
            "step_time_seconds": self.step_time_seconds,
            "itl_p99_seconds": self.itl_p99_seconds,
            "tokens_per_engine_step": self.tokens_per_engine_step,
            "tokens_per_second_per_request": self.tokens_per_second_per_request,
            "drafts": self.drafts,
        }


def observed_draft_length(stats: WindowStats, min_drafts: float) -> float | None:
    """K over the window: 0 when nothing was drafted while tokens were generated, None when the
    window has some drafts but too few to measure K (or no decode at all)."""
    drafts = stats.drafts or 0.0
    if drafts >= min_drafts and stats.draft_length is not None:
        return float(stats.draft_length)
    if drafts == 0 and (stats.generation_tokens or 0.0) >= min_drafts:
        return 0.0
    return None


def summarize(stats: WindowStats, method: str, min_drafts: float) -> WindowSummary | None:
    """The window's decode summary, or None when it lacks a measured K, ITL or batch."""
    k = observed_draft_length(stats, min_drafts)
    itl = stats.itl_per_token_mean_seconds
    if k is None or itl is None or not math.isfinite(itl) or itl <= 0 or not stats.batch_size:
        return None
    gained = 0.0
    if k > 0 and stats.mean_acceptance_length is not None:
        coverage = stats.draft_coverage if stats.draft_coverage is not None else 1.0
        gained = coverage * (stats.mean_acceptance_length - 1.0)
    tokens_per_step = 1.0 + gained
    return WindowSummary(
        t=stats.t,
        window=stats.window,
        span_seconds=stats.span_seconds,
        method=method,
        draft_length=k,
        acceptance_rate=stats.acceptance_rate if k > 0 else None,
        position_rates=stats.position_rates if k > 0 else None,
        batch_size=float(stats.batch_size),
        tokens_per_step=tokens_per_step,
        step_time_seconds=tokens_per_step * itl,
        itl_p99_seconds=stats.itl_p99_seconds,
        itl_per_token_seconds=itl,
        tokens_per_engine_step=float(stats.batch_size) * tokens_per_step,
        drafts=stats.drafts or 0.0,
    )


def predicted_gain(cm: costmodel.CostModel, before: WindowSummary, new_k: float) -> float | None:
    """Speedup at the new K over the speedup at the old K, both from the before window's
    acceptance and batch. None when the before window gives no acceptance to predict from."""

    def speedup(k: float) -> float | None:
        kk = round(k)
        if kk <= 0:
            return 1.0
        rates = before.position_rates
        if rates and len(rates) >= kk:
            return costmodel.expected_speedup_for_positions(cm, before.batch_size, rates[:kk])
        if before.acceptance_rate is None or before.draft_length <= 0:
            return None
        extended = costmodel.position_rates_from_alpha(
            before.acceptance_rate, max(1, round(before.draft_length)), extend_to=kk
        )
        return costmodel.expected_speedup_for_positions(cm, before.batch_size, extended[:kk])

    old, new = speedup(before.draft_length), speedup(new_k)
    if old is None or new is None or old <= 0:
        return None
    return new / old


@dataclass(frozen=True)
class Grading:
    """The latest graded (or pending) change of one route."""

    changed_at: float
    before: WindowSummary
    new_draft_length: float | None = None
    after: WindowSummary | None = None
    predicted_gain_ratio: float | None = None
    method_before: str = ""
    method_after: str = ""

    @property
    def status(self) -> str:
        return "graded" if self.after is not None else "waiting_for_after_window"

    @property
    def measured_gain_ratio(self) -> float | None:
        if self.after is None:
            return None
        return self.after.tokens_per_second_per_request / self.before.tokens_per_second_per_request

    def as_dict(self) -> dict[str, object]:
        before, after = self.before, self.after
        measured: dict[str, float | None] | None = None
        notes: list[str] = []
        if after is not None:
            measured = {
                "gain_ratio": self.measured_gain_ratio,
                "tokens_per_step_ratio": after.tokens_per_step / before.tokens_per_step,
                "step_time_ratio": after.step_time_seconds / before.step_time_seconds,
                "itl_p99_ratio": (
                    after.itl_p99_seconds / before.itl_p99_seconds
                    if after.itl_p99_seconds and before.itl_p99_seconds
                    else None
                ),
                "tokens_per_engine_step_ratio": after.tokens_per_engine_step / before.tokens_per_engine_step,
            }
            if abs(after.batch_size / before.batch_size - 1.0) > BATCH_SHIFT_NOTE:
                notes.append(
                    f"batch moved {before.batch_size:.1f} -> {after.batch_size:.1f}: "
                    "the measured gain mixes the load change with the config change"
                )
            predicted = self.predicted_gain_ratio
            gain = self.measured_gain_ratio
            if predicted is not None and gain is not None:
                measured["prediction_error"] = gain / predicted - 1.0
        return {
            "status": self.status,
            "changed_at": self.changed_at,
            "change": {
                "draft_length_before": before.draft_length,
                "draft_length_after": self.new_draft_length,
                "method_before": self.method_before,
                "method_after": self.method_after or None,
            },
            "before": before.as_dict(),
            "after": after.as_dict() if after is not None else None,
            "predicted_gain_ratio": self.predicted_gain_ratio,
            "measured": measured,
            "notes": notes,
        }


def _explicit(method: str) -> bool:
    """A configured method; an inferred one ("auto:...") can flip on thin data and is not a change."""
    return not method.startswith("auto")


class AdviceGrader:
    """Watches one route's windows for a change of K or method and grades the change."""

    def __init__(self) -> None:
        self._regime_k: float | None = None
        self._regime_method: str | None = None
        self._regime_since = -math.inf  # windows starting before this mix two regimes
        self._history: deque[WindowSummary] = deque(maxlen=HISTORY)
        self.grading: Grading | None = None

    def observe(
        self, t: float, windows: Sequence[WindowStats], method: str, min_drafts: float, cost_model: costmodel.CostModel
    ) -> Grading | None:
        """Feed one evaluation's windows (any order); returns the route's current grading."""
        ordered = sorted(windows, key=lambda s: s.span_seconds)
        if not ordered:
            return self.grading
        shortest = ordered[0]
        k_now = observed_draft_length(shortest, min_drafts)
        if k_now is None:
            return self.grading
        if self._regime_k is None:
            if shortest.t - shortest.span_seconds >= self._regime_since:
                self._settle(t, ordered, k_now, method, min_drafts, cost_model)
            return self.grading
        if self._changed(k_now, method):
            self._on_change(t, shortest, method)
            return self.grading
        # Same regime: remember the longest clean window as a before candidate.
        clean = [s for s in ordered if s.t - s.span_seconds >= self._regime_since]
        if clean:
            summary = summarize(clean[-1], method, min_drafts)
            if summary is not None and not self._changed(summary.draft_length, method):
                self._history.append(summary)
        self._grade_after(ordered, method, min_drafts)
        return self.grading

    def _changed(self, k: float, method: str) -> bool:
        assert self._regime_k is not None
        limit = max(K_CHANGE_ABSOLUTE, K_CHANGE_RELATIVE * self._regime_k)
        method_changed = (
            self._regime_method is not None
            and _explicit(method)
            and _explicit(self._regime_method)
            and method != self._regime_method
        )
        return abs(k - self._regime_k) > limit or method_changed

    def _on_change(self, t: float, shortest: WindowStats, method: str) -> None:
        # The change happened inside the shortest window: the before window must end before it.
        change_start = shortest.t - shortest.span_seconds
        before = next((s for s in reversed(self._history) if s.t <= change_start), None)
        self.grading = (
            Grading(changed_at=change_start, before=before, method_before=before.method) if before is not None else None
        )
        self._regime_k = None
        self._regime_method = None
        self._regime_since = t  # windows must start after the detection to be "after"
        self._history.clear()

    def _settle(
        self,
        t: float,
        ordered: Sequence[WindowStats],
        k_now: float,
        method: str,
        min_drafts: float,
        cost_model: costmodel.CostModel,
    ) -> None:
        """The first window after a change (or at start) fixes the new regime and the prediction."""
        self._regime_k = k_now
        self._regime_method = method
        if self.grading is not None and self.grading.new_draft_length is None:
            self.grading = Grading(
                changed_at=self.grading.changed_at,
                before=self.grading.before,
                new_draft_length=k_now,
                predicted_gain_ratio=predicted_gain(cost_model, self.grading.before, k_now),
                method_before=self.grading.method_before,
                method_after=method,
            )
        self._grade_after(ordered, method, min_drafts)

    def _grade_after(self, ordered: Sequence[WindowStats], method: str, min_drafts: float) -> None:
        """Refresh `after` from the longest window entirely after the change."""
        grading = self.grading
        if grading is None or grading.new_draft_length is None:
            return
        if grading.after is not None and grading.after.span_seconds >= ordered[-1].span_seconds:
            return  # graded on the longest window already: keep that answer
        for stats in reversed(ordered):
            if stats.t - stats.span_seconds < self._regime_since:
                continue
            summary = summarize(stats, method, min_drafts)
            if summary is not None:
                if grading.after is None or summary.span_seconds >= grading.after.span_seconds:
                    self.grading = Grading(
                        changed_at=grading.changed_at,
                        before=grading.before,
                        new_draft_length=grading.new_draft_length,
                        after=summary,
                        predicted_gain_ratio=grading.predicted_gain_ratio,
                        method_before=grading.method_before,
                        method_after=grading.method_after,
                    )
                return
