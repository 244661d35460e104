"""The sidecar read-back, the Kubernetes way in virtual time: a recommendation is applied by
replacing the pod, so the new sidecar starts with nothing; it reads back what the old one exported
(its before-window, as Prometheus stored it) and grades the new pod's draft length against it."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from specwatch import sim
from specwatch.config import ReadbackConfig, from_mapping
from specwatch.export.collector import registry_for
from specwatch.export.contract import BEFORE_WINDOW
from specwatch.fleet.client import PromQueryError, RangeAnswer, Series
from specwatch.serve import readback as readback_module
from specwatch.serve.readback import RETRY_PAUSES, Readback, readback_query, restored_from_series
from specwatch.serve.service import Service
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sim.polling import simulated_polls
from specwatch.sim.scenario import parse_scenario
from specwatch.sim.sidecar_config import sidecar_config_for
from specwatch.verdict.grading import ORIGIN_PREVIOUS_POD
from support.builders import pod_scenario
from support.loopback import free_port

POLL = 5.0


def run_pod(k: int, seconds: float, restored=None, seed: int = 1, learning: bool = False):
    """A fresh sidecar beside a fresh simulated vLLM; returns the pipeline and the true tokens/s
    after the first minute (closed loop at the same load: the per-request decode speed)."""
    sc = parse_scenario(pod_scenario(k, "600s"))
    raw = sidecar_config_for(
        sc, target_url="http://127.0.0.1:1/metrics", listen="127.0.0.1:0", poll_interval=POLL, windows=("1m", "4m")
    )
    config = from_mapping({**raw, "learning": {"enabled": learning}}, environ={})
    pipeline = Pipeline(config)
    if restored is not None:
        pipeline.restore(restored.before_windows, restored.curves)
    simulator = sim.Simulator(sc, seed=seed)
    generated = {}
    for t, _evaluations in simulated_polls(simulator, pipeline, interval=POLL, count=round(seconds / POLL)):
        if t in (60.0, seconds):
            generated[t] = sum(e.counters.generation_tokens for r in simulator.routes.values() for e in r.engines)
    if seconds <= 60.0:
        return pipeline, None
    return pipeline, (generated[seconds] - generated[60.0]) / (seconds - 60.0)


def as_stored(pipeline: Pipeline, at: float, **pod_labels: str) -> list[Series]:
    """What Prometheus holds of the sidecar's before-window families (its labels plus the pod's)."""
    text = generate_latest(registry_for(pipeline.view)).decode()
    return [
        Series({**sample.labels, "__name__": sample.name, **pod_labels}, ((at, sample.value),))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith(("specwatch_advice_before", "specwatch_step_time_curve"))
    ]


@pytest.fixture(scope="module")
def rollout():
    old, true_old = run_pod(4, 300.0)
    # The old pod asks for K=2: as a shorten verdict, or (its interval spanning 1) as the restart that decides.
    last = old.state().routes[0].evaluations[-1]
    if last.verdict == "shorten":
        assert last.recommended_draft_length == 2
    else:
        assert last.verdict == "undecided" and last.measurement is not None
        assert (last.measurement.kind, last.measurement.draft_length) == ("restart_with_draft_length", 2)
    restored = restored_from_series(as_stored(old, 1000.0, pod="vllm-old"))
    new, true_new = run_pod(2, 360.0, restored, seed=2)
    return restored.before_windows, new, true_new / true_old


def test_the_new_pod_reads_back_the_old_pods_before_window_by_route(rollout):
    restored, _, _ = rollout
    before = restored["chat"]
    assert before.origin == ORIGIN_PREVIOUS_POD
    assert before.draft_length == pytest.approx(4.0, abs=0.01)
    assert before.position_rates is not None and len(before.position_rates) == 4
    assert before.batch_size == pytest.approx(64, rel=0.1)


def test_a_change_applied_by_replacing_the_pod_is_graded_within_10_percent_of_the_simulators_truth(rollout):
    _, new, true_gain = rollout
    assert true_gain > 1 / 0.9  # larger than the tolerance: a grading that saw no change fails
    grading = new.state().routes[0].grading
    assert grading is not None and grading.status == "graded"
    assert grading.before.origin == ORIGIN_PREVIOUS_POD
    assert grading.new_draft_length == pytest.approx(2.0, abs=0.01)
    assert grading.measured_gain_ratio == pytest.approx(true_gain, rel=0.10)
    assert grading.predicted_gain_ratio is not None and grading.predicted_gain_ratio > 1
    assert grading.as_dict()["before"]["origin"] == "previous_pod"


def test_a_restart_with_the_same_draft_length_grades_nothing():
    old, _ = run_pod(4, 300.0)
    restarted, _ = run_pod(4, 200.0, restored_from_series(as_stored(old, 1000.0, pod="a")), seed=2)
    assert restarted.state().routes[0].grading is None


def test_the_newest_pod_wins_and_a_half_read_or_hostile_answer_restores_nothing():
    old, _ = run_pod(4, 300.0)
    two_rollouts_ago = [Series(s.labels, ((500.0, 1.0),)) for s in as_stored(old, 0, pod="x")]
    latest = as_stored(old, 900.0, pod="vllm-old")
    restored = restored_from_series(two_rollouts_ago + latest)
    assert restored.before_windows["chat"].draft_length == pytest.approx(4.0, abs=0.01)
    # A group without its ITL per token, or with an impossible value, is no baseline.
    missing = [s for s in latest if s.labels["__name__"] != BEFORE_WINDOW["itl_per_token_seconds"]]
    assert restored_from_series(missing).routes == []
    hostile = [
        Series(
            s.labels,
            ((900.0, float("nan") if s.labels["__name__"] == BEFORE_WINDOW["batch_size"] else s.points[0][1]),),
        )
        for s in latest
    ]
    assert restored_from_series(hostile).routes == []
    nameless = [Series({"__name__": BEFORE_WINDOW["drafts"]}, ((1.0, 1.0),))]
    assert restored_from_series(nameless).routes == []


def test_the_query_picks_the_families_under_the_configured_selector():
    config = ReadbackConfig(url="http://p:9090", selector='{namespace="llm", job="vllm-chat"}')
    assert readback_query(config) == (
        '{__name__=~"specwatch_advice_before_span_seconds|specwatch_advice_before_draft_length_tokens|'
        "specwatch_advice_before_acceptance_ratio|specwatch_advice_before_batch_size_requests|"
        "specwatch_advice_before_mean_acceptance_length_tokens|specwatch_advice_before_itl_p99_seconds|"
        "specwatch_advice_before_itl_per_token_mean_seconds|specwatch_advice_before_drafts|"
        "specwatch_advice_before_position_acceptance_ratio|"
        'specwatch_step_time_curve_seconds", namespace="llm", job="vllm-chat"}'
    )


def test_an_unreachable_prometheus_is_counted_for_each_try_and_restores_nothing():
    waited: list[float] = []
    readback = Readback(ReadbackConfig(url=f"http://127.0.0.1:{free_port()}", timeout=1.0), wait=waited.append)
    readback.run(now=10_000.0)
    assert waited == list(RETRY_PAUSES)
    assert readback.errors["connect"] == readback.tries == len(RETRY_PAUSES) + 1
    assert sum(readback.errors.values()) == readback.tries
    restored = readback.take()
    assert readback.restored == 0 and restored is not None and restored.routes == [] and readback.take() is None


class FlakyPrometheus:
    """A query client that fails with `reasons` in turn, then answers `series`; it keeps each
    query's range."""

    def __init__(self, reasons: list[str], series: list[Series]) -> None:
        self.reasons, self.series = reasons, series
        self.ranges: list[tuple[float, float]] = []
        self.last_out_of_range = 0
        self.closed = False

    def query_range(self, expr: str, start: float, end: float, step: float, **_: object) -> RangeAnswer:
        self.ranges.append((start, end))
        if self.reasons:
            raise PromQueryError(self.reasons.pop(0), "as told")
        return RangeAnswer(tuple(self.series), 0.01, 100)

    def close(self) -> None:
        self.closed = True


@pytest.fixture(scope="module")
def stored_old_pod() -> list[Series]:
    old, _ = run_pod(4, 300.0)
    return as_stored(old, 9_990.0, pod="vllm-old")


def test_a_readback_that_fails_while_prometheus_is_not_reachable_yet_tries_again_and_restores(stored_old_pod):
    client = FlakyPrometheus(["connect", "timeout", "http_5xx"], stored_old_pod)
    waited: list[float] = []
    readback = Readback(ReadbackConfig(url="http://p:9090"), client, wait=waited.append)  # type: ignore[arg-type]
    readback.run(now=10_000.0)
    assert waited == list(RETRY_PAUSES[:3]) and readback.tries == 4 and client.closed
    assert {r: n for r, n in readback.errors.items() if n} == {"connect": 1, "timeout": 1, "http_5xx": 1}
    restored = readback.take()
    assert restored is not None and restored.routes == ["chat"] and readback.restored == 1
    # Each try reads up to its own time: never before the first.
    assert all(end >= 10_000.0 and end - start == pytest.approx(3600.0) for start, end in client.ranges)


@pytest.mark.parametrize("reason", ["http_4xx", "tls", "too_large", "invalid", "limit"])
def test_a_readback_refused_for_a_reason_that_does_not_pass_is_not_tried_again(stored_old_pod, reason):
    client = FlakyPrometheus([reason], stored_old_pod)
    waited: list[float] = []
    readback = Readback(ReadbackConfig(url="http://p:9090"), client, wait=waited.append)  # type: ignore[arg-type]
    readback.run(now=10_000.0)
    assert waited == [] and readback.tries == 1 and readback.errors[reason] == 1
    restored = readback.take()
    assert restored is not None and restored.routes == []


def test_a_readback_waiting_to_try_again_ends_when_the_sidecar_stops(stored_old_pod):
    client = FlakyPrometheus(["connect"], stored_old_pod)
    readback = Readback(ReadbackConfig(url="http://p:9090"), client)  # type: ignore[arg-type]
    readback.stop()
    readback.run(now=10_000.0)
    assert readback.tries == 1 and readback.take() is not None and readback.restored == 0


def test_the_learned_curve_is_read_back_and_used_until_the_new_pod_has_learned_its_own():
    old, _ = run_pod(4, 300.0, learning=True)
    learner, _ = old.learners()["chat"]
    knots = learner.curve().knots
    restored = restored_from_series(as_stored(old, 1000.0, pod="vllm-old"))
    assert [n for n, _ in restored.curves["chat"]] == pytest.approx([n for n, _ in knots], rel=1e-5)
    assert [v for _, v in restored.curves["chat"]] == pytest.approx([v for _, v in knots], rel=1e-12)
    new, _ = run_pod(2, 15.0, restored, seed=2, learning=True)
    own, model = new.learners()["chat"]
    assert own.curve() is None and model.profile is not None and model.profile.knots == restored.curves["chat"]
    # Once the new pod's own curve fits, it replaces the restored one.
    later, _ = run_pod(2, 300.0, restored, seed=2, learning=True)
    own, model = later.learners()["chat"]
    assert own.curve() is not None and model.profile is own.curve()


def test_a_curve_that_falls_with_the_load_or_is_not_positive_is_not_restored():
    old, _ = run_pod(4, 300.0, learning=True)
    stored = as_stored(old, 1000.0, pod="vllm-old")
    knot = next(s for s in stored if s.labels["__name__"] == "specwatch_step_time_curve_seconds")
    tokens, seconds = float(knot.labels["tokens"]), knot.points[0][1]
    assert "chat" in restored_from_series(stored).curves

    def another(n: float, v: float) -> Series:
        return Series({**knot.labels, "tokens": f"{n:g}"}, ((1000.0, v),))

    assert "chat" in restored_from_series([*stored, another(2 * tokens, 1.5 * seconds)]).curves
    assert "chat" not in restored_from_series([*stored, another(2 * tokens, 0.5 * seconds)]).curves
    assert "chat" not in restored_from_series([*stored, another(2 * tokens, float("inf"))]).curves
    assert "chat" not in restored_from_series([*stored, another(0.5 * tokens, -1.0)]).curves


def test_a_failed_readback_is_exported_and_the_sidecar_polls_as_without_it(monkeypatch):
    monkeypatch.setattr(readback_module, "RETRY_PAUSES", (0.01,))
    config = from_mapping(
        {
            "targets": [{"url": f"http://127.0.0.1:{free_port()}/metrics"}],
            "readback": {"url": f"http://127.0.0.1:{free_port()}", "timeout": "1s"},
        },
        environ={},
    )
    service = Service(config)
    try:
        assert service.readback is not None
        service.readback.run(now=10_000.0)  # what its thread runs after start
        service.poll_once()
        text = service.published.metrics.decode()
    finally:
        service.stop()
    assert 'specwatch_readback_errors_total{reason="connect"} 2.0' in text  # the first try and one more
    assert "specwatch_readback_restored_routes 0.0" in text
    assert 'specwatch_scrape_errors_total{reason="connect",target="vllm"} 1.0' in text


def test_fleet_mode_reads_nothing_back():
    fleet = from_mapping({"prometheus": {"url": "http://127.0.0.1:1"}}, environ={})
    assert Service(fleet).readback is None


def test_a_sidecar_that_started_on_a_bad_config_reads_back_once_a_good_one_arrives():
    good = from_mapping(
        {
            "targets": [{"url": f"http://127.0.0.1:{free_port()}/metrics"}],
            "readback": {"url": f"http://127.0.0.1:{free_port()}", "timeout": "1s"},
        },
        environ={},
    )
    service = Service(from_mapping({}, environ={}), config_error="targets[0].url: required")
    try:
        assert service.readback is None
        service.apply(good)
        assert service.readback is not None
    finally:
        service.stop()


def test_a_restored_window_carries_the_time_prometheus_last_stored_it():
    old, _ = run_pod(4, 300.0)
    assert restored_from_series(as_stored(old, 1234.5, pod="vllm-old")).before_windows["chat"].t == 1234.5


def test_a_sample_stamped_in_the_future_or_before_the_lookback_never_beats_the_previous_pod():
    old, _ = run_pod(4, 300.0)
    real = as_stored(old, 1000.0, pod="vllm-old")
    forged = [
        Series(
            {**s.labels, "pod": "forged"},
            ((at, 2 * s.points[0][1] if s.labels["__name__"] in BEFORE_WINDOW.values() else s.points[0][1]),),
        )
        for at in (5000.0, float("inf"), 1.0)
        for s in real
    ]
    restored = restored_from_series(forged + real, now=1200.0, lookback=600.0)
    assert restored.before_windows["chat"].t == 1000.0
    assert restored.before_windows["chat"].draft_length == pytest.approx(4.0, abs=0.01)
    assert restored.rejected == 3 * len(real)


def test_the_newest_step_written_to_the_millisecond_after_now_is_the_previous_pod_still_running():
    # A rolling update: the old pod is still scraped, so its newest sample is the query's last step,
    # `now` as the query API writes it (rounded to the millisecond, here up).
    old, _ = run_pod(4, 300.0)
    now = 1200.0004
    at_the_end = as_stored(old, round(now, 3), pod="vllm-old")
    restored = restored_from_series(at_the_end, now=now, lookback=600.0)
    assert restored.routes == ["chat"] and restored.rejected == 0
    a_second_late = as_stored(old, now + 1.0, pod="vllm-old")
    assert restored_from_series(a_second_late, now=now, lookback=600.0).routes == []


def test_a_before_window_with_magnitudes_no_server_has_is_not_restored():
    old, _ = run_pod(4, 300.0)
    real = as_stored(old, 1000.0, pod="vllm-old")
    slow = [
        Series(
            s.labels,
            ((1000.0, 1e3 if s.labels["__name__"] == BEFORE_WINDOW["itl_per_token_seconds"] else s.points[0][1]),),
        )
        for s in real
    ]
    restored = restored_from_series(slow, now=1200.0, lookback=600.0)
    assert "chat" not in restored.before_windows and restored.rejected == 1
