"""decide.with_fields, the evaluation's copy of an assessment with some fields changed, is
dataclasses.replace: the same value and type on any assessment and any changes, the same refusal of
a name that is no field, and Assessment keeps what makes copying its fields the same as running
its __init__ (no __post_init__, no InitVar, every field set by __init__). decide.with_deferred,
whose field (the controller terms, the largest batch that pays) is worked out on its first read,
equals the copy given it at once."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specwatch.engines.advice import ControllerTerms
from specwatch.verdict.decide import DEFERRABLE_FIELDS, Assessment, Measurement, with_deferred, with_fields

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
BATCH_LIMITS = st.one_of(st.none(), st.integers(0, 1024))
ASSESSMENTS = st.builds(
    Assessment,
    candidate=st.sampled_from(("keep", "disable", "shorten", "undecided", "insufficient_data")),
    breakeven_acceptance_rate=FLOATS,
    expected_speedup=FLOATS,
    recommended_draft_length=st.one_of(st.none(), st.integers(0, 8)),
    max_speculative_batch_size=BATCH_LIMITS,
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


def test_the_deferrable_fields_are_the_controller_terms_and_the_largest_batch_that_pays():
    assert {"controller_terms", "max_speculative_batch_size"} == DEFERRABLE_FIELDS


@given(
    assessment=ASSESSMENTS,
    field_and_value=st.one_of(
        st.tuples(st.just("controller_terms"), TERMS), st.tuples(st.just("max_speculative_batch_size"), BATCH_LIMITS)
    ),
    changes=CHANGES,
)
def test_a_deferred_assessment_equals_the_eager_copy_and_works_its_field_out_once_on_first_read(
    assessment, field_and_value, changes
):
    name, value = field_and_value
    calls = []

    def compute():
        calls.append(1)
        return value

    deferred, eager = with_deferred(assessment, name, compute), with_fields(assessment, **{name: value})
    others = {k: v for k, v in changes.items() if k != name}
    copied = with_fields(deferred, **others)
    assert calls == []  # nothing worked out before a read
    assert type(deferred) is type(eager)
    assert deferred == eager
    assert calls == [1]
    assert getattr(deferred, name) == value and calls == [1]  # kept, not worked out again
    assert vars(deferred) == vars(eager)
    assert copied == dataclasses.replace(eager, **others)


@pytest.mark.parametrize(
    ("name", "given_value"),
    [("controller_terms", ControllerTerms(batch=4.0, zero_k_tax=0.1)), ("max_speculative_batch_size", 48)],
)
def test_a_value_given_to_a_deferred_assessment_replaces_its_function_which_then_never_runs(name, given_value):
    def never():
        raise AssertionError("a replaced value was worked out")

    copied = with_fields(with_deferred(Assessment("keep"), name, never), **{name: given_value})
    assert getattr(copied, name) is given_value
    assert vars(copied) == vars(Assessment("keep", **{name: given_value}))


def test_only_a_deferrable_field_can_be_deferred():
    with pytest.raises(TypeError):
        with_deferred(Assessment("keep"), "expected_speedup", lambda: 1.0)
