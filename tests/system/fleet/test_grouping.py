"""What makes a 1,000-replica poll cheap must not change a value: label-set plans kept between
polls group as resolving every series afresh does, a decoded answer groups as its Samples do, and
a replica window whose data did not change keeps derivations equal to fresh ones. (No Prometheus
needed: answers are built in the query API's shape.)"""

from __future__ import annotations

import pytest

from specwatch.config import from_mapping
from specwatch.fleet import queries as promql
from specwatch.fleet.client import PromQueryError, Sample, Vector
from specwatch.fleet.evaluator import FleetEvaluator
from specwatch.fleet.grouping import WindowGrouper, window_view
from specwatch.windows.derive import window_stats

NOW = 1_800_000_000.0


DEFAULT_LABELS = {"engine": "0", "model_name": "llama"}


def _answer(pod: str, alpha: float, scale: float = 1.0, labels: dict[str, str] = DEFAULT_LABELS) -> list[Sample]:
    """One replica's window answer as the grouped PromQL returns it (K=3)."""
    base = {"pod": pod, **labels}

    def sample(family: str, value: float, **extra: str) -> Sample:
        return Sample({**base, promql.FAMILY_LABEL: family, **extra}, value)

    drafts = 1000.0 * scale
    rates = [alpha ** (i + 1) for i in range(3)]
    out = [
        sample(promql.DRAFTS, drafts),
        sample(promql.DRAFT_TOKENS, 3 * drafts),
        sample(promql.ACCEPTED, drafts * sum(rates)),
        sample(promql.GENERATION, 4000.0 * scale),
        sample(promql.STEPS, 1500.0 * scale),
        sample(promql.RUNNING_MEAN, 8.0),
        sample(promql.SAMPLES, 21.0),
        sample(promql.ITL_SUM, 60.0 * scale),
        sample(promql.ITL_COUNT, 3000.0 * scale),
    ]
    out += [sample(promql.ACCEPTED_PER_POS, drafts * r, position=str(i)) for i, r in enumerate(rates)]
    out += [
        sample(promql.ITL_BUCKET, count * scale, le=le)
        for le, count in (("0.01", 100.0), ("0.025", 2000.0), ("0.05", 2900.0), ("+Inf", 3000.0))
    ]
    return out


def _decoded(samples: list[Sample]) -> Vector:
    """The same series as json.loads gives them from the query API (labels sorted by name, values
    as strings)."""
    return Vector([{"metric": dict(sorted(s.labels.items())), "value": [NOW, repr(s.value)]} for s in samples])


def _config(**extra: object):
    return from_mapping(
        {
            "windows": ["1m", "5m"],
            "decision": {"min_drafts": 100, "hold": 1},
            "prometheus": {"url": "http://prometheus:9090", "replica_labels": ["pod"], "scrape_interval": "15s"},
            **extra,
        },
        environ={},
    )


def test_a_decoded_answer_groups_as_its_samples_do() -> None:
    samples = _answer("vllm-0", 0.6) + _answer("vllm-1", 0.4, scale=2.0)
    assert WindowGrouper(("pod",), []).group(_decoded(samples)) == WindowGrouper(("pod",), []).group(samples)


def test_plans_kept_between_polls_group_as_a_fresh_grouper_does() -> None:
    kept = WindowGrouper(("pod",), [])
    polls = [
        _answer("vllm-0", 0.6) + _answer("vllm-1", 0.4),
        _answer("vllm-0", 0.5, scale=1.5) + _answer("vllm-2", 0.7),  # new values, one replica gone, one new
        # The same label values in the same order under other names (an engine "llama" without a
        # model, then a model "llama" without an engine): a plan keyed on the values alone would
        # take one for the other.
        _answer("vllm-0", 0.6, labels={"engine": "llama"}),
        _answer("vllm-0", 0.6, labels={"model_name": "llama"}),
    ]
    for answer in polls:
        assert kept.group(_decoded(answer)) == WindowGrouper(("pod",), []).group(answer)


@pytest.mark.parametrize(
    "item",
    [
        {"metric": {"pod": "vllm-0", promql.FAMILY_LABEL: promql.DRAFTS}, "value": [NOW, "not a number"]},
        {"metric": ["pod", "vllm-0"], "value": [NOW, "1"]},
        {"metric": {"pod": "vllm-0"}},
        {"metric": {"pod": "vllm-0"}, "value": [NOW]},
        "not an object",
    ],
)
def test_a_series_not_in_the_query_apis_shape_is_an_invalid_answer(item: object) -> None:
    evaluator = FleetEvaluator(_config())
    with pytest.raises(PromQueryError) as error:
        evaluator.group({"1m": Vector([*_decoded(_answer("vllm-0", 0.6)).items, item])})
    assert error.value.reason == "invalid"


def test_an_unchanged_replica_window_keeps_derivations_equal_to_fresh_ones() -> None:
    config = _config()
    evaluator = FleetEvaluator(config)
    answer = _answer("vllm-0", 0.6)
    fresh = [Sample({"pod": "vllm-0"}, NOW - 5)]
    first = evaluator.evaluate(NOW, {"1m": answer, "5m": answer}, fresh)
    # The same samples 7.3 s later (no scrape in between), then new ones.
    for later, now_answer in ((NOW + 7.3, answer), (NOW + 15.0, _answer("vllm-0", 0.5, scale=1.5))):
        evaluations = evaluator.evaluate(later, {"1m": _decoded(now_answer), "5m": _decoded(now_answer)}, fresh)
        data = WindowGrouper(("pod",), []).group(now_answer)
        for (replica, evaluation), width in zip(evaluations, config.windows, strict=True):
            datum = data[(replica, "llama")]
            view = window_view(datum, replica, later, min(width, (datum.samples - 1) * 15.0))
            assert view is not None
            assert evaluation.stats == window_stats(view, "llama", evaluation.stats.window, later)
        if now_answer is answer:
            assert [e.assessment for _, e in evaluations] == [e.assessment for _, e in first]


def test_each_replica_window_carries_the_engine_its_series_were_read_from() -> None:
    llamacpp = [
        Sample({**s.labels, promql.ENGINE_LABEL: "llamacpp"}, s.value) for s in _answer("pod-l", 0.6, labels={})
    ]
    grouped = WindowGrouper(("pod",), ()).group([*_answer("pod-v", 0.6), *llamacpp])
    engines = {replica: data.engine for (replica, _), data in grouped.items()}
    assert engines == {(("pod", "pod-v"),): "vllm", (("pod", "pod-l"),): "llamacpp"}
    view = window_view(grouped[((("pod", "pod-l"),), "default")], (("pod", "pod-l"),), NOW, 60.0)
    assert view is not None and view.last.snapshot.engine == "llamacpp"


def test_the_per_position_draft_counter_is_grouped_as_the_sidecar_keys_it() -> None:
    drafted = [
        Sample({"pod": "p", **DEFAULT_LABELS, promql.FAMILY_LABEL: promql.DRAFTED_PER_POS, "position": str(i)}, v)
        for i, v in enumerate((1000.0, 1000.0, 500.0))
    ]
    grouped = WindowGrouper(("pod",), ()).group([*_answer("p", 0.6), *drafted])
    data = grouped[((("pod", "p"),), "llama")]
    assert {k.position: v for k, v in data.increases.items() if k.counter == "pos_drafts"} == {
        0: 1000.0,
        1: 1000.0,
        2: 500.0,
    }


def _sglang(pod: str, gauges: dict[str, float], verify_calls: float = 600.0) -> list[Sample]:
    """A gauge-only engine's answer: its verify calls and the window means Prometheus computed."""
    base = {"pod": pod, "model_name": "qwen", promql.ENGINE_LABEL: "sglang"}
    return [
        Sample({**base, promql.FAMILY_LABEL: promql.DRAFTS}, verify_calls),
        Sample({**base, promql.FAMILY_LABEL: promql.SAMPLES}, 7.0),
        *(Sample({**base, promql.FAMILY_LABEL: promql.GAUGE_PREFIX + name}, value) for name, value in gauges.items()),
    ]


def test_a_gauge_only_engines_window_means_become_its_window_values() -> None:
    means = {"acceptance_rate": 0.61, "acceptance_length": 2.8, "draft_length": 3.0, "batch_size": 12.5}
    grouped = WindowGrouper(("pod",), ()).group(_sglang("s", means))
    replica = (("pod", "s"),)
    view = window_view(grouped[(replica, "qwen")], replica, NOW, 30.0)
    assert view is not None
    stats = window_stats(view, "qwen", "30s", NOW)
    assert (stats.acceptance_rate, stats.mean_acceptance_length, stats.draft_length) == (0.61, 2.8, 3.0)
    assert stats.batch_size == 12.5
    assert stats.acceptance_basis == "engine_gauge_mean"
    assert stats.drafts == 600.0 and stats.configured_k == 3
    assert stats.draft_tokens is None and stats.position_rates is None  # no gauge holds them


def test_a_gauge_only_engine_without_an_active_scrape_has_no_acceptance_and_no_batch() -> None:
    grouped = WindowGrouper(("pod",), ()).group(_sglang("s", {}, verify_calls=0.0))
    replica = (("pod", "s"),)
    view = window_view(grouped[(replica, "qwen")], replica, NOW, 30.0)
    assert view is not None
    stats = window_stats(view, "qwen", "30s", NOW)
    assert stats.acceptance_rate is None and stats.mean_acceptance_length is None and stats.draft_length is None
    assert stats.batch_size is None
