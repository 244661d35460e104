"""Does the server do what its speculative config says? Pure functions.

The user states the JSON vLLM runs with (`draft.config`, the same object as `--speculative-config`).
From it (read by `engines/vllm_schedule.py`) we know the draft length K the server must propose at each batch
size. The schedule has been reported to be dropped silently (e.g. with data parallelism): then the
server drafts `num_speculative_tokens` at every batch size.

The check compares the observed draft length (Δdraft_tokens / Δdrafts over a window) with the K
the config gives around the live batch. The live batch is a window mean and the real batch moves
around it, so the expected K is the range of K over batch sizes within ±25 % (and ±1) of the mean.
n-gram and suffix lookup may propose fewer tokens than K (no match), so for them only drafting MORE
than the config allows is a mismatch; model-based drafters always propose exactly K, so both
directions count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specwatch.engines.vllm_schedule import SpeculativeSchedule

#: Observed K may differ from the configured K by this much (absolute) plus 5 %.
K_TOLERANCE = 0.15


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
