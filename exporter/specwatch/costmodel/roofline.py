"""The step-time model of one target on one GPU set: CostModel.

    T(n, S) = max(W(n) / BW_eff, 2 · P_active · n / F_eff) + KV_bytes_per_token · S / BW_eff + c0

n = query tokens in the step (B for plain decode, B·(K+1) for a verify step), S = KV tokens in the
whole batch, W(n) = weight bytes streamed (for MoE: dense part + the experts the n tokens touch),
BW_eff = HBM bandwidth × MBU × TP, F_eff = peak FLOPS of the compute dtype × MFU × TP.
A measured ``profile`` (profile.py) replaces the roofline for the target's step. Formulas,
defaults and their calibration: docs/costmodel.md.

Draft coverage (the share of request-steps that carry a draft, measured per window) is a
parameter of the speculative step's questions (``spec_step_time``, ``tokens_per_step``), not part
of the model: one model answers every coverage.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

from specwatch.costmodel.draft import DRAFT_METHODS, METHOD_ALIASES, NGRAM_FRACTION_OF_VERIFY, DraftCost, draft_cost_for
from specwatch.costmodel.engine_priors import GENERIC, EnginePrior
from specwatch.costmodel.errors import CostModelError
from specwatch.costmodel.hardware import COMPUTE_DTYPE, HardwareSpec
from specwatch.costmodel.models import DTYPE_BYTES, ModelSpec, model_total_weight_bytes, model_weight_bytes
from specwatch.costmodel.profile import RelativeStepTimeCurve, StepTimeCurve, is_relative_curve

# Efficiency defaults, calibrated against the SpecDecode-Bench fitted step model for Llama-3.1-8B
# on H100; docs/costmodel.md ("Defaults and why") shows the derivation and tests/unit/costmodel/test_costmodel.py
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
#: Bound of the step_times memo: a long-lived model sees new batches and coverages every poll.
_MEMO_LIMIT = 4096


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
    #: One-sigma error of a predicted speedup, log units: the engine prior's (engine_priors.py).
    calibration_log_error: float = GENERIC.log_error
    #: The batch sizes the prior's rows cover (None: its error is one number for every batch).
    calibration_batch_range: tuple[float, float] | None = None
    #: The engine prior whose fixed costs and error these are ("generic" when none was given).
    prior_name: str = GENERIC.engine
    #: Neither hardware nor model was configured: the step times are a guess (uncertainty.py).
    setup_assumed: bool = False
    # step_times' memo: (batch, K, coverage) -> (T_base, T_spec). Not compared; replace() starts
    # a new one (every field that changes a step time makes a new model).
    _memo: dict[tuple[float, float, float], tuple[float, float]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    # with_method's models, one per draft method at most: the same derived model (and memo) for
    # every assessment of a route whose drafter differs from the configured one.
    _by_method: dict[str, CostModel] = field(default_factory=dict, init=False, repr=False, compare=False)
    # with_prior's models, one per engine prior at most (routes of one server may speak different engines).
    _by_prior: dict[str, CostModel] = field(default_factory=dict, init=False, repr=False, compare=False)

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

    @cached_property
    def _active_params(self) -> float:
        return self.model.active_params

    def _roofline(
        self, params_streamed_bytes: float, active_params: float, tokens: float, kv_bytes: float, fixed: float
    ) -> float:
        gemm = max(params_streamed_bytes / self.bandwidth_eff, 2.0 * active_params * tokens / self.flops_eff)
        return gemm + kv_bytes / self.bandwidth_eff + fixed

    # -- the target's step: the one function a measured or learned curve replaces -------------
    def step_time(self, tokens: float, context_tokens: float) -> float:
        """Seconds of one target forward over ``tokens`` query tokens with ``context_tokens``
        KV tokens in the whole batch."""
        tokens = max(float(tokens), 1.0)
        context_tokens = max(float(context_tokens), 0.0)
        if self.profile is not None:
            return self.profile.step_seconds(tokens, context_tokens, self._kv_seconds_per_token)
        weight_bytes = self._dense_weight_bytes
        return self._roofline(
            model_weight_bytes(self.model, self.dtype, tokens) if weight_bytes is None else weight_bytes,
            self._active_params,
            tokens,
            self.kv_bytes_per_token * context_tokens,
            self.fixed_seconds,
        )

    @cached_property
    def _kv_seconds_per_token(self) -> float:
        """The roofline's KV streaming cost, for a profile that measured none."""
        return self.kv_bytes_per_token / self.bandwidth_eff

    def base_step_time(self, batch: float) -> float:
        """Plain decode step at batch B: B query tokens over B·context KV tokens."""
        b = max(float(batch), 1.0)
        return self.step_time(b, b * self.context_tokens)

    # -- drafting -----------------------------------------------------------------------------
    def draft_cost_per_token(self) -> float:
        return self._draft_cost_per_token

    @cached_property
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
        kv_scale = DTYPE_BYTES[self.kv_dtype] / 2.0
        head_step = self._roofline(
            d.head_params * DTYPE_BYTES["bf16"],
            d.head_params,
            batch,
            d.head_kv_bytes_per_token * kv_scale * self.context_tokens * batch,
            0.0,
        )
        passes = k if d.head_steps_per_token else 1.0
        return self.cost_scale(batch * (k + 1)) * passes * (d.fixed_seconds + head_step)

    def draft_time(self, batch: float, k: float) -> float:
        """Seconds to propose ``k`` draft tokens for each of ``batch`` requests."""
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
        # Worked out once per model (the profile never changes), without isinstance against a
        # runtime-checkable Protocol, which walks the protocol's members on every call.
        curve = self.profile
        return curve if is_relative_curve(curve) else None

    def spec_overhead_time(self, batch: float, tokens: float | None = None) -> float:
        """Fixed cost of one speculative step over ``batch`` requests (``tokens`` verified),
        beyond verify and drafting. A configured ``draft.cost_per_token`` is a measured total and
        already includes it."""
        if self.draft.cost_per_token is not None:
            return 0.0
        scale = self.cost_scale(tokens if tokens is not None else batch)
        return scale * (self.verify_overhead_seconds + self.verify_seconds_per_request * max(float(batch), 1.0))

    def spec_step_time(self, batch: float, k: float, coverage: float = 1.0) -> float:
        """Verify B·(K+1) tokens plus drafting K per request; B·(1 + coverage·K) tokens and
        coverage·B drafting requests when only a share ``coverage`` in (0, 1] of the request-steps
        carries a draft (see ``draft_coverage``)."""
        if not (0 < coverage <= 1):
            raise CostModelError("draft_coverage", "draft_coverage must be in (0, 1]")
        batch = max(float(batch), 1.0)
        c = coverage
        fixed = self.spec_overhead_time(batch, batch * (1 + c * k)) if k > 0 else 0.0
        if c >= 1.0:
            return self.step_time(batch * (k + 1), batch * self.context_tokens) + self.draft_time(batch, k) + fixed
        return self.step_time(batch * (1 + c * k), batch * self.context_tokens) + c * self.draft_time(batch, k) + fixed

    def step_times(self, batch: float, k: float, coverage: float = 1.0) -> tuple[float, float]:
        """``(base_step_time(batch), spec_step_time(batch, k, coverage))``, memoised: every speedup
        question needs both, and a schedule's K' scans and the largest-batch search ask the same
        integer batches poll after poll. ``plain_step_times`` is the same without the memo."""
        key = (batch, k, coverage)
        memo = self._memo
        hit = memo.get(key)
        if hit is None:
            if len(memo) >= _MEMO_LIMIT:
                memo.clear()
            hit = memo[key] = self.fused_step_times(batch, k, coverage)
        return hit

    def plain_step_times(self, batch: float, k: float, coverage: float = 1.0) -> tuple[float, float]:
        return self.base_step_time(batch), self.spec_step_time(batch, k, coverage)

    def fused_step_times(self, batch: float, k: float, coverage: float = 1.0) -> tuple[float, float]:
        """``plain_step_times`` in one pass for a dense roofline model: the same operations in the
        same order (bit for bit), with the model's fixed factors read once and the plain step shared
        by the verify step's terms. A profile, a learned curve or an MoE takes the plain path."""
        fixed_factors = self._fused_factors
        if fixed_factors is None:
            return self.plain_step_times(batch, k, coverage)
        if not (0 < coverage <= 1):
            raise CostModelError("draft_coverage", "draft_coverage must be in (0, 1]")
        weight_time, two_active, flops, kv_per_token, bandwidth, fixed_step, context_per_request = fixed_factors
        b = max(float(batch), 1.0)
        kv_time = kv_per_token * max(b * context_per_request, 0.0) / bandwidth
        base = max(weight_time, two_active * b / flops) + kv_time + fixed_step
        c = coverage
        verify_tokens = max(float(b * (k + 1) if c >= 1.0 else b * (1 + c * k)), 1.0)
        verify = max(weight_time, two_active * verify_tokens / flops) + kv_time + fixed_step
        d = self.draft
        draft = fixed = 0.0
        if not k <= 0:  # draft_time's test and spec_step_time's (k > 0) differ for a NaN K
            kind = self._draft_kind
            if kind == "ngram":
                ngram_tokens = max(float(b * (k + 1)), 1.0)
                draft = NGRAM_FRACTION_OF_VERIFY * (
                    max(weight_time, two_active * ngram_tokens / flops) + kv_time + fixed_step
                )
            elif kind == "head":
                head_weight_time, two_head, head_kv = self._fused_head_factors
                head_step = max(head_weight_time, two_head * b / flops) + head_kv * b / bandwidth + 0.0
                draft = (k if d.head_steps_per_token else 1.0) * (d.fixed_seconds + head_step)
            else:
                draft = k * self.draft_cost_per_token() * base
        if k > 0 and d.cost_per_token is None:
            fixed = self.verify_overhead_seconds + self.verify_seconds_per_request * b
        spec = verify + draft + fixed if c >= 1.0 else verify + c * draft + fixed
        return base, spec

    @cached_property
    def _fused_factors(self) -> tuple[float, float, float, float, float, float, float] | None:
        """fused_step_times' per-model factors of the roofline; None where it does not apply."""
        weight_bytes = self._dense_weight_bytes
        if self.profile is not None or weight_bytes is None:
            return None
        return (
            weight_bytes / self.bandwidth_eff,
            2.0 * self._active_params,
            self.flops_eff,
            self.kv_bytes_per_token,
            self.bandwidth_eff,
            self.fixed_seconds,
            self.context_tokens,
        )

    @cached_property
    def _fused_head_factors(self) -> tuple[float, float, float]:
        """The draft head's fixed factors of its roofline step (``_head_draft_time``)."""
        d = self.draft
        kv_scale = DTYPE_BYTES[self.kv_dtype] / 2.0
        return (
            d.head_params * DTYPE_BYTES["bf16"] / self.bandwidth_eff,
            2.0 * d.head_params,
            d.head_kv_bytes_per_token * kv_scale * self.context_tokens,
        )

    @staticmethod
    def tokens_per_step(k: float, alpha: float, coverage: float = 1.0) -> float:
        """Tokens a request gains per step: 1 + coverage·K·alpha (vLLM V1's alpha, exact)."""
        return 1.0 + coverage * k * alpha

    def with_method(self, method: str | None) -> CostModel:
        """The same model with the default draft cost of ``method`` (unless a cost was configured)."""
        if not method or method == "auto" or self.draft.cost_per_token is not None or method == self.draft.method:
            return self
        method = METHOD_ALIASES.get(method, method)
        if method not in DRAFT_METHODS or method == self.draft.method:
            return self
        derived = self._by_method.get(method)
        if derived is None:
            d = self.draft
            draft = draft_cost_for(method, self.model, draft_model=d.draft_model, draft_dtype=d.draft_dtype)
            derived = self._by_method[method] = replace(self, draft=draft)
        return derived

    def with_prior(self, prior: EnginePrior) -> CostModel:
        """The same model with ``prior``'s fixed costs of speculation and its error (as
        build_cost_model applies them: the per-pass cost only where a draft head pays one)."""
        if prior.engine == self.prior_name:
            return self
        derived = self._by_prior.get(prior.engine)
        if derived is None:
            draft = self.draft
            if draft.fixed_seconds > 0:
                draft = replace(draft, fixed_seconds=prior.draft_fixed_seconds)
            derived = self._by_prior[prior.engine] = replace(
                self,
                draft=draft,
                verify_overhead_seconds=prior.verify_overhead_seconds,
                verify_seconds_per_request=prior.verify_seconds_per_request,
                calibration_log_error=prior.log_error,
                calibration_batch_range=prior.batch_range,
                prior_name=prior.engine,
            )
        return derived


def draft_coverage(measured: float | None) -> float:
    """The coverage to price with: a window's measured Δdrafts / Δrequest-steps, capped at 1; 1
    (every request-step drafts, as model-based drafters do) when none was measured or it is not
    positive. vLLM counts a draft only when a request proposed tokens: n-gram lookup misses leave
    ~28 % of steps undrafted on a real run, and those steps neither verify extra tokens nor gain any."""
    return min(float(measured), 1.0) if measured is not None and measured > 0 else 1.0


def max_concurrency_by_memory(cm: CostModel, gpu_memory_utilization: float = 0.9) -> int | None:
    """Requests of ``cm.context_tokens`` whose KV fits beside the weights (None: GPU memory unknown)."""
    mem = cm.hardware.memory_bytes
    if mem is None:
        return None
    free = mem * cm.tensor_parallel * gpu_memory_utilization - model_total_weight_bytes(cm.model, cm.dtype)
    per_request = cm.kv_bytes_per_token * max(cm.context_tokens, 1.0)
    return max(int(free // per_request), 0)
