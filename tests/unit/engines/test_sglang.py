"""SGLang's schema on the engine layer: what a payload becomes (read here against prometheus_client's
own parse of the fixture), and what it never becomes."""

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specwatch.engines.grouping import Grouping
from specwatch.engines.series import Counter, Gauge
from specwatch.exposition import ExpositionError
from support.engine_fixtures import fixture, polls

POLLS = polls(fixture("sglang", "eagle3-load.prom"))
GAUGE_FAMILIES = {
    "sglang:spec_accept_rate": Gauge.ACCEPTANCE_RATE,
    "sglang:spec_accept_length": Gauge.ACCEPTANCE_LENGTH,
    "sglang:spec_num_steps": Gauge.DRAFT_LENGTH,
}
SCHED = 'engine_type="unified",model_name="m",tp_rank="0"'


def value(text, family):
    return next(s.value for f in text_string_to_metric_families(text) if f.name == family for s in f.samples)


def test_sglang_payload_is_detected_and_read_as_gauges_and_verify_calls():
    t, text = POLLS[3]
    (snap,) = Grouping().parse(text, t=t, target="s")
    assert (snap.engine, snap.schema, snap.route, snap.spec_present) == ("sglang", "sglang", "qwen3-8b", True)
    assert snap.gauge_acceptance
    assert snap.gauges == {gauge: value(text, family) for family, gauge in GAUGE_FAMILIES.items()}
    assert snap.configured_k == 3  # the active speculative_num_steps
    by_kind = {key.counter: v for key, v in snap.counters.items()}
    assert by_kind == {
        Counter.DRAFTS: value(text, "sglang:spec_verify_calls"),
        Counter.GEN: value(text, "sglang:generation_tokens"),
        Counter.PROMPT: value(text, "sglang:prompt_tokens"),
    }
    assert list(snap.running.values()) == [value(text, "sglang:num_running_reqs")]


def payload(rate, length, steps):
    return "".join(
        f"# TYPE {name} gauge\n{name}{{{SCHED}}} {v}\n"
        for name, v in (
            ("sglang:spec_accept_rate", rate),
            ("sglang:spec_accept_length", length),
            ("sglang:spec_num_steps", steps),
            ("sglang:num_running_reqs", 4),
        )
    )


def test_sglang_without_speculation_is_not_speculating():
    (snap,) = Grouping().parse(payload(0.0, 0.0, 0), t=1, target="s")
    assert snap.engine == "sglang"
    assert not snap.spec_present
    assert snap.configured_k is None


@pytest.mark.parametrize("broken", ["NaN", "+Inf", "-0.5"])
def test_a_broken_acceptance_gauge_rejects_the_payload_as_invalid(broken):
    with pytest.raises(ExpositionError) as rejected:
        Grouping().parse(payload(broken, 2.5, 3), t=1, target="s")
    assert rejected.value.reason == "invalid"


def test_sglang_gauges_of_several_ranks_are_averaged():
    text = "# TYPE sglang:spec_accept_rate gauge\n" + "".join(
        f'sglang:spec_accept_rate{{dp_rank="{rank}",model_name="m"}} {v}\n' for rank, v in ((0, 0.6), (1, 0.8))
    )
    (snap,) = Grouping().parse(text, t=1, target="s")
    assert snap.gauges[Gauge.ACCEPTANCE_RATE] == pytest.approx(0.7)
