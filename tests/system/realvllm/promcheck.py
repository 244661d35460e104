"""Independent reference computations over raw vLLM /metrics payloads.

Written for the real-vLLM test from the Prometheus and vLLM documentation, not
from specwatch's code: payloads are parsed with prometheus_client's own parser,
counters are read by their exact sample names, deltas follow Prometheus's reset
rule, and histogram_quantile follows Prometheus's promql/quantile.go.
specwatch's values are compared against these.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
GEN_TOKENS = "vllm:generation_tokens_total"
ITL = "vllm:inter_token_latency_seconds"
ITER = "vllm:iteration_tokens_total"
RUNNING = "vllm:num_requests_running"


@dataclass
class Snap:
    """The values this test needs from one payload (summed over engines)."""

    t: float
    counters: dict[str, float] = field(default_factory=dict)
    created: dict[str, float] = field(default_factory=dict)
    per_pos: dict[int, float] = field(default_factory=dict)
    itl_buckets: dict[float, float] = field(default_factory=dict)  # le -> cumulative count
    itl_count: float | None = None
    itl_sum: float | None = None
    iter_count: float | None = None
    running: float | None = None
    families: set[str] = field(default_factory=set)

    @property
    def has_spec(self) -> bool:
        return DRAFTS in self.counters


def parse(t: float, text: str) -> Snap:
    s = Snap(t=t)
    for fam in text_string_to_metric_families(text):
        s.families.add(fam.name)
        for smp in fam.samples:
            n, v, lb = smp.name, smp.value, smp.labels
            if n in (DRAFTS, DRAFT_TOKENS, ACCEPTED, GEN_TOKENS):
                s.counters[n] = s.counters.get(n, 0.0) + v
            elif n == PER_POS:
                p = int(lb["position"])
                s.per_pos[p] = s.per_pos.get(p, 0.0) + v
            elif n.endswith("_created") and n.startswith("vllm:"):
                s.created[n] = max(s.created.get(n, 0.0), v)
            elif n == ITL + "_bucket":
                le = float(lb["le"])
                s.itl_buckets[le] = s.itl_buckets.get(le, 0.0) + v
            elif n == ITL + "_count":
                s.itl_count = (s.itl_count or 0.0) + v
            elif n == ITL + "_sum":
                s.itl_sum = (s.itl_sum or 0.0) + v
            elif n == ITER + "_count":
                s.iter_count = (s.iter_count or 0.0) + v
            elif n == RUNNING:
                s.running = (s.running or 0.0) + v
    return s


def _increase(vals: list[float], created: list[float | None]) -> float:
    """Prometheus increase over consecutive samples: a drop (or a changed _created)
    means the counter restarted from 0, so the new value is the increase."""
    inc = 0.0
    for k in range(1, len(vals)):
        prev, cur = vals[k - 1], vals[k]
        reset = cur < prev or (created[k] is not None and created[k - 1] is not None and created[k] != created[k - 1])
        inc += cur if reset else cur - prev
    return inc


def window(snaps: list[Snap], t: float, w: float) -> list[Snap]:
    """docs/architecture.md §3: the snapshots from the oldest with time >= t - w to the newest at or before t."""
    return [s for s in snaps if t - w <= s.t <= t]


def _created_of(s: Snap, counter_sample: str) -> float | None:
    base = counter_sample.removesuffix("_total")
    return s.created.get(base + "_created")


def delta_counter(ws: list[Snap], name: str) -> float | None:
    if len(ws) < 2 or any(name not in s.counters for s in ws):
        return None
    return _increase([s.counters[name] for s in ws], [_created_of(s, name) for s in ws])


def delta_per_pos(ws: list[Snap], pos: int) -> float | None:
    if len(ws) < 2 or any(pos not in s.per_pos for s in ws):
        return None
    return _increase([s.per_pos[pos] for s in ws], [_created_of(s, PER_POS) for s in ws])


def _hist_reset(prev: Snap, cur: Snap) -> bool:
    """A histogram resets as a whole: any bucket or the count going down, or _created changing."""
    if cur.itl_count is not None and prev.itl_count is not None and cur.itl_count < prev.itl_count:
        return True
    if any(cur.itl_buckets.get(le, 0.0) < v for le, v in prev.itl_buckets.items()):
        return True
    a, b = prev.created.get(ITL + "_created"), cur.created.get(ITL + "_created")
    return a is not None and b is not None and a != b


def delta_itl(ws: list[Snap]) -> tuple[dict[float, float], float, float] | None:
    """Window increase of the ITL histogram: (le -> cumulative count, count, sum)."""
    if len(ws) < 2 or any(s.itl_count is None for s in ws):
        return None
    buckets = dict.fromkeys(ws[-1].itl_buckets, 0.0)
    count = total = 0.0
    for prev, cur in itertools.pairwise(ws):
        r = _hist_reset(prev, cur)
        for le in buckets:
            buckets[le] += cur.itl_buckets.get(le, 0.0) - (0.0 if r else prev.itl_buckets.get(le, 0.0))
        count += cur.itl_count - (0.0 if r else prev.itl_count)
        total += cur.itl_sum - (0.0 if r else prev.itl_sum)
    return buckets, count, total


def histogram_quantile(q: float, buckets: dict[float, float]) -> float | None:
    """Prometheus's histogram_quantile over cumulative buckets {le: count}.

    As in promql/quantile.go (bucketQuantile): buckets sorted by upper bound, needs
    a +Inf bucket and at least two buckets; NaN (here None) when there are no
    observations; rank = q * count(+Inf); the first bucket whose count >= rank holds
    the quantile; if that is the +Inf bucket, the answer is the largest finite upper
    bound; the lower bound of the first bucket is 0 (if its upper bound is > 0);
    otherwise linear interpolation inside the bucket.  Counts are made monotonic
    first (ensureMonotonic)."""
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    les = sorted(buckets)
    if len(les) < 2 or not math.isinf(les[-1]):
        return None
    counts = [buckets[le] for le in les]
    for k in range(1, len(counts)):  # ensureMonotonic
        counts[k] = max(counts[k], counts[k - 1])
    total = counts[-1]
    if total == 0:
        return None
    rank = q * total
    b = next(k for k, c in enumerate(counts) if c >= rank)
    if b == len(les) - 1:
        return les[-2]
    if b == 0 and les[0] <= 0:
        return les[0]
    start = 0.0 if b == 0 else les[b - 1]
    end = les[b]
    count = counts[b] - (0.0 if b == 0 else counts[b - 1])
    rank -= 0.0 if b == 0 else counts[b - 1]
    return start + (end - start) * (rank / count)


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def reference(ws: list[Snap]) -> dict:
    """What specwatch should report for one window, computed independently."""
    d = delta_counter(ws, DRAFTS)
    dt = delta_counter(ws, DRAFT_TOKENS)
    acc = delta_counter(ws, ACCEPTED)
    out: dict = {
        "snapshots": len(ws),
        "drafts": d,
        "acceptance_rate": _ratio(acc, dt),
        "draft_length": _ratio(dt, d),
        "mean_acceptance_length": None if _ratio(acc, d) is None else 1 + acc / d,
        "position_acceptance_rate": {},
        "k_positions": len(ws[-1].per_pos) if ws else 0,
        "running_mean": (sum(s.running for s in ws) / len(ws))
        if ws and all(s.running is not None for s in ws)
        else None,
    }
    if ws:
        for p in sorted(ws[-1].per_pos):
            out["position_acceptance_rate"][p] = _ratio(delta_per_pos(ws, p), d)
    h = delta_itl(ws)
    if h is not None:
        buckets, count, total = h
        out["itl_count"] = count
        out["itl_p50_seconds"] = histogram_quantile(0.5, buckets)
        out["itl_p99_seconds"] = histogram_quantile(0.99, buckets)
        gen = delta_counter(ws, GEN_TOKENS)
        out["itl_per_token_mean_seconds"] = _ratio(total, gen)
        if len(ws) >= 2 and all(s.iter_count is not None for s in ws):
            it = _increase([s.iter_count for s in ws], [s.created.get(ITER + "_created") for s in ws])
            out["batch_size"] = _ratio(count, it)
        else:
            out["batch_size"] = None
    else:
        out.update(
            itl_count=None, itl_p50_seconds=None, itl_p99_seconds=None, itl_per_token_mean_seconds=None, batch_size=None
        )
    return out
