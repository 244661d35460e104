"""Engine priors (costmodel/engine_priors.py): the table is what the fit finds, the doc's numbers are
what the leave-one-source-out run computes, and prior_for falls back as documented."""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from specwatch.costmodel import draft, roofline
from specwatch.costmodel.engine_priors import (
    ENGINE_PRIORS,
    EXTRAPOLATION_LOG_ERROR_PER_DOUBLING,
    GENERIC,
    MOE_LOG_ERROR,
    POOLED,
    TAIL_FACTOR,
    prior_for,
)

ROOT = Path(__file__).parents[3]
FIT_SCRIPT = ROOT / "tests/fixtures/calibration/fit_engine_priors.py"
DOCS = (ROOT / "docs/costmodel-engine-priors.md", ROOT / "docs/costmodel.md")


@cache
def fit_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fit_engine_priors", FIT_SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve their module by name
    spec.loader.exec_module(mod)
    return mod


@cache
def reports() -> tuple[Any, ...]:
    fe = fit_module()
    rows, _ = fe.reduced_cases()
    return tuple(fe.report(rows))


def test_generic_is_todays_constants() -> None:
    assert GENERIC.verify_overhead_seconds == roofline.DEFAULT_VERIFY_OVERHEAD_SECONDS
    assert GENERIC.verify_seconds_per_request == roofline.DEFAULT_VERIFY_SECONDS_PER_REQUEST
    assert GENERIC.draft_fixed_seconds == draft.DEFAULT_DRAFT_FIXED_SECONDS
    assert ENGINE_PRIORS["generic"] is GENERIC
    assert tuple(fit_module().GENERIC) == (
        GENERIC.verify_overhead_seconds,
        GENERIC.verify_seconds_per_request,
        GENERIC.draft_fixed_seconds,
    )


#: The table's fitted entries: each engine family's, and the pooled one (generic is today's constants).
FITTED = [family for family in ENGINE_PRIORS if family != "generic"]


def test_the_table_has_an_entry_per_fitted_family() -> None:
    assert {*fit_module().FAMILIES, "pooled"} == set(FITTED)


@pytest.mark.parametrize("family", FITTED)
def test_table_is_what_the_fit_finds(family: str) -> None:
    fe = fit_module()
    steps = (fe.STEP_V, fe.STEP_Q, fe.STEP_P)
    rep = {rep.family: rep for rep in reports()}[family]
    prior = ENGINE_PRIORS[family]
    table = (prior.verify_overhead_seconds, prior.verify_seconds_per_request, prior.draft_fixed_seconds)
    for got, want, step in zip(table, rep.params, steps, strict=True):
        assert abs(got - want) <= step / 2 + 1e-12, (table, rep.params)
    # the entry says whether it is its own fit or the pooled one
    assert ("own fit" in prior.source) == (rep.own and family != "pooled"), prior.source


def test_fits_respect_bounds_and_decompose_exactly() -> None:
    fe = fit_module()
    rows, _ = fe.reduced_cases()
    for rep in reports():
        v, q, p = rep.params
        assert v >= 0 and q >= 0 and p >= 0
    pooled = next(r for r in reports() if r.family == "pooled")
    fe.check_decomposition(rows, *pooled.params)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_doc_table_is_the_computed_loso(doc: Path) -> None:
    """Both docs carry the table the LOSO run prints, line for line."""
    text = doc.read_text()
    for line in fit_module().markdown_table(reports()):
        assert line in text, f"{doc.name} lacks (or has a stale) line:\n{line}"


def test_every_row_has_a_fate() -> None:
    fe = fit_module()
    cases, skipped = fe.classify()
    files = (fe.V1_ROWS, fe.V2_ROWS, fe.V3_ROWS, fe.V4_ROWS, fe.V5_ROWS, fe.V6_ROWS)
    assert len(cases) + len(skipped) == sum(len(rows) for rows in files)
    assert all(s.reason for s in skipped)
    assert all(c.tau_source for c in cases)
    assert {s.fate for s in skipped} <= {"excluded", "other-metric"}


@pytest.mark.parametrize(
    ("engine", "version", "family"),
    [
        ("vllm", "0.10.1", "vllm-v1"),
        ("vLLM", "v0.8.0", "vllm-v1"),
        ("vllm", "0.7.3", "vllm-v0"),
        ("vllm", "v0.6", "vllm-v0"),
        ("vllm", None, "vllm-v1"),
        ("vllm", "main", "vllm-v1"),
        ("vllm-v0", None, "vllm-v0"),
        ("vllm-v1", "0.5", "vllm-v1"),  # an explicit family wins over the version
        ("SGLang", "0.4.4", "sglang"),
        ("TensorRT-LLM", None, "trtllm"),
        ("trt-llm", "1.0", "trtllm"),
        ("llama.cpp", "b4000", "llamacpp"),
        (" ik_llama.cpp ", None, "llamacpp"),
        ("pooled", None, "pooled"),
        ("generic", None, "generic"),
        ("mystery-engine", "1.0", "generic"),
        ("", None, "generic"),
        (None, None, "generic"),
        (None, "0.10.1", "generic"),
    ],
)
def test_prior_for(engine: str | None, version: str | None, family: str) -> None:
    assert prior_for(engine, version) is ENGINE_PRIORS[family]


@pytest.mark.parametrize("family", ["vllm-v0", "trtllm", "llamacpp"])
def test_fallback_families_carry_the_pooled_values(family: str) -> None:
    prior = ENGINE_PRIORS[family]
    assert "pooled" in prior.source
    assert (prior.verify_overhead_seconds, prior.verify_seconds_per_request, prior.draft_fixed_seconds) == (
        POOLED.verify_overhead_seconds,
        POOLED.verify_seconds_per_request,
        POOLED.draft_fixed_seconds,
    )


@pytest.mark.parametrize("family", list(ENGINE_PRIORS))
def test_each_entry_is_keyed_by_its_engine(family: str) -> None:
    assert ENGINE_PRIORS[family].engine == family


@cache
def error_model() -> Any:
    fe = fit_module()
    rows, _ = fe.reduced_cases()
    return fe.error_model(fe.all_residuals(rows))


@pytest.mark.parametrize("family", list(ENGINE_PRIORS))
def test_each_priors_error_model_is_what_the_cross_validation_fits(family: str) -> None:
    """The error a prior's speedups carry (engine_priors.log_error_at) is what the cross-validated
    residuals give: own fits their dense in-range RMS and batch range; pooled priors their LOSO
    RMS; generic its RMS on vLLM V1's rows."""
    fe = fit_module()
    rows, _ = fe.reduced_cases()
    by_family = {rep.family: rep for rep in reports()}
    prior = ENGINE_PRIORS[family]
    if family in fe.OWN_FIT_FAMILIES:
        assert prior.log_error == error_model().family_log_error[family]
        assert prior.batch_range == fe.batch_range([r for r in rows if r.case.engine == family])
    elif family == "generic":
        assert prior.log_error == pytest.approx(by_family["vllm-v1"].generic.rms, abs=5e-4)
    else:
        assert prior.log_error == pytest.approx(by_family["pooled"].loso.rms, abs=5e-4)
        assert prior.batch_range is None


def test_the_moe_per_doubling_and_tail_terms_are_what_the_cross_validation_fits() -> None:
    model = error_model()
    assert (model.moe_log_error, model.per_doubling, model.tail) == (
        MOE_LOG_ERROR,
        EXTRAPOLATION_LOG_ERROR_PER_DOUBLING,
        TAIL_FACTOR,
    )


@pytest.mark.parametrize("doc", DOCS[:1], ids=lambda p: p.name)
def test_doc_carries_the_validation_table(doc: Path) -> None:
    text = doc.read_text()
    fe = fit_module()
    rows, _ = fe.reduced_cases()
    for line in fe.error_table(rows):
        assert line in text, f"{doc.name} lacks (or has a stale) line:\n{line}"


def test_no_held_out_calibration_row_gets_a_wrong_side_call() -> None:
    """Every row, predicted by a fit that did not see it, with the error model's 90 % interval:
    never keep where the measured speedup is below 0.95, never disable where it is above 1.05."""
    fe = fit_module()
    rows, _ = fe.reduced_cases()
    residuals = fe.all_residuals(rows)
    model = fe.error_model(residuals)
    assert [r.row.case.id for r in residuals if fe.wrong_side(r, model.of(r))] == []


def test_additive_experiment_restores_the_roofline_and_its_figures_are_the_docs() -> None:
    """The additive-step experiment patches the roofline only while it runs, and the LOSO figures
    docs/costmodel.md quotes for it ("Tried, not adopted yet") are what it computes."""
    fe = fit_module()
    before = roofline.CostModel._roofline
    experiment = {rep.family: rep for rep in fe.additive_experiment()}
    assert roofline.CostModel._roofline is before
    text = DOCS[1].read_text()
    note = text[text.index("**Tried, not adopted yet: the additive step.**") :]
    note = note[: note.index("\n\n")]
    for family in ("vllm-v1", "sglang", "vllm-unknown", "pooled"):
        lo = experiment[family].loso
        assert f"{lo.rms:.3f} ({lo.sign_right}/{lo.sign_scored})" in note, family
    # the max() roofline is back: the default fit still finds the table's values
    default = {rep.family: rep for rep in reports()}
    assert experiment["vllm-v1"].loso.rms < default["vllm-v1"].loso.rms
