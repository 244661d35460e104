"""Hypothesis properties (the window rules are in docs/architecture.md).

- the exposition parser (and everything after it up to the pipeline) raises nothing but
  ExpositionError on arbitrary mutations of real vLLM payloads, and a rejected poll leaves the
  windows byte-identical;
- window increases with random restarts equal Prometheus's increase() rule (without `_created`)
  and the true event count (with `_created`);
- acceptance rate and per-position rates stay in [0, 1] whatever restarts happen, including the
  multiprocess case where vLLM exports no `_created` and only some counters visibly drop;
- a state machine over poll_ok / poll_fail / restart / labelset_vanish / rename keeps the
  sidecar's invariants.
"""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from specwatch.config import from_mapping
from specwatch.engines.grouping import SELECTOR, parse_payload
from specwatch.engines.series import Counter, SeriesKey
from specwatch.exposition import ExpositionError
from specwatch.sidecar.pipeline import Pipeline
from specwatch.windows.derive import window_stats
from specwatch.windows.window import RouteWindow
from support.builders import route_snapshot
from support.counter_rule import noise, poll_increases

from .fuzzcheck import seed_payloads
from .mutate import mutated

PAYLOADS = seed_payloads(every=4)  # fewer seeds than the fuzzer's keep each example cheap


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated(PAYLOADS))
def test_the_parser_raises_only_exposition_error_on_mutations_of_real_payloads(text):
    try:
        SELECTOR.parse(text)
        parse_payload(text, t=1.0, target="vllm")
    except ExpositionError as exc:
        assert exc.reason in ("parse", "invalid")


def _config():
    return from_mapping(
        {
            "poll_interval": "5s",
            "windows": ["1m", "5m"],
            "decision": {"min_drafts": 10},
            "model": {"preset": "llama-3.1-8b"},
        },
        environ={},
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated(PAYLOADS))
def test_a_rejected_mutation_leaves_the_pipeline_windows_byte_identical(text):
    pipeline = Pipeline(_config())
    assert pipeline.ingest("vllm", 1000.0, PAYLOADS[1]).ok
    before = [(n, list(r.window.entries), dict(r.window.totals)) for n, r in pipeline._routes.items()]
    result = pipeline.ingest("vllm", 1005.0, text)  # must not raise, whatever the text
    pipeline.evaluate(1005.0)
    if not result.ok:
        after = [(n, list(r.window.entries), dict(r.window.totals)) for n, r in pipeline._routes.items()]
        assert after == before
        assert result.reason in ("parse", "invalid")


# -- reset-aware windows ---------------------------------------------------------------------


steps = st.lists(st.tuples(st.integers(0, 1000), st.booleans()), min_size=2, max_size=60)


@settings(max_examples=300, deadline=None)
@given(steps, st.integers(1, 60), st.integers(0, 59))
def test_window_increase_with_random_resets_equals_prometheus_increase(events, width_polls, end):
    """Without _created, a drop beyond noise means a restart from 0: increase = sum of positive steps +
    post-drop values; a drop within noise is a dip (docs/architecture.md §3, support/counter_rule.py)."""
    window = RouteWindow(horizon_seconds=10_000)
    value, values = 0.0, []
    for i, (n, restart) in enumerate(events):
        value = (0.0 if restart else value) + n
        values.append(value)
        window.ingest(route_snapshot(float(i), {SeriesKey(Counter.DRAFTS, "0"): value}))
    now = float(min(end, len(events) - 1))
    view = window.view(now, float(width_polls))
    chosen = [i for i in range(len(events)) if now - width_polls <= i <= now]
    if len(chosen) < 2:
        assert view is None
        return
    per_poll = poll_increases(values)
    assert view.increase(SeriesKey(Counter.DRAFTS, "0")) == sum(per_poll[i] for i in chosen[1:])
    if all(b >= a or b < a - noise(a) for a, b in itertools.pairwise(values)):
        expected = 0.0  # no drop within noise: exactly Prometheus's rule
        for a, b in itertools.pairwise(chosen):
            expected += values[b] - values[a] if values[b] >= values[a] else values[b]
        assert view.increase(SeriesKey(Counter.DRAFTS, "0")) == expected


@settings(max_examples=300, deadline=None)
@given(steps, st.integers(1, 60))
def test_window_increase_with_created_timestamps_equals_the_true_event_count(events, width_polls):
    window = RouteWindow(horizon_seconds=10_000)
    value, created = 0.0, 0.0
    true_after = []
    for i, (n, restart) in enumerate(events):
        if restart:
            value, created = 0.0, float(i)  # a restart is visible through _created even if the value rose
        value += n
        true_after.append(n)
        window.ingest(
            route_snapshot(float(i), {SeriesKey(Counter.DRAFTS, "0"): value}, {SeriesKey(Counter.DRAFTS, "0"): created})
        )
    now = float(len(events) - 1)
    view = window.view(now, float(width_polls))
    chosen = [i for i in range(len(events)) if now - width_polls <= i <= now]
    if view is None:
        assert len(chosen) < 2
        return
    assert view.increase(SeriesKey(Counter.DRAFTS, "0")) == sum(true_after[i] for i in chosen[1:])


K = 4


@st.composite
def traffic(draw):
    """Per poll: drafts, per-request accepted prefix lengths, restart flag. Counters keep vLLM's identities."""
    polls = draw(st.integers(3, 30))
    out = []
    for _ in range(polls):
        drafts = draw(st.integers(0, 40))
        accepted = draw(st.lists(st.integers(0, K), min_size=drafts, max_size=drafts))
        out.append((drafts, accepted, draw(st.booleans()) and draw(st.booleans())))
    return out


def _fold(state, drafts, accepted, restart):
    if restart:
        state = dict.fromkeys(state, 0.0)
    state[SeriesKey(Counter.DRAFTS, "0")] += drafts
    state[SeriesKey(Counter.DRAFT_TOKENS, "0")] += drafts * K
    state[SeriesKey(Counter.ACCEPTED, "0")] += sum(accepted)
    state[SeriesKey(Counter.GEN, "0")] += sum(accepted) + drafts
    for i in range(K):
        state[SeriesKey(Counter.POS, "0", i)] += sum(1 for a in accepted if a > i)
    return state


@settings(max_examples=300, deadline=None)
@given(traffic(), st.booleans(), st.sampled_from([10.0, 30.0, 60.0]))
def test_ratios_stay_in_0_1_across_restarts_with_and_without_created(polls, with_created, width):
    window = RouteWindow(horizon_seconds=300)
    state = {
        SeriesKey(Counter.DRAFTS, "0"): 0.0,
        SeriesKey(Counter.DRAFT_TOKENS, "0"): 0.0,
        SeriesKey(Counter.ACCEPTED, "0"): 0.0,
        SeriesKey(Counter.GEN, "0"): 0.0,
        **{SeriesKey(Counter.POS, "0", i): 0.0 for i in range(K)},
    }
    created = 0.0
    for i, (drafts, accepted, restart) in enumerate(polls):
        t = 5.0 * (i + 1)
        if restart:
            created = t - 1.0
        state = _fold(state, drafts, accepted, restart)
        window.ingest(route_snapshot(t, dict(state), dict.fromkeys(state, created) if with_created else {}))
        view = window.view(t, width)
        if view is None:
            continue
        stats = window_stats(view, "r", "w", t)
        for name in ("acceptance_rate",):
            v = getattr(stats, name)
            assert v is None or (0.0 <= v <= 1.0), (name, v)
        for v in stats.position_rates or ():
            assert 0.0 <= v <= 1.0, stats.position_rates
        if stats.mean_acceptance_length is not None:
            assert 1.0 <= stats.mean_acceptance_length <= K + 1
        for d in view.increases().values():
            assert d >= 0


# -- state machine ---------------------------------------------------------------------------
class SidecarMachine(RuleBasedStateMachine):
    """The pipeline fed by a FakeVllm (prometheus_client wire format) under random events."""

    def __init__(self):
        super().__init__()
        from support.vllm_payloads import FakeVllm

        self.vllm = FakeVllm(model_name="m", engines=2)
        self.pipeline = Pipeline(
            from_mapping(
                {
                    "poll_interval": "5s",
                    "windows": ["15s", "1m"],
                    "decision": {"min_drafts": 20, "hold": 2},
                    "route_ttl_polls": 4,
                    "model": {"preset": "llama-3.1-8b"},
                },
                environ={},
            )
        )
        self.t = 1_000_000.0
        self.hidden_engine: str | None = None
        self.rename = 0
        self.mirrors: dict = {}
        self.failed_last = False
        self.verdicts_before_fail: dict = {}

    def _text(self):
        text = self.vllm.text()
        if self.hidden_engine is not None:
            text = "\n".join(line for line in text.split("\n") if f'engine="{self.hidden_engine}"' not in line)
        if self.rename:
            text = text.replace('model_name="m"', f'model_name="m{self.rename}"')
        return text

    def _traffic(self):
        for engine in range(2):
            self.vllm.step(engine, batch=8, accepted_per_request=[4, 2, 3, 1, 0, 4], itl_seconds=0.02)

    def _verdicts(self):
        return {(n, w): s.current for n, r in self.pipeline._routes.items() for w, s in r.verdicts.items()}

    @rule()
    def poll_ok(self):
        self._traffic()
        self.t += 5
        result = self.pipeline.ingest("vllm", self.t, self._text())
        assert result.ok, result
        self.pipeline.evaluate(self.t)
        self.failed_last = False

    @rule(reason=st.sampled_from(["timeout", "connect", "http_status", "too_large"]))
    def poll_fail(self, reason):
        self._traffic()
        before = {n: (len(r.window.entries), dict(r.window.totals)) for n, r in self.pipeline._routes.items()}
        verdicts = self._verdicts()
        self.t += 5
        self.pipeline.ingest_error("vllm", self.t, reason)
        self.pipeline.evaluate(self.t)
        assert {n: (len(r.window.entries), dict(r.window.totals)) for n, r in self.pipeline._routes.items()} == before
        assert self._verdicts() == verdicts

    @rule(garbage=st.sampled_from(["\x00\x01", "{} 1\n# TYPE x\n", 'vllm:spec_decode_num_drafts_total{a="1"} -1\n']))
    def poll_garbage(self, garbage):
        self.t += 5
        verdicts = self._verdicts()
        result = self.pipeline.ingest("vllm", self.t, self._text() + "\n" + garbage)
        assert not result.ok
        self.pipeline.evaluate(self.t)
        assert self._verdicts() == verdicts

    @rule()
    def restart(self):
        self.vllm.restart()

    @rule(engine=st.sampled_from(["0", "1", None]))
    def labelset_vanish(self, engine):
        self.hidden_engine = engine

    @precondition(lambda self: self.rename < 3)
    @rule()
    def rename_model(self):
        self.rename += 1

    @invariant()
    def mirrored_counters_never_decrease_and_ratios_are_bounded(self):
        state = self.pipeline.state()
        for route in state.routes:
            for kind, v in route.mirrored.items():
                key = (route.route, kind)
                assert v >= self.mirrors.get(key, 0.0) - 1e-9, key
                self.mirrors[key] = v
            for evaluation in route.evaluations:
                alpha = evaluation.value("acceptance_rate")
                assert alpha is None or 0.0 <= alpha <= 1.0
                for p in evaluation.position_rates or ():
                    assert 0.0 <= p <= 1.0
                assert evaluation.verdict in (None, "spec_off", "insufficient_data", "keep", "shorten", "disable")

    @invariant()
    def routes_stay_bounded(self):
        assert len(self.pipeline._routes) <= 1 + 4  # the live one plus at most ttl-polls of churn


TestSidecarMachine = SidecarMachine.TestCase
TestSidecarMachine.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
