"""The step-time curve of the watched server, learned online from its own metrics.

Each evaluation window gives one point (observation.py: the load and the mean step it measured,
and what a cost model predicts for that step); points of several servers that end together (fleet
mode: one poll's replicas of a route) are added together. The point is stored as the ratio of the
measured time to what the prior (the roofline CostModel) predicts for that very step: verify +
drafting (by method class: n-gram about free, EAGLE/MTP/draft model the prior's share) + the fixed
costs of speculation for spec-on windows, the plain step for spec-off windows.

Memory is bounded: ratios live in a fixed set of bins over log2(n) (``BINS_PER_DOUBLING`` per
doubling up to ``MAX_TOKENS``), each an exponentially forgotten mean of log-ratios (half-life
``half_life_seconds``), updated with a Huber weight so a window spoiled by a prefill burst or a
stall moves it little. Spec-off windows, when there are any, are the target's step over the span
of tokens they cover (they measure the target alone), and are dropped ``BASELINE_HALF_LIVES``
after the last one.

The curve (``LearnedStepCurve``, a ``StepTimeCurve``) is ratio(n) × prior step time, with ratio
interpolated over log n between bins with data, held at the nearest bin outside them (the prior's
shape), and made non-decreasing in n (pool-adjacent-violators). The prior's absolute spec costs are
scaled by the same ratio at the step's tokens (``CostModel.cost_scale``), so drafting and the fixed
costs stay in proportion on a server slower or faster than the roofline, and the model reproduces
the spec-on steps it learned from; where spec-off windows cover the spec-on steps' tokens, the
spec-on excess measures that scale instead (a uniform scale cancels out of the speedup, so only a
measured one corrects a prior's split). Below ``min_points`` the prior is used unchanged. A measured ``profile`` overrides learning altogether (build.py). Pure: no I/O, no clock.
docs/costmodel.md, "Learned step-time curve", documents the method and its limits.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from specwatch.costmodel.observation import (
    StepObservation,
    model_step_seconds,
    observation_from_deltas,
    prior_step_seconds,
    spec_extra_seconds,
)
from specwatch.costmodel.roofline import CostModel

# The pipeline reads a window's point through this module (learned.observation_from_deltas, ...).
__all__ = [
    "FitSummary",
    "LearnedStepCurve",
    "StepObservation",
    "StepTimeLearner",
    "fit_summary",
    "fit_summary_kept",
    "learned_cost_model",
    "model_step_seconds",
    "observation_from_deltas",
    "prior_step_seconds",
    "spec_extra_seconds",
]

#: Bins per doubling of query tokens; with MAX_TOKENS = 2^16 that is at most 64 bins.
BINS_PER_DOUBLING = 4
MAX_TOKENS = 65536.0
#: Huber threshold on a log-ratio residual, in units of the running residual scale.
HUBER_K = 2.0
#: Floor of that scale (log units): a clean simulator must not make every small noise an outlier.
MIN_RESIDUAL_SCALE = 0.05
#: Default learning settings (config ``learning:``; docs/costmodel.md).
DEFAULT_MIN_POINTS = 6
DEFAULT_HALF_LIFE_SECONDS = 6 * 3600.0
#: A spec-off bin is dropped this many half-lives after its latest window (48 h at the default 6 h):
#: the target's own step time, measured before speculation was switched on or on a canary, is
#: trusted that long after the last such window, then the deployment may have changed under it.
BASELINE_HALF_LIVES = 8
#: Windows' worth of the overall scale of the spec costs that each bin's own scale is drawn toward.
SCALE_PRIOR_POINTS = 4.0
#: Latest points kept as they came, to refit them under another prior (``with_prior``).
RETAINED_POINTS = 32

_N_BINS = int(math.log2(MAX_TOKENS) * BINS_PER_DOUBLING) + 1
#: Bound of a curve's ratio memo (a curve lives until the next window's point replaces it).
_RATIO_MEMO_LIMIT = 4096


def _bin_of(tokens: float) -> int:
    return max(0, min(_N_BINS - 1, int(math.log2(max(tokens, 1.0)) * BINS_PER_DOUBLING)))


@dataclass
class _Bin:
    weight: float = 0.0
    log_ratio: float = 0.0
    log_ratio_sq: float = 0.0  # for the in-sample residual
    log_tokens: float = 0.0
    share: float = 0.0  # the prior's drafting + fixed-cost share of the step (spec on)
    t: float = 0.0  # end of its latest window


@dataclass
class _Side:
    """Bins of one kind of window (spec on or off)."""

    bins: dict[int, _Bin] = field(default_factory=dict)

    def decay(self, factor: float) -> None:
        for b in self.bins.values():
            b.weight *= factor

    def forget_before(self, t: float) -> None:
        for index in [i for i, b in self.bins.items() if b.t < t]:
            del self.bins[index]

    def add(
        self,
        index: int,
        log_tokens: float,
        log_ratio: float,
        weight: float,
        share: float = 0.0,
        t: float = 0.0,
    ) -> None:
        b = self.bins.setdefault(index, _Bin())
        b.t = max(b.t, t)
        total = b.weight + weight
        b.share += (share - b.share) * weight / total
        b.log_ratio += (log_ratio - b.log_ratio) * weight / total
        b.log_ratio_sq += (log_ratio * log_ratio - b.log_ratio_sq) * weight / total
        b.log_tokens += (log_tokens - b.log_tokens) * weight / total
        b.weight = total


@dataclass(frozen=True)
class LearnedStepCurve:
    """The learned step time of the target: a StepTimeCurve for CostModel.profile.

    ``knots``: (tokens, seconds) of a plain step over ``tokens`` requests at the prior's context,
    tokens increasing, seconds non-decreasing. Between knots the time is linear in tokens; outside
    them the ratio to the prior is held (the prior's shape at the data's level). Another context
    scales by the prior's own context dependence."""

    prior: CostModel
    knots: tuple[tuple[float, float], ...]
    points: float  # effective (forgotten) number of windows behind it
    residual_ratio: float  # in-sample RMS spread of measured/fitted (exp(rms log) − 1)
    #: Measured scale of the prior's drafting + fixed costs (spec-on vs spec-off spans at the same
    #: tokens), over all of them; None: they scale like the target (``ratio``).
    spec_scale: float | None = None
    #: The same per bin where both were measured, as (log2 tokens, scale) knots.
    spec_scales: tuple[tuple[float, float], ...] = ()
    source: str = "learned"

    #: ratio() per query-token count: a speculative step asks it twice for the same tokens (the
    #: target's step and the fixed costs' scale), and integer batches poll after poll. Not compared.
    _ratios: dict[float, float] = field(default_factory=dict, init=False, repr=False, compare=False)

    def _reference(self, tokens: float) -> float:
        return self.prior.step_time(tokens, tokens * self.prior.context_tokens)

    def ratio(self, tokens: float) -> float:
        """Learned over prior step time at ``tokens`` (at the prior's context)."""
        memo = self._ratios
        hit = memo.get(tokens)
        if hit is None:
            hit = self._ratio(tokens)
            if self.prior.profile is None:  # a pure prior (the learner's always is): safe to keep
                if len(memo) > _RATIO_MEMO_LIMIT:
                    memo.clear()
                memo[tokens] = hit
        return hit

    def _ratio(self, tokens: float) -> float:
        tokens = max(tokens, 1.0)
        knots = self.knots
        if tokens <= knots[0][0]:
            return knots[0][1] / self._reference(knots[0][0])
        for (x0, y0), (x1, y1) in itertools.pairwise(knots):
            if tokens <= x1:
                return (y0 + (y1 - y0) * (tokens - x0) / (x1 - x0)) / self._reference(tokens)
        return knots[-1][1] / self._reference(knots[-1][0])

    def spec_cost_ratio(self, tokens: float) -> float:
        """Scale of the prior's absolute spec costs (drafting, fixed costs) at ``tokens``."""
        if self.spec_scale is None:
            return self.ratio(tokens)
        return _scale_at(self.spec_scale, self.spec_scales, math.log2(max(tokens, 1.0)))

    def step_seconds(self, tokens: float, context_tokens: float, roofline_kv_seconds_per_token: float) -> float:
        return self.ratio(tokens) * self.prior.step_time(tokens, context_tokens)


class StepTimeLearner:
    """Accumulates windows of one route into a LearnedStepCurve. Bounded memory: two fixed bin
    sets and a few running sums, whatever the number of windows."""

    def __init__(
        self,
        prior: CostModel,
        *,
        min_points: int = DEFAULT_MIN_POINTS,
        half_life_seconds: float = DEFAULT_HALF_LIFE_SECONDS,
    ) -> None:
        self.prior = replace(prior, profile=None)
        self.min_points = min_points
        self.half_life_seconds = half_life_seconds
        self._spec = _Side()
        self._plain = _Side()
        self._t: float | None = None
        self._points = 0.0  # forgotten weight of the windows behind the curve
        self._added = 0  # windows added (the min_points gate)
        self._scale = 0.15  # running residual scale (log units) for the Huber weight
        self._curve: LearnedStepCurve | None = None
        self.last: StepObservation | None = None
        self._recent: deque[StepObservation] = deque(maxlen=RETAINED_POINTS)
        # fit_summary_kept's last answer: the (model, last point, points) it was worked out for, and it.
        self._summary: tuple[CostModel, StepObservation | None, float, FitSummary] | None = None

    def with_prior(self, prior: CostModel) -> StepTimeLearner:
        """A learner over another prior fed the latest ``RETAINED_POINTS`` points again: the
        method class became known after the first windows (their points are the same drafter's,
        only the prior's drafting share was not known yet)."""
        learner = StepTimeLearner(prior, min_points=self.min_points, half_life_seconds=self.half_life_seconds)
        for _, together in itertools.groupby(self._recent, key=lambda obs: obs.t):
            learner.add_together(list(together))
        return learner

    @property
    def points(self) -> float:
        return self._points

    def add(self, obs: StepObservation) -> None:
        if self._t is not None and obs.t <= self._t:
            return  # one point per window end: a repeated or older time adds nothing new
        self._advance(obs.t)
        self._add(obs, self.predict(obs))  # the curve before this window, for the Huber weight

    def add_together(self, observations: Sequence[StepObservation]) -> None:
        """Points of several servers of one route that ended at the same time (fleet mode: the
        replicas of one poll), each weighed against the curve before them all."""
        points = [obs for obs in observations if self._t is None or obs.t > self._t]
        if not points:
            return
        self._advance(max(obs.t for obs in points))
        curve = self._fit()
        model = learned_cost_model(self.prior, curve) if curve is not None else None
        for obs in points:
            self._add(obs, model_step_seconds(model, obs, self.prior) if model is not None else None)

    def _advance(self, t: float) -> None:
        if self._t is not None and self.half_life_seconds > 0:
            factor = 0.5 ** ((t - self._t) / self.half_life_seconds)
            self._spec.decay(factor)
            self._plain.decay(factor)
            self._points *= factor
            self._plain.forget_before(t - BASELINE_HALF_LIVES * self.half_life_seconds)
        self._t = t

    def _add(self, obs: StepObservation, current: float | None) -> None:
        self.last = obs
        self._recent.append(obs)
        prior = prior_step_seconds(self.prior, obs)
        if not (prior > 0):
            return
        log_ratio = math.log(obs.step_seconds / prior)
        expected = math.log(current / prior) if current is not None else log_ratio
        residual = abs(log_ratio - expected)
        weight = 1.0 if residual <= HUBER_K * self._scale else HUBER_K * self._scale / residual
        self._scale = max(MIN_RESIDUAL_SCALE, 0.9 * self._scale + 0.1 * min(residual, 4 * self._scale))
        side = self._spec if obs.draft_length > 0 else self._plain
        share = spec_extra_seconds(self.prior, obs) / prior
        side.add(
            _bin_of(obs.query_tokens),
            math.log2(max(obs.query_tokens, 1.0)),
            log_ratio,
            weight,
            share,
            obs.t,
        )
        self._points += 1.0
        self._added += 1
        self._curve = None

    @property
    def baseline_points(self) -> float:
        """Forgotten weight of the spec-off windows behind the curve: above 0, the target's own step
        time T(B) was measured, and the split between target and speculation is the data's."""
        return sum(b.weight for b in self._plain.bins.values() if b.weight > 1e-9)

    def predict(self, obs: StepObservation) -> float | None:
        """The current curve's step time for the step ``obs`` measured (None before any data)."""
        curve = self._fit()
        if curve is None:
            return None
        return model_step_seconds(learned_cost_model(self.prior, curve), obs, self.prior)

    def curve(self) -> LearnedStepCurve | None:
        """The fitted curve, or None while fewer than ``min_points`` windows back it."""
        if self._added < self.min_points:
            return None
        return self._fit()

    def _fit(self) -> LearnedStepCurve | None:
        if self._curve is not None:
            return self._curve
        plain = {i: b for i, b in self._plain.bins.items() if b.weight > 1e-9}
        spec = {i: b for i, b in self._spec.bins.items() if b.weight > 1e-9}
        overall_scale, spec_scales = _spec_cost_scales(plain, spec)
        merged = _target_bins(plain, spec, overall_scale, spec_scales)
        if not merged:
            return None
        order = sorted(merged)
        xs = [merged[i].log_tokens for i in order]
        ws = [merged[i].weight for i in order]
        # Non-decreasing step time in tokens: pool adjacent violators on T = ratio × prior.
        priors = [self.prior.base_step_time(2.0**x) for x in xs]  # the prior's step at each bin
        ts = [math.exp(merged[i].log_ratio) * t for i, t in zip(order, priors, strict=True)]
        blocks: list[list[float]] = []  # [weighted T sum, weight, first index, last index]
        for j, (tv, w) in enumerate(zip(ts, ws, strict=True)):
            blocks.append([tv * w, w, j, j])
            while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
                last = blocks.pop()
                blocks[-1][0] += last[0]
                blocks[-1][1] += last[1]
                blocks[-1][3] = last[3]
        fitted = [0.0] * len(ts)
        for total, w, first, last_j in blocks:
            for j in range(int(first), int(last_j) + 1):
                fitted[j] = total / w
        knots: list[tuple[float, float]] = []
        for x, tv in zip(xs, fitted, strict=True):
            n = 2.0**x
            if knots and n <= knots[-1][0] * (1 + 1e-9):
                continue
            knots.append((n, tv))
        # In-sample residual: each bin's spread around its mean plus its mean's distance from the
        # fitted (monotone) curve, weighted; reported as a ratio (exp(rms of log) − 1).
        square = 0.0
        for i, prior_t, tv, w in zip(order, priors, fitted, ws, strict=True):
            b = merged[i]
            spread = max(b.log_ratio_sq - b.log_ratio * b.log_ratio, 0.0)
            offset = b.log_ratio - math.log(tv / prior_t)
            square += w * (spread + offset * offset)
        residual = math.exp(math.sqrt(square / sum(ws))) - 1.0
        self._curve = LearnedStepCurve(
            prior=self.prior,
            knots=tuple(knots),
            points=self._points,
            residual_ratio=residual,
            spec_scale=overall_scale,
            spec_scales=spec_scales,
        )
        return self._curve


def _target_bins(
    plain: dict[int, _Bin],
    spec: dict[int, _Bin],
    overall_scale: float | None,
    spec_scales: Sequence[tuple[float, float]],
) -> dict[int, _Bin]:
    """The target's own step per bin: the spec-off bins as measured, and the spec-on bins outside
    their span less the drafting and fixed costs (at the measured scale, else the prior's split).
    Inside the span the spec-off windows measured the target itself; the spec-on bins there
    measured the scale of the spec costs instead."""
    span = (min(b.log_tokens for b in plain.values()), max(b.log_tokens for b in plain.values())) if plain else None
    merged: dict[int, _Bin] = {}
    for i, b in spec.items():
        if span is not None and span[0] <= b.log_tokens <= span[1]:
            continue
        if overall_scale is None:
            merged[i] = b  # drafting and fixed costs scale like the target (the prior's split)
            continue
        # The target's share of a spec step: measured spec ratio minus the measured scale of the
        # prior's drafting + fixed-cost share.
        spec_scale = _scale_at(overall_scale, spec_scales, b.log_tokens)
        target = max((math.exp(b.log_ratio) - spec_scale * b.share) / max(1.0 - b.share, 1e-6), 1e-3)
        merged[i] = _Bin(
            b.weight,
            math.log(target),
            b.log_ratio_sq - b.log_ratio**2 + math.log(target) ** 2,
            b.log_tokens,
            0.0,
        )
    merged.update(plain)  # the target alone: no drafting share to separate
    return merged


def _interpolated_log_ratio(bins: dict[int, _Bin], log_tokens: float) -> float | None:
    """The bins' log-ratio at ``log_tokens`` by linear interpolation; None outside their range."""
    pts = sorted((b.log_tokens, b.log_ratio) for b in bins.values())
    if not pts or log_tokens < pts[0][0] - 0.25 or log_tokens > pts[-1][0] + 0.25:
        return None
    if log_tokens <= pts[0][0]:
        return pts[0][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(pts):
        if log_tokens <= x1:
            return y0 + (y1 - y0) * (log_tokens - x0) / (x1 - x0) if x1 > x0 else y1
    return pts[-1][1]


def _spec_cost_scales(
    plain: dict[int, _Bin], spec: dict[int, _Bin]
) -> tuple[float | None, tuple[tuple[float, float], ...]]:
    """Where spec-off and spec-on spans cover the same tokens, the spec-on excess over the target
    measures the drafting + fixed costs directly: their scale relative to the prior's. Returns the
    scale over all such bins (None when there are none: then they scale like the target) and the
    scale per bin as (log2 tokens, scale), tokens increasing, each drawn toward the overall one by
    SCALE_PRIOR_POINTS windows (a bin of one or two windows is mostly noise)."""
    found = []
    num = den = 0.0
    for b in spec.values():
        plain_log_ratio = _interpolated_log_ratio(plain, b.log_tokens)
        if plain_log_ratio is None or b.share <= 0.02:
            continue
        excess = math.exp(b.log_ratio) - math.exp(plain_log_ratio) * (1.0 - b.share)
        found.append((b.log_tokens, b.weight, excess / b.share))
        num += b.weight * excess
        den += b.weight * b.share
    if den <= 0:
        return None, ()
    overall = max(num / den, 0.0)
    per_bin = tuple(
        sorted(
            (x, max((w * scale + SCALE_PRIOR_POINTS * overall) / (w + SCALE_PRIOR_POINTS), 0.0))
            for x, w, scale in found
        )
    )
    return overall, per_bin


def _scale_at(overall: float, per_bin: Sequence[tuple[float, float]], log_tokens: float) -> float:
    """The spec costs' scale at ``log_tokens``: linear between the bins that measured it, held at
    the nearest outside them; the overall scale when no bin did."""
    if not per_bin:
        return overall
    if log_tokens <= per_bin[0][0]:
        return per_bin[0][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(per_bin):
        if log_tokens <= x1:
            return y0 + (y1 - y0) * (log_tokens - x0) / (x1 - x0) if x1 > x0 else y1
    return per_bin[-1][1]


def learned_cost_model(prior: CostModel, curve: LearnedStepCurve) -> CostModel:
    """The prior with the learned curve as its target step and its absolute spec costs scaled."""
    return replace(prior, profile=curve)


@dataclass(frozen=True)
class FitSummary:
    """What the sidecar exports about one route's fit."""

    points: float
    residual_ratio: float | None
    predicted_seconds: float | None  # the current model's step at the last window's load
    observed_seconds: float | None


def fit_summary(learner: StepTimeLearner, model: CostModel) -> FitSummary:
    obs = learner.last
    curve = learner.curve()
    residual = curve.residual_ratio if curve is not None and math.isfinite(curve.residual_ratio) else None
    if obs is None:
        return FitSummary(learner.points, residual, None, None)
    return FitSummary(
        learner.points,
        residual,
        model_step_seconds(model, obs, learner.prior),
        obs.step_seconds,
    )


def fit_summary_kept(learner: StepTimeLearner, model: CostModel) -> FitSummary:
    """``fit_summary``, kept on the learner until it takes a point or ``model`` is another object:
    the sidecar publishes it every poll, the learner moves once a ``point_seconds``. Everything it
    reads changes only with a point (``last``, ``points``, the curve) or with the model."""
    kept = learner._summary
    last, points = learner.last, learner.points
    if kept is not None and kept[0] is model and kept[1] is last and kept[2] == points:
        return kept[3]
    summary = fit_summary(learner, model)
    learner._summary = (model, last, points, summary)
    return summary
