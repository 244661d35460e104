"""Does the server do what its speculative config says? Pure functions.

The user states the JSON vLLM runs with (`draft.config`, the same object as `--speculative-config`).
From it we know the draft length K the server must propose at each batch size:
`num_speculative_tokens`, or the `num_speculative_tokens_per_batch_size` schedule when present.
vLLM reads the schedule as `[[bs_lo, bs_hi, K], ...]` (or 5-item entries with a context range
`[bs_lo, bs_hi, ctx_lo, ctx_hi, K]`), inclusive ranges starting at 1; a batch size between two
ranges takes the K of the range before it, a batch size past the last range the last K, and every
K is capped at `num_speculative_tokens` (vllm/v1/spec_decode/dynamic/utils.py,
build_dynamic_sd_schedule_lookup). The schedule has been reported to be dropped silently (e.g. with
data parallelism): then the server drafts `num_speculative_tokens` at every batch size.

The check compares the observed draft length (Δdraft_tokens / Δdrafts over a window) with the K
the config gives around the live batch. The live batch is a window mean and the real batch moves
around it, so the expected K is the range of K over batch sizes within ±25 % (and ±1) of the mean.
n-gram and suffix lookup may propose fewer tokens than K (no match), so for them only drafting MORE
than the config allows is a mismatch; model-based drafters always propose exactly K, so both
directions count.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from .config.kinds import ConfigError

#: Methods that may propose fewer than K tokens (lookup finds no match): one-sided check.
SHORT_PROPOSING_METHODS = frozenset({"ngram", "ngram_gpu", "suffix"})
#: Spread of the real batch around the window's mean batch that the expected K covers.
BATCH_SPREAD = 0.25
#: Observed K may differ from the configured K by this much (absolute) plus 5 %.
K_TOLERANCE = 0.15


class SpeculativeConfigError(ConfigError):
    """The stated speculative config is not one vLLM accepts; `key` names the JSON key inside it
    (the config loader reports it under `draft.config.<key>`)."""


@dataclass(frozen=True)
class ScheduleEntry:
    batch_low: int
    batch_high: int
    k: int
    context_low: int = 1
    context_high: int | None = None  # None: no upper bound


@dataclass(frozen=True)
class SpeculativeSchedule:
    """The draft length a speculative config gives at each batch size."""

    num_speculative_tokens: int
    method: str | None
    entries: tuple[ScheduleEntry, ...] = ()

    @property
    def has_schedule(self) -> bool:
        return bool(self.entries)

    @property
    def one_sided(self) -> bool:
        return (self.method or "").lower() in SHORT_PROPOSING_METHODS

    def k_range_at(self, batch: int) -> tuple[int, int]:
        """(lowest, highest) K the config gives at this batch size, over its context buckets."""
        if not self.entries:
            return self.num_speculative_tokens, self.num_speculative_tokens
        ks: list[int] = []
        for bucket in sorted({(e.context_low, e.context_high) for e in self.entries}):
            rows = sorted(
                (e for e in self.entries if (e.context_low, e.context_high) == bucket), key=lambda e: e.batch_low
            )
            k = rows[0].k
            for row in rows:
                if row.batch_low > batch:
                    break
                k = row.k  # inside this range, or in the gap after it, or past the last range
            ks.append(min(k, self.num_speculative_tokens))
        return min(ks), max(ks)

    def k_at(self, batch: float) -> int:
        """The K at the (rounded) batch size; with context buckets, the highest of them."""
        return self.k_range_at(max(1, round(batch)))[1]

    def expected_range(self, batch: float) -> tuple[int, int]:
        """Lowest and highest K over the batch sizes the live batch spans (±25 %, ±1)."""
        low = max(1, math.floor(min(batch * (1 - BATCH_SPREAD), batch - 1)))
        high = max(low, math.ceil(max(batch * (1 + BATCH_SPREAD), batch + 1)))
        # Only the range boundaries can change K: check them and the ends.
        points = {low, high}
        for e in self.entries:
            for b in (e.batch_low, e.batch_high, e.batch_high + 1):
                if low <= b <= high:
                    points.add(b)
        ranges = [self.k_range_at(b) for b in sorted(points)]
        return min(r[0] for r in ranges), max(r[1] for r in ranges)


def _positive_int(value: object, field: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SpeculativeConfigError(field, f"expected an integer >= {minimum}, got {value!r}")
    return value


def parse_speculative_config(config: Mapping[str, object]) -> SpeculativeSchedule:
    """The schedule of a `--speculative-config` object, validated as vLLM validates it."""
    if not isinstance(config, Mapping):
        raise SpeculativeConfigError("draft.config", "expected a JSON object")
    if "num_speculative_tokens" not in config:
        raise SpeculativeConfigError("num_speculative_tokens", "required to know the draft length K")
    k = _positive_int(config["num_speculative_tokens"], "num_speculative_tokens", 1)
    method = config.get("method")
    if method is not None and not isinstance(method, str):
        raise SpeculativeConfigError("method", f"expected a string, got {method!r}")
    raw = config.get("num_speculative_tokens_per_batch_size")
    if raw is None:
        return SpeculativeSchedule(k, method)
    field = "num_speculative_tokens_per_batch_size"
    if not isinstance(raw, list) or not raw:
        raise SpeculativeConfigError(field, "expected a non-empty list of [bs_lo, bs_hi, K] entries")
    entries: list[ScheduleEntry] = []
    arities = set()
    for i, item in enumerate(raw):
        where = f"{field}[{i}]"
        if not isinstance(item, list) or len(item) not in (3, 5):
            raise SpeculativeConfigError(where, "expected [bs_lo, bs_hi, K] or [bs_lo, bs_hi, ctx_lo, ctx_hi, K]")
        arities.add(len(item))
        values = [_positive_int(v, where, 0) for v in item]
        low, high = values[0], values[1]
        if low < 1 or high < low:
            raise SpeculativeConfigError(where, f"batch range [{low}, {high}] must have 1 <= bs_lo <= bs_hi")
        if len(values) == 3:
            entries.append(ScheduleEntry(low, high, values[2]))
        else:
            if values[2] < 1 or values[3] < values[2]:
                raise SpeculativeConfigError(where, "context range must have 1 <= ctx_lo <= ctx_hi")
            entries.append(ScheduleEntry(low, high, values[4], values[2], values[3]))
    if len(arities) > 1:
        raise SpeculativeConfigError(field, "entries must all have 3 items or all 5 (vLLM refuses a mix)")
    batch_ranges = sorted({(e.batch_low, e.batch_high) for e in entries})
    if batch_ranges[0][0] != 1:
        raise SpeculativeConfigError(field, "the first batch range must start at 1")
    for (_, previous_high), (low, _) in itertools.pairwise(batch_ranges):
        if low <= previous_high:
            raise SpeculativeConfigError(field, "batch ranges must not overlap")
    # The last context bucket is open-ended in vLLM.
    last_context = max(e.context_low for e in entries)
    entries = [
        ScheduleEntry(
            e.batch_low, e.batch_high, e.k, e.context_low, None if e.context_low == last_context else e.context_high
        )
        for e in entries
    ]
    return SpeculativeSchedule(k, method, tuple(entries))


@dataclass(frozen=True)
class ConfigCheck:
    """One window's comparison of the observed draft length with the config."""

    configured_k: int  # K the config gives at the (rounded) live batch
    expected_low: int  # lowest K over the batch sizes around the live batch
    expected_high: int
    observed_k: float | None  # Δdraft_tokens / Δdrafts; None when the window has too few drafts
    batch_size: float
    one_sided: bool
    mismatch: bool
    reason: str

    def as_dict(self) -> dict[str, object]:
        return {
            "configured_draft_length": self.configured_k,
            "expected_range": [self.expected_low, self.expected_high],
            "observed_draft_length": self.observed_k,
            "batch_size": self.batch_size,
            "one_sided": self.one_sided,
            "mismatch": self.mismatch,
            "reason": self.reason,
        }


def check_draft_length(
    schedule: SpeculativeSchedule,
    *,
    batch_size: float | None,
    drafts: float | None,
    observed_k: float | None,
    min_drafts: float,
) -> ConfigCheck | None:
    """Compare the window's observed K with the config's. None when the window cannot tell (no
    live batch, or some drafts but fewer than `min_drafts`)."""
    if batch_size is None or not math.isfinite(batch_size) or batch_size <= 0:
        return None
    low, high = schedule.expected_range(batch_size)
    at = schedule.k_at(batch_size)
    one_sided = schedule.one_sided
    tolerance = K_TOLERANCE + 0.05 * high
    if not drafts or drafts < min_drafts or observed_k is None:
        if drafts and drafts > 0:
            return None  # drafts, but too few to measure K
        # No drafts at all: right when the config says K=0 around this batch (a K=0 band).
        if high == 0:
            return ConfigCheck(at, low, high, None, batch_size, one_sided, False, "K=0 band: no drafts, as configured")
        return None  # nothing drafted where the config drafts: speculation off or idle, not this check
    if observed_k > high + tolerance:
        reason = f"drafts {observed_k:.2f} tokens where the config gives at most K={high} at batch {batch_size:.1f}" + (
            " (schedule not applied?)" if schedule.has_schedule else ""
        )
        return ConfigCheck(at, low, high, observed_k, batch_size, one_sided, True, reason)
    if not one_sided and observed_k < low - tolerance:
        reason = f"drafts {observed_k:.2f} tokens where the config gives at least K={low} at batch {batch_size:.1f}"
        return ConfigCheck(at, low, high, observed_k, batch_size, one_sided, True, reason)
    return ConfigCheck(at, low, high, observed_k, batch_size, one_sided, False, "as configured")


def schedule_from_config(config: Mapping[str, object] | None) -> SpeculativeSchedule | None:
    return None if config is None else parse_speculative_config(config)
