"""Static checks of dashboards/specwatch.json, the Grafana dashboard the Helm chart ships.

- the committed JSON is exactly what dashboards/generate.py produces;
- it validates against the Grafana foundation-SDK JSON schemas (dashboard, and per panel the plugin's
  options / field config, and every Prometheus target);
- every query parses as PromQL once Grafana's variables are substituted, pins `window=` wherever it
  reads a derived gauge, and names only metrics the sidecar exports (the metric contract) or `rules/*.yaml`
  records;
- the issue's rows and variables are there, and the alert annotation reads the alerts of `rules/`.

The live counterpart (every query returns data from a real Prometheus scraping a real sidecar) is
tests/e2e/test_dashboard_live.py.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import sys
from pathlib import Path

import jsonschema
import promql_parser
import pytest

from specwatch.verdict.decide import VERDICTS
from support.metric_names import EXPORTED, WINDOW_DERIVED
from support.rule_files import alert_names, recorded_names, selectors

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "dashboards" / "specwatch.json"
GENERATOR = ROOT / "dashboards" / "generate.py"
# The Grafana JSON schemas, vendored with their provenance (tests/schemas/PROVENANCE.md).
SCHEMAS = ROOT / "tests" / "schemas" / "grafana"

WINDOW_SENTINEL = "__window_variable__"
# Fleet mode's own series (specwatch/export/collector.py): the query source's health and the fleet
# rows per route, on specwatch's own target (its pod's labels, not a replica's): filtered by cluster,
# and the fleet rows by route and window.
FLEET_MODE = frozenset(
    {
        "specwatch_prometheus_up",
        "specwatch_prometheus_last_success_timestamp_seconds",
        "specwatch_prometheus_query_errors_total",
        "specwatch_stale_replicas",
        "specwatch_fleet_acceptance_ratio",
        "specwatch_fleet_losing_tokens_ratio",
        "specwatch_fleet_replicas",
    }
)
FLEET_MODE_ROW = "Fleet mode: query source and fleet rows"


# ---- helpers shared with the live test ------------------------------------------------------------


def load_dashboard() -> dict:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def panels(dash: dict) -> list[dict]:
    """All non-row panels, including any inside collapsed rows."""
    out = []
    for p in dash["panels"]:
        if p["type"] == "row":
            out.extend(p.get("panels", []))
        else:
            out.append(p)
    return out


def queries(dash: dict) -> list[tuple[str, str, str]]:
    """(panel title, refId, expr) for every panel target."""
    return [(p["title"], t["refId"], t["expr"]) for p in panels(dash) for t in p.get("targets", [])]


def substitute(expr: str, values: dict[str, str], *, rate_interval: str = "1m") -> str:
    """Replace Grafana's macros and template variables the way Grafana does before it sends a query."""
    out = expr.replace("$__rate_interval", rate_interval).replace("$__interval", "15s").replace("$__range", "1h")
    for name, value in values.items():
        out = out.replace("${" + name + "}", value).replace("$" + name, value)
    leftover = re.findall(r"\$\{?\w+", out)
    assert not leftover, f"unsubstituted variables {leftover} in {expr!r}"
    return out


STATIC_VALUES = {
    "cluster": ".*",
    "namespace": "llm",
    "pod": ".*",
    "target": ".*",
    "engine": ".*",
    "model_name": ".*",
    "route": ".*",
    "window": WINDOW_SENTINEL,
}


def matchers(sel: promql_parser.VectorSelector) -> list[tuple[str, str, str]]:
    if sel.matchers is None:
        return []
    return [(m.name, str(m.op).rsplit(".", 1)[-1], m.value) for m in sel.matchers.matchers]


def _generator():
    spec = importlib.util.spec_from_file_location("specwatch_dashboard_generate", GENERATOR)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


# ---- schema ---------------------------------------------------------------------------------------


def _schema(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.jsonschema.json").read_text(encoding="utf-8"))


def _flatten(e: jsonschema.ValidationError):
    yield e
    for c in e.context or []:
        yield from _flatten(c)


def _errors(validator: jsonschema.Draft7Validator, doc) -> list[str]:
    """One line per error, including the branches of oneOf/anyOf (a panel is `Panel` or `RowPanel`)."""
    out = []
    for e in validator.iter_errors(doc):
        out.append(f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message[:300]}")
        out += [f"    {'/'.join(map(str, c.absolute_path))}: {c.message[:300]}" for c in _flatten(e) if c is not e]
    return out


def _plugin_validator(plugin: str, definition: str) -> jsonschema.Draft7Validator:
    sch = _schema(plugin)
    return jsonschema.Draft7Validator({"$ref": f"#/definitions/{definition}", "definitions": sch["definitions"]})


@pytest.fixture(scope="module")
def dash() -> dict:
    return load_dashboard()


def test_committed_json_is_exactly_what_the_generator_renders():
    rendered = _generator().render()
    assert DASHBOARD.read_text(encoding="utf-8") == rendered, "run: python dashboards/generate.py"


def test_generator_check_mode_flags_a_stale_file(tmp_path):
    gen = _generator()
    stale = tmp_path / "specwatch.json"
    stale.write_text(gen.render().replace('"Verdict"', '"Verdikt"'), encoding="utf-8")
    assert gen.main(["--check", "--out", str(stale)]) == 1
    fresh = tmp_path / "fresh.json"
    assert gen.main(["--out", str(fresh)]) == 0
    assert gen.main(["--check", "--out", str(fresh)]) == 0


def test_dashboard_validates_against_the_grafana_dashboard_schema(dash):
    v = jsonschema.Draft7Validator(_schema("dashboard"))
    assert _errors(v, dash) == []


def test_schema_check_catches_a_misspelt_panel_key(dash):
    """Guards the guard: the strict schema rejects what Grafana would silently ignore."""
    bad = copy.deepcopy(dash)
    bad["panels"][1]["titel"] = bad["panels"][1].pop("title")
    assert any("titel" in e for e in _errors(jsonschema.Draft7Validator(_schema("dashboard")), bad))


SUPPORTED = {"stat": "stat", "timeseries": "timeseries", "gauge": "gauge"}


def test_every_panel_uses_a_plugin_with_a_schema_to_check_its_options(dash):
    assert {p["type"] for p in panels(dash)} <= set(SUPPORTED)


def test_panel_options_validate_against_their_plugin_schema(dash):
    problems = []
    for p in panels(dash):
        v = _plugin_validator(SUPPORTED[p["type"]], "Options")
        problems += [f"{p['title']}: options/{e}" for e in _errors(v, p["options"])]
        if p["type"] == "timeseries":
            fv = _plugin_validator("timeseries", "FieldConfig")
            problems += [f"{p['title']}: custom/{e}" for e in _errors(fv, p["fieldConfig"]["defaults"]["custom"])]
    assert problems == []


def test_every_target_validates_against_the_prometheus_dataquery_schema(dash):
    v = jsonschema.Draft7Validator(_schema("prometheus"))
    problems = [
        f"{title}/{ref}: {e}"
        for p in panels(dash)
        for t in p["targets"]
        for title, ref in [(p["title"], t.get("refId"))]
        for e in _errors(v, t)
    ]
    assert problems == []
    assert all(
        t["datasource"] == {"type": "prometheus", "uid": "${datasource}"} for p in panels(dash) for t in p["targets"]
    )


def test_panel_ids_are_unique_and_refids_unique_per_panel(dash):
    ids = [p["id"] for p in dash["panels"]] + [q["id"] for p in dash["panels"] for q in p.get("panels", [])]
    assert len(ids) == len(set(ids))
    for p in panels(dash):
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs)), p["title"]


def test_panels_do_not_overlap_on_the_grid(dash):
    cells: dict[tuple[int, int], str] = {}
    for p in dash["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = p["title"]


def test_series_overrides_match_a_legend_of_their_panel(dash):
    """An override whose regexp matches no legend would silently style nothing."""
    for p in panels(dash):
        legends = [t["legendFormat"] for t in p["targets"]]
        for o in p["fieldConfig"]["overrides"]:
            assert o["matcher"]["id"] == "byRegexpOrNames"
            pattern = o["matcher"]["options"]["pattern"]
            assert pattern.startswith("/") and pattern.endswith("/")
            rx = re.compile(pattern[1:-1].replace("\\/", "/"))
            hits = [lg for lg in legends if rx.search(lg)]
            assert len(hits) == 1, f"{p['title']}: {pattern} matches {hits}"


# ---- content the issue asks for -----------------------------------------------------------------


def test_rows_are_the_six_the_issue_names_in_order_plus_fleet_mode(dash):
    rows = [p["title"] for p in dash["panels"] if p["type"] == "row"]
    assert rows == [
        "Verdict",
        "Acceptance",
        "Latency",
        "Load",
        "Fleet",
        "Fleet mode: query source and fleet rows",
        "Health",
    ]
    # Every row has panels under it.
    titles = [p["type"] for p in dash["panels"]]
    for i, t in enumerate(titles):
        if t == "row":
            assert i + 1 < len(titles) and titles[i + 1] != "row", dash["panels"][i]["title"]


def _row_of(dash: dict) -> dict[str, str]:
    row, out = None, {}
    for p in dash["panels"]:
        if p["type"] == "row":
            row = p["title"]
        else:
            out[p["title"]] = row
    return out


def test_variables_cluster_namespace_pod_target_engine_model_route_window_with_window_default_5m(dash):
    v = {x["name"]: x for x in dash["templating"]["list"]}
    assert list(v) == ["datasource", "cluster", "namespace", "pod", "target", "engine", "model_name", "route", "window"]
    assert v["datasource"]["type"] == "datasource" and v["datasource"]["query"] == "prometheus"
    assert v["window"]["current"]["value"] == "5m" and not v["window"]["multi"]
    # cluster is optional: All (.*) also matches series without a cluster label (one Prometheus per cluster)
    assert v["cluster"]["includeAll"] and v["cluster"]["allValue"] == ".*"
    # the replicas' namespace, not specwatch's own pod's (fleet mode runs in e.g. monitoring): never from
    # specwatch_build_info below cluster, and multi-select with All
    for name in ("namespace", "pod", "target", "engine", "model_name", "route"):
        assert "specwatch_build_info" not in v[name]["query"], name
    for name in ("cluster", "namespace", "pod", "target", "engine", "model_name", "route"):
        assert v[name]["multi"] and v[name]["includeAll"] and v[name]["allValue"] == ".*", name
    for name in ("cluster", "namespace", "pod", "target", "engine", "model_name", "route", "window"):
        q = v[name]["query"]
        m = re.fullmatch(r"label_values\((.*), (\w+)\)", q)
        assert m and m.group(2) == name, q
        for sel in selectors(substitute(m.group(1), STATIC_VALUES)):
            assert sel.name in EXPORTED, sel.name
    # the route list narrows with the model and target chosen above it
    assert 'model_name=~"$model_name"' in v["route"]["query"] and 'target=~"$target"' in v["route"]["query"]


def test_every_per_sidecar_selector_filters_cluster_and_route_series_filter_target(dash):
    for title, ref, expr in queries(dash):
        for sel in selectors(substitute(expr, STATIC_VALUES)):
            names = {n for n, _, _ in matchers(sel)}
            assert "cluster" in names, f"{title}/{ref}: {sel.name}"
            if "route" in names and ":" not in sel.name and sel.name not in FLEET_MODE:
                assert "target" in names, f"{title}/{ref}: {sel.name}"


def test_per_sidecar_legends_name_route_pod_and_target_so_standalone_mode_stays_unique(dash):
    """A standalone exporter is one pod polling many targets: a legend without the target repeats."""
    for p in panels(dash):
        for t in p.get("targets", []):
            legend = t["legendFormat"]
            if "{{route}}" in legend and ":" not in t["expr"].split("{")[0] and "specwatch_fleet_" not in t["expr"]:
                assert "{{pod}}" in legend and "{{target}}" in legend, (p["title"], legend)


def test_dashboard_ships_like_a_mixin_utc_and_not_editable_with_runbook_links(dash):
    assert dash["timezone"] == "utc" and dash["editable"] is False
    # one base for every runbook link, the chart's prometheusRule.runbookUrl default (it rewrites it)
    assert any(link["url"].endswith("docs/runbook.md#") for link in dash["links"])
    linked = {p["title"]: [link["url"] for link in p.get("links", [])] for p in panels(dash)}
    anchors = {u.split("#", 1)[1] for urls in linked.values() for u in urls}
    assert {a.lower() for a in alert_names()} <= anchors | {"specdecodeexporterdown"}, anchors


def test_annotations_mark_verdict_changes_and_vllm_restarts(dash):
    by_name = {a["name"]: a for a in dash["annotations"]["list"]}
    verdict = substitute(by_name["verdict changes"]["expr"], STATIC_VALUES)
    assert [s.name for s in selectors(verdict)] == ["specwatch_verdict", "specwatch_verdict"]
    assert "offset 1m" in verdict and "unless" in verdict
    restarts = substitute(by_name["vLLM restarts"]["expr"], STATIC_VALUES)
    assert [s.name for s in selectors(restarts)] == ["specwatch_target_restarts_total"]
    assert restarts.startswith("increase(")


def test_acceptance_panel_draws_alpha_and_breakeven_on_one_axis(dash):
    p = next(p for p in panels(dash) if p["title"].startswith("Acceptance rate α vs break-even"))
    names = {s.name for t in p["targets"] for s in selectors(substitute(t["expr"], STATIC_VALUES))}
    assert names == {"specwatch_acceptance_ratio", "specwatch_breakeven_acceptance_ratio"}
    assert p["fieldConfig"]["defaults"]["unit"] == "percentunit"
    assert _row_of(dash)[p["title"]] == "Acceptance"


def test_breakeven_stat_says_when_no_acceptance_rate_pays(dash):
    # the break-even gauge is capped at 1: only the cannot_pay flag tells "no alpha pays" from alpha* = 100 %
    p = next(p for p in panels(dash) if p["title"] == "α vs break-even α*")
    exprs = [t["expr"] for t in p["targets"]]
    flag = next(t for t in p["targets"] if "specwatch_speculation_cannot_pay" in t["expr"])
    assert flag["expr"].endswith(" + 2") and len(exprs) == 3
    assert flag["legendFormat"].startswith("no α pays? ")
    (mapping,) = p["fieldConfig"]["defaults"]["mappings"]
    assert set(mapping["options"]) == {"2", "3"}  # outside [0, 1]: never hides an α or α* value
    assert mapping["options"]["3"]["color"] == "red"


def test_recommendation_stat_shows_the_action_beside_the_config(dash):
    p = next(p for p in panels(dash) if p["title"] == "Recommended --speculative-config")
    (target,) = p["targets"]
    assert "action, config)" in target["expr"] and "{{action}} {{config}}" in target["legendFormat"]


def test_load_row_puts_batch_against_the_largest_paying_batch(dash):
    p = next(p for p in panels(dash) if p["title"].startswith("Live batch size"))
    names = {s.name for t in p["targets"] for s in selectors(substitute(t["expr"], STATIC_VALUES))}
    assert names == {"specwatch_batch_size_requests", "specwatch_max_speculative_batch_size_requests"}
    assert _row_of(dash)[p["title"]] == "Load"


def test_latency_panel_carries_the_per_step_itl_note(dash):
    p = next(p for p in panels(dash) if p["title"].startswith("ITL per step"))
    assert "per-step" in p["description"] and "one output can carry several tokens" in p["description"]
    names = {s.name for t in p["targets"] for s in selectors(substitute(t["expr"], STATIC_VALUES))}
    assert {"specwatch_itl_p50_seconds", "specwatch_itl_p99_seconds", "specwatch_baseline_itl_p99_seconds"} <= names


def test_verdict_stat_maps_every_verdict_to_a_distinct_text(dash):
    p = next(p for p in panels(dash) if p["title"] == "Verdict")
    expr = p["targets"][0]["expr"]
    encoded = dict(re.findall(r'verdict="(\w+)"\} == 1\) \* (\d+)', expr))
    assert set(encoded) == set(VERDICTS)
    mapping = p["fieldConfig"]["defaults"]["mappings"][0]["options"]
    assert set(mapping) == set(encoded.values())
    assert len({m["text"] for m in mapping.values()}) == len(VERDICTS)


def test_stat_panels_in_the_verdict_row_use_thresholds_or_mappings(dash):
    rows = _row_of(dash)
    for p in panels(dash):
        if rows[p["title"]] == "Verdict" and p["type"] == "stat" and p["options"]["colorMode"] != "none":
            d = p["fieldConfig"]["defaults"]
            assert len(d["thresholds"]["steps"]) > 1 or d["mappings"] or p["fieldConfig"]["overrides"], p["title"]


def test_alert_annotation_reads_alerts_firing_from_prometheus(dash):
    ann = [a for a in dash["annotations"]["list"] if a.get("expr") and "ALERTS" in a["expr"]]
    assert len(ann) == 1
    sels = selectors(substitute(ann[0]["expr"], STATIC_VALUES))
    assert [s.name for s in sels] == ["ALERTS"]
    assert ("alertstate", "Equal", "firing") in matchers(sels[0])


def test_alert_annotation_covers_every_alert_in_rules():
    alerts = alert_names()
    if not alerts:
        pytest.skip("rules/ has no alerting rules yet")
    ann = next(a for a in load_dashboard()["annotations"]["list"] if a.get("expr") and "ALERTS" in a["expr"])
    (sel,) = selectors(substitute(ann["expr"], STATIC_VALUES))
    pattern = next(v for n, op, v in matchers(sel) if n == "alertname")
    assert all(re.fullmatch(pattern, a) for a in alerts), (pattern, alerts)


# ---- PromQL ---------------------------------------------------------------------------------------


def test_every_query_parses_as_promql_after_substitution(dash):
    bad = []
    for title, ref, expr in queries(dash):
        try:
            promql_parser.parse(substitute(expr, STATIC_VALUES))
        except ValueError as e:
            bad.append(f"{title}/{ref}: {e}")
    assert bad == []


def test_parser_rejects_a_broken_query():
    with pytest.raises(ValueError):
        promql_parser.parse(
            substitute('sum(rate(specwatch_drafts_total{route=~"$route"}[$__rate_interval])', STATIC_VALUES)
        )


def _window_violations(expr: str) -> list[str]:
    out = []
    for sel in selectors(substitute(expr, STATIC_VALUES)):
        if sel.name in WINDOW_DERIVED and ("window", "Equal", WINDOW_SENTINEL) not in matchers(sel):
            out.append(f"{sel.name} {matchers(sel)}")
    return out


def test_every_selector_of_a_derived_gauge_pins_window_to_the_variable(dash):
    bad = [f"{title}/{ref}: {v}" for title, ref, expr in queries(dash) for v in _window_violations(expr)]
    assert bad == []
    # and the check bites on a selector without it, or with a regex instead of equality
    assert _window_violations('specwatch_acceptance_ratio{route=~"$route"}')
    assert _window_violations('specwatch_verdict{window=~"$window"}')


def test_every_selector_filters_namespace_and_pod_or_is_a_fleet_rule(dash):
    """Per-sidecar series filter on namespace and pod; the fleet rules (summed over pods) on namespace and route."""
    bad = []
    for title, ref, expr in queries(dash):
        for sel in selectors(substitute(expr, STATIC_VALUES)):
            names = {n for n, _, _ in matchers(sel)}
            if sel.name in FLEET_MODE:
                continue  # specwatch's own pod: only cluster (test_fleet_mode_row_reads_the_source_health...)
            need = {"namespace", "route"} if ":" in sel.name else {"namespace", "pod"}
            if not need <= names:
                bad.append(f"{title}/{ref}: {sel.name}")
    assert bad == []


def _bare_counters(expr: str) -> list[str]:
    """Counter/histogram series read without a range selector (plotting a raw counter is meaningless)."""
    counters = {m for m in EXPORTED if m.endswith(("_total", "_bucket", "_sum", "_count"))}
    ranged: list[str] = []

    def collect(node):
        if isinstance(node, promql_parser.MatrixSelector):
            ranged.append(node.vector_selector.name)
        return True

    promql_parser.walk(promql_parser.parse(expr), collect)
    bare = [s.name for s in selectors(expr) if s.name in counters]
    for name in ranged:
        if name in bare:
            bare.remove(name)
    return bare


def test_counters_are_only_read_through_a_range_function(dash):
    bad = [
        f"{title}/{ref}: {c}"
        for title, ref, expr in queries(dash)
        for c in _bare_counters(substitute(expr, STATIC_VALUES))
    ]
    assert bad == []
    assert _bare_counters("rate(specwatch_drafts_total[1m]) / specwatch_draft_tokens_total") == [
        "specwatch_draft_tokens_total"
    ]


def test_fleet_mode_row_reads_the_source_health_and_the_fleet_rows(dash):
    row = [p for p in panels(dash) if _row(dash, p["title"]) == FLEET_MODE_ROW]
    read = {s.name for p in row for t in p["targets"] for s in selectors(substitute(t["expr"], STATIC_VALUES))}
    assert read == FLEET_MODE, read
    for p in row:
        for t in p["targets"]:
            assert "namespace=~" not in t["expr"] and "pod=~" not in t["expr"], (p["title"], t["expr"])
            assert 'cluster=~"$cluster"' in t["expr"], (p["title"], t["expr"])


def _row(dash, title):
    row = None
    for p in dash["panels"]:
        if p["type"] == "row":
            row = p["title"]
        elif p["title"] == title:
            return row
    return None


def test_every_metric_a_query_names_is_exported_by_the_sidecar_or_recorded_by_rules(dash):
    known = EXPORTED | recorded_names() | FLEET_MODE
    unknown = sorted(
        {
            f"{title}/{ref}: {s.name}"
            for title, ref, expr in queries(dash)
            for s in selectors(substitute(expr, STATIC_VALUES))
            if s.name not in known
        }
    )
    assert unknown == []


def test_contract_check_rejects_a_metric_nobody_exports():
    known = EXPORTED | recorded_names()
    names = {s.name for s in selectors("rate(specwatch_acceptance_total[1m]) / vllm:spec_decode_num_drafts_total")}
    assert names - known == {"specwatch_acceptance_total", "vllm:spec_decode_num_drafts_total"}


def test_fleet_row_reads_recording_rules_only():
    dash = load_dashboard()
    rows = _row_of(dash)
    fleet = [p for p in panels(dash) if rows[p["title"]] == "Fleet"]
    recorded = recorded_names()
    if not recorded:
        pytest.skip("rules/ has no recording rules yet")
    assert fleet, "the Fleet row is empty"
    used = set()
    for p in fleet:
        for t in p["targets"]:
            names = {s.name for s in selectors(substitute(t["expr"], STATIC_VALUES))}
            assert names and names <= recorded, (p["title"], names - recorded)
            used |= names
    assert len(used) >= 3


# Keys the foundation SDK 11.6 model does not carry, but Grafana reads: the classic Prometheus
# annotation fields (migrated by the Prometheus plugin into a query) and a query variable's
# `definition` (the text shown in the variable editor). The Grafana JSON schema above lists them all.
SDK_UNMODELLED = {"step", "tagKeys", "textFormat", "titleFormat", "useValueForTime", "definition"}


def _key_paths(x, pre=()):
    if isinstance(x, dict):
        for k, v in x.items():
            yield pre + (k,)
            yield from _key_paths(v, pre + (k,))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _key_paths(v, pre + (i,))


def _dropped_by_sdk(doc: dict) -> set[tuple]:
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import Dashboard

    back = json.loads(JSONEncoder().encode(Dashboard.from_json(copy.deepcopy(doc))))
    return set(_key_paths(doc)) - set(_key_paths(back))


def test_grafana_sdk_round_trip_keeps_every_key_but_the_legacy_prometheus_ones(dash):
    dropped = {p for p in _dropped_by_sdk(dash) if p[-1] not in SDK_UNMODELLED}
    assert dropped == set()


def test_sdk_round_trip_reports_a_typo_in_a_dashboard_key(dash):
    bad = copy.deepcopy(dash)
    bad["refreshh"] = bad.pop("refresh")
    assert ("refreshh",) in _dropped_by_sdk(bad)
