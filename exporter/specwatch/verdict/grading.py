"""Before/after grading: when the server's speculation changes (the user applied a recommendation,
or any config change), compare what the sidecar predicted with what the server then measured.

A change is seen as a change of the observed draft length K (Δdraft_tokens / Δdrafts over the
shortest window, 0 when speculation is off or a K=0 band covers the live batch) by more than
max(0.5, 15 %), or of an explicitly configured method. K moving along a stated plan is no change:
with a batch schedule in `draft.config` (num_speculative_tokens_per_batch_size) or an engine that
picks K per step (vLLM's adaptive verification, SGLang's speculative_adaptive), a K the plan gives
at the window's batch, after a K it gave at the regime's batch, is the same configuration
(`KPlan`, `on_plan`); only a K the plan cannot give, or another method, is graded. Then:

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

Across a rollout (docs/rollouts.md) the change replaces the process: the sidecar restarts with its
pod. A restarted sidecar is given the previous pod's last before-window, read back from the
Prometheus that scraped it (`restore`, marked `origin="previous_pod"`); the first regime it settles
on is then graded against it when K or the method differ. Fleet mode sees old and new pods side by
side: RolloutGrader grades a route's new-regime replicas against its old-regime ones at the
nearest batch.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

from specwatch import costmodel
from specwatch.engines.advice import adapts_draft_length
from specwatch.engines.vllm_schedule import SpeculativeSchedule, schedule_from_config
from specwatch.windows.derive import WindowStats

#: A change of observed K larger than this (absolute, or relative to K) is a config change.
K_CHANGE_ABSOLUTE = 0.5
K_CHANGE_RELATIVE = 0.15
#: A window's mean batch hides steps at other batch sizes (load moving inside it): the K a plan
#: gives is looked up over batch sizes within this factor of the mean, either way.
PLAN_BATCH_FACTOR = 2.0
#: Batch movement between before and after beyond which the measured gain is flagged.
BATCH_SHIFT_NOTE = 0.2
#: Before-window candidates kept (one per evaluation): enough to reach back one short window.
HISTORY = 64
#: Where a before-window came from: this process's own windows, or the previous pod's (read back).
ORIGIN_THIS_PROCESS = "this_process"
ORIGIN_PREVIOUS_POD = "previous_pod"
#: The numbers of a WindowSummary that are exported (and read back), by the `quantity` label.
SUMMARY_QUANTITIES = (
    "span_seconds",
    "draft_length",
    "acceptance_rate",
    "batch_size",
    "tokens_per_step",
    "itl_p99_seconds",
    "itl_per_token_seconds",
    "drafts",
)


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
    origin: str = ORIGIN_THIS_PROCESS

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
            "origin": self.origin,
        }

    def quantities(self) -> dict[str, float]:
        """The exported numbers (SUMMARY_QUANTITIES); acceptance and P99 only when known."""
        values = {q: getattr(self, q) for q in SUMMARY_QUANTITIES}
        return {q: float(v) for q, v in values.items() if v is not None}


def restored_summary(
    quantities: Mapping[str, float], positions: Mapping[int, float], method: str, window: str, t: float
) -> WindowSummary | None:
    """A summary read back from the exported quantities (the previous pod's, last stored at Unix
    time `t`), or None when one is missing or out of range: a half-read or hostile answer must not
    become a baseline."""
    need = ("span_seconds", "draft_length", "batch_size", "tokens_per_step", "itl_per_token_seconds", "drafts")
    if any(q not in quantities or not math.isfinite(quantities[q]) for q in need):
        return None
    k, batch, tps, itl = (
        quantities[q] for q in ("draft_length", "batch_size", "tokens_per_step", "itl_per_token_seconds")
    )
    if not (0 <= k <= 64 and batch > 0 and 1 <= tps <= k + 1 and itl > 0 and quantities["span_seconds"] > 0):
        return None
    alpha = quantities.get("acceptance_rate")
    alpha = alpha if alpha is not None and 0 <= alpha <= 1 else None
    p99 = quantities.get("itl_p99_seconds")
    rates = tuple(positions[i] for i in range(len(positions))) if set(positions) == set(range(len(positions))) else ()
    usable = rates and all(0 <= r <= 1 for r in rates)
    return WindowSummary(
        t=t,
        window=window,
        span_seconds=quantities["span_seconds"],
        method=method,
        draft_length=k,
        acceptance_rate=alpha if k > 0 else None,
        position_rates=rates if usable and k > 0 else None,
        batch_size=batch,
        tokens_per_step=tps,
        step_time_seconds=tps * itl,
        itl_p99_seconds=p99 if p99 is not None and math.isfinite(p99) and p99 > 0 else None,
        itl_per_token_seconds=itl,
        tokens_per_engine_step=batch * tps,
        drafts=quantities["drafts"],
        origin=ORIGIN_PREVIOUS_POD,
    )


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


@dataclass(frozen=True)
class KPlan:
    """How the stated configuration moves K by itself: a batch schedule, or the engine's own
    controller (adaptive: any K from 1 to num_speculative_tokens, as the engine decides per step)."""

    schedule: SpeculativeSchedule
    adaptive: bool = False

    def k_range(self, batch: float | None) -> tuple[float, float]:
        """Lowest and highest K the plan drafts around this mean batch (PLAN_BATCH_FACTOR)."""
        top = float(self.schedule.num_speculative_tokens)
        if self.adaptive or self.schedule.adaptive:
            return 1.0, top
        if batch is None or not math.isfinite(batch) or batch <= 0:
            values = self.schedule.k_values
            return float(min(values)), float(max(values))
        low_batch = max(1, math.floor(batch / PLAN_BATCH_FACTOR))
        high_batch = max(low_batch, math.ceil(batch * PLAN_BATCH_FACTOR))
        points = {low_batch, high_batch}
        for e in self.schedule.entries:
            for b in (e.batch_low, e.batch_high, e.batch_high + 1):
                if low_batch <= b <= high_batch:
                    points.add(b)
        ranges = [self.schedule.k_range_at(b) for b in sorted(points)]
        low = float(min(r[0] for r in ranges))
        if self.schedule.one_sided:
            low = 0.0  # n-gram and suffix lookup may propose fewer tokens than the plan's K
        return low, float(max(r[1] for r in ranges))


def k_plan(config: Mapping[str, object] | None) -> KPlan | None:
    """The stated config's plan for K (draft.config), or None when it states one fixed K (or nothing)."""
    schedule = schedule_from_config(config)
    if schedule is None:
        return None
    adaptive = schedule.adaptive or adapts_draft_length(config)
    if not schedule.has_schedule and not adaptive:
        return None
    return KPlan(schedule, adaptive)


def on_plan(plan: KPlan | None, k: float, batch: float | None) -> bool:
    """Whether a window's observed K is one the plan drafts around its batch (within the K change
    tolerance): then K moved because the batch did, not because the configuration changed."""
    if plan is None:
        return False
    low, high = plan.k_range(batch)
    limit = max(K_CHANGE_ABSOLUTE, K_CHANGE_RELATIVE * high)
    return low - limit <= k <= high + limit


def regime_changed(k_before: float, method_before: str | None, k: float, method: str) -> bool:
    """K moved by more than max(0.5, 15 %), or an explicitly configured method changed."""
    limit = max(K_CHANGE_ABSOLUTE, K_CHANGE_RELATIVE * k_before)
    method_changed = (
        method_before is not None and _explicit(method) and _explicit(method_before) and method != method_before
    )
    return abs(k - k_before) > limit or method_changed


@dataclass
class Regime:
    """One configuration as its windows show it, under the two readings a stated plan leaves open:
    one fixed K (`k`), or K following the plan at each window's batch. Each window that contradicts
    a reading rules it out for the regime; a window that contradicts every reading still open is a
    change. Without a plan only the fixed reading exists (K moved by more than max(0.5, 15 %)); a
    server that ignores its stated schedule stays one fixed-K regime at every batch."""

    k: float
    method: str
    plan: KPlan | None = None
    fixed: bool = True  # every window so far drafted k
    follows: bool = False  # every window so far drafted what the plan gives at its batch

    @classmethod
    def first(cls, k: float, method: str, batch: float | None, plan: KPlan | None) -> Regime:
        return cls(k, method, plan, follows=on_plan(plan, k, batch))

    def admits(self, k: float, method: str, batch: float | None) -> bool:
        """Whether a window (its K, method and batch) can belong to this regime."""
        if regime_changed(self.k, self.method, self.k, method):
            return False  # another explicitly configured method
        fixed = self.fixed and not regime_changed(self.k, self.method, k, method)
        return fixed or (self.follows and on_plan(self.plan, k, batch))

    def take(self, k: float, batch: float | None) -> None:
        """A window of this regime: rule out the readings it contradicts."""
        if self.fixed and regime_changed(self.k, None, k, ""):
            self.fixed = False
        if self.follows and not on_plan(self.plan, k, batch):
            self.follows = False


class AdviceGrader:
    """Watches one route's windows for a change of K or method and grades the change."""

    def __init__(self) -> None:
        self._regime: Regime | None = None
        self._plan: KPlan | None = None  # the stated plan for K (draft.config), as of the last observe
        self._regime_since = -math.inf  # windows starting before this mix two regimes
        self._history: deque[WindowSummary] = deque(maxlen=HISTORY)
        self._restored: WindowSummary | None = None
        self.grading: Grading | None = None

    def restore(self, before: WindowSummary) -> None:
        """The previous pod's last before-window (a restart): the first regime this process
        settles on is graded against it when K or the method differ; otherwise it is dropped."""
        if self.grading is None:
            self._restored = before

    @property
    def before_candidate(self) -> WindowSummary | None:
        """The window a change now would be graded against (exported, so a new pod can read it back)."""
        return self._history[-1] if self._history else None

    def observe(
        self,
        t: float,
        windows: Sequence[WindowStats],
        method: str,
        min_drafts: float,
        cost_model: costmodel.CostModel,
        plan: KPlan | None = None,
    ) -> Grading | None:
        """Feed one evaluation's windows (any order); returns the route's current grading. `plan`:
        the stated plan for K (k_plan of draft.config): K following it is no change."""
        self._plan = plan
        ordered = sorted(windows, key=lambda s: s.span_seconds)
        if not ordered:
            return self.grading
        shortest = ordered[0]
        k_now = observed_draft_length(shortest, min_drafts)
        if k_now is None:
            return self.grading
        if self._regime is None:
            if shortest.t - shortest.span_seconds >= self._regime_since:
                self._settle(t, ordered, k_now, method, min_drafts, cost_model)
            return self.grading
        if self._restored is not None:
            self._take_restored(ordered, cost_model)
        if self._changed(k_now, method, shortest.batch_size):
            self._on_change(t, shortest, method)
            return self.grading
        self._regime.take(k_now, shortest.batch_size)
        # Same regime: remember the longest clean window as a before candidate.
        clean = [s for s in ordered if s.t - s.span_seconds >= self._regime_since]
        if clean:
            summary = summarize(clean[-1], method, min_drafts)
            if summary is not None and not self._changed(summary.draft_length, method, summary.batch_size):
                self._history.append(summary)
        self._grade_after(ordered, method, min_drafts)
        return self.grading

    def _take_restored(self, ordered: Sequence[WindowStats], cost_model: costmodel.CostModel) -> None:
        """Grade this process's regime against the previous pod's window (read back after start)."""
        restored, self._restored = self._restored, None
        regime = self._regime
        if restored is None or regime is None or self.grading is not None:
            return
        k, method = regime.k, regime.method
        if not regime.admits(restored.draft_length, restored.method, restored.batch_size):
            self.grading = Grading(
                changed_at=ordered[0].t - ordered[0].span_seconds,  # this process's first window: after it
                before=restored,
                new_draft_length=k,
                predicted_gain_ratio=predicted_gain(cost_model, restored, k),
                method_before=restored.method,
                method_after=method,
            )

    def _changed(self, k: float, method: str, batch: float | None) -> bool:
        assert self._regime is not None
        return not self._regime.admits(k, method, batch)

    def _on_change(self, t: float, shortest: WindowStats, method: str) -> None:
        # The change happened inside the shortest window: the before window must end before it.
        change_start = shortest.t - shortest.span_seconds
        before = next((s for s in reversed(self._history) if s.t <= change_start), None)
        self.grading = (
            Grading(changed_at=change_start, before=before, method_before=before.method) if before is not None else None
        )
        self._regime = None
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
        self._regime = Regime.first(k_now, method, ordered[0].batch_size, self._plan)
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


class RolloutGrader:
    """Fleet mode: one route over its replicas. A rollout (new pods with another K or method) shows
    as replicas in a new regime beside, then instead of, the old one's. Each replica's regime is its
    shortest window's K and method; the route's regime is the first seen. A replica in another
    regime is graded against the old regime's latest windows at the batch nearest its own; once no
    old-regime replica has been seen for two longest windows (the new replicas' have filled), the
    new regime is the route's. With a stated plan for K (k_plan), replicas drafting the Ks the plan
    gives at their batches are one regime, whatever their K."""

    def __init__(self) -> None:
        self._regime: Regime | None = None
        self._old: deque[WindowSummary] = deque(maxlen=HISTORY)  # the regime's windows: before candidates
        self._old_seen = -math.inf  # when an old-regime replica was last evaluated
        self._span = 0.0  # the longest window span seen: the new regime's windows fill within it
        self.grading: Grading | None = None

    def observe(
        self,
        replica: Hashable,
        t: float,
        windows: Sequence[WindowStats],
        method: str,
        min_drafts: float,
        cost_model: costmodel.CostModel,
        plan: KPlan | None = None,
    ) -> Grading | None:
        """Feed one replica's windows of one poll; returns the route's current grading. `plan`: the
        stated plan for K (k_plan of draft.config): K following it is no rollout."""
        ordered = sorted(windows, key=lambda s: s.span_seconds)
        if not ordered:
            return self.grading
        k_now = observed_draft_length(ordered[0], min_drafts)
        if k_now is None:
            return self.grading
        batch = ordered[0].batch_size
        longest = summarize(ordered[-1], method, min_drafts)
        self._span = max(self._span, ordered[-1].span_seconds)
        if self._is_canary(k_now, t):
            return self.grading
        if self._regime is None:
            self._regime = Regime.first(k_now, method, batch, plan)
        regime = self._regime
        regime.plan = plan  # the config's, as of this poll (a reload may state another)
        if regime.admits(k_now, method, batch):
            regime.take(k_now, batch)
            self._old_seen = t
            if longest is not None and regime.admits(longest.draft_length, method, longest.batch_size):
                self._old.append(longest)
            return self.grading
        gone_for = t - self._old_seen
        if gone_for > 2 * self._span and self._old_seen > -math.inf and self.grading is not None:
            # The old regime is gone: the new one becomes the route's (the next change is graded on it).
            self._regime, self._old, self._old_seen = Regime.first(k_now, method, batch, plan), deque(maxlen=HISTORY), t
            if longest is not None:
                self._old.append(longest)
            return self.grading
        # The replica's own longest window must be of its regime too (it has filled since the change).
        if longest is None or not Regime.first(k_now, method, batch, plan).admits(
            longest.draft_length, method, longest.batch_size
        ):
            return self.grading
        self._grade(longest, k_now, method, cost_model, plan)
        return self.grading

    def _is_canary(self, k_now: float, t: float) -> bool:
        """Spec off before any regime, or beside live replicas of a spec-on one: the route's canary (its
        measured baseline), not a rollout. A rollout that disables speculation is graded once the old
        pods are gone."""
        if k_now != 0:
            return False
        if self._regime is None:
            return True
        return self._regime.k != 0 and t - self._old_seen <= 2 * self._span

    def _grade(
        self, after: WindowSummary, k_now: float, method: str, cost_model: costmodel.CostModel, plan: KPlan | None
    ) -> None:
        grading = self.grading
        if grading is not None and grading.new_draft_length is not None and grading.after is not None:
            previous = Regime.first(grading.new_draft_length, grading.method_after, grading.after.batch_size, plan)
            same = previous.admits(k_now, method, after.batch_size)
            newer = (after.span_seconds, after.t) >= (grading.after.span_seconds, grading.after.t)
            if same and not newer:
                return
        if not self._old:
            return
        before = min(self._old, key=lambda s: (abs(s.batch_size - after.batch_size), -s.t))
        self.grading = Grading(
            changed_at=after.t - after.span_seconds,
            before=before,
            new_draft_length=k_now,
            after=after,
            predicted_gain_ratio=predicted_gain(cost_model, before, k_now),
            method_before=before.method,
            method_after=method,
        )
