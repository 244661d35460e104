"""Fixed costs of speculation per serving engine (docs/costmodel-engine-priors.md).

The cost model charges each speculative step ``v + q·B`` (verify overhead, per request) and each
drafting pass of a draft head ``p`` (roofline.py / draft.py, docs/costmodel.md "Fixed costs of
speculation"). Those defaults were fitted on SGLang v0.4.4 and one vLLM issue; this table holds the
same three numbers fitted per engine family on published speedups
(tests/fixtures/calibration/published*.json, with the fit and its
leave-one-source-out error in tests/fixtures/calibration/fit_engine_priors.py).

A family with fewer than 15 usable rows or 3 sources gets the fit pooled over every family's rows
(``POOLED``); its entry says so. ``prior_for`` maps an engine name and version to an entry, and
anything it does not recognise to ``generic``, the cost model's default constants.

Pure data and string matching: no imports from the rest of the package.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class EnginePrior:
    """The three fixed costs of speculation for one engine family, in seconds.

    verify_overhead_seconds -> CostModel.verify_overhead_seconds (v, per speculative step)
    verify_seconds_per_request -> CostModel.verify_seconds_per_request (q, per request per step)
    draft_fixed_seconds -> DraftCost.fixed_seconds (p, per drafting pass of a draft head; n-gram and
      draft-model drafters do not use it)
    log_error -> CostModel.calibration_log_error: one sigma of log(predicted / measured speedup).
      An own fit: RMS on its dense rows inside its batch range, each predicted by a fit that left
      out that source's batch band (the error where the prior has data); ``log_error_at`` adds the
      MoE and extrapolation terms and the tail factor. Pooled and generic: their RMS on rows they
      were not fitted on, all in one number.
    batch_range -> CostModel.calibration_batch_range: the batch sizes its own rows cover (None: not
      an own fit, the one number covers every batch)
    own_fit -> fitted on its own engine's rows (not the pooled fit, nor the generic constants)
    """

    engine: str
    versions: str
    verify_overhead_seconds: float
    verify_seconds_per_request: float
    draft_fixed_seconds: float
    source: str
    log_error: float
    own_fit: bool = False
    batch_range: tuple[float, float] | None = None


#: The error model of an own fit, fitted on cross-validated residuals (tests/fixtures/calibration/
#: fit_engine_priors.py, "the error model"; docs/costmodel-engine-priors.md, "How far off"):
#: the extra one sigma of a mixture-of-experts target (both SGLang MoE sources are under-predicted)
MOE_LOG_ERROR = 0.2
#: the extra one sigma per doubling of the batch outside the range the prior's rows cover
EXTRAPOLATION_LOG_ERROR_PER_DOUBLING = 0.075
#: the factor on the whole: the smallest that covers 90 % of the held-out rows at 90 % and puts no
#: held-out row on the wrong side of 1 (their tails are heavier than a normal's)
TAIL_FACTOR = 1.3


def log_error_at(log_error: float, batch_range: tuple[float, float] | None, batch: float | None, moe: bool) -> float:
    """One sigma of a speedup an engine prior predicts at ``batch`` (None: inside the range) for a
    dense or MoE target: the prior's own error where its rows are, growing with each doubling of
    the batch beyond them. Without a batch range (pooled, generic) the prior's one number."""
    if batch_range is None:
        return log_error
    lo, hi = batch_range
    b = max(float(batch), 1.0) if batch is not None else lo
    doublings = max(0.0, math.log2(b / hi), math.log2(lo / b))
    extra_moe = MOE_LOG_ERROR if moe else 0.0
    return TAIL_FACTOR * math.hypot(log_error, extra_moe, EXTRAPOLATION_LOG_ERROR_PER_DOUBLING * doublings)


_FIT = "tests/fixtures/calibration/fit_engine_priors.py"

#: The cost model's default constants (roofline.DEFAULT_VERIFY_OVERHEAD_SECONDS, DEFAULT_VERIFY_SECONDS_PER_REQUEST,
#: draft.DEFAULT_DRAFT_FIXED_SECONDS): fitted on the EAGLE-3 paper's Table 3 (SGLang v0.4.4) and vLLM
#: issue #20780 (docs/costmodel.md). Used when the engine is unknown.
GENERIC = EnginePrior(
    engine="generic",
    versions="unknown engine",
    verify_overhead_seconds=1.6e-3,
    verify_seconds_per_request=0.11e-3,
    draft_fixed_seconds=0.4e-3,
    source="docs/costmodel.md 'Fixed costs of speculation': EAGLE-3 paper Table 3 (SGLang v0.4.4) + vLLM #20780",
    # Not refitted, so no leave-one-source-out: its RMS on the 42 vLLM V1 rows (the engine specwatch
    # reads), the larger of its two figures (0.274 on all 146 rows).
    log_error=0.375,
)

#: Pooled over all 146 usable rows, 8 sources (vLLM V1, SGLang, the EAGLE-3 paper's vLLM of unstated
#: version): SpecForge's SpecBundle data (63 rows), EAGLE-3 paper Tables 3 and 5 (34),
#: SpecDecode-Bench (25), vLLM issue #20780 (12), PR #16937 (4), the SpecDrift model cards (4),
#: PR #16035 (2), SpecForge issue #339 (2). The per-request term q stays small (0.016 ms): SGLang and
#: the paper's vLLM lose at batch 24-64 where vLLM v0.10.1 still gains 1.5x at 64, and one q cannot
#: serve both. In-sample RMS log error 0.191, LOSO 0.315.
POOLED = EnginePrior(
    engine="pooled",
    versions="all engines",
    verify_overhead_seconds=1.60e-3,
    verify_seconds_per_request=0.016e-3,
    draft_fixed_seconds=0.12e-3,
    source=f"pooled fit, 146 rows / 8 sources ({_FIT})",
    log_error=0.315,
)


def _pooled_for(engine: str, versions: str, why: str, log_error: float = POOLED.log_error) -> EnginePrior:
    return EnginePrior(
        engine=engine,
        versions=versions,
        verify_overhead_seconds=POOLED.verify_overhead_seconds,
        verify_seconds_per_request=POOLED.verify_seconds_per_request,
        draft_fixed_seconds=POOLED.draft_fixed_seconds,
        source=f"pooled fit (too few rows of its own: {why})",
        log_error=log_error,
    )


ENGINE_PRIORS: dict[str, EnginePrior] = {
    # Own fit: 42 rows, 4 sources, all H100 / Llama-3.1-8B: vLLM issue #20780 (12 rows, bs1, K=2..7),
    # PR #16035 (2, bs1), PR #16937 (4, bs1), SpecDecode-Bench v0.10.1 (24: bs 1/16/64/128, K=3,
    # n-gram / EAGLE / EAGLE-3 on ShareGPT and GSM8K; tau from the study's own simulator data or
    # #20780). q fits at 0: v0.10.1 loses almost nothing per request up to batch 128 (its batch-128
    # rows are under-predicted even with no fixed costs: the roofline's compute knee, not q).
    # In-sample RMS log error 0.115 (sign 39/42). LOSO 0.355 (31/42) measures the procedure, not the
    # prior: only SpecDecode-Bench has rows above batch 1, so without it q cannot be fitted at all.
    # Leaving out one source's batch band at a time: 0.103 on the dense rows in its range, 1-128.
    "vllm-v1": EnginePrior(
        engine="vllm-v1",
        versions="vLLM >= 0.8 (V1 engine); also vLLM with no version given",
        verify_overhead_seconds=0.50e-3,
        verify_seconds_per_request=0.0,
        draft_fixed_seconds=0.46e-3,
        source=f"own fit, 42 rows / 4 sources: vLLM #20780, #16035, #16937, SpecDecode-Bench v0.10.1 ({_FIT})",
        log_error=0.103,
        own_fit=True,
        batch_range=(1.0, 128.0),
    ),
    # No V0 row with a tau (the EAGLE-3 paper's Table 5 does not state its vLLM version).
    "vllm-v0": _pooled_for("vllm-v0", "vLLM < 0.8 (V0 engine)", "0 rows"),
    # Own fit: 88 rows, 5 sources, H100 and H200, dense and MoE: SpecForge's SpecBundle data (63 rows:
    # Llama-3.1-8B at bs1 and Qwen3-30B-A3B at bs8 on one H200, EAGLE-3 chains K=3/5/7), EAGLE-3 paper
    # Table 3 (v0.4.4, 18: Llama-3.1-8B on H100, bs 2-64), the SpecDrift model cards (4: gpt-oss-120b
    # at bs 1/8/64 and gpt-oss-20b at bs1 on one H100, EAGLE-3 K=3), SpecForge issue #339 (2:
    # Qwen3-30B-A3B on 2x H100, bs 1 and 4, both losses) and SpecDecode-Bench Figure 2 (v0.5.9, 1).
    # Its q (0.130 ms per request) is what makes SGLang v0.4.4 lose from batch 24; p fits at 0 (v
    # carries the drafting). In-sample RMS log error 0.141 (sign 78/85), LOSO 0.225 (76/85); leaving
    # out one source's batch band at a time: 0.100 on the dense rows in its range, 1-64.
    "sglang": EnginePrior(
        engine="sglang",
        versions="all",
        verify_overhead_seconds=1.50e-3,
        verify_seconds_per_request=0.130e-3,
        draft_fixed_seconds=0.0,
        source=(
            f"own fit, 88 rows / 5 sources: SpecForge SpecBundle data, EAGLE-3 paper Table 3, "
            f"SpecDrift model cards, SpecForge #339, SpecDecode-Bench Figure 2 ({_FIT})"
        ),
        log_error=0.100,
        own_fit=True,
        batch_range=(1.0, 64.0),
    ),
    # The two TensorRT-LLM blogs give no usable row (no acceptance length, or a runtime ratio above it).
    "trtllm": _pooled_for("trtllm", "all", "0 rows"),
    # llama.cpp rows run on hardware without a preset (RTX 3060, M2 Pro, CPU offload).
    "llamacpp": _pooled_for("llamacpp", "all", "0 rows"),
    "pooled": POOLED,
    "generic": GENERIC,
}

_ALIASES = {
    "vllm": "vllm",
    "vllm-v0": "vllm-v0",
    "vllm-v1": "vllm-v1",
    "sglang": "sglang",
    "trtllm": "trtllm",
    "trt-llm": "trtllm",
    "tensorrt-llm": "trtllm",
    "tensorrtllm": "trtllm",
    "tensorrt_llm": "trtllm",
    "llamacpp": "llamacpp",
    "llama.cpp": "llamacpp",
    "llama-cpp": "llamacpp",
    "llama_cpp": "llamacpp",
    "ik_llama.cpp": "llamacpp",
    "llama-server": "llamacpp",
}

#: The names a user may give (config `engine.name`, the lesson's --engine): families and products.
ENGINE_NAMES = ("vllm", "vllm-v0", "vllm-v1", "sglang", "trtllm", "llamacpp", "generic")

_VERSION = re.compile(r"^v?(\d+)\.(\d+)")
#: vLLM's V1 engine became the default in 0.8.0.
_VLLM_V1_FROM = (0, 8)


def _vllm_family(version: str | None) -> str:
    if version is None:
        return "vllm-v1"
    v = version.strip().lower()
    if v in ("v0", "0"):
        return "vllm-v0"
    m = _VERSION.match(v)
    if m is None:
        return "vllm-v1"  # "main", "nightly", a commit: V1, the engine vLLM ships
    return "vllm-v1" if (int(m.group(1)), int(m.group(2))) >= _VLLM_V1_FROM else "vllm-v0"


def prior_for(engine: str | None, version: str | None = None) -> EnginePrior:
    """The fixed costs for a serving engine. ``engine``: a family id (``vllm-v1``) or a product name
    (``vLLM``, ``SGLang``, ``TensorRT-LLM``, ``llama.cpp``), any case; ``version`` picks vLLM's V0 or
    V1 (below 0.8 is V0; none, ``main`` or unparsable is V1) and is ignored elsewhere. None or an
    unknown engine: ``generic`` (the cost model's default constants)."""
    if engine is None:
        return GENERIC
    key = _ALIASES.get(engine.strip().lower())
    if key is None:
        return ENGINE_PRIORS.get(engine.strip().lower(), GENERIC)
    if key == "vllm":
        key = _vllm_family(version)
    return ENGINE_PRIORS[key]
