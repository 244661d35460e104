"""decide.with_fields, the evaluation's copy of an assessment with some fields changed, is
dataclasses.replace: the same value and type on any assessment and any changes, the same refusal of
a name that is no field, and Assessment keeps what makes copying its fields the same as running
its __init__ (no __post_init__, no InitVar, every field set by __init__). decide.with_deferred_terms,
whose controller terms are worked out on their first read, equals the copy given them at once."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specwatch.engines.advice import ControllerTerms
from specwatch.verdict.decide import Assessment, Measurement, with_deferred_terms, with_fields

FLOATS = st.one_of(st.none(), st.floats(allow_nan=False))
TERMS = st.one_of(
    st.none(),
    st.builds(
        ControllerTerms,
        batch=st.floats(1.0, 512.0),
        zero_k_tax=st.floats(0.0, 0.3),
        acceptance_rate=FLOATS,
        breakeven=FLOATS,
        best_fixed_k=st.one_of(st.none(), st.integers(0, 8)),
    ),
)
ASSESSMENTS = st.builds(
    Assessment,
    candidate=st.sampled_from(("keep", "disable", "shorten", "undecided", "insufficient_data")),
    breakeven_acceptance_rate=FLOATS,
    expected_speedup=FLOATS,
    recommended_draft_length=st.one_of(st.none(), st.integers(0, 8)),
    max_speculative_batch_size=st.one_of(st.none(), st.integers(0, 1024)),
    recommended_config=st.one_of(st.none(), st.just({"num_speculative_tokens": 2})),
    action=st.one_of(st.none(), st.sampled_from(("no_change", "apply", "measure"))),
    notes=st.lists(st.text(max_size=5), max_size=2).map(tuple),
    measurement=st.one_of(st.none(), st.just(Measurement("spec_off_canary", 10.0, 4.0, "run it"))),
    controller_terms=TERMS,
)
CHANGES = st.dictionaries(
    st.sampled_from([f.name for f in dataclasses.fields(Assessment)]),
    st.one_of(st.none(), st.integers(0, 8), st.floats(allow_nan=False), TERMS),
    max_size=4,
)


@given(assessment=ASSESSMENTS, changes=CHANGES)
def test_with_fields_is_dataclasses_replace(assessment, changes):
    copied, replaced = with_fields(assessment, **changes), dataclasses.replace(assessment, **changes)
    assert type(copied) is type(replaced)
    assert copied == replaced
    assert vars(copied) == vars(replaced)
    assert copied is not assessment


def test_with_fields_refuses_a_name_that_is_no_field_as_replace_does():
    assessment = Assessment("keep")
    for change in (dataclasses.replace, with_fields):
        with pytest.raises(TypeError):
            change(assessment, verdict="keep")


def test_assessment_has_nothing_its_init_does_beyond_setting_its_fields():
    assert not hasattr(Assessment, "__post_init__")
    assert all(f.init for f in dataclasses.fields(Assessment))
    assert not any(
        isinstance(f.type, dataclasses.InitVar) or "InitVar" in str(f.type) for f in dataclasses.fields(Assessment)
    )


@given(assessment=ASSESSMENTS, terms=TERMS, changes=CHANGES)
def test_a_deferred_assessment_equals_the_eager_copy_and_works_its_terms_out_once_on_first_read(
    assessment, terms, changes
):
    calls = []

    def compute():
        calls.append(1)
        return terms

    deferred, eager = with_deferred_terms(assessment, compute), with_fields(assessment, controller_terms=terms)
    copied = with_fields(deferred, **{k: v for k, v in changes.items() if k != "controller_terms"})
    assert calls == []  # nothing worked out before a read
    assert type(deferred) is type(eager)
    assert deferred == eager
    assert calls == [1]
    assert deferred.controller_terms == terms and calls == [1]  # kept, not worked out again
    assert vars(deferred) == vars(eager)
    assert copied == dataclasses.replace(eager, **{k: v for k, v in changes.items() if k != "controller_terms"})


def test_terms_given_to_a_deferred_assessment_replace_its_function_which_then_never_runs():
    def never():
        raise AssertionError("replaced terms were worked out")

    given_terms = ControllerTerms(batch=4.0, zero_k_tax=0.1)
    copied = with_fields(with_deferred_terms(Assessment("keep"), never), controller_terms=given_terms)
    assert copied.controller_terms is given_terms
    assert vars(copied) == vars(Assessment("keep", controller_terms=given_terms))
