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

What the server is started with (scenario `speculative_config`) acts as the engine would: vLLM's
batch schedule caps K at the step's decode batch, and is dropped with more than one data-parallel
engine; vLLM's adaptive verification picks each step's verify budget K' in 1..K, the one with the
most tokens per second by its step-cost profile (StepTimer.profile_step) and its online estimate of
each position's conditional acceptance (a decaying count over the engine's last steps); TensorRT-LLM's gate switches an engine's speculation off for good (until a restart) once
its acceptance over the last `acceptance_rate_window_size` drafting steps is below
`acceptance_rate_threshold`: its spec counters freeze while generation goes on.

A scenario with `engine: sglang` runs an SGLang server instead (the same decode mechanics): its
tokenizer counts prompt, generated tokens and verify steps when a request finishes, and its
scheduler sets its gauges every SGLANG_DECODE_LOG_INTERVAL decode batches from the batches since
its previous log (SGLangLog). Started with --speculative-adaptive, each step runs the steps (K) of
its batch's band (scenario.SGLANG_BANDS): every band keeps its own steps and an EMA of the
acceptance length of its batches, and moves to the next candidate up or down past its hysteresis.
"""

from __future__ import annotations

import bisect
import collections
import math
import random
from dataclasses import dataclass
from typing import Protocol

from specwatch.sim.histograms import engine_histograms
from specwatch.sim.scenario import RoutePhase, Scenario
from specwatch.sim.steptime import StepTimer

#: Adaptive verification's memory: each step's counts weigh this much less at the next step.
ADAPTIVE_DECAY = 0.98
#: Drafts' worth of weight on the 0.5 prior of a position's conditional acceptance.
ADAPTIVE_PRIOR_WEIGHT = 4.0
#: SGLang's scheduler logs its decode stats (and sets its gauges) every this many decode batches.
SGLANG_DECODE_LOG_INTERVAL = 40
#: Weight of one batch's acceptance length in a band's EMA (SGLang's adaptive controller); a
#: band's first batches at new steps are averaged plainly, and move nothing before this many.
BAND_EMA_WEIGHT = 0.1
BAND_WARMUP_BATCHES = 10


@dataclass
class EngineCounters:
    """One engine's plain counters since its (re)start."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    cpu_seconds: float = 0.0
    http_requests: float = 0.0
    http_request_bytes: float = 0.0
    http_request_seconds: float = 0.0


@dataclass
class V0Logger:
    """vLLM V0's spec-decode bookkeeping: lifetime totals, the sums of those totals its
    PrometheusStatLogger exported (counter.inc(lifetime total) every 5 s), and the lifetime
    acceptance rate and efficiency as last logged."""

    next_log_at: float
    accepted_tokens: float = 0.0  # every accepted draft token, prefix or not
    draft_tokens: float = 0.0
    emitted_tokens: float = 0.0
    accepted_tokens_logged: float = 0.0
    draft_tokens_logged: float = 0.0
    emitted_tokens_logged: float = 0.0
    acceptance_rate: float = math.nan
    efficiency: float = math.nan


@dataclass
class SGLangLog:
    """SGLang's own bookkeeping: the scheduler's sums since its last decode log, the gauges that
    log set (0 until the first), and the tokenizer's counters (moved when a request finishes)."""

    since: float
    batches: int = 0
    verify: int = 0  # request-steps that verified a draft
    accepted: int = 0
    drafted: int = 0
    tokens: int = 0  # every token generated, prefill's first ones included
    accept_rate: float = 0.0
    accept_length: float = 0.0
    num_steps: float = 0.0
    gen_throughput: float = 0.0
    running: float = 0.0
    queued: float = 0.0
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    verify_calls: float = 0.0
    requests: float = 0.0


@dataclass
class DecodeTruth:
    """The truth of what speculation delivers on an engine's decode steps: request-steps, their
    seconds, the seconds the same steps (batch, prefill, context, noise) take without speculation,
    and the tokens they gave."""

    request_steps: float = 0.0
    seconds: float = 0.0
    plain_seconds: float = 0.0
    tokens: float = 0.0


class SimulatorCore(Protocol):
    """What an engine and a route read of the simulator that owns them (simulator.Simulator)."""

    scenario: Scenario
    seed: int
    spec_enabled: bool
    track_v0: bool
    timer: StepTimer

    def params(self, route: str, t: float) -> RoutePhase: ...

    def gate_fired(self, route: str, engine: int, t: float) -> None: ...

    def cum_table(self, cond: tuple[float, ...], k: int) -> list[float]: ...


class Request:
    __slots__ = ("admit", "arrival", "ctx", "first", "generated", "max_tokens", "prompt", "target", "verify")

    def __init__(self, arrival: float, prompt: int, target: int, max_tokens: int) -> None:
        self.arrival = arrival
        self.admit: float | None = None  # set when a batch slot takes it (prefill step start)
        self.first: float | None = None  # set when its first token is out
        self.prompt = prompt
        self.target = target  # output tokens this request will produce
        self.max_tokens = max_tokens
        self.generated = 0
        self.ctx = prompt
        self.verify = 0  # decode steps that verified a draft of this request (SGLang's spec_verify_ct)


class Engine:
    """One vLLM engine core (one DP rank) serving one model_name."""

    def __init__(self, sim: SimulatorCore, route: Route, index: int, now: float):
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
        self.counters = EngineCounters()
        self.success = dict.fromkeys(("stop", "length", "abort", "error", "repetition"), 0)
        self.per_pos = [0] * sc.num_speculative_tokens
        self.num_running = 0
        self.num_waiting = 0
        self.steps = 0
        # TensorRT-LLM's gate: (accepted, drafted) of the last drafting steps, and whether it fired.
        self.gate_window: collections.deque[tuple[int, int]] = collections.deque()
        self.gate_sums = [0, 0]
        self.gated = False
        self.decode_truth = DecodeTruth()
        # Adaptive verification's online acceptance estimate: per position, the (decayed) number of
        # drafts that reached it and of those accepted there.
        self.adaptive_reached = [0.0] * sc.num_speculative_tokens
        self.adaptive_accepted = [0.0] * sc.num_speculative_tokens
        self.histograms = engine_histograms(sc.max_model_len)
        self.v0 = V0Logger(next_log_at=now + 5.0)
        self.sglang = SGLangLog(since=now)
        # SGLang's adaptive bands: each band's candidate index (from the largest candidate the
        # started --speculative-num-steps allows) and its EMA of the acceptance length.
        self.band_step = [
            max(i for i, c in enumerate(b.candidates) if c <= sc.num_speculative_tokens) for b in sc.bands
        ]
        self.band_ema = [0.0] * len(sc.bands)
        self.band_batches = [0] * len(sc.bands)  # batches since the band's steps last moved

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
        k = rp.k if spec and not self.gated else 0
        budget = sc.max_num_batched_tokens
        decoding = self.running
        n_dec = len(decoding)
        schedule = sc.schedule
        if k and schedule is not None:
            k = min(k, schedule.k_at(max(n_dec, 1)))
        ctx = 0
        for r in decoding:
            ctx += r.ctx
        if k and n_dec and sc.adaptive:
            k = self._adaptive_budget(n_dec, k, ctx)
        band = -1
        if k and sc.bands:
            band = self._band_of(n_dec)
            k = sc.bands[band].candidates[self.band_step[band]]
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
        timer = sim.timer
        dt = timer.step_time(used, ctx)
        # The spec-off truth costs a second step-time call: only where a controller is graded by it.
        plain = dt if k == 0 or not sc.graded_controller else timer.step_time(used - n_dec * k, ctx)
        if k > 0 and n_dec:
            dt += timer.draft_time(n_dec, k)
        if sc.noise > 0:
            noise = math.exp(rng.gauss(0.0, sc.noise))
            dt *= noise
            plain *= noise
            if rng.random() < 0.003:  # rare stall (GC, allocator, host jitter): drives the P99 tail
                stall = rng.uniform(1.5, 3.0)
                dt *= stall
                plain *= stall
        t1 = t0 + dt
        c = self.counters
        finished = []
        gen = 0
        acc = 0
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
                    r.verify += 1
                    left = r.target - r.generated
                    if e >= left:
                        e = left
                        finished.append(r)
                    r.generated += e
                    r.ctx += e
                    gen += e
                tail = 0
                for i in range(k, 0, -1):  # per_pos[i-1] = #drafts with a >= i
                    tail += hist_a[i]
                    self.per_pos[i - 1] += tail
                    acc += tail
                if sc.adaptive:
                    self._adaptive_learn(hist_a, k)
                if band >= 0:
                    self._band_learn(band, acc, n_dec)
                c.drafts += n_dec
                c.draft_tokens += n_dec * k
                c.accepted_tokens += acc
                self._gate(acc, n_dec * k, t1)
                self.v0.accepted_tokens += acc + v0_extra
                self.v0.draft_tokens += n_dec * k
                self.v0.emitted_tokens += acc + n_dec
            else:
                for r in decoding:
                    r.generated += 1
                    r.ctx += 1
                    gen += 1
                    if r.generated >= r.target:
                        finished.append(r)
            self.histograms.inter_token_latency.observe(dt, n_dec)
            truth = self.decode_truth
            truth.request_steps += n_dec
            truth.seconds += n_dec * dt
            truth.plain_seconds += n_dec * plain
            truth.tokens += gen
        for r in new:  # prefill step: first token out, TTFT
            r.first = t1
            r.generated = 1
            r.ctx = r.prompt + 1
            gen += 1
            c.prompt_tokens += r.prompt
            self.histograms.time_to_first_token.observe(t1 - r.arrival)
            self.histograms.request_prefill_kv_computed_tokens.observe(r.prompt)
            if r.generated >= r.target:
                finished.append(r)
        c.generation_tokens += gen
        if sc.engine == "sglang":
            self._sglang_log(n_dec, k, acc, gen, t1)
        c.cpu_seconds += dt * 0.05
        self.histograms.iteration_tokens.observe(used)
        self.steps += 1
        if finished:
            done = set(map(id, finished))
            self.running = [r for r in decoding if id(r) not in done]
            new = [r for r in new if id(r) not in done]
            for r in finished:
                self._finish(r, t1)
        self.running.extend(new)
        self.clock = t1
        if sim.track_v0 and t1 >= self.v0.next_log_at:
            self._v0_log(k if k > 0 else sim.scenario.num_speculative_tokens)
        for _ in finished:
            self.route.on_finish(t1)

    def _band_of(self, n_dec: int) -> int:
        """The SGLang adaptive band of a decode batch of n_dec requests."""
        bands = self.sim.scenario.bands
        return max(i for i, b in enumerate(bands) if b.low <= max(n_dec, 1))

    def _band_learn(self, band: int, accepted: int, n_dec: int) -> None:
        """One decode batch into its band's EMA of the acceptance length; past the hysteresis (after
        its warm-up) the band moves to the next candidate steps, and its EMA starts anew there."""
        spec = self.sim.scenario.bands[band]
        length = 1.0 + accepted / n_dec
        seen = self.band_batches[band] = self.band_batches[band] + 1
        ema = self.band_ema[band] = self.band_ema[band] + max(1.0 / seen, BAND_EMA_WEIGHT) * (
            length - self.band_ema[band]
        )
        if seen < BAND_WARMUP_BATCHES:
            return
        index = self.band_step[band]
        if index + 1 < len(spec.candidates) and ema > spec.candidates[index] + 0.5 + spec.up:
            index += 1
        elif index > 0 and ema < spec.candidates[index - 1] + 0.5 + spec.down:
            index -= 1
        else:
            return
        self.band_step[band], self.band_ema[band], self.band_batches[band] = index, 0.0, 0

    def _sglang_log(self, n_dec: int, k: int, accepted: int, tokens: int, t: float) -> None:
        """SGLang's scheduler: this step into the sums since its last log; every
        SGLANG_DECODE_LOG_INTERVAL decode batches it logs and sets its gauges from them."""
        log = self.sglang
        log.tokens += tokens
        if not n_dec:
            return
        log.batches += 1
        if k > 0:
            log.verify += n_dec
            log.accepted += accepted
            log.drafted += n_dec * k
        if log.batches < SGLANG_DECODE_LOG_INTERVAL:
            return
        if log.verify:
            log.accept_rate = log.accepted / log.drafted
            log.accept_length = (log.accepted + log.verify) / log.verify
        log.num_steps = float(k)
        log.gen_throughput = log.tokens / max(t - log.since, 1e-9)
        log.running = float(self.num_running)
        log.queued = float(self.num_waiting)
        log.since, log.batches, log.verify, log.accepted, log.drafted, log.tokens = t, 0, 0, 0, 0, 0

    def _adaptive_budget(self, n_dec: int, k_max: int, ctx: float) -> int:
        """Adaptive verification's K' for this step: 1..k_max, the most expected tokens per second
        of the step by the profile, with the estimated conditional acceptance (a prior of 0.5 until
        a position has been reached)."""
        timer = self.sim.timer
        best, best_rate = 1, 0.0
        tokens, prefix = 1.0, 1.0
        for kk in range(1, k_max + 1):
            reached = self.adaptive_reached[kk - 1]
            prefix *= (self.adaptive_accepted[kk - 1] + ADAPTIVE_PRIOR_WEIGHT * 0.5) / (reached + ADAPTIVE_PRIOR_WEIGHT)
            tokens += prefix
            rate = tokens / timer.profile_step(n_dec, kk, ctx)
            if rate > best_rate:
                best, best_rate = kk, rate
        return best

    def _adaptive_learn(self, hist_a: list[int], k: int) -> None:
        """This step's drafts into the acceptance estimate: position i was reached by the drafts
        with a >= i, and accepted by those with a > i."""
        reached, accepted = self.adaptive_reached, self.adaptive_accepted
        for i in range(len(reached)):
            reached[i] *= ADAPTIVE_DECAY
            accepted[i] *= ADAPTIVE_DECAY
        at_least = sum(hist_a)
        for i in range(k):
            reached[i] += at_least
            at_least -= hist_a[i]
            accepted[i] += at_least

    def _gate(self, accepted: int, drafted: int, t: float) -> None:
        """TensorRT-LLM's one-way gate over this engine's last drafting steps."""
        gate = self.sim.scenario.gate
        if gate is None:
            return
        threshold, window = gate
        self.gate_window.append((accepted, drafted))
        self.gate_sums[0] += accepted
        self.gate_sums[1] += drafted
        if len(self.gate_window) > window:
            old_accepted, old_drafted = self.gate_window.popleft()
            self.gate_sums[0] -= old_accepted
            self.gate_sums[1] -= old_drafted
        if len(self.gate_window) == window and self.gate_sums[0] < threshold * self.gate_sums[1]:
            self.gated = True
            self.sim.gate_fired(self.route.name, self.index, t)

    def _finish(self, r: Request, t: float) -> None:
        h = self.histograms
        self.success["length" if r.generated >= r.max_tokens else "stop"] += 1
        h.request_prompt_tokens.observe(r.prompt)
        h.request_generation_tokens.observe(r.generated)
        h.request_max_generation_tokens.observe(r.max_tokens)
        h.request_max_tokens.observe(r.max_tokens)
        h.request_n.observe(1)
        h.e2e_request_latency.observe(t - r.arrival)
        admit, first = r.admit, r.first
        assert admit is not None and first is not None, "a finished request was admitted and prefilled"
        h.request_queue_time.observe(admit - r.arrival)
        h.request_inference_time.observe(t - admit)
        h.request_prefill_time.observe(first - admit)
        h.request_decode_time.observe(t - first)
        h.request_preemptions.observe(0)
        if r.generated > 1:
            h.request_time_per_output_token.observe((t - first) / (r.generated - 1))
        log = self.sglang
        log.prompt_tokens += r.prompt
        log.generation_tokens += r.generated
        log.verify_calls += r.verify
        log.requests += 1
        self.counters.http_requests += 1
        self.counters.http_request_bytes += 200 + 4 * r.prompt
        self.counters.http_request_seconds += t - r.arrival

    def _v0_log(self, k: int) -> None:
        """V0's PrometheusStatLogger every 5 s: counter.inc(lifetime total) -> sum of sums."""
        v = self.v0
        v.accepted_tokens_logged += v.accepted_tokens
        v.draft_tokens_logged += v.draft_tokens
        v.emitted_tokens_logged += v.emitted_tokens
        if v.draft_tokens > 0:
            v.acceptance_rate = v.accepted_tokens / v.draft_tokens
            seqs = v.draft_tokens // k
            v.efficiency = v.emitted_tokens / (seqs * (k + 1)) if seqs else float("nan")
        while v.next_log_at <= self.clock:
            v.next_log_at += 5.0


class Route:
    """One served model_name: its engines and its client population."""

    def __init__(self, sim: SimulatorCore, name: str, now: float):
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
