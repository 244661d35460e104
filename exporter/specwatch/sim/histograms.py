"""vLLM's histogram bucket bounds and the simulator's histogram: shared by the engine (which
observes, engine_histograms) and the exposition (which renders), so neither imports the other for
them."""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass

# Bucket bounds of vLLM's histograms (0.8.4+ defaults), the one place they are written (the tests'
# payload builder imports them too). Histograms store the union of every schema's bounds, so a schema
# switch can render any of them exactly from the same counts (engine_histograms).
# fmt: off
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
TTFT_BUCKETS = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0,
]
REQ_LAT_BUCKETS = [
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
    1920.0, 7680.0,
]
# fmt: on
ITER_BUCKETS_V1 = [1.0] + [float(2**i) for i in range(3, 15)]  # 1, 8, 16, ... 16384
ITER_BUCKETS_V0 = sorted({1.0, 2.0, 4.0} | {float(x) for x in range(8, 513, 8)})  # cudagraph sizes
PARAMS_N_BUCKETS = [1.0, 2.0, 5.0, 10.0, 20.0]
PREEMPT_BUCKETS = [1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0]
#: vLLM 0.10.1's vllm:time_per_output_token_seconds: the bounds its successor (ITL) kept.
TPOT_LEGACY_BUCKETS = ITL_BUCKETS
#: V0 (vllm/engine/metrics.py): prefixes of the V1 bounds.
V0_TTFT_BUCKETS = TTFT_BUCKETS[:16]
V0_TPOT_BUCKETS = ITL_BUCKETS[:13]
V0_REQ_LAT_BUCKETS = REQ_LAT_BUCKETS[:15]
#: The API server's http_request_duration_* histograms (prometheus-fastapi-instrumentator).
# fmt: off
HTTP_HIGHR_BUCKETS = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 7.5, 10.0, 30.0, 60.0,
]
# fmt: on
HTTP_FEW_BUCKETS = [0.1, 0.5, 1.0]


def buckets_1_2_5(max_value: int) -> list[float]:
    out: list[float] = []
    e = 0
    while True:
        for m in (1, 2, 5):
            v = m * 10**e
            if v > max_value:
                return out
            out.append(float(v))
        e += 1


class Hist:
    """Bucket counts over a fixed sorted bound list (le semantics), plus sum and count."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: Iterable[float]) -> None:
        self.bounds = sorted({float(b) for b in bounds})
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, v: float, n: int = 1) -> None:
        self.counts[bisect.bisect_left(self.bounds, v)] += n
        self.sum += v * n
        self.count += n

    def cumulative(self, bounds: Iterable[float]) -> list[tuple[float, int]]:
        """Cumulative counts at `bounds` (each must be one of self.bounds) and +Inf."""
        out, acc, i = [], 0, 0
        for b in bounds:
            while i < len(self.bounds) and self.bounds[i] <= b:
                acc += self.counts[i]
                i += 1
            out.append((float(b), acc))
        out.append((math.inf, self.count))
        return out


@dataclass
class EngineHistograms:
    """The histograms one engine observes, each over the union of the bounds any schema renders it
    with (token-count histograms: 1-2-5 steps up to the scenario's max_model_len)."""

    request_prompt_tokens: Hist
    request_generation_tokens: Hist
    request_max_generation_tokens: Hist
    request_max_tokens: Hist
    request_n: Hist
    iteration_tokens: Hist
    time_to_first_token: Hist
    inter_token_latency: Hist
    request_time_per_output_token: Hist
    e2e_request_latency: Hist
    request_queue_time: Hist
    request_inference_time: Hist
    request_prefill_time: Hist
    request_decode_time: Hist
    request_preemptions: Hist
    request_prefill_kv_computed_tokens: Hist


def engine_histograms(max_model_len: int) -> EngineHistograms:
    """One engine's histograms, empty."""
    tokens = buckets_1_2_5(max_model_len)
    return EngineHistograms(
        request_prompt_tokens=Hist(tokens),
        request_generation_tokens=Hist(tokens),
        request_max_generation_tokens=Hist(tokens),
        request_max_tokens=Hist(tokens),
        request_n=Hist(PARAMS_N_BUCKETS),
        iteration_tokens=Hist(ITER_BUCKETS_V1 + ITER_BUCKETS_V0),
        time_to_first_token=Hist(TTFT_BUCKETS),
        inter_token_latency=Hist(ITL_BUCKETS),
        request_time_per_output_token=Hist(ITL_BUCKETS),
        e2e_request_latency=Hist(REQ_LAT_BUCKETS),
        request_queue_time=Hist(REQ_LAT_BUCKETS),
        request_inference_time=Hist(REQ_LAT_BUCKETS),
        request_prefill_time=Hist(REQ_LAT_BUCKETS),
        request_decode_time=Hist(REQ_LAT_BUCKETS),
        request_preemptions=Hist(PREEMPT_BUCKETS),
        request_prefill_kv_computed_tokens=Hist(tokens),
    )
