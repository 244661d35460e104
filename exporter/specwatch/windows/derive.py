"""Window deltas -> alpha, tau, K, p_i, live batch size and ITL quantiles. Pure functions.

Definitions over one window (the metric contract is in docs/architecture.md):
  alpha = Δaccepted / Δdraft_tokens          (vLLM's acceptance rate)
  K     = Δdraft_tokens / Δdrafts            (mean proposed draft length)
  tau   = 1 + Δaccepted / Δdrafts            (tokens emitted per spec step, bonus included)
  p_i   = Δaccepted_per_pos[i] / n_i         (over the drafts n_i that reached position i)
  B     = Δitl_count / Δengine_steps per engine, mean over engines (requests decoded per step);
          else the mean of vllm:num_requests_running over the window's snapshots
  ITL P50/P99 with histogram_quantile's exact interpolation; per-token mean = Δitl_sum / Δgeneration

Drafts reaching position i (n_i). vLLM counts drafts (D), draft tokens (N) and acceptances per
position, but not how many drafts reached each position. When every draft is K long (mean length
L = N/D = K), n_i = D. When L < K, why the drafts were short decides (``drafts_reaching_positions``):
  * a drafter that proposes fewer tokens by itself (n-gram/suffix lookup running out of context),
    with no batch schedule known: n_i = D. A slot it did not fill is a token it did not gain, and
    a shorter K would not make it propose more, so the slot counts as a miss.
  * a drafter that always proposes the K it is given (EAGLE, MTP, draft model), or any drafter
    under a known num_speculative_tokens_per_batch_size schedule: short drafts are steps whose
    batch fell in a band with a smaller K. The drafts are taken to split between the two draft
    lengths the schedule offers around L (adjacent integers when no schedule is known), k_lo <= L
    <= k_hi, a share f = (L - k_lo)/(k_hi - k_lo) at k_hi: n_i = D for i < k_lo, f·D for
    k_lo <= i < k_hi, 0 beyond (then p_i is unknown and left out; the verdict extends the last
    measured ratio p_i/p_(i-1), decide.extend_position_rates). n_i is never below Δaccepted_i.
    Dividing by D would count slots a schedule never proposed as rejections, and the advice would
    ratchet K down at batch 1 even where a larger K is best.
The split is the least spread mixture that reproduces L; with two bands it is exact, with more it is
an estimate (docs/costmodel.md, "Per-position rates"). Where the engine counts the draft tokens
proposed at each position (vLLM's draft_tokens_per_pos), n_i is that count and p_i is exact.

An engine that exports its acceptance only as gauges (SGLang) has none of the counters above: its
alpha, tau, K and batch size are window means of its gauges (windows/gauges.py), marked
acceptance_basis GAUGE_MEAN; its token counts and p_i are absent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from specwatch.engines.series import DEFAULT_ENGINE, POSITION_COUNTERS, Counter, Gauge, RouteSnapshot, SeriesKey
from specwatch.engines.vllm import SCHEMA_V0
from specwatch.windows.gauges import BATCH, gauge_means
from specwatch.windows.window import WindowView

COUNTER_RATIO = "counter_ratio"
GAUGE_MEAN = "engine_gauge_mean"


@dataclass(frozen=True)
class WindowStats:
    route: str
    window: str
    t: float
    samples: int
    span_seconds: float
    spec_present: bool
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    acceptance_rate: float | None = None
    mean_acceptance_length: float | None = None
    draft_length: float | None = None
    configured_k: int | None = None
    position_rates: tuple[float, ...] | None = None
    batch_size: float | None = None
    itl_p50_seconds: float | None = None
    itl_p99_seconds: float | None = None
    itl_per_token_mean_seconds: float | None = None
    generation_tokens: float | None = None
    draft_coverage: float | None = None  # Δdrafts / Δrequest-steps (ITL observations), in (0, 1]
    schema: str = "v1"
    engines: int = 1
    accepted_by_position: tuple[float, ...] | None = None  # Δaccepted per position (V1), for p_i
    drafted_by_position: tuple[float, ...] | None = None  # Δdraft tokens per position, where counted: p_i exact
    engine: str = DEFAULT_ENGINE  # the serving engine spoken (RouteSnapshot.engine)
    # What alpha, tau and K are: COUNTER_RATIO (the window's increases), or GAUGE_MEAN (an engine
    # that exports them only as gauges: the mean of its own estimate, windows/gauges.py).
    acceptance_basis: str = COUNTER_RATIO


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float:
    """Prometheus's classic histogram_quantile (promql/quantile.go, bucketQuantile).

    `buckets` are (upper bound, cumulative count). Returns NaN where Prometheus does: no
    observations, fewer than two buckets, or no +Inf bucket. The lowest bucket starts at 0
    when its bound is positive; a quantile that falls in +Inf returns the highest finite bound.
    """
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    return _quantile(q, _merged_buckets(buckets))


def _merged_buckets(buckets: Sequence[tuple[float, float]]) -> list[list[float]] | None:
    """The buckets as Prometheus reads them: sorted, identical bounds coalesced, made monotonic.
    None where no quantile exists: fewer than two buckets, no +Inf bucket, no observations."""
    merged: list[list[float]] = []
    for bound, count in sorted(buckets):
        if merged and merged[-1][0] == bound:
            merged[-1][1] += count  # coalesce identical bounds, as Prometheus does
        else:
            merged.append([bound, count])
    if len(merged) < 2 or not math.isinf(merged[-1][0]) or merged[-1][0] < 0:
        return None
    # ensureMonotonic: float sums across series can dip by rounding.
    highest = merged[0][1]
    for item in merged:
        count = item[1]
        if highest > count:  # max(count, highest) without the call
            item[1] = highest
        else:
            highest = count
    observations = merged[-1][1]
    if observations == 0 or math.isnan(observations):
        return None
    return merged


def _quantile(q: float, merged: list[list[float]] | None) -> float:
    """bucketQuantile for q in [0, 1] over `_merged_buckets`' result (NaN for None)."""
    if merged is None:
        return math.nan
    rank = q * merged[-1][1]
    b = len(merged) - 1
    for i in range(len(merged) - 1):
        if merged[i][1] >= rank:
            b = i
            break
    if b == len(merged) - 1:
        return merged[-2][0]
    if b == 0 and merged[0][0] <= 0:
        return merged[0][0]
    bucket_start = 0.0
    bucket_end = merged[b][0]
    count = merged[b][1]
    if b > 0:
        bucket_start = merged[b - 1][0]
        count -= merged[b - 1][1]
        rank -= merged[b - 1][1]
    return bucket_start + (bucket_end - bucket_start) * (rank / count)


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator > 0 else None


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def v0_draft_length(acceptance: float, efficiency: float, max_k: int = 16) -> int | None:
    """V0 exports no K: invert efficiency = E[emitted] / (K+1) with E[emitted] = (1 - a^(K+1)) / (1 - a)."""
    if not (0 < acceptance < 1) or not (0 < efficiency <= 1):
        return None
    best, best_err = None, math.inf
    for k in range(1, max_k + 1):
        emitted = (1 - acceptance ** (k + 1)) / (1 - acceptance)
        err = abs(emitted / (k + 1) - efficiency)
        if err < best_err:
            best, best_err = k, err
    return best


_NOTHING_BEFORE: dict[SeriesKey, float] = {}


# The counters as module constants for _window_sums' loop: an enum member's lookup on its class
# costs several times a global's, once per comparison per series.
_ITL_BUCKET, _POS = Counter.ITL_BUCKET, Counter.POS
_DRAFTS, _DRAFT_TOKENS, _ACCEPTED, _GEN = Counter.DRAFTS, Counter.DRAFT_TOKENS, Counter.ACCEPTED, Counter.GEN
_ITL_SUM, _ITL_COUNT, _STEPS = Counter.ITL_SUM, Counter.ITL_COUNT, Counter.STEPS


@dataclass
class _WindowSums:
    """One window's increases, summed over its series: what every derived value is made of."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    gen: float = 0.0
    itl_sum: float = 0.0
    itl_count_by_engine: dict[str, float] = field(default_factory=dict)
    steps_by_engine: dict[str, float] = field(default_factory=dict)
    accepted_by_position: dict[int, float] = field(default_factory=dict)
    drafted_by_position: dict[int, float] = field(default_factory=dict)
    itl_buckets: dict[float, float] = field(default_factory=dict)


def _window_sums(view: WindowView) -> _WindowSums:
    """view.increases() folded into one loop over the window's series (this loop is hot: no
    intermediate dict, no property calls, the most frequent kind, ITL buckets, tested first). A
    view class with its own increases() (fleet mode's) is read through it: each increase then
    comes as `last` with nothing before it."""
    itl_buckets: dict[float, float] = {}
    pos: dict[int, float] = {}
    drafted_by_position: dict[int, float] = {}
    itl_count_by_engine: dict[str, float] = {}
    steps_by_engine: dict[str, float] = {}
    drafts = draft_tokens = accepted = gen = itl_sum = 0.0
    if type(view).increases is WindowView.increases:
        first, series_values = view.first.totals, view.last.totals.items()
    else:
        first, series_values = _NOTHING_BEFORE, view.increases().items()
    for key, last in series_values:
        before = first.get(key)
        delta = last if before is None or last < before else last - before
        kind, series, sub = key
        if kind == _ITL_BUCKET:
            le = float(sub)  # type: ignore[arg-type]  # key.le
            itl_buckets[le] = itl_buckets.get(le, 0.0) + delta
        elif kind in POSITION_COUNTERS:
            position = int(sub)  # type: ignore[arg-type]  # key.position
            by_position = pos if kind == _POS else drafted_by_position
            by_position[position] = by_position.get(position, 0.0) + delta
        elif kind == _DRAFTS:
            drafts += delta
        elif kind == _DRAFT_TOKENS:
            draft_tokens += delta
        elif kind == _ACCEPTED:
            accepted += delta
        elif kind == _GEN:
            gen += delta
        elif kind == _ITL_SUM:
            itl_sum += delta
        elif kind == _ITL_COUNT:
            itl_count_by_engine[series] = itl_count_by_engine.get(series, 0.0) + delta
        elif kind == _STEPS:
            steps_by_engine[series] = steps_by_engine.get(series, 0.0) + delta
    # Built once at the end: the dataclass's default factories would make five dicts to discard.
    return _WindowSums(
        drafts=drafts,
        draft_tokens=draft_tokens,
        accepted=accepted,
        gen=gen,
        itl_sum=itl_sum,
        itl_count_by_engine=itl_count_by_engine,
        steps_by_engine=steps_by_engine,
        accepted_by_position=pos,
        drafted_by_position=drafted_by_position,
        itl_buckets=itl_buckets,
    )


def _batch_size(view: WindowView, sums: _WindowSums) -> float | None:
    """Requests decoded per engine step, per engine, then the mean over engines; without step
    counts, the running-requests gauge's mean over the window's snapshots."""
    steps, counts = sums.steps_by_engine, sums.itl_count_by_engine
    per_engine = [counts.get(e, 0.0) / s for e, s in steps.items() if s > 0]
    if per_engine:
        return sum(per_engine) / len(per_engine)
    gauges = [sum(e.snapshot.running.values()) / len(e.snapshot.running) for e in view.entries if e.snapshot.running]
    return sum(gauges) / len(gauges) if gauges else None


def _itl_quantiles(itl_buckets: dict[float, float]) -> tuple[float | None, float | None]:
    """(P50, P99) of the window's ITL histogram, as histogram_quantile gives them."""
    if not itl_buckets:
        return None, None
    buckets = sorted(itl_buckets.items())
    if buckets[-1][1] <= 0:
        return None, None
    merged = _merged_buckets(buckets)  # once for both quantiles
    return _finite(_quantile(0.5, merged)), _finite(_quantile(0.99, merged))


def window_stats(
    view: WindowView, route: str, window: str, now: float, *, configured_k_hint: int | None = None
) -> WindowStats:
    """Everything specwatch derives from one route's window of snapshots."""
    latest = view.last.snapshot
    sums = _window_sums(view)
    drafts, draft_tokens, accepted, gen = sums.drafts, sums.draft_tokens, sums.accepted, sums.gen
    draft_coverage = None
    request_steps = sum(sums.itl_count_by_engine.values())
    if latest.spec_present and drafts > 0 and request_steps > 0 and latest.schema != SCHEMA_V0:
        draft_coverage = min(drafts / request_steps, 1.0)
    batch_size = _batch_size(view, sums)
    itl_p50, itl_p99 = _itl_quantiles(sums.itl_buckets)
    itl_per_token = None
    if gen > 0 and (sums.itl_count_by_engine or sums.itl_sum):
        itl_per_token = sums.itl_sum / gen
    configured_k = latest.configured_k or configured_k_hint
    engines = max(len(latest.engines), 1)
    if latest.gauge_acceptance:
        return _gauge_acceptance(view, route, window, now, sums, configured_k, engines)
    if latest.spec_present and latest.schema != SCHEMA_V0:
        # V1's counters over the window: exact alpha, tau, K and per-position rates, built into
        # the one WindowStats (dataclasses.replace of a 23-field frozen dataclass costs more than
        # everything else here).
        alpha = _ratio(accepted, draft_tokens)
        # Impossible for one vLLM process (a restart nothing revealed): absent rather than wrong.
        consistent = alpha is None or alpha <= 1.0
        mean_length: float | None = None
        draft_length: float | None = None
        rates: tuple[float, ...] | None = None
        by_position: tuple[float, ...] | None = None
        drafted: tuple[float, ...] | None = None
        # Drafts without draft tokens: counters this engine does not have (SGLang's verify calls
        # alone in fleet mode), never a tau of 1 or a K of 0.
        if drafts > 0 and draft_tokens > 0 and consistent:
            k = latest.configured_k
            pos = sums.accepted_by_position
            by_position = tuple([pos.get(i, 0.0) for i in range(k)]) if k else None
            mean_length = 1.0 + accepted / drafts
            draft_length = draft_tokens / drafts
            if by_position and sums.drafted_by_position:
                drafted = tuple([sums.drafted_by_position.get(i, 0.0) for i in range(len(by_position))])
                rates = counted_position_rates(by_position, drafted)
            elif by_position:
                rates = position_rates(by_position, drafts, draft_tokens, variable_length=True)
        return WindowStats(
            route=route,
            window=window,
            t=now,
            samples=view.samples,
            span_seconds=view.span_seconds,
            spec_present=latest.spec_present,
            drafts=drafts,
            draft_tokens=draft_tokens,
            accepted_tokens=accepted,
            acceptance_rate=alpha if consistent else None,
            mean_acceptance_length=mean_length,
            draft_length=draft_length,
            configured_k=configured_k,
            position_rates=rates,
            batch_size=batch_size,
            itl_p50_seconds=itl_p50,
            itl_p99_seconds=itl_p99,
            itl_per_token_mean_seconds=itl_per_token,
            generation_tokens=gen,
            draft_coverage=draft_coverage,
            schema=latest.schema,
            engines=engines,
            engine=latest.engine,
            accepted_by_position=by_position,
            drafted_by_position=drafted,
        )
    measured = WindowStats(
        route=route,
        window=window,
        t=now,
        samples=view.samples,
        span_seconds=view.span_seconds,
        spec_present=latest.spec_present,
        configured_k=configured_k,
        batch_size=batch_size,
        itl_p50_seconds=itl_p50,
        itl_p99_seconds=itl_p99,
        itl_per_token_mean_seconds=itl_per_token,
        generation_tokens=gen,
        draft_coverage=draft_coverage,
        schema=latest.schema,
        engines=engines,
        engine=latest.engine,
    )
    if latest.schema == SCHEMA_V0:
        return _v0_acceptance(measured, latest, configured_k_hint)
    return measured


def _gauge_acceptance(
    view: WindowView, route: str, window: str, now: float, sums: _WindowSums, configured_k: int | None, engines: int
) -> WindowStats:
    """An engine whose acceptance is gauges only: alpha, tau, K and the batch size are window means of
    its readings (windows/gauges.py); no token counts, no per-position rates."""
    latest = view.last.snapshot
    spec = latest.spec_present
    means = gauge_means(view)
    return WindowStats(
        route=route,
        window=window,
        t=now,
        samples=view.samples,
        span_seconds=view.span_seconds,
        spec_present=spec,
        drafts=sums.drafts if spec else None,
        acceptance_rate=means.get(Gauge.ACCEPTANCE_RATE) if spec else None,
        mean_acceptance_length=means.get(Gauge.ACCEPTANCE_LENGTH) if spec else None,
        draft_length=means.get(Gauge.DRAFT_LENGTH) if spec else None,
        configured_k=configured_k,
        batch_size=means.get(BATCH),
        generation_tokens=sums.gen,
        schema=latest.schema,
        engines=engines,
        engine=latest.engine,
        acceptance_basis=GAUGE_MEAN,
    )


def _v0_acceptance(measured: WindowStats, latest: RouteSnapshot, configured_k_hint: int | None) -> WindowStats:
    """V0 exports lifetime per-position acceptance `a`; convert to V1 semantics for the cost model."""
    a = latest.v0_acceptance_rate
    if a is None or not (0 <= a <= 1):
        return measured
    k = configured_k_hint
    if k is None and latest.v0_efficiency is not None:
        k = v0_draft_length(a, latest.v0_efficiency)
    if k is None:
        return measured
    positions = tuple(a ** (i + 1) for i in range(k))
    return replace(
        measured,
        configured_k=k,
        draft_length=float(k),
        position_rates=positions,
        mean_acceptance_length=1.0 + sum(positions),
        acceptance_rate=sum(positions) / k,
    )


def drafts_reaching_positions(
    drafts: float,
    draft_tokens: float,
    k: int,
    *,
    variable_length: bool,
    schedule_ks: Sequence[int] | None = None,
    accepted_by_position: Sequence[float] = (),
) -> tuple[float, ...]:
    """n_0..n_(k-1): how many of the window's drafts reached each position (module docstring)."""
    if k <= 0 or drafts <= 0:
        return ()
    mean_length = draft_tokens / drafts
    if mean_length >= k - 1e-6 or (variable_length and not schedule_ks):
        reached = [drafts] * k
    else:
        lengths = (
            sorted({min(int(x), k) for x in schedule_ks or () if x > 0} | {k}) if schedule_ks else list(range(1, k + 1))
        )
        lo = max((v for v in lengths if v <= mean_length + 1e-9), default=0)
        hi = min((v for v in lengths if v >= mean_length - 1e-9), default=k)
        share = 1.0 if hi <= lo else (mean_length - lo) / (hi - lo)
        reached = [drafts if i < lo else share * drafts if i < hi else 0.0 for i in range(k)]
    # A position accepted this often was reached at least this often (and by no more than D).
    return tuple(
        min(max(n, a), drafts)
        for n, a in zip(reached, [*accepted_by_position, *[0.0] * (k - len(accepted_by_position))], strict=False)
    )


def position_rates(
    accepted_by_position: Sequence[float],
    drafts: float,
    draft_tokens: float,
    *,
    variable_length: bool,
    schedule_ks: Sequence[int] | None = None,
) -> tuple[float, ...]:
    """p_i = Δaccepted_i / n_i up to the last position some draft reached (module docstring)."""
    k = len(accepted_by_position)
    if k > 0 and drafts > 0 and ((variable_length and not schedule_ks) or draft_tokens / drafts >= k - 1e-6):
        # Every draft reached every position (n_i = D, which min(max(D, a), D) leaves as it is):
        # the loop below without building n_i (tests/unit/sidecar/test_poll_shortcuts.py compares the two).
        return tuple([min(accepted / drafts, 1.0) for accepted in accepted_by_position])
    reached = drafts_reaching_positions(
        drafts,
        draft_tokens,
        k,
        variable_length=variable_length,
        schedule_ks=schedule_ks,
        accepted_by_position=accepted_by_position,
    )
    rates: list[float] = []
    for accepted, n in zip(accepted_by_position, reached, strict=False):
        if n <= 0:
            break  # no draft reached it: unknown, not 0
        rates.append(min(accepted / n, 1.0))
    return tuple(rates)


def counted_position_rates(
    accepted_by_position: Sequence[float], drafted_by_position: Sequence[float]
) -> tuple[float, ...]:
    """p_i = Δaccepted_i / Δdrafted_i, up to the first position no draft reached (unknown, not 0)."""
    rates: list[float] = []
    for accepted, drafted in zip(accepted_by_position, drafted_by_position, strict=False):
        if drafted <= 0:
            break
        rates.append(min(accepted / drafted, 1.0))
    return tuple(rates)


def with_drafter(stats: WindowStats, *, variable_length: bool, schedule_ks: Sequence[int] | None = None) -> WindowStats:
    """The window's p_i once the drafter's kind (and the server's schedule) is known (counted
    per-position drafts need neither)."""
    counts = stats.accepted_by_position
    if not counts or stats.drafts is None or stats.draft_tokens is None or stats.drafts <= 0:
        return stats
    if stats.drafted_by_position:
        return stats
    rates = position_rates(
        counts, stats.drafts, stats.draft_tokens, variable_length=variable_length, schedule_ks=schedule_ks
    )
    return stats if rates == stats.position_rates else replace(stats, position_rates=rates)
