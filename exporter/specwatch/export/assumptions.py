"""What every verdict rests on: the setup, the engine prior and, per route, the step-time source.

One pure function (``assumptions``) of the config and facts the pipeline or the fleet evaluator
already hold (``view_assumptions``: those a View carries); /api/v1/status, `specwatch check-config`, `specwatch replay`'s closing summary and
the page at / render it. A setting reads ``assumed`` when the config did not state it (a Config
built in code states nothing: there a value equal to its default reads ``assumed``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from specwatch.config import Config
from specwatch.config.cost_model import (
    config_is_default,
    cost_model_from_config,
    detected_prior,
    learning_enabled,
    prior_source,
    route_prior,
)
from specwatch.costmodel import CostModel
from specwatch.costmodel.engine_priors import ENGINE_PRIORS, GENERIC, EnginePrior, prior_for
from specwatch.costmodel.learned import LearnedStepCurve
from specwatch.costmodel.uncertainty import ASSUMED_SETUP_LOG_ERROR, model_log_error
from specwatch.verdict.evaluation import RouteEvaluation
from specwatch.view import View
from specwatch.view.fleet import replica_name

CONFIGURED = "configured"  # a value of the user's own (bandwidth and flops, a config.json, a count)
PRESET = "preset"  # a named preset
ASSUMED = "assumed"  # the default: nothing in the config says otherwise

_DEFAULTS = Config()

#: What each step-time source is, in words.
STEP_TIME_MEANING = {
    "default": "the roofline of the assumed hardware and model",
    "preset": "the roofline of the configured hardware and model",
    "profile": "the measured profile",
    "learned": "a curve fitted to the server's own step times",
}


@dataclass(frozen=True)
class Setting:
    value: str | int
    origin: str  # CONFIGURED | PRESET | ASSUMED

    def as_dict(self) -> dict[str, object]:
        return {"value": self.value, "origin": self.origin}


@dataclass(frozen=True)
class RouteFacts:
    """What the pipeline (or the fleet evaluator) knows of one route's basis."""

    route: str
    target: str
    engine: str  # as detected from the payload (engines.registry name)
    schema: str | None
    step_time: str  # default | preset | profile | learned
    baseline: str  # history | canary | none
    model_log_error: float | None
    sampling_log_errors: Mapping[str, float] = field(default_factory=dict)  # by window


@dataclass(frozen=True)
class RouteAssumptions:
    facts: RouteFacts
    detected_prior: EnginePrior
    prior: EnginePrior  # the one its verdicts use: configured, else the detected engine's
    mismatch: bool  # engine configured, and the payload is another engine's
    keeps_prior_split: bool  # the interval still carries the prior's error (no spec-off steps learned)
    engine_configured: bool = False


@dataclass(frozen=True)
class Assumptions:
    hardware: Setting
    model: Setting
    dtype: Setting
    tensor_parallel: Setting
    setup_assumed: bool  # neither hardware nor model set and no profile: the interval is widened
    prior: EnginePrior
    engine_configured: bool
    step_time: str  # default | preset | profile: before (or without) a learned curve
    learning: bool
    model_log_error: float  # one sigma of the prior model's log speedup, before any learned curve
    routes: tuple[RouteAssumptions, ...] = ()

    def as_dict(self) -> dict[str, object]:
        return {
            "setup": {
                "hardware": self.hardware.as_dict(),
                "model": self.model.as_dict(),
                "dtype": self.dtype.as_dict(),
                "tensor_parallel": self.tensor_parallel.as_dict(),
                "assumed": self.setup_assumed,
            },
            "engine_prior": {**_prior_dict(self.prior), "configured": self.engine_configured},
            "step_time": {"source": self.step_time, "learning": self.learning},
            "model_log_error": self.model_log_error,
            "routes": [_route_dict(r) for r in self.routes],
        }

    def settings(self) -> tuple[tuple[str, Setting], ...]:
        """The setup's settings by name, in the order they are told."""
        return (
            ("hardware", self.hardware),
            ("model", self.model),
            ("dtype", self.dtype),
            ("tensor parallel", self.tensor_parallel),
        )

    def summary(self) -> str:
        """The setup, the prior and the step-time source in one line."""
        setup = ", ".join(f"{name} {s.value} ({_origin(s)})" for name, s in self.settings())
        step = f"step time {self.step_time}{' until learned' if self.learning else ''}"
        if not self.engine_configured and not self.setup_assumed:
            # each route's own line names its prior and sigma: no config-wide figure to contradict them
            return f"{setup}; engine prior per route: the detected engine's (engine not configured); {step}"
        engine = "configured" if self.engine_configured else "engine not configured: generic on an assumed setup"
        return (
            f"{setup}; engine prior {self.prior.engine} ({engine}, log error {self.prior.log_error:.3f}); "
            f"{step}; model sigma {self.model_log_error:.3f}"
        )

    def config_lines(self) -> list[str]:
        """What a config alone says, one fact a line (`specwatch check-config`)."""
        p = self.prior
        lines = [f"{name}: {s.value} ({_origin(s)})" for name, s in self.settings()]
        lines.append(
            f"engine prior: {p.engine} ({'configured' if self.engine_configured else 'engine: not configured'}): "
            f"verify {p.verify_overhead_seconds * 1e3:.3g} ms + {p.verify_seconds_per_request * 1e3:.3g} ms per "
            f"request per step, drafting pass {p.draft_fixed_seconds * 1e3:.3g} ms; log error {p.log_error:.3f}"
        )
        step = f"step time: {self.step_time} ({STEP_TIME_MEANING[self.step_time]})"
        if self.learning:
            step += " until a curve is learned from the server's own metrics"
        lines.append(step)
        interval = f"interval: model sigma {self.model_log_error:.3f} (the prior's {p.log_error:.3f}"
        if self.setup_assumed:
            # Widened while hardware and model are the defaults, stated or not: name what was not stated.
            assumed = [name for name, s in (("hardware", self.hardware), ("model", self.model)) if s.origin == ASSUMED]
            verb = " are ASSUMED" if len(assumed) > 1 else " is ASSUMED"
            what = " and ".join(assumed) + verb if assumed else "the default hardware and model, stated"
            interval += f" with the assumed setup's {ASSUMED_SETUP_LOG_ERROR:.1f}: {what}"
        lines.append(interval + ")")
        if not self.engine_configured and self.setup_assumed:
            lines.append(
                "engine prior per route: generic while hardware and model are assumed; once either is "
                "configured, each route uses the prior of the engine its payload shows (set engine: to pin one)"
            )
        elif not self.engine_configured:
            own = ", ".join(f"{q.engine} (log error {q.log_error:.3f})" for q in ENGINE_PRIORS.values() if q.own_fit)
            lines.append(
                "engine prior per route: engine: not configured, so each route uses the prior of the engine its "
                f"payload shows (own fits: {own}; pooled for the others; generic for an unknown engine); "
                "set engine: to pin one"
            )
        return lines

    def route_lines(self) -> list[str]:
        """One line per route."""
        return [_route_line(r) for r in self.routes]


def _origin(s: Setting) -> str:
    return s.origin.upper() if s.origin == ASSUMED else s.origin


def _prior_dict(prior: EnginePrior) -> dict[str, object]:
    return {
        "name": prior.engine,
        "versions": prior.versions,
        "verify_overhead_seconds": prior.verify_overhead_seconds,
        "verify_seconds_per_request": prior.verify_seconds_per_request,
        "draft_fixed_seconds": prior.draft_fixed_seconds,
        "log_error": prior.log_error,
        "own_fit": prior.own_fit,
        "source": prior.source,
    }


def _route_dict(r: RouteAssumptions) -> dict[str, object]:
    f = r.facts
    return {
        "route": f.route,
        "target": f.target,
        "detected_engine": f.engine,
        "detected_engine_prior": r.detected_prior.engine,
        "engine_prior": r.prior.engine,
        "engine_prior_chosen": "detected"
        if not _configured(r)
        else ("configured" if r.engine_configured else "generic_setup_assumed"),
        "engine_mismatch": r.mismatch,
        "step_time": f.step_time,
        "baseline": f.baseline,
        "interval_keeps_prior_error": r.keeps_prior_split,
        "model_log_error": f.model_log_error,
        "sampling_log_error": dict(f.sampling_log_errors),
    }


def _configured(r: RouteAssumptions) -> bool:
    return r.engine_configured or r.prior is not r.detected_prior


def _route_line(r: RouteAssumptions) -> str:
    f = r.facts
    step = f.step_time
    if step == "learned":
        step += f" (baseline {f.baseline}" + (", the split is the prior's)" if r.keeps_prior_split else ")")
    how = "detected" if not _configured(r) else ("configured" if r.engine_configured else "generic: setup assumed")
    parts = [f"route {f.route}: engine {f.engine} detected", f"prior {r.prior.engine} ({how})", f"step time {step}"]
    if f.model_log_error is not None:
        sigma = f"model sigma {f.model_log_error:.3f}"
        if f.sampling_log_errors:
            sigma += ", sampling " + ", ".join(f"{w} {s:.3f}" for w, s in f.sampling_log_errors.items())
        parts.append(sigma)
    if r.mismatch:
        parts.append(f"the configured prior {r.prior.engine} is not the detected engine's ({r.detected_prior.engine})")
    return "; ".join(parts)


def _hardware(config: Config, cm: CostModel) -> Setting:
    hw = config.hardware
    if hw.bandwidth_bytes_per_second is not None or hw.flops is not None:
        return Setting(cm.hardware.name, CONFIGURED)
    if "hardware.preset" in config.stated or hw.preset != _DEFAULTS.hardware.preset:
        return Setting(cm.hardware.name, PRESET)
    return Setting(cm.hardware.name, ASSUMED)


def _model(config: Config, cm: CostModel) -> Setting:
    m = config.model
    if m.hf_config is not None or m.params is not None:
        return Setting(cm.model.name, CONFIGURED)
    if m.preset is not None:
        return Setting(cm.model.name, PRESET)
    return Setting(cm.model.name, ASSUMED)


def _plain(config: Config, key: str, value: str | int, default: str | int) -> Setting:
    return Setting(value, CONFIGURED if key in config.stated or value != default else ASSUMED)


def _route(config: Config, prior: EnginePrior, facts: RouteFacts) -> RouteAssumptions:
    detected = detected_prior(facts.engine, facts.schema)
    configured = config.engine.name is not None
    return RouteAssumptions(
        facts=facts,
        detected_prior=detected,
        prior=route_prior(config, facts.engine, facts.schema),
        mismatch=configured and detected.engine != prior.engine and prior is not GENERIC,
        keeps_prior_split=facts.step_time == "learned" and facts.baseline == "none",
        engine_configured=configured,
    )


def assumptions(config: Config, routes: Sequence[RouteFacts] = (), cost_model: CostModel | None = None) -> Assumptions:
    """What the verdicts rest on with ``config`` (``cost_model``: the one built from it, when at
    hand) and, per route, what the pipeline reports of it."""
    cm = cost_model_from_config(config) if cost_model is None else cost_model
    prior = prior_for(config.engine.name, config.engine.version)
    return Assumptions(
        hardware=_hardware(config, cm),
        model=_model(config, cm),
        dtype=_plain(config, "model.dtype", cm.dtype, _DEFAULTS.model.dtype),
        tensor_parallel=_plain(config, "tensor_parallel", cm.tensor_parallel, _DEFAULTS.tensor_parallel),
        setup_assumed=config.profile is None and config_is_default(config),
        prior=prior,
        engine_configured=config.engine.name is not None,
        step_time=prior_source(config),
        learning=learning_enabled(config),
        model_log_error=model_log_error(cm),
        routes=tuple(_route(config, prior, f) for f in routes),
    )


def sampling_parts(evaluations: Sequence[RouteEvaluation]) -> dict[str, float]:
    out = {}
    for e in evaluations:
        a = e.assessed
        if a is not None and a.sampling_log_error is not None:
            out[e.stats.window] = a.sampling_log_error
    return out


def model_part(evaluations: Sequence[RouteEvaluation]) -> float | None:
    return next(
        (a.model_log_error for e in evaluations if (a := e.assessed) is not None and a.model_log_error is not None),
        None,
    )


def view_assumptions(view: View) -> Assumptions:
    """What one View's verdicts rest on, on the cost model it carries. Per route its step-time
    source: the route's own cost model (learned or configured); in fleet mode one entry per replica
    and route (each replica has its own sampling noise), the source and baseline its route's fleet
    learner's (``cost_models``)."""
    default_source = prior_source(view.config)
    facts = []
    for route in view.targets.routes:
        cm = route.cost_model
        curve = cm.profile if cm is not None else None
        learned = isinstance(curve, LearnedStepCurve)
        facts.append(
            RouteFacts(
                route=route.route,
                target=route.target,
                engine=route.engine,
                schema=route.schema,
                step_time="learned" if learned else default_source,
                baseline="history" if isinstance(curve, LearnedStepCurve) and curve.spec_scale is not None else "none",
                model_log_error=model_log_error(cm) if cm is not None else model_part(route.evaluations),
                sampling_log_errors=sampling_parts(route.evaluations),
            )
        )
    fleet = view.fleet
    bases = {c.route: c for c in fleet.cost_models} if fleet is not None else {}
    for r in fleet.routes if fleet is not None and fleet.up else ():
        if r.stale or not r.evaluations:
            continue
        basis = bases.get(r.route)
        facts.append(
            RouteFacts(
                route=r.route,
                target=replica_name(r.replica),
                engine=r.engine,
                schema=r.evaluations[0].stats.schema,
                step_time=basis.source if basis is not None else default_source,
                baseline=basis.baseline if basis is not None else "none",
                model_log_error=model_part(r.evaluations),
                sampling_log_errors=sampling_parts(r.evaluations),
            )
        )
    return assumptions(view.config, facts, view.cost_model)
