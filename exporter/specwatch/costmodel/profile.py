"""Measured step times: the seam where a measured (or learned) curve replaces the roofline.

``CostModel.step_time`` asks its ``profile`` (anything with ``step_seconds``, see StepTimeCurve)
when one is set, and the roofline otherwise. ``Profile`` is the piecewise-linear curve measured
with speculation off (format in docs/costmodel.md, "Measured profile").
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, TypeGuard

from specwatch.costmodel.errors import CostModelError

PROFILE_KEY = "profile"


class StepTimeCurve(Protocol):
    """Seconds of one target forward, from measurements rather than from the roofline."""

    def step_seconds(self, tokens: float, context_tokens: float, roofline_kv_seconds_per_token: float) -> float:
        """``tokens`` query tokens (>= 1) over ``context_tokens`` KV tokens in the whole batch.
        ``roofline_kv_seconds_per_token`` is the roofline's KV streaming cost, for curves that
        need a context correction but measured none."""
        ...


class RelativeStepTimeCurve(Protocol):
    """A curve learned relative to the roofline (costmodel/learned.py): the cost model scales its
    absolute spec costs (fixed costs, the drafter's roofline) by ``spec_cost_ratio``."""

    def spec_cost_ratio(self, tokens: float) -> float: ...

    def step_seconds(self, tokens: float, context_tokens: float, roofline_kv_seconds_per_token: float) -> float: ...


def is_relative_curve(curve: object) -> TypeGuard[RelativeStepTimeCurve]:
    """Whether ``curve`` has RelativeStepTimeCurve's methods: the test a runtime-checkable Protocol's
    isinstance makes, without its walk over the protocol's members (tens of microseconds, paid by
    every new learned cost model, each time the learner takes a point)."""
    return getattr(curve, "spec_cost_ratio", None) is not None and getattr(curve, "step_seconds", None) is not None


@dataclass(frozen=True)
class Profile:
    """Measured step time of the target (speculation off) vs query tokens in the step.

    ``points``: (tokens, seconds), tokens strictly increasing and >= 1 (a measured value in (0, 1)
    is read as 1), seconds non-decreasing.
    ``context_tokens``: per-request context during the measurement (enables the KV correction).
    ``kv_seconds_per_token``: extra seconds per KV token; None = take it from the roofline.
    """

    points: tuple[tuple[float, float], ...]
    context_tokens: float | None = None
    kv_seconds_per_token: float | None = None
    source: str | None = None

    def interpolate(self, tokens: float) -> float:
        pts = self.points
        if tokens <= pts[0][0]:
            return pts[0][1]  # fewer tokens cannot be cheaper than the memory-bound floor
        for (x0, y0), (x1, y1) in itertools.pairwise(pts):
            if tokens <= x1:
                return y0 + (y1 - y0) * (tokens - x0) / (x1 - x0)
        (x0, y0), (x1, y1) = pts[-2], pts[-1]  # linear extrapolation past the last point
        return y1 + (y1 - y0) * (tokens - x1) / (x1 - x0)

    def step_seconds(self, tokens: float, context_tokens: float, roofline_kv_seconds_per_token: float) -> float:
        t = self.interpolate(tokens)
        if self.context_tokens is not None:
            # The profile was measured with `tokens` requests at its own context; correct the
            # attention term to the real KV size (a scalar correction, docs/costmodel.md).
            coef = self.kv_seconds_per_token if self.kv_seconds_per_token is not None else roofline_kv_seconds_per_token
            t += coef * (context_tokens - tokens * self.context_tokens)
        return max(t, 1e-6)


def _invalid(message: str) -> CostModelError:
    return CostModelError(PROFILE_KEY, message)


def _is_number(value: object) -> TypeGuard[float]:
    return not isinstance(value, bool) and isinstance(value, (int, float))


def parse_profile(data: object) -> Profile:
    """Validate a loaded YAML/JSON profile. Format (docs/costmodel.md)::

        context_tokens: 1024            # optional, per-request context while measuring
        kv_seconds_per_token: 3.9e-8    # optional
        source: "vllm bench serve, spec off, 2026-01-10"   # optional
        points:                         # >= 2 entries; [tokens, seconds] pairs also accepted
          - {tokens: 1, seconds: 0.0071}
          - {tokens: 64, seconds: 0.0079}

    Raises CostModelError (key ``profile``) naming the point and field at fault.
    """
    if isinstance(data, list):
        data = {"points": data}
    if not isinstance(data, Mapping):
        raise _invalid("profile: expected a mapping with 'points'")
    unknown = set(data) - {"points", "context_tokens", "kv_seconds_per_token", "source"}
    if unknown:
        raise _invalid(f"profile: unknown key(s) {sorted(unknown)}")
    raw = data.get("points")
    if not isinstance(raw, list) or len(raw) < 2:
        raise _invalid("profile.points: need at least 2 points")
    pts: list[tuple[float, float]] = []
    for i, p in enumerate(raw):
        if isinstance(p, Mapping):
            extra = set(p) - {"tokens", "seconds"}
            if extra:
                raise _invalid(f"profile.points[{i}]: unknown key(s) {sorted(extra)}")
            t, s = p.get("tokens"), p.get("seconds")
        elif isinstance(p, (list, tuple)) and len(p) == 2:
            t, s = p
        else:
            raise _invalid(f"profile.points[{i}]: expected {{tokens, seconds}} or [tokens, seconds]")
        if not _is_number(t) or not math.isfinite(t) or t <= 0:
            raise _invalid(f"profile.points[{i}].tokens: must be a number > 0")
        # A measured mean batch below 1 (0.99: one request with idle gaps between steps) is a
        # one-request step: no step carries fewer than one query token.
        t = max(float(t), 1.0)
        if not _is_number(s) or not math.isfinite(s) or s <= 0:
            raise _invalid(f"profile.points[{i}].seconds: must be a number > 0")
        if pts and t <= pts[-1][0]:
            raise _invalid(f"profile.points[{i}].tokens: must be strictly increasing (values below 1 count as 1)")
        if pts and s < pts[-1][1]:
            raise _invalid(
                f"profile.points[{i}].seconds: step time decreases with more tokens "
                f"({s} < {pts[-1][1]}); smooth the measurement (e.g. running max) first"
            )
        pts.append((float(t), float(s)))
    ctx = data.get("context_tokens")
    if ctx is not None and (not _is_number(ctx) or ctx < 0):
        raise _invalid("profile.context_tokens: must be a number >= 0")
    kv = data.get("kv_seconds_per_token")
    if kv is not None and (not _is_number(kv) or kv < 0):
        raise _invalid("profile.kv_seconds_per_token: must be a number >= 0")
    src = data.get("source")
    return Profile(
        points=tuple(pts),
        context_tokens=None if ctx is None else float(ctx),
        kv_seconds_per_token=None if kv is None else float(kv),
        source=None if src is None else str(src),
    )
