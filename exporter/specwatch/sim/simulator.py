"""The simulated vLLM server (or SGLang's, `engine: sglang`): every route and data-parallel engine
of a scenario advanced in simulated seconds, rendered as the engine's /metrics (exposition.py),
with the truth the sidecar should recover. The engines' mechanics are in engine.py."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from specwatch.sim.engine import Engine, Route
from specwatch.sim.exposition import render
from specwatch.sim.scenario import Event, RoutePhase, Scenario, load_scenario, unconditional
from specwatch.sim.steptime import StepTimer

EPOCH_BASE = 1_790_000_000.0  # fixed epoch of sim time 0 for deterministic recordings


class Simulator:
    """A simulated vLLM server (all routes, all DP engines) advanced in simulated seconds.

    `advance_to(t)` runs every engine step that starts before t; `render()` gives the /metrics
    text at the current sim time; `truth()` the true parameters the sidecar should recover."""

    RAMP_TICK = 0.5

    def __init__(self, scenario: Scenario | str, seed: int = 0, *, epoch: float | None = None):
        self.scenario = load_scenario(scenario)
        self.seed = seed
        self.epoch = EPOCH_BASE if epoch is None else float(epoch)
        self.timer = StepTimer(self.scenario, self.mean_context())
        self.now = 0.0
        self.spec_enabled = True
        self.schema = self.scenario.schema
        self.restarts = 0
        self.process_start = 0.0
        self.track_v0 = self.scenario.schema == "v0" or any(
            e.type == "schema" and e.schema == "v0" for e in self.scenario.events
        )
        # When each (route, engine) gate fired (TensorRT-LLM's, scenario speculative_config): the truth.
        self.gates_fired: dict[tuple[str, int], float] = {}
        self._cum_cache: dict[tuple[tuple[float, ...], int], list[float]] = {}
        self._events = self.scenario.events_sorted()
        self._next_event = 0
        self._phase_bounds = [p.end for p in self.scenario.phases]
        self.routes = {n: Route(self, n, 0.0) for n in self.scenario.model_names}
        self._next_control = 0.0
        self._control(0.0)

    # -- scenario parameters ---------------------------------------------------------------
    def params(self, route: str, t: float) -> RoutePhase:
        return self.scenario.route_params(route, min(t, self.scenario.duration - 1e-9))

    def cum_table(self, cond: tuple[float, ...], k: int) -> list[float]:
        """CDF over accepted prefix length a in 0..k-1 (bisect(cum, u) = a; u beyond -> a = k)."""
        key = (cond, k)
        cached = self._cum_cache.get(key)
        if cached is not None:
            return cached
        tab: list[float] = []
        p_prefix, acc = 1.0, 0.0
        for i in range(k):
            acc += p_prefix * (1.0 - cond[i])  # P(a = i): first rejection at position i
            p_prefix *= cond[i]
            tab.append(acc)
        if len(self._cum_cache) > 4096:
            self._cum_cache.clear()
        self._cum_cache[key] = tab
        return tab

    def gate_fired(self, route: str, engine: int, t: float) -> None:
        self.gates_fired.setdefault((route, engine), t)

    def gate_fired_at(self, route: str) -> float | None:
        """Sim time at which every engine of the route had its speculation gated off (None: not yet)."""
        times = [self.gates_fired.get((route, e.index)) for e in self.routes[route].engines]
        return None if any(t is None for t in times) else max(t for t in times if t is not None)

    def decode_totals(self, route: str) -> tuple[float, float, float, float]:
        """The route's decode steps so far, summed over its engines: (request-steps, their seconds,
        the seconds the same steps take without speculation, the tokens they gave). The truth of
        what speculation delivers between two times is the difference of two of these
        (``delivered_gain``). Kept for a scenario whose engine picks K per step (adaptive
        verification, SGLang's bands: Scenario.graded_controller); elsewhere the plain seconds are
        the step's own."""
        engines = [e.decode_truth for e in self.routes[route].engines]
        return (
            sum(e.request_steps for e in engines),
            sum(e.seconds for e in engines),
            sum(e.plain_seconds for e in engines),
            sum(e.tokens for e in engines),
        )

    # -- time -------------------------------------------------------------------------------
    def _control(self, t: float) -> None:
        """Arrival-process bookkeeping at phase boundaries and ramp ticks."""
        for r in self.routes.values():
            r.top_up(t)
            if self.params(r.name, t).rate is not None:
                if r.next_arrival == math.inf or r.next_arrival < t:
                    r.schedule_poisson(t)
            else:
                r.next_arrival = math.inf
        nxt = math.inf
        for b in self._phase_bounds:
            if b > t + 1e-9:
                nxt = b
                break
        ph = self.scenario.phase_at(t)
        if ph.ramp:
            nxt = min(nxt, t + self.RAMP_TICK)
        self._next_control = nxt

    def _apply_event(self, ev: Event) -> None:
        # spec on/off and a schema change are a server restart in real life (new process/version).
        if ev.type == "spec_off":
            self.spec_enabled = False
        elif ev.type == "spec_on":
            self.spec_enabled = True
        elif ev.type == "schema" and ev.schema is not None:  # the scenario loader requires it
            self.schema = ev.schema
        self.restart(ev.at)

    def restart(self, t: float) -> None:
        """vLLM restarted at t: in-flight requests are lost, counters restart at 0 (a gate that
        fired is open again)."""
        self.restarts += 1
        self.gates_fired.clear()
        self.process_start = t
        for r in self.routes.values():
            r.in_flight = 0
            for e in r.engines:
                e.reset(t)
        for r in self.routes.values():
            r.top_up(t)

    def advance_to(self, t_end: float) -> None:
        if t_end <= self.now:
            return
        engines = [e for r in self.routes.values() for e in r.engines]
        while True:
            t_eng: float = math.inf
            eng: Engine | None = None
            for e in engines:
                if e.busy and e.clock < t_eng:
                    t_eng, eng = e.clock, e
            t_arr: float = math.inf
            arr: Route | None = None
            for r in self.routes.values():
                if r.next_arrival < t_arr:
                    t_arr, arr = r.next_arrival, r
            t_ev = self._events[self._next_event].at if self._next_event < len(self._events) else math.inf
            t = min(t_eng, t_arr, t_ev, self._next_control)
            if t >= t_end:
                break
            if t == t_ev:
                self._apply_event(self._events[self._next_event])
                self._next_event += 1
            elif t == self._next_control:
                self._control(t)
            elif arr is not None and t == t_arr:
                arr.dispatch(t)
                arr.schedule_poisson(t)
            else:
                assert eng is not None, "t is finite, so some engine step is next"
                eng.step()
        self.now = t_end
        # Idle engines' clocks follow sim time so a later arrival starts a step "now".
        for e in engines:
            if not e.busy and e.clock < t_end:
                e.clock = t_end

    # -- outputs ----------------------------------------------------------------------------
    def render(self, schema: str | None = None) -> str:
        return render(self, schema or self.schema)

    def truth(self) -> dict[str, Any]:
        """True parameters at the current sim time, per route (what the sidecar should recover)."""
        sc, t = self.scenario, self.now
        ph = sc.phase_at(t)
        routes = {}
        for name, r in self.routes.items():
            rp = self.params(name, t)
            k = rp.k if self.spec_enabled and self.gate_fired_at(name) is None else 0
            if k and sc.schedule is not None:
                k = min(k, sc.schedule.k_at(self.nominal_batch(name, t)))
            cond = list(rp.acceptance[:k])
            pp = unconditional(cond)
            alpha = (sum(pp) / k) if k else None
            live = [e.num_running for e in r.engines]
            nominal = self.nominal_batch(name, t)
            be = self.timer.breakeven(nominal, k) if k else None
            sp = self.timer.speedup(nominal, pp) if k else None
            best = self.timer.best_k(nominal, pp) if k else 0
            routes[name] = {
                "alpha": alpha,
                "conditional_acceptance": cond,
                "per_position": pp,
                "mean_acceptance_length": 1.0 + sum(pp) if k else None,
                "k": k,
                "batch": sum(live) / len(live),
                "batch_per_engine": live,
                "nominal_batch": nominal,
                "breakeven_acceptance_rate": be,
                "expected_speedup": sp,
                "best_k": best,
                # decide.py's rule without the band: disable when no draft length pays, shorten when
                # a shorter one pays better (even if K itself is below break-even), else keep.
                "verdict": (
                    "spec_off"
                    if not k
                    else "disable"
                    if best == 0
                    else "shorten"
                    if best < k
                    else "disable"
                    if sp is not None and sp < 1
                    else "keep"
                ),
                "concurrency": rp.concurrency,
                "rate": rp.rate,
                # What the server was started with and what it does (scenario speculative_config).
                "gate_fired_at": self.gate_fired_at(name),
                "schedule_applied": sc.schedule is not None,
            }
        return {
            "t": t,
            "phase": ph.name,
            "schema": self.schema,
            "spec_enabled": self.spec_enabled,
            "restarts": self.restarts,
            "step_time_model": self.timer.which,
            "engines": sc.engines,
            "routes": routes,
        }

    def mean_context(self) -> float:
        """Mean context per running request: prompt plus about half the output."""
        return self.scenario.prompt_tokens + self.scenario.output_tokens / 2.0

    def nominal_batch(self, route: str, t: float) -> float:
        """Configured batch per engine: concurrency (or rate x mean request time) / engines,
        capped at max_num_seqs."""
        sc = self.scenario
        rp = self.params(route, t)
        if rp.concurrency is not None:
            b = rp.concurrency / sc.engines
        else:
            # Little's law with the step time at the configured batch: fixed point in a few rounds.
            b = 1.0
            for _ in range(30):
                k = rp.k if self.spec_enabled else 0
                tau = 1.0 + sum(unconditional(list(rp.acceptance[:k])))
                st = self.timer.spec_step(b, k)
                steps = sc.output_tokens / tau
                b = max(1e-9, (rp.rate or 0.0) / sc.engines * steps * st)
        return min(b, float(sc.max_num_seqs))


def crossings(
    scenario: Scenario | str, step: float = 1.0, verdict_of: Callable[[dict[str, Any]], str] | None = None
) -> list[dict[str, Any]]:
    """Times (sim seconds) where the TRUE verdict changes, from the scenario's nominal parameters.

    Benchmarks measure detection delay against these; scenario files document them under
    `expected.crossings` and a test checks the two agree. ``verdict_of`` maps a route's truth to
    another verdict (what a sidecar that knows its own error can tell); default its ``verdict``."""
    sim = Simulator(scenario)
    sc = sim.scenario
    out: list[dict[str, Any]] = []
    prev: dict[str, str] = {}
    t = 0.0
    while t < sc.duration:
        sim.now = t
        for ev in sc.events_sorted():
            if ev.type in ("spec_off", "spec_on") and ev.at <= t:
                sim.spec_enabled = ev.type == "spec_on"
        tr = sim.truth()
        for name, r in tr["routes"].items():
            v = r["verdict"] if verdict_of is None else verdict_of(r)
            if name in prev and prev[name] != v:
                out.append({"at": t, "route": name, "from": prev[name], "to": v})
            prev[name] = v
        t += step
    return out


def delivered_gain(before: tuple[float, float, float, float], after: tuple[float, float, float, float]) -> float:
    """Decode speed per request over the same steps without speculation, between two
    ``Simulator.decode_totals``: tokens per request-second over 1 / plain seconds per request-step."""
    steps, seconds, plain, tokens = (a - b for a, b in zip(after, before, strict=True))
    if steps <= 0 or seconds <= 0 or plain <= 0:
        return math.nan
    return (tokens / seconds) / (steps / plain)
