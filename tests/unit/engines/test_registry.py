"""The engine table: every engine's names are its own, detection picks the engine a payload
speaks (and keeps the last one on a tie), and a target that changes engine is planned afresh."""

from __future__ import annotations

import pytest

from specwatch.engines import registry
from specwatch.engines.grouping import ENGINE_SWITCH_POLLS, SELECTOR, Grouping
from specwatch.engines.llamacpp import LLAMACPP
from specwatch.engines.registry import ENGINES, detect
from specwatch.engines.vllm import VLLM
from specwatch.exposition import ExpositionError
from support.paths import FIXTURES

ENGINE_FIXTURES = FIXTURES / "engines"


def _families(engine: str, name: str = "after"):
    return SELECTOR.parse((ENGINE_FIXTURES / engine / f"{name}.prom").read_text())


def test_no_family_belongs_to_two_engines():
    names = [name for engine in ENGINES for name in engine.families]
    assert len(names) == len(set(names))
    assert len(registry.FAMILIES) == len(names)


def test_every_engine_has_a_distinct_name_and_counts_drafts_tokens_and_acceptances():
    assert len(registry.BY_NAME) == len(ENGINES)
    for engine in ENGINES:
        counted = {source.counter for source in engine.counters}
        if engine.window_gauges:
            # A gauge-only engine (SGLang): its verify steps are the drafts, its acceptance gauges.
            wanted = {"drafts"}
        elif engine.name == "trtllm":
            # Its drafts are one position of a family, which fleet mode's whole-family queries cannot tag.
            wanted = {"draft_tokens", "accepted", "pos", "pos_drafts"}
        else:
            wanted = {"drafts", "draft_tokens", "accepted", "pos"}
        assert wanted <= counted, engine.name
        assert engine.running is not None, engine.name


def test_a_payload_of_no_known_engine_is_read_as_the_default():
    assert detect({}) is VLLM
    assert detect({}, LLAMACPP) is LLAMACPP


def test_a_payload_mixing_engines_is_read_as_the_one_it_holds_most_of_and_a_tie_keeps_the_last():
    mixed = {**_families("llamacpp"), **_families("lmdeploy")}
    assert detect(mixed).name == "lmdeploy"  # more lmdeploy families than llama.cpp ones
    llamacpp = _families("llamacpp")
    one_each = {**llamacpp, "lmdeploy:num_requests_running": _families("lmdeploy")["lmdeploy:num_requests_running"]}
    assert detect(one_each, LLAMACPP) is LLAMACPP


def test_a_target_that_changes_engine_is_planned_afresh_and_reads_the_new_engine():
    grouping = Grouping()
    text_l = (ENGINE_FIXTURES / "llamacpp" / "after.prom").read_text()
    text_m = (ENGINE_FIXTURES / "lmdeploy" / "after.prom").read_text()
    first = grouping.parse(text_l, t=0.0, target="t")
    grouping.parse(text_l, t=0.5, target="t")  # the parser vouches for the layout from the second poll on
    again = grouping.parse(text_l, t=1.0, target="t")
    assert not grouping.replanned  # the same layout: the remembered plan
    for n in range(ENGINE_SWITCH_POLLS - 1):  # a flip is a mismatch until it holds
        with pytest.raises(ExpositionError, match="looks like lmdeploy"):
            grouping.parse(text_m, t=1.5 + 0.1 * n, target="t")
    second = grouping.parse(text_m, t=2.0, target="t")
    assert grouping.replanned
    assert [s.engine for s in (*first, *again, *second)] == ["llamacpp", "llamacpp", "lmdeploy"]
    assert second[0].model_name == "qwen3-8b"


def test_a_fixed_engine_ignores_what_another_engines_payload_holds():
    grouping = Grouping(engine=LLAMACPP)
    assert grouping.snapshots(_families("lmdeploy"), t=0.0, target="t") == []


def test_once_detected_a_target_is_parsed_with_its_engines_names_only():
    # Every engine's names in one scan would cost a vLLM poll twice its time: the parser is the engine's.
    grouping = Grouping()
    grouping.parse((ENGINE_FIXTURES / "llamacpp" / "after.prom").read_text(), t=0.0, target="t")
    assert grouping.selector.families == LLAMACPP.families
    assert Grouping().selector.families == VLLM.families


def test_a_position_past_the_bound_rejects_any_engines_payload_naming_its_family():
    text = (ENGINE_FIXTURES / "llamacpp" / "after.prom").read_text() + (
        'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="900"} 1\n'
    )
    with pytest.raises(ExpositionError, match="llamacpp:spec_decode_num_accepted_tokens_per_pos has position='900'"):
        Grouping().parse(text, t=0.0, target="t")


def test_two_ray_replicas_on_one_node_endpoint_are_two_series_of_the_route():
    text = (ENGINE_FIXTURES / "ray-vllm" / "after.prom").read_text()
    second = "".join(
        line.replace('ReplicaId="abc123"', 'ReplicaId="def456"') + "\n"
        for line in text.splitlines()
        if line.startswith("ray_vllm_spec_decode_num_drafts_total")
    )
    (snapshot,) = Grouping().parse(text + second, t=0.0, target="t")
    drafts = {key.series: value for key, value in snapshot.counters.items() if key.counter == "drafts"}
    assert drafts == {"abc123:0/qwen3-8b": 1200.0, "def456:0/qwen3-8b": 1200.0}
