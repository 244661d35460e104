"""What the step times mean for speculation: break-even acceptance, expected speedup, best draft
length, the largest batch where speculation pays, the closed-loop speedup at a fixed concurrency,
V1 batch schedules and the config to apply.

Every function takes a CostModel and asks it only for ``step_times`` (T_base and T_spec, memoised)
and ``tokens_per_step``; ``coverage`` is the window's draft coverage (roofline.draft_coverage, 1 for
model-based drafters). Derivations: docs/costmodel.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from specwatch.costmodel.roofline import CostModel
from specwatch.costmodel.search import last_true, solve_increasing


def breakeven_acceptance_rate(cm: CostModel, batch: float, k: float, coverage: float = 1.0) -> float:
    """alpha*(B, K) = (T_spec/T_base − 1)/(coverage·K): the vLLM acceptance rate at which speedup is 1.
    Values >= 1 mean speculation cannot pay at this batch size."""
    if k <= 0:
        raise ValueError("k must be > 0")
    base, spec = cm.step_times(batch, k, coverage)
    return (spec / base - 1.0) / (k * coverage)


@dataclass(frozen=True)
class OverheadBreakdown:
    """The lesson's epsilon (a speculative step's extra time over a plain one, as a share of the
    plain step) split by what pays it. ``epsilon = verify + drafting + fixed`` and the break-even is
    ``epsilon / (coverage·K)`` exactly: the lesson's one-line formula, with epsilon priced at the
    batch instead of held at a constant."""

    verify: float  # the target's forward over B·(1 + coverage·K) tokens instead of B
    drafting: float  # the drafter's passes
    fixed: float  # the engine's fixed costs of a speculative step (per step and per request)

    @property
    def epsilon(self) -> float:
        return self.verify + self.drafting + self.fixed


def overhead_breakdown(cm: CostModel, batch: float, k: float, coverage: float = 1.0) -> OverheadBreakdown:
    """epsilon(B, K) in three parts that sum to ``T_spec / T_base − 1`` (CostModel.spec_step_time's
    own terms, so ``epsilon / (coverage·K)`` is ``breakeven_acceptance_rate``)."""
    if k <= 0:
        raise ValueError("k must be > 0")
    b = max(float(batch), 1.0)
    base, spec = cm.step_times(b, k, coverage)
    verify_tokens = b * (1 + coverage * k)
    fixed = cm.spec_overhead_time(b, verify_tokens)
    verify = cm.step_time(verify_tokens, b * cm.context_tokens) - base
    drafting = spec - base - verify - fixed  # c·draft_time, as spec_step_time charges it
    return OverheadBreakdown(verify / base, drafting / base, fixed / base)


def expected_speedup(cm: CostModel, batch: float, k: float, alpha: float, coverage: float = 1.0) -> float:
    """Decode throughput with speculation over without: (1 + coverage·K·alpha)·T_base/T_spec. Exact
    for vLLM V1's alpha (tokens per spec step = 1 + K·alpha, no i.i.d. assumption)."""
    if k <= 0:
        return 1.0
    base, spec = cm.step_times(batch, k, coverage)
    return cm.tokens_per_step(k, alpha, coverage) * base / spec


def expected_speedup_for_positions(
    cm: CostModel, batch: float, position_rates: Sequence[float], coverage: float = 1.0
) -> float:
    """Speedup when drafting len(p) tokens with unconditional per-position rates p_i."""
    k = len(position_rates)
    if k == 0:
        return 1.0
    gained = 1.0 + coverage * float(sum(position_rates))
    base, spec = cm.step_times(batch, k, coverage)
    return gained * base / spec


def best_draft_length(
    cm: CostModel, batch: float, position_rates: Sequence[float], floor: float = 1.0, coverage: float = 1.0
) -> int:
    """Best K' in 0..len(p) (0 = disable). Truncating a chain draft keeps p_0..p_{K'-1}, so
    speedup(K') uses the first K' rates.

    Scan K' = 1, 2, ... and stop at the first drop (TurboSpec). The scan starts at K'=1 rather
    than comparing against K'=0 first: a fixed per-proposal draft cost can make K'=1 lose while
    K'=2 wins, so K'=0 is chosen only if the best scanned K' does not beat ``floor``, the speedup
    of K'=0: 1 for a server without speculation, less for a K=0 band of a schedule (which still
    pays for speculation being configured, see zero_k_band_slowdown).
    """
    return first_drop_best(_scan_speedups(cm, batch, position_rates, coverage), floor)


def _scan_speedups(cm: CostModel, batch: float, position_rates: Sequence[float], coverage: float) -> Iterator[float]:
    """The speedup at K' = 1, 2, ..., len(p), lazily: (1 + coverage·(p_0 + ... + p_{K'-1}))·T_base/T_spec(K'),
    the gain summed in that order."""
    tau = 1.0
    for kk, rate in enumerate(position_rates, start=1):
        tau += coverage * float(rate)
        base, spec = cm.step_times(batch, kk, coverage)
        yield tau * base / spec


def first_drop_best(speedups: Iterable[float], floor: float = 1.0) -> int:
    """The K' (1-based position in ``speedups``, the speedup at K' = 1, 2, ...) with the highest
    speedup before the first drop, or 0 when none beats ``floor`` (the speedup of K' = 0).
    ``speedups`` is read lazily: nothing after the first drop is computed."""
    best_k, best_s = 0, float(floor)
    prev = None
    for kk, s in enumerate(speedups, start=1):
        if prev is not None and s < prev:
            break
        if s > best_s:
            best_k, best_s = kk, s
        prev = s
    return best_k


def per_token_rate_from_alpha(alpha: float, k: float) -> float:
    """Solve alpha_V1·K = a(1−a^K)/(1−a) for the i.i.d. per-token rate a (bisection; monotone)."""
    target = max(0.0, min(float(alpha), 1.0)) * k
    if target <= 0:
        return 0.0
    if target >= k:
        return 1.0

    def expected_accepted(a: float) -> float:
        if k == int(k):
            return float(sum(a ** (i + 1) for i in range(round(k))))
        return float(a * (1 - a**k) / (1 - a))

    return solve_increasing(expected_accepted, target)


def position_rates_from_alpha(alpha: float, k: int, extend_to: int | None = None) -> tuple[float, ...]:
    """p_i = a^(i+1) from vLLM's alpha and K under an i.i.d. per-token assumption."""
    a = per_token_rate_from_alpha(alpha, k)
    return tuple(a ** (i + 1) for i in range(extend_to or k))


#: Largest batch max_speculative_batch_size looks at (vLLM's max_num_seqs is 256-1024 in practice).
MAX_BATCH_LIMIT = 1024


def max_speculative_batch_size(
    cm: CostModel, k: float | None, alpha: float | None, limit: int = MAX_BATCH_LIMIT, coverage: float = 1.0
) -> int | None:
    """Largest integer batch at which (k, alpha) still gives speedup > 1.

    0 when it does not pay even at batch 1; ``limit`` when it still pays at ``limit``;
    None when not computable (k <= 0). Doubling then bisection (speedup falls with batch
    once verification leaves the memory-bound regime)."""
    if k is None or alpha is None or k <= 0:
        return None
    # pays(b) is expected_speedup(cm, b, k, alpha, coverage) > 1 with its constant gain taken out
    # of the loop: the same operations in the same order.
    gain = cm.tokens_per_step(k, alpha, coverage)
    k_ = k
    step_times = cm.step_times  # bound once: the search probes a dozen batches or more

    def pays(b: int) -> bool:
        base, spec = step_times(b, k_, coverage)
        return gain * base / spec > 1.0

    if not pays(1):
        return 0
    lo = 1
    hi = 2
    while hi <= limit and pays(hi):
        lo, hi = hi, hi * 2
    if hi > limit:
        return limit if pays(limit) else last_true(pays, lo, limit)
    return last_true(pays, lo, hi)


#: What a K=0 band of a vLLM schedule costs against a server without speculation, by load: the
#: band keeps the speculative decode machinery (and, on GPUs, piecewise instead of full CUDA graphs),
#: and the cost grows with the batch. vLLM issue #49548 (H100 NVL, gemma-4-31B, TPOT of a schedule
#: that never drafts against speculation off): +6.56 % at concurrency 2, +21.58 % at 189; between and
#: beyond them, linear in log(batch), held at the ends. Held out: KookiesNKareem/spec-goodput-control
#: (A40, batch 32) measured 14.9 % (vLLM V1, n-gram attached) and 15-18 % (V0); this gives 15.7 %.
#: On vLLM 0.32 on CPU at concurrency 16 the band ran 10 % slower (216 vs 239 tokens/s); this gives 13.4 %.
ZERO_K_BAND_SLOWDOWN_POINTS = ((2.0, 0.0656), (189.0, 0.2158))


def zero_k_band_slowdown(batch: float) -> float:
    """Fractional slowdown of a K=0 band's steps against no speculation at ``batch``."""
    (b0, s0), (b1, s1) = ZERO_K_BAND_SLOWDOWN_POINTS
    b = min(max(float(batch), b0), b1)
    return s0 + (s1 - s0) * math.log(b / b0) / math.log(b1 / b0)


def zero_k_band_speedup(batch: float) -> float:
    """Speedup of a K=0 band relative to no speculation at ``batch`` (below 1): what K'=0 is worth
    inside a schedule. A schedule therefore prefers K=1 to K=0 wherever K=1 loses less."""
    return 1.0 / (1.0 + zero_k_band_slowdown(batch))


def recommend_schedule(
    cm: CostModel,
    position_rates: Sequence[float],
    max_batch: int = 512,
    *,
    live_batch: float | None = None,
    zero_band_speedup: float | Callable[[float], float] = 1.0,
    coverage: float = 1.0,
) -> list[list[int]]:
    """V1 ``num_speculative_tokens_per_batch_size``: ``[[lo, hi, K], ...]`` covering 1..max_batch,
    inclusive ranges, first range starting at 1, K non-increasing in batch, K = 0 disables.

    K is the best K' per batch (``zero_band_speedup`` is what a K=0 band is worth: a number, or a
    function of the batch such as zero_k_band_speedup), made non-increasing around ``live_batch``: the live batch keeps its own
    best K' (the verdict is given there), larger batches are capped by it and smaller ones raised
    to it. A profile whose best K' is not monotone in batch (a measured curve with a bump) thus
    never gets K=0 at the live batch because some smaller batch had K=0. Without ``live_batch``
    the cap runs from batch 1."""
    if max_batch < 1:
        raise ValueError("max_batch must be >= 1")
    p = tuple(position_rates)
    cache: dict[int, int] = {}

    def zero_band(b: float) -> float:
        return zero_band_speedup(b) if callable(zero_band_speedup) else zero_band_speedup

    def best(b: int) -> int:
        k = cache.get(b)
        if k is None:
            k = cache[b] = best_draft_length(cm, b, p, zero_band(b), coverage)
        return k

    top = int(max_batch)
    anchor = min(max(round(live_batch or 1), 1), top)
    if live_batch is not None:
        # The live batch's band gets the best K' at the measured (fractional) batch itself.
        live = max(float(live_batch), 1.0)
        cache[anchor] = best_draft_length(cm, live, p, zero_band(live), coverage)

    # best K' falls with batch (verification cost rises), so evaluate the ends of a range and
    # split it only where they differ: O(bands · log max_batch) evaluations instead of max_batch.
    # A settled range [lo, hi) takes best(lo), as runs [first, last, K] in batch order (no per-batch list).
    def fill(lo: int, hi: int, runs: list[list[int]]) -> None:
        k_lo, k_hi = best(lo), best(hi)
        if k_lo == k_hi or hi - lo <= 1:
            if hi > lo:
                runs.append([lo, hi - 1, k_lo])
            return
        mid = (lo + hi) // 2
        fill(lo, mid, runs)
        fill(mid, hi, runs)

    below: list[list[int]] = []  # batches 1..anchor-1
    above: list[list[int]] = []  # batches anchor..top
    if anchor > 1:
        fill(1, anchor, below)
    fill(anchor, top, above)
    above.append([top, top, best(top)])
    cap = len(p)
    for run in above:  # the schedule must never grow K with batch ...
        run[2] = cap = min(run[2], cap)
    floor = above[0][2]
    for run in reversed(below):  # ... so batches below the live one get at least its K
        run[2] = floor = max(min(run[2], len(p)), floor)
    bands: list[list[int]] = []
    for first, last, kk in below + above:
        if bands and bands[-1][2] == kk:
            bands[-1][1] = last
        else:
            bands.append([first, last, kk])
    return bands


def closed_loop_speedup(
    model: CostModel, concurrency: float, batch: float, k: float, alpha: float, coverage: float = 1.0
) -> float:
    """Throughput with speculation over without at a fixed number of concurrent requests (what a
    benchmark at concurrency C measures), from a spec-on window alone.

    At concurrency C only ``batch`` requests decode in a step; the other C − B wait outside decode
    (prefill, queue, client) for o seconds per output token, which the window gives:
    (C − B)/B = o / d_spec with d_spec = T_spec(B)/(1 + coverage·K·alpha). Without speculation a
    request decodes a token per plain step, so more of them decode at once: B' solves
    B' = C·T_base(B')/(T_base(B') + o). Speedup = (B·tokens per step/T_spec(B)) / (B'/T_base(B')).
    With C = B (nobody waits outside decode) it is the same-batch speedup."""
    b = max(float(batch), 1e-9)
    c = max(float(concurrency), b)
    per_step = model.tokens_per_step(k, alpha, coverage)
    t_spec = model.spec_step_time(max(b, 1.0), k, coverage)
    outside = (c - b) / b * t_spec / per_step
    b_plain = b
    for _ in range(50):  # a contraction: T_base grows slower than linearly in B here
        t = model.base_step_time(max(b_plain, 1.0))
        nxt = c * t / (t + outside)
        if abs(nxt - b_plain) < 1e-9:
            break
        b_plain = nxt
    return (b * per_step / t_spec) / (b_plain / model.base_step_time(max(b_plain, 1.0)))
