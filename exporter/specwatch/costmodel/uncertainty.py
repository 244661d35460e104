"""How sure a predicted speedup is: an interval from the model's error and the window's noise.

Each source is one standard deviation of log(speedup); they are independent, so they add in
quadrature, and the interval is exp(log S ± z·σ) with z the two-sided normal quantile of the
confidence level (docs/costmodel.md, "Uncertainty"):

* the model. Without a learned curve: the engine prior's calibration error at the live batch
  (``calibration_log_error``: its speedups against published measurements it was not fitted on,
  wider for a MoE target and outside the batches its rows cover), plus ``ASSUMED_SETUP_LOG_ERROR``
  when neither hardware nor model was configured. With a learned curve: the curve's residual, and
  the prior's error (and the assumed setup's) on top unless the curve measured spec-off steps too
  (with spec-on steps alone the split between the target's step and the cost of speculation is
  still the prior's).
* sampling: alpha is a share of the window's draft tokens. Its binomial standard error is taken
  over drafts, not tokens (the tokens of one draft are accepted together or not at all, so drafts
  are the independent sample), and carried through S = (1 + c·K·alpha)·T_base/T_spec, linear in alpha.

Pure: numbers in, numbers out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from specwatch.costmodel.engine_priors import log_error_at
from specwatch.costmodel.learned import LearnedStepCurve
from specwatch.costmodel.roofline import CostModel

#: Error added while the hardware and the model are assumed (nothing configured, nothing learned
#: yet): a factor of 2 at one sigma. Nothing the user stated bounds how far the assumed H100 and
#: Llama-3.1-8B are from the real server; on the one such case measured (vLLM on a CPU with a tiny
#: model) the assumed setup predicted 3.2x where 2.13x was measured. With the prior's error, the
#: 90 % interval spans a factor of 3.7 either side: only a speedup beyond 3.7x or below 0.27x is
#: decided on the guess.
ASSUMED_SETUP_LOG_ERROR = 0.7
#: Shortest spec-off canary: one full 5m window (the default longest) of spec-off steps, plus
#: the restart and the learner's first points.
MIN_CANARY_MINUTES = 10.0
#: Past an hour the speedup is so close to 1 that on or off makes no difference worth measuring.
MAX_CANARY_MINUTES = 60.0
#: Spread of one step's time in log units when the window gives none (the learner's own start).
DEFAULT_STEP_LOG_SPREAD = 0.15
#: The least model error of a curve whose spec-off and spec-on steps were both measured (log
#: units): near the learner's residual floor (learned.MIN_RESIDUAL_SCALE, 0.05).
MIN_MEASURED_LOG_ERROR = 0.04


def normal_cdf(x: float) -> float:
    """P(Z <= x) of the standard normal (statistics.NormalDist().cdf)."""
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def normal_quantile(p: float) -> float:
    """The standard normal's quantile at 0 < p < 1 (statistics.NormalDist().inv_cdf, whose
    algorithm this is: Wichura, M.J. (1988), "Algorithm AS241: The Percentage Points of the Normal
    Distribution", Applied Statistics 37 (3): 477-484, exact to about 1e-16). Here rather than
    imported: statistics brings decimal, fractions and random into every running sidecar."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), not {p}")
    q = p - 0.5
    if abs(q) <= 0.425:
        r = 0.180625 - q * q
        num = (((((((2.5090809287301226727e3 * r + 3.3430575583588128105e4) * r + 6.7265770927008700853e4) * r
                   + 4.5921953931549871457e4) * r + 1.3731693765509461125e4) * r + 1.9715909503065514427e3) * r
                 + 1.3314166789178437745e2) * r + 3.3871328727963666080e0) * q  # fmt: skip
        den = (((((((5.2264952788528545610e3 * r + 2.8729085735721942674e4) * r + 3.9307895800092710610e4) * r
                   + 2.1213794301586595867e4) * r + 5.3941960214247511077e3) * r + 6.8718700749205790830e2) * r
                 + 4.2313330701600911252e1) * r + 1.0)  # fmt: skip
        return num / den
    r = math.sqrt(-math.log(p if q <= 0.0 else 1.0 - p))
    if r <= 5.0:
        r -= 1.6
        num = (((((((7.74545014278341407640e-4 * r + 2.27238449892691845833e-2) * r + 2.41780725177450611770e-1) * r
                   + 1.27045825245236838258e0) * r + 3.64784832476320460504e0) * r + 5.76949722146069140550e0) * r
                 + 4.63033784615654529590e0) * r + 1.42343711074968357734e0)  # fmt: skip
        den = (((((((1.05075007164441684324e-9 * r + 5.47593808499534494600e-4) * r + 1.51986665636164571966e-2) * r
                   + 1.48103976427480074590e-1) * r + 6.89767334985100004550e-1) * r + 1.67638483018380384940e0) * r
                 + 2.05319162663775882187e0) * r + 1.0)  # fmt: skip
    else:
        r -= 5.0
        num = (((((((2.01033439929228813265e-7 * r + 2.71155556874348757815e-5) * r + 1.24266094738807843860e-3) * r
                   + 2.65321895265761230930e-2) * r + 2.96560571828504891230e-1) * r + 1.78482653991729133580e0) * r
                 + 5.46378491116411436990e0) * r + 6.65790464350110377720e0)  # fmt: skip
        den = (((((((2.04426310338993978564e-15 * r + 1.42151175831644588870e-7) * r + 1.84631831751005468180e-5) * r
                   + 7.86869131145613259100e-4) * r + 1.48753612908506148525e-2) * r + 1.36929880922735805310e-1) * r
                 + 5.99832206555887937690e-1) * r + 1.0)  # fmt: skip
    x = num / den
    return -x if q < 0.0 else x


#: z of P99 over P50 for a log-normal step time.
_Z_P99 = normal_quantile(0.99)


@dataclass(frozen=True)
class SpeedupInterval:
    lower: float
    upper: float
    model_log_error: float  # one sigma, log units
    sampling_log_error: float  # one sigma, log units
    z: float


@lru_cache(maxsize=16)
def z_for(confidence: float) -> float:
    """The two-sided normal quantile: 1.645 at 0.9. Remembered: the configured confidence is asked
    for every assessed window, and the quantile's rational approximation is the dearest part of
    an interval."""
    return normal_quantile(0.5 + confidence / 2.0)


def calibration_log_error(cm: CostModel, batch: float | None = None) -> float:
    """The engine prior's error at ``batch``: larger for a MoE target and outside the batches the
    prior's rows cover (engine_priors.log_error_at)."""
    return log_error_at(cm.calibration_log_error, cm.calibration_batch_range, batch, cm.model.is_moe)


def model_log_error(cm: CostModel, batch: float | None = None) -> float:
    """One sigma of the cost model's log speedup at ``batch`` (see the module docstring)."""
    prior = calibration_log_error(cm, batch)
    curve = cm.profile
    if isinstance(curve, LearnedStepCurve):
        residual = math.log1p(curve.residual_ratio) if math.isfinite(curve.residual_ratio) else 0.0
        if curve.spec_scale is not None:  # spec-off and spec-on steps both measured
            # Never below the learner's own noise floor: one replica's consistent windows fit
            # with ~0 residual, and an interval must not collapse to zero width from them.
            return max(residual, MIN_MEASURED_LOG_ERROR)
        # Spec-on steps alone fix the curve's scale, not its split between the target and the cost
        # of speculation: that split is still the prior's, and on an assumed setup a guess.
        assumed = ASSUMED_SETUP_LOG_ERROR if cm.setup_assumed else 0.0
        return math.hypot(prior, residual, assumed)
    if cm.setup_assumed:
        return math.hypot(prior, ASSUMED_SETUP_LOG_ERROR)
    return prior


def sampling_log_error(*, k: float, alpha: float, coverage: float, drafts: float | None) -> float:
    """One sigma of log S from alpha's binomial noise over ``drafts`` (0 without a draft count:
    vLLM V0's values are lifetime, over every draft so far)."""
    if drafts is None or drafts <= 0:
        return 0.0
    a = min(max(alpha, 0.0), 1.0)
    se = math.sqrt(a * (1.0 - a) / drafts)
    return coverage * k * se / (1.0 + coverage * k * a)


def speedup_interval(
    cm: CostModel,
    speedup: float,
    *,
    k: float,
    alpha: float,
    coverage: float,
    drafts: float | None,
    confidence: float,
    batch: float | None = None,
) -> SpeedupInterval:
    """The interval of ``speedup`` (the model's prediction at this K, alpha, coverage and batch)."""
    model = model_log_error(cm, batch)
    sampling = sampling_log_error(k=k, alpha=alpha, coverage=coverage, drafts=drafts)
    z = z_for(confidence)
    half = z * math.hypot(model, sampling)
    centre = math.log(max(speedup, 1e-9))
    return SpeedupInterval(math.exp(centre - half), math.exp(centre + half), model, sampling, z)


def loss_probability(speedup: float, model_log_error: float, sampling_log_error: float) -> float:
    """P(true speedup < 1) under the same log-normal the interval is drawn from: speculation is
    probably losing when this is high, whether or not the interval has cleared 1 yet. With no
    error at all it is 1 below a speedup of 1, 0 above (and 0.5 exactly at 1)."""
    sigma = math.hypot(model_log_error, sampling_log_error)
    centre = math.log(max(speedup, 1e-9))
    if sigma <= 0.0:
        return 0.5 if centre == 0.0 else float(centre < 0.0)
    return normal_cdf(-centre / sigma)


def step_log_spread(itl_p50_seconds: float | None, itl_p99_seconds: float | None) -> float:
    """Spread of one step's time in log units, from the window's ITL quantiles when it has them."""
    if itl_p50_seconds and itl_p99_seconds and itl_p99_seconds > itl_p50_seconds > 0:
        return math.log(itl_p99_seconds / itl_p50_seconds) / _Z_P99
    return DEFAULT_STEP_LOG_SPREAD


def canary_minutes(
    interval: SpeedupInterval, speedup: float, *, step_seconds: float, step_spread: float
) -> float | None:
    """Minutes of spec-off steps at the live batch after which the interval clears 1: the model
    error is replaced by the canary's, whose mean step must be known to within what the distance
    of log S from 0 leaves beside the sampling noise. None when that noise alone keeps the
    interval across 1, or no canary of ``MAX_CANARY_MINUTES`` would clear it: then the speedup is
    too close to 1 for on or off to matter."""
    room = (abs(math.log(max(speedup, 1e-9))) / interval.z) ** 2 - interval.sampling_log_error**2
    if room <= 0:
        return None
    minutes = max(MIN_CANARY_MINUTES, math.ceil(step_spread**2 / room * step_seconds / 60.0))
    return minutes if minutes <= MAX_CANARY_MINUTES else None
