"""TensorRT-LLM's schema on the engine layer: its per-position request counters become drafts, draft
tokens, accepted tokens and both per-position series (read here against prometheus_client's own
parse of the fixture); its iteration counters and TPOT histogram are not read."""

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specwatch.config import from_mapping
from specwatch.engines.grouping import Grouping
from specwatch.engines.series import Counter
from specwatch.exposition import ExpositionError
from specwatch.sidecar.pipeline import Pipeline
from support.engine_fixtures import fixture, polls

POLLS = polls(fixture("trtllm", "eagle3-load.prom"))


def per_position(text, family):
    return {
        int(s.labels["token_position"]): s.value
        for f in text_string_to_metric_families(text)
        if f.name == family
        for s in f.samples
    }


def test_trtllm_payload_maps_token_position_onto_the_canonical_counters():
    t, text = POLLS[3]
    (snap,) = Grouping().parse(text, t=t, target="trt")
    assert (snap.engine, snap.schema, snap.spec_present, snap.configured_k) == ("trtllm", "trtllm", True, 3)
    assert not snap.gauge_acceptance
    drafted = per_position(text, "trtllm_spec_decode_drafted_tokens")
    accepted = per_position(text, "trtllm_spec_decode_accepted_tokens")
    kinds = {}
    for key, v in snap.counters.items():
        kinds.setdefault(key.counter, {})[key.sub] = v
    assert kinds[Counter.DRAFTS] == {None: drafted[0]}
    assert kinds[Counter.DRAFT_TOKENS] == {None: sum(drafted.values())}
    assert kinds[Counter.ACCEPTED] == {None: sum(accepted.values())}
    assert kinds[Counter.POS] == accepted
    assert kinds[Counter.POS_DRAFTS] == drafted
    assert set(kinds) == {
        Counter.DRAFTS,
        Counter.DRAFT_TOKENS,
        Counter.ACCEPTED,
        Counter.POS,
        Counter.POS_DRAFTS,
        Counter.GEN,
        Counter.PROMPT,
    }  # no ITL parts: the TPOT histogram is per request


def test_trtllm_before_any_request_finished_runs_no_counted_speculation():
    t, text = POLLS[0]  # the request-level families appear with the first finished request
    (snap,) = Grouping().parse(text, t=t, target="trt")
    assert snap.engine == "trtllm"
    assert not snap.spec_present
    assert snap.counters == {}


def test_a_token_position_past_the_bound_rejects_the_payload_as_invalid():
    text = (
        "# TYPE trtllm_spec_decode_accepted_tokens_total counter\n"
        'trtllm_spec_decode_accepted_tokens_total{model_name="m",token_position="64"} 1.0\n'
    )
    with pytest.raises(ExpositionError) as rejected:
        Grouping().parse(text, t=1, target="trt")
    assert rejected.value.reason == "invalid"


def test_a_trtllm_restart_counts_the_new_process_from_zero():
    # No _created (multiprocess collector): the drop of every request counter is the restart.
    config = from_mapping({"poll_interval": "5s", "windows": ["1m"], "decision": {"min_drafts": 1}})
    pipeline = Pipeline(config)
    sequence = [*POLLS[:5], (1025.0, POLLS[1][1])]  # the restarted process's first poll reads poll 1's values
    for t, text in sequence:
        pipeline.ingest("vllm", t, text)
    (evaluation,) = [e for e in pipeline.evaluate(1025.0) if e.stats.window == "1m"]
    drafted0 = [per_position(text, "trtllm_spec_decode_drafted_tokens")[0] for _, text in sequence[1:]]
    assert evaluation.stats.drafts == (drafted0[-2] - drafted0[0]) + drafted0[-1]
    assert pipeline.state().targets[0].resets == 1
