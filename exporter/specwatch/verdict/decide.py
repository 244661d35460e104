"""Verdicts: is speculation paying at the live batch size, and what to change.

Pure: takes a CostModel, one window's WindowStats and the decision settings, returns numbers.
keep, shorten and disable are given only when the predicted speedup's interval
(costmodel/uncertainty.py) is clear of 1; otherwise the verdict is ``undecided`` and names the
measurement that would decide. The hold (a new verdict must stay the candidate for
``decision.hold``, a time) lives in ``next_verdict``. The rules and their hysteresis are explained
in docs/costmodel.md ("Verdicts").
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar, overload

from specwatch import costmodel as cmod
from specwatch.costmodel import uncertainty
from specwatch.engines.advice import ControllerTerms, adaptive_note, adapts_draft_length
from specwatch.engines.vllm_schedule import (
    SCHEDULE_KEY,
    SpeculativeConfigValue,
    complete_speculative_config,
    k_at_batch,
    speculative_config,
)
from specwatch.windows.derive import WindowStats

if TYPE_CHECKING:
    from specwatch.config import DecisionConfig

_V = TypeVar("_V")

VERDICTS = ("spec_off", "insufficient_data", "undecided", "keep", "shorten", "disable")
#: What to do with the recommendation: nothing (keep), paste ``recommended_config`` (a complete
#: --speculative-config), merge ``config_changes`` into yours (the drafter's model path is unknown),
#: remove --speculative-config (disable), or run the ``measurement`` that decides (undecided).
ACTIONS = ("no_change", "apply", "merge", "remove_speculative_config", "measure")
#: What an undecided verdict asks for: a spec-off canary, a restart with a shorter K, or nothing
#: (the speedup is too close to 1 for on or off to matter at this batch).
MEASUREMENTS = ("spec_off_canary", "restart_with_draft_length", "near_breakeven")

#: Largest batch the recommended V1 schedule covers when the server's max_num_seqs is unknown
#: (the range used in vLLM's dynamic speculative decoding docs).
DEFAULT_SCHEDULE_MAX_BATCH = 512

#: Keys to merge into ``--speculative-config``.
SpeculativeConfig = dict[str, SpeculativeConfigValue]

#: What a ``num_speculative_tokens_per_batch_size`` schedule costs in vLLM today; reported with
#: every recommendation that contains one (status JSON ``notes``, docs/runbook.md).
SCHEDULE_NOTES = (
    (
        "num_speculative_tokens_per_batch_size makes vLLM capture piecewise instead of full CUDA graphs: "
        "steps can be a little slower than with a fixed num_speculative_tokens at the same batch."
    ),
    (
        "vLLM ignores the schedule with data parallelism (data_parallel_size > 1): use a fixed "
        "num_speculative_tokens there."
    ),
    (
        "A hard cut from K >= 2 to K = 0 at a batch threshold has been reported to collapse throughput: "
        "this schedule steps K down and keeps K >= 1 wherever that loses less than a K = 0 band."
    ),
)
ZERO_BAND_NOTE = (
    "A K = 0 band is not free: its steps run slower than a server without speculation, more so "
    "under load (6.6 % at concurrency 2 to 21.6 % at 189 measured on vLLM). If the server lives in "
    "that band, remove --speculative-config instead."
)
MERGE_NOTE = (
    "The drafter's model path is not known to specwatch (vLLM does not export it): merge "
    "config_changes into your --speculative-config; pasted alone vLLM refuses it."
)


@dataclass(frozen=True)
class Measurement:
    """The measurement that lets an undecided verdict decide (``kind`` one of MEASUREMENTS)."""

    kind: str
    minutes: float | None  # how long to run it; None for near_breakeven
    batch: float  # the live batch it must run at
    how: str  # what to do, with the flag or config
    draft_length: int | None = None  # restart_with_draft_length: the K' to run
    speculative_config: dict[str, object] | None = None  # that restart's complete --speculative-config
    config_changes: SpeculativeConfig | None = None  # its keys, to merge when it cannot be complete


class _OnFirstRead(Generic[_V]):
    """A field of ``Assessment`` that may be worked out on its first read: the value its
    ``__init__`` (or ``with_fields``) was given, or, for an assessment made by ``with_deferred``, the
    deferred function's result, kept from then on. As a dataclass field's default it gives None
    (dataclasses reads a descriptor's default from the class)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name, self._deferred = name, _deferred_key(name)

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> None: ...
    @overload
    def __get__(self, obj: Assessment, owner: type | None = None) -> _V | None: ...
    def __get__(self, obj: Assessment | None, owner: type | None = None) -> _V | None:
        if obj is None:
            return None
        state = obj.__dict__
        value: _V | None
        try:
            value = state[self._name]
            return value
        except KeyError:
            pass
        compute = state.get(self._deferred)
        if compute is None:  # another thread stored the value between the two lookups
            value = state[self._name]
            return value
        value = compute()
        # Stored before the function goes: a reader in another thread finds one or the other.
        state[self._name] = value
        state.pop(self._deferred, None)
        return value

    def __set__(self, obj: Assessment, value: _V | None) -> None:
        obj.__dict__[self._name] = value  # __init__'s, through object.__setattr__ (frozen)


def _deferred_key(name: str) -> str:
    """Where a deferred assessment keeps the function that works out its field ``name``."""
    return f"_{name}_deferred"


@dataclass(frozen=True)
class Assessment:
    candidate: str  # one of VERDICTS, before the hold
    breakeven_acceptance_rate: float | None = None
    acceptance_margin: float | None = None  # alpha − break-even
    expected_speedup: float | None = None
    recommended_draft_length: int | None = None  # K the recommendation gives at the live batch; 0 = disable
    # Reported only (/metrics, the page, the status document), never decided on: a search of a dozen
    # step times, worked out on the first read for an assessment made by ``assess``.
    max_speculative_batch_size: _OnFirstRead[int] = _OnFirstRead()
    recommended_config: dict[str, object] | None = None  # a complete --speculative-config (action apply)
    config_changes: SpeculativeConfig | None = None  # the keys that change (actions apply and merge)
    action: str | None = None  # one of ACTIONS; None without a verdict
    notes: tuple[str, ...] = ()
    speedup_lower: float | None = None  # expected_speedup's interval at decision.confidence
    speedup_upper: float | None = None
    measurement: Measurement | None = None  # undecided only
    # The interval's one-sigma parts in log units (costmodel/uncertainty.py): the cost model's, alpha's.
    model_log_error: float | None = None
    sampling_log_error: float | None = None
    # P(speedup < 1) from the same interval: a warning that needs no interval clear of 1.
    loss_probability: float | None = None
    # What the advice in the engine's controller's terms needs (controller_gain.controller_terms):
    # reads as ControllerTerms | None, the value given to __init__ or, for an assessment made by
    # with_deferred, worked out on the first read.
    controller_terms: _OnFirstRead[ControllerTerms] = _OnFirstRead()


_ASSESSMENT_FIELDS = frozenset(f.name for f in fields(Assessment))
#: The fields an assessment may work out on their first read (``with_deferred``).
DEFERRABLE_FIELDS = frozenset(
    name for name in _ASSESSMENT_FIELDS if isinstance(Assessment.__dict__.get(name), _OnFirstRead)
)


def with_fields(assessment: Assessment, **changes: object) -> Assessment:
    """``dataclasses.replace(assessment, **changes)`` without running the frozen dataclass's
    ``__init__``, which sets its 17 fields one ``object.__setattr__`` at a time (the evaluation
    replaces one field of each window's assessment every poll): its fields copied, ``changes``
    over them. The same value as ``replace`` while Assessment has no ``__post_init__``, InitVar
    or init=False field (tests/unit/verdict/test_decide_with_fields.py holds it to that)."""
    unknown = changes.keys() - _ASSESSMENT_FIELDS
    if unknown:
        raise TypeError(f"Assessment has no field {', '.join(sorted(unknown))}")
    new = object.__new__(type(assessment))
    state = new.__dict__
    state.update(assessment.__dict__)
    state.update(changes)
    for name in DEFERRABLE_FIELDS.intersection(changes):
        state.pop(_deferred_key(name), None)  # a deferred value, replaced before it was read
    return new


def with_deferred(assessment: Assessment, name: str, compute: Callable[[], object]) -> Assessment:
    """``with_fields(assessment, **{name: compute()})`` with ``compute`` run on the first read of
    the field instead of now (``name`` one of ``DEFERRABLE_FIELDS``). For what most polls nobody
    reads: ``controller_terms`` (only the advice in an engine's terms reads them: a status or page
    render, a verdict's log line, another engine's /metrics label) and ``max_speculative_batch_size``
    (a /metrics, page or status render). ``compute`` must be pure over what it closes on: it may
    run in another thread, later, or twice. Equal to the eager copy in every field
    (tests/unit/verdict/test_decide_with_fields.py)."""
    if name not in DEFERRABLE_FIELDS:
        raise TypeError(f"Assessment has no field {name} to work out on first read")
    new = object.__new__(type(assessment))
    state: dict[str, Any] = new.__dict__
    state.update(assessment.__dict__)
    state.pop(name, None)
    state[_deferred_key(name)] = compute
    return new


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def extend_position_rates(rates: Sequence[float], k: int) -> tuple[float, ...]:
    """Per-position rates up to position ``k``: positions no draft reached in the window (a
    schedule proposed fewer tokens) continue the last measured conditional rate p_i/p_{i-1}."""
    p = [float(x) for x in rates[:k]]
    if not p or len(p) >= k:
        return tuple(p)
    ratio = p[-1] / p[-2] if len(p) >= 2 and p[-2] > 0 else p[-1]
    ratio = min(max(ratio, 0.0), 1.0)
    while len(p) < k:
        p.append(p[-1] * ratio)
    return tuple(p)


def _no_verdict(stats: WindowStats, decision: DecisionConfig) -> Assessment | None:
    """The assessment when the window cannot carry a verdict (speculation off, idle, too few drafts
    or a missing input); None when it can."""
    drafts = _finite(stats.drafts)
    if not stats.spec_present:
        return Assessment(candidate="spec_off")
    if drafts is not None and drafts <= 0 and not (_finite(stats.draft_tokens) or 0.0) > 0:
        # Configured but not drafting: while tokens are generated that is speculation switched off
        # (e.g. a num_speculative_tokens_per_batch_size band with K=0); an idle server says nothing.
        # Draft tokens without drafts is a source that cannot count drafts: no evidence either way.
        generated = _finite(stats.generation_tokens) or 0.0
        return Assessment(candidate="spec_off" if generated > 0 else "insufficient_data")
    k, batch = _finite(stats.draft_length), _finite(stats.batch_size)
    # V0 has no draft counter (drafts is None) and reports lifetime acceptance: no guard to apply.
    too_few = drafts is not None and drafts < decision.min_drafts
    if too_few or _finite(stats.acceptance_rate) is None or k is None or k <= 0 or batch is None:
        # Too few drafts (or a missing input): a verdict here would be noise, so no gauges either.
        return Assessment(candidate="insufficient_data")
    return None


def _candidate(
    *,
    alpha: float,
    speedup: float,
    line: float,
    speed_line: float,
    band: float,
    best_k: int,
    k_window: int,
    s_best: float,
    s_now: float,
    previous_verdict: str | None,
) -> str:
    """keep / shorten / disable from the window's numbers, with the hysteresis lines."""
    if best_k == 0:
        # No draft length pays: disable, unless alpha at the measured K is still inside the band.
        return "disable" if (alpha < line or speedup < speed_line) else "keep"
    if best_k < k_window and (alpha < line or previous_verdict == "shorten" or s_best - s_now > band):
        # Below the line at K but a shorter draft pays: the actionable verdict is shorten, and the
        # recommended config says so (disable would contradict it).
        return "shorten"
    return "disable" if alpha < line else "keep"


def stay_margin(interval: uncertainty.SpeedupInterval, band: float) -> float:
    """How far (log speedup) a bound may cross the line before a verdict in effect is left.
    Poll to poll the bound moves with the window's noise: alpha's sampling error, at the interval's
    confidence, and what the interval does not model (the live batch and the step times wander),
    which the hysteresis band stands for; whichever is larger."""
    return max(band, interval.z * interval.sampling_log_error)


def interval_lines(candidate: str, previous_verdict: str | None, *, band: float, stay: float) -> tuple[float, float]:
    """The lines the interval must clear for ``candidate`` with ``previous_verdict`` in effect:
    (keep's lower bound above, disable's upper bound below; shorten is decided by either). The
    rule (docs/costmodel.md, "Uncertainty"); * marks the stay lines, which only the verdict in
    effect gets when it is the candidate again (entering any verdict uses the others):

    =================  ===========================  ===========================
    verdict in effect  keep: lower bound above      disable: upper bound below
    =================  ===========================  ===========================
    any other          1 − band                     1 − band
    keep               (1 − band)·e^−stay *         1 − band
    shorten            (1 − band)·e^−stay *         (1 + band)·e^stay *
    disable            1 + band                     (1 + band)·e^stay *
    =================  ===========================  ===========================

    Only leaving a verdict in effect is made harder, so it does not flap with undecided as a
    bound wanders about its line; entering needs only the entry lines. A shorten in effect gets
    both stay lines: it was decided on one side or the other, and leaving it needs the bound of
    that side to cross its line by the further stay margin."""
    keep_line = 1.0 + band if previous_verdict == "disable" else 1.0 - band
    disable_line = 1.0 + band if previous_verdict in ("disable", "shorten") else 1.0 - band
    if candidate == previous_verdict and candidate in ("keep", "shorten"):
        keep_line *= math.exp(-stay)
    if candidate == previous_verdict and candidate in ("disable", "shorten"):
        disable_line *= math.exp(stay)
    return keep_line, disable_line


class _ShortenAdvice(NamedTuple):
    recommended_draft_length: int
    recommended_config: dict[str, object] | None
    config_changes: SpeculativeConfig
    action: str
    notes: tuple[str, ...]


def _shorten_advice(
    cm: cmod.CostModel,
    stats: WindowStats,
    p: Sequence[float],
    best_k: int,
    *,
    batch: float,
    coverage: float,
    max_batch: int,
    named: str | None,
    base_config: Mapping[str, object] | None,
) -> _ShortenAdvice:
    """The config a shorten verdict recommends: a batch schedule where vLLM can apply it (V1 schema:
    0.24+ has num_speculative_tokens_per_batch_size; one engine: vLLM ignores it with DP > 1)."""
    cover = max(int(max_batch), math.ceil(batch))
    if stats.schema == "v1" and (stats.engines or 1) <= 1:
        schedule = cmod.recommend_schedule(
            cm, p, cover, live_batch=batch, zero_band_speedup=cmod.zero_k_band_speedup, coverage=coverage
        )
    else:
        schedule = [[1, cover, best_k]]
    changes = speculative_config(named, max(kk for _, _, kk in schedule), schedule)
    complete = complete_speculative_config(changes, named, base_config)
    notes: list[str] = []
    if SCHEDULE_KEY in changes:
        notes.extend(SCHEDULE_NOTES)
        if any(kk == 0 for _, _, kk in schedule):
            notes.append(ZERO_BAND_NOTE)
    if complete is None:
        notes.append(MERGE_NOTE)
    return _ShortenAdvice(
        k_at_batch(changes, batch), complete, changes, "apply" if complete is not None else "merge", tuple(notes)
    )


def _measurement(
    cm: cmod.CostModel,
    stats: WindowStats,
    interval: uncertainty.SpeedupInterval,
    speedup: float,
    *,
    shorter_k: int | None,
    batch: float,
    coverage: float,
    named: str | None,
    base_config: Mapping[str, object] | None,
) -> Measurement:
    """What decides an undecided verdict. A shorter K the model prefers is tried directly (a restart
    with K', graded against the window before it); otherwise a spec-off canary at the live batch,
    long enough for its plain steps to replace the model's error."""
    t_base = cm.step_times(batch, max(float(stats.draft_length or 1.0), 1.0), coverage)[0]
    spread = uncertainty.step_log_spread(stats.itl_p50_seconds, stats.itl_p99_seconds)
    minutes = uncertainty.canary_minutes(interval, speedup, step_seconds=t_base, step_spread=spread)
    at = f"while it decodes about {batch:.0f} requests per step"
    if minutes is None:
        return Measurement(
            "near_breakeven",
            None,
            batch,
            f"The expected speedup {speedup:.2f}x is too close to 1 for on or off to matter at this batch "
            f"(interval {interval.lower:.2f}-{interval.upper:.2f}x): nothing to change or measure.",
        )
    if shorter_k is not None:
        changes = speculative_config(named, shorter_k)
        complete = complete_speculative_config(changes, named, base_config)
        flag = json.dumps(complete if complete is not None else changes, separators=(",", ":"))
        verb = "with --speculative-config" if complete is not None else "merging into your --speculative-config"
        return Measurement(
            "restart_with_draft_length",
            minutes,
            batch,
            f"Restart vLLM {verb} '{flag}' for {minutes:.0f} minutes {at}; specwatch measures the "
            "change against the window before it (specwatch_advice_measured_gain_ratio).",
            draft_length=shorter_k,
            speculative_config=complete,
            config_changes=changes,
        )
    return Measurement(
        "spec_off_canary",
        minutes,
        batch,
        f"Run this server (or one replica of the route) without --speculative-config for {minutes:.0f} "
        f"minutes {at}, with learning.enabled: true in specwatch's config, then restore the flag: "
        "specwatch learns the plain step next to the speculative one and the interval narrows.",
    )


def assess(
    cm: cmod.CostModel,
    stats: WindowStats,
    decision: DecisionConfig,
    method: str | None,
    previous_verdict: str | None,
    max_batch: int = DEFAULT_SCHEDULE_MAX_BATCH,
    config_method: str | None = "same",
    base_config: Mapping[str, object] | None = None,
) -> Assessment:
    """Assess one route/window. ``decision`` gives min_drafts and margin. ``previous_verdict`` is
    the verdict in effect, which sets the side of the hysteresis band. ``config_method`` is the
    vLLM method the recommended config names ("same" = ``method``, None = unknown: the answer is
    then keys to merge). ``base_config``: the --speculative-config the server runs with, if stated;
    with adaptive verification on there the engine picks K per step, so shorten becomes keep.

    The verdict and the recommended config come from the same numbers and always agree: disable
    recommends removing --speculative-config, keep recommends no change, shorten a config whose K
    at the live batch is the recommended draft length (``verdict_agrees_with_config``)."""
    early = _no_verdict(stats, decision)
    if early is not None:
        return early
    alpha, k, batch = (
        float(stats.acceptance_rate or 0.0),
        float(stats.draft_length or 0.0),
        float(stats.batch_size or 0.0),
    )

    margin = float(decision.margin or 0.0)
    cm = cm.with_method(method)
    c = cmod.draft_coverage(_finite(stats.draft_coverage))
    b = max(batch, 1.0)  # drafts were verified, so at least one request was decoding
    breakeven = cmod.breakeven_acceptance_rate(cm, b, k, c)
    speedup = cmod.expected_speedup(cm, b, k, alpha, c)

    # Window size of the config = configured K (number of `position` labels), else measured K.
    k_window = stats.configured_k or max(1, math.ceil(k - 1e-9))
    rates = stats.position_rates
    if rates:
        p = extend_position_rates(rates, k_window)
    else:
        # No per-position counters (V0 schema): i.i.d. rates that reproduce alpha at K.
        p = cmod.position_rates_from_alpha(alpha, k_window)
    best_k = cmod.best_draft_length(cm, b, p, coverage=c)

    # Hysteresis: once disabled, speculation must clear the line by `margin` to come back;
    # otherwise it must fall `margin` below it to be disabled.
    line = breakeven + margin if previous_verdict == "disable" else breakeven - margin
    # The same band in speedup units (dS/dalpha = K·T_base/T_spec) for the shorten decision.
    t_base, t_spec = cm.step_times(b, k, c)
    band = margin * c * k * t_base / t_spec
    s_best = cmod.expected_speedup_for_positions(cm, b, p[:best_k], c) if best_k > 0 else 1.0
    s_now = cmod.expected_speedup_for_positions(cm, b, p[:k_window], c) if p else speedup
    # The same hysteresis in speedup units: leaving disable needs 1 + band, entering it 1 - band.
    speed_line = 1.0 + band if previous_verdict == "disable" else 1.0 - band
    candidate = _candidate(
        alpha=alpha,
        speedup=speedup,
        line=line,
        speed_line=speed_line,
        band=band,
        best_k=best_k,
        k_window=k_window,
        s_best=s_best,
        s_now=s_now,
        previous_verdict=previous_verdict,
    )
    interval = uncertainty.speedup_interval(
        cm,
        speedup,
        k=k,
        alpha=alpha,
        coverage=c,
        drafts=_finite(stats.drafts),
        confidence=decision.confidence,
        batch=b,
    )
    named = method if config_method == "same" else config_method
    assessment = partial(
        Assessment,
        breakeven_acceptance_rate=breakeven,
        acceptance_margin=alpha - breakeven,
        expected_speedup=speedup,
        speedup_lower=interval.lower,
        speedup_upper=interval.upper,
        model_log_error=interval.model_log_error,
        sampling_log_error=interval.sampling_log_error,
        loss_probability=uncertainty.loss_probability(speedup, interval.model_log_error, interval.sampling_log_error),
    )
    # The largest batch where (K, alpha) pays is reported, never decided on: its search (a dozen
    # step times at a K measured afresh each poll) runs when /metrics, the page or the status reads it.
    b_max = partial(cmod.max_speculative_batch_size, cm, k, alpha, coverage=c)

    def verdict(**decided: Any) -> Assessment:
        return with_deferred(assessment(**decided), "max_speculative_batch_size", b_max)

    # keep claims that speculation pays, disable that it does not, shorten either (a shorter K pays
    # more, or the current K does not pay): the interval must clear the line on that side.
    keep_line, disable_line = interval_lines(candidate, previous_verdict, band=band, stay=stay_margin(interval, band))
    pays = interval.lower > keep_line
    loses = interval.upper < disable_line
    decided = {"keep": pays, "disable": loses}.get(candidate, pays or loses)
    if not decided:
        # Switching off (or shortening) a speculation that pays is the costliest mistake: below
        # the confidence asked for, say what would decide instead.
        measurement = _measurement(
            cm,
            stats,
            interval,
            speedup,
            # under adaptive verification the engine picks K per step: no K' to restart with
            shorter_k=best_k if 1 <= best_k < k_window and not adapts_draft_length(base_config) else None,
            batch=b,
            coverage=c,
            named=named,
            base_config=base_config,
        )
        # Until measured, the server keeps the K it runs.
        return verdict(
            candidate="undecided", recommended_draft_length=k_window, action="measure", measurement=measurement
        )
    if candidate == "disable":
        return verdict(candidate=candidate, recommended_draft_length=0, action="remove_speculative_config")
    if candidate == "keep":
        return verdict(candidate=candidate, recommended_draft_length=k_window, action="no_change")
    if adapts_draft_length(base_config):  # adaptive verification: the engine picks K per step, not us
        notes = (adaptive_note(base_config),)
        return verdict(candidate="keep", recommended_draft_length=k_window, action="no_change", notes=notes)
    advice = _shorten_advice(
        cm, stats, p, best_k, batch=b, coverage=c, max_batch=max_batch, named=named, base_config=base_config
    )
    return verdict(
        candidate=candidate,
        recommended_draft_length=advice.recommended_draft_length,
        recommended_config=advice.recommended_config,
        config_changes=advice.config_changes,
        action=advice.action,
        notes=advice.notes,
    )


def verdict_agrees_with_config(assessment: Assessment, batch: float, current_k: int) -> bool:
    """The invariant ``assess`` keeps: what the verdict says is what the config does at ``batch``."""
    a = assessment
    if a.candidate == "disable":
        return (
            a.recommended_config is None
            and a.config_changes is None
            and a.recommended_draft_length == 0
            and a.action == "remove_speculative_config"
        )
    if a.candidate == "keep":
        return (
            a.recommended_config is None
            and a.config_changes is None
            and a.action == "no_change"
            and a.recommended_draft_length == current_k
        )
    if a.candidate == "shorten":
        if a.config_changes is None or a.recommended_draft_length is None:
            return False
        k_live = k_at_batch(a.config_changes, batch)
        complete_ok = a.recommended_config is None or k_at_batch(a.recommended_config, batch) == k_live
        return 1 <= k_live == a.recommended_draft_length < current_k and complete_ok
    if a.candidate == "undecided":
        return (
            a.recommended_config is None
            and a.config_changes is None
            and a.recommended_draft_length == current_k
            and a.action == "measure"
            and a.measurement is not None
        )
    return a.recommended_config is None and a.config_changes is None and a.action is None


@dataclass(frozen=True)
class VerdictState:
    current: str
    pending: str | None = None
    pending_since: float | None = None  # time of the first evaluation that gave ``pending``


def next_verdict(state: VerdictState | None, candidate: str, hold_seconds: float, now: float) -> VerdictState:
    """Apply the hold, a time: the first evaluation takes effect at once; later a different
    candidate takes effect once it has been the candidate for ``hold_seconds`` without a break
    (a different candidate restarts the clock, the current one clears it). A time, not a count of
    evaluations, so that a hold means the same at any poll interval."""
    if candidate not in VERDICTS:
        raise ValueError(f"unknown verdict {candidate!r}")
    if state is None:
        return VerdictState(candidate)
    if candidate == state.current:
        return VerdictState(state.current)
    since = state.pending_since if candidate == state.pending and state.pending_since is not None else now
    if now - since >= hold_seconds:
        return VerdictState(candidate)
    return VerdictState(state.current, candidate, since)
