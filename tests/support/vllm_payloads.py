"""Build vLLM-shaped /metrics payloads for tests with prometheus_client itself, the library vLLM
uses, so the wire format (HELP/TYPE lines, _total/_created families, label order) is the real one.
The values are set exactly, so a test knows the truth independently of specwatch."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from specwatch.sim.histograms import ITER_BUCKETS_V1, ITL_BUCKETS

# vLLM's own bounds, as the simulator renders them (one definition).
STEP_BUCKETS = ITER_BUCKETS_V1


@dataclass
class FakeVllm:
    """A vLLM process: counters move only through the methods below; restart() starts a new process."""

    model_name: str = "m"
    engines: int = 1
    k: int = 4
    schema: str = "v1"  # v1 | v1-legacy-itl | nospec
    engine_label: bool = True
    registry: CollectorRegistry = field(init=False)

    def __post_init__(self):
        self.restart()

    def restart(self):
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"] if self.engine_label else ["model_name"]
        r = self.registry
        self.running = Gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", labels, registry=r
        )
        if self.schema != "nospec":
            self.drafts = Counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", labels, registry=r)
            self.draft_tokens = Counter(
                "vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", labels, registry=r
            )
            self.accepted = Counter(
                "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", labels, registry=r
            )
            self.per_pos = Counter(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "Accepted tokens per draft position.",
                labels + ["position"],
                registry=r,
            )
        self.gen = Counter("vllm:generation_tokens", "Number of generation tokens processed.", labels, registry=r)
        itl_name = (
            "vllm:time_per_output_token_seconds"
            if self.schema == "v1-legacy-itl"
            else "vllm:inter_token_latency_seconds"
        )
        self.itl = Histogram(
            itl_name, "Histogram of inter-token latency in seconds.", labels, buckets=ITL_BUCKETS, registry=r
        )
        self.steps = Histogram(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            labels,
            buckets=STEP_BUCKETS,
            registry=r,
        )
        # Noise a real server has, sharing prefixes with what specwatch reads.
        Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=r)
        Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels, registry=r)
        for e in range(self.engines):
            lv = self._lv(e)
            self.running.labels(*lv).set(0)
            if self.schema != "nospec":
                for i in range(self.k):
                    self.per_pos.labels(*lv, str(i))

    def _lv(self, engine: int) -> list[str]:
        return [self.model_name, str(engine)] if self.engine_label else [self.model_name]

    def step(
        self, engine: int, batch: int, accepted_per_request: list[int], itl_seconds: float, draft_len: int | None = None
    ):
        """One engine step decoding `batch` requests; request j accepted accepted_per_request[j] tokens."""
        k = self.k if draft_len is None else draft_len
        lv = self._lv(engine)
        self.running.labels(*lv).set(batch)
        self.steps.labels(*lv).observe(batch * (k + 1))
        for j in range(batch):
            a = accepted_per_request[j % len(accepted_per_request)]
            if self.schema != "nospec" and k > 0:
                self.drafts.labels(*lv).inc()
                self.draft_tokens.labels(*lv).inc(k)
                self.accepted.labels(*lv).inc(a)
                for i in range(a):
                    self.per_pos.labels(*lv, str(i)).inc()
            self.gen.labels(*lv).inc(a + 1 if self.schema != "nospec" else 1)
            self.itl.labels(*lv).observe(itl_seconds)

    def text(self) -> str:
        return generate_latest(self.registry).decode()
