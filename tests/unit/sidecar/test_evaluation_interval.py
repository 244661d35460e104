"""`evaluation_interval`: the polls between two evaluations only fill the windows, publish nothing
new and leave the verdicts' state alone; a failed, recovered or reset poll is evaluated and
published at once; what an evaluation says about its windows is what an evaluation at every poll
says at the same time. Unset, polls faster than five seconds are evaluated every five seconds, and
slower ones at every poll."""

from __future__ import annotations

import json

from specwatch import sim
from specwatch.config import from_mapping
from specwatch.serve.service import Service
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sidecar.replay import replay
from specwatch.sidecar.scrape import ScrapeError, ScrapeResult
from support.builders import scenario_raw_config
from support.vllm_payloads import FakeVllm


class _Answer:
    """The target: the simulator's text, or a failure."""

    def __init__(self) -> None:
        self.text = ""
        self.fail = False

    def fetch(self) -> ScrapeResult:
        if self.fail:
            raise ScrapeError("connect", "refused")
        return ScrapeResult(self.text, 0.001, len(self.text))

    def close(self) -> None:
        return None


class _Polled:
    """A Service polling the steady scenario's simulator once a second of its own clock."""

    def __init__(self, poll_interval: float = 1.0, **extra: object) -> None:
        raw = {**scenario_raw_config("steady", poll_interval=poll_interval), **extra}
        self.clock = 0.0
        self.service = Service(from_mapping(raw, environ={}), clock=lambda: self.clock)
        self.answer = _Answer()
        self.service.poller.scrapers["vllm"] = self.answer  # type: ignore[assignment]
        self.simulator = sim.Simulator(sim.load_scenario("steady"), seed=1)

    def poll(self, t: float) -> bool:
        """Poll at t; True when a new view was published."""
        self.simulator.advance_to(t)
        self.clock, self.answer.text = t, self.simulator.render()
        before = self.service.published
        self.service.poll_once()
        return self.service.published.view is not before.view

    def close(self) -> None:
        self.service.stop()


def test_polls_between_evaluations_fill_the_windows_and_publish_nothing_new():
    polled = _Polled(evaluation_interval="5s")
    try:
        published = [t for t in range(1, 22) if polled.poll(float(t))]
        ticks = polled.service.published.last_tick
        assert published == [1, 6, 11, 16, 21]
        polled.poll(22.0)
        assert polled.service.published.last_tick > ticks  # the loop's tick is seen by /healthz
        # Every poll reached the windows: the target counted 22 polls, published at the 21st.
        assert polled.service.published.view.targets.targets[0].polls == 21
        assert polled.service.poller.pipeline.state().targets[0].polls == 22
    finally:
        polled.close()


def test_without_an_evaluation_interval_one_second_polls_are_evaluated_every_five_seconds():
    polled = _Polled()
    try:
        assert [t for t in range(1, 22) if polled.poll(float(t))] == [1, 6, 11, 16, 21]
    finally:
        polled.close()


def test_without_an_evaluation_interval_five_second_polls_are_each_evaluated_and_published():
    polled = _Polled(poll_interval=5.0)
    try:
        assert all(polled.poll(float(t)) for t in range(5, 60, 5))
    finally:
        polled.close()


def test_an_evaluation_interval_of_one_poll_evaluates_and_publishes_every_poll():
    polled = _Polled(evaluation_interval="1s")
    try:
        assert all(polled.poll(float(t)) for t in range(1, 12))
    finally:
        polled.close()


def test_a_failed_poll_and_the_recovery_after_it_are_published_at_once():
    polled = _Polled(evaluation_interval="5s")
    try:
        for t in range(1, 8):
            polled.poll(float(t))
        polled.answer.fail = True
        assert polled.poll(8.0)
        view = polled.service.published.view
        assert view.targets.targets[0].up is False
        assert all(not r.evaluations for r in view.targets.routes)  # no number from before the failure
        polled.answer.fail = False
        assert polled.poll(9.0)
        assert polled.service.published.view.targets.targets[0].up is True
        assert not polled.poll(10.0)  # then the cadence again, counted from the recovery
        assert polled.poll(14.0)
    finally:
        polled.close()


def _window_numbers(service: Service) -> dict[tuple[str, str], tuple[float | None, ...]]:
    """Each published route-window's measured numbers."""
    return {
        (r.route, e.stats.window): (
            e.stats.acceptance_rate,
            e.stats.mean_acceptance_length,
            e.stats.draft_length,
            e.stats.batch_size,
            e.stats.itl_p99_seconds,
        )
        for r in service.published.view.targets.routes
        for e in r.evaluations
    }


def test_an_evaluation_says_of_its_windows_what_an_evaluation_at_every_poll_says_at_that_time():
    spaced, every = _Polled(evaluation_interval="5s"), _Polled(evaluation_interval="1s")
    compared = 0
    try:
        for t in range(1, 80):
            spaced_new, _ = spaced.poll(float(t)), every.poll(float(t))
            if spaced_new:
                numbers = _window_numbers(spaced.service)
                assert numbers == _window_numbers(every.service)
                compared += len(numbers)
        assert compared >= 20  # the windows had data to compare
    finally:
        spaced.close()
        every.close()


def _fake_polls(fake: FakeVllm, pipeline: Pipeline, times: range) -> list[bool]:
    due = []
    for t in times:
        for _ in range(5):
            fake.step(0, batch=8, accepted_per_request=[2, 1, 0, 3], itl_seconds=0.02)
        pipeline.ingest("vllm", float(t), fake.text())
        due.append(pipeline.evaluation_due(float(t)))
        if due[-1]:
            pipeline.evaluate(float(t))
    return due


def test_a_counter_reset_is_evaluated_at_once():
    pipeline = Pipeline(from_mapping({"poll_interval": "1s", "evaluation_interval": "10s"}, environ={}))
    fake = FakeVllm()
    assert _fake_polls(fake, pipeline, range(1, 6)) == [True, False, False, False, False]
    fake.restart()
    assert _fake_polls(fake, pipeline, range(6, 9)) == [True, False, False]


def test_replay_prints_the_evaluations_of_its_evaluation_interval():
    fake = FakeVllm()
    lines = []
    for t in range(1, 31):
        for _ in range(5):
            fake.step(0, batch=8, accepted_per_request=[2, 1, 0, 3], itl_seconds=0.02)
        lines.append(json.dumps({"t": float(t), "target": "vllm", "text": fake.text()}))
    config = {"poll_interval": "1s", "windows": ["20s"], "decision": {"min_drafts": 10}}
    every = list(replay(from_mapping({**config, "evaluation_interval": "1s"}, environ={}), lines))
    spaced = list(replay(from_mapping({**config, "evaluation_interval": "10s"}, environ={}), lines))
    unset = list(replay(from_mapping(config, environ={}), lines))
    # The first poll is evaluated too, with one sample: no window yet, no line.
    assert len(every) == 29 and [r["t"] for r in spaced] == [11.0, 21.0]
    assert [r["t"] for r in unset] == [6.0, 11.0, 16.0, 21.0, 26.0]  # one-second polls: every five seconds
    by_t = {r["t"]: r for r in every}
    for record in spaced:
        assert record["acceptance_rate"] == by_t[record["t"]]["acceptance_rate"]
