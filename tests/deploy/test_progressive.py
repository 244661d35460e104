"""The progressive-delivery templates (deploy/progressive/): the Argo Rollouts AnalysisTemplate and
the Flagger MetricTemplates validate against their CRDs' own schemas (tests/schemas/argoproj.io,
tests/schemas/flagger.app; closed as kubeconform -strict would, so a misspelt key fails), their
queries parse as PromQL once the tools' template variables are filled, and they read only
families specwatch exports, with the thresholds of the alerts they stand for."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import promql_parser
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PROGRESSIVE = ROOT / "deploy" / "progressive"
SCHEMAS = ROOT / "tests" / "schemas"
ARGO = PROGRESSIVE / "argo-analysistemplate.yaml"
FLAGGER = PROGRESSIVE / "flagger-metrictemplates.yaml"
FAMILIES = {"specwatch_advice_measured_gain_ratio", "specwatch_loss_probability"}


def strict(schema):
    """Every object schema with properties and no stated extra keys refuses unknown ones."""
    if isinstance(schema, dict):
        schema = {k: strict(v) for k, v in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


def validate(doc: dict, schema_file: str) -> None:
    schema = strict(json.loads((SCHEMAS / schema_file).read_text()))
    jsonschema.Draft7Validator(schema).validate(doc)


def filled(query: str) -> str:
    """The query as Argo/Flagger send it, with example values for their template variables."""
    return re.sub(
        r"\{\{\s*(args\.route|variables\.route)\s*\}\}",
        "llama",
        re.sub(r"\{\{\s*(args\.)?namespace\s*\}\}", "llm", query),
    )


def argo() -> dict:
    return yaml.safe_load(ARGO.read_text())


def flagger() -> list[dict]:
    return [d for d in yaml.safe_load_all(FLAGGER.read_text()) if d]


def test_argo_analysistemplate_validates_against_the_argo_rollouts_crd_schema():
    validate(argo(), "argoproj.io/analysistemplate_v1alpha1.json")


def test_flagger_metrictemplates_validate_against_the_flagger_crd_schema():
    docs = flagger()
    assert [d["metadata"]["name"] for d in docs] == ["specwatch-measured-gain", "specwatch-loss-probability"]
    for doc in docs:
        validate(doc, "flagger.app/metrictemplate_v1beta1.json")


def test_a_misspelt_key_fails_the_strict_schema():
    doc = argo()
    doc["spec"]["metrics"][0]["succesCondition"] = doc["spec"]["metrics"][0].pop("successCondition")
    with pytest.raises(jsonschema.ValidationError, match="succesCondition"):
        validate(doc, "argoproj.io/analysistemplate_v1alpha1.json")


def queries() -> list[str]:
    return [m["provider"]["prometheus"]["query"] for m in argo()["spec"]["metrics"]] + [
        d["spec"]["query"] for d in flagger()
    ]


@pytest.mark.parametrize("query", queries())
def test_template_queries_parse_as_promql_and_read_only_specwatch_gain_and_loss(query):
    text = filled(query)
    assert "{{" not in text, text
    promql_parser.parse(text)
    names = set(re.findall(r"\b(specwatch_[a-z_]+)\{", text))
    assert names and names <= FAMILIES, names


def test_argo_conditions_use_the_alerts_thresholds_and_leave_no_sample_inconclusive():
    metrics = {m["name"]: m for m in argo()["spec"]["metrics"]}
    gain, loss = metrics["specwatch-measured-gain"], metrics["specwatch-loss-probability"]
    assert gain["successCondition"] == "len(result) > 0 && result[0] >= 0.95"
    assert gain["failureCondition"] == "len(result) > 0 && result[0] < 0.95"
    assert loss["successCondition"] == "len(result) > 0 && result[0] < 0.8"
    assert loss["failureCondition"] == "len(result) > 0 && result[0] >= 0.8"
    alerts = (ROOT / "rules" / "specwatch-alerts.yaml").read_text()
    assert re.search(r"specwatch_advice_measured_gain_ratio[^\n]*< 0\.95", alerts)
    assert re.search(r"specwatch_loss_probability[^\n]*>= 0\.8", alerts)
