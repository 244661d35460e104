"""Which controller of K the engine runs, and whether speculation stopped. Pure functions.

The engines decide K themselves more and more: vLLM's batch schedule
(``num_speculative_tokens_per_batch_size``) and adaptive verification
(``enable_adaptive_verification``), SGLang's ``--speculative-adaptive`` step bands, TensorRT-LLM's
one-way speculation gate (``acceptance_rate_threshold``). Each route is marked with the mode it runs:

- ``fixed``: one K at every batch (nothing stated, and K does not move at one batch);
- ``schedule``: a stated batch schedule (vLLM's, or TensorRT-LLM's ``draft_len_schedule``);
- ``adaptive``: stated (vLLM's adaptive verification, SGLang's ``speculative_adaptive``), or
  observed: the draft length moves across evaluations at one batch size (SGLang's
  ``sglang:spec_num_steps`` gauge is the draft length of its windows) with no schedule to explain it,
  or, on SGLang, differs between its adaptive batch bands ([1, 64), [64, 128), [128, inf): each band
  runs its own steps). On SGLang the evidence gives the steps each band was seen at;
- ``gated``: TensorRT-LLM's gate is stated and has not fired;
- ``stopped``: speculation is configured but does not draft as configured (``reason``):
  ``gate_fired`` (the spec counters froze while generation goes on, under a stated gate or on
  TensorRT-LLM), ``schedule_dropped`` (data parallelism > 1 with a stated schedule, and the engine
  drafts a constant K above what the schedule gives), ``schedule_at_zero`` (no drafts where the
  stated schedule gives K > 0), ``acceptance_collapsed`` (drafts, but nothing accepted) or
  ``not_drafting`` (the counters froze, no controller stated that explains it).

Never ``stopped`` without the engine's spec counters (``spec_present``): a route that exports no
spec-decode metrics at all is SpecDecodeMetricsMissing's, not this one's.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from specwatch.engines.advice import SGLANG_ADAPTIVE_BANDS, SGLANG_BAND_BATCHES, adapts_draft_length
from specwatch.engines.vllm_schedule import BATCH_SPREAD, SCHEDULE_KEY, SpeculativeSchedule
from specwatch.verdict.config_check import ConfigCheck
from specwatch.windows.derive import WindowStats

MODES = ("fixed", "schedule", "adaptive", "gated", "stopped")
#: What a stated config can say (``none``: no draft.config).
STATED = ("none", "fixed", "schedule", "adaptive", "gated")
STOP_REASONS = ("gate_fired", "schedule_dropped", "schedule_at_zero", "acceptance_collapsed", "not_drafting")
#: TensorRT-LLM's gate (PR #12905): speculation off for good once the rolling acceptance is below it.
GATE_THRESHOLD_KEY = "acceptance_rate_threshold"
GATE_WINDOW_KEY = "acceptance_rate_window_size"
TRTLLM_SCHEDULE_KEY = "draft_len_schedule"
#: An acceptance rate at or below this over a guarded window is a collapse (vllm-ascend #10118).
ACCEPTANCE_COLLAPSE = 0.01
#: The draft length moving by more than this (tokens) at one batch size is a controller at work.
K_VARIATION = 0.5
#: How many (batch, K) observations a route keeps to tell a controller from a fixed K.
K_HISTORY = 64
KObservation = tuple[float, float, float]  # (t, batch, K)


@dataclass(frozen=True)
class Controller:
    """One route's controller of K, with the evidence."""

    mode: str  # MODES
    stated: str  # STATED: what draft.config says
    basis: str  # stated | observed
    evidence: str
    reason: str = ""  # STOP_REASONS when mode is stopped
    expected: str = ""  # what the configuration gives (stopped only)
    seen: str = ""  # what the engine does (stopped only)

    def as_dict(self) -> dict[str, object]:
        return {
            "mode": self.mode,
            "stated": self.stated,
            "basis": self.basis,
            "evidence": self.evidence,
            "reason": self.reason or None,
            "expected": self.expected or None,
            "seen": self.seen or None,
        }

    @property
    def line(self) -> str:
        """One line for the status page."""
        text = f"controller: {self.mode}"
        if self.reason:
            text += f" ({self.reason.replace('_', ' ')})"
        return f"{text}: {self.evidence}"


def _positive_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def stated_mode(config: Mapping[str, object] | None, schedule: SpeculativeSchedule | None = None) -> str:
    """What the stated speculative config (draft.config) makes the engine run."""
    if config is None:
        return "none"
    if adapts_draft_length(config):
        return "adaptive"
    if _positive_number(config.get(GATE_THRESHOLD_KEY)):
        return "gated"
    if (schedule is not None and len(set(schedule.k_values)) > 1) or config.get(TRTLLM_SCHEDULE_KEY):
        return "schedule"
    return "fixed"


def _stated_evidence(stated: str, config: Mapping[str, object] | None, engine: str) -> str:
    config = config or {}
    if stated == "adaptive":
        option = next(o for o in ("enable_adaptive_verification", "speculative_adaptive") if config.get(o) is True)
        return f"draft.config states {option}: the engine chooses K per step"
    if stated == "gated":
        window = config.get(GATE_WINDOW_KEY)
        extra = f" over a window of {window}" if window is not None else ""
        return (
            f"draft.config states {GATE_THRESHOLD_KEY}={config.get(GATE_THRESHOLD_KEY)}{extra}: speculation "
            "switches off for good once the rolling acceptance falls below it"
        )
    if stated == "schedule":
        key = SCHEDULE_KEY if SCHEDULE_KEY in config else TRTLLM_SCHEDULE_KEY
        return f"draft.config states {key}={config.get(key)}"
    return "draft.config states one K" if stated == "fixed" else f"nothing stated; {engine} drafts one K"


def observe(history: deque[KObservation], stats: WindowStats, *, varies: bool, guarded: bool) -> None:
    """Remember the window's (batch, K) when it is evidence of the engine's K (enough drafts, a
    drafter whose draft length is the engine's choice, not its own: no n-gram lookup)."""
    if not guarded or varies or stats.batch_size is None or stats.draft_length is None or not stats.drafts:
        return
    history.append((stats.t, stats.batch_size, stats.draft_length))
    while len(history) > K_HISTORY:
        history.popleft()


def k_variation(
    history: Sequence[KObservation], schedule: SpeculativeSchedule | None
) -> tuple[float, float, float] | None:
    """(lowest K, highest K, batch) when K moved at the latest batch size by more than K_VARIATION
    and beyond what a stated schedule gives there; None otherwise."""
    if len(history) < 2:
        return None
    _, batch, _ = history[-1]
    spread_allowed = max(BATCH_SPREAD * batch, 1.0)
    near = [k for _, b, k in history if abs(b - batch) <= spread_allowed]
    if len(near) < 2:
        return None
    low, high = min(near), max(near)
    spread = high - low
    if schedule is not None and schedule.has_schedule:
        k_low, k_high = schedule.expected_range(batch)
        spread -= k_high - k_low
    return (low, high, batch) if spread > K_VARIATION else None


def _band_name(index: int) -> str:
    low, high = SGLANG_ADAPTIVE_BANDS[index]
    return f"[{low}, {high + 1 if high is not None else 'inf'})"


def sglang_band_steps(history: Sequence[KObservation]) -> list[tuple[int, float, float]]:
    """SGLang's adaptive bands as seen: (band index, K, batch) of the window whose mean batch fell
    in each band, nearest its representative batch (a window across a band edge mixes two bands'
    steps), the latest of those; in band order."""
    best: dict[int, tuple[float, float, float, float]] = {}  # band -> (distance, -t, K, batch)
    for t, batch, k in history:
        b = max(batch, 1.0)
        index = max(i for i, (low, _) in enumerate(SGLANG_ADAPTIVE_BANDS) if low <= b)
        seen = (abs(math.log(b / SGLANG_BAND_BATCHES[index])), -t, k, batch)
        if index not in best or seen[:2] < best[index][:2]:
            best[index] = seen
    return [(index, k, batch) for index, (_, _, k, batch) in sorted(best.items())]


def _band_evidence(bands: Sequence[tuple[int, float, float]]) -> str:
    return "sglang:spec_num_steps per batch band: " + ", ".join(
        f"{_band_name(index)} K={k:.2f} at batch ≈ {batch:.0f}" for index, k, batch in bands
    )


def _enough_generation(stats: WindowStats, k: int, min_drafts: float) -> bool:
    """A window is evidence that speculation stopped only when it generated enough tokens that a
    speculating engine would have drafted min_drafts there (at most K + 1 tokens per draft)."""
    return stats.generation_tokens is not None and stats.generation_tokens >= max(min_drafts, 1.0) * (k + 1)


def _no_drafts(
    stats: WindowStats,
    where: str,
    at: str,
    *,
    engine: str,
    stated: str,
    config: Mapping[str, object] | None,
    schedule: SpeculativeSchedule | None,
    k: int,
) -> tuple[str, str, str, str] | None:
    """A window with generation and no draft: why (None: a K=0 band, as configured)."""
    batch = stats.batch_size
    gen = f"{stats.generation_tokens:.0f} tokens generated and no draft {where}{at}"
    if schedule is not None and schedule.has_schedule and batch is not None:
        low, high = schedule.expected_range(batch)
        if high == 0:
            return None  # a K=0 band, as configured
        if stated == "schedule":
            return (
                "schedule_at_zero",
                f"the stated schedule gives K={low}..{high}{at}",
                gen,
                "the batch schedule drafts nothing where it gives K > 0 (vLLM keys its K=0 band on the "
                "scheduled count, prefills included)",
            )
    if stated == "gated" or engine == "trtllm":
        threshold = (config or {}).get(GATE_THRESHOLD_KEY)
        expected = (
            f"speculation on (gate {GATE_THRESHOLD_KEY}={threshold} stated)"
            if stated == "gated"
            else "speculation on (the spec counters exist)"
        )
        return (
            "gate_fired",
            expected,
            gen,
            "the spec counters froze while generation goes on: the speculation gate fired (one-way until restart)",
        )
    return ("not_drafting", f"drafts of K={k}", gen, "the spec counters froze while generation goes on")


def stopped(
    windows: Sequence[tuple[WindowStats, ConfigCheck | None, bool]],
    *,
    engine: str,
    stated: str,
    config: Mapping[str, object] | None,
    schedule: SpeculativeSchedule | None,
    k: int,
    min_drafts: float,
) -> tuple[str, str, str, str] | None:
    """(reason, expected, seen, evidence) when speculation is configured but not drafting as
    configured, from the shortest window that can tell; None otherwise. ``windows``: (stats, the
    stated config's check, guard passed), any order."""
    for stats, check, guarded in sorted(windows, key=lambda w: w[0].span_seconds):
        if not stats.spec_present or stats.drafts is None:
            continue  # no spec counters: SpecDecodeMetricsMissing's case
        where = f"over the {stats.window} window"
        batch = stats.batch_size
        at = f" at batch {batch:.1f}" if batch is not None else ""
        if stats.drafts == 0 and _enough_generation(stats, k, min_drafts):
            return _no_drafts(stats, where, at, engine=engine, stated=stated, config=config, schedule=schedule, k=k)
        if (
            check is not None
            and check.mismatch
            and stats.engines > 1
            and stated == "schedule"
            and check.observed_k is not None
            and check.observed_k > check.expected_high
        ):
            return (
                "schedule_dropped",
                f"the stated schedule gives K={check.expected_low}..{check.expected_high}{at}",
                f"K={check.observed_k:.2f} {where} on {stats.engines} data-parallel engines",
                "data parallelism > 1 drops the batch schedule: the engine drafts num_speculative_tokens at "
                "every batch",
            )
        if guarded and stats.acceptance_rate is not None and stats.acceptance_rate <= ACCEPTANCE_COLLAPSE:
            return (
                "acceptance_collapsed",
                "an acceptance rate above 0",
                f"acceptance rate {stats.acceptance_rate:.3f} over {stats.drafts:.0f} drafts {where}{at}",
                "drafts are proposed but none is accepted",
            )
        if stats.drafts > 0 or _enough_generation(stats, k, min_drafts):
            return None  # this window tells: drafting as configured
    return None


def classify(
    windows: Sequence[tuple[WindowStats, ConfigCheck | None, bool]],
    history: Sequence[KObservation],
    *,
    engine: str,
    config: Mapping[str, object] | None,
    schedule: SpeculativeSchedule | None,
    k: int | None,
    min_drafts: float,
    configured: bool,
) -> Controller:
    """The route's controller now. ``configured``: the route is expected to speculate (its
    expect_speculation, or a stated draft.config)."""
    stated = stated_mode(config, schedule)
    k_stated = schedule.num_speculative_tokens if schedule is not None else (k or 1)
    if configured:
        stop = stopped(
            windows, engine=engine, stated=stated, config=config, schedule=schedule, k=k_stated, min_drafts=min_drafts
        )
        if stop is not None:
            reason, expected, seen, evidence = stop
            return Controller("stopped", stated, "observed", evidence, reason, expected, seen)
    moved = k_variation(history, schedule)
    bands = sglang_band_steps(history) if engine == "sglang" else []
    if moved is not None:
        low, high, batch = moved
        source = "sglang:spec_num_steps" if engine == "sglang" else "the draft length"
        evidence = f"{source} moved between {low:.2f} and {high:.2f} at batch ≈ {batch:.0f}"
        if stated == "adaptive":
            evidence = f"{_stated_evidence(stated, config, engine)}; {evidence}"
        if len(bands) > 1:
            evidence = f"{evidence}; {_band_evidence(bands)}"
        return Controller("adaptive", stated, "observed", evidence)
    if len(bands) > 1 and max(k for _, k, _ in bands) - min(k for _, k, _ in bands) > K_VARIATION:
        evidence = _band_evidence(bands)
        if stated == "adaptive":
            evidence = f"{_stated_evidence(stated, config, engine)}; {evidence}"
        return Controller("adaptive", stated, "observed", evidence)
    if stated == "adaptive" and bands:
        evidence = f"{_stated_evidence(stated, config, engine)}; {_band_evidence(bands)}"
        return Controller("adaptive", stated, "stated", evidence)
    if stated in ("none", "fixed"):
        return Controller(
            "fixed", stated, "stated" if stated == "fixed" else "observed", _stated_evidence(stated, config, engine)
        )
    return Controller(stated, stated, "stated", _stated_evidence(stated, config, engine))
