"""The step-time model of one target on one GPU set: CostModel.

    T(n, S) = max(W(n) / BW_eff, 2 · P_active · n / F_eff) + KV_bytes_per_token · S / BW_eff + c0

n = query tokens in the step (B for plain decode, B·(K+1) for a verify step), S = KV tokens in the
whole batch, W(n) = weight bytes streamed (for MoE: dense part + the experts the n tokens touch),
BW_eff = HBM bandwidth × MBU × TP, F_eff = peak FLOPS of the compute dtype × MFU × TP.
A measured ``profile`` (profile.py) replaces the roofline for the target's step. Formulas,
defaults and their calibration: docs/costmodel.md.

Over 400 lines on purpose: one class holds every step-time question (target step, drafting, the
fixed costs, the speculative step) and the memos that answer them poll after poll (step times, the
K' scan rows, the batch-search pairs, derived models sharing them). Each inlined fast path stays
next to the formula it must reproduce bit for bit (tests/test_costmodel_memo.py checks them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from typing import TypeVar

from specwatch.costmodel.draft import DRAFT_METHODS, METHOD_ALIASES, NGRAM_FRACTION_OF_VERIFY, DraftCost, draft_cost_for
from specwatch.costmodel.errors import CostModelError
from specwatch.costmodel.hardware import COMPUTE_DTYPE, HardwareSpec
from specwatch.costmodel.models import DTYPE_BYTES, ModelSpec, model_total_weight_bytes, model_weight_bytes
from specwatch.costmodel.profile import RelativeStepTimeCurve, StepTimeCurve

# Efficiency defaults, calibrated against the SpecDecode-Bench fitted step model for Llama-3.1-8B
# on H100; docs/costmodel.md ("Defaults and why") shows the derivation and tests/test_costmodel.py
# checks the calibration.

#: Share of peak HBM bandwidth reached: between the 0.82 implied by the fitted weight-read
#: intercept and the 0.96 measured for KV streaming.
DEFAULT_MBU = 0.85
#: Share of peak tensor FLOPS reached by the decode/verify GEMMs. 0.5 puts the effective knee at
#: ~0.6 of the ideal F/BW knee, as reported for real systems (small-M GEMMs).
DEFAULT_MFU = 0.5
#: Fixed per-step overhead (launch, sampler, scheduler): the fitted model's 1.207 ms overhead
#: plus the part of its 5.886 ms intercept that the weight read at DEFAULT_MBU does not explain.
DEFAULT_OVERHEAD_SECONDS = 1.8e-3
#: Fixed cost of one speculative step beyond the verify forward (rejection sampling, draft
#: bookkeeping, the extra scheduler work): fitted on published batch sweeps, see docs/costmodel.md
#: ("Fixed costs of speculation").
DEFAULT_VERIFY_OVERHEAD_SECONDS = 1.6e-3
#: Per-request part of that overhead (per-request draft/verify bookkeeping grows with the batch):
#: the reason published EAGLE speedups fall below 1 at batch 24-48 while the roofline still
#: counts verification as free (docs/costmodel.md, "Fixed costs of speculation").
DEFAULT_VERIFY_SECONDS_PER_REQUEST = 0.11e-3
#: Extra per-layer cost of tensor parallelism (two small all-reduces per layer on NVLink).
#: An assumption, applied only when TP > 1.
DEFAULT_ALLREDUCE_SECONDS_PER_LAYER = 10e-6
#: Per-request context when none is given.
DEFAULT_CONTEXT_TOKENS = 2048

#: Bound of the step-time memo: a long-lived model sees ever new batch sizes.
_MEMO_LIMIT = 4096
#: Bound of the K'-scan rows (spec_step_row): a few floats each, one per batch and coverage.
_ROW_LIMIT = 1024
#: Bound of step_time_pairs' (K, coverage) entries, each a few dozen batches.
_PAIRS_LIMIT = 64
#: Bound of the derived-model memo (with_method/with_coverage): a measured coverage is a new
#: float on most polls, so only the recent ones are worth keeping (they go first, see _derive).
_DERIVED_LIMIT = 16
#: Memo entry holding the curve generation the memo was filled with.
_VERSION_KEY = "curve_version"

_K = TypeVar("_K")
_V = TypeVar("_V")


def _remember(store: dict[_K, _V], key: _K, value: _V, limit: int = _MEMO_LIMIT) -> _V:
    """Store a computed value in a memo (emptied first when it grew past ``limit``); returns it."""
    if len(store) > limit:
        store.clear()
    store[key] = value
    return value


@dataclass(frozen=True)
class CostModel:
    hardware: HardwareSpec
    model: ModelSpec
    dtype: str = "bf16"
    tensor_parallel: int = 1
    mbu: float = DEFAULT_MBU
    mfu: float = DEFAULT_MFU
    overhead_seconds: float = DEFAULT_OVERHEAD_SECONDS
    allreduce_seconds_per_layer: float = DEFAULT_ALLREDUCE_SECONDS_PER_LAYER
    kv_dtype: str = "bf16"
    context_tokens: float = float(DEFAULT_CONTEXT_TOKENS)  # per request
    #: Paid once per speculative step (K > 0) on top of verify and drafting.
    verify_overhead_seconds: float = DEFAULT_VERIFY_OVERHEAD_SECONDS
    verify_seconds_per_request: float = DEFAULT_VERIFY_SECONDS_PER_REQUEST
    draft: DraftCost = field(default_factory=DraftCost)
    #: Measured step time of the target; replaces the roofline when set (see profile.py).
    profile: StepTimeCurve | None = None
    # Share of request-steps that carry a draft. vLLM counts a draft only when a request proposed
    # tokens: n-gram lookup misses leave ~28 % of steps undrafted on a real run, and those steps
    # neither verify extra tokens nor gain any. 1.0 for model-based drafters.
    draft_coverage: float = 1.0
    # Step times are pure in (tokens, context), base and spec step times in (batch, K): an
    # assessment asks for the same ones hundreds of times (best K per batch band, largest
    # speculative batch). Emptied when the curve's generation changes (curve_version); not
    # compared, and replace() starts a new memo.
    _memo: dict[object, float] = field(default_factory=dict, init=False, repr=False, compare=False)
    # spec_step_row: the step times of a K' scan at one batch, keyed (batch, coverage); shared and
    # emptied like _memo.
    _rows: dict[tuple[float, float], list[float]] = field(default_factory=dict, init=False, repr=False, compare=False)
    # step_time_pairs: per (K, coverage), batch -> (T_base, T_spec); shared and emptied like _memo.
    _pairs: dict[tuple[float, float], dict[int, tuple[float, float]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    # with_method/with_coverage results: kept so their memos outlive one assessment.
    _derived: dict[tuple[str, object], CostModel] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_BYTES:
            raise CostModelError("model.dtype", f"dtype must be one of {', '.join(DTYPE_BYTES)}")
        if self.tensor_parallel < 1:
            raise CostModelError("tensor_parallel", "tensor_parallel must be >= 1")
        for name in ("mbu", "mfu"):
            v = getattr(self, name)
            if not (0 < v <= 1):
                raise CostModelError(f"hardware.{name}", f"{name} must be in (0, 1]")
        if self.overhead_seconds < 0:
            raise CostModelError("hardware.overhead_seconds", "overhead_seconds must be >= 0")
        if self.verify_overhead_seconds < 0 or self.verify_seconds_per_request < 0:
            raise CostModelError("hardware.verify_overhead_seconds", "verify_overhead_seconds must be >= 0")
        if not (0 < self.draft_coverage <= 1):
            raise CostModelError("draft_coverage", "draft_coverage must be in (0, 1]")

    # -- roofline pieces ---------------------------------------------------------------------
    @cached_property
    def bandwidth_eff(self) -> float:
        return self.hardware.bandwidth_bytes_per_second * self.mbu * self.tensor_parallel

    @cached_property
    def flops_eff(self) -> float:
        return self.hardware.peak_flops(COMPUTE_DTYPE[self.dtype]) * self.mfu * self.tensor_parallel

    @cached_property
    def kv_bytes_per_token(self) -> float:
        return self.model.kv_bytes_per_token_bf16 * DTYPE_BYTES[self.kv_dtype] / 2.0

    @cached_property
    def fixed_seconds(self) -> float:
        tp_extra = self.allreduce_seconds_per_layer * self.model.layers if self.tensor_parallel > 1 else 0.0
        return self.overhead_seconds + tp_extra

    @property
    def knee_tokens(self) -> float:
        """Query tokens where a dense step turns compute-bound (the effective roofline knee)."""
        w = model_weight_bytes(self.model, self.dtype)
        return w * self.flops_eff / (2.0 * self.model.active_params * self.bandwidth_eff)

    @cached_property
    def _dense_weight_bytes(self) -> float | None:
        """Weight bytes streamed per step when they do not depend on the tokens (dense models)."""
        return None if self.model.is_moe else model_weight_bytes(self.model, self.dtype)

    @property
    def curve_version(self) -> int:
        """Generation of the step-time curve: 0 for the roofline and a static profile; a curve that
        changes while the sidecar runs (a learned one) exposes ``curve_version`` and increments it on
        every change. Every cache of values derived from step times keys on it."""
        return int(getattr(self.profile, "curve_version", 0)) if self._versioned else 0

    @cached_property
    def _versioned(self) -> bool:
        """Whether the step-time curve can change (its profile exposes ``curve_version``): only then
        is the memo checked against its generation. The roofline, a static profile and a learned
        curve (a new curve is a new model) are always generation 0, for which the check is a no-op."""
        return self.profile is not None and hasattr(self.profile, "curve_version")

    def _current_memo(self) -> dict[object, float]:
        """The memo, emptied first when the step-time curve changed since it was filled."""
        memo = self._memo
        if self._versioned:
            version = float(self.curve_version)
            if memo.get(_VERSION_KEY, 0.0) != version:
                memo.clear()
                self._rows.clear()  # and the K' rows and batch-search pairs built on it
                self._pairs.clear()
                memo[_VERSION_KEY] = version
        return memo

    def _roofline(
        self, params_streamed_bytes: float, active_params: float, tokens: float, kv_bytes: float, fixed: float
    ) -> float:
        gemm = max(params_streamed_bytes / self.bandwidth_eff, 2.0 * active_params * tokens / self.flops_eff)
        return gemm + kv_bytes / self.bandwidth_eff + fixed

    # -- the target's step: the one function a measured or learned curve replaces -------------
    def step_time(self, tokens: float, context_tokens: float) -> float:
        """Seconds of one target forward over ``tokens`` query tokens with ``context_tokens``
        KV tokens in the whole batch."""
        memo = self._current_memo() if self._versioned else self._memo
        key = (tokens, context_tokens)
        hit = memo.get(key)
        if hit is None:
            hit = _remember(memo, key, self._step_time(tokens, context_tokens))
        return hit

    def _step_time(self, tokens: float, context_tokens: float) -> float:
        tokens = max(float(tokens), 1.0)
        context_tokens = max(float(context_tokens), 0.0)
        if self.profile is not None:
            return self.profile.step_seconds(tokens, context_tokens, self._kv_seconds_per_token)
        dense = self._dense_roofline
        if dense is None:
            return self._roofline(
                model_weight_bytes(self.model, self.dtype, tokens),
                self._active_params,
                tokens,
                self.kv_bytes_per_token * context_tokens,
                self.fixed_seconds,
            )
        # _roofline for a dense model, its constant operands computed once (the same operations
        # in the same order: bit for bit the same time).
        weight_seconds, two_active_params, flops_eff, kv_bytes_per_token, bandwidth_eff, fixed = dense
        compute_seconds = two_active_params * tokens / flops_eff
        gemm = compute_seconds if compute_seconds > weight_seconds else weight_seconds  # max(), NaN alike
        return gemm + kv_bytes_per_token * context_tokens / bandwidth_eff + fixed

    @cached_property
    def _dense_roofline(self) -> tuple[float, float, float, float, float, float] | None:
        """(W / BW_eff, 2·P_active, F_eff, KV bytes per token, BW_eff, fixed seconds) when the weight
        bytes do not depend on the tokens (dense models), else None: one attribute read per step."""
        weight_bytes = self._dense_weight_bytes
        if weight_bytes is None:
            return None
        bandwidth_eff = self.bandwidth_eff
        return (
            weight_bytes / bandwidth_eff,
            2.0 * self._active_params,
            self.flops_eff,
            self.kv_bytes_per_token,
            bandwidth_eff,
            self.fixed_seconds,
        )

    @cached_property
    def _kv_seconds_per_token(self) -> float:
        """The roofline's KV streaming cost, for a profile that measured none."""
        return self.kv_bytes_per_token / self.bandwidth_eff

    @cached_property
    def _active_params(self) -> float:
        return self.model.active_params

    def base_step_time(self, batch: float) -> float:
        """Plain decode step at batch B: B query tokens over B·context KV tokens."""
        memo = self._current_memo() if self._versioned else self._memo
        hit = memo.get(batch)  # a bare number: step_time's keys are pairs
        if hit is None:
            b = max(float(batch), 1.0)
            hit = _remember(memo, batch, self.step_time(b, b * self.context_tokens))
        return hit

    def spec_step_row(self, batch: float) -> list[float]:
        """The step times a scan over K' = 1, 2, ... at ``batch`` reads, in one memo entry:
        ``[base_step_time(batch), spec_step_time(batch, 1), spec_step_time(batch, 2), ...]`` as far
        as scans have gone so far. A scan reads ``row[kk]`` and, at the end of the row, stores
        ``spec_step_time(batch, kk)`` at index kk (kk == len(row)) itself: the row only ever holds
        those exact values, never shrinks, and a schedule's dozens of scans cost one lookup per
        batch instead of one memoised call per K'."""
        if self._versioned:
            self._current_memo()  # empties the rows too when the curve changed
        key = (batch, self.draft_coverage)
        try:
            return self._rows[key]  # asked dozens of times per schedule: no helper call, no lambda
        except KeyError:
            return _remember(self._rows, key, [self.base_step_time(batch)], _ROW_LIMIT)

    def step_time_pairs(self, k: float) -> dict[int, tuple[float, float]]:
        """``batch -> (base_step_time(batch), spec_step_time(batch, k))`` for integer batches at
        this coverage, as far as searches over the batch have gone: one lookup per batch for the
        largest speculative batch's doubling and bisection. A caller that misses a batch stores
        exactly those two values itself, so the mapping only ever holds them."""
        return self._coverage_entry(self._pairs, k, dict, _PAIRS_LIMIT)

    def _coverage_entry(
        self, store: dict[tuple[float, float], _V], first: float, make: Callable[[], _V], limit: int
    ) -> _V:
        """``store[(first, draft_coverage)]``, made when missing; the store is emptied with the memo
        when the step-time curve changes."""
        if self._versioned:
            self._current_memo()
        key = (first, self.draft_coverage)
        entry = store.get(key)
        if entry is None:
            entry = _remember(store, key, make(), limit)
        return entry

    # -- drafting -----------------------------------------------------------------------------
    def draft_cost_per_token(self) -> float:
        memo = self._current_memo()
        hit = memo.get("draft_cost_per_token")
        if hit is None:
            hit = memo["draft_cost_per_token"] = self._draft_cost_per_token()
        return hit

    def _draft_cost_per_token(self) -> float:
        """c: seconds to draft one token as a fraction of a plain target step at batch 1.

        Configured, or computed from the drafter's size on this hardware: EAGLE/MTP/Medusa one
        head forward (incl. LM head) plus the fixed cost of a drafting pass, per token at the
        reference K; a draft model's own roofline step. With a measured profile or a learned curve
        the roofline draft is scaled by the same slow-down as the target (cost_scale), so a CPU
        profile is never divided into an H100 roofline draft. alpha* = c + (R − 1)/K at batch 1
        (docs/costmodel.md, "Draft cost")."""
        d = self.draft
        if d.cost_per_token is not None:
            return d.cost_per_token
        if d.method in ("ngram", "suffix"):
            return 0.0  # charged on verify time instead, see draft_time
        if self.profile is not None and self._relative_curve is None:
            # A static measured profile says nothing about the drafter (cost_scale is 1): price the
            # draft as its roofline ratio to the target's roofline step on the same hardware, never
            # over the profile's step (a CPU profile against an H100 roofline draft gave a
            # break-even of 60). The ratio then scales the profile's own step (draft_time).
            return replace(self, profile=None).draft_cost_per_token()
        # Roofline, or a learned curve: the drafter is scaled by cost_scale, the step by the curve.
        t1 = self.base_step_time(1.0)
        if d.method == "draft_model" and d.draft_model is not None:
            return self._draft_model_step(1.0) / t1
        k_ref = max(d.reference_k, 1)
        return self._head_draft_time(1.0, k_ref) / k_ref / t1

    def _draft_model_step(self, batch: float) -> float:
        d = self.draft
        dm = d.draft_model
        assert dm is not None
        kv_scale = DTYPE_BYTES[self.kv_dtype] / 2.0
        return self.cost_scale(batch) * self._roofline(
            model_weight_bytes(dm, d.draft_dtype, batch),
            dm.active_params,
            batch,
            dm.kv_bytes_per_token_bf16 * kv_scale * self.context_tokens * batch,
            self.fixed_seconds,
        )

    def _head_draft_time(self, batch: float, k: float) -> float:
        """EAGLE/MTP/Medusa: ``passes`` sequential head forwards over ``batch`` rows, each paying
        the head's weight read (bf16), its one-layer KV and a fixed per-pass cost (launches,
        sampling, the LM head's top-k: absolute seconds, they do not shrink with TP)."""
        d = self.draft
        # _roofline of one head forward with no fixed cost, its constant operands computed once
        # (the same operations in the same order: bit for bit the same time).
        weight_seconds, two_params, kv_bytes_per_row = self._head_roofline
        compute_seconds = two_params * batch / self.flops_eff
        gemm = compute_seconds if compute_seconds > weight_seconds else weight_seconds  # max(), NaN alike
        head_step = gemm + kv_bytes_per_row * batch / self.bandwidth_eff
        passes = k if d.head_steps_per_token else 1.0
        curve = self._relative_curve  # cost_scale, inlined
        scale = 1.0 if curve is None else curve.spec_cost_ratio(batch * (k + 1))
        return scale * passes * (d.fixed_seconds + head_step)

    @cached_property
    def _head_roofline(self) -> tuple[float, float, float]:
        """The draft head's weight-read seconds, 2·params, and KV bytes per batch row."""
        d = self.draft
        kv_scale = DTYPE_BYTES[self.kv_dtype] / 2.0
        return (
            d.head_params * DTYPE_BYTES["bf16"] / self.bandwidth_eff,
            2.0 * d.head_params,
            d.head_kv_bytes_per_token * kv_scale * self.context_tokens,
        )

    def draft_time(self, batch: float, k: float) -> float:
        """Seconds to propose ``k`` draft tokens for each of ``batch`` requests. Not memoised: the
        n-gram share and a configured cost read memoised step times, a draft head's roofline costs
        less than a memo entry, and the spec step that calls this is memoised itself."""
        if k <= 0:
            return 0.0
        batch = max(float(batch), 1.0)
        kind = self._draft_kind
        if kind == "ngram":
            # CPU-side matching: 0.59 % of the verify step (SpecDecode-Bench).
            return NGRAM_FRACTION_OF_VERIFY * self.step_time(batch * (k + 1), batch * self.context_tokens)
        if kind == "head":
            return self._head_draft_time(batch, k)
        return k * self.draft_cost_per_token() * self.base_step_time(batch)

    @cached_property
    def _draft_kind(self) -> str:
        """How draft_time prices this drafter: "ngram" (a share of the verify step), "head" (the
        head's own roofline) or "per_token" (draft_cost_per_token × the plain step)."""
        d = self.draft
        if d.cost_per_token is None and d.method in ("ngram", "suffix"):
            return "ngram"
        if d.cost_per_token is None and d.method != "draft_model" and d.head_params > 0:
            return "head"
        return "per_token"

    def cost_scale(self, tokens: float) -> float:
        """How much slower than this roofline the server runs at ``tokens`` query tokens: the
        learned curve's ratio (costmodel/learned.py), else 1. Scales the absolute costs that do
        not go through ``step_time`` (fixed costs of speculation, the drafter's own roofline)."""
        curve = self._relative_curve
        return 1.0 if curve is None else curve.spec_cost_ratio(tokens)

    @cached_property
    def _relative_curve(self) -> RelativeStepTimeCurve | None:
        # isinstance against a runtime-checkable Protocol walks its members on every call (a third
        # of an evaluation's time when it ran per step-time question); the profile never changes.
        curve = self.profile
        return curve if isinstance(curve, RelativeStepTimeCurve) else None

    def spec_overhead_time(self, batch: float, tokens: float | None = None) -> float:
        """Fixed cost of one speculative step over ``batch`` requests (``tokens`` verified),
        beyond verify and drafting. A configured ``draft.cost_per_token`` is a measured total and
        already includes it. Not memoised: two operations and ``cost_scale`` (1, or the learned
        curve's memoised ratio); its one caller on the hot path, the spec step, is memoised."""
        if self.draft.cost_per_token is not None:
            return 0.0
        curve = self._relative_curve  # cost_scale, inlined
        scale = 1.0 if curve is None else curve.spec_cost_ratio(tokens if tokens is not None else batch)
        return scale * (self.verify_overhead_seconds + self.verify_seconds_per_request * max(float(batch), 1.0))

    def spec_step_time(self, batch: float, k: float) -> float:
        """Verify B·(K+1) tokens plus drafting K per request (B·(1 + coverage·K) and coverage·B
        drafting requests when only part of the request-steps carry a draft)."""
        memo = self._current_memo() if self._versioned else self._memo
        key = ("spec", batch, k, self.draft_coverage)  # the one memo entry coverage changes
        hit = memo.get(key)
        if hit is None:
            hit = _remember(memo, key, self._spec_step_time(batch, k))
        return hit

    def _spec_step_time(self, batch: float, k: float) -> float:
        batch = max(float(batch), 1.0)
        c = self.draft_coverage
        fixed = self.spec_overhead_time(batch, batch * (1 + c * k)) if k > 0 else 0.0
        if c >= 1.0:
            return self.step_time(batch * (k + 1), batch * self.context_tokens) + self.draft_time(batch, k) + fixed
        return self.step_time(batch * (1 + c * k), batch * self.context_tokens) + c * self.draft_time(batch, k) + fixed

    def tokens_per_step(self, k: float, alpha: float) -> float:
        """Tokens a request gains per step: 1 + coverage·K·alpha (vLLM V1's alpha, exact)."""
        return 1.0 + self.draft_coverage * k * alpha

    def with_coverage(self, coverage: float | None) -> CostModel:
        """The same model with a measured draft coverage (Δdrafts / Δrequest-steps)."""
        if coverage is None or not (coverage > 0):
            return self
        return self._derive(("coverage", coverage), lambda: self._sharing_memo(min(float(coverage), 1.0)))

    def _sharing_memo(self, draft_coverage: float) -> CostModel:
        """This model with another draft coverage, keeping its memo: the measured coverage is a new
        float on most polls, and every memo entry but the speculative step's (keyed on coverage)
        is independent of it, so a fresh memo would recompute the whole curve on every poll.

        Built as a copy, not with replace(): the fields are already valid (with_coverage keeps
        coverage in (0, 1]) and the cached roofline constants, which do not depend on coverage,
        carry over instead of being recomputed for every new coverage."""
        derived: CostModel = object.__new__(CostModel)
        self._settle_coverage_free()
        state = {name: self.__dict__[name] for name in _FIELD_NAMES}
        state.update((name, self.__dict__[name]) for name in _COVERAGE_FREE_CACHED if name in self.__dict__)
        state["draft_coverage"] = draft_coverage
        state["_memo"] = self._memo
        state["_rows"] = self._rows
        state["_pairs"] = self._pairs
        state["_derived"] = {}
        derived.__dict__.update(state)
        return derived

    def _settle_coverage_free(self) -> None:
        """Compute the coverage-free cached constants on this model once, so that every coverage
        copy inherits them: the parent itself is rarely asked (its copies are), and without this
        each new coverage recomputed all of them (a third of a speculative-step miss). One that
        fails here is left for the copy to compute, and fail, when and if it is used, as before."""
        values = self.__dict__
        if values.get("_coverage_free_settled"):
            return
        for name in _COVERAGE_FREE_CACHED:
            try:
                getattr(self, name)
            except Exception:  # noqa: BLE001 - raised again, unchanged, where it is used
                continue
        values["_coverage_free_settled"] = True

    def with_method(self, method: str | None) -> CostModel:
        """The same model with the default draft cost of ``method`` (unless a cost was configured)."""
        if not method or method == "auto" or self.draft.cost_per_token is not None or method == self.draft.method:
            return self
        method = METHOD_ALIASES.get(method, method)
        if method not in DRAFT_METHODS or method == self.draft.method:
            return self
        return self._derive(
            ("method", method),
            lambda: replace(
                self,
                draft=draft_cost_for(
                    method, self.model, draft_model=self.draft.draft_model, draft_dtype=self.draft.draft_dtype
                ),
            ),
        )

    def _derive(self, key: tuple[str, object], make: Callable[[], CostModel]) -> CostModel:
        """The same derived model for the same change, so its step-time memo serves every later
        assessment (a new model per assessment would start from an empty memo each time)."""
        derived = self._derived.get(key)
        if derived is None:
            if len(self._derived) >= _DERIVED_LIMIT:
                # Drop the coverage-derived models (a new coverage comes every poll; they share
                # this memo, so dropping them loses nothing) and keep the few per-method models,
                # whose own memos another route's verdicts keep using.
                for old in [old for old in self._derived if old[0] == "coverage"]:
                    del self._derived[old]
                if len(self._derived) >= _DERIVED_LIMIT:
                    self._derived.clear()
            derived = self._derived[key] = make()
        return derived


#: Every dataclass field of CostModel (what replace() would copy).
_FIELD_NAMES = tuple(f.name for f in fields(CostModel))
#: Cached properties of CostModel that do not depend on ``draft_coverage`` (a coverage-derived
#: model reuses them). One missing here is merely recomputed; one added here must not read coverage.
_COVERAGE_FREE_CACHED = (
    "bandwidth_eff",
    "flops_eff",
    "kv_bytes_per_token",
    "fixed_seconds",
    "_dense_weight_bytes",
    "_active_params",
    "_relative_curve",
    "_versioned",
    "_head_roofline",
    "_kv_seconds_per_token",
    "_dense_roofline",
    "_draft_kind",
)


def max_concurrency_by_memory(cm: CostModel, gpu_memory_utilization: float = 0.9) -> int | None:
    """Requests of ``cm.context_tokens`` whose KV fits beside the weights (None: GPU memory unknown)."""
    mem = cm.hardware.memory_bytes
    if mem is None:
        return None
    free = mem * cm.tensor_parallel * gpu_memory_utilization - model_total_weight_bytes(cm.model, cm.dtype)
    per_request = cm.kv_bytes_per_token * max(cm.context_tokens, 1.0)
    return max(int(free // per_request), 0)
