"""vLLM's `--speculative-config` and its batch schedule: the one place that reads and writes it.

vLLM reads `num_speculative_tokens_per_batch_size` as `[[bs_lo, bs_hi, K], ...]` (or 5-item entries
with a context range `[bs_lo, bs_hi, ctx_lo, ctx_hi, K]`), inclusive ranges starting at 1; a batch
size between two ranges takes the K of the range before it, a batch size past the last range the
last K, and every K is capped at `num_speculative_tokens` (vllm/v1/spec_decode/dynamic/utils.py,
build_dynamic_sd_schedule_lookup). Pure functions; the config loader, the config check, method
inference, the verdict and the lesson's planner all ask this module.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
#: With it true, vLLM sizes each step's draft itself (adaptive verification): K is only a maximum.
ADAPTIVE_VERIFICATION_KEY = "enable_adaptive_verification"
#: SGLang's --speculative-adaptive, as a stated draft.config key: its step bands draft up to the
#: started steps (num_speculative_tokens), as the engine decides per batch band.
SGLANG_ADAPTIVE_KEY = "speculative_adaptive"
#: JSON-compatible value of ``--speculative-config``.
SpeculativeConfigValue = str | int | list[list[int]]
#: Methods that may propose fewer than K tokens (lookup finds no match).
SHORT_PROPOSING_METHODS = frozenset({"ngram", "ngram_gpu", "suffix"})
#: Spread of the real batch around the window's mean batch that the expected K covers.
BATCH_SPREAD = 0.25
#: vLLM methods that need no ``model`` in ``--speculative-config`` (vLLM 0.32 SpeculativeConfig:
#: n-gram and suffix lookup propose from the context, MTP reuses the target's own weights). Every
#: other method needs the drafter's path, which vLLM does not export: without it vLLM refuses the
#: flag ("num_speculative_tokens was provided but without speculative model").
SELF_CONTAINED_METHODS = ("ngram", "ngram_gpu", "suffix", "mtp")
#: n-gram window written into a complete config when the user's own is unknown: match 2..4 tokens
#: of context (vLLM fills in 5..5 when both are left out, which rarely matches on short prompts).
NGRAM_PROMPT_LOOKUP_MAX = 4
NGRAM_PROMPT_LOOKUP_MIN = 2


class SpeculativeConfigError(ValueError):
    """The stated speculative config is not one vLLM accepts; `key` names the JSON key inside it
    (the config loader reports it under `draft.config.<key>`)."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key = key
        self.reason = reason


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
    adaptive: bool = False  # adaptive verification or SGLang's bands: drafts up to K, as the engine decides

    @property
    def has_schedule(self) -> bool:
        return bool(self.entries)

    @property
    def one_sided(self) -> bool:
        """n-gram and suffix lookup may propose fewer tokens than K (no match), and so may a
        drafter under adaptive verification."""
        return self.adaptive or (self.method or "").lower() in SHORT_PROPOSING_METHODS

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

    @property
    def k_values(self) -> tuple[int, ...]:
        """Every K the config can draft: its bands' K (capped at num_speculative_tokens), or K."""
        if not self.entries:
            return (self.num_speculative_tokens,)
        return tuple(min(e.k, self.num_speculative_tokens) for e in self.entries)

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
    adaptive = config.get(ADAPTIVE_VERIFICATION_KEY) is True or config.get(SGLANG_ADAPTIVE_KEY) is True
    raw = config.get("num_speculative_tokens_per_batch_size")
    if raw is None:
        return SpeculativeSchedule(k, method, adaptive=adaptive)
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
    return SpeculativeSchedule(k, method, tuple(entries), adaptive)


def schedule_from_config(config: Mapping[str, object] | None) -> SpeculativeSchedule | None:
    """The schedule of a stated config (validated when the config loaded), or None."""
    return None if config is None else parse_speculative_config(config)


def k_at_batch(config: Mapping[str, object], batch: float) -> int:
    """K that vLLM drafts at ``batch`` under ``config`` (a valid --speculative-config)."""
    return parse_speculative_config(config).k_at(batch)


def speculative_config(
    method: str | None,
    k: int,
    schedule: Sequence[Sequence[int]] | None = None,
) -> dict[str, SpeculativeConfigValue]:
    """The keys a recommendation changes in ``--speculative-config`` (merge them into yours, or
    use ``complete_speculative_config`` for a flag vLLM accepts as pasted).

    Never emits ``disable_by_batch_size``: vLLM V1 ignores it (removed by PR #35060). A schedule
    that is one band with K equal to ``k`` is left out (it is the same as no schedule)."""
    if k is None or int(k) < 1:
        raise ValueError("num_speculative_tokens must be >= 1 (to disable, remove --speculative-config)")
    out: dict[str, SpeculativeConfigValue] = {}
    if method and method != "auto":
        out["method"] = method
    out["num_speculative_tokens"] = int(k)
    if schedule:
        sched = [[int(lo), int(hi), int(kk)] for lo, hi, kk in schedule]
        if any(kk > int(k) for _, _, kk in sched):
            raise ValueError("every K in the schedule must be <= num_speculative_tokens")
        if not (len(sched) == 1 and sched[0][2] == int(k)):
            out[SCHEDULE_KEY] = sched
    return out


def complete_speculative_config(
    changes: Mapping[str, SpeculativeConfigValue], method: str | None, base: Mapping[str, object] | None = None
) -> dict[str, object] | None:
    """A whole ``--speculative-config`` that vLLM accepts as pasted, or None when it cannot be
    written because the drafter's ``model`` path is unknown (then merge ``changes`` into yours).

    ``base``: the config the server runs with, when the user stated it; its keys are kept (model
    path, n-gram window, ...) and ``changes`` replace K and the schedule. ``method``: the vLLM
    method, configured or inferred (n-gram); None when unknown."""
    out: dict[str, object] = {key: value for key, value in (base or {}).items() if key != SCHEDULE_KEY}
    name = str(out.get("method") or method or "")
    if name and name != "auto":
        out["method"] = name
    out.update(changes)
    if name in ("ngram", "ngram_gpu") and "prompt_lookup_max" not in out and "prompt_lookup_min" not in out:
        out["prompt_lookup_max"] = NGRAM_PROMPT_LOOKUP_MAX
        out["prompt_lookup_min"] = NGRAM_PROMPT_LOOKUP_MIN
    if "model" in out or name in SELF_CONTAINED_METHODS:
        return out
    return None
