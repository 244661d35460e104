"""Step time of the simulated engine: the ONE place the simulator asks "how long does a step take".

It uses the project's cost model (`specwatch.costmodel.cost_model_from_config`) when that module is
importable, configured exactly as the sidecar would be from the scenario's `hardware`, `model`,
`dtype`, `tensor_parallel` and `method`, with the per-request context set to the scenario's mean
context. So the simulated ITL and the sidecar's break-even come from the same maths, and the
scenario's documented verdict crossings are what a correct sidecar must find.

Without `specwatch.costmodel`, a documented roofline stand-in (DESIGN.md §4) is used:

    T(n, S) = max(W / BW_eff, 2 · P · n / F_eff) + KV_bytes_per_token · S / BW_eff + c0
    T_draft(B, K) = c · K · T(B, S)       c = draft cost per drafted token (method default)

`StepTimer.which` says which one is in use; `Simulator.truth()` reports it.
"""
from __future__ import annotations

import dataclasses
import types

# Stand-in presets (DESIGN.md §4, COSTMODEL.md §1.5). Only used when specwatch.costmodel is absent.
_HW = {  # bandwidth bytes/s, bf16 FLOPS, fp8 FLOPS
    "h100-sxm": (3.35e12, 989e12, 1979e12),
    "h100-pcie": (2.0e12, 756e12, 1513e12),
    "h200": (4.8e12, 989e12, 1979e12),
    "a100-80gb": (2.039e12, 312e12, 312e12),
    "a100-40gb": (1.555e12, 312e12, 312e12),
    "l40s": (0.864e12, 362e12, 733e12),
    "mi300x": (5.3e12, 1307e12, 2615e12),
}
_MODELS = {  # params, layers, kv heads, head dim
    "llama-3.1-8b": (8.03e9, 32, 8, 128),
    "llama-3.1-70b": (70.6e9, 80, 8, 128),
    "llama-3.3-70b": (70.6e9, 80, 8, 128),
    "llama-3.2-1b": (1.24e9, 16, 8, 64),
    "qwen2.5-7b": (7.6e9, 28, 4, 128),
}
_DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
_DRAFT_COST = {"ngram": 0.0, "suffix": 0.0, "eagle": 0.05, "eagle3": 0.05, "mtp": 0.05,
               "medusa": 0.03, "draft_model": 0.1}
MBU, MFU, C0 = 0.85, 0.5, 0.0014


@dataclasses.dataclass(frozen=True)
class _Standin:
    weight_bytes: float
    params: float
    kv_bytes_per_token: float
    bw: float
    flops: float
    c0: float
    draft_cost: float
    context_tokens: float

    def step_time(self, tokens: float, context_tokens: float) -> float:
        gemm = max(self.weight_bytes / self.bw, 2.0 * self.params * max(tokens, 1.0) / self.flops)
        return gemm + self.kv_bytes_per_token * context_tokens / self.bw + self.c0

    def draft_time(self, batch: float, k: float) -> float:
        return self.draft_cost * k * self.step_time(batch, batch * self.context_tokens)


class StepTimer:
    """Step and draft time of the simulated target, and the break-even maths at nominal parameters.

    step_time(tokens, context_tokens): one target forward over `tokens` query tokens with
    `context_tokens` KV tokens in the whole batch. draft_time(batch, k): proposing k tokens for each
    of `batch` requests. breakeven/speedup/best_k use `context_per_request` per request."""

    def __init__(self, scenario, context_per_request: float):
        self.context_per_request = float(context_per_request)
        self.which = "standin"
        self._cm_mod = None
        self._impl = None
        try:
            from specwatch import costmodel  # type: ignore
        except ImportError:
            costmodel = None
        if costmodel is not None and hasattr(costmodel, "cost_model_from_config"):
            cfg = types.SimpleNamespace(
                hardware=types.SimpleNamespace(preset=scenario.hardware, bandwidth_bytes_per_second=None,
                                               flops=None, mbu=None, mfu=None, overhead_seconds=None),
                model=types.SimpleNamespace(preset=scenario.model, hf_config=None, params=None, layers=None,
                                            kv_heads=None, head_dim=None, dtype=scenario.dtype,
                                            context_tokens=self.context_per_request),
                draft=types.SimpleNamespace(method=scenario.method, cost_per_token=scenario.draft_cost_per_token,
                                            k=scenario.num_speculative_tokens),
                tensor_parallel=scenario.tensor_parallel, profile=None)
            self._impl = costmodel.cost_model_from_config(cfg)   # errors (bad preset) propagate
            self._cm_mod = costmodel
            self.which = "costmodel"
        else:
            self._impl = _standin(scenario, self.context_per_request)

    # -- timing used by the engine step -------------------------------------------------------
    def step_time(self, tokens: float, context_tokens: float) -> float:
        return self._impl.step_time(tokens, context_tokens)

    def draft_time(self, batch: float, k: int) -> float:
        if k <= 0 or batch <= 0:
            return 0.0
        return self._impl.draft_time(batch, k)

    # -- nominal maths (truth) -----------------------------------------------------------------
    def _base(self, batch: float) -> float:
        b = max(batch, 1.0)
        return self.step_time(b, b * self.context_per_request)

    def _spec(self, batch: float, k: int) -> float:
        b = max(batch, 1.0)
        return self.step_time(b * (k + 1), b * self.context_per_request) + self.draft_time(b, k)

    def plain_step(self, batch: float) -> float:
        return self._base(batch)

    def spec_step(self, batch: float, k: int) -> float:
        return self._spec(batch, k) if k > 0 else self._base(batch)

    def breakeven(self, batch: float, k: int) -> float:
        """alpha*(B, K) = (T_spec / T_base - 1) / K  (DESIGN.md §4)."""
        if k <= 0:
            return float("nan")
        if self._cm_mod is not None:
            return self._cm_mod.breakeven_acceptance_rate(self._impl, max(batch, 1.0), k)
        return (self._spec(batch, k) / self._base(batch) - 1.0) / k

    def speedup(self, batch: float, per_pos: list[float]) -> float:
        """(1 + sum p_i) · T_base / T_spec with K = len(per_pos)."""
        k = len(per_pos)
        if k == 0:
            return 1.0
        if self._cm_mod is not None:
            return self._cm_mod.expected_speedup_for_positions(self._impl, max(batch, 1.0), per_pos)
        return (1.0 + sum(per_pos)) * self._base(batch) / self._spec(batch, k)

    def best_k(self, batch: float, per_pos: list[float]) -> int:
        if self._cm_mod is not None:
            return self._cm_mod.best_draft_length(self._impl, max(batch, 1.0), per_pos)
        best, best_s = 0, 1.0
        for k in range(1, len(per_pos) + 1):
            s = self.speedup(batch, per_pos[:k])
            if s > best_s:
                best, best_s = k, s
        return best


def _standin(sc, ctx: float) -> _Standin:
    bw, bf16, fp8 = _HW.get(sc.hardware, _HW["h100-sxm"])
    params, layers, kvh, hd = _MODELS.get(sc.model, _MODELS["llama-3.1-8b"])
    b = _DTYPE_BYTES.get(sc.dtype, 2.0)
    tp = sc.tensor_parallel
    flops = (fp8 if sc.dtype == "fp8" else bf16) * MFU * tp
    c = sc.draft_cost_per_token if sc.draft_cost_per_token is not None else _DRAFT_COST.get(sc.method, 0.05)
    return _Standin(weight_bytes=params * b, params=params, kv_bytes_per_token=2 * layers * kvh * hd * 2.0,
                    bw=bw * MBU * tp, flops=flops, c0=C0 + (0.0008 if tp > 1 else 0.0), draft_cost=c,
                    context_tokens=ctx)
