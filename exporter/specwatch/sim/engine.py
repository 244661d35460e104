"""Discrete-time decode simulation of vLLM V1 engines.

Each (model_name, engine) pair is one scheduler with its own batch, clock and counters. Requests
arrive (closed loop at a fixed concurrency, or Poisson at a rate), wait for a batch slot, are
prefilled in one step (first token, TTFT) and then decode: every engine step drafts K tokens per
running request, accepts a prefix drawn from per-position CONDITIONAL acceptance probabilities,
and moves the counters by vLLM's own scheduler rules:

  drafts += 1 per request with draft tokens > 0; draft_tokens += K; accepted += a;
  per_pos[i] += 1 for i < a; generation_tokens += emitted (a + 1, cut at max_tokens);
  one ITL observation per running request per step (= the step time); one iteration_tokens
  observation per step; num_requests_running = the live batch.

Step time = StepTimer.step_time(B·(K+1) + prefill tokens, context) + draft_time + seeded noise.
"""

from __future__ import annotations

import bisect
import collections
import math
import random
from typing import Any

from specwatch.sim.exposition import render
from specwatch.sim.histograms import engine_histograms
from specwatch.sim.scenario import Event, RoutePhase, Scenario, load_scenario, unconditional
from specwatch.sim.steptime import StepTimer

EPOCH_BASE = 1_790_000_000.0  # fixed epoch of sim time 0 for deterministic recordings


class Request:
    __slots__ = ("admit", "arrival", "ctx", "first", "generated", "max_tokens", "prompt", "target")

    def __init__(self, arrival: float, prompt: int, target: int, max_tokens: int) -> None:
        self.arrival = arrival
        self.admit: float | None = None  # set when a batch slot takes it (prefill step start)
        self.first: float | None = None  # set when its first token is out
        self.prompt = prompt
        self.target = target  # output tokens this request will produce
        self.max_tokens = max_tokens
        self.generated = 0
        self.ctx = prompt


class Engine:
    """One vLLM engine core (one DP rank) serving one model_name."""

    def __init__(self, sim: Simulator, route: Route, index: int, now: float):
        self.sim, self.route, self.index = sim, route, index
        self.rng = random.Random(f"{sim.seed}/{route.name}/{index}")
        self.running: list[Request] = []
        self.waiting: collections.deque[Request] = collections.deque()
        self.clock = now
        self.reset(now)

    def reset(self, now: float) -> None:
        """A (re)started engine: every counter at 0, new _created timestamps."""
        sc = self.sim.scenario
        self.created = now
        self.running.clear()
        self.waiting.clear()
        self.clock = now
        self.c: collections.defaultdict[str, float] = collections.defaultdict(float)  # plain counters by short name
        self.success = dict.fromkeys(("stop", "length", "abort", "error", "repetition"), 0)
        self.per_pos = [0] * sc.num_speculative_tokens
        self.num_running = 0
        self.num_waiting = 0
        self.steps = 0
        self.h = engine_histograms(sc.max_model_len)
        # V0 engine bookkeeping: lifetime totals, and the sum-of-sums counters its logger produced.
        self.v0 = {
            "acc": 0.0,
            "draft": 0.0,
            "emit": 0.0,
            "acc_ss": 0.0,
            "draft_ss": 0.0,
            "emit_ss": 0.0,
            "rate": float("nan"),
            "eff": float("nan"),
            "next_log": now + 5.0,
        }

    @property
    def busy(self) -> bool:
        return bool(self.running or self.waiting)

    def load(self) -> int:
        return len(self.running) + len(self.waiting)

    def step(self) -> None:
        """Run one engine step starting at self.clock."""
        sim, sc, rng = self.sim, self.sim.scenario, self.rng
        t0 = self.clock
        rp = sim.params(self.route.name, t0)
        spec = sim.spec_enabled
        k = rp.k if spec else 0
        budget = sc.max_num_batched_tokens
        decoding = self.running
        n_dec = len(decoding)
        used = n_dec * (k + 1)
        # Admit waiting requests (prefill in this step) while slots and token budget allow.
        new: list[Request] = []
        while self.waiting and n_dec + len(new) < sc.max_num_seqs:
            r = self.waiting[0]
            if new and used + r.prompt > budget:
                break
            self.waiting.popleft()
            r.admit = t0
            new.append(r)
            used += r.prompt
        self.num_running = n_dec + len(new)
        self.num_waiting = len(self.waiting)
        ctx = 0
        for r in decoding:
            ctx += r.ctx
        timer = sim.timer
        dt = timer.step_time(used, ctx)
        if k > 0 and n_dec:
            dt += timer.draft_time(n_dec, k)
        if sc.noise > 0:
            dt *= math.exp(rng.gauss(0.0, sc.noise))
            if rng.random() < 0.003:  # rare stall (GC, allocator, host jitter): drives the P99 tail
                dt *= rng.uniform(1.5, 3.0)
        t1 = t0 + dt
        c = self.c
        finished = []
        gen = 0
        if n_dec:
            if k > 0:
                cum = sim.cum_table(rp.acceptance, k)
                hist_a = [0] * (k + 1)
                rnd = rng.random
                bis = bisect.bisect
                v0 = sim.track_v0
                cond = rp.acceptance
                v0_extra = 0
                for r in decoding:
                    a = bis(cum, rnd())
                    hist_a[a] += 1
                    if v0 and a < k - 1:
                        # V0 counted every accepted draft token, prefix or not (not only the accepted prefix).
                        for j in range(a + 1, k):
                            if rnd() < cond[j]:
                                v0_extra += 1
                    e = a + 1
                    left = r.target - r.generated
                    if e >= left:
                        e = left
                        finished.append(r)
                    r.generated += e
                    r.ctx += e
                    gen += e
                acc = 0
                tail = 0
                for i in range(k, 0, -1):  # per_pos[i-1] = #drafts with a >= i
                    tail += hist_a[i]
                    self.per_pos[i - 1] += tail
                    acc += tail
                c["drafts"] += n_dec
                c["draft_tokens"] += n_dec * k
                c["accepted"] += acc
                self.v0["acc"] += acc + v0_extra
                self.v0["draft"] += n_dec * k
                self.v0["emit"] += acc + n_dec
            else:
                for r in decoding:
                    r.generated += 1
                    r.ctx += 1
                    gen += 1
                    if r.generated >= r.target:
                        finished.append(r)
            self.h["itl"].observe(dt, n_dec)
        for r in new:  # prefill step: first token out, TTFT
            r.first = t1
            r.generated = 1
            r.ctx = r.prompt + 1
            gen += 1
            c["prompt_tokens"] += r.prompt
            self.h["ttft"].observe(t1 - r.arrival)
            self.h["kv_computed"].observe(r.prompt)
            if r.generated >= r.target:
                finished.append(r)
        c["generation_tokens"] += gen
        c["cpu_seconds"] += dt * 0.05
        self.h["iter"].observe(used)
        self.steps += 1
        if finished:
            done = set(map(id, finished))
            self.running = [r for r in decoding if id(r) not in done]
            new = [r for r in new if id(r) not in done]
            for r in finished:
                self._finish(r, t1)
        self.running.extend(new)
        self.clock = t1
        if sim.track_v0 and t1 >= self.v0["next_log"]:
            self._v0_log(k if k > 0 else sim.scenario.num_speculative_tokens)
        for _ in finished:
            self.route.on_finish(t1)

    def _finish(self, r: Request, t: float) -> None:
        h = self.h
        self.success["length" if r.generated >= r.max_tokens else "stop"] += 1
        h["prompt"].observe(r.prompt)
        h["generation"].observe(r.generated)
        h["max_gen"].observe(r.max_tokens)
        h["max_tokens"].observe(r.max_tokens)
        h["params_n"].observe(1)
        h["e2e"].observe(t - r.arrival)
        admit, first = r.admit, r.first
        assert admit is not None and first is not None, "a finished request was admitted and prefilled"
        h["queue"].observe(admit - r.arrival)
        h["inference"].observe(t - admit)
        h["prefill"].observe(first - admit)
        h["decode"].observe(t - first)
        h["preempt"].observe(0)
        if r.generated > 1:
            h["tpot_req"].observe((t - first) / (r.generated - 1))
        self.c["http_requests"] += 1
        self.c["http_req_bytes"] += 200 + 4 * r.prompt
        self.c["http_duration"] += t - r.arrival

    def _v0_log(self, k: int) -> None:
        """V0's PrometheusStatLogger every 5 s: counter.inc(lifetime total) -> sum of sums."""
        v = self.v0
        v["acc_ss"] += v["acc"]
        v["draft_ss"] += v["draft"]
        v["emit_ss"] += v["emit"]
        if v["draft"] > 0:
            v["rate"] = v["acc"] / v["draft"]
            seqs = v["draft"] // k
            v["eff"] = v["emit"] / (seqs * (k + 1)) if seqs else float("nan")
        while v["next_log"] <= self.clock:
            v["next_log"] += 5.0


class Route:
    """One served model_name: its engines and its client population."""

    def __init__(self, sim: Simulator, name: str, now: float):
        self.sim, self.name = sim, name
        self.rng = random.Random(f"{sim.seed}/{name}/clients")
        self.engines = [Engine(sim, self, i, now) for i in range(sim.scenario.engines)]
        self.in_flight = 0
        self.next_arrival = math.inf  # Poisson mode
        self.pending_spawn = 0

    def new_request(self, t: float) -> Request:
        sc, rng = self.sim.scenario, self.rng
        sig_p, sig_o = 0.5, 0.6
        prompt = int(
            min(sc.max_model_len // 2, max(1, rng.lognormvariate(math.log(sc.prompt_tokens) - sig_p**2 / 2, sig_p)))
        )
        max_tokens = int(max(2, min(sc.max_model_len - prompt, 4 * sc.output_tokens)))
        out = int(max(2, rng.lognormvariate(math.log(sc.output_tokens) - sig_o**2 / 2, sig_o)))
        return Request(t, prompt, min(out, max_tokens), max_tokens)

    def dispatch(self, t: float) -> None:
        """Send one request to the least-loaded engine (vLLM's DP load balancing, simplified)."""
        eng = min(self.engines, key=lambda e: (e.load(), e.index))
        if not eng.busy:
            eng.clock = max(eng.clock, t)
        eng.waiting.append(self.new_request(t))
        self.in_flight += 1

    def on_finish(self, t: float) -> None:
        self.in_flight -= 1
        self.top_up(t)

    def top_up(self, t: float) -> None:
        """Closed loop: keep `concurrency` requests in flight (a finished client re-sends at once)."""
        rp = self.sim.params(self.name, t)
        if rp.concurrency is None:
            return
        target = round(rp.concurrency)
        while self.in_flight < target:
            self.dispatch(t)

    def schedule_poisson(self, t: float) -> None:
        rp = self.sim.params(self.name, t)
        if rp.rate is None or rp.rate <= 0:
            self.next_arrival = math.inf
        else:
            self.next_arrival = t + self.rng.expovariate(rp.rate)


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
        """vLLM restarted at t: in-flight requests are lost, counters restart at 0."""
        self.restarts += 1
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
            k = rp.k if self.spec_enabled else 0
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


def crossings(scenario: Scenario | str, step: float = 1.0) -> list[dict[str, Any]]:
    """Times (sim seconds) where the TRUE verdict changes, from the scenario's nominal parameters.

    Benchmarks measure detection delay against these; scenario files document them under
    `expected.crossings` and a test checks the two agree."""
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
            v = r["verdict"]
            if name in prev and prev[name] != v:
                out.append({"at": t, "route": name, "from": prev[name], "to": v})
            prev[name] = v
        t += step
    return out
